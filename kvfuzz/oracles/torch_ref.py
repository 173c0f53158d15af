"""The torch oracle: the unfused torch operations each fused kernel replaced.

kvfuzz runs it on the host (CPU torch), whatever device runs the kernel under test: it is a
second, independent implementation of each contract beside the NumPy oracle, and on a GPU its
dozen tiny kernels per case would take more device time than the kernel under test itself.
Returns int64 tensors shaped like the outputs (only the contract's required cells are
meaningful).

Each function takes `inputs`, the input tensors as views (a batch passes views of its host
image), or reads the case's values. The functions are device-agnostic torch: `device` says
where to build their tensors. torch is imported where it is used: the campaign's own process
loads the contracts but runs no torch oracle, and importing torch there (1.5 s) would delay
its start.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from ..case import Case

Inputs = Mapping[str, "torch.Tensor"] | None


def _t(case: Case, name: str, device, inputs: Inputs = None) -> torch.Tensor:
    if inputs is not None:
        return inputs[name]
    import torch

    return torch.from_numpy(np.array(case.values[name])).to(device)


def _out(t: torch.Tensor) -> torch.Tensor:
    import torch

    return t.to(torch.int64)


def decode_metadata(case: Case, device, inputs: Inputs = None) -> dict[str, torch.Tensor]:
    import torch

    s = case.scalars
    ps, delta, P = s["page_size"], s["seq_len_delta"], s["max_seq_pages"]
    seq_lens = _t(case, "seq_lens", device, inputs)
    B = seq_lens.shape[0]
    # SGLang's unfused sequence (flashattention_backend before the fused kernel):
    cache_seqlens = (seq_lens + delta).to(torch.int32)
    cu_seqlens_k = torch.zeros(B + 1, dtype=torch.int32, device=device)
    cu_seqlens_k[1:].copy_(torch.cumsum(cache_seqlens, 0, dtype=torch.int32))
    out = {"cache_seqlens_int32": _out(cache_seqlens), "cu_seqlens_k": _out(cu_seqlens_k)}

    pt_shape = case.tensors["page_table"].shape
    page_table = torch.zeros(pt_shape, dtype=torch.int64, device=device)
    swa = "swa_page_table" in case.tensors
    if swa:
        swa_table = torch.zeros(case.tensors["swa_page_table"].shape, dtype=torch.int64, device=device)
    if P > 0:
        req_to_token = _t(case, "req_to_token", device, inputs)
        pool = _t(case, "req_pool_indices", device, inputs).long()
        strided = _t(case, "strided_indices", device, inputs).long()
        if s.get("src_is_read_table"):  # 0.5.19: the read table's page ids, verbatim
            cols = torch.arange(P, device=device)
            page_table[:, :P] = req_to_token[pool[:, None], cols[None, :]]
            if swa:
                swa_table[:, :P] = _t(case, "swa_src_table", device, inputs)[pool[:, None], cols[None, :]]
            out["page_table"] = _out(page_table)
            if swa:
                out["swa_page_table"] = _out(swa_table)
            return out
        tokens = req_to_token[pool[:, None], strided[:P][None, :]].long()
        pages = torch.div(tokens, ps, rounding_mode="floor")
        if "full_v2p" in case.tensors:  # unified memory: virtual page -> physical, -1 -> the sink page 0
            pages = _t(case, "full_v2p", device, inputs).long()[pages].clamp(min=0)
        page_table[:, :P] = pages * s.get("kernel_page_multiplier", 1)  # 0.5.17-0.5.18
        if swa and "swa_v2p" in case.tensors:  # the unified SWA pool's table, over the same virtual pages
            swa_table[:, :P] = _t(case, "swa_v2p", device, inputs).long()[tokens // ps].clamp(min=0)
        elif swa:
            mapping = _t(case, "full_to_swa_index_mapping", device, inputs)
            swa_table[:, :P] = mapping[tokens] // ps
        if s.get("zero_tail"):  # SGLang 0.5.23: the columns past each row's live pages become 0
            live = (cache_seqlens.long() + ps - 1) // ps
            dead = torch.arange(P, device=device)[None, :] >= live[:, None]
            page_table[:, :P].masked_fill_(dead, 0)
            if swa:
                swa_table[:, :P].masked_fill_(dead, 0)
    out["page_table"] = _out(page_table)
    if swa:
        out["swa_page_table"] = _out(swa_table)
    return out


def swa_spec_page_table(case: Case, device, inputs: Inputs = None) -> dict[str, torch.Tensor]:
    import torch

    R = case.scalars["speculative_num_draft_tokens"]
    a = _t(case, "page_table_a", device, inputs).long()
    b = _t(case, "page_table_b", device, inputs).long()
    la = _t(case, "seq_len_a", device, inputs).long()
    lb = _t(case, "seq_len_b", device, inputs).long()
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
    return {"page_table_dst": _out(dst)}


def num_kv_splits(case: Case, device, inputs: Inputs = None) -> dict[str, torch.Tensor]:
    import torch

    s = case.scalars
    num_seq, num_group = s["num_seq"], s["num_group"]
    lens = _t(case, "seq_lens", device, inputs).long()[:num_seq]
    live = lens >= 1 if case.variant == "default" else torch.ones_like(lens, dtype=torch.bool)
    one = torch.ones((), dtype=torch.long, device=device)
    # no host round trip (a batch synchronises once): with no live row, mx = mn = 1
    if lens.numel():
        any_live = live.any()
        mx = torch.where(any_live, torch.where(live, lens, torch.zeros_like(lens)).max(), one)
        mn = torch.where(any_live, torch.where(live, lens, torch.full_like(lens, torch.iinfo(torch.int64).max)).min(),
                         one)
    else:
        mx = mn = one
    mn = torch.where(mx * 8 < mn * 10, mx, mn)

    def cdiv(a, b):
        return (a + b - 1) // b

    s1 = torch.clamp(cdiv(mx, mn), max=s["max_kv_splits"])
    c1 = cdiv(mx, s1)
    ext = torch.log2(mx.to(torch.float32) / 64.0).clamp(min=1.0)
    e = (torch.full((), s["device_core_count"], dtype=torch.float32, device=device) * ext).to(torch.int32).long()
    g = s["num_head"] // s["num_kv_head"]
    per_seq = s["num_head"] if g == 1 else -(-s["num_head"] // min(16, g))
    tg = num_seq * num_group * per_seq
    s2 = torch.clamp(cdiv(e, tg), max=s["max_kv_splits"])
    c2 = cdiv(mx, s2)
    per_row = torch.maximum(cdiv(lens, c1), cdiv(lens, c2))
    out = torch.zeros(case.tensors["num_kv_splits"].shape, dtype=torch.int64, device=device)
    out[: num_seq * num_group] = per_row[:, None].expand(-1, num_group).reshape(-1)  # expand: no sync
    result = {"num_kv_splits": _out(out)}
    if "uneven_batch" in case.tensors:  # SGLang 0.5.23: min < max after the ratio rule (mn above)
        result["uneven_batch"] = (mn < mx).to(torch.int64).reshape(1)
    return result


def draft_extend_metadata(case: Case, device, inputs: Inputs = None) -> dict[str, torch.Tensor]:
    """SGLang's eager DRAFT_EXTEND_V2 update: the casts and cumsums, then bounded gathers."""
    import torch

    ps = case.scalars["page_size"]
    seq_lens = _t(case, "seq_lens", device, inputs).long()
    extend = _t(case, "extend_seq_lens", device, inputs).long()
    out = {"cache_seqlens_int32": _out(seq_lens.to(torch.int32))}
    for name, lens in (("cu_seqlens_k", seq_lens), ("cu_seqlens_q", extend)):
        cu = torch.zeros(lens.shape[0] + 1, dtype=torch.int64, device=device)
        cu[1:] = torch.cumsum(lens, 0)
        out[name] = cu
    B, W = case.tensors["page_table"].shape
    rtt = _t(case, "req_to_token", device, inputs).long()
    R, T = rtt.shape
    live = torch.clamp((seq_lens + ps - 1) // ps, 0, W)
    col = torch.arange(W, device=device)[None, :]
    mask = col < live[:, None]
    # rows and columns outside the live pages are never read: point them at a valid cell
    pool = torch.where(live > 0, _t(case, "req_pool_indices", device, inputs).long(), 0).clamp(0, max(R - 1, 0))
    tok_col = torch.where(mask, col * ps, 0).clamp(0, max(T - 1, 0))
    tokens = rtt[pool[:, None], tok_col] if R and T else torch.zeros((B, W), dtype=torch.int64, device=device)
    out["page_table"] = torch.where(mask, torch.div(tokens, ps, rounding_mode="floor"), 0)
    if "full_to_swa_index_mapping" in case.tensors:
        mapping = _t(case, "full_to_swa_index_mapping", device, inputs).long()
        safe = torch.where(mask, tokens, 0).clamp(0, max(mapping.shape[0] - 1, 0))
        out["swa_page_table"] = torch.where(mask, torch.div(mapping[safe], ps, rounding_mode="floor"), 0)
        out["swa_out_cache_loc"] = mapping[_t(case, "out_cache_loc", device, inputs).long()]
    return out


def q8kv8_topk_length(case: Case, device, inputs: Inputs = None) -> dict[str, torch.Tensor]:
    """The unfused derivation SGLang's docstring names: ((indices >= 0) * ramp).amax, min 1."""
    import torch

    idx = _t(case, "indices", device, inputs)
    S, K = idx.shape
    if K == 0:
        return {"topk_length": torch.ones(S, dtype=torch.int64, device=device)}
    ramp = torch.arange(1, K + 1, device=device)
    return {"topk_length": ((idx >= 0) * ramp).amax(dim=1).clamp(min=1).to(torch.int64)}
