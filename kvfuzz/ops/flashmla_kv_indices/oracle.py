"""flashmla_kv_indices's two oracles: `numpy_ref` (exact, torch-free; a broken value rule is
`OutOfContract`) and `torch_ref` (the unfused torch ops the kernel replaced, on the host)."""

from __future__ import annotations

import numpy as np

from ...case import Case
from ...contract import Expected, OutOfContract, fits_int32
from ...oracles.numpy_ref import empty_out
from ...oracles.torch_ref import Inputs, as_int64, input_tensor


def _starts(case: Case, bs: int) -> np.ndarray:
    if "kv_start_idx" in case.values:
        return np.asarray(case.values["kv_start_idx"], dtype=np.int64)
    return np.zeros(bs, np.int64)


# the NumPy oracle ------------------------------------------------------------------------


def numpy_ref(case: Case) -> Expected:
    """The value rules (pool index, start and length within the row, the pages within
    kv_indices' width, the token ids read >= 0), then the page of every ps-th token."""
    v = case.values
    ps = int(case.scalars["page_size"])
    table = np.asarray(v["req_to_token"], dtype=np.int64)
    P, C = case.tensors["req_to_token"].shape
    rows = np.asarray(v["req_pool_indices"], dtype=np.int64)
    lens = np.asarray(v["paged_kernel_lens"], dtype=np.int64)
    bs = rows.shape[0]
    starts = _starts(case, bs)
    for name in ("paged_kernel_lens", "kv_start_idx"):
        if name in v and not fits_int32(v[name]):
            raise OutOfContract(f"{name} has a value outside int32 (the kernel casts it to int32)")
    out = empty_out(case, "kv_indices")
    W = out.shape[1]
    for i in range(bs):
        r, s, n = int(rows[i]), int(starts[i]), int(lens[i])
        if not 0 <= r < P:
            raise OutOfContract(f"req_pool_indices[{i}] = {r} outside [0, {P})")
        if n < 0:
            raise OutOfContract(f"paged_kernel_lens[{i}] = {n} < 0")
        if s < 0:
            raise OutOfContract(f"kv_start_idx[{i}] = {s} < 0")
        if s + n > C:
            raise OutOfContract(f"request {i}: start + length = {s} + {n} > req_to_token width {C}")
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
    table = input_tensor(case, "req_to_token", device, inputs).long()
    rows = input_tensor(case, "req_pool_indices", device, inputs).long()
    lens = input_tensor(case, "paged_kernel_lens", device, inputs).long()
    if "kv_start_idx" in case.tensors:
        starts = input_tensor(case, "kv_start_idx", device, inputs).long()
    else:
        starts = torch.zeros_like(lens)
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
