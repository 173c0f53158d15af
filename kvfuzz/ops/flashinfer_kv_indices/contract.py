"""`create_flashinfer_kv_indices_triton`: gather each request's token ids from its
`req_to_token` row into one flat CSR stream for FlashInfer (`kv_indices`), request `i` at
`kv_indptr[i]`.

For every request i < bs, with r = req_pool_indices[i], s = kv_start_idx[i] (0 when
`kv_start_idx` is None) and n = paged_kernel_lens[i]:

    kv_indices[kv_indptr[i] + j] = req_to_token[r, s + j]    for 0 <= j < n

Those cells must be written; every other cell of `kv_indices` must stay as it was, and no input
is written. It is a bare `@triton.jit` kernel: kvfuzz launches it as SGLang's FlashInfer backend
does, grid `(bs,)`, the row stride of `req_to_token` as `req_to_token_ptr_stride`, and the later
releases' `ENTRY_PAGE_SIZE=1` (0.5.19), `TOKEN_BLOCK_PARALLEL=False` (0.5.20) and
`token_mapping=None` (0.5.22) left at their defaults, which keep 0.5.14's behaviour (0.5.20 on,
the backend launches `(bs, 1)` with the flag off, the same program per request); those paths are
not checked.

In contract (where SGLang leaves intent open, kvfuzz assumes):

* `req_to_token` is int32 [pool rows, max context] with unit column stride; any row stride
  (padded rows, or one row repeated by stride 0). kvfuzz passes `req_to_token.stride(0)` as the
  stride (0.5.14-0.5.18's FlashInfer backend passes `shape[1]`, the same for its contiguous table);
* `req_pool_indices` (int32 or int64), `paged_kernel_lens` and `kv_start_idx` (int32 or int64,
  values within int32) are [bs], `kv_indptr` int32 [bs + 1], `kv_indices` int32; every 1-D tensor
  has unit stride (the kernel indexes them by program id: their strides are not passed); bs >= 1;
* 0 <= r < pool rows, n >= 0, s >= 0 and s + n <= max context;
* kv_indptr[0] >= 0 (SGLang's is 0; a positive base leaves a prefix of kv_indices untouched),
  kv_indptr[i + 1] = kv_indptr[i] + n, and kv_indices holds at least kv_indptr[bs] cells (more:
  a tail that must stay untouched).
"""

from __future__ import annotations

import numpy as np

from ...case import Case
from ...contract import Arg, Cells, Contract
from ..kv_index_common import BLOCK, I32, I32_64, POOL_INDICES, TABLE, csr_racy, gather_reasons, refuses_nothing, \
    size_reasons, span_cells, start_path
from . import oracle

ARGS = (
    TABLE,
    POOL_INDICES,
    Arg("paged_kernel_lens", "in", I32_64, "bs", doc="n: tokens to copy, >= 0"),
    Arg("kv_indptr", "in", I32, "bs+1", doc="CSR offsets: kv_indptr[i+1] = kv_indptr[i] + n[i], kv_indptr[0] >= 0"),
    Arg("kv_start_idx", "in", I32_64, "bs", optional=True, doc="s: first column copied (absent: None, 0)"),
    Arg("kv_indices", "out", I32, "N", doc="N >= kv_indptr[bs]; cells [kv_indptr[i], kv_indptr[i+1]) written"),
)
ONE_D = ("req_pool_indices", "paged_kernel_lens", "kv_indptr", "kv_start_idx", "kv_indices")


def structural_reasons(case: Case) -> list[str]:
    return gather_reasons(CONTRACT, case, ONE_D, lambda t, bs: size_reasons(
        t, bs, {"paged_kernel_lens": bs, "kv_indptr": bs + 1, "kv_start_idx": bs}))


def cells(case: Case) -> dict[str, Cells]:
    ptr = np.asarray(case.values["kv_indptr"], dtype=np.int64)
    return {"kv_indices": span_cells(case.tensors["kv_indices"], int(ptr[0]), int(ptr[-1]))}


CONTRACT = Contract(
    name="flashinfer_kv_indices",
    entry="create_flashinfer_kv_indices_triton",
    doc=__doc__,
    args=ARGS,
    scalars=(),
    variants={"default": "SGLang 0.5.6-0.5.23 (the copy unchanged; 0.5.19-0.5.22's ENTRY_PAGE_SIZE, "
              "TOKEN_BLOCK_PARALLEL and token_mapping at the defaults that keep 0.5.14's behaviour): cells "
              "[kv_indptr[i], kv_indptr[i+1]) written, the rest of kv_indices untouched"},
    paths={"no_start": "kv_start_idx is None: each row copied from column 0",
           "start": "kv_start_idx given: each row copied from column kv_start_idx[i]"},
    kernel_path=start_path,
    structural_reasons=structural_reasons,
    must_refuse=refuses_nothing,
    cells=cells,
    racy=csr_racy("kv_indices", "kv_indptr", "paged_kernel_lens"),
    numpy_ref=oracle.numpy_ref,
    torch_ref=oracle.torch_ref,
    block_sizes=(BLOCK,),
)
