"""chunked_prefix_kv_indices's two oracles: `numpy_ref` (exact, torch-free; a broken value rule is
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
    """The value rules (pool index, start and length within the row, the offsets consistent
    with the lengths and within chunk_kv_indices), then the copy."""
    table, P, C, rows, lens, starts = request_values(case, "chunk_seq_lens", "chunk_start_idx")
    cu = np.asarray(case.values["chunk_cu_seq_lens"], dtype=np.int64)
    check_int32(case, ("chunk_start_idx", "chunk_seq_lens"))
    out = empty_out(case, "chunk_kv_indices")
    N = out.shape[0]
    if cu[0] < 0:
        raise OutOfContract(f"chunk_cu_seq_lens[0] = {int(cu[0])} < 0")
    for i in range(rows.shape[0]):
        r, s, n, o = int(rows[i]), int(starts[i]), int(lens[i]), int(cu[i])
        check_request(i, r, s, n, P, C, "chunk_seq_lens", "chunk_start_idx")
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
    table, rows, lens, starts = torch_requests(case, device, inputs, "chunk_seq_lens", "chunk_start_idx")
    cu = input_tensor(case, "chunk_cu_seq_lens", device, inputs).long()[:lens.shape[0]]
    out = torch_csr_gather(table, rows, starts, lens, cu, case.tensors["chunk_kv_indices"].shape[0], device)
    return {"chunk_kv_indices": as_int64(out)}
