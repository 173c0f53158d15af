"""kvfuzz's own ``prepare_swa_spec_page_table_triton``: the speculative SWA page table, hardened.

Same call signature as SGLang's kernel, written from ``kvfuzz/ops/swa_spec_page_table/contract.py``. With
``R = speculative_num_draft_tokens``, ``bs = seq_len_a.numel()``, for rows ``m < bs * R``,
``la = seq_len_a[m // R]`` and ``lb = seq_len_b[m]``::

    dst[m, c] = a[m // R, c]        for c < la
    dst[m, c] = b[m, c - la]        for la <= c < la + lb
    dst[m, c]   untouched           for c >= la + lb;  rows >= bs * R untouched

Lengths outside the contract can never move an access outside a tensor: a cell is written
only when it lies inside ``dst`` and its source cell (by the formula above) lies inside
``a`` or ``b``; every other cell is left alone. Widths are runtime values (the seed compiles
a kernel per table width); ``R`` is a compile-time constant, as in the seed (a server keeps
one). Column blocks of 256, one program per (row, block), with the three block kinds (all-A,
all-B, mixed) as separate uniform branches.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._args import _I32, _INDEX, _INT32, _Tensor, _int_arg, _tensor_arg

__all__ = ["prepare_swa_spec_page_table_triton"]

BLOCK_N = 256
NUM_WARPS = 4


_WIDTHS = ["width_dst", "width_a", "width_b"]  # runtime values, never compiled as constants


@triton.jit
def _swa_spec_page_table_body(
    dst, dst_s0, dst_s1,
    a, a_s0, a_s1,
    b, b_s0, b_s1,
    seq_len_a, seq_len_a_s,
    seq_len_b, seq_len_b_s,
    width_dst, width_a, width_b,
    R: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    """Program (m, j) writes row m's columns [j * BLOCK_N, (j + 1) * BLOCK_N).

    R is a compile-time constant: ``m // R`` by a constant is a multiply and a shift, where
    a runtime divisor costs a long dependent sequence before the first load of every program.
    R is fixed for a server's lifetime, so this is one compiled kernel per deployment."""
    m = tl.program_id(0)
    start = tl.program_id(1) * BLOCK_N
    m64 = m.to(tl.int64)
    ra64 = (m // R).to(tl.int64)
    la = tl.load(seq_len_a + ra64 * seq_len_a_s).to(tl.int64)
    lb = tl.load(seq_len_b + m64 * seq_len_b_s).to(tl.int64)
    end = tl.minimum(la + lb, width_dst)  # cells at or past `end` are never written
    if start < end:
        cols = start + tl.arange(0, BLOCK_N)
        cols64 = cols.to(tl.int64)
        in_dst = cols64 < end
        dst_ptrs = dst + (m64 * dst_s0 + cols64 * dst_s1)
        a_row = a + ra64 * a_s0
        b_row = b + m64 * b_s0
        if start + BLOCK_N <= la:  # the whole block comes from A
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


# The launched kernel, in two forms with the same device code: the default one takes unit
# strides along every row, which is what SGLang passes, and binds 5 arguments fewer per launch
# than the strided one, which takes any strides. (Triton compiles a stride of 1 as a constant
# anyway.) The block size is a constexpr parameter with a default: never bound by the caller,
# and not a global, whose value Triton re-checks on every launch.


@triton.jit(do_not_specialize=_WIDTHS)
def _swa_spec_page_table_kernel(
    dst, dst_s0, a, a_s0, b, b_s0, seq_len_a, seq_len_b,
    width_dst, width_a, width_b,
    R: tl.constexpr,
    BLOCK_N: tl.constexpr = BLOCK_N,
):
    """Unit strides along every row."""
    _swa_spec_page_table_body(dst, dst_s0, 1, a, a_s0, 1, b, b_s0, 1, seq_len_a, 1, seq_len_b, 1,
                              width_dst, width_a, width_b, R, BLOCK_N)


@triton.jit(do_not_specialize=_WIDTHS)
def _swa_spec_page_table_strided_kernel(
    dst, dst_s0, dst_s1,
    a, a_s0, a_s1,
    b, b_s0, b_s1,
    seq_len_a, seq_len_a_s,
    seq_len_b, seq_len_b_s,
    width_dst, width_a, width_b,
    R: tl.constexpr,
    BLOCK_N: tl.constexpr = BLOCK_N,
):
    """Any strides."""
    _swa_spec_page_table_body(dst, dst_s0, dst_s1, a, a_s0, a_s1, b, b_s0, b_s1,
                              seq_len_a, seq_len_a_s, seq_len_b, seq_len_b_s,
                              width_dst, width_a, width_b, R, BLOCK_N)


def _spec_fast_check(dst, a, b, seq_len_a, seq_len_b, R):
    """``(bs, width, width_a, width_b)`` when every argument passes ``_spec_full_check`` on a
    fast path, else None (``_spec_full_check`` then decides, and names the argument). Accepts a
    subset of what the full check accepts: exact ``int`` and ``torch.Tensor`` types only."""
    T = _Tensor
    if not (type(R) is int and R >= 1 and type(dst) is T and type(a) is T and type(b) is T
            and type(seq_len_a) is T and type(seq_len_b) is T
            and dst.dtype is _I32 and a.dtype is _I32 and b.dtype is _I32
            and seq_len_a.dtype in _INDEX and seq_len_b.dtype in _INDEX):
        return None
    dev = dst.device
    if a.device != dev or b.device != dev or seq_len_a.device != dev or seq_len_b.device != dev:
        return None
    dst_shape, a_shape, b_shape, la_shape = dst.shape, a.shape, b.shape, seq_len_a.shape
    if len(dst_shape) != 2 or len(a_shape) != 2 or len(b_shape) != 2 or len(la_shape) != 1:
        return None
    bs = la_shape[0]
    rows = bs * R
    if seq_len_b.shape != (rows,) or dst_shape[0] < rows or a_shape[0] < bs or b_shape[0] < rows:
        return None
    return bs, dst_shape[1], a_shape[1], b_shape[1]


def _spec_full_check(page_table_dst, page_table_a, page_table_b, seq_len_a, seq_len_b, R):
    """Every check, one argument at a time: ``ValueError`` naming the first argument outside the
    contract, else ``R`` as an int and ``(bs, width, width_a, width_b)``."""
    R = _int_arg("speculative_num_draft_tokens", R)
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
    return R, (bs, width, width_a, width_b)


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
    R = speculative_num_draft_tokens
    checked = _spec_fast_check(page_table_dst, page_table_a, page_table_b, seq_len_a, seq_len_b, R)
    if checked is None:
        R, checked = _spec_full_check(page_table_dst, page_table_a, page_table_b, seq_len_a, seq_len_b, R)
    bs, width, width_a, width_b = checked
    rows = bs * R
    if rows == 0 or width == 0:
        return
    (dst_s0, dst_s1), (a_s0, a_s1), (b_s0, b_s1) = page_table_dst.stride(), page_table_a.stride(), page_table_b.stride()
    (la_s,), (lb_s,) = seq_len_a.stride(), seq_len_b.stride()
    grid = (rows, -(-width // BLOCK_N))
    # .run: what kernel[grid](...) calls, without the extra call
    if dst_s1 == 1 and a_s1 == 1 and b_s1 == 1 and la_s == 1 and lb_s == 1:
        _swa_spec_page_table_kernel.run(
            page_table_dst, dst_s0, page_table_a, a_s0, page_table_b, b_s0, seq_len_a, seq_len_b,
            width, width_a, width_b, R,
            grid=grid, warmup=False, num_warps=NUM_WARPS)
    else:
        _swa_spec_page_table_strided_kernel.run(
            page_table_dst, dst_s0, dst_s1, page_table_a, a_s0, a_s1, page_table_b, b_s0, b_s1,
            seq_len_a, la_s, seq_len_b, lb_s,
            width, width_a, width_b, R,
            grid=grid, warmup=False, num_warps=NUM_WARPS)
