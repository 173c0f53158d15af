"""`q8kv8_topk_length_from_indices` (SGLang 0.5.23): each row's valid top-k count, the last
non-negative position of the row of top-k indices plus one, at least 1.

Unlike the other entry points it returns a new tensor: kvfuzz copies that into the case's
`topk_length` (a tensor that is not the right shape and dtype is the target's crash), so writes
past the target's own allocation cannot be seen; reads outside `indices` never can.

Where SGLang leaves intent open, kvfuzz assumes:

* any negative value is a pad (SGLang's kernel tests `>= 0`; its docstring names -1);
* a row of pads, and a row of width 0, have length 1 ("min 1");
* `indices` is int32 with column stride 1 (SGLang asserts both, at any width: anything else is
  out of contract), any row stride (padded rows, one row repeated by a zero stride) and any width: the
  kernel's block (512, 256, else 128) divides a width that is a multiple of 128, but SGLang's
  fallback to 128 admits any width, and the answer is defined for all of them.
"""

from __future__ import annotations

import numpy as np

from ...case import Case
from ...contract import Arg, Cells, Contract, dtype_and_layout_reasons
from . import oracle

ARGS = (
    Arg("indices", "in", ("int32",), "S,K", doc="top-k indices, -1 (any negative) for a pad; unit column stride"),
    Arg("topk_length", "out", ("int32",), "S", doc="the returned tensor: 1 + last j with indices[i, j] >= 0, min 1"),
)


def kernel_path(case: Case) -> str:
    """SGLang's scan block, chosen by the width."""
    shape = case.tensors["indices"].shape
    k = shape[1] if len(shape) == 2 else 0
    return "block512" if k % 512 == 0 else "block256" if k % 256 == 0 else "block128"


def must_refuse(case: Case) -> list[str]:
    return []


def structural_reasons(case: Case) -> list[str]:
    reasons = dtype_and_layout_reasons(CONTRACT, case)
    if reasons:
        return reasons
    idx, out = case.tensors["indices"], case.tensors["topk_length"]
    if len(idx.shape) != 2:
        return [f"indices must be 2-D, got shape {idx.shape}"]
    if idx.strides[1] != 1:  # whatever the width, as SGLang's assert
        reasons.append(f"indices must have unit column stride, got strides {idx.strides} (SGLang asserts it)")
    if out.shape != (idx.shape[0],):
        reasons.append(f"topk_length has shape {out.shape}, expected ({idx.shape[0]},)")
    return reasons


def cells(case: Case) -> dict[str, Cells]:
    shape = case.tensors["topk_length"].shape
    return {"topk_length": Cells(np.ones(shape, bool), np.zeros(shape, bool))}


CONTRACT = Contract(
    name="q8kv8_topk_length",
    entry="q8kv8_topk_length_from_indices",
    doc=__doc__,
    args=ARGS,
    scalars=(),
    variants={"default": "SGLang 0.5.23 and kvfuzz's builtin kernel: 1 + the last non-negative position, min 1"},
    paths={
        "block512": "width a multiple of 512 (0 included): 512-wide backward blocks",
        "block256": "width a multiple of 256, not 512",
        "block128": "any other width: 128-wide blocks (past the row's start when 128 does not divide it)",
    },
    kernel_path=kernel_path,
    structural_reasons=structural_reasons,
    must_refuse=must_refuse,
    cells=cells,
    numpy_ref=oracle.numpy_ref,
    torch_ref=oracle.torch_ref,
    block_sizes=(128, 256, 512),
)
