"""kvfuzz's own ``q8kv8_topk_length_from_indices`` (SGLang 0.5.23): each row's valid top-k count.

SGLang's call signature, written from kvfuzz's contract (``kvfuzz/ops/q8kv8_topk_length/contract.py``):
returns a new int32 tensor ``out`` with ``out[i] = 1 + max{j : indices[i, j] >= 0}``, and 1 for
a row with no such ``j`` (a row of pads, or width 0).

As SGLang's kernel it scans each row backward in blocks and stops at the first block holding a
valid entry (the cost follows the trailing pad run). Unlike it, every load is masked to the row
(no read before a row's start when the block does not divide the width), any strides and int32
or int64 indices are accepted, and bad arguments raise ``ValueError`` (metadata only).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._args import _INDEX, _tensor_arg

__all__ = ["q8kv8_topk_length_from_indices"]

BLOCK = 128  # one program per row; a 128-wide step


@triton.jit(do_not_specialize=["topk"])
def _topk_length_kernel(indices, stride_row, stride_col, out, out_s, topk, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    base = indices + row * stride_row
    length = tl.zeros([], tl.int64) + 1
    found = tl.zeros([], tl.int32)
    end = topk.to(tl.int64)
    while (found == 0) & (end > 0):
        idx = end - BLOCK + tl.arange(0, BLOCK)
        inb = idx >= 0
        vals = tl.load(base + tl.where(inb, idx, 0) * stride_col, mask=inb, other=-1)
        pos = tl.max(tl.where(vals >= 0, idx, -1), axis=0)
        found = tl.where(pos >= 0, 1, 0)
        length = tl.where(pos >= 0, pos + 1, length)
        end -= BLOCK
    tl.store(out + row * out_s, length.to(tl.int32))


def q8kv8_topk_length_from_indices(indices):
    """Per-row valid top-k count: last non-negative position + 1, at least 1 (int32, new tensor)."""
    s_q, topk = _tensor_arg("indices", indices, 2, _INDEX, getattr(indices, "device", None))
    out = torch.empty(s_q, dtype=torch.int32, device=indices.device)
    if s_q:
        _topk_length_kernel[(s_q,)](indices, *indices.stride(), out, out.stride(0), topk, BLOCK=BLOCK)
    return out
