"""flashmla_kv_indices's two oracles: `numpy_ref` (exact, torch-free; a broken value rule is
`OutOfContract`) and `torch_ref` (the unfused torch ops the kernel replaced, on the host)."""

from __future__ import annotations

import numpy as np

from ...case import Case
from ...contract import Expected, OutOfContract
from ...oracles.numpy_ref import empty_out
from ...oracles.torch_ref import Inputs, as_int64, input_tensor
from ..kv_index_common import check_int32, check_request, request_values, torch_requests

# the NumPy oracle ------------------------------------------------------------------------


def remap(case: Case, i: int, pages: np.ndarray) -> np.ndarray:
    """Request i's pages through `v2p` (0.5.17-0.5.18, where the case has it), times page_mult;
    a page outside v2p, or a value past int32 (kv_indices' dtype), is out of contract."""
    mult = int(case.scalars.get("page_mult", 1))
    if "v2p" in case.values:
        v2p = np.asarray(case.values["v2p"], dtype=np.int64)
        bad = np.flatnonzero(pages >= v2p.shape[0])
        if bad.size:
            raise OutOfContract(f"request {i}: page {int(pages[bad[0]])} (kv_indices[{i}, {int(bad[0])}]) is past "
                                f"v2p's {v2p.shape[0]} entries")
        pages = v2p[pages]
    vals = pages * mult
    bad = np.flatnonzero((vals < -2**31) | (vals >= 2**31))
    if bad.size:
        raise OutOfContract(f"request {i}: kv_indices[{i}, {int(bad[0])}] = {int(vals[bad[0]])} does not fit int32")
    return vals


def numpy_ref(case: Case) -> Expected:
    """The value rules (pool index, start and length within the row, the pages within
    kv_indices' width, the token ids read >= 0, the pages within v2p, the values within int32),
    then the page of every ps-th token, through v2p and times page_mult where the case has them."""
    ps = int(case.scalars["page_size"])
    table, P, C, rows, lens, starts = request_values(case, "paged_kernel_lens", "kv_start_idx")
    check_int32(case, ("paged_kernel_lens", "kv_start_idx"))
    out = empty_out(case, "kv_indices")
    W = out.shape[1]
    for i in range(rows.shape[0]):
        r, s, n = int(rows[i]), int(starts[i]), int(lens[i])
        check_request(i, r, s, n, P, C, "paged_kernel_lens", "kv_start_idx")
        pages = -(-n // ps)
        if pages > W:
            raise OutOfContract(f"request {i}: ceil({n} / {ps}) = {pages} pages > kv_indices width {W}")
        ids = table[r, s:s + n:ps]
        if ids.size and ids.min() < 0:
            p = int(np.argmax(ids < 0))
            raise OutOfContract(f"request {i}: token id req_to_token[{r}, {s + p * ps}] = {int(ids[p])} < 0 (the "
                                "page of a negative id is not defined: Triton's // truncates)")
        out[i, :pages] = remap(case, i, ids.astype(np.int64) // ps)
    return Expected({"kv_indices": out})


# the torch oracle ------------------------------------------------------------------------


def torch_ref(case: Case, device, inputs: Inputs = None) -> dict[str, torch.Tensor]:
    """kv_indices[i, p] = req_to_token[req_pool_indices[i], start[i] + p * ps] // ps for
    p < ceil(lens[i] / ps), as one gather over a (bs, W) grid of page slots; through v2p (an
    index_select) and times page_mult where the case has them."""
    import torch

    ps = int(case.scalars["page_size"])
    table, rows, lens, starts = torch_requests(case, device, inputs, "paged_kernel_lens", "kv_start_idx")
    R, W = case.tensors["kv_indices"].shape
    out = torch.zeros((R, W), dtype=torch.int64, device=device)
    bs = lens.shape[0]
    p = torch.arange(W, device=device)
    live = p[None, :] < torch.div(lens + ps - 1, ps, rounding_mode="floor")[:, None]  # (bs, W)
    if bool(live.any()):
        req, page = live.nonzero(as_tuple=True)
        ids = table[rows[req], starts[req] + page * ps]
        pages = torch.div(ids, ps, rounding_mode="floor")
        if "v2p" in case.tensors:
            pages = input_tensor(case, "v2p", device, inputs).long().index_select(0, pages)
        out[:bs][req, page] = pages * int(case.scalars.get("page_mult", 1))
    return {"kv_indices": as_int64(out)}
