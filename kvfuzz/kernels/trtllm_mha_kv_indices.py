"""kvfuzz's own ``create_trtllm_mha_kv_indices_triton``: the TRT-LLM MHA backend's page table,
the page of every ``PAGE_SIZE``-th token of each request's ``req_to_token`` row, and with SWA the
page of that token's SWA slot.

Written from kvfuzz's contract (``kvfuzz/ops/trtllm_mha_kv_indices/contract.py``), with SGLang's
parameter names (0.5.16's signature): for request ``i`` (row ``r = req_pool_indices[i]``, length
``n = seq_lens[i]``, page size ``ps``, slot ``s_p = req_to_token[r, p * ps]``)::

    page_table[i, p]     = s_p // ps                 for 0 <= p < ceil(n / ps)
    swa_page_table[i, p] = full_to_swa[s_p] // ps    (HAS_SWA)

Unlike SGLang's, which is a bare ``@triton.jit`` kernel launched ``kernel[(bs, blocks)](...)``,
this is a launcher function called with the same arguments, no grid: it reads the tensors'
shapes and strides (metadata only, no host sync, so CUDA-graph capturable) and launches one
program per (request, tile of page_table's width): a request's pages are capped at the row's
width, so no program loops and none writes past its row; a tile past the request's pages returns
before any vector work. Every load and store is masked to its
tensor: a pool index outside the table, a length past the row, more pages than page_table's row
holds, or a slot outside the mapping (out-of-contract cases) read and write nothing outside their
tensors. Any strides (swa_page_table's its own), int32 or int64 indices and mapping; ``PAGE_SIZE``
must be a power of two from 1 to 4096, ``HAS_SWA`` must say whether ``full_to_swa`` is given
(``swa_page_table`` with it), and the stride and size arguments must equal the tensors' own (a
mismatch is refused, since the tensors' own are what the kernel uses); bad arguments raise
``ValueError``. A page is ``slot // ps`` as Triton divides (toward zero), SGLang's arithmetic;
slots are KV-pool slots, >= 0.
"""

from __future__ import annotations

import triton
import triton.language as tl

from ._args import _INDEX, _INT32, _int_arg, _tensor_arg

__all__ = ["create_trtllm_mha_kv_indices_triton"]

MAX_TILE = 1024  # pages per program at most
MAX_PAGE = 4096  # SGLang's block of tokens: a page holds at most one block


# the pool's rows and the mapping's size vary within a compile class: no specialisation on them
@triton.jit(do_not_specialize=["P", "M"])
def _trtllm_page_table_kernel(table, P, C, row_stride, col_stride, rows, rows_s, lens, lens_s, mapping, M, mapping_s,
                              out, W, out_row_s, out_col_s, swa_out, swa_row_s, swa_col_s, PS: tl.constexpr,
                              HAS_SWA: tl.constexpr, TILE: tl.constexpr):
    req = tl.program_id(0).to(tl.int64)
    tile = tl.program_id(1).to(tl.int64)
    row = tl.load(rows + req * rows_s).to(tl.int64)
    n = tl.load(lens + req * lens_s).to(tl.int64)
    pages = (tl.maximum(n, 0) + PS - 1) // PS
    if tile * TILE >= pages:  # a tile past the request's pages: nothing to write
        return
    p = tile * TILE + tl.arange(0, TILE).to(tl.int64)
    col = p * PS
    mask = (p < pages) & (p < W) & (row >= 0) & (row < P) & (col < C)
    slot = tl.load(table + tl.where(mask, row * row_stride + col * col_stride, 0), mask=mask, other=0)
    tl.store(out + tl.where(mask, req * out_row_s + p * out_col_s, 0), (slot // PS).to(tl.int32), mask=mask)
    if HAS_SWA:
        slot64 = slot.to(tl.int64)
        live = mask & (slot64 >= 0) & (slot64 < M)
        swa_slot = tl.load(mapping + tl.where(live, slot64 * mapping_s, 0), mask=live, other=0)
        tl.store(swa_out + tl.where(live, req * swa_row_s + p * swa_col_s, 0), (swa_slot // PS).to(tl.int32),
                 mask=live)


def create_trtllm_mha_kv_indices_triton(req_to_token_ptr, req_pool_indices_ptr, seq_lens_ptr, full_to_swa_ptr,
                                        page_table_ptr, swa_page_table_ptr, full_to_swa_numel, req_to_token_stride,
                                        page_table_stride, PAGE_SIZE, HAS_SWA):
    """page_table[i, p] = req_to_token[req_pool_indices[i], p * ps] // ps for p < ceil(seq_lens[i] / ps), and
    swa_page_table[i, p] = full_to_swa[that slot] // ps when HAS_SWA."""
    table, rows, lens, out = req_to_token_ptr, req_pool_indices_ptr, seq_lens_ptr, page_table_ptr
    mapping, swa_out = full_to_swa_ptr, swa_page_table_ptr
    dev = getattr(table, "device", None)
    P, C = _tensor_arg("req_to_token", table, 2, _INT32, dev)
    (bs,) = _tensor_arg("req_pool_indices", rows, 1, _INDEX, dev)
    (n_lens,) = _tensor_arg("seq_lens", lens, 1, _INDEX, dev)
    R, W = _tensor_arg("page_table", out, 2, _INT32, dev)
    if n_lens != bs or R != bs:
        raise ValueError(f"seq_lens has {n_lens} elements and page_table {R} rows; expected bs = {bs} of each")
    ps = _int_arg("PAGE_SIZE", PAGE_SIZE)
    if ps < 1 or ps > MAX_PAGE or ps & (ps - 1):
        raise ValueError(f"PAGE_SIZE = {ps} is not a power of two from 1 to {MAX_PAGE}")
    has_swa = HAS_SWA
    if not isinstance(has_swa, bool):
        raise ValueError(f"HAS_SWA must be a bool, got {type(has_swa).__name__}")
    if has_swa != (mapping is not None) or has_swa != (swa_out is not None):
        raise ValueError(f"HAS_SWA = {has_swa}, but full_to_swa is {'given' if mapping is not None else 'None'} and "
                         f"swa_page_table {'given' if swa_out is not None else 'None'} (both go with HAS_SWA)")
    stride = _int_arg("req_to_token_stride", req_to_token_stride)
    if P > 1 and stride != table.stride(0):
        raise ValueError(f"req_to_token_stride = {stride}, but req_to_token's row stride is {table.stride(0)}")
    out_stride = _int_arg("page_table_stride", page_table_stride)
    if R > 1 and out_stride != out.stride(0):
        raise ValueError(f"page_table_stride = {out_stride}, but page_table's row stride is {out.stride(0)}")
    numel = _int_arg("full_to_swa_numel", full_to_swa_numel)
    M = 0
    if has_swa:
        (M,) = _tensor_arg("full_to_swa", mapping, 1, _INDEX, dev)
        if tuple(_tensor_arg("swa_page_table", swa_out, 2, _INT32, dev)) != (R, W):
            raise ValueError(f"swa_page_table has shape {tuple(swa_out.shape)}, page_table {(R, W)}")
    if numel != M:
        raise ValueError(f"full_to_swa_numel = {numel}, but full_to_swa has {M} elements")
    if bs == 0 or C == 0 or W == 0:
        return
    tile = min(MAX_TILE, triton.next_power_of_2(W))
    grid = (bs, triton.cdiv(W, tile))
    swa_args = (mapping, M, mapping.stride(0), swa_out, swa_out.stride(0), swa_out.stride(1)) if has_swa else \
        (out, 0, 0, out, 0, 0)  # placeholder pointers: the SWA branch is compiled out
    mapping_, M_, mapping_s, swa_, swa_row_s, swa_col_s = swa_args
    _trtllm_page_table_kernel[grid](table, P, C, table.stride(0), table.stride(1), rows, rows.stride(0), lens,
                                    lens.stride(0), mapping_, M_, mapping_s, out, W, out.stride(0), out.stride(1), swa_,
                                    swa_row_s, swa_col_s, PS=ps, HAS_SWA=has_swa, TILE=tile)
