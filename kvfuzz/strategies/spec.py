"""Cases for `swa_spec_page_table` (prepare_swa_spec_page_table_triton)."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from ..case import Case, TensorSpec
from .layouts import apply_broadcast, layouts
from .values import rng, seeds

OP = "swa_spec_page_table"
BLOCK = 256
OUT_OF_CONTRACT = ("dst_too_narrow", "la_past_a", "lb_past_b", "negative_len", "seq_len_b_count", "dst_rows")


def boundary(block: int = BLOCK) -> st.SearchStrategy[int]:
    """A-part lengths at every position class relative to a block edge."""
    return st.sampled_from([0, 1, block - 1, block, block + 1, 2 * block - 1, 2 * block, 2 * block + 1]) | \
        st.integers(0, 2 * block + 2)


@st.composite
def spec_cases(draw) -> Case:
    bs, R = draw(st.integers(1, 3)), draw(st.integers(1, 4))
    M = bs * R
    g = rng(draw(seeds))
    la = np.array([draw(boundary()) for _ in range(bs)], dtype=np.int64)
    WB = draw(st.sampled_from([R, R + 1, 1, BLOCK, BLOCK + 1]))
    # lb: 0, full, or anything in between; the A/B boundary lands where la puts it
    lb_mode = draw(st.sampled_from(["full", "zero", "random", "edge"]))
    if lb_mode == "full":
        lb = np.full(M, WB)
    elif lb_mode == "zero":
        lb = np.zeros(M, dtype=np.int64)
    elif lb_mode == "random":
        lb = g.integers(0, WB + 1, size=M)
    else:  # la + lb exactly on a block edge
        lb = np.clip(BLOCK - (np.repeat(la, R) % BLOCK), 0, WB)
    WA = int(la.max()) + draw(st.sampled_from([0, 1, 7, BLOCK]))
    total = int((np.repeat(la, R) + lb).max())
    W = total + draw(st.sampled_from([0, 0, 1, 5, BLOCK]))
    dt_a = draw(st.sampled_from(["int32", "int64"]))
    dt_b = draw(st.sampled_from(["int32", "int64"]))
    shapes = {
        "page_table_dst": ("int32", (M, W), "out"),
        "page_table_a": ("int32", (bs, WA), "in"),
        "page_table_b": ("int32", (M, WB), "in"),
        "seq_len_a": (dt_a, (bs,), "in"),
        "seq_len_b": (dt_b, (M,), "in"),
    }
    tensors, bcast = {}, {}
    for name, (dt, shape, role) in shapes.items():
        tensors[name], bcast[name] = draw(layouts(dt, shape, role))
    big = draw(st.sampled_from([1 << 16, 1 << 31]))
    values = {
        "page_table_a": (g.integers(0, big, size=(bs, WA)) if WA else np.zeros((bs, 0))) ,
        "page_table_b": -1 - g.integers(0, big, size=(M, WB)),  # negative: B cells tell apart from A
        "seq_len_a": la,
        "seq_len_b": lb,
    }
    values = {k: apply_broadcast(np.asarray(v), bcast[k]) for k, v in values.items()}
    # a stride-0 length vector holds one value: keep the case in contract by recomputing widths
    case = Case(OP, {"speculative_num_draft_tokens": R}, tensors, values)
    return _fit_widths(case)


def _fit_widths(case: Case) -> Case:
    """After broadcasting lengths, make sure dst is still wide enough (stay in contract)."""
    v, t, R = case.values, dict(case.tensors), case.scalars["speculative_num_draft_tokens"]
    total = int((np.repeat(v["seq_len_a"], R) + v["seq_len_b"]).max(initial=0))
    dst = t["page_table_dst"]
    if total <= dst.shape[1]:
        return case
    t["page_table_dst"] = TensorSpec.contiguous("int32", (dst.shape[0], total))
    return case.replace(tensors=t)


@st.composite
def spec_out_of_contract(draw) -> Case:
    case = draw(spec_cases())
    t, v = dict(case.tensors), dict(case.values)
    bs, M = t["seq_len_a"].shape[0], t["seq_len_b"].shape[0]
    la, lb = np.array(v["seq_len_a"], dtype=np.int64), np.array(v["seq_len_b"], dtype=np.int64)
    kind = draw(st.sampled_from(OUT_OF_CONTRACT))
    if kind == "dst_too_narrow":
        # the overflowing row is the last one, so a write past its end leaves the tensor
        la[-1] = max(la[-1], 1)
        lb[-1] = max(lb[-1], 0)
        total = int(la[-1] + lb[-1])
        t["page_table_dst"] = TensorSpec.contiguous("int32", (M, total - draw(st.integers(1, total))))
    elif kind == "la_past_a":
        la[draw(st.integers(0, bs - 1))] = t["page_table_a"].shape[1] + draw(st.sampled_from([1, 300]))
    elif kind == "lb_past_b":
        lb[draw(st.integers(0, M - 1))] = t["page_table_b"].shape[1] + draw(st.sampled_from([1, 300]))
    elif kind == "negative_len":
        la[0] = -draw(st.sampled_from([1, 257]))
    elif kind == "seq_len_b_count":
        lb = lb[:-1] if M > 1 else np.concatenate([lb, lb])
    elif kind == "dst_rows":  # fewer rows than bs * R
        t["page_table_dst"] = TensorSpec.contiguous("int32", (M - 1, t["page_table_dst"].shape[1]))
    t["seq_len_a"] = TensorSpec.contiguous(t["seq_len_a"].dtype, la.shape)
    t["seq_len_b"] = TensorSpec.contiguous(t["seq_len_b"].dtype, lb.shape)
    v["seq_len_a"], v["seq_len_b"] = la, lb
    return Case(OP, case.scalars, t, v, meta={"violation": kind})
