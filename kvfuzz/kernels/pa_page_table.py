"""kvfuzz's own ``_build_pa_page_table``: the decode page table of SGLang's prefill-aware SWA
attention (page size 1), each request's prefill followed by the last ``window_size`` tokens.

Written from kvfuzz's contract (``kvfuzz/ops/pa_page_table/contract.py``), with SGLang's
signature: for request ``i`` (row ``r = req_pool_indices[i]``, length ``n = seq_lens[i]``,
prefill ``f = prefill_lens[r]``, window ``w``)::

    kv_len = min(n, f + w)                      -> dst_kv_lens[i]
    dst_page_table[i, j] = req_to_token[r, j]                 for j < f
    dst_page_table[i, j] = req_to_token[r, j + n - kv_len]    for f <= j < kv_len

The same host wrapper as SGLang's: it allocates the outputs when ``dst_page_table`` /
``dst_kv_lens`` are None (zeros, (bs, pa_max_len) and (bs,)), launches nothing unless bs > 0 and
pa_max_len > 0, and returns ``(dst_page_table, dst_kv_lens)``. Unlike SGLang's, the window is a
runtime argument (one compiled kernel for every window) and each program copies one tile of
one row (grid (bs, tiles of the table's width)), so no program loops. Every load and store is
masked to its tensor, whatever the values: a pool index outside ``req_to_token`` or
``prefill_lens``, a length past the row, or a kv_len past the table's width (out-of-contract
cases) reads and writes nothing outside the tensors; a prefill past the length, or a negative
one, is clamped into [0, n] (SGLang's kernel keeps the row's first n slots for the former). Any
strides, int32 or int64 indices, lengths and prefill lengths. The metadata checks (ranks,
dtypes, devices, bs against the tensors, 0 <= window_size < 2^31) raise ``ValueError``; tensor
values are never read on the host (no sync, CUDA-graph capturable).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._args import _INDEX, _INT32, _int_arg, _tensor_arg

__all__ = ["_build_pa_page_table"]

MAX_TILE = 1024  # cells per program at most
INT32_MAX = 2**31 - 1


# sizes and the window vary within a compile class: no specialisation on them
@triton.jit(do_not_specialize=["P", "C", "PL", "W", "window"])
def _pa_page_table_kernel(table, P, C, row_stride, col_stride, rows, rows_s, lens, lens_s, pf, PL, pf_s, out, W,
                          out_row_s, out_col_s, kv_out, kv_s, window, TILE: tl.constexpr):
    req = tl.program_id(0).to(tl.int64)
    tile = tl.program_id(1).to(tl.int64)
    r = tl.load(rows + req * rows_s).to(tl.int64)
    n = tl.maximum(tl.load(lens + req * lens_s).to(tl.int64), 0)
    inside = (r >= 0) & (r < P) & (r < PL)
    f = tl.load(pf + tl.where(inside, r, 0) * pf_s, mask=inside, other=0).to(tl.int64)
    f = tl.minimum(tl.maximum(f, 0), n)
    kv = tl.minimum(n, f + window)
    gap = n - kv  # the slots the window skips after the prefill
    tl.store(kv_out + req * kv_s, kv.to(tl.int32), mask=tile == 0)  # the row's first program
    j = tile * TILE + tl.arange(0, TILE).to(tl.int64)
    pos = tl.where(j < f, j, j + gap)
    mask = inside & (j < kv) & (j < W) & (pos < C)
    slot = tl.load(table + tl.where(mask, r * row_stride + pos * col_stride, 0), mask=mask, other=0)
    tl.store(out + tl.where(mask, req * out_row_s + j * out_col_s, 0), slot.to(tl.int32), mask=mask)


def _build_pa_page_table(req_to_token, req_pool_indices, seq_lens, prefill_lens, window_size, bs, pa_max_len, device,
                         dst_page_table=None, dst_kv_lens=None):
    """Row i of dst_page_table = req_to_token[r, 0:f] then req_to_token[r, max(f, n - w):n], and
    dst_kv_lens[i] = min(n, f + w) (r = req_pool_indices[i], n = seq_lens[i], f = prefill_lens[r],
    w = window_size); returns (dst_page_table, dst_kv_lens)."""
    bs = _int_arg("bs", bs)
    cap = _int_arg("pa_max_len", pa_max_len)
    w = _int_arg("window_size", window_size)
    if not 0 <= w <= INT32_MAX:
        raise ValueError(f"window_size = {w} is outside [0, 2^31)")
    if bs < 0:
        raise ValueError(f"bs = {bs} < 0")
    if dst_page_table is None:
        dst_page_table = torch.zeros(bs, max(cap, 0), dtype=torch.int32, device=device)
    if dst_kv_lens is None:
        dst_kv_lens = torch.zeros(bs, dtype=torch.int32, device=device)
    dev = getattr(req_to_token, "device", None)
    P, C = _tensor_arg("req_to_token", req_to_token, 2, _INT32, dev)
    (n_rows,) = _tensor_arg("req_pool_indices", req_pool_indices, 1, _INDEX, dev)
    (n_lens,) = _tensor_arg("seq_lens", seq_lens, 1, _INDEX, dev)
    (PL,) = _tensor_arg("prefill_lens", prefill_lens, 1, _INDEX, dev)
    R, W = _tensor_arg("dst_page_table", dst_page_table, 2, _INT32, dev)
    (n_kv,) = _tensor_arg("dst_kv_lens", dst_kv_lens, 1, _INT32, dev)
    if min(n_rows, n_lens, R, n_kv) < bs:
        raise ValueError(f"bs = {bs}, but req_pool_indices has {n_rows} elements, seq_lens {n_lens}, "
                         f"dst_page_table {R} rows and dst_kv_lens {n_kv} elements")
    if bs > 0 and cap > 0:
        tile = min(MAX_TILE, triton.next_power_of_2(max(W, 1)))
        grid = (bs, max(triton.cdiv(W, tile), 1))  # one tile at least: it writes kv_lens
        _pa_page_table_kernel[grid](req_to_token, P, C, req_to_token.stride(0), req_to_token.stride(1),
                                    req_pool_indices, req_pool_indices.stride(0), seq_lens, seq_lens.stride(0),
                                    prefill_lens, PL, prefill_lens.stride(0), dst_page_table, W,
                                    dst_page_table.stride(0), dst_page_table.stride(1), dst_kv_lens,
                                    dst_kv_lens.stride(0), w, TILE=tile)
    return dst_page_table, dst_kv_lens
