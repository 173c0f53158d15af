"""One-line regressions injected into a release's kernel file, each fuzzed with `--baseline` (the
release itself): which ones come out a `regression`, what the release against itself shows (it
must be no class at all), and what each run's wall time is against its budget.

usage: python scripts/inject_regressions.py [--release X.Y.Z] [--release-file PATH] [--budget S]
                                            [--device cpu|cuda] [--only NAME,...] [--parallel N]
                                            [--without] [--json FILE]

`--release` picks the set of defects (`DEFECTS`: sglang 0.5.23's draft_extend_metadata and
decode_metadata, the default; 0.5.14's older set) and the kernel file (kvfuzz's cache, or
`--release-file`); the baseline is `sglang==X.Y.Z` (or that file). Each campaign runs one op, in
contract, seed 1, in worker processes (`kvfuzz fuzz`, a real subprocess each; `--parallel` of them
at once), and so does the release against itself for each op. `wall/budget` is the subprocess's
wall time (start-up, confirming and minimizing included) over `--budget`; `found after` is when the
regression was first seen, in seconds of fuzzing (the report's `found_after_s`); each run's line also
gives its wall time after start-up over the budget, its classes (each a new defect or a new symptom
of a defect the release has, docs/regressions.md), the findings left unconfirmed and the cases held
back like a known crash. `--without` also
fuzzes each copy without `--baseline` and says whether that run shows anything the release does
not show alone. Exit 1 if a defect is not a `regression` or the release against itself shows a
class. docs/regressions.md keeps the tables this prints.
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

CLASSES = ("regression", "fixed", "changed")

# release -> (name, op, the line as the release has it, its regressed form, which occurrence,
# whether the release already gets that output wrong in contract: its own defect masks it)
DEFECTS = {
    "0.5.23": (
        ("de-q-total", "draft_extend_metadata", "tl.store(cu_seqlens_q + B * cu_seqlens_q_stride_0, acc_q)",
         "tl.store(cu_seqlens_q + B * cu_seqlens_q_stride_0, acc_q + 1)", 1, False),
        ("de-swa-loc-mask", "draft_extend_metadata", "tok_mask = tok_idx < tokens_per_req",
         "tok_mask = tok_idx <= tokens_per_req", 1, False),
        ("de-seqlens", "draft_extend_metadata",
         "tl.store(cache_seqlens_int32 + idx * cache_seqlens_int32_stride_0, seq)",
         "tl.store(cache_seqlens_int32 + idx * cache_seqlens_int32_stride_0, seq + 1)", 1, False),
        ("de-last-page", "draft_extend_metadata", "num_live_pages = (seq_len + (1 << SHIFT) - 1) >> SHIFT",
         "num_live_pages = seq_len >> SHIFT", 1, False),
        ("dec-total", "decode_metadata", "tl.store(cu_seqlens_k + B * cu_seqlens_k_stride_0, acc)",
         "tl.store(cu_seqlens_k + B * cu_seqlens_k_stride_0, acc + 1)", 1, False),
        ("dec-last-page", "decode_metadata", "tl.cdiv(seq_len + SEQ_LEN_DELTA, PAGE_SIZE), max_seq_pages",
         "(seq_len + SEQ_LEN_DELTA) // PAGE_SIZE, max_seq_pages", 1, True),
        ("dec-delta", "decode_metadata", "val = (seq + SEQ_LEN_DELTA).to(tl.int32)",
         "val = (seq + SEQ_LEN_DELTA + 1).to(tl.int32)", 1, False),
    ),
    "0.5.14": (
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
    ),
}


def inject(source: str, old: str, new: str, nth: int) -> str:
    at = -1
    for _ in range(nth):
        at = source.index(old, at + 1)
    return source[:at] + new + source[at + len(old):]


def campaign(target: str, op: str, budget: float, device: str, baseline: str | None, workdir: Path) -> dict:
    stamp = time.monotonic_ns()
    report = workdir / f"r{stamp}.json"
    cmd = [sys.executable, "-m", "kvfuzz.cli", "fuzz", "--target", target, "--op", op, "--budget", str(budget),
           "--device", device, "--in-contract-only", "--seed", "1", "--minimize-budget", "10",
           "--report", str(report), "--corpus", str(workdir / f"c{stamp}")]
    if baseline:
        cmd += ["--baseline", baseline]
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.monotonic() - t0
    doc = json.loads(report.read_text()) if report.is_file() else {}
    findings = doc.get("findings", [])
    sigs = sorted({s for f in findings for s in f.get("signatures") or [f["signature"]]})
    after = {s: f.get("found_after_s") for f in findings for s in f.get("signatures") or [f["signature"]]}
    startup = doc.get("startup_s") or 0.0
    against = doc.get("against_baseline") or {}
    return {"rc": p.returncode, "seconds": round(wall, 1), "wall_over_budget": round(wall / budget, 2),
            "after_startup_over_budget": round((wall - startup) / budget, 2),
            "startup_s": doc.get("startup_s"), "cases": doc.get("cases"), "signatures": sigs,
            # each class signature with what it is against the baseline's defects (new defect, new symptom)
            "classes": {e["signature"]: e.get("defect") for k in CLASSES for e in against.get(k, ())},
            "unconfirmed": [f["signature"] for f in findings if f.get("unconfirmed")],
            "held_back": sum(k["held_back"] for s in doc.get("ops", {}).values() for k in s.get("held_back") or ()),
            "found_after_s": after, "flaky": [f["signature"] for f in doc.get("flaky", [])],
            "shared": [f["signature"] for f in doc.get("shared_with_baseline", [])],
            "error": p.stderr.strip().splitlines()[-1:] if p.returncode not in (0, 1) or not doc else []}


def classes(run: dict) -> list[str]:
    return [s for s in run["signatures"] if s.split(":")[2] in CLASSES]


def timing(r: dict) -> str:
    """A run's wall time against its budget, start-up included and after it."""
    return (f"wall/budget {r['wall_over_budget']}, after start-up {r['after_startup_over_budget']} "
            f"({r['seconds']} s, start-up {r['startup_s']} s, exit {r['rc']})")


def class_list(r: dict) -> str:
    """The run's class signatures, each as KIND:TENSOR:ON (what it is against the baseline's defects)."""
    shown = [":".join(s.split(":")[2:]) + (f" ({d})" if d else "") for s, d in sorted(r["classes"].items())]
    return "; ".join(shown) or "no class"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--release", default="0.5.23", choices=sorted(DEFECTS))
    ap.add_argument("--release-file", type=Path, help="the release's kernel file (default: kvfuzz's cache)")
    ap.add_argument("--budget", type=float, default=20.0)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--only", help="defect names, comma-separated (and `self` for the release against itself)")
    ap.add_argument("--parallel", type=int, default=1, help="campaigns at once (default 1)")
    ap.add_argument("--without", action="store_true", help="also fuzz each copy without --baseline")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    baseline = f"sglang=={args.release}"
    if args.release_file is None:
        from kvfuzz.targets.wheels import sglang_kernel_file

        args.release_file = sglang_kernel_file(args.release)
    else:
        baseline = str(args.release_file.resolve())
    release = str(args.release_file.resolve())
    source = args.release_file.read_text()
    only = set(args.only.split(",")) if args.only else None
    chosen = [d for d in DEFECTS[args.release] if only is None or d[0] in only]
    ops = list(dict.fromkeys(d[1] for d in chosen or DEFECTS[args.release]))  # the release against itself
    rows, selves = [], []
    with tempfile.TemporaryDirectory(prefix="kvfuzz-inject-") as tmp, ThreadPoolExecutor(max(1, args.parallel)) as pool:
        work = Path(tmp)

        def run(target: str, op: str, against: str | None):
            return pool.submit(campaign, target, op, args.budget, args.device, against, work)

        runs = []
        for name, op, old, new, nth, masked in chosen:
            target = work / f"{name}.py"
            target.write_text(inject(source, old, new, nth))
            runs.append((name, op, old, new, masked, run(str(target), op, baseline),
                         run(str(target), op, None) if args.without else None))
        self_runs = {op: run(release, op, baseline) for op in ops} if only is None or "self" in only else {}
        alone = {op: run(release, op, None) for op in ops} if args.without else {}
        for name, op, old, new, masked, with_f, without_f in runs:
            r = with_f.result()
            regressions = [s for s in classes(r) if s.split(":")[2] == "regression"]
            found = min((r["found_after_s"][s] for s in regressions if r["found_after_s"].get(s) is not None),
                        default=None)
            row = {"name": name, "op": op, "masked": masked, "line": f"{old} -> {new}", "run": r,
                   "regressions": regressions, "found_after_s": found}
            if without_f is not None:
                row["without"] = w = without_f.result()
                row["missed_without"] = not (set(w["signatures"]) - set(alone[op].result()["signatures"]))
            rows.append(row)
            print(f"{name:16} {op:22} {'regression' if regressions else 'NO REGRESSION':13} "
                  f"found after {found} s; {timing(r)}; {len(r['shared'])} shared, {len(r['flaky'])} flaky, "
                  f"{len(r['unconfirmed'])} unconfirmed, {r['held_back']} held back; classes: {class_list(r)}"
                  + (f"; without --baseline: {'missed' if row['missed_without'] else 'found'}" if without_f else "")
                  + (f"  {r['error'][0]}" if r["error"] else ""), flush=True)
        for op, f in self_runs.items():
            r = f.result()
            selves.append({"op": op, "run": r, "classes": classes(r)})
            print(f"{'self':16} {op:22} {('classes: ' + ', '.join(classes(r))) if classes(r) else 'no class':13} "
                  f"{timing(r)}; {len(r['shared'])} shared, {len(r['flaky'])} flaky, {r['held_back']} held back"
                  + (f"  {r['error'][0]}" if r["error"] else ""), flush=True)
    if args.json:
        args.json.write_text(json.dumps({"release": release, "baseline": baseline, "budget_s": args.budget,
                                         "device": args.device, "rows": rows, "self": selves}, indent=1) + "\n")
    return 0 if all(r["regressions"] for r in rows) and not any(s["classes"] for s in selves) else 1


if __name__ == "__main__":
    sys.exit(main())
