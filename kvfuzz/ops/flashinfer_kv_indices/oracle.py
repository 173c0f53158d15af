"""flashinfer_kv_indices's two oracles: `numpy_ref` (exact, torch-free; a broken value rule is
`OutOfContract`) and `torch_ref` (the unfused torch ops the kernel replaced, on the host)."""

from __future__ import annotations

import numpy as np

from ...case import Case
from ...contract import Expected, OutOfContract
from ...oracles.numpy_ref import empty_out
from ...oracles.torch_ref import Inputs, as_int64, input_tensor
from ..kv_index_common import check_int32, check_request, request_values, torch_csr_gather, torch_requests

# the NumPy oracle ------------------------------------------------------------------------


def numpy_ref(case: Case) -> Expected:
    """The value rules (pool index, start and length within the row, kv_indptr consistent with
    the lengths and within kv_indices), then the copy."""
    table, P, C, rows, lens, starts = request_values(case, "paged_kernel_lens", "kv_start_idx")
    ptr = np.asarray(case.values["kv_indptr"], dtype=np.int64)
    check_int32(case, ("paged_kernel_lens", "kv_start_idx"))
    out = empty_out(case, "kv_indices")
    N = out.shape[0]
    if ptr[0] < 0:
        raise OutOfContract(f"kv_indptr[0] = {int(ptr[0])} < 0")
    for i in range(rows.shape[0]):
        r, s, n = int(rows[i]), int(starts[i]), int(lens[i])
        check_request(i, r, s, n, P, C, "paged_kernel_lens", "kv_start_idx")
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
    table, rows, lens, starts = torch_requests(case, device, inputs, "paged_kernel_lens", "kv_start_idx")
    ptr = input_tensor(case, "kv_indptr", device, inputs).long()
    out = torch_csr_gather(table, rows, starts, lens, ptr, case.tensors["kv_indices"].shape[0], device)
    return {"kv_indices": as_int64(out)}
