"""How aiter_ragged_page_table's entry point (`scatter_ragged_to_page_table_kernel`, a bare
`@triton.jit` kernel) is called, its API generation, and the contract variant of each release.
Standalone (the repro script embeds it: the standard library and kvfuzz's standalone modules only).

SGLang's AITER backend launches it in `_build_unified_page_table_from_spec(spec_info, bs,
dest_buf=None, swa_dest_buf=None)` (read from every wheel 0.5.12-0.5.23; the function is the same
text in all but the attribute holding the SWA pool, `token_to_kv_pool` before 0.5.20,
`swa_kv_pool` from it):

    max_blocks = (max_context_len + page_size - 1) // page_size
    page_table = dest_buf, or torch.zeros(bs, max_blocks, dtype=torch.int32)
    swa_slot_mapping = SWA pool's full_to_swa_index_mapping.long()   (SWA models; else None)
    swa_page_table = swa_dest_buf, or torch.zeros(bs, max_blocks, dtype=torch.int32)
    BLOCK_SIZE = 1024
    grid = (bs, triton.cdiv(max(max_blocks, 1), BLOCK_SIZE))
    kernel[grid](spec_info.kv_indices, spec_info.kv_indptr, page_table, page_table.stride(0),
                 swa_page_table, swa_slot_mapping, PAGE_SIZE=page_size, BLOCK_SIZE=BLOCK_SIZE,
                 HAS_SWA=(swa_slot_mapping is not None))

Its callers: EAGLE draft decode (eager: bs = kv_indptr.shape[0] - 1; CUDA-graph capture and
replay: the graph's bs, page_table the whole `(max_bs, max_blocks)` graph buffer,
cuda_graph_page_table from 0.5.13, in 0.5.12 a `view(-1, max_blocks)` of cuda_graph_kv_indices,
max_bs rows or more, and swa_page_table the `(max_bs, max_blocks)` SWA graph buffer) and, from
0.5.19, draft extend through unified attention (forward_metadata's kv_indptr and kv_indices,
bs = the batch size). Every table is max_blocks wide.

kvfuzz launches the same grid, bs = kv_indptr.shape[0] - 1 and W = page_table.shape[1]
(max_blocks in every allocation above), passes `page_table.stride(0)` as `dest_stride`, BLOCK_SIZE
1024 and HAS_SWA = whether the case has `swa_slot_mapping`.
"""

from __future__ import annotations

from ...targets.calls import Generation, OpCall, const, given, optional_tensor, row_stride, scalar, tensor

BLOCK_SIZE = 1024  # SGLang's: pages per program


def _grid(t, s):
    """(bs, cdiv(max(W, 1), BLOCK_SIZE)): bs = kv_indptr's entries - 1, W = page_table's width."""
    return (t["kv_indptr"].shape[0] - 1, (max(t["page_table"].shape[1], 1) + BLOCK_SIZE - 1) // BLOCK_SIZE)


CALL = OpCall(
    supplied={
        "kv_flat_ptr": tensor("kv_flat"),
        "kv_indptr_ptr": tensor("kv_indptr"),
        "dest_ptr": tensor("page_table"),
        "dest_stride": row_stride("page_table"),  # swa_page_table's too
        "sw_page_table_ptr": optional_tensor("swa_page_table"),  # None without SWA
        "swa_slot_mapping_ptr": optional_tensor("swa_slot_mapping"),  # None without SWA
        "PAGE_SIZE": scalar("page_size"),  # a constexpr
        "BLOCK_SIZE": const(BLOCK_SIZE),  # a constexpr
        "HAS_SWA": given("swa_slot_mapping"),  # a constexpr
    },
    required=tuple((name,) for name in ("kv_flat_ptr", "kv_indptr_ptr", "dest_ptr", "dest_stride", "sw_page_table_ptr",
                                        "swa_slot_mapping_ptr", "PAGE_SIZE", "BLOCK_SIZE", "HAS_SWA")),
    neutral={},
    legacy=("kv_flat_ptr", "kv_indptr_ptr", "dest_ptr", "dest_stride", "sw_page_table_ptr", "swa_slot_mapping_ptr",
            "PAGE_SIZE", "BLOCK_SIZE", "HAS_SWA"),
    grid=_grid,
)

GENERATIONS = (
    Generation("0.5.12", "0.5.12-0.5.23", CALL.legacy,
               "the kernel's only signature (sglang/srt/layers/attention/triton_ops/aiter_unified_attention.py in "
               "0.5.12-0.5.15, sglang/kernels/ops/kvcache/ in 0.5.16-0.5.22, "
               "sglang/kernels/ops/attention/aiter_unified_page_table.py in 0.5.23: the same file); PAGE_SIZE, "
               "BLOCK_SIZE and HAS_SWA constexprs"),
)

# (first release, variant): the same kernel text in every release
RELEASE_VARIANTS = (("0.5.12", "default"),)
