"""Cases for `num_kv_splits` (get_num_kv_splits_triton): every comparison, min, max and
rounding step of its arithmetic approached from both sides."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from ..case import Case, TensorSpec
from .layouts import layouts
from .values import rng, seeds

OP = "num_kv_splits"
CORE_COUNTS = (132, 1, 78, 108, 16, 114)
OUT_OF_CONTRACT = ("negative_len", "len_overflow", "kv_heads_exceed_heads", "zero_max_splits")


def _max_len(draw, dcc: int) -> int:
    """max(seq_lens) on the edges of the arithmetic."""
    kind = draw(st.sampled_from(["small", "log2_one", "float_step", "any"]))
    if kind == "small":
        return draw(st.integers(1, 16))
    if kind == "log2_one":  # log2(mx / 64) crosses 1.0 at mx = 128
        return 128 + draw(st.integers(-2, 2))
    if kind == "float_step":  # dcc * log2(mx / 64) crosses an integer
        n = draw(st.integers(dcc, 12 * dcc))
        return max(1, int(round(64 * 2 ** (n / dcc))) + draw(st.integers(-1, 1)))
    return draw(st.integers(1, 1 << 20))


@st.composite
def splits_cases(draw, variant: str = "default") -> Case:
    num_seq = draw(st.sampled_from([1, 2, 3, 255, 256, 257]) | st.integers(1, 64))
    num_group = draw(st.sampled_from([1, 2, 4]))
    num_head = draw(st.sampled_from([32, 1, 8, 16, 17, 28, 64, 128]))
    num_kv_head = draw(st.sampled_from([h for h in (1, 2, 4, 8, 16, 32, 64, 128) if h <= num_head]))
    mks = draw(st.sampled_from([8, 1, 2, 4, 16, 64]))
    dcc = draw(st.sampled_from(CORE_COUNTS))
    mx = _max_len(draw, dcc)
    g = rng(draw(seeds))
    kind = draw(st.sampled_from(["equal", "ratio_edge", "spread", "zeros"]))
    if kind == "equal":
        lens = np.full(num_seq, mx)
    elif kind == "ratio_edge":  # mx * 8 < mn * 10, from both sides
        mn = max(1, (mx * 8) // 10 + draw(st.integers(-1, 1)))
        lens = g.integers(mn, mx + 1, size=num_seq)
        lens[0], lens[-1] = mn, mx
    elif kind == "spread":
        lens = g.integers(1, mx + 1, size=num_seq)
        lens[g.integers(0, num_seq)] = mx
    else:  # zero lengths: defined by kvfuzz's default variant, out of contract for SGLang's
        lens = g.integers(0, mx + 1, size=num_seq)
        lens[g.integers(0, num_seq, size=max(1, num_seq // 3))] = 0
    dtype = draw(st.sampled_from(["int32", "int64"]))
    seq_spec, _ = draw(layouts(dtype, (num_seq,), "in", allow=("contiguous", "offset")))
    out_spec, _ = draw(layouts("int32", (num_seq * num_group,), "out", allow=("contiguous", "offset")))
    scalars = {"num_seq": num_seq, "num_group": num_group, "num_head": num_head, "num_kv_head": num_kv_head,
               "max_kv_splits": mks, "device_core_count": dcc}
    return Case(OP, scalars, {"num_kv_splits": out_spec, "seq_lens": seq_spec}, {"seq_lens": lens}, variant=variant)


@st.composite
def splits_out_of_contract(draw) -> Case:
    case = draw(splits_cases())
    kind = draw(st.sampled_from(OUT_OF_CONTRACT))
    s, lens = dict(case.scalars), np.array(case.values["seq_lens"], dtype=np.int64)
    if kind == "negative_len":
        lens[0] = -draw(st.sampled_from([1, 1000]))
    elif kind == "len_overflow":
        lens[0] = 2**31 - 1 - draw(st.integers(0, 10))
    elif kind == "kv_heads_exceed_heads":
        s["num_kv_head"] = s["num_head"] + draw(st.sampled_from([1, 7]))
    elif kind == "zero_max_splits":
        s["max_kv_splits"] = 0
    t = dict(case.tensors)
    t["seq_lens"] = TensorSpec.contiguous("int64", lens.shape)
    return Case(OP, s, t, {"seq_lens": lens}, variant=case.variant, meta={"violation": kind})

