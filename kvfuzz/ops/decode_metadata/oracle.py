"""decode_metadata's two oracles: `numpy_ref` (exact, torch-free; int32 overflow is `OutOfContract`)
and `torch_ref` (the unfused torch ops the kernel replaced, on the host)."""

from __future__ import annotations

import numpy as np

from ...case import Case
from ...contract import Expected, OutOfContract, fits_int32
from ...oracles.numpy_ref import cdiv, check32, empty_out, first_at, not_int32, outside
from ...oracles.torch_ref import Inputs, as_int64, input_tensor


# the NumPy oracle ------------------------------------------------------------------------


def numpy_ref(case: Case) -> Expected:
    s, v = case.scalars, case.values
    ps, delta, P = s["page_size"], s["seq_len_delta"], s["max_seq_pages"]
    seq_lens = [int(x) for x in v["seq_lens"]]
    out = {n: empty_out(case, n) for n in ("cache_seqlens_int32", "cu_seqlens_k", "page_table")}

    acc = 0
    for i, sl in enumerate(seq_lens):
        length = check32(f"seq_lens[{i}] + seq_len_delta", sl + delta)
        if length < 0:
            raise OutOfContract(f"seq_lens[{i}] + seq_len_delta = {length} is negative")
        out["cache_seqlens_int32"][i] = length
        out["cu_seqlens_k"][i] = acc
        acc = check32(f"cu_seqlens_k[{i + 1}]", acc + length)
    out["cu_seqlens_k"][len(seq_lens)] = acc

    if P > 0:
        rtt = v["req_to_token"]  # gathered, then widened: only the cells read are copied
        rows = v["req_pool_indices"].astype(np.int64)
        if rows.size and (rows.min() < 0 or rows.max() >= rtt.shape[0]):
            i = first_at(outside(rows, rtt.shape[0]))
            raise OutOfContract(f"req_pool_indices[{i}] = {rows[i]} outside [0, {rtt.shape[0]})")
        cols = np.arange(P, dtype=np.int64) * ps
        if cols[-1] >= rtt.shape[1]:
            raise OutOfContract(f"(max_seq_pages - 1) * page_size = {cols[-1]} >= req_to_token width {rtt.shape[1]}")
        if s.get("src_is_read_table"):  # 0.5.19: page ids, one per column, copied verbatim
            _read_tables(case, out, rtt, rows, P)
            return Expected(out)
        tokens = rtt[rows[:, None], cols[None, :]].astype(np.int64)
        pages = np.floor_divide(tokens, ps)
        if "full_v2p" in case.tensors:
            pages = _v2p(v["full_v2p"], pages, "full_v2p")
        pages = pages * s.get("kernel_page_multiplier", 1)  # 0.5.17-0.5.18: a physical page's first block
        if not fits_int32(pages):
            raise OutOfContract(not_int32("page_table", pages))
        out["page_table"][:, :P] = pages
        if "swa_page_table" in case.tensors:
            if "swa_v2p" in case.tensors:  # unified SWA pool: the same virtual pages, its own table
                swa = _v2p(v["swa_v2p"], np.floor_divide(tokens, ps), "swa_v2p")
            else:  # static SWA pool: token slot -> SWA slot, then its page
                mapping = v["full_to_swa_index_mapping"]
                if tokens.size and (tokens.min() < 0 or tokens.max() >= mapping.shape[0]):
                    i, c = first_at(outside(tokens, mapping.shape[0]))
                    raise OutOfContract(f"token id req_to_token[{rows[i]}, {c * ps}] = {tokens[i, c]} (row {i}, "
                                        f"page {c}) lies outside the SWA mapping [0, {mapping.shape[0]})")
                swa = np.floor_divide(mapping[tokens].astype(np.int64), ps)
            if not fits_int32(swa):
                raise OutOfContract(not_int32("swa_page_table", swa))
            out["swa_page_table"] = empty_out(case, "swa_page_table")
            out["swa_page_table"][:, :P] = swa
        if s.get("zero_tail"):  # columns past each row's live pages are written 0
            live = np.array([cdiv(sl + delta, ps) for sl in seq_lens], dtype=np.int64).reshape(-1, 1)
            dead = np.arange(P)[None, :] >= live
            for name in ("page_table", "swa_page_table"):
                if name in out:
                    out[name][:, :P][dead] = 0
    elif "swa_page_table" in case.tensors:
        out["swa_page_table"] = empty_out(case, "swa_page_table")
    return Expected(out)


def _read_tables(case: Case, out: dict, rtt: np.ndarray, rows: np.ndarray, P: int) -> None:
    """src_is_read_table: page_table[i, c] = req_to_token[rows[i], c], swa_page_table from swa_src_table."""
    out["page_table"][:, :P] = rtt[rows[:, None], np.arange(P)[None, :]]
    if "swa_page_table" in case.tensors:
        src = case.values["swa_src_table"]
        out["swa_page_table"] = empty_out(case, "swa_page_table")
        out["swa_page_table"][:, :P] = src[rows[:, None], np.arange(P)[None, :]]
    for name in ("page_table", "swa_page_table"):
        if name in out and not fits_int32(out[name]):
            raise OutOfContract(not_int32(name, out[name]))


def _v2p(table: np.ndarray, pages: np.ndarray, name: str) -> np.ndarray:
    """table[page] for every virtual page, the tombstone -1 mapped to the sink page 0; a negative
    page (a tombstoned token slot) reads page 0 (0.5.23's `tl.maximum(page_ids, 0)`)."""
    pages = np.maximum(pages, 0)
    if pages.size and (pages.min() < 0 or pages.max() >= table.shape[0]):
        at = first_at(outside(pages, table.shape[0]))
        raise OutOfContract(f"virtual page {pages[at]} (row {at[0]}, page {at[1]}) lies outside {name} "
                            f"[0, {table.shape[0]})")
    phys = table[pages].astype(np.int64)  # gathered, then widened: only the entries read are copied
    if phys.size and phys.min() < -1:
        at = first_at(phys < -1)
        raise OutOfContract(f"{name}[{pages[at]}] = {phys[at]} (row {at[0]}, page {at[1]}) is below -1 "
                            "(neither a physical page nor the tombstone)")
    return np.maximum(phys, 0)


# the torch oracle ------------------------------------------------------------------------


def torch_ref(case: Case, device, inputs: Inputs = None) -> dict[str, torch.Tensor]:
    import torch

    s = case.scalars
    ps, delta, P = s["page_size"], s["seq_len_delta"], s["max_seq_pages"]
    seq_lens = input_tensor(case, "seq_lens", device, inputs)
    B = seq_lens.shape[0]
    # SGLang's unfused sequence (flashattention_backend before the fused kernel):
    cache_seqlens = (seq_lens + delta).to(torch.int32)
    cu_seqlens_k = torch.zeros(B + 1, dtype=torch.int32, device=device)
    cu_seqlens_k[1:].copy_(torch.cumsum(cache_seqlens, 0, dtype=torch.int32))
    out = {"cache_seqlens_int32": as_int64(cache_seqlens), "cu_seqlens_k": as_int64(cu_seqlens_k)}

    pt_shape = case.tensors["page_table"].shape
    page_table = torch.zeros(pt_shape, dtype=torch.int64, device=device)
    swa = "swa_page_table" in case.tensors
    if swa:
        swa_table = torch.zeros(case.tensors["swa_page_table"].shape, dtype=torch.int64, device=device)
    if P > 0:
        req_to_token = input_tensor(case, "req_to_token", device, inputs)
        pool = input_tensor(case, "req_pool_indices", device, inputs).long()
        strided = input_tensor(case, "strided_indices", device, inputs).long()
        if s.get("src_is_read_table"):  # 0.5.19: the read table's page ids, verbatim
            cols = torch.arange(P, device=device)
            page_table[:, :P] = req_to_token[pool[:, None], cols[None, :]]
            if swa:
                swa_table[:, :P] = input_tensor(case, "swa_src_table", device, inputs)[pool[:, None], cols[None, :]]
            out["page_table"] = as_int64(page_table)
            if swa:
                out["swa_page_table"] = as_int64(swa_table)
            return out
        tokens = req_to_token[pool[:, None], strided[:P][None, :]].long()
        pages = torch.div(tokens, ps, rounding_mode="floor")
        if "full_v2p" in case.tensors:  # unified memory: virtual page -> physical, -1 -> the sink page 0
            pages = input_tensor(case, "full_v2p", device, inputs).long()[pages.clamp(min=0)].clamp(min=0)
        page_table[:, :P] = pages * s.get("kernel_page_multiplier", 1)  # 0.5.17-0.5.18
        if swa and "swa_v2p" in case.tensors:  # the unified SWA pool's table, over the same virtual pages
            swa_table[:, :P] = input_tensor(case, "swa_v2p", device, inputs).long()[(tokens // ps).clamp(min=0)].clamp(min=0)
        elif swa:
            mapping = input_tensor(case, "full_to_swa_index_mapping", device, inputs)
            swa_table[:, :P] = mapping[tokens] // ps
        if s.get("zero_tail"):  # SGLang 0.5.23: the columns past each row's live pages become 0
            live = (cache_seqlens.long() + ps - 1) // ps
            dead = torch.arange(P, device=device)[None, :] >= live[:, None]
            page_table[:, :P].masked_fill_(dead, 0)
            if swa:
                swa_table[:, :P].masked_fill_(dead, 0)
    out["page_table"] = as_int64(page_table)
    if swa:
        out["swa_page_table"] = as_int64(swa_table)
    return out
