"""One-line regressions injected into a release's kernel file, each fuzzed with and without
`--baseline` (the release itself): which ones the baseline reports as `regression`, and which
ones the same campaign without it misses (its findings are all signatures the release shows
on its own in the same campaign).

usage: python scripts/inject_regressions.py [--release-file PATH] [--budget S] [--device cpu|cuda]
                                            [--only NAME,...] [--parallel N] [--json FILE]

Default release file: sglang==0.5.14's (kvfuzz's cache). Each campaign runs one op, in
contract, seed 1, in worker processes (`kvfuzz fuzz`, a real subprocess each; `--parallel` of them
at once). `found after` is when the regression was first seen, in seconds of fuzzing (the report's
`found_after_s`). docs/regressions.md keeps the table this prints.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

# name, op, the line as the release has it, its regressed form, which occurrence, whether the
# release already gets that output wrong in contract (its own defect masks the regression)
REGRESSIONS = (
    ("splits-threshold", "num_kv_splits", "if max_seq_len * 8 < min_seq_len * 10:",
     "if max_seq_len * 9 < min_seq_len * 10:", 1, True),
    ("spec-mixed-boundary", "swa_spec_page_table", "result = tl.where(offs_n < seq_len_a, a_val, b_val)",
     "result = tl.where(offs_n <= seq_len_a, a_val, b_val)", 1, True),
    ("decode-swa-shift", "decode_metadata", "swa_val = swa_slot >> SHIFT",
     "swa_val = (swa_slot + 1) >> SHIFT", 1, True),
    ("decode-general-total", "decode_metadata", "tl.store(cu_seqlens_k + B * cu_seqlens_k_stride_0, acc)",
     "tl.store(cu_seqlens_k + B * cu_seqlens_k_stride_0, acc + 1)", 1, False),
    ("decode-ps1-mask", "decode_metadata", "mask = col_offsets < max_seq_pages",
     "mask = col_offsets <= max_seq_pages", 2, False),
)


def inject(source: str, old: str, new: str, nth: int) -> str:
    at = -1
    for _ in range(nth):
        at = source.index(old, at + 1)
    return source[:at] + new + source[at + len(old):]


def campaign(target: str, op: str, budget: float, device: str, baseline: str | None, workdir: Path) -> dict:
    report = workdir / f"r{time.monotonic_ns()}.json"
    cmd = [sys.executable, "-m", "kvfuzz.cli", "fuzz", "--target", target, "--op", op, "--budget", str(budget),
           "--device", device, "--in-contract-only", "--seed", "1", "--minimize-budget", "10",
           "--report", str(report), "--corpus", str(workdir / f"c{time.monotonic_ns()}")]
    if baseline:
        cmd += ["--baseline", baseline]
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True)
    doc = json.loads(report.read_text()) if report.is_file() else {}
    sigs = sorted({s for f in doc.get("findings", []) for s in f.get("signatures") or [f["signature"]]})
    after = {s: f.get("found_after_s") for f in doc.get("findings", [])
             for s in f.get("signatures") or [f["signature"]]}
    return {"rc": p.returncode, "seconds": round(time.monotonic() - t0, 1), "cases": doc.get("cases"),
            "signatures": sigs, "found_after_s": after,
            "error": p.stderr.strip().splitlines()[-1:] if p.returncode == 2 else []}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--release-file", type=Path)
    ap.add_argument("--budget", type=float, default=60.0)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--only")
    ap.add_argument("--parallel", type=int, default=1, help="campaigns at once (default 1)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    if args.release_file is None:
        from kvfuzz.targets.wheels import sglang_kernel_file

        args.release_file = sglang_kernel_file("0.5.14")
    release = str(args.release_file.resolve())
    source = args.release_file.read_text()
    chosen = [r for r in REGRESSIONS if not args.only or r[0] in args.only.split(",")]
    rows = []
    with tempfile.TemporaryDirectory(prefix="kvfuzz-inject-") as tmp, ThreadPoolExecutor(max(1, args.parallel)) as pool:
        work = Path(tmp)

        def run(target: str, op: str, baseline: str | None):
            return pool.submit(campaign, target, op, args.budget, args.device, baseline, work)
        # what the release shows on its own in the same campaign, per op
        own = {op: run(release, op, None) for op in dict.fromkeys(r[1] for r in chosen)}
        runs = []
        for name, op, old, new, nth, masked in chosen:
            target = work / f"{name}.py"
            target.write_text(inject(source, old, new, nth))
            runs.append((name, op, old, new, masked, run(str(target), op, release), run(str(target), op, None)))
        for name, op, old, new, masked, with_f, without_f in runs:
            with_b, without, alone = with_f.result(), without_f.result(), own[op].result()["signatures"]
            regressions = [s for s in with_b["signatures"] if s.split(":")[2] == "regression"]
            after = min((with_b["found_after_s"][s] for s in regressions if with_b["found_after_s"].get(s) is not None),
                        default=None)
            row = {"name": name, "op": op, "masked": masked, "line": f"{old} -> {new}",
                   "with_baseline": with_b, "without": without, "regressions": regressions,
                   "found_after_s": after,
                   "missed_without": not (set(without["signatures"]) - set(alone)),
                   "release_alone": alone}
            rows.append(row)
            print(f"{name:22} {op:20} masked={masked!s:5} regression={'yes' if regressions else 'NO':3} "
                  f"(found after {after} s of fuzzing; {with_b['seconds']} s, exit {with_b['rc']})  "
                  f"without --baseline: {'missed' if row['missed_without'] else 'found'} (exit {without['rc']})",
                  flush=True)
    if args.json:
        args.json.write_text(json.dumps({"release": release, "budget_s": args.budget, "device": args.device,
                                         "rows": rows}, indent=1) + "\n")
    return 0 if all(r["regressions"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
