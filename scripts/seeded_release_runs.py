"""Campaigns against SGLang release kernel files with one-line defects seeded in them, many at once:
does every run end with its report, what did each find, and did kvfuzz itself fail anywhere.

usage: python scripts/seeded_release_runs.py [--release X.Y.Z ...] [--op OP ...] [--device cpu|cuda]
                                             [--budget S] [--minimize-budget S] [--parallel N]
                                             [--plain-releases X.Y.Z ...] [--seed N] [--out DIR]

Each seeded defect is a textual replacement of one line of the release's `kv_indices.py`
(`DEFECTS`; a defect whose line the release lacks is skipped and said so). Each mutant file, and
each release named by `--plain-releases` unmodified (`sglang==X`), is fuzzed by a real `kvfuzz
fuzz` subprocess (`--parallel` at once), in contract, with `--report` and a corpus of its own under
`--out`. The table says, per run: the exit code, whether the JSON report was written, the cases,
the findings, and kvfuzz's internal errors. Exit 1 if any run ended without its report.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

# name, op, the line as the release has it, its defective form[, which occurrence: the kernels of
# kv_indices.py share some lines, the FlashInfer kernel's first]
DEFECTS = (
    ("fi-store-mask-le", "flashinfer_kv_indices", "mask = offset < kv_end - kv_start",
     "mask = offset <= kv_end - kv_start"),
    ("fi-pool-index-as-row", "flashinfer_kv_indices", "req_pool_index = tl.load(req_pool_indices_ptr + pid).to(tl.int64)",
     "req_pool_index = pid.to(tl.int64)"),
    ("fi-indptr-next", "flashinfer_kv_indices", "kv_indices_offset = tl.load(kv_indptr + pid)",
     "kv_indices_offset = tl.load(kv_indptr + pid + 1)"),
    ("fi-start-ignored", "flashinfer_kv_indices", "kv_start = tl.load(kv_start_idx + pid).to(tl.int32)",
     "kv_start = tl.load(kv_start_idx + pid).to(tl.int32) * 0", 1),
    ("mla-mask-out-le", "flashmla_kv_indices", "mask_out = paged_offset_out < num_paged",
     "mask_out = paged_offset_out <= num_paged"),
    ("mla-last-page-dropped", "flashmla_kv_indices", "num_paged = tl.cdiv(kv_end - kv_start, PAGED_SIZE)",
     "num_paged = (kv_end - kv_start) // PAGED_SIZE"),
    ("mla-row-stride-dropped", "flashmla_kv_indices",
     "kv_indices_ptr + pid * kv_indices_ptr_stride + paged_offset_out",
     "kv_indices_ptr + paged_offset_out"),
    ("chunk-start-ignored", "chunked_prefix_kv_indices", "chunk_start_pos = tl.load(chunk_start_idx_ptr + pid).to(tl.int32)",
     "chunk_start_pos = tl.load(chunk_start_idx_ptr + pid).to(tl.int32) * 0"),
)


def kv_indices_file(version: str) -> Path:
    from kvfuzz.targets.wheels import sglang_kernel_file

    return Path(sglang_kernel_file(version, "kv_indices.py"))


def mutants(versions: list[str], ops: set[str] | None, out: Path) -> tuple[list[tuple[str, str, str]], list[str]]:
    """(run name, op, target spec) for each defect each release's file has the line of; and what was skipped."""
    runs, skipped = [], []
    for version in versions:
        source = kv_indices_file(version).read_text()
        for name, op, old, new, *nth in DEFECTS:
            if ops and op not in ops:
                continue
            if source.count(old) != 1 and not nth:
                skipped.append(f"{version} {name}: the line occurs {source.count(old)} times")
                continue
            at = -1
            for _ in range(nth[0] if nth else 1):
                at = source.index(old, at + 1)
            path = out / f"{version}-{name}" / "kv_indices.py"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(source[:at] + new + source[at + len(old):])
            runs.append((f"{version}-{name}", op, str(path)))
    return runs, skipped


def fuzz(name: str, op: str, target: str, args: argparse.Namespace, out: Path) -> dict:
    report = out / f"{name}.json"
    log = out / f"{name}.log"
    cmd = [sys.executable, "-m", "kvfuzz.cli", "fuzz", "--target", target, "--op", op, "--device", args.device,
           "--budget", str(args.budget), "--minimize-budget", str(args.minimize_budget), "--in-contract-only",
           "--seed", str(args.seed), "--report", str(report), "--corpus", str(out / f"{name}-corpus")]
    t0 = time.monotonic()
    with log.open("w") as fh:
        rc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT).returncode
    wall = time.monotonic() - t0
    doc = json.loads(report.read_text()) if report.is_file() else None
    row = {"run": name, "op": op, "target": target, "exit": rc, "report": doc is not None, "wall_s": round(wall, 1)}
    if doc is not None:
        row["cases"] = sum(s.get("cases", 0) for s in doc.get("ops", {}).values())
        row["findings"] = len(doc.get("findings", []))
        row["internal_errors"] = len(doc.get("internal_errors", []))
        row["cut_short"] = bool(doc.get("cut_short"))
    else:
        row["tail"] = log.read_text()[-2000:]
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--release", action="append", default=None, help="release whose kv_indices.py gets the defects")
    ap.add_argument("--plain-releases", nargs="*", default=[], help="releases fuzzed unmodified too")
    ap.add_argument("--op", action="append", default=None)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--budget", type=float, default=20.0)
    ap.add_argument("--minimize-budget", type=float, default=10.0)
    ap.add_argument("--parallel", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", type=Path, default=Path("runs/seeded"))
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    ops = set(args.op) if args.op else None
    runs, skipped = mutants(args.release or ["0.5.23"], ops, args.out)
    for version in args.plain_releases:
        for op in sorted(ops or {"flashinfer_kv_indices", "flashmla_kv_indices"}):
            runs.append((f"{version}-{op}", op, f"sglang=={version}"))
    for s in skipped:
        print(f"skipped: {s}")
    with ThreadPoolExecutor(args.parallel) as pool:
        rows = list(pool.map(lambda r: fuzz(*r, args, args.out), runs))
    (args.out / "summary.json").write_text(json.dumps(rows, indent=1))
    print(f"{'run':40} {'exit':>4} {'report':>6} {'cases':>7} {'finds':>5} {'ierr':>4} {'wall':>6}")
    for r in rows:
        print(f"{r['run']:40} {r['exit']:>4} {str(r['report']):>6} {r.get('cases', '-'):>7} "
              f"{r.get('findings', '-'):>5} {r.get('internal_errors', '-'):>4} {r['wall_s']:>6}")
    lost = [r for r in rows if not r["report"]]
    for r in lost:
        print(f"NO REPORT: {r['run']} (exit {r['exit']}):\n{r['tail']}")
    print(f"{len(rows)} runs, {len(rows) - len(lost)} with their report, "
          f"{sum(r.get('internal_errors', 0) for r in rows)} internal errors")
    return 1 if lost else 0


if __name__ == "__main__":
    sys.exit(main())
