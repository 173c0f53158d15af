"""kvfuzz's own ``scatter_ragged_to_page_table_kernel``: the AITER unified-attention backend's
2-D page table from a ragged stream of token-level KV-pool slots, and with SWA the page of each
page's SWA slot.

Written from kvfuzz's contract (``kvfuzz/ops/aiter_ragged_page_table/contract.py``), with SGLang's
parameter names: for request ``i < bs = kv_indptr.numel() - 1`` (range ``s = kv_indptr[i]``,
``n = kv_indptr[i + 1] - s``, page size ``ps``, slot ``v_p = kv_flat[s + p * ps]``)::

    page_table[i, p]     = v_p // ps                      for 0 <= p < ceil(n / ps)
    swa_page_table[i, p] = swa_slot_mapping[v_p] // ps    (HAS_SWA)

Unlike SGLang's, which is a bare ``@triton.jit`` kernel launched ``kernel[(bs, blocks)](...)``,
this is a launcher function called with the same arguments, no grid: it reads the tensors' shapes
and strides (metadata only, no host sync, so CUDA-graph capturable) and launches one program per
(request, tile of page_table's width): a request's pages are capped at the row's width, so no
program writes past its row, and a tile past the request's pages returns before any vector work. Every load and store is masked to its tensor: a decreasing or
negative kv_indptr, a range past kv_flat, more pages than a row holds, or a slot outside the
mapping (out-of-contract cases) read and write nothing outside their tensors. Any strides (each
table through its own), int32 or int64 slots, offsets and mapping, any positive ``PAGE_SIZE``;
``BLOCK_SIZE`` (SGLang's pages per program) must be a positive power of two and is not otherwise
used, ``HAS_SWA`` must say whether ``swa_slot_mapping`` is given (``sw_page_table_ptr`` with it),
and ``dest_stride`` must equal page_table's row stride; bad arguments raise ``ValueError``. A page
is ``slot // ps`` as Triton divides (toward zero), SGLang's arithmetic; slots are KV-pool slots, >= 0.
"""

from __future__ import annotations

import triton
import triton.language as tl

from ._args import _INDEX, _INT32, _int_arg, _tensor_arg

__all__ = ["scatter_ragged_to_page_table_kernel"]

MAX_TILE = 1024  # pages per program at most


# the stream's and the mapping's sizes vary within a compile class: no specialisation on them
@triton.jit(do_not_specialize=["N", "M"])
def _ragged_page_table_kernel(flat, N, flat_s, ptr, ptr_s, out, W, out_row_s, out_col_s, mapping, M, mapping_s,
                              swa_out, swa_row_s, swa_col_s, PS: tl.constexpr, HAS_SWA: tl.constexpr,
                              TILE: tl.constexpr):
    req = tl.program_id(0).to(tl.int64)
    tile = tl.program_id(1).to(tl.int64)
    start = tl.load(ptr + req * ptr_s).to(tl.int64)
    end = tl.load(ptr + (req + 1) * ptr_s).to(tl.int64)
    pages = (tl.maximum(end - start, 0) + PS - 1) // PS
    if tile * TILE >= pages:  # a tile past the request's pages: nothing to write
        return
    p = tile * TILE + tl.arange(0, TILE).to(tl.int64)
    idx = start + p * PS
    mask = (p < pages) & (p < W) & (idx >= 0) & (idx < N)
    slot = tl.load(flat + tl.where(mask, idx * flat_s, 0), mask=mask, other=0).to(tl.int64)
    tl.store(out + tl.where(mask, req * out_row_s + p * out_col_s, 0), (slot // PS).to(tl.int32), mask=mask)
    if HAS_SWA:
        live = mask & (slot >= 0) & (slot < M)
        swa_slot = tl.load(mapping + tl.where(live, slot * mapping_s, 0), mask=live, other=0).to(tl.int64)
        tl.store(swa_out + tl.where(live, req * swa_row_s + p * swa_col_s, 0), (swa_slot // PS).to(tl.int32),
                 mask=live)


def scatter_ragged_to_page_table_kernel(kv_flat_ptr, kv_indptr_ptr, dest_ptr, dest_stride, sw_page_table_ptr,
                                        swa_slot_mapping_ptr, PAGE_SIZE, BLOCK_SIZE, HAS_SWA):
    """page_table[i, p] = kv_flat[kv_indptr[i] + p * ps] // ps for p < ceil((kv_indptr[i + 1] - kv_indptr[i]) / ps),
    and swa_page_table[i, p] = swa_slot_mapping[that slot] // ps when HAS_SWA."""
    flat, ptr, out = kv_flat_ptr, kv_indptr_ptr, dest_ptr
    mapping, swa_out = swa_slot_mapping_ptr, sw_page_table_ptr
    dev = getattr(flat, "device", None)
    (N,) = _tensor_arg("kv_flat", flat, 1, _INDEX, dev)
    (n_ptr,) = _tensor_arg("kv_indptr", ptr, 1, _INDEX, dev)
    R, W = _tensor_arg("page_table", out, 2, _INT32, dev)
    if n_ptr < 1:
        raise ValueError("kv_indptr is empty: it holds bs + 1 offsets")
    bs = n_ptr - 1
    if R < bs:
        raise ValueError(f"page_table has {R} rows, fewer than bs = {bs} (kv_indptr's entries - 1)")
    ps = _int_arg("PAGE_SIZE", PAGE_SIZE)
    if ps < 1:
        raise ValueError(f"PAGE_SIZE = {ps} is not a positive integer")
    block = _int_arg("BLOCK_SIZE", BLOCK_SIZE)
    if block < 1 or block & (block - 1):
        raise ValueError(f"BLOCK_SIZE = {block} is not a positive power of two")
    has_swa = HAS_SWA
    if not isinstance(has_swa, bool):
        raise ValueError(f"HAS_SWA must be a bool, got {type(has_swa).__name__}")
    if has_swa != (mapping is not None) or has_swa != (swa_out is not None):
        raise ValueError(f"HAS_SWA = {has_swa}, but swa_slot_mapping is {'given' if mapping is not None else 'None'} "
                         f"and sw_page_table {'given' if swa_out is not None else 'None'} (both go with HAS_SWA)")
    stride = _int_arg("dest_stride", dest_stride)
    if R > 1 and stride != out.stride(0):
        raise ValueError(f"dest_stride = {stride}, but page_table's row stride is {out.stride(0)}")
    M = 0
    if has_swa:
        (M,) = _tensor_arg("swa_slot_mapping", mapping, 1, _INDEX, dev)
        swa_R, swa_W = _tensor_arg("sw_page_table", swa_out, 2, _INT32, dev)
        if swa_R < bs or swa_W != W:
            raise ValueError(f"sw_page_table has shape {tuple(swa_out.shape)}; expected bs = {bs} rows or more and "
                             f"page_table's width {W}")
    if bs == 0 or W == 0 or N == 0:  # no slot to read: nothing to write
        return
    tile = min(MAX_TILE, triton.next_power_of_2(W))
    grid = (bs, triton.cdiv(W, tile))
    swa_args = (mapping, M, mapping.stride(0), swa_out, swa_out.stride(0), swa_out.stride(1)) if has_swa else \
        (out, 0, 0, out, 0, 0)  # placeholder pointers: the SWA branch is compiled out
    mapping_, M_, mapping_s, swa_, swa_row_s, swa_col_s = swa_args
    _ragged_page_table_kernel[grid](flat, N, flat.stride(0), ptr, ptr.stride(0), out, W, out.stride(0), out.stride(1),
                                    mapping_, M_, mapping_s, swa_, swa_row_s, swa_col_s, PS=ps, HAS_SWA=has_swa,
                                    TILE=tile)
