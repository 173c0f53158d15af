"""draft_extend_metadata's two oracles: `numpy_ref` (exact, torch-free; int32 overflow is `OutOfContract`)
and `torch_ref` (the unfused torch ops the kernel replaced, on the host)."""

from __future__ import annotations

import numpy as np

from ...case import Case
from ...contract import INT32_MAX, INT32_MIN, Expected, OutOfContract, fits_int32
from ...oracles.numpy_ref import cdiv32, check32, empty_out, first_at, outside
from ...oracles.torch_ref import Inputs, as_int64, input_tensor


# the NumPy oracle ------------------------------------------------------------------------


def _prefix_sums(what: str, lens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(int32 values, 0 then their running sum); a value or a sum leaving int32 is out of contract."""
    vals = [int(x) for x in lens]
    sums = [0]
    for i, x in enumerate(vals):
        if x < 0:
            raise OutOfContract(f"{what}[{i}] = {x} is negative")
        check32(f"{what}[{i}]", x)
        sums.append(check32(f"the running sum of {what} at {i + 1}", sums[-1] + x))
    return np.array(vals, dtype=np.int64), np.array(sums, dtype=np.int64)


def numpy_ref(case: Case) -> Expected:
    v, ps = case.values, case.scalars["page_size"]
    seq, cu_k = _prefix_sums("seq_lens", v["seq_lens"])
    _, cu_q = _prefix_sums("extend_seq_lens", v["extend_seq_lens"])
    out = {"cache_seqlens_int32": seq, "cu_seqlens_k": cu_k, "cu_seqlens_q": cu_q,
           "page_table": empty_out(case, "page_table")}
    W = case.tensors["page_table"].shape[1]
    for i, sl in enumerate(seq):
        cdiv32(f"cdiv(seq_lens[{i}], page_size)", int(sl), ps)
    live = np.minimum(-(-seq // ps), W)
    rtt = v["req_to_token"]  # tables gathered, then widened: only the cells read are copied
    pool = v["req_pool_indices"].astype(np.int64)
    swa = "full_to_swa_index_mapping" in case.tensors
    mapping = v["full_to_swa_index_mapping"] if swa else None
    if swa:
        out["swa_page_table"] = empty_out(case, "swa_page_table")
    for i in range(seq.size):
        n = int(live[i])
        if n == 0:  # no pages: the pool index is never read
            continue
        if not 0 <= pool[i] < rtt.shape[0]:
            raise OutOfContract(f"req_pool_indices[{i}] = {pool[i]} outside [0, {rtt.shape[0]}) on a row with pages")
        if (n - 1) * ps >= rtt.shape[1]:
            raise OutOfContract(f"row {i}: live page {n - 1} reads token {(n - 1) * ps} >= req_to_token width "
                                f"{rtt.shape[1]}")
        tokens = rtt[pool[i], np.arange(n) * ps].astype(np.int64)
        pages = np.floor_divide(tokens, ps)
        if not fits_int32(pages):
            c = first_at(outside(pages, INT32_MAX + 1, INT32_MIN))
            raise OutOfContract(f"page_table[{i}, {c}] = {pages[c]} does not fit int32")
        out["page_table"][i, :n] = pages
        if swa:
            if tokens.min() < 0 or tokens.max() >= mapping.shape[0]:
                c = first_at(outside(tokens, mapping.shape[0]))
                raise OutOfContract(f"token id req_to_token[{pool[i]}, {c * ps}] = {tokens[c]} (row {i}, page {c}) "
                                    f"lies outside the SWA mapping [0, {mapping.shape[0]})")
            swa_pages = np.floor_divide(mapping[tokens].astype(np.int64), ps)
            if not fits_int32(swa_pages):
                c = first_at(outside(swa_pages, INT32_MAX + 1, INT32_MIN))
                raise OutOfContract(f"swa_page_table[{i}, {c}] = {swa_pages[c]} does not fit int32")
            out["swa_page_table"][i, :n] = swa_pages
    if swa:
        locs = v["out_cache_loc"].astype(np.int64)
        if locs.size and (locs.min() < 0 or locs.max() >= mapping.shape[0]):
            k = first_at(outside(locs, mapping.shape[0]))
            raise OutOfContract(f"out_cache_loc[{k}] = {locs[k]} lies outside the SWA mapping [0, {mapping.shape[0]})")
        slots = mapping[locs].astype(np.int64)
        if case.tensors["swa_out_cache_loc"].dtype == "int32" and not fits_int32(slots):
            k = first_at(outside(slots, INT32_MAX + 1, INT32_MIN))
            raise OutOfContract(f"swa_out_cache_loc[{k}] = mapping[{locs[k]}] = {slots[k]} does not fit int32")
        out["swa_out_cache_loc"] = slots
    return Expected(out)


# the torch oracle ------------------------------------------------------------------------


def torch_ref(case: Case, device, inputs: Inputs = None) -> dict[str, torch.Tensor]:
    """SGLang's eager DRAFT_EXTEND_V2 update: the casts and cumsums, then bounded gathers."""
    import torch

    ps = case.scalars["page_size"]
    seq_lens = input_tensor(case, "seq_lens", device, inputs).long()
    extend = input_tensor(case, "extend_seq_lens", device, inputs).long()
    out = {"cache_seqlens_int32": as_int64(seq_lens.to(torch.int32))}
    for name, lens in (("cu_seqlens_k", seq_lens), ("cu_seqlens_q", extend)):
        cu = torch.zeros(lens.shape[0] + 1, dtype=torch.int64, device=device)
        cu[1:] = torch.cumsum(lens, 0)
        out[name] = cu
    B, W = case.tensors["page_table"].shape
    rtt = input_tensor(case, "req_to_token", device, inputs).long()
    R, T = rtt.shape
    live = torch.clamp((seq_lens + ps - 1) // ps, 0, W)
    col = torch.arange(W, device=device)[None, :]
    mask = col < live[:, None]
    # rows and columns outside the live pages are never read: point them at a valid cell
    pool = input_tensor(case, "req_pool_indices", device, inputs).long()
    pool = torch.where(live > 0, pool, 0).clamp(0, max(R - 1, 0))
    tok_col = torch.where(mask, col * ps, 0).clamp(0, max(T - 1, 0))
    tokens = rtt[pool[:, None], tok_col] if R and T else torch.zeros((B, W), dtype=torch.int64, device=device)
    out["page_table"] = torch.where(mask, torch.div(tokens, ps, rounding_mode="floor"), 0)
    if "full_to_swa_index_mapping" in case.tensors:
        mapping = input_tensor(case, "full_to_swa_index_mapping", device, inputs).long()
        safe = torch.where(mask, tokens, 0).clamp(0, max(mapping.shape[0] - 1, 0))
        out["swa_page_table"] = torch.where(mask, torch.div(mapping[safe], ps, rounding_mode="floor"), 0)
        out["swa_out_cache_loc"] = mapping[input_tensor(case, "out_cache_loc", device, inputs).long()]
    return out
