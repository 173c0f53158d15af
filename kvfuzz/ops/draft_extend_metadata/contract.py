"""`draft_extend_set_metadata` (SGLang 0.5.16 on): the draft-extend step's lengths, both prefix
sums (keys and queries), the page tables and, with an SWA pool, the SWA write locations.

SGLang's docstring is the contract's source: cache_seqlens = int32(seq_lens); cu_seqlens_k =
pad(cumsum(cache_seqlens)); cu_seqlens_q = pad(cumsum(extend_seq_lens)); page_table[:, :pages]
= req_to_token[pool, ::page_size] // page_size with pages = cdiv(seq_len, page_size) capped at
the table's width ("row tails keep stale values"); with SWA the same through the full -> SWA
mapping, and swa_out_cache_loc = mapping[out_cache_loc].

Where SGLang leaves intent open, kvfuzz assumes:

* columns past a row's live pages may be written (SGLang leaves them stale and says attention
  never reads them; the same rule as decode's `live_prefix`), never required;
* a row with no live pages (seq_len 0: CUDA-graph padding) needs no valid pool index: SGLang's
  kernel returns before reading it;
* every tensor may have any strides, as for the other wrapper entry points (SGLang reads
  `out_cache_loc`, `swa_out_cache_loc` and the mapping without theirs: a defect kvfuzz reports);
  `swa_page_table` must have `page_table`'s shape and strides and the SWA write locations a
  positive multiple of B elements, because SGLang asserts both;
* a batch has at least one row (SGLang divides by B when it has SWA);
* page numbers are floor divisions (SGLang shifts right), as in decode.
"""

from __future__ import annotations

import numpy as np

from ...case import Case
from ...contract import Arg, Cells, Contract, Scalar, dtype_and_layout_reasons, is_power_of_two
from . import oracle

I32, I32_64 = ("int32",), ("int32", "int64")
SWA_ARGS = ("full_to_swa_index_mapping", "swa_page_table", "out_cache_loc", "swa_out_cache_loc")

ARGS = (
    Arg("cache_seqlens_int32", "out", I32, "B", doc="int32(seq_lens)"),
    Arg("cu_seqlens_k", "out", I32, "B+1", doc="0, then the running int32 sum of cache_seqlens_int32"),
    Arg("cu_seqlens_q", "out", I32, "B+1", doc="0, then the running int32 sum of extend_seq_lens"),
    Arg("page_table", "out", I32, "B,W",
        doc="c < min(cdiv(seq_lens[i], page_size), W): req_to_token[pool[i], c*page_size] // page_size"),
    Arg("req_to_token", "in", I32_64, "R,T", doc="token id of every position of every request slot"),
    Arg("req_pool_indices", "in", I32_64, "B", doc="request slot of each row, in [0, R) where the row has pages"),
    Arg("seq_lens", "in", I32_64, "B", doc="key length of each request (>= 0)"),
    Arg("extend_seq_lens", "in", I32_64, "B", doc="query tokens of each request (>= 0)"),
    Arg("full_to_swa_index_mapping", "in", I32_64, "N", optional=True, doc="full-pool token id -> SWA slot"),
    Arg("swa_page_table", "out", I32, "B,W", optional=True, doc="live columns: mapping[token] // page_size"),
    Arg("out_cache_loc", "in", I32_64, "K", optional=True, doc="full-pool write locations, K = B * tokens_per_req"),
    Arg("swa_out_cache_loc", "out", I32_64, "K", optional=True, doc="mapping[out_cache_loc]"),
)
SCALARS = (Scalar("page_size", "a power of two; anything else must be refused"),)


def uses_swa(case: Case) -> bool:
    return "full_to_swa_index_mapping" in case.tensors


def kernel_path(case: Case) -> str:
    if uses_swa(case):
        return "swa"
    return "ps1" if case.scalars.get("page_size") == 1 else "general"


def must_refuse(case: Case) -> list[str]:
    ps = case.scalars.get("page_size")
    return [] if is_power_of_two(ps) else [f"page_size {ps!r} is not a positive power of two"]


def live_pages(case: Case) -> np.ndarray:
    """Each row's live pages: min(cdiv(seq_len, page_size), W), at least 0."""
    ps, W = case.scalars["page_size"], case.tensors["page_table"].shape[1]
    lens = np.asarray(case.values["seq_lens"], dtype=np.int64)
    return np.clip(-(-lens // ps), 0, W)


def structural_reasons(case: Case) -> list[str]:
    reasons = must_refuse(case) + dtype_and_layout_reasons(CONTRACT, case)
    if reasons:
        return reasons
    t = case.tensors
    if len(t["cache_seqlens_int32"].shape) != 1 or t["cache_seqlens_int32"].shape[0] < 1:
        return [f"cache_seqlens_int32 must be 1-D with B >= 1 rows, got shape {t['cache_seqlens_int32'].shape}"]
    B = t["cache_seqlens_int32"].shape[0]
    want = {"cu_seqlens_k": (B + 1,), "cu_seqlens_q": (B + 1,), "req_pool_indices": (B,), "seq_lens": (B,),
            "extend_seq_lens": (B,)}
    for name, shape in want.items():
        if t[name].shape != shape:
            reasons.append(f"{name} has shape {t[name].shape}, expected {shape} (batch B = {B})")
    for name in ("page_table", "req_to_token"):
        if len(t[name].shape) != 2:
            reasons.append(f"{name} must be 2-D, got shape {t[name].shape}")
    if not reasons and t["page_table"].shape[0] != B:
        reasons.append(f"page_table has {t['page_table'].shape[0]} rows, batch is {B}")
    present = [n for n in SWA_ARGS if n in t]
    if present and len(present) != len(SWA_ARGS):
        reasons.append(f"{', '.join(SWA_ARGS)} come together (got {', '.join(present)})")
    elif present:
        if t["swa_page_table"].shape != t["page_table"].shape:
            reasons.append("swa_page_table must have page_table's shape (SGLang asserts it)")
        elif t["swa_page_table"].strides != t["page_table"].strides:
            reasons.append("swa_page_table must have page_table's strides (SGLang asserts it)")
        for name in ("full_to_swa_index_mapping", "out_cache_loc", "swa_out_cache_loc"):
            if len(t[name].shape) != 1:
                reasons.append(f"{name} must be 1-D, got shape {t[name].shape}")
        K = t["out_cache_loc"].shape[0] if len(t["out_cache_loc"].shape) == 1 else -1
        if t["swa_out_cache_loc"].shape != (K,):
            reasons.append("swa_out_cache_loc must have out_cache_loc's shape")
        if K < 1 or K % B:
            reasons.append(f"out_cache_loc has {K} elements: not a positive multiple of B = {B} (SGLang asserts it)")
    return reasons


def cells(case: Case) -> dict[str, Cells]:
    t = case.tensors
    out = {}
    for name in ("cache_seqlens_int32", "cu_seqlens_k", "cu_seqlens_q", "swa_out_cache_loc"):
        if name in t:
            out[name] = Cells(np.ones(t[name].shape, bool), np.zeros(t[name].shape, bool))
    rows, width = t["page_table"].shape
    live = live_pages(case)
    required = np.arange(width)[None, :] < live[:, None]
    for name in ("page_table", "swa_page_table"):
        if name in t:
            out[name] = Cells(required.copy(), ~required)
    return out


CONTRACT = Contract(
    name="draft_extend_metadata",
    entry="draft_extend_set_metadata",
    doc=__doc__,
    args=ARGS,
    scalars=SCALARS,
    variants={
        "default": "SGLang 0.5.16-0.5.23 (one signature, one kernel) and kvfuzz's builtin kernel: each row's "
        "live pages c < min(cdiv(seq_lens[i], page_size), W) required, the rest of the row may be written",
    },
    paths={
        "ps1": "page_size == 1 without SWA",
        "general": "any power-of-two page_size without SWA",
        "swa": "with the SWA mapping: SWA page table and SWA write locations too",
    },
    kernel_path=kernel_path,
    structural_reasons=structural_reasons,
    must_refuse=must_refuse,
    cells=cells,
    numpy_ref=oracle.numpy_ref,
    torch_ref=oracle.torch_ref,
    block_sizes=(256,),
)
