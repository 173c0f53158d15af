"""Engines (or two versions of kvfuzz) compared: seconds to reach the spec kernel's three
block paths and to first see each finding of a target, per engine, median over seeds.

    python scripts/compare_engines.py [--target PATH] [--seeds 0 1 2] [--budget 30]
        [--engines atheris hypothesis batch] [--ops ...] [--device cpu|cuda] [--json FILE]

Two versions, the same engine (no loss of power): run the script once per version with that
version's package first on PYTHONPATH and `--label NAME --json NAME.json`, then print both:
`--from-json old.json new.json --engines old new`. On `--device cuda` the engines re-run every
case (determinism), as a campaign there does; on the CPU every tenth.

Each (engine, seed, op) runs in its own process (`--one`): the device is selected, the
campaign's worker started, then the clock starts and the engine's `fuzz_op` runs for
`--budget` seconds from a cold start (atheris: a fresh, empty libFuzzer corpus). Every engine
gets the worker a campaign starts; atheris pays on its clock for its own fuzzing process (and
a new one after each crash). A finding
counts when the engine first sees it, before confirmation (nothing is confirmed or saved here).
"Block paths" is the time of the first case by which all of `block:all_a`, `block:all_b`,
`block:mixed` have occurred (the case features of `kvfuzz/ops/swa_spec_page_table/generate.py`,
which follow the seed kernel's branch conditions). A median over seeds that did not all find it counts the missing
ones as never ("-" when that is the median); (k/n) says in how many seeds it showed. The
Hypothesis engine's budget excludes its shrinking, so its runs last longer than `--budget`
and can first see a signature later than that.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BLOCKS = {"block:all_a", "block:all_b", "block:mixed"}
SEED_TARGET = Path(__file__).resolve().parent.parent.parent / "shared" / "seed" / "metadata_kernels.py"


def one(engine: str, seed: int, op: str, budget: float, target: str, device: str = "cpu") -> dict:
    """One run in this process: {"blocks": seconds or None, "first": {signature: seconds}, ...}."""
    from kvfuzz import device as devmod
    from kvfuzz.worker import WorkerExecutor

    device = devmod.select(device)
    executor = WorkerExecutor(target, device)
    t0 = time.monotonic()
    first: dict[str, float] = {}
    reached: dict = {"blocks": None}
    seen: set[str] = set()

    def note_features(features) -> None:
        if reached["blocks"] is None:
            seen.update(f for f in features if f in BLOCKS)
            if seen == BLOCKS:
                reached["blocks"] = time.monotonic() - t0

    def on_case(stats, verdict) -> None:
        note_features(stats.features)  # the batched and atheris engines count each case's features

    def on_new(found) -> None:
        first.setdefault(found.finding.signature, time.monotonic() - t0)

    common = dict(seed=seed, budget_s=budget, max_cases=10**9, rerun_every=1 if device == "cuda" else 10,
                  on_case=on_case, on_new=on_new)
    try:
        if engine == "batch":
            from kvfuzz.engines import batch_engine

            stats, _ = batch_engine.fuzz_op(op, executor, device=device, **common)
        elif engine == "hypothesis":  # it counts no features: take them from each case it runs
            from kvfuzz.engines import hypothesis_engine
            from kvfuzz.strategies import GENERATORS

            class Watched:
                def __init__(self, inner):
                    self.inner, self.missing = inner, inner.missing

                def run(self, case, repeats=1, torch_ref=True):
                    note_features(GENERATORS[op].all_features(case))
                    return self.inner.run(case, repeats=repeats, torch_ref=torch_ref)

            stats, _ = hypothesis_engine.fuzz_op(op, Watched(executor), **common)
        else:
            from kvfuzz.engines import atheris_engine

            with tempfile.TemporaryDirectory() as corpus:
                stats, _ = atheris_engine.fuzz_op(op, executor, target=target, device=device, corpus=Path(corpus),
                                                  **common)
    finally:
        executor.close()
    return {"engine": engine, "seed": seed, "op": op, "cases": stats.cases, "seconds": round(stats.seconds, 1),
            "blocks": reached["blocks"], "first": first, "engine_figures": stats.engine}


def median_or_none(values: list[float | None], n: int) -> float | None:
    got = sorted(v for v in values if v is not None)
    full = got + [float("inf")] * (n - len(got))
    m = statistics.median(full) if full else float("inf")
    return None if m == float("inf") else m


def table(runs: list[dict], engines: list[str], seeds: list[int], min_found: int = 1) -> str:
    """Rows: the block paths, then every signature some engine saw in at least `min_found` seeds."""
    n = len(seeds)

    def cell(values: list[float | None]) -> str:
        m = median_or_none(values, n)
        found = sum(v is not None for v in values)
        return f"{m:.1f} s ({found}/{n})" if m is not None else f"- ({found}/{n})"

    rows = [("what (median over seeds; found in k of n)", *engines)]
    by = {(r["engine"], r["op"], r["seed"]): r for r in runs}
    ops = sorted({r["op"] for r in runs})
    if "swa_spec_page_table" in ops:
        rows.append(("swa_spec_page_table: all three block paths",
                     *(cell([by[(e, "swa_spec_page_table", s)]["blocks"] for s in seeds]) for e in engines)))
    for op in ops:
        sigs = sorted({sig for r in runs if r["op"] == op for sig in r["first"]})
        for sig in sigs:
            times = {e: [by[(e, op, s)]["first"].get(sig) for s in seeds] for e in engines}
            if max(sum(t is not None for t in v) for v in times.values()) >= min_found:
                rows.append((sig, *(cell(times[e]) for e in engines)))
        rows.append((f"{op}: cases, wall seconds (medians)",
                     *(f"{statistics.median(by[(e, op, s)]['cases'] for s in seeds):.0f}, "
                       f"{statistics.median(by[(e, op, s)]['seconds'] for s in seeds):.0f} s" for e in engines)))
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    lines = ["| " + " | ".join(str(c).ljust(w) for c, w in zip(r, widths)) + " |" for r in rows]
    lines.insert(1, "| " + " | ".join("-" * w for w in widths) + " |")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--target", default=str(SEED_TARGET))
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--budget", type=float, default=30.0, help="seconds per op, engine and seed")
    p.add_argument("--engines", nargs="+", default=["atheris", "hypothesis", "batch"])
    p.add_argument("--ops", nargs="+", default=["swa_spec_page_table", "decode_metadata", "num_kv_splits"])
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--label", help="name this run's column (default: the engine); one engine only")
    p.add_argument("--json", type=Path, help="also write every run's figures here")
    p.add_argument("--from-json", type=Path, nargs="+", help="print the table of runs written earlier by --json")
    p.add_argument("--min-found", type=int, default=1, metavar="K",
                   help="list a signature only if some engine saw it in K seeds or more (default 1)")
    p.add_argument("--one", nargs=3, metavar=("ENGINE", "SEED", "OP"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.label and len(args.engines) != 1 and not args.from_json:
        p.error("--label names one engine's column: give one --engines")
    if args.one:
        engine, seed, op = args.one
        print(json.dumps(one(engine, int(seed), op, args.budget, args.target, args.device)))
        return 0
    if args.from_json:
        runs = [r for f in args.from_json for r in json.loads(f.read_text())]
        engines = [e for e in args.engines if any(r["engine"] == e for r in runs)]
        print(table(runs, engines, sorted({r["seed"] for r in runs}), args.min_found))
        return 0
    runs = []
    for seed in args.seeds:
        for op in args.ops:
            for engine in args.engines:
                out = subprocess.run([sys.executable, __file__, "--one", engine, str(seed), op,
                                      "--budget", str(args.budget), "--target", args.target, "--device", args.device],
                                     capture_output=True, text=True)
                if out.returncode != 0:
                    sys.stderr.write(out.stderr[-2000:])
                    return 1
                runs.append(json.loads(out.stdout.strip().splitlines()[-1]) | {"engine": args.label or engine})
                r = runs[-1]
                print(f"{engine} seed {seed} {op}: {r['cases']} cases, blocks {r['blocks']}, "
                      f"{len(r['first'])} signatures", file=sys.stderr)
                if args.json:
                    args.json.write_text(json.dumps(runs, indent=1))
    print(table(runs, [args.label] if args.label else args.engines, args.seeds, args.min_found))
    return 0


if __name__ == "__main__":
    sys.exit(main())
