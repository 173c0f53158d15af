"""kvfuzz's own ``create_flashinfer_kv_indices_triton``: each request's token ids, gathered from
its ``req_to_token`` row into one flat CSR stream.

Written from kvfuzz's contract (``kvfuzz/ops/flashinfer_kv_indices/contract.py``), with SGLang's
parameter names: for request ``i`` (row ``r = req_pool_indices[i]``, start ``s = kv_start_idx[i]``
or 0 when ``kv_start_idx`` is None, length ``n = paged_kernel_lens[i]``)::

    kv_indices[kv_indptr[i] + j] = req_to_token[r, s + j]    for 0 <= j < n

Unlike SGLang's, which is a bare ``@triton.jit`` kernel launched ``kernel[(bs,)](...)``, this is
a launcher function called with the same arguments, no grid: it reads the tensors' shapes and
strides (metadata only, no host sync, so CUDA-graph capturable) and launches one program per
(request, 1024-column tile of the table's width): a request's span is capped at its row's end,
so no program loops. Every load and store is masked to its tensor: a pool index outside
the table, a span past the row, or offsets past ``kv_indices`` (out-of-contract cases) read and
write nothing outside their tensors. Any strides, int32 or int64 indices; bad arguments raise
``ValueError``. ``req_to_token_ptr_stride`` must equal the table's row stride (a mismatch is
refused, since the table's own stride is what the kernel uses).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._args import _INDEX, _INT32, _int_arg, _tensor_arg

__all__ = ["create_flashinfer_kv_indices_triton"]

TILE = 1024  # tokens per program


# the pool's rows and kv_indices' size vary within a compile class: no specialisation on them
@triton.jit(do_not_specialize=["P", "out_n"])
def _gather_kernel(table, P, C, row_stride, col_stride, rows, rows_s, lens, lens_s, starts, starts_s,
                   indptr, indptr_s, out, out_n, out_s, HAS_START: tl.constexpr, TILE: tl.constexpr):
    req = tl.program_id(0).to(tl.int64)
    tile = tl.program_id(1).to(tl.int64)
    row = tl.load(rows + req * rows_s).to(tl.int64)
    n = tl.load(lens + req * lens_s).to(tl.int64)
    base = tl.load(indptr + req * indptr_s).to(tl.int64)
    if HAS_START:
        s = tl.load(starts + req * starts_s).to(tl.int64)
    else:
        s = tl.zeros([], tl.int64)
    n = tl.minimum(n, C - s)  # never past the row's end
    j = tile * TILE + tl.arange(0, TILE).to(tl.int64)
    dst = base + j
    col = s + j
    mask = (j < n) & (row >= 0) & (row < P) & (col >= 0) & (col < C) & (dst >= 0) & (dst < out_n)
    vals = tl.load(table + tl.where(mask, row * row_stride + col * col_stride, 0), mask=mask)
    tl.store(out + tl.where(mask, dst, 0) * out_s, vals, mask=mask)


def create_flashinfer_kv_indices_triton(req_to_token_ptr, req_pool_indices_ptr, page_kernel_lens_ptr, kv_indptr,
                                        kv_start_idx, kv_indices_ptr, req_to_token_ptr_stride):
    """kv_indices[kv_indptr[i] + j] = req_to_token[req_pool_indices[i], start[i] + j], j < lens[i]."""
    table, rows, lens, out = req_to_token_ptr, req_pool_indices_ptr, page_kernel_lens_ptr, kv_indices_ptr
    dev = getattr(table, "device", None)
    P, C = _tensor_arg("req_to_token", table, 2, _INT32, dev)
    (bs,) = _tensor_arg("req_pool_indices", rows, 1, _INDEX, dev)
    (n_lens,) = _tensor_arg("paged_kernel_lens", lens, 1, _INDEX, dev)
    (n_ptr,) = _tensor_arg("kv_indptr", kv_indptr, 1, _INDEX, dev)
    (n_out,) = _tensor_arg("kv_indices", out, 1, _INT32, dev)
    if n_lens != bs or n_ptr != bs + 1:
        raise ValueError(f"paged_kernel_lens has {n_lens} and kv_indptr {n_ptr} elements; expected {bs} and "
                         f"{bs + 1} (bs = {bs})")
    has_start = kv_start_idx is not None
    if has_start:
        (n_start,) = _tensor_arg("kv_start_idx", kv_start_idx, 1, _INDEX, dev)
        if n_start != bs:
            raise ValueError(f"kv_start_idx has {n_start} elements, expected {bs}")
    stride = _int_arg("req_to_token_ptr_stride", req_to_token_ptr_stride)
    if P > 1 and stride != table.stride(0):
        raise ValueError(f"req_to_token_ptr_stride = {stride}, but req_to_token's row stride is {table.stride(0)}")
    if bs == 0 or C == 0:
        return
    starts = kv_start_idx if has_start else lens  # a placeholder pointer when there is no start
    grid = (bs, triton.cdiv(C, TILE))
    _gather_kernel[grid](table, P, C, table.stride(0), table.stride(1), rows, rows.stride(0), lens, lens.stride(0),
                         starts, starts.stride(0), kv_indptr, kv_indptr.stride(0), out, n_out, out.stride(0),
                         HAS_START=has_start, TILE=TILE)
