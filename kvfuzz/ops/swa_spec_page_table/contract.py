"""`prepare_swa_spec_page_table_triton`: concatenate each request's page table (A part)
with the draft tokens' expanded pages (B part), row by expanded row."""

from __future__ import annotations

import numpy as np

from ...case import Case
from ...contract import Arg, Cells, Contract, Scalar, dtype_and_layout_reasons
from . import oracle

BLOCK = 256  # the seed's column block: all-A, all-B and mixed blocks take different code

ARGS = (
    Arg("page_table_dst", "out", ("int32",), "M,W", doc="rows m < bs*R: A part then B part; cells c >= la+lb untouched"),
    Arg("page_table_a", "in", ("int32",), "bs,WA", doc="each request's page table"),
    Arg("page_table_b", "in", ("int32",), "M,WB", doc="each expanded row's draft pages"),
    Arg("seq_len_a", "in", ("int32", "int64"), "bs", doc="la: A-part length of request m // R, in [0, WA]"),
    Arg("seq_len_b", "in", ("int32", "int64"), "M", doc="lb: B-part length of row m, in [0, WB]; la + lb <= W"),
)
SCALARS = (Scalar("speculative_num_draft_tokens", "R >= 1; M = bs * R"),)


def kernel_path(case: Case) -> str:
    return "spec"


def must_refuse(case: Case) -> list[str]:
    return []


def structural_reasons(case: Case) -> list[str]:
    reasons = dtype_and_layout_reasons(CONTRACT, case)
    if reasons:
        return reasons
    t, R = case.tensors, case.scalars["speculative_num_draft_tokens"]
    if not isinstance(R, int) or R < 1:
        return [f"speculative_num_draft_tokens must be an int >= 1, got {R!r}"]
    for name in ("page_table_dst", "page_table_a", "page_table_b"):
        if len(t[name].shape) != 2:
            reasons.append(f"{name} must be 2-D, got shape {t[name].shape}")
    for name in ("seq_len_a", "seq_len_b"):
        if len(t[name].shape) != 1:
            reasons.append(f"{name} must be 1-D, got shape {t[name].shape}")
    if reasons:
        return reasons
    bs = t["seq_len_a"].shape[0]
    want = {"seq_len_b": bs * R, "page_table_dst": bs * R, "page_table_a": bs, "page_table_b": bs * R}
    for name, rows in want.items():
        if t[name].shape[0] != rows:
            reasons.append(f"{name} has {t[name].shape[0]} rows, expected {rows} (bs = {bs}, R = {R})")
    return reasons


def cells(case: Case) -> dict[str, Cells]:
    dst = case.tensors["page_table_dst"]
    R = case.scalars["speculative_num_draft_tokens"]
    la = case.values["seq_len_a"].astype(np.int64)
    lb = case.values["seq_len_b"].astype(np.int64)
    rows = la.shape[0] * R
    total = np.zeros(dst.shape[0], dtype=np.int64)
    total[:rows] = np.repeat(la, R)[:rows] + lb[:rows]
    required = np.arange(dst.shape[1])[None, :] < total[:, None]
    return {"page_table_dst": Cells(required, np.zeros_like(required))}


CONTRACT = Contract(
    name="swa_spec_page_table",
    entry="prepare_swa_spec_page_table_triton",
    doc=__doc__,
    args=ARGS,
    scalars=SCALARS,
    variants={"default": "SGLang 0.5.6-0.5.23 (unchanged): cells c < la + lb written, the rest of each row "
              "untouched"},
    paths={"spec": "one kernel; per 256-column block an all-A, all-B or mixed path"},
    kernel_path=kernel_path,
    structural_reasons=structural_reasons,
    must_refuse=must_refuse,
    cells=cells,
    numpy_ref=oracle.numpy_ref,
    torch_ref=oracle.torch_ref,
    block_sizes=(BLOCK,),
)
