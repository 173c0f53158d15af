"""flashmla_kv_indices's two oracles: `numpy_ref` (exact, torch-free; a broken value rule is
`OutOfContract`) and `torch_ref` (the unfused torch ops the kernel replaced, on the host)."""

from __future__ import annotations

import numpy as np

from ...case import Case
from ...contract import Expected, OutOfContract
from ...oracles.numpy_ref import empty_out
from ...oracles.torch_ref import Inputs, as_int64
from ..kv_index_common import check_int32, check_request, request_values, torch_requests

# the NumPy oracle ------------------------------------------------------------------------


def numpy_ref(case: Case) -> Expected:
    """The value rules (pool index, start and length within the row, the pages within
    kv_indices' width, the token ids read >= 0), then the page of every ps-th token."""
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
        out[i, :pages] = ids // ps
    return Expected({"kv_indices": out})


# the torch oracle ------------------------------------------------------------------------


def torch_ref(case: Case, device, inputs: Inputs = None) -> dict[str, torch.Tensor]:
    """kv_indices[i, p] = req_to_token[req_pool_indices[i], start[i] + p * ps] // ps for
    p < ceil(lens[i] / ps), as one gather over a (bs, W) grid of page slots."""
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
        out[:bs][req, page] = torch.div(ids, ps, rounding_mode="floor")
    return {"kv_indices": as_int64(out)}
