"""kvfuzz's own ``prepare_swa_spec_page_table_triton``: the speculative SWA page table, hardened.

Same call signature as SGLang's kernel, written from ``docs/contracts.md``. With
``R = speculative_num_draft_tokens``, ``bs = seq_len_a.numel()``, for rows ``m < bs * R``,
``la = seq_len_a[m // R]`` and ``lb = seq_len_b[m]``::

    dst[m, c] = a[m // R, c]        for c < la
    dst[m, c] = b[m, c - la]        for la <= c < la + lb
    dst[m, c]   untouched           for c >= la + lb;  rows >= bs * R untouched

Lengths outside the contract can never move an access outside a tensor: a cell is written
only when it lies inside ``dst`` and its source cell (by the formula above) lies inside
``a`` or ``b``; every other cell is left alone. Widths are runtime values (the seed compiles
a kernel per table width). Column blocks of 256, one program per (row, block), with the
three block kinds (all-A, all-B, mixed) as separate uniform branches.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .decode_metadata import _int_arg, _tensor_arg

__all__ = ["prepare_swa_spec_page_table_triton"]

BLOCK_N = 256
NUM_WARPS = 4
_BLOCK_N = tl.constexpr(BLOCK_N)  # read as a global: one launch argument fewer to bind

_INT32 = (torch.int32,)
_INDEX = (torch.int32, torch.int64)


@triton.jit(do_not_specialize=["width_dst", "width_a", "width_b"])
def _swa_spec_page_table_kernel(
    dst, dst_s0, dst_s1,
    a, a_s0, a_s1,
    b, b_s0, b_s1,
    seq_len_a, seq_len_a_s,
    seq_len_b, seq_len_b_s,
    width_dst, width_a, width_b,
    R,
):
    m = tl.program_id(0)
    start = tl.program_id(1) * _BLOCK_N
    m64 = m.to(tl.int64)
    ra64 = (m // R).to(tl.int64)
    la = tl.load(seq_len_a + ra64 * seq_len_a_s).to(tl.int64)
    lb = tl.load(seq_len_b + m64 * seq_len_b_s).to(tl.int64)
    end = tl.minimum(la + lb, width_dst)  # cells at or past `end` are never written
    if start < end:
        cols = start + tl.arange(0, _BLOCK_N)
        cols64 = cols.to(tl.int64)
        in_dst = cols64 < end
        dst_ptrs = dst + (m64 * dst_s0 + cols64 * dst_s1)
        a_row = a + ra64 * a_s0
        b_row = b + m64 * b_s0
        if start + _BLOCK_N <= la:  # the whole block comes from A
            mask = in_dst & (cols < width_a)
            va = tl.load(a_row + cols64 * a_s1, mask=mask, other=0)
            tl.store(dst_ptrs, va, mask=mask)
        elif start >= la:  # the whole block comes from B
            off_b = cols64 - la
            mask = in_dst & (off_b >= 0) & (off_b < width_b)
            vb = tl.load(b_row + tl.where(mask, off_b, 0) * b_s1, mask=mask, other=0)
            tl.store(dst_ptrs, vb, mask=mask)
        else:  # the block holds the A/B boundary
            is_a = cols64 < la
            mask_a = in_dst & is_a & (cols < width_a)
            off_b = cols64 - la
            mask_b = in_dst & (off_b >= 0) & (off_b < width_b)
            va = tl.load(a_row + cols64 * a_s1, mask=mask_a, other=0)
            vb = tl.load(b_row + tl.where(mask_b, off_b, 0) * b_s1, mask=mask_b, other=0)
            tl.store(dst_ptrs, tl.where(is_a, va, vb), mask=mask_a | mask_b)


def prepare_swa_spec_page_table_triton(
    page_table_dst,
    page_table_a,
    page_table_b,
    seq_len_a,
    seq_len_b,
    speculative_num_draft_tokens,
):
    """Concatenate each request's A prefix with each draft row's B part into
    ``page_table_dst`` (see the module docstring). One kernel launch.

    Raises ``ValueError`` on arguments outside the contract that can be seen without
    reading tensor values (ranks, dtypes, row counts, devices, ``R < 1``).
    """
    R = _int_arg("speculative_num_draft_tokens", speculative_num_draft_tokens)
    if R < 1:
        raise ValueError(f"speculative_num_draft_tokens must be >= 1, got {R}")
    device = page_table_dst.device if isinstance(page_table_dst, torch.Tensor) else None
    dst_rows, width = _tensor_arg("page_table_dst", page_table_dst, 2, _INT32, device)
    a_rows, width_a = _tensor_arg("page_table_a", page_table_a, 2, _INT32, device)
    b_rows, width_b = _tensor_arg("page_table_b", page_table_b, 2, _INT32, device)
    bs = _tensor_arg("seq_len_a", seq_len_a, 1, _INDEX, device)[0]
    rows = bs * R
    if _tensor_arg("seq_len_b", seq_len_b, 1, _INDEX, device)[0] != rows:
        raise ValueError(
            f"seq_len_b must have seq_len_a.numel() * speculative_num_draft_tokens = {rows} "
            f"elements, got {seq_len_b.shape[0]}")
    if dst_rows < rows:
        raise ValueError(f"page_table_dst must have at least {rows} rows, got {dst_rows}")
    if a_rows < bs:
        raise ValueError(f"page_table_a must have at least {bs} rows, got {a_rows}")
    if b_rows < rows:
        raise ValueError(f"page_table_b must have at least {rows} rows, got {b_rows}")

    if rows == 0 or width == 0:
        return
    _swa_spec_page_table_kernel[(rows, -(-width // BLOCK_N))](
        page_table_dst, *page_table_dst.stride(),
        page_table_a, *page_table_a.stride(),
        page_table_b, *page_table_b.stride(),
        seq_len_a, *seq_len_a.stride(),
        seq_len_b, *seq_len_b.stride(),
        width, width_a, width_b,
        R,
        num_warps=NUM_WARPS,
    )
