"""flashinfer_kv_indices's two oracles: `numpy_ref` (exact, torch-free; a broken value rule is
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
    """The value rules (pool index, start and length within the row, kv_indptr consistent with
    the lengths and within kv_indices), then the copy."""
    v = case.values
    table = np.asarray(v["req_to_token"], dtype=np.int64)
    P, C = case.tensors["req_to_token"].shape
    rows = np.asarray(v["req_pool_indices"], dtype=np.int64)
    lens = np.asarray(v["paged_kernel_lens"], dtype=np.int64)
    ptr = np.asarray(v["kv_indptr"], dtype=np.int64)
    bs = rows.shape[0]
    starts = _starts(case, bs)
    for name in ("paged_kernel_lens", "kv_start_idx"):
        if name in v and not fits_int32(v[name]):
            raise OutOfContract(f"{name} has a value outside int32 (the kernel casts it to int32)")
    out = empty_out(case, "kv_indices")
    N = out.shape[0]
    if ptr[0] < 0:
        raise OutOfContract(f"kv_indptr[0] = {int(ptr[0])} < 0")
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
        if ptr[i + 1] != ptr[i] + n:
            raise OutOfContract(f"kv_indptr[{i + 1}] = {int(ptr[i + 1])} != kv_indptr[{i}] + paged_kernel_lens[{i}]"
                                f" = {int(ptr[i]) + n}")
        if ptr[i + 1] > N:
            raise OutOfContract(f"kv_indptr[{i + 1}] = {int(ptr[i + 1])} > kv_indices size {N}")
        out[ptr[i]:ptr[i + 1]] = table[r, s:s + n]
    return Expected({"kv_indices": out})


# the torch oracle ------------------------------------------------------------------------


def torch_ref(case: Case, device, inputs: Inputs = None) -> dict[str, torch.Tensor]:
    """kv_indices[kv_indptr[i] + j] = req_to_token[req_pool_indices[i], start[i] + j], as one
    gather over the flat stream (repeat_interleave of the request ids)."""
    import torch

    table = input_tensor(case, "req_to_token", device, inputs).long()
    rows = input_tensor(case, "req_pool_indices", device, inputs).long()
    lens = input_tensor(case, "paged_kernel_lens", device, inputs).long()
    ptr = input_tensor(case, "kv_indptr", device, inputs).long()
    if "kv_start_idx" in case.tensors:
        starts = input_tensor(case, "kv_start_idx", device, inputs).long()
    else:
        starts = torch.zeros_like(lens)
    N = case.tensors["kv_indices"].shape[0]
    out = torch.zeros(N, dtype=torch.int64, device=device)
    total = int(lens.sum())
    if total:
        req = torch.repeat_interleave(torch.arange(lens.shape[0], device=device), lens)
        j = torch.arange(total, device=device) - torch.repeat_interleave(torch.cumsum(lens, 0) - lens, lens)
        out[ptr[req] + j] = table[rows[req], starts[req] + j]
    return {"kv_indices": as_int64(out)}
