"""Cases for `decode_metadata` (normal_decode_set_metadata)."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from ..case import Case, TensorSpec
from .layouts import apply_broadcast, layouts
from .values import INDEX_PATTERNS, SWA_TOKEN_PATTERNS, TOKEN_PATTERNS, pick, rng, seeds, tokens

OP = "decode_metadata"
PAGE_SIZES = (1, 16, 2, 4, 64, 128, 1024)
BAD_PAGE_SIZES = (3, 0, -4, 6, 48, 100, 2**31 - 1)
DELTAS = (0, 1, 2, 3, 4, 5, 8)  # normal decode, then draft decode's step + 1
OUT_OF_CONTRACT = ("page_size", "page_table_rows", "cu_seqlens_len", "width", "pool_index", "swa_token",
                   "negative_len", "len_overflow")


def edges(block: int) -> list[int]:
    return [0, 1, 2, block - 1, block, block + 1, 2 * block - 1, 2 * block, 2 * block + 1]


@st.composite
def decode_cases(draw, variant: str = "default") -> Case:
    """In-contract cases leaning on zero pages, block edges, strides and odd values."""
    ps = draw(st.sampled_from(PAGE_SIZES))
    swa = draw(st.booleans())
    block = 256 if ps == 1 and not swa else 128
    B = draw(st.integers(1, 6))
    pages = draw(st.sampled_from(edges(block)) | st.integers(0, 40))
    if ps >= 64:  # keep req_to_token under ~1 MB: its width is P * page_size
        pages = min(pages, (1 << 18) // ps)
    delta = draw(st.sampled_from(DELTAS))

    # lengths as a caller makes them: P = cdiv(max(len), page_size), or P wider than needed
    g = rng(draw(seeds))
    if pages == 0:
        lens = np.zeros(B, dtype=np.int64)
        delta = 0
    else:
        wider = draw(st.booleans())
        top = pages * ps if wider else (pages - 1) * ps + draw(st.integers(1, ps))
        low = 0 if wider else min(delta, top)
        lens = g.integers(low, top + 1, size=B)
        if not wider:
            lens[g.integers(0, B)] = top
            delta = min(delta, int(lens.min()))
        if draw(st.booleans()):  # CUDA-graph padding rows of length 1
            lens[B // 2:] = np.minimum(lens[B // 2:], 1 + delta) if top >= 1 + delta else lens[B // 2:]
    seq_lens = lens - delta

    width = pages + draw(st.sampled_from([0, 1, 3, 130]))
    T = max(pages * ps + draw(st.sampled_from([0, 1, ps])), 1)
    R = draw(st.integers(1, 5))
    dtypes = {n: draw(st.sampled_from(["int64", "int32"])) for n in ("seq_lens", "req_pool_indices", "req_to_token")}

    tensors: dict[str, TensorSpec] = {}
    bcast: dict[str, int | None] = {}
    shapes = {
        "cache_seqlens_int32": ("int32", (B,), "out"),
        "cu_seqlens_k": ("int32", (B + 1,), "out"),
        "page_table": ("int32", (B, width), "out"),
        "req_to_token": (dtypes["req_to_token"], (R, T), "in"),
        "req_pool_indices": (dtypes["req_pool_indices"], (B,), "in"),
        "strided_indices": (draw(st.sampled_from(["int64", "int32"])), (-(-T // ps),), "in"),
        "seq_lens": (dtypes["seq_lens"], (B,), "in"),
    }
    N = 0
    if swa:
        N = R * T + draw(st.sampled_from([0, 1, 1000]))
        shapes["swa_page_table"] = ("int32", (B, pages + draw(st.sampled_from([0, 1, 5]))), "out")
        shapes["full_to_swa_index_mapping"] = (draw(st.sampled_from(["int64", "int32"])), (N,), "in")
    for name, (dt, shape, role) in shapes.items():
        allow = ("contiguous", "offset", "padded", "step") if name == "strided_indices" else None
        tensors[name], bcast[name] = draw(layouts(dt, shape, role, allow))

    # with SWA every token id indexes the mapping, so only in-range patterns
    pattern = draw(st.sampled_from(SWA_TOKEN_PATTERNS if swa else TOKEN_PATTERNS))
    values = {
        "req_to_token": tokens(pattern, draw(seeds), (R, T), N if swa else 1 << 20),
        "req_pool_indices": pick(draw(seeds), B, R, draw(st.sampled_from(INDEX_PATTERNS))),
        "strided_indices": np.arange(0, T, ps),
        "seq_lens": seq_lens,
    }
    if swa:
        mp = draw(st.sampled_from(("arange", "random", "negative", "large")))
        values["full_to_swa_index_mapping"] = tokens(mp, draw(seeds), (N,), 1 << 24)
    values = {k: apply_broadcast(v, bcast[k]) for k, v in values.items()}
    if bcast["seq_lens"] is not None and pages > 0:  # a constant row must still reach P pages
        values["seq_lens"] = np.full(B, int(lens.max()) - delta)
    scalars = {"max_seq_pages": int(pages), "seq_len_delta": int(delta), "page_size": ps}
    return Case(OP, scalars, tensors, values, variant=variant)


@st.composite
def decode_out_of_contract(draw) -> Case:
    """One violation applied to an in-contract case."""
    case = draw(decode_cases())
    t, v, s = dict(case.tensors), dict(case.values), dict(case.scalars)
    B, P = t["cache_seqlens_int32"].shape[0], s["max_seq_pages"]
    kinds = [k for k in OUT_OF_CONTRACT
             if not (k in ("width", "swa_token") and P == 0) and not (k == "swa_token" and "swa_page_table" not in t)]
    kind = draw(st.sampled_from(kinds))
    if kind == "page_size":
        s["page_size"] = draw(st.sampled_from(BAD_PAGE_SIZES))
    elif kind == "page_table_rows":
        t["page_table"] = TensorSpec.contiguous("int32", (max(B - 1, 0), t["page_table"].shape[1]))
    elif kind == "cu_seqlens_len":
        t["cu_seqlens_k"] = TensorSpec.contiguous("int32", (B,))
    elif kind == "width":
        name = "swa_page_table" if "swa_page_table" in t and draw(st.booleans()) else "page_table"
        t[name] = TensorSpec.contiguous("int32", (B, P - draw(st.integers(1, P))))
    elif kind == "pool_index":
        rows = v["req_to_token"].shape[0]
        pool = np.array(v["req_pool_indices"], dtype=np.int64)
        pool[draw(st.integers(0, B - 1))] = draw(st.sampled_from([rows, -1]))
        v["req_pool_indices"] = pool
        t["req_pool_indices"] = TensorSpec.contiguous(t["req_pool_indices"].dtype, (B,))
    elif kind == "swa_token":
        rtt = np.array(v["req_to_token"])
        row = int(v["req_pool_indices"][0])
        rtt[row, 0] = v["full_to_swa_index_mapping"].shape[0]
        v["req_to_token"] = rtt
        t["req_to_token"] = TensorSpec.contiguous(t["req_to_token"].dtype, rtt.shape)
    elif kind == "negative_len":
        v["seq_lens"] = np.full(B, -1 - s["seq_len_delta"])
        t["seq_lens"] = TensorSpec.contiguous(t["seq_lens"].dtype, (B,))
    elif kind == "len_overflow":  # lengths whose int32 sum overflows (B > 1) or that overflow themselves
        v["seq_lens"] = np.full(B, 2**31 - 1 - s["seq_len_delta"] + (B == 1))
        t["seq_lens"] = TensorSpec.contiguous("int64", (B,))
    return Case(OP, s, t, v, variant=case.variant, meta={"violation": kind})
