"""trtllm_mha_kv_indices's two oracles: `numpy_ref` (exact, torch-free; a broken value rule is
`OutOfContract`) and `torch_ref` (the unfused torch ops the kernel replaced: SGLang 0.5.13's
`req_to_token[req_pool_indices][:, ::page_size] // page_size` and its SWA translation)."""

from __future__ import annotations

import numpy as np

from ...case import Case
from ...contract import INT32_MAX, Expected, OutOfContract
from ...oracles.numpy_ref import empty_out
from ...oracles.torch_ref import Inputs, as_int64, input_tensor

# the NumPy oracle ------------------------------------------------------------------------


def numpy_ref(case: Case) -> Expected:
    """The value rules (pool index, length within the row, the pages within page_table's width,
    the slots read >= 0 and, with SWA, inside the mapping, whose entries read are SWA slots),
    then the page of every ps-th token (and its SWA page)."""
    v = case.values
    ps = int(case.scalars["page_size"])
    table = np.asarray(v["req_to_token"], dtype=np.int64)
    P, C = case.tensors["req_to_token"].shape
    rows = np.asarray(v["req_pool_indices"], dtype=np.int64)
    lens = np.asarray(v["seq_lens"], dtype=np.int64)
    swa = np.asarray(v["full_to_swa"], dtype=np.int64) if "full_to_swa" in v else None
    out = empty_out(case, "page_table")
    swa_out = empty_out(case, "swa_page_table") if swa is not None else None
    W = out.shape[1]
    for i in range(rows.shape[0]):
        r, n = int(rows[i]), int(lens[i])
        if not 0 <= r < P:
            raise OutOfContract(f"req_pool_indices[{i}] = {r} outside [0, {P})")
        if n < 0:
            raise OutOfContract(f"seq_lens[{i}] = {n} < 0")
        if n > C:
            raise OutOfContract(f"seq_lens[{i}] = {n} > req_to_token width {C}")
        pages = -(-n // ps)
        if pages > W:
            raise OutOfContract(f"request {i}: ceil({n} / {ps}) = {pages} pages > page_table width {W}")
        slots = table[r, 0:n:ps]
        if slots.size and slots.min() < 0:
            p = int(np.argmax(slots < 0))
            raise OutOfContract(f"request {i}: slot req_to_token[{r}, {p * ps}] = {int(slots[p])} < 0 (the page of a "
                                "negative slot is not defined: Triton's // truncates)")
        out[i, :pages] = slots // ps
        if swa is not None:
            if slots.size and slots.max() >= swa.shape[0]:
                p = int(np.argmax(slots >= swa.shape[0]))
                raise OutOfContract(f"request {i}: slot req_to_token[{r}, {p * ps}] = {int(slots[p])} past "
                                    f"full_to_swa's {swa.shape[0]} entries")
            mapped = swa[slots]
            bad = (mapped < 0) | (mapped > INT32_MAX)
            if bad.any():
                p = int(np.argmax(bad))
                raise OutOfContract(f"request {i}: full_to_swa[{int(slots[p])}] = {int(mapped[p])} outside [0, 2^31) "
                                    "(an SWA slot)")
            swa_out[i, :pages] = mapped // ps
    result = {"page_table": out}
    if swa_out is not None:
        result["swa_page_table"] = swa_out
    return Expected(result)


# the torch oracle ------------------------------------------------------------------------


def torch_ref(case: Case, device, inputs: Inputs = None) -> dict[str, torch.Tensor]:
    """page_table[i, p] = req_to_token[req_pool_indices[i], p * ps] // ps for p < ceil(seq_lens[i] / ps),
    as one gather over a (bs, W) grid of page slots; swa_page_table the same through full_to_swa."""
    import torch

    ps = int(case.scalars["page_size"])
    table = input_tensor(case, "req_to_token", device, inputs).long()
    rows = input_tensor(case, "req_pool_indices", device, inputs).long()
    lens = input_tensor(case, "seq_lens", device, inputs).long()
    R, W = case.tensors["page_table"].shape
    out = torch.zeros((R, W), dtype=torch.int64, device=device)
    p = torch.arange(W, device=device)
    live = p[None, :] < torch.div(lens + ps - 1, ps, rounding_mode="floor")[:, None]  # (bs, W)
    result = {"page_table": out}
    swa = None
    if "full_to_swa" in case.tensors:
        swa = input_tensor(case, "full_to_swa", device, inputs).long()
        result["swa_page_table"] = torch.zeros((R, W), dtype=torch.int64, device=device)
    if bool(live.any()):
        req, page = live.nonzero(as_tuple=True)
        slots = table[rows[req], page * ps]
        out[req, page] = torch.div(slots, ps, rounding_mode="floor")
        if swa is not None:
            result["swa_page_table"][req, page] = torch.div(swa[slots], ps, rounding_mode="floor")
    return {name: as_int64(t) for name, t in result.items()}
