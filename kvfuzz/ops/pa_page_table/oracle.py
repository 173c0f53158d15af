"""pa_page_table's two oracles: `numpy_ref` (exact, torch-free; a broken value rule is
`OutOfContract`) and `torch_ref` (unfused torch ops: the row's positions as one (bs, W) grid,
prefill columns kept, window columns shifted by the gap, then one gather)."""

from __future__ import annotations

import numpy as np

from ...case import Case
from ...contract import Expected, OutOfContract
from ...oracles.numpy_ref import empty_out
from ...oracles.torch_ref import Inputs, as_int64, input_tensor


def numpy_ref(case: Case) -> Expected:
    """The value rules (pool index inside req_to_token and prefill_lens, 0 <= f <= n <= C, every
    kv_len <= pa_max_len), then each row: the prefill's slots, then the window's."""
    v = case.values
    w = int(case.scalars["window_size"])
    cap = int(case.scalars["pa_max_len"])
    table = np.asarray(v["req_to_token"], dtype=np.int64)
    P, C = case.tensors["req_to_token"].shape
    rows = np.asarray(v["req_pool_indices"], dtype=np.int64)
    lens = np.asarray(v["seq_lens"], dtype=np.int64)
    pf = np.asarray(v["prefill_lens"], dtype=np.int64)
    out = empty_out(case, "dst_page_table")
    kv = np.zeros(rows.shape[0], np.int64)
    for i in range(rows.shape[0]):
        r, n = int(rows[i]), int(lens[i])
        if not 0 <= r < P:
            raise OutOfContract(f"req_pool_indices[{i}] = {r} outside [0, {P})")
        if r >= pf.shape[0]:
            raise OutOfContract(f"req_pool_indices[{i}] = {r} past prefill_lens's {pf.shape[0]} entries")
        f = int(pf[r])
        if n < 0:
            raise OutOfContract(f"seq_lens[{i}] = {n} < 0")
        if n > C:
            raise OutOfContract(f"seq_lens[{i}] = {n} > req_to_token width {C}")
        if f < 0:
            raise OutOfContract(f"request {i}: prefill_lens[{r}] = {f} < 0")
        if f > n:
            raise OutOfContract(f"request {i}: prefill_lens[{r}] = {f} > seq_lens[{i}] = {n} (a decoding request "
                                "is at least as long as its prefill)")
        start = max(f, n - w)
        k = f + (n - start)  # = min(n, f + w)
        if k > cap:
            past = (f" and dst_page_table's width {out.shape[1]} (the kernel writes on past the row)"
                    if k > out.shape[1] else "")
            raise OutOfContract(f"request {i}: kv_len = min({n}, {f} + {w}) = {k} > pa_max_len {cap}{past}")
        out[i, :f] = table[r, :f]
        out[i, f:k] = table[r, start:n]
        kv[i] = k
    return Expected({"dst_page_table": out, "dst_kv_lens": kv})


def torch_ref(case: Case, device, inputs: Inputs = None) -> dict:
    """kv_len = min(n, f + w); position j < kv_len of row i is j in the prefill (j < f), else
    j + (n - kv_len) (the gap the window skips); one gather of req_to_token at those positions."""
    import torch

    w = int(case.scalars["window_size"])
    table = input_tensor(case, "req_to_token", device, inputs).long()
    rows = input_tensor(case, "req_pool_indices", device, inputs).long()
    lens = input_tensor(case, "seq_lens", device, inputs).long()
    pf = input_tensor(case, "prefill_lens", device, inputs).long()
    R, W = case.tensors["dst_page_table"].shape
    out = torch.zeros((R, W), dtype=torch.int64, device=device)
    f = pf[rows] if R else torch.zeros(0, dtype=torch.int64, device=device)
    kv = torch.minimum(lens, f + w)
    gap = lens - kv
    j = torch.arange(W, device=device)[None, :]
    live = j < kv[:, None]
    if bool(live.any()):
        pos = torch.where(j < f[:, None], j, j + gap[:, None])
        req, col = live.nonzero(as_tuple=True)
        out[req, col] = table[rows[req], pos[req, col]]
    return {"dst_page_table": as_int64(out), "dst_kv_lens": as_int64(kv)}
