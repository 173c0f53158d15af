"""How chunked_prefix_kv_indices's entry point (`create_chunked_prefix_cache_kv_indices`, a bare
`@triton.jit` kernel) is called, its API generation, and the contract variant of each release.
Standalone (the repro script embeds it: the standard library and kvfuzz's standalone modules only).

Every SGLang caller launches it `kernel[(bs,)](req_to_token, req_pool_indices, chunk_starts,
chunk_seq_lens, chunk_cu_seq_lens, chunk_kv_indices, req_to_token.shape[1])`: ForwardBatch's
prepare_chunked_kv_indices (0.5.6-0.5.23, grid `(self.batch_size,)`), the prefill CUDA-graph
runner (0.5.17-0.5.23, grid `(bs,)` over its slot-padded batch), the DCP planner (0.5.16-0.5.23,
grid `(len(seq_lens),)`, `extend_cu_prefix_lens[:-1]`: bs offsets). The kernel and its
signature are the same text in every release 0.5.6-0.5.23: 0.5.6-0.5.7 keep it in
sglang/srt/model_executor/forward_batch_info.py, 0.5.8-0.5.13 in its DeepSeek MHA mixin
(forward_batch_deepseek_mha_mixin.py; kvfuzz extracts it from either into 0.5.6-0.5.12's
kv_indices.py, but reads 0.5.13's own kv_indices.py, which lacks it: not offered), 0.5.14 on in
kv_indices.py.
kvfuzz launches `(bs,)` and passes the table's row stride (`shape[1]` for SGLang's contiguous
table).
"""

from __future__ import annotations

from ...targets.calls import Generation, OpCall, one_program_per_row, row_stride, tensor


CALL = OpCall(
    supplied={
        "req_to_token_ptr": tensor("req_to_token"),
        "req_pool_indices_ptr": tensor("req_pool_indices"),
        "chunk_start_idx_ptr": tensor("chunk_start_idx"),
        "chunk_seq_lens_ptr": tensor("chunk_seq_lens"),
        "chunk_cu_seq_lens_ptr": tensor("chunk_cu_seq_lens"),
        "chunk_kv_indices_ptr": tensor("chunk_kv_indices"),
        "req_to_token_ptr_stride": row_stride("req_to_token"),  # a constexpr in every release
    },
    required=(("req_to_token_ptr",), ("req_pool_indices_ptr",), ("chunk_start_idx_ptr",), ("chunk_seq_lens_ptr",),
              ("chunk_cu_seq_lens_ptr",), ("chunk_kv_indices_ptr",), ("req_to_token_ptr_stride",)),
    neutral={},
    legacy=("req_to_token_ptr", "req_pool_indices_ptr", "chunk_start_idx_ptr", "chunk_seq_lens_ptr",
            "chunk_cu_seq_lens_ptr", "chunk_kv_indices_ptr", "req_to_token_ptr_stride"),
    grid=one_program_per_row("req_pool_indices"),  # one program per request
)

GENERATIONS = (
    Generation("0.5.14", "0.5.6-0.5.23", CALL.legacy,
               "unchanged in every release (before 0.5.14 in ForwardBatch's module, not kv_indices.py: "
               "extracted for 0.5.6-0.5.12, not offered by 0.5.13)"),
)

# (first release, variant): the kernel is the same in every release
RELEASE_VARIANTS = (("0.5.6", "default"),)
