"""`scatter_ragged_to_page_table_kernel`: the 2-D block-level page table of SGLang's AITER
unified-attention backend, built from a ragged (CSR) stream of token-level KV-pool slots: row `i`
of `page_table` gets the page of every `page_size`-th token of request `i`'s range of `kv_flat`,
and, for a model with sliding-window (SWA) layers, row `i` of `swa_page_table` the page of that
token's SWA slot (`swa_slot_mapping`, the full pool's slot -> SWA slot mapping) in the same pass.

For every request i < bs = kv_indptr.shape[0] - 1, with s = kv_indptr[i],
n = kv_indptr[i + 1] - s, ps = PAGE_SIZE (`page_size`) and slot_p = kv_flat[s + p * ps]:

    page_table[i, p]     = slot_p // ps                       for 0 <= p < ceil(n / ps)
    swa_page_table[i, p] = swa_slot_mapping[slot_p] // ps     (with SWA: the mapping given)

Those cells must be written; every other cell of both tables (the columns past a request's
pages, the rows past bs of a CUDA-graph buffer) must stay as it was, and no input is written.
SGLang's eager tables are `torch.zeros`, its graph buffers keep what the last replay left; the
backend's comment says "the tail is 0-filled", which holds for the zeroed eager table only: the
kernel stores nothing past a request's pages, and kvfuzz requires exactly that. It is a bare
`@triton.jit` kernel: kvfuzz launches it as SGLang's `_build_unified_page_table_from_spec` does,
grid `(bs, cdiv(max(W, 1), 1024))` with W = page_table's width (SGLang's max_blocks =
ceil(max_context_len / ps), the width of every table it passes), one program per block of
BLOCK_SIZE = 1024 pages, `dest_stride` = page_table's row stride (swa_page_table is written
through it too), `PAGE_SIZE` = ps and `HAS_SWA` = whether the mapping is given.

The draft-decode and draft-extend callers' slots come from `create_flashinfer_kv_indices_triton`
(int32 `kv_indices`, int32 `kv_indptr` from 0); the mapping is the SWA pool's
`full_to_swa_index_mapping.long()` (int64, size + page_size + 1 entries, the last -1).

In contract (where SGLang leaves intent open, kvfuzz assumes):

* `page_size` is a positive integer: the page arithmetic (`(n + ps - 1) // ps`, `p * ps`,
  `slot // ps`) holds for any (SGLang's page sizes are 1, 16, 64 ...; the generator draws 3 too);
* `kv_flat` (int32 in SGLang; int64 too) and `kv_indptr` (int32 or int64) are 1-D with unit stride
  (the kernel indexes them by offset and program id: their strides are not passed); bs >= 1;
* `page_table` is int32 [R, W] with R >= bs (a CUDA-graph buffer holds max_bs rows) and unit column
  stride, any row stride; `swa_page_table` is given exactly when the mapping is, int32 [R', W],
  R' >= bs, with page_table's row stride (SGLang allocates both alike but in 0.5.12, whose graph
  page_table views a buffer of more rows than the SWA one);
* kv_indptr[0] >= 0, kv_indptr nondecreasing (n >= 0), kv_indptr[bs] <= kv_flat's size, and
  ceil(n / ps) <= W (SGLang sizes W for max_context_len tokens);
* every slot the kernel reads (kv_flat[s + p * ps], p < ceil(n / ps)) is a KV-pool slot, in
  [0, 2^31): Triton's `//` truncates toward zero (-1 // 16 is 0 there, -1 in Python), so the page
  of a negative one is not well defined; with SWA, every such slot is < M and the mapping's entry
  there is an SWA slot, in [0, 2^31) (freed entries hold 0); M >= 1, since a lane past a request's
  pages loads slot 0 (`other=0`) and reads `swa_slot_mapping[0]` unmasked (it stores nothing: that
  read is in contract whatever the entry holds).

SGLang's guards (docs/guards.md): the kernel (one text 0.5.12 - 0.5.23) returns from a program
past a request's blocks (`block_id * BLOCK_SIZE >= num_blocks`, so the `(bs, cdiv(max_blocks,
1024))` grid may be wider than any row) and loads the slots with `other=0`, so the lanes past a
request's pages read `swa_slot_mapping[0]` and store nothing; an odd entry 0 is in contract.
The EAGLE draft's CUDA-graph replay launches the graph's bs over padded requests of no tokens
(equal `kv_indptr` entries): in contract. Production sizes (`generate.py`): contexts to 163840
tokens (160 blocks of 1024 pages), batches past 256; every cell is judged.
"""

from __future__ import annotations

import numpy as np

from ...case import Case
from ...contract import Arg, Contract, Scalar, dtype_and_layout_reasons
from ..aiter_page_table_common import BLOCK_SIZE, PAGE_TABLE, SWA_MAPPING, SWA_PAGE_TABLE, cells_of, kernel_path, \
    page_size_reasons, racy_of, table_reasons
from ..kv_index_common import I32_64, NO_REQUEST, refuses_nothing, vector_reasons
from . import oracle

ARGS = (
    Arg("kv_flat", "in", I32_64, "N", doc="token-level KV-pool slots (in [0, 2^31) where read), the requests' ranges"),
    Arg("kv_indptr", "in", I32_64, "bs+1", doc="CSR offsets: kv_indptr[0] >= 0, nondecreasing, kv_indptr[bs] <= N"),
    PAGE_TABLE,
    SWA_PAGE_TABLE,
    SWA_MAPPING,
)
SCALARS = (Scalar("page_size", doc="PAGE_SIZE: tokens per page, a positive integer"),)
ONE_D = ("kv_flat", "kv_indptr", "swa_slot_mapping")


def kv_lens(case: Case) -> np.ndarray:
    """Each request's tokens: kv_indptr[i + 1] - kv_indptr[i]."""
    ptr = np.asarray(case.values["kv_indptr"], np.int64)
    return ptr[1:] - ptr[:-1]


def structural_reasons(case: Case) -> list[str]:
    reasons = page_size_reasons(case) or dtype_and_layout_reasons(CONTRACT, case)
    if reasons:
        return reasons
    t = case.tensors
    reasons = vector_reasons(t, ONE_D, "offset or program id")
    if reasons:
        return reasons
    bs = t["kv_indptr"].shape[0] - 1
    if bs < 1:
        return [NO_REQUEST]
    return table_reasons(t, bs)


CONTRACT = Contract(
    name="aiter_ragged_page_table",
    entry="scatter_ragged_to_page_table_kernel",
    doc=__doc__,
    args=ARGS,
    scalars=SCALARS,
    variants={"default": "SGLang 0.5.12-0.5.23 (one kernel text): cells [i, p < ceil(n[i] / ps)) of page_table (and "
              "swa_page_table) written, n[i] = kv_indptr[i + 1] - kv_indptr[i], the rest untouched"},
    paths={"no_swa": "swa_slot_mapping is None (HAS_SWA off): page_table alone",
           "swa": "swa_slot_mapping given (HAS_SWA on): swa_page_table too, through the mapping"},
    kernel_path=kernel_path,
    structural_reasons=structural_reasons,
    must_refuse=refuses_nothing,
    cells=cells_of(kv_lens),
    racy=racy_of(kv_lens),
    numpy_ref=oracle.numpy_ref,
    torch_ref=oracle.torch_ref,
    block_sizes=(BLOCK_SIZE,),
)
