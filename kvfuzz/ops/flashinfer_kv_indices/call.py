"""How flashinfer_kv_indices's entry point (`create_flashinfer_kv_indices_triton`, a bare
`@triton.jit` kernel) is called, its API generations, and the contract variant of each release.
Standalone (the repro script embeds it: the standard library and kvfuzz's standalone modules only).

SGLang's FlashInfer backend launches it `kernel[(bs,)](req_to_token, req_pool_indices,
paged_kernel_lens, kv_indptr, kv_start_idx, kv_indices, req_to_token.shape[1])` (0.5.6-0.5.18;
0.5.19 through its KV-index view, with the view's row stride and `ENTRY_PAGE_SIZE`; 0.5.23 through
the KV-index translator's `pack_read_stream`, grid `(bs, num_token_blocks)` with 1 block by
default, `TOKEN_BLOCK_PARALLEL` then off; 0.5.20-0.5.22's launch sites were not read). kvfuzz
launches `(bs,)`, passes the table's row stride, and leaves the later parameters at the
defaults that keep 0.5.14's copy.
"""

from __future__ import annotations

from ...targets.calls import Generation, OpCall, one_program_per_row, optional_tensor, row_stride, tensor


CALL = OpCall(
    supplied={
        "req_to_token_ptr": tensor("req_to_token"),
        "req_pool_indices_ptr": tensor("req_pool_indices"),
        "page_kernel_lens_ptr": tensor("paged_kernel_lens"),
        "kv_indptr": tensor("kv_indptr"),
        "kv_start_idx": optional_tensor("kv_start_idx"),  # None when the case has none
        "kv_indices_ptr": tensor("kv_indices"),
        "req_to_token_ptr_stride": row_stride("req_to_token"),  # 0.5.6-0.5.18: a constexpr
    },
    required=(("req_to_token_ptr",), ("req_pool_indices_ptr",), ("page_kernel_lens_ptr",), ("kv_indptr",),
              ("kv_start_idx",), ("kv_indices_ptr",), ("req_to_token_ptr_stride",)),
    # later releases' parameters -> the value that keeps 0.5.14's copy (their defaults)
    neutral={"ENTRY_PAGE_SIZE": 1, "TOKEN_BLOCK_PARALLEL": False, "token_mapping": None},
    legacy=("req_to_token_ptr", "req_pool_indices_ptr", "page_kernel_lens_ptr", "kv_indptr", "kv_start_idx",
            "kv_indices_ptr", "req_to_token_ptr_stride"),
    optional={"kv_start_idx": ("kv_start_idx",)},
    grid=one_program_per_row("req_pool_indices"),  # one program per request
)

GENERATIONS = (
    Generation("0.5.14", "0.5.6-0.5.18", CALL.legacy, "the seed's kernel (the row stride a constexpr; the same "
               "text in 0.5.6-0.5.12's attention/utils.py)"),
    Generation("0.5.19", "0.5.19", CALL.legacy + ("ENTRY_PAGE_SIZE",),
               "the row stride a runtime int; ENTRY_PAGE_SIZE (page-granular tables): left at 1, a token table"),
    Generation("0.5.20", "0.5.20-0.5.21", CALL.legacy + ("ENTRY_PAGE_SIZE", "TOKEN_BLOCK_PARALLEL"),
               "TOKEN_BLOCK_PARALLEL (a 2-D grid): left False, one program per request"),
    Generation("0.5.22", "0.5.22-0.5.23", CALL.legacy + ("ENTRY_PAGE_SIZE", "TOKEN_BLOCK_PARALLEL", "token_mapping"),
               "token_mapping (ids remapped in the same pass): left None"),
)

# (first release, variant): the copy is the same in every release kvfuzz knows
RELEASE_VARIANTS = (("0.5.6", "default"),)
