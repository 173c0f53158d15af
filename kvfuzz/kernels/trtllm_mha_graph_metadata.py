"""kvfuzz's own ``update_trtllm_mha_graph_metadata``: the TRT-LLM MHA backend's CUDA-graph metadata
update in one launch (SGLang 0.5.19's keyword-only signature).

Written from kvfuzz's contract (``kvfuzz/ops/trtllm_mha_graph_metadata/contract.py``): with
``s_i = seq_lens[i] + seqlen_offset`` and ``n_i = min(cdiv(s_i, page_size), max_seq_pages)``::

    cache_seqlens[i] = s_i;  cu_seqlens_k[1:] = cumsum(s);  cu_seqlens_q[1:] = cumsum(qlens) (q_mode 1)
                                                            or (i + 1) * q_stride (q_mode 2)
    page_table[i, p] = req_to_token[req_pool_indices[i], p * page_size] // page_size   for p < n_i
    swa_page_table[i, p] = -1 if m < 0 else m // page_size, m = swa_mapping[that slot]
    swa_out_cache_loc[k] = -1 if l < 0 else swa_mapping[l], l = out_cache_loc[k], for k < min(L, len(out_cache_loc));
                           0 for the rest of its length L

cu_seqlens_k[0], cu_seqlens_q[0] and every page-table cell past a row's n_i pages are left as
they are; ``skip_page_table`` leaves both tables alone. Unlike SGLang's kernel, every load and
store is masked to its tensor (a pool index outside the table, a page past a table's width or
past req_to_token's row, a slot or write location outside the mapping read and write nothing
outside their tensors), the prefix sums run over the batch in blocks with a carry (no
next_power_of_2(bs)-wide block), and the sizes and strides are runtime arguments (no
specialisation on them). Metadata checks only (no host sync: CUDA-graph capturable); bad
arguments raise ``ValueError``.
"""

from __future__ import annotations

import triton
import triton.language as tl

from ._args import _INDEX, _INT32, _int_arg, _tensor_arg

__all__ = ["update_trtllm_mha_graph_metadata"]

Q_MODE_NONE, Q_MODE_CUMSUM, Q_MODE_STRIDED = 0, 1, 2
PAGE_BLOCK = 512  # page-table columns per loop step, and swa_out_cache_loc cells per program
BS_BLOCK = 1024  # requests per step of the prefix sums


@triton.jit(do_not_specialize=["R", "C", "table_s", "M", "N", "W", "pt_s", "W2", "spt_s", "L", "bs", "d", "P",
                               "q_stride", "K"])
def _graph_metadata_kernel(rows, lens, table, R, C, table_s, mapping, M, locs, N, qlens, cache, cu_k, cu_q, pt, W,
                           pt_s, spt, W2, spt_s, sout, L, bs, d, P, q_stride, K, PS: tl.constexpr,
                           HAS_PT: tl.constexpr, HAS_SWA: tl.constexpr, HAS_SWA_OUT: tl.constexpr,
                           Q_MODE: tl.constexpr, BLOCK: tl.constexpr, BS_BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    if pid < bs:
        n = tl.load(lens + pid).to(tl.int64) + d
        tl.store(cache + pid, n.to(tl.int32))
        if HAS_PT:
            r = tl.load(rows + pid).to(tl.int64)
            pages = tl.minimum((tl.maximum(n, 0) + PS - 1) // PS, P)
            pages = tl.where((r >= 0) & (r < R), pages, 0)
            for blk in range(tl.cdiv(pages, BLOCK)):
                p = blk * BLOCK + tl.arange(0, BLOCK).to(tl.int64)
                col = p * PS
                live = (p < pages) & (col < C)
                slot = tl.load(table + tl.where(live, r * table_s + col, 0), mask=live, other=0)
                tl.store(pt + tl.where(live & (p < W), pid * pt_s + p, 0), (slot // PS).to(tl.int32),
                         mask=live & (p < W))
                if HAS_SWA:
                    s64 = slot.to(tl.int64)
                    ok = live & (p < W2) & (s64 >= 0) & (s64 < M)
                    m = tl.load(mapping + tl.where(ok, s64, 0), mask=ok, other=-1).to(tl.int64)
                    page = tl.where(m < 0, -1, m // PS)
                    tl.store(spt + tl.where(ok, pid * spt_s + p, 0), page.to(tl.int32), mask=ok)
    elif pid == bs:
        offs0 = tl.arange(0, BS_BLOCK).to(tl.int64)
        carry_k = tl.sum(tl.zeros([BS_BLOCK], tl.int64), axis=0)
        carry_q = carry_k
        for blk in range(tl.cdiv(bs, BS_BLOCK)):
            offs = blk * BS_BLOCK + offs0
            inb = offs < bs
            x = tl.where(inb, tl.load(lens + offs, mask=inb, other=0).to(tl.int64) + d, 0)
            tl.store(cu_k + 1 + offs, (tl.cumsum(x, axis=0) + carry_k).to(tl.int32), mask=inb)
            carry_k += tl.sum(x, axis=0)
            if Q_MODE == 1:
                q = tl.where(inb, tl.load(qlens + offs, mask=inb, other=0).to(tl.int64), 0)
                tl.store(cu_q + 1 + offs, (tl.cumsum(q, axis=0) + carry_q).to(tl.int32), mask=inb)
                carry_q += tl.sum(q, axis=0)
            if Q_MODE == 2:
                tl.store(cu_q + 1 + offs, ((offs + 1) * q_stride).to(tl.int32), mask=inb)
    else:
        if HAS_SWA_OUT:
            k = (pid - bs - 1) * BLOCK + tl.arange(0, BLOCK).to(tl.int64)
            inr = k < L
            real = inr & (k < K)
            loc = tl.load(locs + tl.where(real, k, 0), mask=real, other=0).to(tl.int64)
            ok = real & (loc >= 0) & (loc < M)
            val = tl.load(mapping + tl.where(ok, loc, 0), mask=ok, other=0).to(tl.int64)
            val = tl.where(real & (loc < 0), -1, val)
            tl.store(sout + tl.where(inr, k, 0), val, mask=inr)


def _vector(name, t, dtypes, dev):
    (n,) = _tensor_arg(name, t, 1, dtypes, dev)
    if n > 1 and t.stride(0) != 1:
        raise ValueError(f"{name} must have unit stride, got {t.stride(0)}")
    return n


def _matrix(name, t, dev):
    R, W = _tensor_arg(name, t, 2, _INT32, dev)
    if W > 1 and t.stride(1) != 1:
        raise ValueError(f"{name} must have unit column stride, got strides {tuple(t.stride())}")
    return R, W


def update_trtllm_mha_graph_metadata(*, req_pool_indices, seq_lens, req_to_token, cache_seqlens, cu_seqlens_k,
                                     page_table, bs, seqlen_offset, max_seq_pages, page_size, swa_mapping=None,
                                     swa_page_table=None, out_cache_loc=None, swa_out_cache_loc=None,
                                     cu_seqlens_q=None, qlens=None, q_stride=0, q_mode=Q_MODE_NONE,
                                     skip_page_table=False):
    """The fused CUDA-graph metadata update (see the module docstring)."""
    dev = getattr(seq_lens, "device", None)
    bs = _int_arg("bs", bs)
    d = _int_arg("seqlen_offset", seqlen_offset)
    P = _int_arg("max_seq_pages", max_seq_pages)
    ps = _int_arg("page_size", page_size)
    q_stride = _int_arg("q_stride", q_stride)
    q_mode = _int_arg("q_mode", q_mode)
    if not isinstance(skip_page_table, bool):
        raise ValueError(f"skip_page_table must be a bool, got {type(skip_page_table).__name__}")
    if bs < 0 or P < 0 or ps < 1 or d < 0 or q_stride < 0:
        raise ValueError(f"bs = {bs}, max_seq_pages = {P}, seqlen_offset = {d}, q_stride = {q_stride} must be >= 0 "
                         f"and page_size = {ps} >= 1")
    if q_mode not in (Q_MODE_NONE, Q_MODE_CUMSUM, Q_MODE_STRIDED):
        raise ValueError(f"q_mode = {q_mode} is not 0 (NONE), 1 (CUMSUM) or 2 (STRIDED)")
    if (cu_seqlens_q is not None) != (q_mode != Q_MODE_NONE) or (qlens is not None) != (q_mode == Q_MODE_CUMSUM):
        raise ValueError(f"q_mode = {q_mode}: cu_seqlens_q goes with q_mode 1 or 2, qlens with q_mode 1")
    for name, t, n in (("req_pool_indices", req_pool_indices, bs), ("seq_lens", seq_lens, bs),
                       ("qlens", qlens, bs)):
        if t is not None and _vector(name, t, _INDEX, dev) != n:
            raise ValueError(f"{name} has {t.shape[0]} elements, expected bs = {bs}")
    for name, t, n in (("cache_seqlens", cache_seqlens, bs), ("cu_seqlens_k", cu_seqlens_k, bs + 1),
                       ("cu_seqlens_q", cu_seqlens_q, bs + 1)):
        if t is not None and _vector(name, t, _INT32, dev) != n:
            raise ValueError(f"{name} has {t.shape[0]} elements, expected {n}")
    R, C = _matrix("req_to_token", req_to_token, dev)
    if skip_page_table:
        page_table = swa_page_table = None
    elif page_table is None:
        raise ValueError("page_table is None (only skip_page_table=True builds none)")
    tables = {}
    for name, t in (("page_table", page_table), ("swa_page_table", swa_page_table)):
        if t is not None:
            rows, width = _matrix(name, t, dev)
            if rows != bs:
                raise ValueError(f"{name} has {rows} rows, expected bs = {bs}")
            tables[name] = width
    M = 0
    if swa_mapping is not None:
        M = _vector("swa_mapping", swa_mapping, _INDEX, dev)
    elif swa_page_table is not None or swa_out_cache_loc is not None:
        raise ValueError("swa_page_table and swa_out_cache_loc need swa_mapping")
    L = _vector("swa_out_cache_loc", swa_out_cache_loc, (swa_out_cache_loc.dtype,), dev) \
        if swa_out_cache_loc is not None else 0
    N = _vector("out_cache_loc", out_cache_loc, _INDEX, dev) if out_cache_loc is not None else 0
    if bs == 0:
        return
    dummy = cache_seqlens  # for the pointers a path compiles out
    has_swa_out = swa_out_cache_loc is not None
    grid = (bs + 1 + (triton.cdiv(L, PAGE_BLOCK) if has_swa_out else 0),)
    _graph_metadata_kernel[grid](
        req_pool_indices, seq_lens, req_to_token, R, C, req_to_token.stride(0) if R > 1 else C,
        swa_mapping if swa_mapping is not None else dummy, M,
        out_cache_loc if has_swa_out and L and N else dummy, N, qlens if qlens is not None else dummy,
        cache_seqlens, cu_seqlens_k, cu_seqlens_q if cu_seqlens_q is not None else dummy,
        page_table if page_table is not None else dummy, tables.get("page_table", 0),
        page_table.stride(0) if page_table is not None else 0,
        swa_page_table if swa_page_table is not None else dummy, tables.get("swa_page_table", 0),
        swa_page_table.stride(0) if swa_page_table is not None else 0,
        swa_out_cache_loc if has_swa_out else dummy, L, bs, d, P, q_stride, min(L, N),
        PS=ps, HAS_PT=page_table is not None, HAS_SWA=swa_page_table is not None, HAS_SWA_OUT=has_swa_out,
        Q_MODE=q_mode, BLOCK=PAGE_BLOCK, BS_BLOCK=BS_BLOCK)
