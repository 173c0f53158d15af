"""Time to the first finding of seeded one-line defects, with packed launches and without.

usage: python scripts/seeded_defect_times.py [--device cpu|cuda] [--budget S] [--pack on|off|both]
                                             [--jobs N] [--seed N] [--seed-file FILE] [--only NAME ...]
                                             [--json FILE] [--out DIR]

Each defect (`DEFECTS`) is one line of a kernel file replaced: the seed's (SGLang 0.5.14's
`metadata.py`, `--seed-file`, default $KVFUZZ_SEED_PATH or ../shared/seed/metadata_kernels.py
beside the checkout): each of its kernels, the page-size-1 and general decode kernels, the SWA
speculative page table and the split counts; and kvfuzz's builtin kernels of two ops that pack. Each mutant file is fuzzed in contract by a real
`kvfuzz fuzz` subprocess (`--budget` seconds, no minimizing, `--jobs`), once with packing at the
device's pack size (`on`: `--pack 16` on CUDA, 8 on the CPU) and once with `--no-pack` (`off`). The unmodified file is fuzzed the same
way first (per op and mode): a signature it shows (the seed's own defects) kills no mutant. The
table gives, per defect and mode, whether it was found, the seconds of fuzzing to its first new
finding (the report's `found_after_s`) and the cases by then (`found_at_case`), and the run's
cases in all. A finding is new when one of its signatures (a case can show several symptoms:
the first named depends on the device) is none of the unmodified run's. `--json` writes the rows.
Decode packs (its running `cu_seqlens_k` read back by value, its SWA cases' ids moved: packing.py);
its classes that repeat a row by stride 0 launch alone in both modes.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
KERNELS = REPO / "kvfuzz" / "kernels"

# name, op, kernel file ("seed" or a builtin kernel's module name), the function whose text holds
# the line (None: the file), the line as written, its defective form
DEFECTS = (
    ("ps1-mask-le", "decode_metadata", "seed", "_fused_metadata_kernel_ps1_no_swa",
     "mask = col_offsets < max_seq_pages", "mask = col_offsets <= max_seq_pages"),
    ("ps1-acc-seq", "decode_metadata", "seed", "_fused_metadata_kernel_ps1_no_swa",
     "acc += val", "acc += seq"),
    ("ps1-last-cu", "decode_metadata", "seed", "_fused_metadata_kernel_ps1_no_swa",
     "tl.store(cu_seqlens_k + B * cu_seqlens_k_stride_0, acc)",
     "tl.store(cu_seqlens_k + (B - 1) * cu_seqlens_k_stride_0, acc)"),
    ("ps1-row-stride", "decode_metadata", "seed", "_fused_metadata_kernel_ps1_no_swa",
     "row_offset = row_idx * req_to_token_stride_0", "row_offset = row_idx * req_to_token_stride_1"),
    # the seed's general decode kernel (page sizes > 1): a shift taken for a product, a mask one column long
    ("gen-shift-mul", "decode_metadata", "seed", "_fused_metadata_kernel_general",
     "col_idx = col_offsets << SHIFT", "col_idx = col_offsets * SHIFT"),
    ("gen-mask-le", "decode_metadata", "seed", "_fused_metadata_kernel_general",
     "mask = col_offsets < max_seq_pages", "mask = col_offsets <= max_seq_pages"),
    # the seed's SWA speculative page table: a row's a-side taken from the wrong request, a strided
    # row. (Its own defect mismatches page_table_dst in contract at once, so a seeded defect whose
    # symptom is such a mismatch too, as losing the mixed block's first b entry, is reported
    # under the native finding's signature, not as a finding of its own: it is not in the list.)
    ("spec-idx-a", "swa_spec_page_table", "seed", "_prepare_swa_spec_page_table_kernel",
     "idx_a = pid_m // REPEAT_STEP", "idx_a = pid_m"),
    ("spec-dst-stride", "swa_spec_page_table", "seed", "_prepare_swa_spec_page_table_kernel",
     "dst = dst_ptr + pid_m * dst_stride_m + offs_n * dst_stride_n", "dst = dst_ptr + pid_m * dst_stride_m + offs_n"),
    # the seed's split counts: a store mask one row long, grouped heads' block taken the wrong way
    ("nkv-store-le", "num_kv_splits", "seed", "get_num_kv_splits_triton",
     "mask_token = offs_token < num_seq * num_group", "mask_token = offs_token <= num_seq * num_group"),
    ("nkv-group-max", "num_kv_splits", "seed", "get_num_kv_splits_triton",
     "block_h = tl.minimum(block_h, num_kv_group)", "block_h = tl.maximum(block_h, num_kv_group)"),
    ("fi-skip-cell", "flashinfer_kv_indices", "flashinfer_kv_indices", None,
     "ids.to(out.dtype.element_ty), mask=mask)", "ids.to(out.dtype.element_ty), mask=mask & (j != 2))"),
    ("fi-start-late", "flashinfer_kv_indices", "flashinfer_kv_indices", None,
     "dst = base + j", "dst = base + j + (j >= 1000)"),
    ("q8-pad-zero", "q8kv8_topk_length", "q8kv8_topk_length", None,
     "inb = idx >= 0", "inb = idx > 0"),
)


def seed_file() -> Path:
    env = os.environ.get("KVFUZZ_SEED_PATH")
    return Path(env) if env else REPO.parent / "shared" / "seed" / "metadata_kernels.py"


def mutant(source: Path, function: str | None, old: str, new: str, path: Path) -> Path:
    """`path`: `source` with the first `old` inside `function` (or the file's only one) replaced; a
    builtin kernel's relative import of its argument checks made absolute (the copy lives elsewhere)."""
    text = source.read_text()
    start = text.index(f"def {function}(") if function else 0
    at = text.index(old, start)
    if function is None and text.count(old) != 1:
        raise SystemExit(f"{source}: {old!r} occurs {text.count(old)} times")
    text = text[:at] + new + text[at + len(old):]
    path.write_text(text.replace("from ._args import", "from kvfuzz.kernels._args import"))
    return path


def run(name: str, op: str, target: Path, pack: str, args: argparse.Namespace, out: Path,
        known: frozenset = frozenset()) -> dict:
    report = out / f"{name}-{pack}.json"
    cmd = [sys.executable, "-m", "kvfuzz.cli", "fuzz", "--target", str(target), "--op", op, "--device", args.device,
           "--budget", str(args.budget), "--minimize-budget", "0", "--in-contract-only", "--seed", str(args.seed),
           "--jobs", str(args.jobs), "--report", str(report), "--corpus", str(out / f"{name}-{pack}-corpus")]
    from kvfuzz.packing import DEFAULT_K

    # a campaign packs only when asked to: "on" asks for the device's pack size
    cmd += ["--no-pack"] if pack == "off" else ["--pack", str(DEFAULT_K.get(args.device, 8))]
    t0 = time.monotonic()
    with (out / f"{name}-{pack}.log").open("w") as log:
        rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT).returncode
    row = {"defect": name, "op": op, "pack": pack, "exit": rc, "wall_s": round(time.monotonic() - t0, 1)}
    doc = json.loads(report.read_text()) if report.is_file() else None
    if doc is None:
        row["error"] = (out / f"{name}-{pack}.log").read_text()[-500:]
        return row
    row.update(score(doc, known))
    return row


def signatures_of(finding: dict) -> list[str]:
    """Every signature a finding stands for: its case can show several symptoms (a mismatch and
    a stray write), and which is named first depends on the device's answers."""
    return finding.get("signatures") or [finding["signature"]]


def score(doc: dict, known: frozenset) -> dict:
    """A run's row from its report: the first finding with a signature the unmodified file's run
    (`known`, all its findings' signatures) never showed, the run's signatures and cases."""
    findings = doc.get("findings", [])
    new = [(f, [s for s in signatures_of(f) if s not in known]) for f in findings if f.get("found_after_s") is not None]
    new = [(f, s) for f, s in new if s]
    first = min(new, key=lambda x: x[0]["found_after_s"], default=None)
    return {"signatures": sorted({s for f in findings for s in signatures_of(f)}), "found": first is not None,
            "cases": sum(s.get("cases", 0) for s in doc.get("ops", {}).values()),
            "first_s": None if first is None else first[0]["found_after_s"],
            "first_case": None if first is None else first[0].get("found_at_case"),
            "signature": None if first is None else first[1][0]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--budget", type=float, default=10.0)
    ap.add_argument("--pack", choices=("on", "off", "both"), default="both")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--seed-file", type=Path, default=None)
    ap.add_argument("--only", nargs="*", default=None, help="defect names (default: all)")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--out", type=Path, default=Path("runs/seeded-defect-times"))
    args = ap.parse_args()
    source = args.seed_file or seed_file()
    if not source.is_file():
        print(f"seeded_defect_times: no seed file at {source} (--seed-file)", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    modes = ("on", "off") if args.pack == "both" else (args.pack,)
    rows, known = [], {}
    for name, op, where, function, old, new in DEFECTS:
        if args.only and name not in args.only:
            continue
        src = source if where == "seed" else KERNELS / f"{where}.py"
        path = mutant(src, function, old, new, args.out / f"{name}.py")
        for pack in modes:
            if (where, op, pack) not in known:  # what the unmodified file shows kills no mutant
                plain_file = mutant(src, function, old, old, args.out / f"unmodified-{where}.py")
                plain = run(f"unmodified-{where}-{op}", op, plain_file, pack, args, args.out)
                known[(where, op, pack)] = frozenset(plain.get("signatures", ()))
            row = run(name, op, path, pack, args, args.out, known[(where, op, pack)])
            rows.append(row)
            first = "-" if not row.get("found") else f"{row['first_s']:.1f} s, case {row['first_case']}"
            print(f"{name:<16}{op:<24}pack {pack:<4}{'found' if row.get('found') else 'missed':<8}{first:<22}"
                  f"{row.get('cases', '?')} cases  {row.get('signature') or row.get('error', '')}", flush=True)
            if args.json:  # after each row: a run cut short keeps the rows it finished
                args.json.write_text(json.dumps({"device": args.device, "budget_s": args.budget, "jobs": args.jobs,
                                                 "seed": args.seed, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
