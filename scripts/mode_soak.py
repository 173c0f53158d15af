#!/usr/bin/env python3
"""The per-mode soak: fuzz each production launch mode of a target's ops on its own.

    python scripts/mode_soak.py [--target builtin] [--op OP ...] [--modes REGEX]
        [--device cpu|cuda|auto] [--budget SECONDS] [--total SECONDS] [--seed N]
        [--parallel N] [--timeout SECONDS] [--out DIR] [--json FILE] [--markdown FILE] [--dry-run]

The pairs: every op of the target x every mode feature (release_modes.py's MODE_FEATURES, or
`--modes`) that the op's generator gives, found as `kvfuzz fuzz --feature` finds its classes
(the pool's candidate classes of `--seed`, a few in-contract cases each). Each pair runs
`kvfuzz fuzz --target T --op OP --feature MODE --device D --budget B --campaign OUT/OP__MODE`,
`--parallel` at once, each in its own process with `--time-limit` = `--timeout` and killed 30 s
past it if it has not ended (release_modes.execute). A campaign directory continues where the
last invocation stopped, and `--budget` is each invocation's, so a soak longer than one command
may last is the same command run again: each invocation writes its own report into the pair's
directory, and the table sums them all (cases, findings by signature, fuzzing seconds). With
`--total`, a pair whose reports already hold that many fuzzing seconds is not run again, and
the others get at most what they lack.

The table: op | mode | cases | findings in contract | out of contract | fuzzing s | wall s.
Exit 0 when every pair ran cases and a builtin target has no finding, 1 otherwise, 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
# release_modes takes the runs' environment before kvfuzz loads a target (which sets
# TRITON_INTERPRET=1 in this process), and puts this checkout's kvfuzz first
from release_modes import BUILTIN, KILL_GRACE_S, MODE_FEATURES, Run, execute  # noqa: E402

from kvfuzz.errors import BadInput, TargetLoadError  # noqa: E402

IN_CONTRACT = "in_contract"


@dataclass
class Pair:
    op: str
    mode: str
    dir: Path
    classes: int = 0  # candidate classes whose sampled cases have the mode
    run: Run | None = None  # this invocation's run, if any
    reports: list[dict] = field(default_factory=list)  # every invocation's report, oldest first

    @property
    def name(self) -> str:
        return f"{self.op}/{self.mode}"


def dir_name(op: str, mode: str) -> str:
    return f"{op}__{re.sub(r'[^A-Za-z0-9_.:=-]', '_', mode)}"


def pairs_of(target: str, ops: list[str] | None, modes: re.Pattern, seed: int, out: Path) -> list[Pair]:
    """Every op of `target` x every mode its generator gives (with the variant the target's
    campaign judges the op by: a later release's arguments only where it takes them)."""
    from kvfuzz.check import variant_for
    from kvfuzz.strategies import GENERATORS
    from kvfuzz.strategies.feature_filter import reachable
    from kvfuzz.targets import load_target

    t = load_target(target, "cpu")
    have = sorted(t.entries)
    if ops:
        lacking = [o for o in ops if o not in have]
        if lacking:
            raise BadInput(f"--op: target {target} has no {', '.join(lacking)}")
    out_pairs = []
    for op in (o for o in have if not ops or o in ops):
        gen = GENERATORS[op]
        found = reachable(gen, gen.class_for(variant_for(op, None, t)), seed, modes)
        out_pairs += [Pair(op, mode, out / dir_name(op, mode), n) for mode, n in found.items()]
    return out_pairs


def reports_of(pair: Pair) -> list[dict]:
    """The pair's invocations' reports, in the order they ran."""
    out = []
    for p in sorted(pair.dir.glob("report-*.json"), key=lambda p: int(p.stem.split("-")[1])):
        try:
            out.append(json.loads(p.read_text()))
        except (OSError, ValueError):
            continue  # a report cut off mid-write: that invocation counts nothing
    return out


def fuzz_seconds(pair: Pair) -> float:
    return sum(r.get("ops", {}).get(pair.op, {}).get("seconds", 0.0) for r in pair.reports)


def plan_run(pair: Pair, target: str, budget: float, args: argparse.Namespace) -> Run:
    n = len(list(pair.dir.glob("report-*.json"))) + 1
    report = pair.dir / f"report-{n}.json"
    run = Run(target, pair.op, report, pair.dir / "corpus", report.with_suffix(".log"))
    run.command = ["kvfuzz", "fuzz", "--target", target, "--op", pair.op, "--feature", re.escape(pair.mode),
                   "--device", args.device, "--budget", f"{budget:g}", "--seed", str(args.seed),
                   "--campaign", str(pair.dir), "--report", str(report), "--minimize-budget", "0",
                   "--time-limit", f"{args.timeout:g}"]
    return run


def row_of(pair: Pair) -> dict:
    """The pair's row: every invocation's cases and seconds summed, findings once per signature."""
    ops = [r.get("ops", {}).get(pair.op, {}) for r in pair.reports]
    findings: dict[str, str] = {}
    for r in pair.reports:
        for f in r.get("findings", []):
            if f.get("op") == pair.op:
                findings.setdefault(f.get("signature"), f.get("contract_status") or "")
    ff = [o.get("feature_filter") or {} for o in ops]
    run = pair.run
    return {"op": pair.op, "mode": pair.mode, "dir": str(pair.dir), "invocations": len(pair.reports),
            "cases": sum(o.get("cases", 0) for o in ops),
            "in_contract": sum(s == IN_CONTRACT for s in findings.values()),
            "out_of_contract": sum(s != IN_CONTRACT for s in findings.values()),
            "signatures": sorted(findings),
            "fuzz_s": round(sum(o.get("seconds", 0.0) for o in ops), 1),
            "wall_s": round(sum(r.get("seconds", 0.0) for r in pair.reports), 1),
            "drawn": sum(f.get("drawn", 0) for f in ff), "dropped": sum(f.get("dropped", 0) for f in ff),
            "status": [o.get("status") for o in ops],
            "this_run": None if run is None else {"rc": run.rc, "killed": run.killed, "seconds": run.seconds,
                                                   "report": str(run.report), "reported": run.report.is_file()}}


def markdown(rows: list[dict], command: str, target: str, device: str) -> str:
    out = [f"`{command}`", "", f"Target {target}, device {device}. Findings are saved signatures, each counted "
           "once over the invocations; cases and seconds are every invocation's summed.", "",
           "| op | mode | cases | findings in contract | out of contract | fuzzing s | wall s |",
           "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        out.append(f"| `{r['op']}` | `{r['mode']}` | {r['cases']:,} | {r['in_contract']} | {r['out_of_contract']} | "
                   f"{r['fuzz_s']:g} | {r['wall_s']:g} |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", default=BUILTIN, help="builtin | sglang==X.Y.Z | PATH.py | ... (default builtin)")
    ap.add_argument("--op", action="append", help="only this op (repeatable; default: every op the target has)")
    ap.add_argument("--modes", default=MODE_FEATURES,
                    help="regex of the mode features (default: release_modes.py's MODE_FEATURES)")
    ap.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    ap.add_argument("--budget", type=float, default=60.0, help="fuzzing seconds of each pair in this invocation")
    ap.add_argument("--total", type=float, metavar="SECONDS",
                    help="fuzzing seconds each pair needs over all invocations: one holding them is not run "
                    "again, the others get at most what they lack")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--parallel", type=int, default=1, metavar="N", help="runs at once (default 1)")
    ap.add_argument("--timeout", type=float, metavar="SECONDS",
                    help=f"wall clock per run, its --time-limit; killed {KILL_GRACE_S} s past it "
                    "(default: 2 x budget + 60)")
    ap.add_argument("--out", type=Path, default=Path("runs/mode-soak"),
                    help="one campaign directory per pair (default runs/mode-soak)")
    ap.add_argument("--json", type=Path, metavar="FILE")
    ap.add_argument("--markdown", type=Path, metavar="FILE")
    ap.add_argument("--dry-run", action="store_true", help="print the pairs and their commands, run nothing")
    args = ap.parse_args(argv)
    args.timeout = args.timeout if args.timeout is not None else 2 * args.budget + 60
    try:
        if args.budget <= 0 or args.parallel < 1 or args.timeout <= 0 or (args.total is not None and args.total <= 0):
            raise BadInput("--budget, --total and --timeout must be > 0, --parallel >= 1")
        try:
            modes = re.compile(args.modes)
        except re.error as exc:
            raise BadInput(f"--modes is not a regular expression: {exc}") from None
        pairs = pairs_of(args.target, args.op, modes, args.seed, args.out)
        if not pairs:
            raise BadInput(f"no op of {args.target} gives a mode matching {args.modes!r}")
    except (BadInput, TargetLoadError) as exc:
        print(f"mode_soak: error: {exc}", file=sys.stderr)
        return 2
    command = shlex.join(["python", "scripts/mode_soak.py", *(argv if argv is not None else sys.argv[1:])])
    todo = []
    for pair in pairs:
        pair.reports = reports_of(pair)
        budget = args.budget
        if args.total is not None:
            budget = min(budget, args.total - fuzz_seconds(pair))
        if budget >= 1:  # a second of fuzzing is the least a run is started for
            pair.run = plan_run(pair, args.target, budget, args)
            todo.append(pair)
    print(f"{len(pairs)} pairs (op x mode), {len(todo)} to run, {args.parallel} at once, budget {args.budget:g} s, "
          f"timeout {args.timeout:g} s" + (f", total {args.total:g} s" if args.total else ""), flush=True)
    if args.dry_run:
        for pair in pairs:
            cmd = " ".join(pair.run.command) if pair.run else f"(done: {fuzz_seconds(pair):g} s)"
            print(f"{pair.op}\t{pair.mode}\t{pair.classes} classes\t{cmd}")
        return 0
    with ThreadPoolExecutor(args.parallel) as pool:
        for run in pool.map(lambda p: execute(p.run, args.timeout), todo):
            print(f"{run.op}/{run.command[run.command.index('--feature') + 1]}: exit {run.rc}"
                  f"{' (killed)' if run.killed else ''}, {run.seconds} s", flush=True)
    rows = []
    for pair in pairs:
        pair.reports = reports_of(pair)
        rows.append(row_of(pair))
    for r in rows:
        print(f"{r['op']:<30} {r['mode']:<24} cases {r['cases']:>9,}  in contract {r['in_contract']}  "
              f"out of contract {r['out_of_contract']}  fuzzing {r['fuzz_s']:>7g} s  wall {r['wall_s']:>7g} s")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"command": command, "target": args.target, "device": args.device,
                                         "budget": args.budget, "total": args.total, "timeout": args.timeout,
                                         "seed": args.seed, "rows": rows}, indent=1) + "\n")
    if args.markdown:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(markdown(rows, command, args.target, args.device))
    bad = 0
    for pair, r in zip(pairs, rows):
        if pair.run is not None and not pair.run.report.is_file():
            print(f"mode_soak: {pair.name}: no report (exit {pair.run.rc}"
                  f"{', killed' if pair.run.killed else ''}; log {pair.run.log})", file=sys.stderr)
            bad += 1
        elif not r["cases"]:
            print(f"mode_soak: {pair.name}: no case ran ({', '.join(map(str, r['status']))})", file=sys.stderr)
            bad += 1
        elif args.target == BUILTIN and r["signatures"]:
            print(f"mode_soak: builtin {pair.name} has findings: {', '.join(r['signatures'])}", file=sys.stderr)
            bad += 1
    short = [r for r in rows if args.total is not None and r["fuzz_s"] < args.total - 1]
    if short:
        print(f"mode_soak: {len(short)} pair(s) below --total {args.total:g} s of fuzzing: run the same command "
              "again to continue them", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
