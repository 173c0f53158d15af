"""aiter_req_to_token_page_table's two oracles: `numpy_ref` (exact, torch-free; a broken value rule
is `OutOfContract`) and `torch_ref` (the unfused torch ops: `req_to_token[req_pool_indices][:,
::page_size] // page_size` over each request's seq_lens + DRAFT_NUM tokens, and with SWA the slots
translated through the mapping first)."""

from __future__ import annotations

import numpy as np

from ...case import Case
from ...contract import Expected, OutOfContract
from ...oracles.torch_ref import Inputs, input_tensor
from ..aiter_page_table_common import PageRows, torch_pages

# the NumPy oracle ------------------------------------------------------------------------


def numpy_ref(case: Case) -> Expected:
    """The value rules (pool index, seq_lens >= 0, the tokens and drafts within the row, the pages
    within page_table's width, the slots read KV-pool slots, with SWA inside the mapping, whose
    entries read are SWA slots), then the page of every ps-th token (and its SWA page)."""
    v = case.values
    D = int(case.scalars["draft_num"])
    table = np.asarray(v["req_to_token"], np.int64)
    P, C = case.tensors["req_to_token"].shape
    pool = np.asarray(v["req_pool_indices"], np.int64)
    lens = np.asarray(v["seq_lens"], np.int64)
    rows = PageRows(case)
    ps = rows.ps
    for i in range(pool.shape[0]):
        r, m = int(pool[i]), int(lens[i])
        if not 0 <= r < P:
            raise OutOfContract(f"req_pool_indices[{i}] = {r} outside [0, {P})")
        if m < 0:
            raise OutOfContract(f"seq_lens[{i}] = {m} < 0")
        n = m + D
        if n > C:
            raise OutOfContract(f"request {i}: seq_lens + draft_num = {m} + {D} > req_to_token width {C}")
        rows.check_pages(i, n)
        rows.fill(i, table[r, 0:n:ps], lambda p, r=r: f"req_to_token[{r}, {p * ps}]")
    return Expected(rows.result())


# the torch oracle ------------------------------------------------------------------------


def torch_ref(case: Case, device, inputs: Inputs = None) -> dict:
    """page_table[i, p] = req_to_token[req_pool_indices[i], p * ps] // ps for p < ceil((seq_lens[i]
    + draft_num) / ps), as one gather over a (bs, W) grid of pages; swa_page_table the same
    through the mapping."""
    table = input_tensor(case, "req_to_token", device, inputs).long()
    pool = input_tensor(case, "req_pool_indices", device, inputs).long()
    lens = input_tensor(case, "seq_lens", device, inputs).long() + int(case.scalars["draft_num"])
    ps = int(case.scalars["page_size"])
    return torch_pages(case, device, inputs, lens, lambda req, page: table[pool[req], page * ps])
