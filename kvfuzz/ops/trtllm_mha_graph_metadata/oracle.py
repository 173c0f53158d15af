"""trtllm_mha_graph_metadata's two oracles: `numpy_ref` (exact, torch-free; a value past int32 or a
broken value rule is `OutOfContract`) and `torch_ref` (the unfused torch ops the fused kernel
replaced, as SGLang 0.5.14's `_apply_cuda_graph_metadata` wrote them: a copy with the offset, an
int32 cumsum into `cu_seqlens_k[1:]`, an arange into `cu_seqlens_q[1:]`, the page tables gathered
from every page_size-th slot, the mapping's lookups)."""

from __future__ import annotations

import numpy as np

from ...case import Case
from ...contract import Expected, OutOfContract
from ...oracles.numpy_ref import cdiv32, check32, empty_out
from ...oracles.torch_ref import Inputs, as_int64, input_tensor


def _live(variant: str) -> bool:
    return variant in ("default", "live_prefix")


def numpy_ref(case: Case) -> Expected:
    s, v, t = case.scalars, case.values, case.tensors
    ps, d, P, q_mode = int(s["page_size"]), int(s["seqlen_offset"]), int(s["max_seq_pages"]), int(s["q_mode"])
    skip = bool(s.get("skip_page_table", False))
    lens = np.asarray(v["seq_lens"], dtype=np.int64)
    bs = lens.shape[0]
    seq, cu = [], [0]
    for i, n in enumerate(lens.tolist()):
        if n < 0:
            raise OutOfContract(f"seq_lens[{i}] = {n} < 0")
        seq.append(check32(f"cache_seqlens[{i}] = seq_lens[{i}] + seqlen_offset", n + d))
        cu.append(check32(f"cu_seqlens_k[{i + 1}] (the running sum of cache_seqlens)", cu[-1] + seq[-1]))
    out = {"cache_seqlens": np.array(seq, np.int64), "cu_seqlens_k": np.array(cu, np.int64)}
    if q_mode == 1:
        cq = [0]
        for i, q in enumerate(np.asarray(v["qlens"], dtype=np.int64).tolist()):
            if q < 0:
                raise OutOfContract(f"qlens[{i}] = {q} < 0")
            check32(f"qlens[{i}]", q)
            cq.append(check32(f"cu_seqlens_q[{i + 1}] (the running sum of qlens)", cq[-1] + q))
        out["cu_seqlens_q"] = np.array(cq, np.int64)
    elif q_mode == 2:
        q = int(s["q_stride"])
        check32("q_stride", q)
        out["cu_seqlens_q"] = np.array([0] + [check32(f"cu_seqlens_q[{i + 1}] = {i + 1} * q_stride", (i + 1) * q)
                                              for i in range(bs)], np.int64)
    mapping = np.asarray(v["swa_mapping"], dtype=np.int64) if "swa_mapping" in v else None
    M = mapping.shape[0] if mapping is not None else 0
    if not skip:
        table = np.asarray(v["req_to_token"], dtype=np.int64)
        R = table.shape[0]
        rows = np.asarray(v["req_pool_indices"], dtype=np.int64)
        swa = "swa_page_table" in t
        out["page_table"] = empty_out(case, "page_table")
        if swa:
            out["swa_page_table"] = empty_out(case, "swa_page_table")
        for i in range(bs):
            r = int(rows[i])
            if not 0 <= r < R:
                raise OutOfContract(f"req_pool_indices[{i}] = {r} outside [0, {R})")
            n = min(cdiv32(f"cdiv(cache_seqlens[{i}], page_size)", seq[i], ps), P) if _live(case.variant) else P
            if n <= 0:
                continue
            slots = table[r, 0:n * ps:ps]
            if slots.min() < 0:
                p = int(np.argmax(slots < 0))
                raise OutOfContract(f"row {i}: slot req_to_token[{r}, {p * ps}] = {int(slots[p])} < 0 (page {p} of "
                                    f"{n} read; the page of a negative slot is not defined: Triton's // truncates)")
            out["page_table"][i, :n] = slots // ps
            if swa:
                if slots.max() >= M:
                    p = int(np.argmax(slots >= M))
                    raise OutOfContract(f"row {i}: slot req_to_token[{r}, {p * ps}] = {int(slots[p])} outside "
                                        f"swa_mapping [0, {M})")
                m = mapping[slots]
                pages = np.where(m < 0, -1, m // ps)
                for p, x in enumerate(pages.tolist()):
                    check32(f"swa_page_table[{i}, {p}] = swa_mapping[{int(slots[p])}] // {ps}", x)
                out["swa_page_table"][i, :n] = pages
    if "swa_out_cache_loc" in t:
        L = t["swa_out_cache_loc"].shape[0]
        K = min(L, t["out_cache_loc"].shape[0]) if "out_cache_loc" in t else 0
        got = np.zeros(L, np.int64)
        if K:
            locs = np.asarray(v["out_cache_loc"], dtype=np.int64)[:K]
            if locs.max() >= M:
                k = int(np.argmax(locs >= M))
                raise OutOfContract(f"out_cache_loc[{k}] = {int(locs[k])} outside swa_mapping [0, {M})")
            got[:K] = np.where(locs < 0, -1, mapping[np.maximum(locs, 0)] if M else 0)
        out["swa_out_cache_loc"] = got
    for name in ("page_table", "swa_page_table"):  # skip_page_table: untouched, nothing required
        if name in t and name not in out:
            out[name] = empty_out(case, name)
    return Expected(out)


def torch_ref(case: Case, device, inputs: Inputs = None) -> dict:
    """The eager ops: casts and cumsums, then the page tables gathered with their masks, the SWA
    lookups (-1 kept), the SWA write locations translated and zero padded."""
    import torch

    s, t = case.scalars, case.tensors
    ps, d, P, q_mode = int(s["page_size"]), int(s["seqlen_offset"]), int(s["max_seq_pages"]), int(s["q_mode"])
    seq = input_tensor(case, "seq_lens", device, inputs).long() + d
    bs = seq.shape[0]
    out = {"cache_seqlens": as_int64(seq.to(torch.int32))}
    out["cu_seqlens_k"] = torch.nn.functional.pad(torch.cumsum(seq, 0), (1, 0))
    if q_mode == 1:
        qlens = input_tensor(case, "qlens", device, inputs).long()
        out["cu_seqlens_q"] = torch.nn.functional.pad(torch.cumsum(qlens, 0), (1, 0))
    elif q_mode == 2:
        out["cu_seqlens_q"] = torch.arange(0, bs + 1, dtype=torch.int64, device=device) * int(s["q_stride"])
    mapping = input_tensor(case, "swa_mapping", device, inputs).long() if "swa_mapping" in t else None
    if not s.get("skip_page_table", False):
        table = input_tensor(case, "req_to_token", device, inputs).long()
        rows = input_tensor(case, "req_pool_indices", device, inputs).long()
        W = t["page_table"].shape[1]
        if case.variant in ("default", "live_prefix"):
            n = torch.clamp((seq + ps - 1) // ps, 0, P)
        else:
            n = torch.full_like(seq, P)
        for name in ("page_table", "swa_page_table"):
            if name not in t:
                continue
            W = t[name].shape[1]
            col = torch.arange(W, device=device)
            mask = col[None, :] < n[:, None]
            cols = torch.where(mask, col[None, :] * ps, 0).clamp(0, max(table.shape[1] - 1, 0))
            slots = table[rows[:, None], cols] if table.numel() else torch.zeros((bs, W), dtype=torch.int64,
                                                                                  device=device)
            if name == "page_table":
                pages = torch.div(slots, ps, rounding_mode="floor")
            else:
                m = mapping[torch.where(mask, slots, 0).clamp(0, max(mapping.shape[0] - 1, 0))]
                pages = torch.where(m < 0, -1, torch.div(m, ps, rounding_mode="floor"))
            out[name] = torch.where(mask, pages, 0)
    if "swa_out_cache_loc" in t:
        L = t["swa_out_cache_loc"].shape[0]
        got = torch.zeros(L, dtype=torch.int64, device=device)
        if "out_cache_loc" in t:
            locs = input_tensor(case, "out_cache_loc", device, inputs).long()[:L]
            K = locs.shape[0]
            if K:
                got[:K] = torch.where(locs < 0, -1, mapping[locs.clamp(min=0)])
        out["swa_out_cache_loc"] = got
    for name in ("page_table", "swa_page_table"):  # skip_page_table: untouched, nothing required
        if name in t and name not in out:
            out[name] = torch.zeros(t[name].shape, dtype=torch.int64, device=device)
    return out
