"""swa_spec_page_table's two oracles: `numpy_ref` (exact, torch-free; int32 overflow is `OutOfContract`)
and `torch_ref` (the unfused torch ops the kernel replaced, on the host)."""

from __future__ import annotations

import numpy as np

from ...case import Case
from ...contract import Expected, OutOfContract
from ...oracles.numpy_ref import empty_out
from ...oracles.torch_ref import Inputs, as_int64, input_tensor


# the NumPy oracle ------------------------------------------------------------------------


def numpy_ref(case: Case) -> Expected:
    v, R = case.values, case.scalars["speculative_num_draft_tokens"]
    a, b = v["page_table_a"].astype(np.int64), v["page_table_b"].astype(np.int64)
    la_all, lb_all = v["seq_len_a"].astype(np.int64), v["seq_len_b"].astype(np.int64)
    dst = empty_out(case, "page_table_dst")
    width = dst.shape[1]
    for m in range(la_all.size * R):
        la, lb = int(la_all[m // R]), int(lb_all[m])
        if not 0 <= la <= a.shape[1]:
            raise OutOfContract(f"seq_len_a[{m // R}] = {la} outside [0, {a.shape[1]}]")
        if not 0 <= lb <= b.shape[1]:
            raise OutOfContract(f"seq_len_b[{m}] = {lb} outside [0, {b.shape[1]}]")
        if la + lb > width:
            raise OutOfContract(f"row {m}: la + lb = {la + lb} > page_table_dst width {width}")
        dst[m, :la] = a[m // R, :la]
        dst[m, la : la + lb] = b[m, :lb]
    return Expected({"page_table_dst": dst})


# the torch oracle ------------------------------------------------------------------------


def torch_ref(case: Case, device, inputs: Inputs = None) -> dict[str, torch.Tensor]:
    import torch

    R = case.scalars["speculative_num_draft_tokens"]
    a = input_tensor(case, "page_table_a", device, inputs).long()
    b = input_tensor(case, "page_table_b", device, inputs).long()
    la = input_tensor(case, "seq_len_a", device, inputs).long()
    lb = input_tensor(case, "seq_len_b", device, inputs).long()
    M, W = case.tensors["page_table_dst"].shape
    rows = la.shape[0] * R
    col = torch.arange(W, device=device)[None, :]
    la_m = la[:, None].expand(-1, R).reshape(-1, 1)  # la for each expanded row (expand: no sync)
    lb_m = lb[:rows, None]
    a_rows = a[:, None, :].expand(-1, R, -1).reshape(a.shape[0] * R, a.shape[1])[:rows]
    a_part = torch.gather(a_rows, 1, col.clamp(max=a.shape[1] - 1).expand(rows, W)) if a.shape[1] else None
    b_idx = (col - la_m).clamp(min=0, max=max(b.shape[1] - 1, 0))
    b_part = torch.gather(b[:rows], 1, b_idx) if b.shape[1] else None
    dst = torch.zeros((M, W), dtype=torch.int64, device=device)
    if a_part is not None:
        dst[:rows] = torch.where(col < la_m, a_part, dst[:rows])
    if b_part is not None:
        in_b = (col >= la_m) & (col < la_m + lb_m)
        dst[:rows] = torch.where(in_b, b_part, dst[:rows])
    return {"page_table_dst": as_int64(dst)}
