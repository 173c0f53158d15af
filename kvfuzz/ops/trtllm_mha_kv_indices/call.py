"""How trtllm_mha_kv_indices's entry point (`create_trtllm_mha_kv_indices_triton`, a bare
`@triton.jit` kernel) is called, its API generations, and the contract variant of each release.
Standalone (the repro script embeds it: the standard library and kvfuzz's standalone modules only).

SGLang's TRT-LLM MHA backend launches it through the host-side builder of the same file,
`build_trtllm_mha_page_table(req_to_token, req_pool_indices, cache_seqlens, page_table,
page_size, swa_page_table=None, full_to_swa=None)`, which asserts that the page size divides
4096 and that `full_to_swa` and `swa_page_table` come together, and launches

    kernel[(bs, get_num_mha_kv_index_blocks(num_pages, page_size))](req_to_token,
        req_pool_indices, cache_seqlens, full_to_swa, page_table, swa_page_table,
        [full_to_swa.numel() if SWA else 0,]  # 0.5.16 on
        req_to_token.stride(0), page_table.stride(0), PAGE_SIZE=page_size, HAS_SWA=SWA)

with `bs, num_pages = page_table.shape` and get_num_mha_kv_index_blocks(W, ps) =
ceil(W / (4096 // ps)) (read from every wheel 0.5.14-0.5.23). The backend's page table is
`(bs, max_num_pages)`, max_num_pages = ceil(context_len / page_size): `torch.empty` in the eager
path (every release), the `[:bs]` rows of a `(max_bs, max_num_pages)` CUDA-graph buffer in the
graph path (0.5.14-0.5.15; from 0.5.16 the graph path has a fused kernel of its own,
update_trtllm_mha_graph_metadata, and calls the builder only for ragged target verify). Without
SWA both SWA pointers are None.

kvfuzz launches the same grid (`bs` and W from `page_table`'s shape, the case's page size),
passes both row strides from the tensors, `full_to_swa.numel()` (0 without SWA) and HAS_SWA =
whether the case has `full_to_swa`.
"""

from __future__ import annotations

from ...targets.calls import Generation, OpCall, optional_tensor, scalar, tensor

BLOCK_TOKENS = 4096  # SGLang's _MHA_KV_INDEX_BLOCK_TOKENS: one program per 4096 tokens of a request


def _row_stride(name):
    return lambda t, s: t[name].stride(0)


def _numel(t, s):
    swa = t.get("full_to_swa")
    return swa.numel() if swa is not None else 0


def _has_swa(t, s):
    return t.get("full_to_swa") is not None


def _grid(t, s):
    """(bs, get_num_mha_kv_index_blocks(W, page_size)), (bs, W) = page_table.shape."""
    pages_per_block = max(BLOCK_TOKENS // max(int(s["page_size"]), 1), 1)
    rows, width = t["page_table"].shape
    return (rows, (width + pages_per_block - 1) // pages_per_block)


CALL = OpCall(
    supplied={
        "req_to_token_ptr": tensor("req_to_token"),
        "req_pool_indices_ptr": tensor("req_pool_indices"),
        "seq_lens_ptr": tensor("seq_lens"),
        "full_to_swa_ptr": optional_tensor("full_to_swa"),  # None without SWA (the builder's call)
        "page_table_ptr": tensor("page_table"),
        "swa_page_table_ptr": optional_tensor("swa_page_table"),
        "full_to_swa_numel": _numel,  # 0.5.16 on
        "req_to_token_stride": _row_stride("req_to_token"),  # a constexpr
        "page_table_stride": _row_stride("page_table"),  # a constexpr, swa_page_table's too
        "PAGE_SIZE": scalar("page_size"),  # a constexpr
        "HAS_SWA": _has_swa,  # a constexpr
    },
    required=(("req_to_token_ptr",), ("req_pool_indices_ptr",), ("seq_lens_ptr",), ("full_to_swa_ptr",),
              ("page_table_ptr",), ("swa_page_table_ptr",), ("req_to_token_stride",), ("page_table_stride",),
              ("PAGE_SIZE",), ("HAS_SWA",)),
    neutral={},
    legacy=("req_to_token_ptr", "req_pool_indices_ptr", "seq_lens_ptr", "full_to_swa_ptr", "page_table_ptr",
            "swa_page_table_ptr", "req_to_token_stride", "page_table_stride", "PAGE_SIZE", "HAS_SWA"),
    grid=_grid,
)

_0_5_16 = CALL.legacy[:6] + ("full_to_swa_numel",) + CALL.legacy[6:]

GENERATIONS = (
    Generation("0.5.14", "0.5.14-0.5.15", CALL.legacy,
               "the kernel's first release (sglang/srt/layers/attention/triton_ops/trtllm_mha_page_table.py); "
               "both strides, PAGE_SIZE and HAS_SWA constexprs"),
    Generation("0.5.16", "0.5.16-0.5.23", _0_5_16,
               "full_to_swa_numel (the SWA lookup clamps the slot into [0, numel - 1]): the mapping's size, "
               "0 without SWA"),
)

# (first release, variant): in contract the two generations write the same cells with the same values
RELEASE_VARIANTS = (("0.5.14", "default"),)
