"""kvfuzz's own ``create_flashinfer_kv_indices_triton``: each request's token ids, gathered from
its ``req_to_token`` row into one flat CSR stream, in every mode of SGLang 0.5.23's kernel.

Written from kvfuzz's contract (``kvfuzz/ops/flashinfer_kv_indices/contract.py``), with SGLang
0.5.23's parameters: for request ``i`` (row ``r = req_pool_indices[i]``, start ``s =
kv_start_idx[i]`` or 0 when ``kv_start_idx`` is None, length ``n = paged_kernel_lens[i]``,
``ps = ENTRY_PAGE_SIZE``) and ``pos = s + j``, ``j < n``::

    t = req_to_token[r, pos]  (ps = 1)   or   req_to_token[r, pos // ps] * ps + pos % ps  (ps > 1)
    kv_indices[kv_indptr[i] + j] = t, or token_mapping[t] (-1 for t < 0) when token_mapping is given

Unlike SGLang's, which is a bare ``@triton.jit`` kernel launched ``kernel[grid](...)``, this is
a launcher function called with the same arguments, no grid: it reads the tensors' shapes and
strides (metadata only, no host sync, so CUDA-graph capturable) and launches a (request,
tile group) grid, the groups of a request striding over its 1024-token tiles (about 512
programs in all, at least one per request, however wide the table). ``TOKEN_BLOCK_PARALLEL``
is accepted and checked (a bool): the launcher picks its own grid, and the result does not
depend on it. Every load and store is
masked to its tensor: a pool index outside the table, a span past the row, a token id outside
``token_mapping``, or offsets past ``kv_indices`` (out-of-contract cases) read and write nothing
outside their tensors. Any strides, int32 or int64 indices, int32 or int64 ``kv_indices`` (ids
stored in its dtype); bad arguments raise ``ValueError``. ``req_to_token_ptr_stride`` must equal
the table's row stride (a mismatch is refused, since the table's own stride is what the kernel
uses).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._args import _INDEX, _INT32, _int_arg, _tensor_arg

__all__ = ["create_flashinfer_kv_indices_triton"]

TILE = 1024  # tokens per tile
TARGET_PROGRAMS = 512  # programs per launch to aim for: a request's tiles are strided over its share


# the pool's rows, kv_indices' and token_mapping's sizes vary within a compile class: no specialisation on them
@triton.jit(do_not_specialize=["P", "out_n", "map_n"])
def _gather_kernel(table, P, W, row_stride, col_stride, rows, rows_s, lens, lens_s, starts, starts_s,
                   indptr, indptr_s, out, out_n, out_s, mapping, map_n, map_s,
                   HAS_START: tl.constexpr, HAS_MAP: tl.constexpr, PS: tl.constexpr, TILE: tl.constexpr):
    req = tl.program_id(0).to(tl.int64)
    group = tl.program_id(1)
    groups = tl.num_programs(1)
    row = tl.load(rows + req * rows_s).to(tl.int64)
    n = tl.load(lens + req * lens_s).to(tl.int64)
    base = tl.load(indptr + req * indptr_s).to(tl.int64)
    if HAS_START:
        s = tl.load(starts + req * starts_s).to(tl.int64)
    else:
        s = tl.zeros([], tl.int64)
    n = tl.minimum(n, W * PS - s)  # never past the row's end
    for tile in range(group, tl.cdiv(n, TILE), groups):
        j = tile * TILE + tl.arange(0, TILE).to(tl.int64)
        dst = base + j
        pos = s + j
        col = pos // PS
        mask = (j < n) & (row >= 0) & (row < P) & (pos >= 0) & (col < W) & (dst >= 0) & (dst < out_n)
        ids = tl.load(table + tl.where(mask, row * row_stride + col * col_stride, 0), mask=mask).to(tl.int64)
        if PS > 1:
            ids = ids * PS + pos % PS
        if HAS_MAP:
            hit = mask & (ids >= 0) & (ids < map_n)
            ids = tl.load(mapping + tl.where(hit, ids, 0) * map_s, mask=hit, other=-1).to(tl.int64)
        tl.store(out + tl.where(mask, dst, 0) * out_s, ids.to(out.dtype.element_ty), mask=mask)


def create_flashinfer_kv_indices_triton(req_to_token_ptr, req_pool_indices_ptr, page_kernel_lens_ptr, kv_indptr,
                                        kv_start_idx, kv_indices_ptr, req_to_token_ptr_stride, ENTRY_PAGE_SIZE=1,
                                        TOKEN_BLOCK_PARALLEL=False, token_mapping=None):
    """kv_indices[kv_indptr[i] + j] = the id of token start[i] + j of row req_pool_indices[i]
    (through token_mapping where given), j < lens[i]."""
    table, rows, lens, out = req_to_token_ptr, req_pool_indices_ptr, page_kernel_lens_ptr, kv_indices_ptr
    dev = getattr(table, "device", None)
    P, W = _tensor_arg("req_to_token", table, 2, _INT32, dev)
    (bs,) = _tensor_arg("req_pool_indices", rows, 1, _INDEX, dev)
    (n_lens,) = _tensor_arg("paged_kernel_lens", lens, 1, _INDEX, dev)
    (n_ptr,) = _tensor_arg("kv_indptr", kv_indptr, 1, _INDEX, dev)
    (n_out,) = _tensor_arg("kv_indices", out, 1, _INDEX, dev)
    if n_lens != bs or n_ptr != bs + 1:
        raise ValueError(f"paged_kernel_lens has {n_lens} and kv_indptr {n_ptr} elements; expected {bs} and "
                         f"{bs + 1} (bs = {bs})")
    has_start = kv_start_idx is not None
    if has_start:
        (n_start,) = _tensor_arg("kv_start_idx", kv_start_idx, 1, _INDEX, dev)
        if n_start != bs:
            raise ValueError(f"kv_start_idx has {n_start} elements, expected {bs}")
    has_map = token_mapping is not None
    if has_map:
        (n_map,) = _tensor_arg("token_mapping", token_mapping, 1, _INDEX, dev)
    stride = _int_arg("req_to_token_ptr_stride", req_to_token_ptr_stride)
    if P > 1 and stride != table.stride(0):
        raise ValueError(f"req_to_token_ptr_stride = {stride}, but req_to_token's row stride is {table.stride(0)}")
    ps = _int_arg("ENTRY_PAGE_SIZE", ENTRY_PAGE_SIZE)
    if ps < 1:
        raise ValueError(f"ENTRY_PAGE_SIZE must be >= 1, got {ps}")
    if not isinstance(TOKEN_BLOCK_PARALLEL, bool):
        raise ValueError(f"TOKEN_BLOCK_PARALLEL must be a bool, got {type(TOKEN_BLOCK_PARALLEL).__name__}")
    if bs == 0 or W == 0:
        return
    starts = kv_start_idx if has_start else lens  # placeholder pointers when there is no start or mapping
    mapping = token_mapping if has_map else lens
    grid = (bs, max(1, min(triton.cdiv(W * ps, TILE), TARGET_PROGRAMS // bs)))
    _gather_kernel[grid](table, P, W, table.stride(0), table.stride(1), rows, rows.stride(0), lens, lens.stride(0),
                         starts, starts.stride(0), kv_indptr, kv_indptr.stride(0), out, n_out, out.stride(0),
                         mapping, n_map if has_map else 0, mapping.stride(0),
                         HAS_START=has_start, HAS_MAP=has_map, PS=ps, TILE=TILE)
