"""How flashmla_kv_indices's entry point (`create_flashmla_kv_indices_triton`, a bare `@triton.jit`
kernel) is called, its API generations, and the contract variant of each release. Standalone
(the repro script embeds it: the standard library and kvfuzz's standalone modules only).

SGLang's backends launch it `kernel[(bs, get_num_kv_index_blocks_flashmla(W, ps))](req_to_token,
req_pool_indices, seq_lens, None, block_kv_indices, req_to_token.stride(0), W', PAGED_SIZE=ps)`,
where get_num_kv_index_blocks_flashmla(W, ps) = ceil(W / (4096 // ps)) (read from 0.5.13-0.5.23):

* FlashMLA (every release): ps = 64 (its PAGE_SIZE, passed as the default); eager W = W' =
  ceil(max seq_len / 64) (0.5.16 on W' = block_kv_indices.stride(0), the same), the CUDA-graph
  buffer's W = W' = stride(0) of a (max_bs, (max_context_len + 64) // 64) buffer;
* CUTLASS MLA (0.5.13-0.5.19): ps = 128, the same two launches;
* TRT-LLM MLA (every release): ps = the server's page size, 32 or 64; W = W' = the block count
  padded to a multiple of lcm(128 / ps, 4096 // ps) (eager), `block_kv_indices.shape[1]` of its
  graph buffer (replay); 0.5.17-0.5.18 also pass `v2p_ptr=self._v2p_page_table` and
  `PAGE_MULT=self._kernel_page_multiplier` (None and 1 for the static pool);
* AITER (unified attention): ps = 1 (positional), W = W' = max seq_len.

kvfuzz launches `(bs, ceil(W / (4096 // ps)))` with W = kv_indices.shape[1], passes
`kv_indices.stride(0)` and `req_to_token.stride(0)` as the two strides, PAGED_SIZE = the case's
page_size, and, where the kernel takes them (0.5.17-0.5.18), `v2p_ptr` = the case's `v2p` (None
when absent) and `PAGE_MULT` = its `page_mult` (1 when absent), by keyword as TRT-LLM MLA does.

0.5.6-0.5.12 keep the kernel in sglang/srt/layers/attention/utils.py (extracted into their
kv_indices.py) with the same signature, but one program per request loops over every block
(`for i in range(num_pages_loop)`), and the backends launch it `(bs,)`. kvfuzz launches it with
the grid above too: each program of a request's row then computes and writes the same cells with
the same values as the first, so what it writes is what SGLang's `(bs,)` launch writes (the
copies are redundant work, not a different result).
"""

from __future__ import annotations

from ...targets.calls import Generation, OpCall, optional_tensor, row_stride, scalar, tensor

BLOCK_TOKENS = 4096  # SGLang's _FLASHMLA_CREATE_KV_BLOCK_SIZE


def _grid(t, s):
    """(bs, get_num_kv_index_blocks_flashmla(W, page_size)): one program per 4096 tokens."""
    pages_per_block = max(BLOCK_TOKENS // max(int(s["page_size"]), 1), 1)
    width = t["kv_indices"].shape[1]
    return (t["req_pool_indices"].shape[0], (width + pages_per_block - 1) // pages_per_block)


CALL = OpCall(
    supplied={
        "req_to_token_ptr": tensor("req_to_token"),
        "req_pool_indices_ptr": tensor("req_pool_indices"),
        "page_kernel_lens_ptr": tensor("paged_kernel_lens"),
        "kv_start_idx": optional_tensor("kv_start_idx"),  # None when the case has none (every backend's call)
        "kv_indices_ptr": tensor("kv_indices"),
        "req_to_token_ptr_stride": row_stride("req_to_token"),  # a constexpr in every release
        "kv_indices_ptr_stride": row_stride("kv_indices"),  # a constexpr in every release
        "PAGED_SIZE": scalar("page_size"),  # a constexpr, default 64
        "v2p_ptr": optional_tensor("v2p"),  # 0.5.17-0.5.18; None when the case has none (the static pool)
        "PAGE_MULT": lambda t, s: int(s.get("page_mult", 1)),  # 0.5.17-0.5.18, a constexpr
    },
    required=(("req_to_token_ptr",), ("req_pool_indices_ptr",), ("page_kernel_lens_ptr",), ("kv_start_idx",),
              ("kv_indices_ptr",), ("req_to_token_ptr_stride",), ("kv_indices_ptr_stride",), ("PAGED_SIZE",)),
    neutral={},
    legacy=("req_to_token_ptr", "req_pool_indices_ptr", "page_kernel_lens_ptr", "kv_start_idx", "kv_indices_ptr",
            "req_to_token_ptr_stride", "kv_indices_ptr_stride", "PAGED_SIZE"),
    optional={"kv_start_idx": ("kv_start_idx",), "v2p": ("v2p_ptr",)},
    carries={"v2p": ("v2p_ptr",), "page_mult": ("PAGE_MULT",)},
    grid=_grid,
)

GENERATIONS = (
    Generation("0.5.14", "0.5.6-0.5.16,0.5.19-0.5.23", CALL.legacy,
               "the seed's kernel (both strides and PAGED_SIZE constexprs); 0.5.19 went back to it; 0.5.6-0.5.12's "
               "(attention/utils.py) the same signature, one program per request looping over the blocks"),
    Generation("0.5.17", "0.5.17-0.5.18", CALL.legacy + ("v2p_ptr", "PAGE_MULT"),
               "v2p_ptr, PAGE_MULT (unified memory: virtual page -> physical page, times the MLA layer count): "
               "the case's v2p (None when absent) and page_mult (1 when absent)"),
)

# (first release, variant): the copy is the same in every release (0.5.6-0.5.12: the same cells written);
# 0.5.17-0.5.18 add the unified pool's page remap, 0.5.19 drops it
RELEASE_VARIANTS = (("0.5.6", "default"), ("0.5.17", "v2p"), ("0.5.19", "default"))
