"""`create_flashmla_kv_indices_triton`: each request's page table for SGLang's MLA decode backends
(FlashMLA, CUTLASS MLA, TRT-LLM MLA, and AITER's unified attention with pages of one token):
row `i` of `kv_indices` gets the page of every `page_size`-th token of the request's
`req_to_token` row.

For every request i < bs, with r = req_pool_indices[i], s = kv_start_idx[i] (0 when
`kv_start_idx` is None), n = paged_kernel_lens[i] and ps = PAGED_SIZE (`page_size`):

    page = req_to_token[r, s + p * ps] // ps                 for 0 <= p < ceil(n / ps)
    kv_indices[i, p] = page * m                              without v2p
    kv_indices[i, p] = v2p[page] * m                         with v2p (0.5.17-0.5.18)

where m = PAGE_MULT (the case's `page_mult`, 1 when absent). Those cells must be written; every other cell of `kv_indices` (the columns past a request's
pages, which SGLang fills with -1 before the call, and the rows past bs of a CUDA-graph buffer)
must stay as it was, and no input is written. It is a bare `@triton.jit` kernel: kvfuzz launches
it as SGLang's backends do, grid `(bs, get_num_kv_index_blocks_flashmla(W, ps))` =
`(bs, ceil(W / (4096 // ps)))` with W = kv_indices' width (one program per block of 4096 tokens,
`NUM_PAGE_PER_BLOCK` = 4096 // ps pages), the row strides of `req_to_token` and `kv_indices` as
the constexprs `req_to_token_ptr_stride` and `kv_indices_ptr_stride`, and `PAGED_SIZE` = ps (a
constexpr). 0.5.17-0.5.18's kernel also takes `v2p_ptr` and `PAGE_MULT`: the TRT-LLM MLA backend
passes its `_v2p_page_table` and `_kernel_page_multiplier` in both its launches (eager and CUDA-graph
replay), None and 1 for the static pool, and with unified memory (`UnifiedMLAHooks`) the full
sub-pool's `virtual_to_physical` table (int64, num_pages + 1 entries, -1 where a virtual page is
unmapped and in the trailing sentinel, page 0 the padding anchor) and the number of
full-attention MLA layers (1 on a rank owning one layer). kvfuzz launches both modes there
(variant `v2p`): the case's `v2p` tensor (absent: None) and `page_mult` (absent: 1).

The backends' page sizes: FlashMLA 64 (its default PAGED_SIZE), CUTLASS MLA 128 (0.5.13-0.5.19),
TRT-LLM MLA the server's page size, 32 or 64, AITER 1 (its positional 8th argument); the
generator draws those, and 16 and 4096 as edges. Every backend passes `kv_start_idx=None`; the
`start` path is the kernel's own (kvfuzz reads it as above: the pages of the tokens from s on).

In contract (where SGLang leaves intent open, kvfuzz assumes):

* `page_size` is a power of two from 1 to 4096 (the kernel's `tl.arange(0, 4096 // ps)` needs a
  power of two; others are out of contract, and SGLang's kernel then fails to compile);
* `req_to_token` is int32 [pool rows, max context] with unit column stride; any row stride
  (padded rows, or one row repeated by stride 0). SGLang passes `req_to_token.stride(0)`;
* `kv_indices` is int32 [R, W] with R >= bs (SGLang's CUDA-graph buffers hold max_bs rows) and
  unit column stride; any row stride, passed as `kv_indices_ptr_stride` (SGLang passes
  `stride(0)` or `shape[1]`, the same for its contiguous buffers; kvfuzz passes `stride(0)`,
  and builds the grid from the width W = `shape[1]`);
* `req_pool_indices`, `paged_kernel_lens` and `kv_start_idx` (int32 or int64, lengths and starts
  within int32: the kernel casts them to int32) are [bs] with unit stride; bs >= 1;
* 0 <= r < pool rows, n >= 0, s >= 0, s + n <= max context, and ceil(n / ps) <= W (SGLang sizes
  W as ceil(max seq_len / ps), (max_context_len + ps) // ps for its graph buffers, or TRT-LLM's
  block count padded to a multiple of lcm(128 / ps, 4096 // ps));
* every token id the kernel reads (req_to_token[r, s + p * ps]) is >= 0: ids are KV-pool slots.
  A negative one is out of contract: Triton's `//` truncates toward zero (-1 // 64 is 0 there,
  -1 in Python), so its page is not well defined;
* `page_mult` an int >= 1 (a constexpr); with `v2p` (int64 in SGLang, int32 too; [V], unit
  stride: the kernel indexes it by page), every page read is in [0, V) (a live token's virtual
  page, or page 0 of a CUDA-graph padding row's pool row 0), and its entry may be -1 (an
  unmapped page: SGLang's table holds -1 there, and the kernel writes -m; 0.5.17 adds no clamp);
  every value written (page * m, or v2p[page] * m) fits int32, kv_indices' dtype.

Padding rows: SGLang's CUDA-graph replay launches the graph's bs over `req_pool_indices[:bs]`
(pool row 0 for the padded requests) with their `seq_lens` fill value; kvfuzz draws pool row 0
among the rows and lengths of 0 and 1 (the padding requests), all in contract. SGLang's guards
(docs/guards.md): 0.5.13's programs past a request's blocks return (`if i < num_pages_loop`, so
the grid may be as wide as the buffer); 0.5.17's v2p gather is masked to the live pages (a lane
past them never reads the table). Production sizes (`generate.py`): tables to 135169 tokens (33
blocks of 4096), batches past 256; every cell is judged.
"""

from __future__ import annotations

import numpy as np

from ...case import Case
from ...contract import Arg, Cells, Contract, Scalar, dtype_and_layout_reasons, zero_stride_reasons
from ..kv_index_common import I32, I32_64, NO_REQUEST, PAGE_BLOCK, POOL_INDICES, matrix_reasons, page_cells, \
    page_size_reasons, refuses_nothing, size_reasons, start_path, vector_reasons
from . import oracle

BLOCK_TOKENS = PAGE_BLOCK  # SGLang's _FLASHMLA_CREATE_KV_BLOCK_SIZE: one program per 4096 tokens of a request

ARGS = (
    Arg("req_to_token", "in", I32, "P,C", doc="token ids (KV-pool slots, >= 0 where read) per request-pool row"),
    POOL_INDICES,
    Arg("paged_kernel_lens", "in", I32_64, "bs", doc="n: the request's tokens, >= 0, ceil(n / ps) <= W"),
    Arg("kv_start_idx", "in", I32_64, "bs", optional=True, doc="s: first column read (absent: None, 0)"),
    Arg("v2p", "in", ("int64", "int32"), "V", optional=True,
        doc="0.5.17-0.5.18: virtual page -> physical page (-1 unmapped); every page read < V (absent: None)"),
    Arg("kv_indices", "out", I32, "R,W", doc="R >= bs; cells [i, p < ceil(n[i] / ps)) written, the rest untouched"),
)
SCALARS = (Scalar("page_size", doc="PAGED_SIZE: tokens per page, a power of two <= 4096"),
           Scalar("page_mult", doc="0.5.17-0.5.18: PAGE_MULT, the MLA layer count each page is scaled by (absent: 1)"))
ONE_D = ("req_pool_indices", "paged_kernel_lens", "kv_start_idx", "v2p")

# the later releases' arguments each variant's cases may carry (a release without them gets none)
VARIANT_ARGS = {"default": (), "v2p": ("v2p", "page_mult")}


def mode_reasons(case: Case) -> list[str]:
    """`page_mult` an int >= 1, and v2p / page_mult only in a variant whose kernel takes them."""
    reasons = []
    allowed = VARIANT_ARGS.get(case.variant, ())
    mult = case.scalars.get("page_mult", 1)
    if isinstance(mult, bool) or not isinstance(mult, (int, np.integer)) or mult < 1:
        reasons.append(f"page_mult must be an int >= 1, got {mult!r}")
    elif "page_mult" in case.scalars and "page_mult" not in allowed:
        reasons.append(f"page_mult is not an argument of variant {case.variant}")
    if "v2p" in case.tensors and "v2p" not in allowed:
        reasons.append(f"v2p is not an argument of variant {case.variant}")
    return reasons


def structural_reasons(case: Case) -> list[str]:
    reasons = page_size_reasons(case) or mode_reasons(case) or dtype_and_layout_reasons(CONTRACT, case)
    if reasons:
        return reasons
    t = case.tensors
    reasons = matrix_reasons(t, "req_to_token") + matrix_reasons(t, "kv_indices") + vector_reasons(t, ONE_D)
    if reasons:
        return reasons
    bs = t["req_pool_indices"].shape[0]
    if bs < 1:
        return [NO_REQUEST]
    reasons = size_reasons(t, bs, {"paged_kernel_lens": bs, "kv_start_idx": bs})
    if t["kv_indices"].shape[0] < bs:
        reasons.append(f"kv_indices has {t['kv_indices'].shape[0]} rows, fewer than bs = {bs} (the kernel writes "
                       "row i for request i)")
    return reasons


def kernel_path(case: Case) -> str:
    """The start path, and the unified-memory remap (v2p given)."""
    return start_path(case) + ("/v2p" if "v2p" in case.tensors else "")


def cells(case: Case) -> dict[str, Cells]:
    return {"kv_indices": page_cells(case, "kv_indices", "paged_kernel_lens")}


BACKEND_PAGE_SIZES = (1, 32, 64, 128)  # AITER 1, TRT-LLM MLA 32 or 64, FlashMLA 64, CUTLASS MLA 128 (call sites)


def stress(case: Case) -> list[str]:
    """In contract, but no SGLang call site launches it (docs/callsites.md)."""
    out = []
    if "kv_start_idx" in case.tensors:
        out.append("kv_start_idx given (every SGLang backend passes None)")
    ps = case.scalars.get("page_size")
    if ps not in BACKEND_PAGE_SIZES:
        out.append(f"page_size {ps}: no MLA backend uses it (AITER 1, TRT-LLM MLA 32 or 64, FlashMLA 64, CUTLASS MLA 128)")
    return out + zero_stride_reasons(case, ("req_to_token",))


CONTRACT = Contract(
    name="flashmla_kv_indices",
    entry="create_flashmla_kv_indices_triton",
    doc=__doc__,
    args=ARGS,
    scalars=SCALARS,
    variants={"default": "SGLang 0.5.6-0.5.16, 0.5.19-0.5.23 (0.5.6-0.5.12 loop over the blocks in one program; no "
                         "v2p_ptr, PAGE_MULT): cells [i, p < ceil(n[i] / ps)) of kv_indices written, the rest untouched",
              "v2p": "SGLang 0.5.17-0.5.18 (v2p_ptr, PAGE_MULT: the unified pool's page remap, times the MLA layer "
                     "count): default's cells, each v2p[page] * PAGE_MULT (page * PAGE_MULT without v2p)"},
    paths={"no_start": "kv_start_idx is None (every SGLang backend): pages from column 0",
           "start": "kv_start_idx given: pages of the tokens from column kv_start_idx[i]",
           "*/v2p": "v2p given: each page through the virtual -> physical table, times PAGE_MULT"},
    kernel_path=kernel_path,
    structural_reasons=structural_reasons,
    must_refuse=refuses_nothing,
    cells=cells,
    numpy_ref=oracle.numpy_ref,
    torch_ref=oracle.torch_ref,
    block_sizes=(BLOCK_TOKENS,),
    variant_args=VARIANT_ARGS,
    stress=stress,
)
