"""`normal_decode_set_metadata`: per-request lengths, their prefix sums, and page tables."""

from __future__ import annotations

import numpy as np

from ..case import Case
from ..contract import Arg, Cells, Contract, Scalar, dtype_and_layout_reasons, is_power_of_two
from ..oracles import numpy_ref, torch_ref

I32, I32_64 = ("int32",), ("int32", "int64")

ARGS = (
    Arg("cache_seqlens_int32", "out", I32, "B", doc="seq_lens + seq_len_delta, as int32"),
    Arg("cu_seqlens_k", "out", I32, "B+1", doc="0, then the running int32 sum of cache_seqlens_int32"),
    Arg("page_table", "out", I32, "B,W", doc="columns c < P: req_to_token[pool[i], c*page_size] // page_size"),
    Arg("req_to_token", "in", I32_64, "R,T", doc="token id of every position of every request slot"),
    Arg("req_pool_indices", "in", I32_64, "B", doc="request slot of each batch row, in [0, R)"),
    Arg("strided_indices", "in", ("int64", "int32"), "S", doc="arange(0, T, page_size); used only by the unfused reference"),
    Arg("seq_lens", "in", I32_64, "B", doc="current length of each request"),
    Arg("swa_page_table", "out", I32, "B,W2", optional=True, doc="columns c < P: mapping[token] // page_size"),
    Arg("full_to_swa_index_mapping", "in", I32_64, "N", optional=True,
        doc="SWAKVPool.full_to_swa_index_mapping: full-pool token id -> SWA slot"),
)
SCALARS = (
    Scalar("max_seq_pages", "P, a Python int: callers pass cdiv(max(seq_lens) + seq_len_delta, page_size)"),
    Scalar("seq_len_delta", "0 for decode, step + 1 for draft decode"),
    Scalar("page_size", "a power of two; anything else must be refused"),
)


# Which contract variant judges which SGLang release, chosen automatically from the target
# (kvfuzz/targets/releases.py; --variant overrides): (first release, variant), oldest first.
# Read from the release wheels: 0.5.17's kernels return before the columns past
# cdiv(seq_len + seq_len_delta, page_size) ("Contract: only the live prefix ... is (re)written").
RELEASE_VARIANTS = (("0.5.13", "default"), ("0.5.17", "live_prefix"))


def uses_swa(case: Case) -> bool:
    return "swa_page_table" in case.tensors and "full_to_swa_index_mapping" in case.tensors


def kernel_path(case: Case) -> str:
    if uses_swa(case):
        return "swa"
    return "ps1" if case.scalars.get("page_size") == 1 else "general"


def must_refuse(case: Case) -> list[str]:
    ps = case.scalars.get("page_size")
    return [] if is_power_of_two(ps) else [f"page_size {ps!r} is not a positive power of two"]


def structural_reasons(case: Case) -> list[str]:
    reasons = must_refuse(case) + dtype_and_layout_reasons(CONTRACT, case)
    if reasons:
        return reasons
    t, s = case.tensors, case.scalars
    B = t["cache_seqlens_int32"].shape[0] if len(t["cache_seqlens_int32"].shape) == 1 else -1
    want = {"cache_seqlens_int32": (B,), "cu_seqlens_k": (B + 1,), "req_pool_indices": (B,), "seq_lens": (B,)}
    for name, shape in want.items():
        if t[name].shape != shape:
            reasons.append(f"{name} has shape {t[name].shape}, expected {shape} (batch B = {B})")
    for name in ("page_table", "swa_page_table", "req_to_token"):
        if name in t and len(t[name].shape) != 2:
            reasons.append(f"{name} must be 2-D, got shape {t[name].shape}")
    for name in ("strided_indices", "full_to_swa_index_mapping"):
        if name in t and len(t[name].shape) != 1:
            reasons.append(f"{name} must be 1-D, got shape {t[name].shape}")
    if ("swa_page_table" in t) != ("full_to_swa_index_mapping" in t):
        reasons.append("swa_page_table and full_to_swa_index_mapping come together")
    if reasons:
        return reasons
    P, ps = s["max_seq_pages"], s["page_size"]
    if not isinstance(P, int) or P < 0:
        return [f"max_seq_pages must be a non-negative int, got {P!r}"]
    if not isinstance(s["seq_len_delta"], int):
        reasons.append("seq_len_delta must be an int")
    for name in ("page_table", "swa_page_table"):
        if name in t and t[name].shape[0] != B:
            reasons.append(f"{name} has {t[name].shape[0]} rows, batch is {B}")
        if name in t and P > t[name].shape[1]:
            reasons.append(f"max_seq_pages {P} > {name} width {t[name].shape[1]}")
    if P > 0:
        if (P - 1) * ps >= t["req_to_token"].shape[1]:
            reasons.append(f"(max_seq_pages - 1) * page_size >= req_to_token width {t['req_to_token'].shape[1]}")
        strided = case.values["strided_indices"]
        if strided.shape[0] < P or not np.array_equal(strided[:P], np.arange(P) * ps):
            reasons.append("strided_indices[:max_seq_pages] is not arange(0, P * page_size, page_size)")
    return reasons


def cells(case: Case) -> dict[str, Cells]:
    t, P = case.tensors, case.scalars["max_seq_pages"]
    out = {}
    for name in ("cache_seqlens_int32", "cu_seqlens_k"):
        out[name] = Cells(np.ones(t[name].shape, bool), np.zeros(t[name].shape, bool))
    for name in ("page_table", "swa_page_table"):
        if name not in t:
            continue
        rows, width = t[name].shape
        col = np.arange(width)[None, :]
        written = np.broadcast_to(col < P, (rows, width))
        if name == "swa_page_table" and not uses_swa(case):
            written = np.zeros((rows, width), bool)
        if case.variant == "live_prefix":
            lens = case.values["seq_lens"].astype(np.int64) + case.scalars["seq_len_delta"]
            live = -(-lens // case.scalars["page_size"])  # cdiv
            required = written & (col < live[:, None])
        else:
            required = written.copy()
        out[name] = Cells(np.array(required), np.array(written & ~required))
    return out


CONTRACT = Contract(
    name="decode_metadata",
    entry="normal_decode_set_metadata",
    doc=__doc__,
    args=ARGS,
    scalars=SCALARS,
    variants={
        "default": "SGLang 0.5.13-0.5.16 (the seed, 0.5.14) and kvfuzz's builtin kernels: every column "
        "c < max_seq_pages is written, the rest untouched",
        "live_prefix": "SGLang 0.5.17 and later: only each row's live pages c < min(cdiv(seq_lens[i] + "
        "seq_len_delta, page_size), max_seq_pages) are required; the other columns < max_seq_pages may be "
        "written (0.5.17+ leaves them stale); the rest untouched",
    },
    paths={
        "ps1": "page_size == 1 without SWA: the fast kernel (256-column blocks)",
        "general": "any power-of-two page_size without SWA: the general kernel (128-column blocks)",
        "swa": "swa_page_table and the SWA pool given: the general kernel with the SWA mapping",
    },
    kernel_path=kernel_path,
    structural_reasons=structural_reasons,
    must_refuse=must_refuse,
    cells=cells,
    numpy_ref=numpy_ref.decode_metadata,
    torch_ref=torch_ref.decode_metadata,
    block_sizes=(128, 256),
)
