"""`get_num_kv_splits_triton`: how many KV splits the decode attention kernel uses per
sequence. A bare kernel on grid (1,), launched with SGLang's MAX_NUM_SEQ rule."""

from __future__ import annotations

import numpy as np

from ...case import Case
from ...contract import Arg, Cells, Contract, Scalar, dtype_and_layout_reasons
from . import oracle

ARGS = (
    Arg("num_kv_splits", "out", ("int32",), "num_seq*num_group",
        doc="out[i*num_group + j] = max(cdiv(seq_lens[i], c1), cdiv(seq_lens[i], c2))"),
    Arg("seq_lens", "in", ("int32", "int64"), "num_seq", doc="lengths; >= 1 in SGLang, >= 0 in kvfuzz's default"),
    Arg("uneven_batch", "out", ("int32",), "1", optional=True,
        doc="SGLang 0.5.23's uneven_batch_ptr: 1 if min_seq_len < max_seq_len after the ratio rule, else 0"),
)
SCALARS = (
    Scalar("num_seq", "batch size; equals seq_lens.shape[0]"),
    Scalar("num_group", "speculative top-k (1 otherwise)"),
    Scalar("num_head", "query heads"),
    Scalar("num_kv_head", "KV heads"),
    Scalar("max_kv_splits", "upper bound on splits (SGLang default 8)"),
    Scalar("device_core_count", "SM count (132 on an H200)"),
)


def kernel_path(case: Case) -> str:
    return "splits"


def must_refuse(case: Case) -> list[str]:
    return []  # a bare kernel cannot refuse anything


def structural_reasons(case: Case) -> list[str]:
    reasons = dtype_and_layout_reasons(CONTRACT, case)
    if reasons:
        return reasons
    t, s = case.tensors, case.scalars
    for sc in SCALARS:
        if not isinstance(s.get(sc.name), int) or isinstance(s.get(sc.name), bool):
            reasons.append(f"{sc.name} must be an int, got {s.get(sc.name)!r}")
    if reasons:
        return reasons
    if t["seq_lens"].shape != (s["num_seq"],):
        reasons.append(f"seq_lens has shape {t['seq_lens'].shape}, num_seq is {s['num_seq']}")
    if t["num_kv_splits"].shape != (s["num_seq"] * s["num_group"],):
        reasons.append(f"num_kv_splits has shape {t['num_kv_splits'].shape}, expected num_seq * num_group")
    if s["num_seq"] < 1:
        reasons.append("num_seq must be >= 1")
    for name in ("num_kv_splits", "seq_lens"):
        if t[name].strides != (1,) and t[name].shape[0] > 1:
            reasons.append(f"{name} must have unit stride: the bare kernel takes no strides")
    if "uneven_batch" in t and t["uneven_batch"].shape != (1,):
        reasons.append(f"uneven_batch has shape {t['uneven_batch'].shape}, expected (1,)")
    return reasons


def cells(case: Case) -> dict[str, Cells]:
    return {name: Cells(np.ones(case.tensors[name].shape, bool), np.zeros(case.tensors[name].shape, bool))
            for name in ("num_kv_splits", "uneven_batch") if name in case.tensors}


CONTRACT = Contract(
    name="num_kv_splits",
    entry="get_num_kv_splits_triton",
    doc=__doc__,
    args=ARGS,
    scalars=SCALARS,
    variants={
        "default": "kvfuzz's contract, for every target and SGLang release (0.5.6-0.5.23): zero lengths are "
        "defined (statistics over lengths >= 1; a zero row gets 0 splits); SGLang divides by zero on them",
        "sglang": "SGLang's documented contract, the same in 0.5.6-0.5.23: every seq_len >= 1 "
        "(only with --variant sglang)",
    },
    # The flag is the `min_seq_len < max_seq_len` SGLang 0.5.23 stores after its ratio rule
    # (`if max * 8 < min * 10: min = max`), so a batch within 25% of even reads as even; kvfuzz
    # assumes that is meant (the flag then says whether split sizes differ by row), and takes
    # max and min over the same rows as the splits (lengths >= 1 in `default`).
    paths={"splits": "one program on grid (1,); with uneven_batch it also stores the flag"},
    kernel_path=kernel_path,
    structural_reasons=structural_reasons,
    must_refuse=must_refuse,
    cells=cells,
    numpy_ref=oracle.numpy_ref,
    torch_ref=oracle.torch_ref,
)
