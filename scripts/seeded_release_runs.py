"""Campaigns against SGLang release kernel files with one-line defects seeded in them, many at once:
does every run end with its report, what did each find, and did kvfuzz itself fail anywhere.

usage: python scripts/seeded_release_runs.py [--release X.Y.Z ...] [--op OP ...] [--device cpu|cuda]
                                             [--budget S] [--minimize-budget S] [--parallel N]
                                             [--plain-releases X.Y.Z ...] [--seed N] [--out DIR]

Each seeded defect is a textual replacement of one line of one of the release's kernel files
(`DEFECTS`: `kv_indices.py`, `metadata.py`, `trtllm_mha_page_table.py`, `pa_page_table.py`,
`trtllm_mha_graph_metadata.py`, `aiter_unified_attention.py`; a defect whose line the release
lacks is skipped and said so), written under the file's own name (kvfuzz finds the entry points
by name in it), with its package siblings where it has any. Each mutant file, and
each release named by `--plain-releases` unmodified (`sglang==X`), is fuzzed by a real `kvfuzz
fuzz` subprocess (`--parallel` at once), in contract, with `--report` and a corpus of its own under
`--out`. The table says, per run: the exit code, whether the JSON report was written, the cases,
the findings, and kvfuzz's internal errors. Exit 1 if any run ended without its report.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

# name, op, the release file it patches, the line as the release has it, its defective form[, which
# occurrence: some lines occur more than once in a file (kv_indices.py's kernels share some, so
# do the two AITER kernels), the first kernel's first]. The files are named as kvfuzz's cache keeps
# them (`sglang_kernel_file`): 0.5.23's `aiter_unified_page_table.py` is `aiter_unified_attention.py`.
KV, META, TRT, PA, GRAPH, AITER = ("kv_indices.py", "metadata.py", "trtllm_mha_page_table.py", "pa_page_table.py",
                                   "trtllm_mha_graph_metadata.py", "aiter_unified_attention.py")
DEFECTS = (
    ("fi-store-mask-le", "flashinfer_kv_indices", KV, "mask = offset < kv_end - kv_start",
     "mask = offset <= kv_end - kv_start"),
    ("fi-pool-index-as-row", "flashinfer_kv_indices", KV,
     "req_pool_index = tl.load(req_pool_indices_ptr + pid).to(tl.int64)", "req_pool_index = pid.to(tl.int64)"),
    ("fi-indptr-next", "flashinfer_kv_indices", KV, "kv_indices_offset = tl.load(kv_indptr + pid)",
     "kv_indices_offset = tl.load(kv_indptr + pid + 1)"),
    ("fi-start-ignored", "flashinfer_kv_indices", KV, "kv_start = tl.load(kv_start_idx + pid).to(tl.int32)",
     "kv_start = tl.load(kv_start_idx + pid).to(tl.int32) * 0", 1),
    ("mla-mask-out-le", "flashmla_kv_indices", KV, "mask_out = paged_offset_out < num_paged",
     "mask_out = paged_offset_out <= num_paged"),
    ("mla-last-page-dropped", "flashmla_kv_indices", KV, "num_paged = tl.cdiv(kv_end - kv_start, PAGED_SIZE)",
     "num_paged = (kv_end - kv_start) // PAGED_SIZE"),
    ("mla-row-stride-dropped", "flashmla_kv_indices", KV,
     "kv_indices_ptr + pid * kv_indices_ptr_stride + paged_offset_out", "kv_indices_ptr + paged_offset_out"),
    ("chunk-start-ignored", "chunked_prefix_kv_indices", KV,
     "chunk_start_pos = tl.load(chunk_start_idx_ptr + pid).to(tl.int32)",
     "chunk_start_pos = tl.load(chunk_start_idx_ptr + pid).to(tl.int32) * 0"),
    ("decode-cu-seqlens-inclusive", "decode_metadata", META,
     "tl.store(cu_seqlens_k + idx * cu_seqlens_k_stride_0, acc)",
     "tl.store(cu_seqlens_k + idx * cu_seqlens_k_stride_0, acc + val)"),
    ("decode-every-token", "decode_metadata", META, "+ cols * PAGE_SIZE * req_to_token_stride_1,",
     "+ cols * req_to_token_stride_1,"),
    ("spec-seam-le", "swa_spec_page_table", META, "result = tl.where(offs_n < seq_len_a, a_val, b_val)",
     "result = tl.where(offs_n <= seq_len_a, a_val, b_val)"),
    ("spec-a-row-dropped", "swa_spec_page_table", META,
     "a_ptr = src_a_ptr + idx_a * a_stride_m + a_offs * a_stride_n", "a_ptr = src_a_ptr + a_offs * a_stride_n"),
    ("splits-mask-le", "num_kv_splits", META, "mask_seq = offs_seq < num_seq", "mask_seq = offs_seq <= num_seq"),
    ("splits-group-dropped", "num_kv_splits", META,
     "tl.store(num_kv_splits_ptr + i + offs_token, num_kv_splits, mask=mask_token)",
     "tl.store(num_kv_splits_ptr + offs_token, num_kv_splits, mask=mask_token)"),
    ("draft-cu-seqlens-q-inclusive", "draft_extend_metadata", META,
     "tl.store(cu_seqlens_q + idx * cu_seqlens_q_stride_0, acc_q)",
     "tl.store(cu_seqlens_q + idx * cu_seqlens_q_stride_0, acc_q + ext)"),
    ("draft-every-token", "draft_extend_metadata", META, "col_idx = col_offsets << SHIFT", "col_idx = col_offsets"),
    ("q8kv8-length-short", "q8kv8_topk_length", META, "length = tl.where(pos >= 0, pos + 1, length)",
     "length = tl.where(pos >= 0, pos, length)"),
    ("q8kv8-row-stride-dropped", "q8kv8_topk_length", META, "base = indices_ptr + row * stride_row",
     "base = indices_ptr + row"),
    ("trtllm-mask-le", "trtllm_mha_kv_indices", TRT, "mask = page_idx < num_pages", "mask = page_idx <= num_pages"),
    ("trtllm-last-page-dropped", "trtllm_mha_kv_indices", TRT, "num_pages = tl.cdiv(seq_len, PAGE_SIZE)",
     "num_pages = seq_len // PAGE_SIZE"),
    ("pa-mask-le", "pa_page_table", PA, "mask = offs < kv_len", "mask = offs <= kv_len"),
    ("pa-seam-le", "pa_page_table", PA, "pos = tl.where(offs < pf, offs, offs + gap)",
     "pos = tl.where(offs <= pf, offs, offs + gap)"),
    ("graph-mask-le", "trtllm_mha_graph_metadata", GRAPH, "mask = page_idx < num_live_pages",
     "mask = page_idx <= num_live_pages"),
    ("graph-row-stride-dropped", "trtllm_mha_graph_metadata", GRAPH,
     "row_out = page_table_ptr + pid.to(tl.int64) * page_table_stride", "row_out = page_table_ptr + pid.to(tl.int64)"),
    ("ragged-mask-le", "aiter_ragged_page_table", AITER, "mask = offsets < num_blocks",
     "mask = offsets <= num_blocks", 1),
    ("ragged-every-token", "aiter_ragged_page_table", AITER, "token_idx = offsets.to(tl.int64) * PAGE_SIZE",
     "token_idx = offsets.to(tl.int64)", 1),
    ("r2t-drafts-dropped", "aiter_req_to_token_page_table", AITER, "kv_len = seq_len + DRAFT_NUM",
     "kv_len = seq_len"),
    ("r2t-pool-index-ignored", "aiter_req_to_token_page_table", AITER,
     "req_to_token_ptr + rp * req_to_token_stride + token_idx,", "req_to_token_ptr + token_idx,"),
)


# The release's own in-contract defects that show on nearly every case of an op, repaired by a text
# patch in that op's mutants and in its unmodified run alike (each keeps every line number): with
# them in place every finding of the op carries their signature and site, and a seeded defect of
# the op cannot be told from them (docs/defects.md, "Measured"). Per op: (file, the release's text,
# its repaired form). 0.5.23's `swa_spec_page_table` kernel reads `seq_len_a`/`seq_len_b` by index,
# not stride (`:86`, `:87`): the wrapper passes contiguous copies. `draft_extend_metadata` reads
# `out_cache_loc` and `full_to_swa_index_mapping` by index (`:358`, a fault on a strided one; `:359`,
# `:404`, reads into the mapping's stride gaps): the wrapper makes both contiguous. Its write of a
# strided `swa_out_cache_loc` (`:362`) and its read past a short mapping (`:359`) stay.
# `num_kv_splits`' value defects (`:60`, `:32`) have no one-line repair and stay.
REPAIRS = {
    "swa_spec_page_table": ((META, "        seq_len_a,\n        seq_len_b,\n        page_table_dst.stride(0),",
                             "        seq_len_a.contiguous(),\n        seq_len_b.contiguous(),\n"
                             "        page_table_dst.stride(0),"),),
    "draft_extend_metadata": ((META, "assert out_cache_loc is not None and swa_out_cache_loc is not None",
                               "assert out_cache_loc is not None and swa_out_cache_loc is not None; "
                               "out_cache_loc = out_cache_loc.contiguous()"),
                              (META, "        assert swa_page_table is not None\n        assert swa_page_table.shape",
                               "        assert swa_page_table is not None; "
                               "full_to_swa_index_mapping = full_to_swa_index_mapping.contiguous()\n"
                               "        assert swa_page_table.shape")),
}


def repaired(source: str, op: str, file: str) -> str:
    """`source` of the release's `file` with `REPAIRS` of `op` applied (each text must occur once)."""
    for where, old, new in REPAIRS.get(op, ()):
        if where == file:
            if source.count(old) != 1:
                raise ValueError(f"repair of {op} in {file}: the text occurs {source.count(old)} times")
            source = source.replace(old, new)
    return source


def release_file(version: str, name: str = KV) -> Path:
    from kvfuzz.targets.wheels import sglang_kernel_file

    return Path(sglang_kernel_file(version, name))


def seeded(source: str, old: str, new: str, nth: int | None = None) -> str | None:
    """`source` with the `nth` occurrence of `old` (the only one where `nth` is None) replaced by
    `new`; None where there is no such occurrence (or, without `nth`, more than one)."""
    if (source.count(old) != 1) if nth is None else (source.count(old) < nth):
        return None
    at = -1
    for _ in range(nth or 1):
        at = source.index(old, at + 1)
    return source[:at] + new + source[at + len(old):]


def write_beside(original: Path, text: str, folder: Path) -> Path:
    """`text` as `folder`/<the original's name>, with the original's package siblings beside it
    where it has any (its relative imports then load; as `kvfuzz.mutants.run.write_mutant`)."""
    folder.mkdir(parents=True, exist_ok=True)
    if (original.parent / "__init__.py").is_file():
        for sibling in original.parent.glob("*.py"):
            shutil.copyfile(sibling, folder / sibling.name)
    path = folder / original.name
    path.write_text(text)
    return path


def mutants(versions: list[str], ops: set[str] | None, out: Path) -> tuple[list[tuple[str, str, str]], list[str]]:
    """(run name, op, target spec) for each defect each release's file has the line of; and what was skipped."""
    runs, skipped = [], []
    for version in versions:
        for name, op, file, old, new, *nth in DEFECTS:
            if ops and op not in ops:
                continue
            try:
                original = release_file(version, file)
            except Exception as exc:  # the release has no such file
                skipped.append(f"{version} {name}: {exc}")
                continue
            source = repaired(original.read_text(), op, file)
            text = seeded(source, old, new, *nth)
            if text is None:
                skipped.append(f"{version} {name}: the line occurs {source.count(old)} times in {file}")
                continue
            path = write_beside(original, text, out / f"{version}-{name}")
            runs.append((f"{version}-{name}", op, str(path)))
    return runs, skipped


def plain(version: str, ops: set[str] | None, out: Path) -> list[tuple[str, str, str]]:
    """(run name, op, target) for the unmodified release file of each op that `DEFECTS` seeds (with
    the op's `REPAIRS`: the file its mutants start from)."""
    files = {op: file for _, op, file, *_ in DEFECTS if not ops or op in ops}
    runs = []
    for op, file in files.items():
        original = release_file(version, file)
        path = write_beside(original, repaired(original.read_text(), op, file), out / f"{version}-plain-{op}")
        runs.append((f"{version}-plain-{op}", op, str(path)))
    return runs


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
    ap.add_argument("--release", action="append", default=None, help="release whose kernel files get the defects")
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
