"""`create_flashinfer_kv_indices_triton`: gather each request's token ids from its
`req_to_token` row into one flat CSR stream for FlashInfer and the triton and AITER backends
(`kv_indices`), request `i` at `kv_indptr[i]`.

For every request i < bs, with r = req_pool_indices[i], s = kv_start_idx[i] (0 when
`kv_start_idx` is None), n = paged_kernel_lens[i], ps = ENTRY_PAGE_SIZE (the case's
`entry_page_size`, 1 when absent) and, for 0 <= j < n, pos = s + j:

    t = req_to_token[r, pos]                                   ps = 1: a token table
    t = req_to_token[r, pos // ps] * ps + pos % ps             ps > 1: a page-granular table
    kv_indices[kv_indptr[i] + j] = t                           without token_mapping
    kv_indices[kv_indptr[i] + j] = token_mapping[t] if t >= 0 else -1    with it

Those cells must be written; every other cell of `kv_indices` must stay as it was, and no input
is written. It is a bare `@triton.jit` kernel; kvfuzz launches each mode as SGLang's call sites
do (0.5.23: `KVIndexTranslator.pack_read_stream`, the triton, FlashInfer and AITER backends):

* grid `(bs,)` (every release's FlashInfer and triton backends; the default variant), or, where
  the kernel takes `TOKEN_BLOCK_PARALLEL` (0.5.20 on), grid `(bs, num_token_blocks)` with
  `TOKEN_BLOCK_PARALLEL = num_token_blocks > 1`, as every 2-D call site passes it. SGLang's
  kernel says any block count is correct; kvfuzz draws 1, or 2 to 4 on tables 1100 or 2049 tokens
  wide (fewer than the longest row's 512-token copy blocks, so blocks stride over a row and rows
  end inside and at the end of blocks) and, on production tables, the count SGLang computes: `spec_kv_index_token_blocks(W, sum of lengths, bs)` (EAGLE verify and
  draft extend) or AITER's `_kv_index_blocks(bs)` (the width alone), more than 1 once W >= 32768;
* `ENTRY_PAGE_SIZE` (0.5.19 on: the unified pool's page-granular read table, page sizes 16, 32,
  64, and odd ones) with starts that are not page-aligned;
* `token_mapping` (0.5.22 on: the triton backend's SWA path passes the static SWA pool's
  `full_to_swa_index_mapping`, whose evicted entries are -1, with non-zero starts), with
  ENTRY_PAGE_SIZE = 1 (`pack_read_stream` asserts the two never meet);
* the row stride of `req_to_token` as `req_to_token_ptr_stride` (a constexpr 0.5.6-0.5.18,
  a runtime int 0.5.19 on; the FlashInfer backend passes `shape[1]`, the same for its contiguous
  table).

A release whose kernel lacks a parameter gets none of its mode (the contract variants below).

In contract (where SGLang leaves intent open, kvfuzz assumes):

* `req_to_token` is int32 [pool rows, W] with unit column stride; any row stride (padded rows,
  or one row repeated by stride 0). W counts tokens (ps = 1) or pages (ps > 1);
* `req_pool_indices` (int32 or int64), `paged_kernel_lens` and `kv_start_idx` (int32 or int64,
  values within int32) are [bs], `kv_indptr` int32 [bs + 1], `kv_indices` int32 (FlashInfer,
  AITER) or int64 (the triton backend), `token_mapping` int32 or int64 [M]; every 1-D tensor has
  unit stride (the kernel indexes them by program id or token id: their strides are not
  passed); bs >= 1;
* 0 <= r < pool rows, n >= 0, s >= 0 and s + n <= W * ps;
* `entry_page_size` an int >= 1, `num_token_blocks` an int >= 1;
* with token_mapping: every t read is -1 or in [0, M) (the full pool's token ids); the mapped
  ids (-1 included) and, without it, every t fit kv_indices' dtype;
* kv_indptr[0] >= 0 (SGLang's is 0; a positive base leaves a prefix of kv_indices untouched),
  kv_indptr[i + 1] = kv_indptr[i] + n, and kv_indices holds at least kv_indptr[bs] cells (more:
  a tail that must stay untouched).

Production sizes are compile classes of their own (`generate.py`): tables 32768 to 131072+
tokens wide, lengths to 131072, batches to 256 and past; every cell is judged (the NumPy oracle
is one vectorized gather).

SGLang's guards (docs/guards.md): 0.5.20's `TOKEN_BLOCK_PARALLEL` programs past a row's copy
blocks return (`if blk >= num_loop`), so any block count is in contract; 0.5.22's mapping load is
masked by `data >= 0` with `other=-1`, so a -1 table entry with `token_mapping` is in contract
(written -1). CUDA-graph replay's padded rows (length 1 or the draft count, pool row 0) are in
contract in every release.
"""

from __future__ import annotations

import numpy as np

from ...case import Case
from ...contract import Arg, Cells, Contract, Scalar, zero_stride_reasons
from ..kv_index_common import BLOCK, I32, I32_64, POOL_INDICES, TABLE, csr_racy, gather_reasons, refuses_nothing, \
    size_reasons, span_cells, start_path
from . import oracle

ARGS = (
    TABLE,
    POOL_INDICES,
    Arg("paged_kernel_lens", "in", I32_64, "bs", doc="n: tokens to copy, >= 0"),
    Arg("kv_indptr", "in", I32, "bs+1", doc="CSR offsets: kv_indptr[i+1] = kv_indptr[i] + n[i], kv_indptr[0] >= 0"),
    Arg("kv_start_idx", "in", I32_64, "bs", optional=True, doc="s: first token copied (absent: None, 0)"),
    Arg("token_mapping", "in", I32_64, "M", optional=True,
        doc="0.5.22 on: token id -> the id written (-1 kept); absent: None"),
    Arg("kv_indices", "out", I32_64, "N", doc="N >= kv_indptr[bs]; cells [kv_indptr[i], kv_indptr[i+1]) written"),
)
SCALARS = (
    Scalar("entry_page_size", "0.5.19 on: ENTRY_PAGE_SIZE, tokens per table entry (absent: 1)"),
    Scalar("num_token_blocks", "0.5.20 on: the grid's second axis; TOKEN_BLOCK_PARALLEL = it > 1 (absent: 1, "
                               "grid (bs,))"),
)
ONE_D = ("req_pool_indices", "paged_kernel_lens", "kv_indptr", "kv_start_idx", "token_mapping", "kv_indices")

# the later releases' arguments each variant's cases may carry (a release without them gets none)
VARIANT_ARGS = {
    "default": (),
    "entry_page": ("entry_page_size",),
    "token_blocks": ("entry_page_size", "num_token_blocks"),
    "token_mapping": ("entry_page_size", "num_token_blocks", "token_mapping"),
}


def scalar_reasons(case: Case) -> list[str]:
    reasons = []
    for name in ("entry_page_size", "num_token_blocks"):
        value = case.scalars.get(name, 1)
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            reasons.append(f"{name} must be an int >= 1, got {value!r}")
        elif name in case.scalars and name not in VARIANT_ARGS.get(case.variant, ()):
            reasons.append(f"{name} is not an argument of variant {case.variant}")
    if "token_mapping" in case.tensors and "token_mapping" not in VARIANT_ARGS.get(case.variant, ()):
        reasons.append(f"token_mapping is not an argument of variant {case.variant}")
    return reasons


def structural_reasons(case: Case) -> list[str]:
    return scalar_reasons(case) or gather_reasons(CONTRACT, case, ONE_D, lambda t, bs: size_reasons(
        t, bs, {"paged_kernel_lens": bs, "kv_indptr": bs + 1, "kv_start_idx": bs}))


def cells(case: Case) -> dict[str, Cells]:
    ptr = np.asarray(case.values["kv_indptr"], dtype=np.int64)
    return {"kv_indices": span_cells(case.tensors["kv_indices"], int(ptr[0]), int(ptr[-1]))}


def kernel_path(case: Case) -> str:
    """The start path, and the mode: page-granular table, token mapping, 2-D grid."""
    path = start_path(case)
    if case.scalars.get("entry_page_size", 1) != 1:
        path += "/paged"
    if "token_mapping" in case.tensors:
        path += "/mapped"
    if case.scalars.get("num_token_blocks", 1) != 1:
        path += "/blocks"
    return path


_RULE = "cells [kv_indptr[i], kv_indptr[i+1]) written, the rest of kv_indices untouched"

def stress(case: Case) -> list[str]:
    """In contract, but no SGLang call site launches it: a request table repeated by stride 0."""
    return zero_stride_reasons(case, ("req_to_token",))


CONTRACT = Contract(
    name="flashinfer_kv_indices",
    entry="create_flashinfer_kv_indices_triton",
    doc=__doc__,
    args=ARGS,
    scalars=SCALARS,
    variants={
        "default": f"SGLang 0.5.6-0.5.18 (grid (bs,), a token table, no mapping): {_RULE}",
        "entry_page": f"SGLang 0.5.19 (ENTRY_PAGE_SIZE: page-granular tables): {_RULE}",
        "token_blocks": f"SGLang 0.5.20-0.5.21 (ENTRY_PAGE_SIZE; TOKEN_BLOCK_PARALLEL on a (bs, blocks) grid): {_RULE}",
        "token_mapping": f"SGLang 0.5.22-0.5.23 (ENTRY_PAGE_SIZE; TOKEN_BLOCK_PARALLEL; token_mapping): {_RULE}",
    },
    paths={"no_start": "kv_start_idx is None: each row copied from column 0",
           "start": "kv_start_idx given: each row copied from token kv_start_idx[i]",
           "*/paged": "ENTRY_PAGE_SIZE > 1: entries are pages, token = entry * ps + pos % ps",
           "*/mapped": "token_mapping given: each token id remapped, -1 kept",
           "*/blocks": "TOKEN_BLOCK_PARALLEL: grid (bs, num_token_blocks > 1), the blocks striding over a row"},
    kernel_path=kernel_path,
    structural_reasons=structural_reasons,
    must_refuse=refuses_nothing,
    cells=cells,
    racy=csr_racy("kv_indices", "kv_indptr", "paged_kernel_lens"),
    numpy_ref=oracle.numpy_ref,
    torch_ref=oracle.torch_ref,
    block_sizes=(BLOCK,),
    variant_args=VARIANT_ARGS,
    stress=stress,
)
