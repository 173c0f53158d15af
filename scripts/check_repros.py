#!/usr/bin/env python3
"""Run the repro script of every saved case against the case's own target and against builtin.

For each case folder under the given corpus roots this writes the short repro (plain torch,
`kvfuzz replay --emit-repro F --short`), or the full script where a short one cannot show the
finding, and runs it, each in a process of its own:

* against the kernel file of the case's target (a file path as saved, `sglang==X` from kvfuzz's
  release cache, builtin: kvfuzz/kernels): a case expected to fail (`xfail`) must exit 1, a case
  expected to pass (a fixed defect kept as a regression case) must exit 0;
* against builtin: exit 0 (kvfuzz's own kernels pass every saved case), or 2 where the case
  carries an argument of its contract variant that builtin's entry point does not take (0.5.19's
  swa_src_table): the script refuses such a kernel file in one line, as `kvfuzz replay` refuses
  a target that would drop the case's arguments.

    python3 scripts/check_repros.py corpora [--device cuda] [--jobs 8] [--json OUT.json]

Prints one line per case and a summary; exits 1 if any script disagrees with what its case
expects, 2 on bad input.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from kvfuzz.corpus import CASE_FILE, read_case_dir
from kvfuzz.ops import record
from kvfuzz.repro import carried_variant_args, write_repro
from kvfuzz.repro_script import dropped_args
from kvfuzz.short_repro import why_not_short, write_short_repro
from kvfuzz.targets.wheels import sglang_kernel_file

ROOT = Path(__file__).resolve().parent.parent
BUILTIN = ROOT / "kvfuzz" / "kernels"


def kernel_path(target: str, case_dir: Path, op: str) -> Path:
    """The kernel file a case's target names: builtin, sglang==X (the release's file holding the
    op's entry point, from the cache), or a path."""
    if target == "builtin":
        return BUILTIN
    if target.startswith("sglang=="):
        return sglang_kernel_file(target.split("==", 1)[1], record(op).source_file)
    for base in (Path.cwd(), ROOT, case_dir):
        if (base / target).exists():
            return base / target
    raise FileNotFoundError(f"target {target!r} of {case_dir} is not a file here")


def builtin_expects(case) -> int:
    """What the script exits with on builtin: 0, or 2 (refused) where builtin's entry point
    cannot take an argument of the case's variant that the case carries."""
    rec = record(case.op)
    binding = rec.bind(rec.builtin_kernel(), where="builtin")
    return 2 if dropped_args(rec.call, carried_variant_args(case), binding) else 0


def run_script(script: Path, kernels: Path, device: str | None, timeout: float) -> int:
    cmd = [sys.executable, str(script), str(kernels)]
    if device and "--device" in script.read_text():  # the full script takes --device; the short one follows torch
        cmd += ["--device", device]
    try:
        return subprocess.run(cmd, capture_output=True, timeout=timeout).returncode
    except subprocess.TimeoutExpired:
        return 124


def check_one(case_dir: Path, device: str | None, timeout: float) -> dict:
    saved = read_case_dir(case_dir)
    expect_target = 1 if saved.expected == "xfail" else 0
    row = dict(case=str(case_dir), target=saved.target, kind=saved.finding.kind if saved.finding else None,
               expected=saved.expected)
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "repro.py"
        why = why_not_short(saved)
        if why is None:
            write_short_repro(saved, script, case_dir.name)
        else:
            write_repro(saved, script, device=device or "cpu")
        row["script"] = "short" if why is None else "full"
        row["lines"] = len(script.read_text().splitlines())
        row["target_rc"] = run_script(script, kernel_path(saved.target, case_dir, saved.case.op), device, timeout)
        row["builtin_rc"] = (row["target_rc"] if saved.target == "builtin"
                             else run_script(script, BUILTIN, device, timeout))
    row["builtin_expect"] = 0 if saved.target == "builtin" else builtin_expects(saved.case)
    row["ok"] = row["target_rc"] == expect_target and row["builtin_rc"] == row["builtin_expect"]
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("roots", nargs="+", type=Path, help="corpus folders (each case folder holds case.json)")
    ap.add_argument("--device", choices=("cpu", "cuda"), help="the full script's --device (default: its own)")
    ap.add_argument("--jobs", type=int, default=1, help="scripts run at once")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per script run")
    ap.add_argument("--json", type=Path, help="also write the rows as JSON")
    args = ap.parse_args(argv)
    cases = sorted(p.parent for root in args.roots for p in root.rglob(CASE_FILE))
    if not cases:
        print(f"check_repros: no case folders under {', '.join(map(str, args.roots))}", file=sys.stderr)
        return 2
    with concurrent.futures.ThreadPoolExecutor(max(args.jobs, 1)) as pool:
        rows = list(pool.map(lambda c: check_one(c, args.device, args.timeout), cases))
    for r in rows:
        print(f"{'ok ' if r['ok'] else 'BAD'} {r['case']}  {r['target']}  {r['kind']}  {r['script']} "
              f"({r['lines']} lines)  target exit {r['target_rc']} (expect {1 if r['expected'] == 'xfail' else 0})"
              f"  builtin exit {r['builtin_rc']} (expect {r['builtin_expect']})")
    bad = [r for r in rows if not r["ok"]]
    short = sum(r["script"] == "short" for r in rows)
    print(f"{len(rows) - len(bad)} of {len(rows)} cases as expected ({short} short scripts, "
          f"{len(rows) - short} full)")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
