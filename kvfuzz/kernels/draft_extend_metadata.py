"""kvfuzz's own ``draft_extend_set_metadata`` (SGLang 0.5.16 on): the draft-extend metadata op.

SGLang's call signature, written from kvfuzz's contract (``kvfuzz/ops/draft_extend_metadata/contract.py``).
With ``B = cache_seqlens_int32.shape[0]``, ``W = page_table.shape[1]`` and ``live[i] =
min(cdiv(seq_lens[i], page_size), W)`` it writes, in place and nothing else:

* ``cache_seqlens_int32[i] = int32(seq_lens[i])``
* ``cu_seqlens_k = [0, running int32 sum of cache_seqlens_int32]``
* ``cu_seqlens_q = [0, running int32 sum of extend_seq_lens]``
* ``page_table[i, c] = req_to_token[req_pool_indices[i], c * page_size] // page_size``, ``c < live[i]``
* with ``full_to_swa_index_mapping``: ``swa_page_table[i, c] = mapping[that token] // page_size``
  for the same cells, and ``swa_out_cache_loc[k] = mapping[out_cache_loc[k]]`` for every ``k``.

As the other builtin kernels: bad arguments raise ``ValueError`` (metadata only, never tensor
values, so the call stays CUDA-graph capturable); every tensor is used through its strides;
every load and store is masked so that no value moves an access outside its tensor (a pool
index outside ``req_to_token``'s rows skips that row's pages, a column past its width is
skipped, a token or write location outside the mapping skips that SWA cell).
"""

from __future__ import annotations

import triton
import triton.language as tl

from ._args import _INDEX, _INT32, _int_arg, _tensor_arg

__all__ = ["draft_extend_set_metadata"]

NUM_WARPS = 4
BLOCK = 32 * NUM_WARPS  # columns (and sum rows, and write locations) per step: one per thread
_RUNTIME_SCALARS = ["B", "n_cols", "n_pool_rows", "n_map", "tokens_per_req"]


@triton.jit
def _running_sum(src, src_s, dst, dst_s, B, BLOCK: tl.constexpr):
    """dst = [0, running int32 sum of src[:B]] (summed in int64, stored as its low 32 bits)."""
    tl.store(dst, tl.zeros([], tl.int32))
    running = tl.zeros([], tl.int64)
    for start in range(0, B, BLOCK):
        offs = (start + tl.arange(0, BLOCK)).to(tl.int64)
        inb = offs < B
        v = tl.where(inb, tl.load(src + offs * src_s, mask=inb, other=0).to(tl.int32), 0).to(tl.int64)
        tl.store(dst + (offs + 1) * dst_s, (running + tl.cumsum(v, axis=0)).to(tl.int32), mask=inb)
        running += tl.sum(v, axis=0)


@triton.jit(do_not_specialize=_RUNTIME_SCALARS)
def _draft_extend_kernel(
    seq_lens, seq_lens_s, extend_seq_lens, extend_seq_lens_s,
    req_to_token, req_to_token_s0, req_to_token_s1, n_pool_rows,
    req_pool_indices, req_pool_indices_s,
    cache_seqlens, cache_seqlens_s, cu_seqlens_k, cu_seqlens_k_s, cu_seqlens_q, cu_seqlens_q_s,
    page_table, page_table_s0, page_table_s1,
    swa_map, swa_map_s, n_map,
    swa_page_table, swa_page_table_s0, swa_page_table_s1,
    out_loc, out_loc_s, swa_out_loc, swa_out_loc_s, tokens_per_req,
    B, n_cols,
    SHIFT: tl.constexpr, USE_SWA: tl.constexpr, BLOCK: tl.constexpr,
):
    """Grid (1 + B, column blocks): program (0, 0) writes the lengths and both sums; program
    (1 + i, j) gathers row i's live columns [j * BLOCK, (j + 1) * BLOCK), and (1 + i, 0) also
    translates row i's write locations."""
    pid_b = tl.program_id(0)
    pid_c = tl.program_id(1)
    if pid_b == 0:
        if pid_c == 0:
            for start in range(0, B, BLOCK):
                offs = (start + tl.arange(0, BLOCK)).to(tl.int64)
                inb = offs < B
                x = tl.load(seq_lens + offs * seq_lens_s, mask=inb, other=0)
                tl.store(cache_seqlens + offs * cache_seqlens_s, x.to(tl.int32), mask=inb)
            _running_sum(seq_lens, seq_lens_s, cu_seqlens_k, cu_seqlens_k_s, B, BLOCK)
            _running_sum(extend_seq_lens, extend_seq_lens_s, cu_seqlens_q, cu_seqlens_q_s, B, BLOCK)
    else:
        i = (pid_b - 1).to(tl.int64)
        if USE_SWA:
            if pid_c == 0:
                for start in range(0, tokens_per_req, BLOCK):
                    k = i * tokens_per_req + start + tl.arange(0, BLOCK)
                    kin = (start + tl.arange(0, BLOCK)) < tokens_per_req
                    loc = tl.load(out_loc + k * out_loc_s, mask=kin, other=0)
                    ok = kin & (loc >= 0) & (loc < n_map)
                    slot = tl.load(swa_map + tl.where(ok, loc, 0).to(tl.int64) * swa_map_s, mask=ok, other=0)
                    tl.store(swa_out_loc + k * swa_out_loc_s, slot, mask=ok)
        # live pages: cdiv(seq_len, page size) in int64 (no overflow), capped by the width and by
        # the columns whose token lies inside req_to_token; a bad pool index has none
        seq_len = tl.load(seq_lens + i * seq_lens_s).to(tl.int64)
        live = tl.minimum(tl.maximum((seq_len + (1 << SHIFT) - 1) >> SHIFT, 0), n_cols)
        row = tl.load(req_pool_indices + i * req_pool_indices_s)
        row_ok = (row >= 0) & (row < n_pool_rows)
        live = tl.where(row_ok, live, 0)
        cols = pid_c * BLOCK + tl.arange(0, BLOCK)
        m = cols < live
        cols64 = cols.to(tl.int64)
        row64 = tl.where(row_ok, row, 0).to(tl.int64)
        tok = tl.load(req_to_token + row64 * req_to_token_s0 + (cols64 << SHIFT) * req_to_token_s1,
                      mask=m, other=0)
        # >> on a signed integer is an arithmetic shift: floor division by the page size
        tl.store(page_table + i * page_table_s0 + cols64 * page_table_s1, (tok >> SHIFT).to(tl.int32), mask=m)
        if USE_SWA:
            tok_ok = m & (tok >= 0) & (tok < n_map)
            slot = tl.load(swa_map + tl.where(tok_ok, tok, 0).to(tl.int64) * swa_map_s, mask=tok_ok, other=0)
            tl.store(swa_page_table + i * swa_page_table_s0 + cols64 * swa_page_table_s1,
                     (slot >> SHIFT).to(tl.int32), mask=tok_ok)


def _check(cache_seqlens_int32, cu_seqlens_k, cu_seqlens_q, page_table, req_to_token, req_pool_indices, seq_lens,
           extend_seq_lens, page_size, full_to_swa_index_mapping, swa_page_table, out_cache_loc, swa_out_cache_loc):
    """ValueError naming the first argument outside the contract, else (page_size, B, W)."""
    page_size = _int_arg("page_size", page_size)
    if page_size <= 0 or page_size & (page_size - 1):
        raise ValueError(f"page_size must be a power of two, got {page_size}")
    device = getattr(cache_seqlens_int32, "device", None)
    B = _tensor_arg("cache_seqlens_int32", cache_seqlens_int32, 1, _INT32, device)[0]
    for name, t in (("cu_seqlens_k", cu_seqlens_k), ("cu_seqlens_q", cu_seqlens_q)):
        if _tensor_arg(name, t, 1, _INT32, device)[0] != B + 1:
            raise ValueError(f"{name} must have B + 1 = {B + 1} elements, got {t.shape[0]}")
    rows, W = _tensor_arg("page_table", page_table, 2, _INT32, device)
    if rows != B:
        raise ValueError(f"page_table must have B = {B} rows, got {rows}")
    _tensor_arg("req_to_token", req_to_token, 2, _INDEX, device)
    for name, t in (("req_pool_indices", req_pool_indices), ("seq_lens", seq_lens),
                    ("extend_seq_lens", extend_seq_lens)):
        if _tensor_arg(name, t, 1, _INDEX, device)[0] != B:
            raise ValueError(f"{name} must have B = {B} elements, got {t.shape[0]}")
    if full_to_swa_index_mapping is None:
        return page_size, B, W
    _tensor_arg("full_to_swa_index_mapping", full_to_swa_index_mapping, 1, _INDEX, device)
    if swa_page_table is None or out_cache_loc is None or swa_out_cache_loc is None:
        raise ValueError("with full_to_swa_index_mapping, swa_page_table, out_cache_loc and swa_out_cache_loc "
                         "are required")
    if tuple(_tensor_arg("swa_page_table", swa_page_table, 2, _INT32, device)) != (B, W):
        raise ValueError(f"swa_page_table must have page_table's shape {(B, W)}, got {tuple(swa_page_table.shape)}")
    K = _tensor_arg("out_cache_loc", out_cache_loc, 1, _INDEX, device)[0]
    if _tensor_arg("swa_out_cache_loc", swa_out_cache_loc, 1, _INDEX, device)[0] != K:
        raise ValueError(f"swa_out_cache_loc must have out_cache_loc's {K} elements")
    if (K % B if B else K):
        raise ValueError(f"out_cache_loc has {K} elements, not a multiple of B = {B}")
    return page_size, B, W


def draft_extend_set_metadata(
    cache_seqlens_int32,
    cu_seqlens_k,
    cu_seqlens_q,
    page_table,
    req_to_token,
    req_pool_indices,
    seq_lens,
    extend_seq_lens,
    page_size,
    full_to_swa_index_mapping=None,
    swa_page_table=None,
    out_cache_loc=None,
    swa_out_cache_loc=None,
):
    """Fill the draft-extend metadata in place (see the module docstring). One kernel launch.

    SWA is used when ``full_to_swa_index_mapping`` is given (then the other three SWA tensors
    are required); without it they are ignored, as SGLang does. Any strides. Raises
    ``ValueError`` on arguments outside the contract that can be seen without reading values.
    """
    page_size, B, W = _check(cache_seqlens_int32, cu_seqlens_k, cu_seqlens_q, page_table, req_to_token,
                             req_pool_indices, seq_lens, extend_seq_lens, page_size, full_to_swa_index_mapping,
                             swa_page_table, out_cache_loc, swa_out_cache_loc)
    shift = page_size.bit_length() - 1
    n_pool_rows, n_pool_cols = req_to_token.shape
    # columns whose token c * page_size lies inside req_to_token
    n_cols = min(W, -(-n_pool_cols // page_size)) if B else 0
    use_swa = full_to_swa_index_mapping is not None
    if use_swa:
        swa = (full_to_swa_index_mapping, full_to_swa_index_mapping.stride(0), full_to_swa_index_mapping.shape[0],
               swa_page_table, *swa_page_table.stride(), out_cache_loc, out_cache_loc.stride(0),
               swa_out_cache_loc, swa_out_cache_loc.stride(0), out_cache_loc.shape[0] // B if B else 0)
    else:  # USE_SWA is a compile-time False: None binds as a constant
        swa = (None,) * 11
    grid = (1 + B, max(1, -(-n_cols // BLOCK)))
    _draft_extend_kernel[grid](
        seq_lens, seq_lens.stride(0), extend_seq_lens, extend_seq_lens.stride(0),
        req_to_token, *req_to_token.stride(), n_pool_rows,
        req_pool_indices, req_pool_indices.stride(0),
        cache_seqlens_int32, cache_seqlens_int32.stride(0), cu_seqlens_k, cu_seqlens_k.stride(0),
        cu_seqlens_q, cu_seqlens_q.stride(0),
        page_table, *page_table.stride(),
        *swa,
        B, n_cols,
        SHIFT=shift, USE_SWA=use_swa, BLOCK=BLOCK, num_warps=NUM_WARPS,
    )
