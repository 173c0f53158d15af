"""How aiter_req_to_token_page_table's entry point (`scatter_req_to_token_to_page_table_kernel`, a
bare `@triton.jit` kernel) is called, its API generation, and the contract variant of each
release. Standalone (the repro script embeds it: the standard library and kvfuzz's standalone
modules only).

SGLang's AITER backend launches it in `_build_verify_unified_metadata(bs, seq_lens,
req_pool_indices, draft_num, page_table_dest=None, swa_page_table_dest=None)` (EAGLE target
verify through unified attention; read from every wheel 0.5.12-0.5.23, the same text in all but
the attribute holding the SWA pool) and, from 0.5.20, in `_build_extend_unified_page_table(bs,
seq_lens, req_pool_indices, max_kv_len)` (a plain extend through unified attention):

    max_blocks = (max_context_len + page_size - 1) // page_size         (verify)
               = max((max_kv_len + page_size - 1) // page_size, 1)       (extend, 0.5.20 on)
    page_table = page_table_dest, or torch.zeros(bs, max_blocks, dtype=torch.int32)
    swa_slot_mapping = SWA pool's full_to_swa_index_mapping.long()   (SWA models; else None)
    swa_page_table = swa_page_table_dest, or torch.zeros(bs, max_blocks, dtype=torch.int32)
    BLOCK_SIZE = 1024
    grid = (bs, triton.cdiv(max(max_blocks, 1), BLOCK_SIZE))      (extend: cdiv(max_blocks, ...))
    kernel[grid](req_to_token, req_pool_indices, seq_lens, page_table, req_to_token.stride(0),
                 page_table.stride(0), swa_page_table, swa_slot_mapping, DRAFT_NUM=draft_num,
                 PAGE_SIZE=page_size, BLOCK_SIZE=BLOCK_SIZE, HAS_SWA=(swa_slot_mapping is not None))

DRAFT_NUM: the verify's draft tokens per request (eager: spec_info.draft_token_num, from 0.5.20
input_ids.shape[0] // bs; CUDA-graph capture and replay: the server's
speculative_num_draft_tokens, from 0.5.17 verify_tokens_per_req = input_ids.shape[0] //
batch_size), 0 for the extend. The tables:
the eager `torch.zeros(bs, max_blocks)`, the graph's `[:bs]` rows of its `(max_bs, max_blocks)`
buffers (page_table 0.5.12 a view of cuda_graph_kv_indices, from 0.5.13
cuda_graph_page_table).

kvfuzz launches the same grid, bs = req_pool_indices.shape[0] and W = page_table.shape[1]
(max_blocks in every allocation above), passes both row strides, the case's draft_num and page
size, BLOCK_SIZE 1024 and HAS_SWA = whether the case has `swa_slot_mapping`.
"""

from __future__ import annotations

from ...targets.calls import Generation, OpCall, const, given, optional_tensor, row_stride, scalar, tensor

BLOCK_SIZE = 1024  # SGLang's: pages per program


def _grid(t, s):
    """(bs, cdiv(max(W, 1), BLOCK_SIZE)): bs = req_pool_indices' entries, W = page_table's width."""
    return (t["req_pool_indices"].shape[0], (max(t["page_table"].shape[1], 1) + BLOCK_SIZE - 1) // BLOCK_SIZE)


CALL = OpCall(
    supplied={
        "req_to_token_ptr": tensor("req_to_token"),
        "req_pool_indices_ptr": tensor("req_pool_indices"),
        "seq_lens_ptr": tensor("seq_lens"),
        "page_table_ptr": tensor("page_table"),
        "req_to_token_stride": row_stride("req_to_token"),
        "page_table_stride": row_stride("page_table"),  # swa_page_table's too
        "sw_page_table_ptr": optional_tensor("swa_page_table"),  # None without SWA
        "swa_slot_mapping_ptr": optional_tensor("swa_slot_mapping"),  # None without SWA
        "DRAFT_NUM": scalar("draft_num"),  # a constexpr
        "PAGE_SIZE": scalar("page_size"),  # a constexpr
        "BLOCK_SIZE": const(BLOCK_SIZE),  # a constexpr
        "HAS_SWA": given("swa_slot_mapping"),  # a constexpr
    },
    required=tuple((name,) for name in ("req_to_token_ptr", "req_pool_indices_ptr", "seq_lens_ptr", "page_table_ptr",
                                        "req_to_token_stride", "page_table_stride", "sw_page_table_ptr",
                                        "swa_slot_mapping_ptr", "DRAFT_NUM", "PAGE_SIZE", "BLOCK_SIZE", "HAS_SWA")),
    neutral={},
    legacy=("req_to_token_ptr", "req_pool_indices_ptr", "seq_lens_ptr", "page_table_ptr", "req_to_token_stride",
            "page_table_stride", "sw_page_table_ptr", "swa_slot_mapping_ptr", "DRAFT_NUM", "PAGE_SIZE", "BLOCK_SIZE",
            "HAS_SWA"),
    grid=_grid,
)

GENERATIONS = (
    Generation("0.5.12", "0.5.12-0.5.23", CALL.legacy,
               "the kernel's only signature (the file of scatter_ragged_to_page_table_kernel, the same text in every "
               "release); DRAFT_NUM, PAGE_SIZE, BLOCK_SIZE and HAS_SWA constexprs"),
)

# (first release, variant): the same kernel text in every release
RELEASE_VARIANTS = (("0.5.12", "default"),)
