"""chunked_prefix_kv_indices's two oracles: `numpy_ref` (exact, torch-free; a broken value rule is
`OutOfContract`) and `torch_ref` (the unfused torch ops the kernel replaced, on the host)."""

from __future__ import annotations

import numpy as np

from ...case import Case
from ...contract import Expected, OutOfContract, fits_int32
from ...oracles.numpy_ref import empty_out
from ...oracles.torch_ref import Inputs, as_int64, input_tensor

# the NumPy oracle ------------------------------------------------------------------------


def numpy_ref(case: Case) -> Expected:
    """The value rules (pool index, start and length within the row, the offsets consistent
    with the lengths and within chunk_kv_indices), then the copy."""
    v = case.values
    table = np.asarray(v["req_to_token"], dtype=np.int64)
    P, C = case.tensors["req_to_token"].shape
    rows = np.asarray(v["req_pool_indices"], dtype=np.int64)
    starts = np.asarray(v["chunk_start_idx"], dtype=np.int64)
    lens = np.asarray(v["chunk_seq_lens"], dtype=np.int64)
    cu = np.asarray(v["chunk_cu_seq_lens"], dtype=np.int64)
    bs = rows.shape[0]
    for name in ("chunk_start_idx", "chunk_seq_lens"):
        if not fits_int32(v[name]):
            raise OutOfContract(f"{name} has a value outside int32 (the kernel casts it to int32)")
    out = empty_out(case, "chunk_kv_indices")
    N = out.shape[0]
    if cu[0] < 0:
        raise OutOfContract(f"chunk_cu_seq_lens[0] = {int(cu[0])} < 0")
    for i in range(bs):
        r, s, n, o = int(rows[i]), int(starts[i]), int(lens[i]), int(cu[i])
        if not 0 <= r < P:
            raise OutOfContract(f"req_pool_indices[{i}] = {r} outside [0, {P})")
        if n < 0:
            raise OutOfContract(f"chunk_seq_lens[{i}] = {n} < 0")
        if s < 0:
            raise OutOfContract(f"chunk_start_idx[{i}] = {s} < 0")
        if s + n > C:
            raise OutOfContract(f"request {i}: start + length = {s} + {n} > req_to_token width {C}")
        if i + 1 < cu.shape[0] and cu[i + 1] != o + n:
            raise OutOfContract(f"chunk_cu_seq_lens[{i + 1}] = {int(cu[i + 1])} != chunk_cu_seq_lens[{i}] + "
                                f"chunk_seq_lens[{i}] = {o + n}")
        if o + n > N:
            raise OutOfContract(f"request {i} ends at {o + n} > chunk_kv_indices size {N}")
        out[o:o + n] = table[r, s:s + n]
    return Expected({"chunk_kv_indices": out})


# the torch oracle ------------------------------------------------------------------------


def torch_ref(case: Case, device, inputs: Inputs = None) -> dict[str, torch.Tensor]:
    """chunk_kv_indices[cu[i] + j] = req_to_token[req_pool_indices[i], start[i] + j], as one gather
    over the flat stream (repeat_interleave of the request ids)."""
    import torch

    table = input_tensor(case, "req_to_token", device, inputs).long()
    rows = input_tensor(case, "req_pool_indices", device, inputs).long()
    starts = input_tensor(case, "chunk_start_idx", device, inputs).long()
    lens = input_tensor(case, "chunk_seq_lens", device, inputs).long()
    cu = input_tensor(case, "chunk_cu_seq_lens", device, inputs).long()[:lens.shape[0]]
    N = case.tensors["chunk_kv_indices"].shape[0]
    out = torch.zeros(N, dtype=torch.int64, device=device)
    total = int(lens.sum())
    if total:
        req = torch.repeat_interleave(torch.arange(lens.shape[0], device=device), lens)
        j = torch.arange(total, device=device) - torch.repeat_interleave(torch.cumsum(lens, 0) - lens, lens)
        out[cu[req] + j] = table[rows[req], starts[req] + j]
    return {"chunk_kv_indices": as_int64(out)}
