"""How trtllm_mha_graph_metadata's entry point (`update_trtllm_mha_graph_metadata`, the host
launcher of `update_trtllm_mha_graph_metadata_kernel`) is called, its API generations, and the
contract variant of each release. Standalone (the repro script embeds it: the standard library
and kvfuzz's standalone modules only).

SGLang's TRT-LLM MHA backend (`TRTLLMHAAttnBackend._apply_cuda_graph_metadata`, every wheel
0.5.15-0.5.23) calls the launcher with keywords only:

    update_trtllm_mha_graph_metadata(req_pool_indices=..., seq_lens=..., req_to_token=...,
        cache_seqlens=..., cu_seqlens_k=..., page_table=..., bs=bs, seqlen_offset=...,
        max_seq_pages=self.max_num_pages, page_size=self.page_size, swa_mapping=...,
        swa_page_table=..., out_cache_loc=forward_batch.out_cache_loc, swa_out_cache_loc=...,
        cu_seqlens_q=..., qlens=None, q_stride=..., q_mode=...[, skip_page_table=unified])

and the launcher launches the kernel on bs + 1 + cdiv(len(swa_out_cache_loc), 512) programs
(PAGE_BLOCK 512, BS_BLOCK next_power_of_2(bs), HAS_SWA = swa_page_table given, HAS_SWA_OUT =
swa_out_cache_loc given, num_out_tokens = min(its length, len(out_cache_loc))). kvfuzz calls it
the same way, by name, with the case's tensors (its own output buffers), `bs` = the case's
number of requests, q_stride and q_mode the case's, and skip_page_table where the signature
has it (0.5.19 on; the case's, absent False).
"""

from __future__ import annotations

from ...targets.calls import Generation, OpCall, flag, optional_tensor, scalar, tensor


def _bs(t, s):
    return t["req_pool_indices"].shape[0]


_BASE = ("req_pool_indices", "seq_lens", "req_to_token", "cache_seqlens", "cu_seqlens_k", "page_table", "bs",
         "seqlen_offset", "max_seq_pages", "page_size", "swa_mapping", "swa_page_table", "out_cache_loc",
         "swa_out_cache_loc", "cu_seqlens_q", "qlens", "q_stride", "q_mode")
_OPTIONAL = ("page_table", "swa_mapping", "swa_page_table", "out_cache_loc", "swa_out_cache_loc", "cu_seqlens_q",
             "qlens")

CALL = OpCall(
    supplied={
        **{name: optional_tensor(name) if name in _OPTIONAL else tensor(name)
           for name in _BASE if name not in ("bs", "seqlen_offset", "max_seq_pages", "page_size", "q_stride",
                                             "q_mode")},
        "bs": _bs,
        **{name: scalar(name) for name in ("seqlen_offset", "max_seq_pages", "page_size", "q_stride", "q_mode")},
        "skip_page_table": flag("skip_page_table"),  # 0.5.19 on
    },
    required=tuple((name,) for name in _BASE),
    neutral={},
    legacy=_BASE,  # keyword-only in every release: never called positionally
    carries={"skip_page_table": ("skip_page_table",)},
)

GENERATIONS = (
    Generation("0.5.15", "0.5.15-0.5.18", _BASE,
               "new op (sglang/srt/layers/attention/triton_ops/trtllm_mha_graph_metadata.py; 0.5.16 moved it to "
               "sglang/kernels/ops/kvcache/); keyword-only"),
    Generation("0.5.19", "0.5.19-0.5.23", _BASE + ("skip_page_table",),
               "skip_page_table (the unified pool: the page tables are refreshed out of graph, page_table may be "
               "None): the case's (variant default)"),
)

# (first release, variant): 0.5.15-0.5.16 rewrite every row to max_seq_pages; 0.5.17 writes only the
# live prefix min(cdiv(cache_seqlen, page_size), max_seq_pages) ("the tail keeps stale values");
# 0.5.19 adds skip_page_table. The kernel file is one text per variant (0.5.15 = 0.5.16, 0.5.17 =
# 0.5.18, 0.5.19 = ... = 0.5.23).
RELEASE_VARIANTS = (("0.5.15", "full_width"), ("0.5.17", "live_prefix"), ("0.5.19", "default"))
