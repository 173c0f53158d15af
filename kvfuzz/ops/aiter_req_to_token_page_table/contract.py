"""`scatter_req_to_token_to_page_table_kernel`: the 2-D block-level page table of SGLang's AITER
unified-attention backend for EAGLE target verify (and, from 0.5.20, a plain extend), built on the
device from `req_to_token`: row `i` of `page_table` gets the page of every `page_size`-th token of
request `i`'s first seq_lens[i] + DRAFT_NUM tokens (its prefix and the draft tokens just written),
and, for a model with sliding-window (SWA) layers, row `i` of `swa_page_table` the page of that
token's SWA slot (`swa_slot_mapping`) in the same pass.

For every request i < bs = req_pool_indices.shape[0], with r = req_pool_indices[i],
n = seq_lens[i] + D (D = DRAFT_NUM, `draft_num`), ps = PAGE_SIZE (`page_size`) and
slot_p = req_to_token[r, p * ps]:

    page_table[i, p]     = slot_p // ps                       for 0 <= p < ceil(n / ps)
    swa_page_table[i, p] = swa_slot_mapping[slot_p] // ps     (with SWA: the mapping given)

Those cells must be written; every other cell of both tables (the columns past a request's
pages, any rows past bs) must stay as it was, and no input is written. It is a bare
`@triton.jit` kernel: kvfuzz launches it as SGLang's `_build_verify_unified_metadata` (and 0.5.20's
`_build_extend_unified_page_table`) does, grid `(bs, cdiv(max(W, 1), 1024))` with W = page_table's
width (SGLang's max_blocks: ceil(max_context_len / ps) for verify, the batch's longest sequence's
pages for the extend), one program per block of BLOCK_SIZE = 1024 pages, the row strides of
`req_to_token` and `page_table` as `req_to_token_stride` and `page_table_stride` (swa_page_table is
written through the latter too), `DRAFT_NUM` = D, `PAGE_SIZE` = ps and `HAS_SWA` = whether the
mapping is given.

SGLang's D is the verify's draft tokens per request (speculative_num_draft_tokens, a few), 0 for
the extend; its req_pool_indices and seq_lens are ForwardBatch's (int64); req_to_token is the
pool's table, `4 + speculative_num_draft_tokens` columns wider than the context length; the
mapping is the SWA pool's `full_to_swa_index_mapping.long()` (int64, size + page_size + 1
entries, the last -1).

In contract (where SGLang leaves intent open, kvfuzz assumes):

* `page_size` is a positive integer (the page arithmetic holds for any; SGLang's are powers of two,
  the generator draws 3 too); `draft_num` is an integer >= 0;
* `req_to_token` is int32 [pool rows, C] with unit column stride; any row stride (padded rows, or
  one row repeated by stride 0);
* `req_pool_indices` and `seq_lens` (int64 in SGLang; int32 too) are [bs] with unit stride (the
  kernel indexes them by program id: their strides are not passed); bs >= 1;
* `page_table` is int32 [R, W] with R >= bs (SGLang's are exactly bs rows: `[:bs]` of its graph
  buffers) and unit column stride, any row stride; `swa_page_table` is given exactly when the
  mapping is, int32 [R', W], R' >= bs, with page_table's row stride;
* 0 <= r < pool rows, seq_lens[i] >= 0, n = seq_lens[i] + D <= C (the request's tokens, drafts
  included, are in its row), and ceil(n / ps) <= W. SGLang sizes W for max_context_len tokens but
  the table's rows for 4 + D more; whether a verify of a request within D tokens of the context
  length, whose pages would then pass W, reaches the kernel is the scheduler's, not checked here:
  kvfuzz keeps such a case out of contract (the kernel takes no width: it writes on into the next
  row);
* every slot the kernel reads (req_to_token[r, p * ps], p < ceil(n / ps)) is a KV-pool slot, >= 0
  (Triton's `//` truncates toward zero, so the page of a negative one is not well defined); with
  SWA, every such slot is < M and the mapping's entry there is an SWA slot, in [0, 2^31); M >= 1,
  since a lane past a request's pages loads slot 0 (`other=0`) and reads `swa_slot_mapping[0]`
  unmasked (it stores nothing: that read is in contract whatever the entry holds).

SGLang's guards (docs/guards.md): the kernel (one text 0.5.12 - 0.5.23) returns from a program
past a request's blocks and loads the slots with `other=0` (the lanes past the pages read
`swa_slot_mapping[0]` and store nothing). The verify's CUDA-graph replay pads `seq_lens` with the
draft count (`get_cuda_graph_seq_len_fill_value`) and `req_pool_indices` with pool row 0: padded
requests of `DRAFT_NUM` tokens at pool row 0, in contract. Production sizes (`generate.py`):
contexts to 163840 tokens, batches past 256; every cell is judged.
"""

from __future__ import annotations

import numpy as np

from ...case import Case
from ...contract import Arg, Contract, Scalar, dtype_and_layout_reasons, zero_stride_reasons
from ..aiter_page_table_common import BLOCK_SIZE, PAGE_TABLE, SWA_MAPPING, SWA_PAGE_TABLE, cells_of, kernel_path, \
    page_size_reasons, racy_of, table_reasons
from ..kv_index_common import I32, I32_64, NO_REQUEST, POOL_INDICES, matrix_reasons, refuses_nothing, size_reasons, \
    vector_reasons
from . import oracle

ARGS = (
    Arg("req_to_token", "in", I32, "P,C", doc="KV-pool slots (>= 0 where read) per request-pool row"),
    POOL_INDICES,
    Arg("seq_lens", "in", I32_64, "bs", doc="the request's tokens before the drafts: >= 0, n + draft_num <= C"),
    PAGE_TABLE,
    SWA_PAGE_TABLE,
    SWA_MAPPING,
)
SCALARS = (Scalar("page_size", doc="PAGE_SIZE: tokens per page, a positive integer"),
           Scalar("draft_num", doc="DRAFT_NUM: draft tokens per request after seq_lens[i], >= 0 (0: an extend)"))
ONE_D = ("req_pool_indices", "seq_lens", "swa_slot_mapping")


def kv_lens(case: Case) -> np.ndarray:
    """Each request's tokens: seq_lens[i] + DRAFT_NUM."""
    return np.asarray(case.values["seq_lens"], np.int64) + int(case.scalars["draft_num"])


def draft_num_reasons(case: Case) -> list[str]:
    D = case.scalars.get("draft_num")
    if not (isinstance(D, int) and not isinstance(D, bool) and D >= 0):
        return [f"draft_num {D!r} is not an integer >= 0"]
    return []


def structural_reasons(case: Case) -> list[str]:
    reasons = page_size_reasons(case) or draft_num_reasons(case) or dtype_and_layout_reasons(CONTRACT, case)
    if reasons:
        return reasons
    t = case.tensors
    reasons = matrix_reasons(t, "req_to_token") + vector_reasons(t, ONE_D, "program id or slot")
    if reasons:
        return reasons
    bs = t["req_pool_indices"].shape[0]
    if bs < 1:
        return [NO_REQUEST]
    return size_reasons(t, bs, {"seq_lens": bs}) or table_reasons(t, bs)


def stress(case: Case) -> list[str]:
    """In contract, but no SGLang call site launches it: a request table repeated by stride 0."""
    return zero_stride_reasons(case, ("req_to_token",))


CONTRACT = Contract(
    name="aiter_req_to_token_page_table",
    entry="scatter_req_to_token_to_page_table_kernel",
    doc=__doc__,
    args=ARGS,
    scalars=SCALARS,
    variants={"default": "SGLang 0.5.12-0.5.23 (one kernel text): cells [i, p < ceil((seq_lens[i] + draft_num) / ps)) "
              "of page_table (and swa_page_table) written, the rest untouched"},
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
    stress=stress,
)
