#!/usr/bin/env python3
"""The release x mode matrix: fuzz every op of each release (and builtin), tabulate per mode.

    python scripts/release_modes.py [--releases 0.5.14,0.5.19,0.5.20,0.5.23] [--no-builtin]
        [--op OP ...] [--device cpu|cuda|auto] [--budget SECONDS] [--seed N] [--parallel N]
        [--timeout SECONDS] [--in-contract-only] [--out DIR] [--features REGEX]
        [--json FILE] [--markdown FILE] [--dry-run]

One `kvfuzz fuzz --target sglang==X --op OP --device D --budget B` per release and op the
release has (builtin: every op), `--parallel` of them at once, each writing its JSON report and
its findings' cases (unminimized, so a case keeps the modes it was found in) under `--out`. A run
gets `--time-limit` = `--timeout` (it stops as on SIGTERM and writes its report) and is killed
30 s later if it has not ended, so a stuck run cannot hold its slot; the reports of the other
runs survive either way. The table has a row per release x op x mode feature (the production
launch modes and sizes of docs/releases.md: delta:verify, tombstone:*, size:production,
max_num_seq:*, len_a:wide, repeat:draft_tree, eager_call, mode:* of flashinfer, v2p:*, ...;
`--features` picks others) and one row `all` per release x op: cases, and findings in
contract, out of contract and stress (a finding counts for a mode when its saved case has it).
Exit 0 when every run ended with a report and builtin has no finding, 1 otherwise, 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # this checkout's kvfuzz
# the environment the runs start from, taken before kvfuzz is imported: listing a target's ops
# loads it on the CPU, which sets TRITON_INTERPRET=1 here, and a `--device cuda` run refuses it
BASE_ENV = dict(os.environ)

from kvfuzz.errors import BadInput, TargetLoadError  # noqa: E402

DEFAULT_RELEASES = "0.5.14,0.5.19,0.5.20,0.5.23"
BUILTIN = "builtin"
# the production launch modes and sizes (docs/releases.md), as the ops' features name them
MODE_FEATURES = (r"delta:verify|tombstone:.*|size:production|max_num_seq:.*|len_a:wide|repeat:draft_tree|eager_call"
                 r"|page_multiplier|read_table|mode:.*|v2p:.*|mapped:.*|swa:entry0_odd|bs:past_256|dtype:kv_indices:int64")
STATUSES = ("in_contract", "out_of_contract", "stress")
KILL_GRACE_S = 30  # past --timeout (the run's --time-limit), the run is killed


@dataclass
class Run:
    target: str
    op: str
    report: Path
    corpus: Path
    log: Path
    rc: int | None = None
    killed: bool = False
    seconds: float = 0.0
    command: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.target.removeprefix('sglang==')}/{self.op}"


def targets_of(releases: str, builtin: bool) -> list[str]:
    from kvfuzz import bisect

    out = [f"sglang=={v}" for v in bisect.parse_releases(releases)] if releases else []
    out += [BUILTIN] if builtin else []
    if not out:
        raise BadInput("no target: give --releases, or leave out --no-builtin")
    return out


def ops_of(target: str) -> list[str]:
    """The ops `target` has (a release lacks the ops it does not offer)."""
    from kvfuzz.targets import load_target

    return sorted(load_target(target, "cpu").entries)


def plan(targets: list[str], ops: list[str] | None, out: Path, args: argparse.Namespace) -> list[Run]:
    runs = []
    for t in targets:
        have = ops_of(t)
        for op in (o for o in have if not ops or o in ops):
            stem = out / t.removeprefix("sglang==") / op
            run = Run(t, op, stem.with_suffix(".json"), stem.parent / f"{op}-corpus", stem.with_suffix(".log"))
            run.command = ["kvfuzz", "fuzz", "--target", t, "--op", op, "--device", args.device,
                           "--budget", str(args.budget), "--seed", str(args.seed), "--report", str(run.report),
                           "--corpus", str(run.corpus), "--minimize-budget", "0", "--time-limit", str(args.timeout)]
            run.command += ["--in-contract-only"] if args.in_contract_only else []
            runs.append(run)
    return runs


def child_env() -> dict[str, str]:
    """The runs' environment: this script's as it started, with this checkout's kvfuzz first."""
    return dict(BASE_ENV, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), BASE_ENV.get("PYTHONPATH")])))


def execute(run: Run, timeout: float, grace: float = KILL_GRACE_S) -> Run:
    """Run one fuzz campaign in its own process group; SIGTERM at `timeout` + `grace` (it has
    stopped itself at its --time-limit by then unless stuck), SIGKILL 10 s later. A command
    not starting with `kvfuzz` runs as given."""
    run.report.parent.mkdir(parents=True, exist_ok=True)
    run.report.unlink(missing_ok=True)  # a report left by an earlier run is not this run's
    env = child_env()
    start = time.monotonic()
    with run.log.open("w") as log:
        argv = [sys.executable, "-m", "kvfuzz.cli", *run.command[1:]] if run.command[0] == "kvfuzz" else run.command
        p = subprocess.Popen(argv, stdout=log,
                             stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            run.rc = p.wait(timeout + grace)
        except subprocess.TimeoutExpired:
            run.killed = True
            for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, None)):
                try:
                    os.killpg(p.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    run.rc = p.wait(wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
    run.seconds = round(time.monotonic() - start, 1)
    return run


def _finding_features(run: Run) -> dict[str, set[str]]:
    """signature -> the features of its saved case (the case as found: runs save unminimized)."""
    from kvfuzz.corpus import iter_cases
    from kvfuzz.strategies import GENERATORS

    out: dict[str, set[str]] = {}
    if not run.corpus.is_dir():
        return out
    for _, saved in iter_cases(run.corpus):
        if isinstance(saved, Exception) or saved.finding is None or saved.case.op not in GENERATORS:
            continue
        try:
            out[saved.finding.signature] = GENERATORS[saved.case.op].all_features(saved.case)
        except Exception:  # noqa: BLE001  a case its generator cannot describe counts under `all` only
            out[saved.finding.signature] = set()
    return out


def rows_of(run: Run, features: re.Pattern) -> list[dict]:
    """The table rows of one run: `all`, then one per mode feature its cases reached."""
    base = {"target": run.target, "op": run.op}
    if not run.report.is_file():
        return [{**base, "feature": "all", "status": "no report", "rc": run.rc, "killed": run.killed,
                 "cases": 0, **{s: 0 for s in STATUSES}}]
    rep = json.loads(run.report.read_text())
    op = rep.get("ops", {}).get(run.op, {})
    found = [f for f in rep.get("findings", []) if f.get("op") == run.op]
    feats = _finding_features(run)
    status = "killed" if run.killed else op.get("status", "not run")
    row = {**base, "feature": "all", "status": status, "rc": run.rc, "killed": run.killed,
           "variant": op.get("contract_variant"), "cases": op.get("cases", 0), "by_status": op.get("by_status", {}),
           **{s: sum(f.get("contract_status") == s for f in found) for s in STATUSES}}
    rows = [row]
    for name, n in sorted(op.get("coverage", {}).items()):
        if features.fullmatch(name):
            mine = [f for f in found if name in feats.get(f.get("signature"), set())]
            rows.append({**base, "feature": name, "cases": n,
                         **{s: sum(f.get("contract_status") == s for f in mine) for s in STATUSES}})
    return rows


def markdown(rows: list[dict], command: str) -> str:
    out = [f"`{command}`", "", "Findings (saved signatures) in contract, out of contract and stress; the `all` row "
           "gives the in-contract cases in brackets.", "",
           "| target | op | mode | cases | in contract | out of contract | stress |",
           "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        mode = f"all ({r['variant']})" if r["feature"] == "all" and r.get("variant") else r["feature"]
        if r["feature"] == "all" and r.get("status") not in ("ran", None):
            mode += f", {r['status']}"
        cases = f"{r['cases']:,}" + (f" ({r['by_status'].get('in_contract', 0):,})" if r.get("by_status") else "")
        out.append(f"| {r['target'].removeprefix('sglang==')} | `{r['op']}` | {mode} | {cases} | "
                   f"{r['in_contract']} | {r['out_of_contract']} | {r['stress']} |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--releases", default=DEFAULT_RELEASES, help=f"A..B or X,Y,Z; '' for none (default {DEFAULT_RELEASES})")
    ap.add_argument("--no-builtin", action="store_true", help="leave out the builtin target")
    ap.add_argument("--op", action="append", help="only this op (repeatable; default: every op a target has)")
    ap.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    ap.add_argument("--budget", type=float, default=60.0, help="seconds of generation per run (default 60)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--parallel", type=int, default=1, metavar="N", help="runs at once (default 1)")
    ap.add_argument("--timeout", type=float, metavar="SECONDS",
                    help="wall clock per run, its --time-limit; killed 30 s past it (default: 3 x budget + 60)")
    ap.add_argument("--in-contract-only", action="store_true")
    ap.add_argument("--out", type=Path, default=Path("runs/release-modes"),
                    help="reports, logs and cases (default runs/release-modes)")
    ap.add_argument("--features", default=MODE_FEATURES, help="regex of the coverage features tabulated per mode")
    ap.add_argument("--json", type=Path, metavar="FILE")
    ap.add_argument("--markdown", type=Path, metavar="FILE")
    ap.add_argument("--dry-run", action="store_true", help="print the runs' commands, run nothing")
    args = ap.parse_args(argv)
    args.timeout = args.timeout if args.timeout is not None else 3 * args.budget + 60
    try:
        if args.budget <= 0 or args.parallel < 1 or args.timeout <= 0:
            raise BadInput("--budget and --timeout must be > 0, --parallel >= 1")
        features = re.compile(args.features)
        from kvfuzz.ops import records

        unknown = [o for o in args.op or [] if o not in records()]
        if unknown:
            raise BadInput(f"--op: no op {', '.join(unknown)} (kvfuzz ops lists them)")
        runs = plan(targets_of(args.releases, not args.no_builtin), args.op, args.out, args)
        if not runs:
            raise BadInput("no target has the ops given")
    except re.error as exc:
        print(f"release_modes: error: --features: {exc}", file=sys.stderr)
        return 2
    except (BadInput, TargetLoadError) as exc:
        print(f"release_modes: error: {exc}", file=sys.stderr)
        return 2
    command = "python scripts/release_modes.py " + " ".join(a if a else "''" for a in (argv if argv is not None else sys.argv[1:]))
    print(f"{len(runs)} runs, {args.parallel} at once, budget {args.budget:g} s, timeout {args.timeout:g} s", flush=True)
    if args.dry_run:
        print("\n".join(" ".join(r.command) for r in runs))
        return 0
    with ThreadPoolExecutor(args.parallel) as pool:
        for run in pool.map(lambda r: execute(r, args.timeout), runs):
            print(f"{run.name}: exit {run.rc}{' (killed)' if run.killed else ''}, {run.seconds} s", flush=True)
    rows = [r for run in runs for r in rows_of(run, features)]
    for r in rows:
        print(f"{r['target']:>16} {r['op']:<30} {r['feature']:<26} cases {r['cases']:>8}  "
              + "  ".join(f"{s} {r[s]}" for s in STATUSES))
    if args.json:
        args.json.write_text(json.dumps({"command": command, "device": args.device, "budget": args.budget,
                                         "timeout": args.timeout, "seed": args.seed,
                                         "runs": [{"target": r.target, "op": r.op, "rc": r.rc, "killed": r.killed,
                                                   "seconds": r.seconds, "report": str(r.report)} for r in runs],
                                         "rows": rows}, indent=1) + "\n")
    if args.markdown:
        args.markdown.write_text(markdown(rows, command))
    missing = [r for r in rows if r["feature"] == "all" and r.get("status") in ("no report", "killed")]
    dirty = [r for r in rows if r["feature"] == "all" and r["target"] == BUILTIN
             and any(r[s] for s in STATUSES)]
    for r in missing:
        print(f"release_modes: {r['target']} {r['op']}: {r['status']} (exit {r['rc']})", file=sys.stderr)
    for r in dirty:
        print(f"release_modes: builtin {r['op']} has findings", file=sys.stderr)
    return 1 if missing or dirty else 0


if __name__ == "__main__":
    sys.exit(main())
