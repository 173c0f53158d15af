"""The per-op passes, the generic reducer on recorded choices, and both, side by side: the
minimized size and the time of each, per finding of the corpus.

    PYTHONPATH=. python3 scripts/compare_reducers.py [--corpus corpora] [--target sglang==0.5.14 ...]
        [--op OP ...] [--find-budget 60] [--budget 30] [--seed 0] [--json FILE] [--from-json FILE] [--list]

Saved cases carry no recorded choices (they were found before recording, or minimized by the
passes since), so each finding is found again: for each (op, target, contract variant) of the
corpus' external findings (strict xfail: the seed, sglang==0.5.14, and the releases), a short
batched campaign on that target (CPU interpreter, `--seed`, `--find-budget` seconds) draws
cases until it has seen each of their signatures or its budget runs out. The first case of
each signature it sees is then minimized three times, each with `--budget` seconds and the
campaign's predicate (the exact signature): "passes" (the per-op passes only: what a case
without choices gets), "choices" (the generic reducer only) and "both" (the generic reducer,
then the passes: what `minimize` does with a recorded case). Sizes are `minimize.rank`'s
first field (tensor elements) and the whole rank; "kept" lists the passes that shrank the
case in "both" after the generic reducer (reductions per pass); under the table, how many
findings each pass shrank alone and after the generic reducer. `--list` prints the groups
and exits; `--from-json` prints the table of earlier runs' JSON files (one run each).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
METHODS = ("passes", "choices", "both")


def groups(corpus: Path, targets: list[str] | None, ops: list[str] | None) -> dict[tuple, list[str]]:
    """(op, target, variant) -> the signatures of its external findings in the corpus."""
    from kvfuzz.corpus.store import iter_cases

    out: dict[tuple, list[str]] = {}
    for _, saved in iter_cases(corpus):
        if not hasattr(saved, "case") or saved.expected != "xfail" or saved.finding is None:
            continue
        if saved.device != "cpu" or not saved.target.startswith("sglang"):
            continue  # the seed and the releases; not the test fixtures' mutants, not a GPU-only finding
        if (targets and saved.target not in targets) or (ops and saved.case.op not in ops):
            continue
        sigs = out.setdefault((saved.case.op, saved.target, saved.case.variant), [])
        if saved.finding.signature not in sigs:
            sigs.append(saved.finding.signature)
    return out


def run_group(op: str, target: str, variant: str, signatures: list[str], seed: int, find_budget: float,
              budget: float) -> list[dict]:
    from kvfuzz import device as devmod
    from kvfuzz.check import Checker
    from kvfuzz.engines import batch_engine
    from kvfuzz.minimize import minimize, rank
    from kvfuzz.reduce import recorded
    from kvfuzz.worker import WorkerExecutor

    device = devmod.select("cpu")
    executor = WorkerExecutor(target, device)
    rows = []
    try:
        found: dict = {}
        t0 = time.monotonic()

        batch_engine.fuzz_op(op, executor, seed=seed, budget_s=find_budget, max_cases=10**9, device=device,
                             variant=None if variant == "default" else variant, rerun_every=10, known=found,
                             until=t0 + find_budget)
        for sig in signatures:
            row = {"op": op, "target": target, "variant": variant, "signature": sig}
            rows.append(row)
            f = found.get(sig)
            if f is None:
                row["missing"] = f"not seen in {find_budget:.0f} s (seed {seed})"
                continue
            case = f.case
            row["first"] = rank(case)[0]
            row["recorded"] = recorded(case) is not None
            for method in METHODS:
                checker = Checker(executor, case.op)
                m = minimize(case, checker.still_fails(sig), budget_s=budget, method=method, assess=checker.prepare)
                row[method] = {"elements": rank(m.case)[0], "rank": list(rank(m.case)), "seconds": round(m.seconds, 1),
                               "steps": m.steps_tried, "complete": m.complete, "accepted": m.accepted}
            print(_line(row), file=sys.stderr, flush=True)
    finally:
        executor.close()
    return rows


def _line(row: dict) -> str:
    head = f"{row['op']:<22} {row['target']:<15} {row['variant']:<12} {row['signature'].split(':', 1)[1]:<50}"
    if "missing" in row:
        return f"{head} {row['missing']}"
    cells = []
    for method in METHODS:
        r = row[method]
        cells.append(f"{r['elements']:>6} {r['seconds']:>6.1f}s{'' if r['complete'] else '*'}")
    kept = {k: v for k, v in row["both"]["accepted"].items() if k != "choices"}
    return f"{head} {row['first']:>6} " + " ".join(cells) + f"  {kept or '-'}"


def table(rows: list[dict]) -> str:
    head = (f"{'op':<22} {'target':<15} {'variant':<12} {'signature':<50} {'first':>6} "
            + " ".join(f"{m + ' (elems, s)':>15}" for m in METHODS) + "  kept passes in 'both'")
    done = [r for r in rows if "missing" not in r]
    lines = [head] + [_line(r) for r in rows]
    lines.append("(* the budget ran out before a fixpoint; elements: minimize.rank's first field)")
    if done:
        smaller = sum(r["both"]["elements"] < r["passes"]["elements"] for r in done)
        larger = sum(r["both"]["elements"] > r["passes"]["elements"] for r in done)
        lines.append(f"both vs passes: {smaller} smaller, {len(done) - smaller - larger} equal, {larger} larger "
                     f"(of {len(done)} findings minimized; {len(rows) - len(done)} not found again)")
        names = sorted({k for r in done for m in ("passes", "both") for k in r[m]["accepted"]} - {"choices"})
        for name in names:
            alone = sum(name in r["passes"]["accepted"] for r in done)
            after = sum(name in r["both"]["accepted"] for r in done)
            lines.append(f"  {name:<24} shrank {alone:>2} findings alone, {after:>2} after the generic reducer")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", type=Path, default=REPO / "corpora")
    ap.add_argument("--target", nargs="*", help="only these targets (default: every sglang target in the corpus)")
    ap.add_argument("--op", nargs="*", help="only these ops")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--find-budget", type=float, default=60.0, help="seconds of fuzzing per (op, target, variant)")
    ap.add_argument("--budget", type=float, default=30.0, help="minimizing seconds per finding and method")
    ap.add_argument("--json", type=Path, help="also write the rows as JSON")
    ap.add_argument("--list", action="store_true", help="print the groups and exit")
    ap.add_argument("--from-json", type=Path, nargs="*", help="print the table of these earlier runs and exit")
    args = ap.parse_args(argv)
    if args.from_json:
        try:
            rows = [row for path in args.from_json for row in json.loads(path.read_text())]
        except (OSError, ValueError) as exc:
            print(f"compare_reducers: cannot read {' '.join(map(str, args.from_json))}: {exc}", file=sys.stderr)
            return 2
        print(table(rows))
        return 0
    if not args.corpus.is_dir():
        print(f"compare_reducers: no corpus directory {args.corpus}", file=sys.stderr)
        return 2
    todo = groups(args.corpus, args.target, args.op)
    if args.list:
        for (op, target, variant), sigs in todo.items():
            print(op, target, variant, *sigs)
        return 0
    rows: list[dict] = []
    for (op, target, variant), sigs in todo.items():
        rows += run_group(op, target, variant, sigs, args.seed, args.find_budget, args.budget)
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
