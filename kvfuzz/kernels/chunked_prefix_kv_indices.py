"""kvfuzz's own ``create_chunked_prefix_cache_kv_indices``: one prefix chunk's token ids per
request, gathered from its ``req_to_token`` row into one flat stream.

Written from kvfuzz's contract (``kvfuzz/ops/chunked_prefix_kv_indices/contract.py``), with
SGLang's parameter names: for request ``i`` (row ``r = req_pool_indices[i]``, start
``s = chunk_start_idx[i]``, length ``n = chunk_seq_lens[i]``, offset ``o = chunk_cu_seq_lens[i]``)::

    chunk_kv_indices[o + j] = req_to_token[r, s + j]    for 0 <= j < n

Unlike SGLang's, which is a bare ``@triton.jit`` kernel launched ``kernel[(bs,)](...)``, this is
a launcher function called with the same arguments, no grid: it reads the tensors' shapes and
strides (metadata only, no host sync, so CUDA-graph capturable) and launches one program per
(request, 1024-column tile of the table's width): a request's span is capped at its row's end,
so no program loops, and a tile past it returns before any vector work. Every load and store is masked to its tensor: a pool index outside the
table, a start before the row, a span past it, or offsets past ``chunk_kv_indices``
(out-of-contract cases) read and write nothing outside their tensors. ``chunk_cu_seq_lens`` may
hold bs or bs + 1 offsets (only the first bs are read). Any strides, int32 or int64 indices; bad
arguments raise ``ValueError``. ``req_to_token_ptr_stride`` must equal the table's row stride (a
mismatch is refused, since the table's own stride is what the kernel uses).
"""

from __future__ import annotations

import triton
import triton.language as tl

from ._args import _INDEX, _INT32, _int_arg, _tensor_arg

__all__ = ["create_chunked_prefix_cache_kv_indices"]

TILE = 1024  # tokens per program


# the pool's rows and the output's size vary within a compile class: no specialisation on them
@triton.jit(do_not_specialize=["P", "out_n"])
def _chunk_gather_kernel(table, P, C, row_stride, col_stride, rows, rows_s, starts, starts_s, lens, lens_s,
                         cu, cu_s, out, out_n, out_s, TILE: tl.constexpr):
    req = tl.program_id(0).to(tl.int64)
    tile = tl.program_id(1).to(tl.int64)
    row = tl.load(rows + req * rows_s).to(tl.int64)
    s = tl.load(starts + req * starts_s).to(tl.int64)
    n = tl.load(lens + req * lens_s).to(tl.int64)
    n = tl.minimum(n, C - s)  # never past the row's end
    if tile * TILE >= n:  # a tile past the request's span: nothing to copy
        return
    base = tl.load(cu + req * cu_s).to(tl.int64)
    j = tile * TILE + tl.arange(0, TILE).to(tl.int64)
    dst = base + j
    col = s + j
    mask = (j < n) & (row >= 0) & (row < P) & (col >= 0) & (col < C) & (dst >= 0) & (dst < out_n)
    vals = tl.load(table + tl.where(mask, row * row_stride + col * col_stride, 0), mask=mask)
    tl.store(out + tl.where(mask, dst, 0) * out_s, vals, mask=mask)


def create_chunked_prefix_cache_kv_indices(req_to_token_ptr, req_pool_indices_ptr, chunk_start_idx_ptr,
                                           chunk_seq_lens_ptr, chunk_cu_seq_lens_ptr, chunk_kv_indices_ptr,
                                           req_to_token_ptr_stride):
    """chunk_kv_indices[cu[i] + j] = req_to_token[req_pool_indices[i], start[i] + j], j < lens[i]."""
    table, rows, starts, lens = req_to_token_ptr, req_pool_indices_ptr, chunk_start_idx_ptr, chunk_seq_lens_ptr
    cu, out = chunk_cu_seq_lens_ptr, chunk_kv_indices_ptr
    dev = getattr(table, "device", None)
    P, C = _tensor_arg("req_to_token", table, 2, _INT32, dev)
    (bs,) = _tensor_arg("req_pool_indices", rows, 1, _INDEX, dev)
    (n_starts,) = _tensor_arg("chunk_start_idx", starts, 1, _INDEX, dev)
    (n_lens,) = _tensor_arg("chunk_seq_lens", lens, 1, _INDEX, dev)
    (n_cu,) = _tensor_arg("chunk_cu_seq_lens", cu, 1, _INDEX, dev)
    (n_out,) = _tensor_arg("chunk_kv_indices", out, 1, _INT32, dev)
    if n_starts != bs or n_lens != bs or n_cu not in (bs, bs + 1):
        raise ValueError(f"chunk_start_idx has {n_starts}, chunk_seq_lens {n_lens} and chunk_cu_seq_lens {n_cu} "
                         f"elements; expected {bs}, {bs} and {bs + 1} or {bs} (bs = {bs})")
    stride = _int_arg("req_to_token_ptr_stride", req_to_token_ptr_stride)
    if P > 1 and stride != table.stride(0):
        raise ValueError(f"req_to_token_ptr_stride = {stride}, but req_to_token's row stride is {table.stride(0)}")
    if bs == 0 or C == 0:
        return
    grid = (bs, triton.cdiv(C, TILE))
    _chunk_gather_kernel[grid](table, P, C, table.stride(0), table.stride(1), rows, rows.stride(0), starts,
                               starts.stride(0), lens, lens.stride(0), cu, cu.stride(0), out, n_out, out.stride(0),
                               TILE=TILE)
