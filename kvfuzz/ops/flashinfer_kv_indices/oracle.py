"""flashinfer_kv_indices's two oracles: `numpy_ref` (exact, torch-free, one vectorized gather
over the flat stream; a broken value rule is `OutOfContract`) and `torch_ref` (the unfused torch
ops the kernel replaced, on the host)."""

from __future__ import annotations

import numpy as np

from ...case import Case
from ...contract import Expected, OutOfContract
from ...oracles.numpy_ref import empty_out
from ...oracles.torch_ref import Inputs, as_int64, input_tensor
from ..kv_index_common import check_int32, check_request, request_values, torch_csr_gather, torch_requests

# the NumPy oracle ------------------------------------------------------------------------


def _check_offsets(ptr: np.ndarray, lens: np.ndarray, N: int) -> None:
    if ptr[0] < 0:
        raise OutOfContract(f"kv_indptr[0] = {int(ptr[0])} < 0")
    want = ptr[:-1] + lens
    bad = np.flatnonzero(ptr[1:] != want)
    if bad.size:
        i = int(bad[0])
        raise OutOfContract(f"kv_indptr[{i + 1}] = {int(ptr[i + 1])} != kv_indptr[{i}] + paged_kernel_lens[{i}]"
                            f" = {int(want[i])}")
    past = np.flatnonzero(ptr[1:] > N)
    if past.size:
        i = int(past[0])
        raise OutOfContract(f"kv_indptr[{i + 1}] = {int(ptr[i + 1])} > kv_indices size {N}")


def _fits(values: np.ndarray, dtype, what: str) -> None:
    info = np.iinfo(dtype)
    bad = np.flatnonzero((values < info.min) | (values > info.max))
    if bad.size:
        raise OutOfContract(f"{what} {int(values[bad[0]])} does not fit kv_indices' {np.dtype(dtype).name}")


def numpy_ref(case: Case) -> Expected:
    """The value rules (pool index, start and length within the row's tokens, kv_indptr
    consistent with the lengths and within kv_indices, ids within token_mapping and the output's
    dtype), then the gather."""
    table, P, W, rows, lens, starts = request_values(case, "paged_kernel_lens", "kv_start_idx")
    ps = int(case.scalars.get("entry_page_size", 1))
    ptr = np.asarray(case.values["kv_indptr"], dtype=np.int64)
    check_int32(case, ("paged_kernel_lens", "kv_start_idx"))
    out = empty_out(case, "kv_indices")
    out_dtype = np.dtype(case.tensors["kv_indices"].dtype)
    for i in range(rows.shape[0]):
        r, s, n = int(rows[i]), int(starts[i]), int(lens[i])
        if ps > 1 and n >= 0 and s >= 0 and s + n > W * ps:
            raise OutOfContract(f"request {i}: start + length = {s} + {n} > the row's {W} pages of {ps} tokens")
        check_request(i, r, s, n, P, W * ps, "paged_kernel_lens", "kv_start_idx")
    _check_offsets(ptr, lens, out.shape[0])
    total = int(lens.sum())
    if not total:
        return Expected({"kv_indices": out})
    # each request's ids are one slice of its row (of its pages' tokens where ps > 1), and
    # kv_indptr is consistent, so they fill kv_indices[ptr[0], ptr[0] + total) in request order
    parts = []
    for r, s_, n in zip(rows.tolist(), starts.tolist(), lens.tolist()):
        if n == 0:
            continue
        if ps == 1:
            parts.append(table[r, s_:s_ + n])
        else:
            pages = table[r, s_ // ps:(s_ + n - 1) // ps + 1]
            parts.append((pages[:, None] * ps + np.arange(ps)).reshape(-1)[s_ % ps:s_ % ps + n])
    ids = np.concatenate(parts)
    if "token_mapping" in case.values:
        mapping = np.asarray(case.values["token_mapping"], dtype=np.int64)
        bad = np.flatnonzero((ids < -1) | (ids >= mapping.shape[0]))
        if bad.size:
            raise OutOfContract(f"token id {int(ids[bad[0]])} (kv_indices[{int(ptr[0]) + int(bad[0])}]) is "
                                f"neither -1 nor in token_mapping's [0, {mapping.shape[0]})")
        ids = np.where(ids >= 0, mapping[np.maximum(ids, 0)], -1)
        _fits(ids, out_dtype, "mapped id")
    else:
        _fits(ids, out_dtype, "token id")
    out[int(ptr[0]):int(ptr[0]) + total] = ids
    return Expected({"kv_indices": out})


# the torch oracle ------------------------------------------------------------------------


def torch_ref(case: Case, device, inputs: Inputs = None) -> dict[str, torch.Tensor]:
    """kv_indices[kv_indptr[i] + j] = the id of token start[i] + j of row req_pool_indices[i]
    (a page entry times ps plus the offset in its page), through token_mapping where given, as
    one gather over the flat stream (repeat_interleave of the request ids)."""
    table, rows, lens, starts = torch_requests(case, device, inputs, "paged_kernel_lens", "kv_start_idx")
    ptr = input_tensor(case, "kv_indptr", device, inputs).long()
    mapping = input_tensor(case, "token_mapping", device, inputs).long() if "token_mapping" in case.tensors else None
    out = torch_csr_gather(table, rows, starts, lens, ptr, case.tensors["kv_indices"].shape[0], device,
                           int(case.scalars.get("entry_page_size", 1)), mapping)
    return {"kv_indices": as_int64(out)}
