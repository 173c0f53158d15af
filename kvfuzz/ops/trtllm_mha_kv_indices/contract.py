"""`create_trtllm_mha_kv_indices_triton`: the page table (block table) of SGLang's TRT-LLM MHA
attention backend, built on the device from the requests' lengths (no host max): row `i` of
`page_table` gets the page of every `page_size`-th token of request `i`'s `req_to_token` row, and,
for a model with sliding-window (SWA) layers, row `i` of `swa_page_table` the page of that
token's SWA slot (`full_to_swa`, the full pool's slot -> SWA slot mapping) in the same pass.

For every request i < bs, with r = req_pool_indices[i], n = seq_lens[i], ps = PAGE_SIZE
(`page_size`) and s_p = req_to_token[r, p * ps]:

    page_table[i, p]     = s_p // ps                 for 0 <= p < ceil(n / ps)
    swa_page_table[i, p] = full_to_swa[s_p] // ps    (with SWA: `full_to_swa` given)

Those cells must be written; every other cell of both tables (the columns past a request's
pages) must stay as it was, and no input is written. The backend relies on the live pages only:
TRT-LLM's attention reads row i up to ceil(cache_seqlens[i] / ps) pages, and the rest of the row
is `torch.empty` garbage (eager) or a CUDA-graph buffer's stale values; kvfuzz requires it
untouched, as SGLang's kernel leaves it (its docstring: programs past a request's pages are
guarded out, so the work is bounded by the device-side lengths). It is a bare `@triton.jit`
kernel: kvfuzz launches it as SGLang's builder `build_trtllm_mha_page_table` does, grid
`(bs, get_num_mha_kv_index_blocks(W, ps))` = `(bs, ceil(W / (4096 // ps)))` with (bs, W) =
page_table's shape (one program per block of 4096 tokens, 4096 // ps pages), the row strides of
`req_to_token` and `page_table` as the constexprs `req_to_token_stride` and `page_table_stride`,
`PAGE_SIZE` = ps, `HAS_SWA` = whether `full_to_swa` is given (the builder's rule), and from
0.5.16 on `full_to_swa_numel` = full_to_swa.numel() (0 without SWA; 0.5.16's kernel clamps the
slot into the mapping, which changes nothing in contract).

The backend's page size is the server's: 16, 32 or 64 (0.5.14-0.5.22's server arguments), or 128
(0.5.23); the generator draws those, and 1 and 4096 as edges. SGLang's page table is
`(bs, ceil(context_len / ps))` while `req_to_token` is a few columns wider (4 plus the draft
tokens); the generator draws that width, the row's pages, fewer and more.

In contract (where SGLang leaves intent open, kvfuzz assumes):

* `page_size` is a power of two from 1 to 4096 (the builder asserts that it divides 4096; the
  kernel's `tl.arange(0, 4096 // ps)` needs a power of two);
* `req_to_token` is int32 [pool rows, max context] with unit column stride; any row stride
  (padded rows, or one row repeated by stride 0). SGLang passes `req_to_token.stride(0)`;
* `page_table` is int32 [bs, W] with unit column stride and any row stride (SGLang's eager table
  is contiguous, its graph buffer's `[:bs]` rows too), exactly bs rows (the builder takes bs from
  it); `swa_page_table` is given exactly when `full_to_swa` is (the builder asserts it), with
  page_table's shape and row stride (the kernel writes both through `page_table_stride`; SGLang
  allocates both alike); a table of fewer than 2^31 elements (the kernel's output offsets are
  int32);
* `req_pool_indices` and `seq_lens` (int32 or int64; SGLang passes int64 indices and int32
  lengths) are [bs] with unit stride; `full_to_swa` (int64 in SGLang; int32 too) is [M], M >= 1,
  unit stride (the kernel indexes them by program id and slot: their strides are not passed);
  bs >= 1;
* 0 <= r < pool rows, 0 <= n <= max context, and ceil(n / ps) <= W (SGLang sizes W as
  ceil(context_len / ps), so a length past the model's context is out of contract);
* every slot the kernel reads (req_to_token[r, p * ps], p < ceil(n / ps)) is >= 0: slots index
  the KV pool, and Triton's `//` truncates toward zero (-1 // 16 is 0 there, -1 in Python), so
  the page of a negative one is not well defined; with SWA, every such slot is < M (SGLang's
  mapping has size + page_size + 1 entries, its last -1, which no live slot reaches) and the
  mapping's entry there is an SWA slot, in [0, 2^31) (freed entries hold 0).

SGLang's guards (docs/guards.md): programs past a request's 4096-token blocks return (0.5.14
on); 0.5.16 clamps the SWA lookup's index into the mapping (for the masked lanes, whose slot load
has no `other`; the builder's docstring says live slots are always valid). CUDA-graph replay pads
`seq_lens` with 1 and `req_pool_indices` with pool row 0 (slot 0): in contract. A live slot
outside the mapping stays out of contract in every release.
"""

from __future__ import annotations

import numpy as np

from ...case import Case
from ...contract import INT32_MAX, Arg, Cells, Contract, Scalar, dtype_and_layout_reasons, written_more_than_once
from ...contract import zero_stride_reasons
from ..kv_index_common import I32, I32_64, NO_REQUEST, PAGE_BLOCK, POOL_INDICES, matrix_reasons, page_cells, \
    page_counts, page_size_reasons, refuses_nothing, size_reasons, vector_reasons
from . import oracle

BLOCK_TOKENS = PAGE_BLOCK  # SGLang's _MHA_KV_INDEX_BLOCK_TOKENS: one program per 4096 tokens of a request

ARGS = (
    Arg("req_to_token", "in", I32, "P,C", doc="KV-pool slots (>= 0 where read) per request-pool row"),
    POOL_INDICES,
    Arg("seq_lens", "in", I32_64, "bs", doc="n: the request's tokens, 0 <= n <= C, ceil(n / ps) <= W"),
    Arg("full_to_swa", "in", ("int64", "int32"), "M", optional=True,
        doc="full slot -> SWA slot (absent: no SWA); every slot read < M, its entry in [0, 2^31)"),
    Arg("page_table", "out", I32, "bs,W", doc="cells [i, p < ceil(n[i] / ps)) written, the rest untouched"),
    Arg("swa_page_table", "out", I32, "bs,W", optional=True,
        doc="exactly with full_to_swa; page_table's shape and row stride; the same cells written"),
)
SCALARS = (Scalar("page_size", doc="PAGE_SIZE: tokens per page, a power of two <= 4096"),)
ONE_D = ("req_pool_indices", "seq_lens", "full_to_swa")
OUTPUTS = ("page_table", "swa_page_table")


def kernel_path(case: Case) -> str:
    return "swa" if "full_to_swa" in case.tensors else "no_swa"


def structural_reasons(case: Case) -> list[str]:
    reasons = page_size_reasons(case) or dtype_and_layout_reasons(CONTRACT, case)
    if reasons:
        return reasons
    t = case.tensors
    if ("full_to_swa" in t) != ("swa_page_table" in t):
        return ["full_to_swa and swa_page_table must be given together (SGLang's builder asserts it)"]
    reasons = [r for name in ("req_to_token", *OUTPUTS) if name in t for r in matrix_reasons(t, name)]
    reasons += vector_reasons(t, ONE_D, "program id or slot")
    if reasons:
        return reasons
    bs = t["req_pool_indices"].shape[0]
    if bs < 1:
        return [NO_REQUEST]
    reasons = size_reasons(t, bs, {"seq_lens": bs})
    out = t["page_table"]
    if out.shape[0] != bs:
        reasons.append(f"page_table has {out.shape[0]} rows, expected bs = {bs} (the builder launches one program "
                       "row per page_table row and reads each request's length and pool index by it)")
    elif bs > 1 and out.shape[1] and (bs - 1) * out.strides[0] + out.shape[1] > INT32_MAX:
        reasons.append(f"page_table spans {(bs - 1) * out.strides[0] + out.shape[1]} elements, past int32 (the "
                       "kernel's output offsets are int32)")
    swa = t.get("swa_page_table")
    if swa is not None:
        if swa.shape != out.shape:
            reasons.append(f"swa_page_table has shape {swa.shape}, page_table {out.shape}")
        elif bs > 1 and swa.strides[0] != out.strides[0]:
            reasons.append(f"swa_page_table's row stride {swa.strides[0]} differs from page_table's "
                           f"{out.strides[0]} (the kernel writes both through page_table_stride)")
        if t["full_to_swa"].shape[0] < 1:
            reasons.append("full_to_swa is empty")
    return reasons


def cells(case: Case) -> dict[str, Cells]:
    # swa_page_table has page_table's shape and the same cells written
    return {name: page_cells(case, "page_table", "seq_lens") for name in OUTPUTS if name in case.tensors}


def racy(case: Case) -> dict[str, np.ndarray]:
    """Cells two programs write: request i's programs write pages p < ceil(n[i] / ps) (up to the
    grid's last block) at i * row stride + p, so a request with more pages than the row holds
    (out of contract) writes on into the next row, which that row's request writes too."""
    out = case.tensors["page_table"]
    if len(out.shape) != 2 or page_size_reasons(case):
        return {}
    ps = case.scalars["page_size"]
    R, W = out.shape
    stride = out.strides[0]
    if R < 2 or W == 0 or stride < W:
        return {}
    per_block = BLOCK_TOKENS // ps
    reach = -(-W // per_block) * per_block  # pages the grid's blocks cover
    written = np.minimum(page_counts(case, "seq_lens", R), reach)
    hit = written_more_than_once(R * stride + reach, np.arange(R, dtype=np.int64) * stride, written)
    mask = hit[np.arange(R)[:, None] * stride + np.arange(W)[None, :]]
    return {name: mask for name in OUTPUTS if name in case.tensors}


def stress(case: Case) -> list[str]:
    """In contract, but no SGLang call site launches it: a request table repeated by stride 0."""
    return zero_stride_reasons(case, ("req_to_token",))


CONTRACT = Contract(
    name="trtllm_mha_kv_indices",
    entry="create_trtllm_mha_kv_indices_triton",
    doc=__doc__,
    args=ARGS,
    scalars=SCALARS,
    variants={"default": "SGLang 0.5.14-0.5.23 (0.5.16's full_to_swa_numel clamps the SWA lookup: the same "
              "in contract): cells [i, p < ceil(n[i] / ps)) of page_table (and swa_page_table) written, the rest "
              "untouched"},
    paths={"no_swa": "full_to_swa is None (HAS_SWA off): page_table alone",
           "swa": "full_to_swa given (HAS_SWA on): swa_page_table too, through the mapping"},
    kernel_path=kernel_path,
    structural_reasons=structural_reasons,
    must_refuse=refuses_nothing,
    cells=cells,
    racy=racy,
    numpy_ref=oracle.numpy_ref,
    torch_ref=oracle.torch_ref,
    block_sizes=(BLOCK_TOKENS,),
    stress=stress,
)
