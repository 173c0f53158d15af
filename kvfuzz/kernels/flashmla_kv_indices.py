"""kvfuzz's own ``create_flashmla_kv_indices_triton``: each request's page table for the MLA
decode backends, the page of every ``PAGED_SIZE``-th token of its ``req_to_token`` row.

Written from kvfuzz's contract (``kvfuzz/ops/flashmla_kv_indices/contract.py``), with SGLang's
parameter names: for request ``i`` (row ``r = req_pool_indices[i]``, start ``s = kv_start_idx[i]``
or 0 when ``kv_start_idx`` is None, length ``n = page_kernel_lens[i]``, page size ``ps``)::

    page = req_to_token[r, s + p * ps] // ps                   for 0 <= p < ceil(n / ps)
    kv_indices[i, p] = page * PAGE_MULT                        (v2p_ptr None)
    kv_indices[i, p] = v2p_ptr[page] * PAGE_MULT               (SGLang 0.5.17-0.5.18's unified pool)

Unlike SGLang's, which is a bare ``@triton.jit`` kernel launched ``kernel[(bs, blocks)](...)``,
this is a launcher function called with the same arguments, no grid: it reads the tensors'
shapes and strides (metadata only, no host sync, so CUDA-graph capturable) and launches one
program per (request, 512-page tile of kv_indices' width): a request's pages are capped at the
row's width, so no program loops and none is launched past it. Every load and store is masked to
its tensor: a pool index outside the table, a start or span outside the row, more pages than
kv_indices' row holds, or a request past kv_indices' rows (out-of-contract cases) read and write
nothing outside their tensors; a page outside ``v2p_ptr`` reads nothing and writes nothing.
Any strides, int32 or int64 indices; ``PAGED_SIZE`` must be a power of two from 1 to 4096,
``PAGE_MULT`` an int >= 1, and both stride arguments must equal the tensors' row strides (a
mismatch is refused, since the tensors' own strides are what the kernel uses); bad arguments
raise ``ValueError``. A page is ``id // ps`` as Triton divides (toward zero), SGLang's
arithmetic; ids are KV-pool slots, >= 0.
"""

from __future__ import annotations

import triton
import triton.language as tl

from ._args import _INDEX, _INT32, _int_arg, _tensor_arg

__all__ = ["create_flashmla_kv_indices_triton"]

TILE = 512  # pages per program
MAX_PAGE = 4096  # SGLang's block of tokens: a page holds at most one block


# the pool's rows, kv_indices' rows and v2p's size vary within a compile class: no specialisation on them
@triton.jit(do_not_specialize=["P", "R", "V"])
def _page_table_kernel(table, P, C, row_stride, col_stride, rows, rows_s, lens, lens_s, starts, starts_s,
                       out, R, W, out_row_s, out_col_s, v2p, V, v2p_s, PS: tl.constexpr, HAS_START: tl.constexpr,
                       HAS_V2P: tl.constexpr, MULT: tl.constexpr, TILE: tl.constexpr):
    req = tl.program_id(0).to(tl.int64)
    tile = tl.program_id(1).to(tl.int64)
    row = tl.load(rows + req * rows_s).to(tl.int64)
    n = tl.load(lens + req * lens_s).to(tl.int64)
    if HAS_START:
        s = tl.load(starts + req * starts_s).to(tl.int64)
    else:
        s = tl.zeros([], tl.int64)
    pages = (tl.maximum(n, 0) + PS - 1) // PS
    p = tile * TILE + tl.arange(0, TILE).to(tl.int64)
    col = s + p * PS
    mask = (p < pages) & (p < W) & (req < R) & (row >= 0) & (row < P) & (col >= 0) & (col < C)
    ids = tl.load(table + tl.where(mask, row * row_stride + col * col_stride, 0), mask=mask)
    page = (ids // PS).to(tl.int64)
    if HAS_V2P:
        mask = mask & (page >= 0) & (page < V)
        page = tl.load(v2p + tl.where(mask, page * v2p_s, 0), mask=mask).to(tl.int64)
    tl.store(out + tl.where(mask, req * out_row_s + p * out_col_s, 0), (page * MULT).to(tl.int32), mask=mask)


def create_flashmla_kv_indices_triton(req_to_token_ptr, req_pool_indices_ptr, page_kernel_lens_ptr, kv_start_idx,
                                      kv_indices_ptr, req_to_token_ptr_stride, kv_indices_ptr_stride, PAGED_SIZE=64,
                                      v2p_ptr=None, PAGE_MULT=1):
    """kv_indices[i, p] = v2p[req_to_token[req_pool_indices[i], start[i] + p * ps] // ps] * PAGE_MULT for
    p < ceil(lens[i] / ps) (the page itself where v2p_ptr is None)."""
    table, rows, lens, out = req_to_token_ptr, req_pool_indices_ptr, page_kernel_lens_ptr, kv_indices_ptr
    dev = getattr(table, "device", None)
    P, C = _tensor_arg("req_to_token", table, 2, _INT32, dev)
    (bs,) = _tensor_arg("req_pool_indices", rows, 1, _INDEX, dev)
    (n_lens,) = _tensor_arg("page_kernel_lens", lens, 1, _INDEX, dev)
    R, W = _tensor_arg("kv_indices", out, 2, _INT32, dev)
    if n_lens != bs:
        raise ValueError(f"page_kernel_lens has {n_lens} elements, expected {bs} (bs = {bs})")
    has_start = kv_start_idx is not None
    if has_start:
        (n_start,) = _tensor_arg("kv_start_idx", kv_start_idx, 1, _INDEX, dev)
        if n_start != bs:
            raise ValueError(f"kv_start_idx has {n_start} elements, expected {bs}")
    ps = _int_arg("PAGED_SIZE", PAGED_SIZE)
    if ps < 1 or ps > MAX_PAGE or ps & (ps - 1):
        raise ValueError(f"PAGED_SIZE = {ps} is not a power of two from 1 to {MAX_PAGE}")
    stride = _int_arg("req_to_token_ptr_stride", req_to_token_ptr_stride)
    if P > 1 and stride != table.stride(0):
        raise ValueError(f"req_to_token_ptr_stride = {stride}, but req_to_token's row stride is {table.stride(0)}")
    out_stride = _int_arg("kv_indices_ptr_stride", kv_indices_ptr_stride)
    if R > 1 and out_stride != out.stride(0):
        raise ValueError(f"kv_indices_ptr_stride = {out_stride}, but kv_indices' row stride is {out.stride(0)}")
    mult = _int_arg("PAGE_MULT", PAGE_MULT)
    if mult < 1:
        raise ValueError(f"PAGE_MULT = {mult} must be >= 1")
    has_v2p = v2p_ptr is not None
    if has_v2p:
        (V,) = _tensor_arg("v2p_ptr", v2p_ptr, 1, _INDEX, dev)
    if bs == 0 or C == 0 or W == 0 or R == 0:
        return
    v2p = v2p_ptr if has_v2p else lens  # a placeholder pointer when there is no table
    starts = kv_start_idx if has_start else lens  # a placeholder pointer when there is no start
    grid = (bs, triton.cdiv(W, TILE))
    _page_table_kernel[grid](table, P, C, table.stride(0), table.stride(1), rows, rows.stride(0), lens, lens.stride(0),
                             starts, starts.stride(0), out, R, W, out.stride(0), out.stride(1), v2p,
                             V if has_v2p else 0, v2p.stride(0), PS=ps, HAS_START=has_start, HAS_V2P=has_v2p,
                             MULT=mult, TILE=TILE)
