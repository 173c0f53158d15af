"""aiter_ragged_page_table's two oracles: `numpy_ref` (exact, torch-free; a broken value rule is
`OutOfContract`) and `torch_ref` (the unfused torch ops: the ragged slots of each page gathered,
floored by the page size, and with SWA translated through the mapping first)."""

from __future__ import annotations

import numpy as np

from ...case import Case
from ...contract import Expected, OutOfContract
from ...oracles.torch_ref import Inputs, input_tensor
from ..aiter_page_table_common import PageRows, torch_pages

# the NumPy oracle ------------------------------------------------------------------------


def numpy_ref(case: Case) -> Expected:
    """The value rules (kv_indptr from 0 or more, nondecreasing, within kv_flat; the pages within
    page_table's width; the slots read KV-pool slots, with SWA inside the mapping, whose entries
    read are SWA slots), then the page of every ps-th token (and its SWA page)."""
    flat = np.asarray(case.values["kv_flat"], np.int64)
    ptr = np.asarray(case.values["kv_indptr"], np.int64)
    N = flat.shape[0]
    rows = PageRows(case)
    ps = rows.ps
    if ptr[0] < 0:
        raise OutOfContract(f"kv_indptr[0] = {int(ptr[0])} < 0")
    for i in range(ptr.shape[0] - 1):
        s, e = int(ptr[i]), int(ptr[i + 1])
        if e < s:
            raise OutOfContract(f"kv_indptr[{i + 1}] = {e} < kv_indptr[{i}] = {s} (a negative length)")
        if e > N:
            raise OutOfContract(f"kv_indptr[{i + 1}] = {e} > kv_flat size {N}")
        rows.check_pages(i, e - s)
        rows.fill(i, flat[s:e:ps], lambda p, s=s: f"kv_flat[{s + p * ps}]")
    return Expected(rows.result())


# the torch oracle ------------------------------------------------------------------------


def torch_ref(case: Case, device, inputs: Inputs = None) -> dict:
    """page_table[i, p] = kv_flat[kv_indptr[i] + p * ps] // ps for p < ceil((kv_indptr[i + 1] -
    kv_indptr[i]) / ps), as one gather over a (bs, W) grid of pages; swa_page_table the same
    through the mapping."""
    flat = input_tensor(case, "kv_flat", device, inputs).long()
    ptr = input_tensor(case, "kv_indptr", device, inputs).long()
    ps = int(case.scalars["page_size"])
    return torch_pages(case, device, inputs, ptr[1:] - ptr[:-1], lambda req, page: flat[ptr[req] + page * ps])
