"""`create_chunked_prefix_cache_kv_indices`: gather one prefix chunk's token ids per request from
its `req_to_token` row into one flat stream (`chunk_kv_indices`), request `i` at
`chunk_cu_seq_lens[i]`. SGLang's MLA chunked-prefix prefill (DeepSeek's MHA path over the cached
prefix, chunk by chunk) builds each chunk's KV indices with it, and so does the DCP planner for
the whole prefix.

For every request i < bs, with r = req_pool_indices[i], s = chunk_start_idx[i],
n = chunk_seq_lens[i] and o = chunk_cu_seq_lens[i]:

    chunk_kv_indices[o + j] = req_to_token[r, s + j]    for 0 <= j < n

Those cells must be written; every other cell of `chunk_kv_indices` must stay as it was, and no
input is written. It is a bare `@triton.jit` kernel: kvfuzz launches it as SGLang's callers do,
grid `(bs,)` (ForwardBatch's prepare_chunked_kv_indices, 0.5.17's prefill CUDA-graph runner,
the DCP planner's `(len(seq_lens),)`), with the row stride of `req_to_token` as the constexpr
`req_to_token_ptr_stride`.

In contract (where SGLang leaves intent open, kvfuzz assumes):

* `req_to_token` is int32 [pool rows, max context] with unit column stride; any row stride
  (padded rows, or one row repeated by stride 0). Every caller passes `req_to_token.shape[1]`,
  which is the row stride of SGLang's contiguous table; kvfuzz passes `req_to_token.stride(0)`,
  the same value there, so that a padded or repeated row is a case the kernel can get right;
* `req_pool_indices`, `chunk_start_idx` and `chunk_seq_lens` (int32 or int64, values within
  int32: the kernel casts the start and the length to int32) are [bs], `chunk_cu_seq_lens` is
  int32 [bs + 1] or [bs] (the kernel reads only its first bs entries, and the DCP planner passes
  `extend_cu_prefix_lens[:-1]`), `chunk_kv_indices` int32; every 1-D tensor has unit stride (the
  kernel indexes them by program id: their strides are not passed); bs >= 1;
* 0 <= r < pool rows, n >= 0, s >= 0 and s + n <= max context (SGLang's chunks never pass the
  prefix, itself inside the row; a request whose prefix ended has n = 0 and a start at the
  chunk's, at most its prefix length);
* chunk_cu_seq_lens[0] >= 0 (SGLang's is 0; a positive base leaves a prefix of the output
  untouched), chunk_cu_seq_lens[i + 1] = chunk_cu_seq_lens[i] + n for every entry it has, and
  `chunk_kv_indices` holds at least chunk_cu_seq_lens[bs - 1] + n[bs - 1] cells (SGLang's holds
  exactly the chunk's tokens, or, in the prefill CUDA-graph runner, the chunk capacity: a tail
  that must stay untouched).

SGLang's guards (docs/guards.md): the kernel has none (one text in every release); the callers
cut a chunk of `SGLANG_MAX_KV_CHUNK_CAPACITY // bs` tokens (131072 // bs by default; one chunk of
the longest prefix on the single-chunk path) and assert no chunk passes the capacity; the prefill
CUDA-graph runner (0.5.17 on, `_populate_chunked_prefix_buffers`) launches all its request slots
with `(prefix - start).clamp(0, chunk_len)` tokens, the padded ones of a zero-length prefix at pool
row 0 with the chunk's start, into a zeroed output of the chunk capacity. All of
it is in contract, and production-size classes draw it (`generate.py`: tables to 131585 tokens,
chunks to 131072 tokens, batches past 256; every cell is judged).
"""

from __future__ import annotations

import numpy as np

from ...case import Case
from ...contract import Arg, Cells, Contract, zero_stride_reasons
from ..kv_index_common import BLOCK, I32, I32_64, POOL_INDICES, TABLE, csr_racy, gather_reasons, refuses_nothing, \
    size_reasons, span_cells
from . import oracle

ARGS = (
    TABLE,
    POOL_INDICES,
    Arg("chunk_start_idx", "in", I32_64, "bs", doc="s: the chunk's first column in the request's row, >= 0"),
    Arg("chunk_seq_lens", "in", I32_64, "bs", doc="n: the chunk's tokens in the request, >= 0, s + n <= C"),
    Arg("chunk_cu_seq_lens", "in", I32, "bs+1 or bs",
        doc="offsets: cu[i+1] = cu[i] + n[i] where cu has the entry, cu[0] >= 0"),
    Arg("chunk_kv_indices", "out", I32, "N", doc="N >= cu[bs-1] + n[bs-1]; cells [cu[i], cu[i] + n[i]) written"),
)
ONE_D = ("req_pool_indices", "chunk_start_idx", "chunk_seq_lens", "chunk_cu_seq_lens", "chunk_kv_indices")


def kernel_path(case: Case) -> str:
    spec = case.tensors.get("chunk_cu_seq_lens")
    bs = case.tensors["req_pool_indices"].shape[0] if "req_pool_indices" in case.tensors else -1
    return "cu_bs" if spec is not None and spec.shape and spec.shape[0] == bs else "cu_bs_plus_1"


def _sizes(t, bs: int) -> list[str]:
    reasons = size_reasons(t, bs, {"chunk_start_idx": bs, "chunk_seq_lens": bs})
    if t["chunk_cu_seq_lens"].shape[0] not in (bs, bs + 1):
        reasons.append(f"chunk_cu_seq_lens has {t['chunk_cu_seq_lens'].shape[0]} elements, expected {bs + 1} "
                       f"or {bs} (bs = {bs})")
    return reasons


def structural_reasons(case: Case) -> list[str]:
    return gather_reasons(CONTRACT, case, ONE_D, _sizes)


def cells(case: Case) -> dict[str, Cells]:
    cu = np.asarray(case.values["chunk_cu_seq_lens"], dtype=np.int64)
    lens = np.asarray(case.values["chunk_seq_lens"], dtype=np.int64)
    return {"chunk_kv_indices": span_cells(case.tensors["chunk_kv_indices"], max(int(cu[0]), 0),
                                           max(int(cu[lens.shape[0] - 1] + lens[-1]), 0))}


def stress(case: Case) -> list[str]:
    """In contract, but no SGLang call site launches it: a request table repeated by stride 0."""
    return zero_stride_reasons(case, ("req_to_token",))


CONTRACT = Contract(
    name="chunked_prefix_kv_indices",
    entry="create_chunked_prefix_cache_kv_indices",
    doc=__doc__,
    args=ARGS,
    scalars=(),
    variants={"default": "SGLang 0.5.6-0.5.23 (the kernel unchanged): cells [cu[i], cu[i] + n[i]) of "
              "chunk_kv_indices written, the rest untouched"},
    paths={"cu_bs_plus_1": "chunk_cu_seq_lens has bs + 1 entries (ForwardBatch's chunks, the prefill CUDA-graph "
           "runner)",
           "cu_bs": "chunk_cu_seq_lens has bs entries (the DCP planner's extend_cu_prefix_lens[:-1])"},
    kernel_path=kernel_path,
    structural_reasons=structural_reasons,
    must_refuse=refuses_nothing,
    cells=cells,
    racy=csr_racy("chunk_kv_indices", "chunk_cu_seq_lens", "chunk_seq_lens"),
    numpy_ref=oracle.numpy_ref,
    torch_ref=oracle.torch_ref,
    block_sizes=(BLOCK,),
    stress=stress,
)
