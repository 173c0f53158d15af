"""How flashinfer_kv_indices's entry point (`create_flashinfer_kv_indices_triton`, a bare
`@triton.jit` kernel) is called, its API generations, and the contract variant of each release.
Standalone (the repro script embeds it: the standard library and kvfuzz's standalone modules only).

SGLang launches it (read from the 0.5.14, 0.5.19 and 0.5.23 wheels):

* `kernel[(bs,)](req_to_token, req_pool_indices, paged_kernel_lens, kv_indptr, kv_start_idx,
  kv_indices, req_to_token.shape[1] or .stride(0))`: the FlashInfer and triton backends (every
  release; the triton backend's kv_indices int64, its SWA path with `token_mapping` 0.5.22 on),
  AITER's eager paths, DeepSeek's MHA chunked prefix;
* `kernel[(bs, num_token_blocks)](..., TOKEN_BLOCK_PARALLEL=num_token_blocks > 1)`: AITER's
  speculative and graph paths (0.5.20 on, `num_token_blocks = _kv_index_blocks(bs)`) and
  `KVIndexTranslator.pack_read_stream` (0.5.23; EAGLE verify and draft extend size it by
  `spec_kv_index_token_blocks`, the other callers pass 1), with `ENTRY_PAGE_SIZE` the read
  table's entry size and `token_mapping` the SWA pool's mapping.

kvfuzz launches `(bs,)` when the case has no `num_token_blocks` (or the kernel no
`TOKEN_BLOCK_PARALLEL`), else `(bs, num_token_blocks)` with `TOKEN_BLOCK_PARALLEL =
num_token_blocks > 1`; passes the table's row stride, the case's `entry_page_size` (1 when
absent) and `token_mapping` (None when absent), each only where the signature has it.
"""

from __future__ import annotations

from ...targets.calls import Generation, OpCall, optional_tensor, row_stride, tensor


def _blocks(s) -> int:
    return int(s.get("num_token_blocks", 1))


def _grid(t, s):
    """(bs,), or (bs, num_token_blocks) for a case that has a block count."""
    bs = t["req_pool_indices"].shape[0]
    return (bs, _blocks(s)) if "num_token_blocks" in s else (bs,)


CALL = OpCall(
    supplied={
        "req_to_token_ptr": tensor("req_to_token"),
        "req_pool_indices_ptr": tensor("req_pool_indices"),
        "page_kernel_lens_ptr": tensor("paged_kernel_lens"),
        "kv_indptr": tensor("kv_indptr"),
        "kv_start_idx": optional_tensor("kv_start_idx"),  # None when the case has none
        "kv_indices_ptr": tensor("kv_indices"),
        "req_to_token_ptr_stride": row_stride("req_to_token"),  # 0.5.6-0.5.18: a constexpr
        "ENTRY_PAGE_SIZE": lambda t, s: int(s.get("entry_page_size", 1)),  # 0.5.19 on, a constexpr
        "TOKEN_BLOCK_PARALLEL": lambda t, s: _blocks(s) > 1,  # 0.5.20 on, a constexpr
        "token_mapping": optional_tensor("token_mapping"),  # 0.5.22 on
    },
    required=(("req_to_token_ptr",), ("req_pool_indices_ptr",), ("page_kernel_lens_ptr",), ("kv_indptr",),
              ("kv_start_idx",), ("kv_indices_ptr",), ("req_to_token_ptr_stride",)),
    neutral={},
    legacy=("req_to_token_ptr", "req_pool_indices_ptr", "page_kernel_lens_ptr", "kv_indptr", "kv_start_idx",
            "kv_indices_ptr", "req_to_token_ptr_stride"),
    optional={"kv_start_idx": ("kv_start_idx",), "token_mapping": ("token_mapping",)},
    carries={"entry_page_size": ("ENTRY_PAGE_SIZE",), "num_token_blocks": ("TOKEN_BLOCK_PARALLEL",),
             "token_mapping": ("token_mapping",)},
    grid=_grid,
)

GENERATIONS = (
    Generation("0.5.14", "0.5.6-0.5.18", CALL.legacy, "the seed's kernel (the row stride a constexpr; the same "
               "text in 0.5.6-0.5.12's attention/utils.py)"),
    Generation("0.5.19", "0.5.19", CALL.legacy + ("ENTRY_PAGE_SIZE",),
               "the row stride a runtime int; ENTRY_PAGE_SIZE (page-granular tables): the case's entry_page_size"),
    Generation("0.5.20", "0.5.20-0.5.21", CALL.legacy + ("ENTRY_PAGE_SIZE", "TOKEN_BLOCK_PARALLEL"),
               "TOKEN_BLOCK_PARALLEL (a (bs, blocks) grid): num_token_blocks > 1"),
    Generation("0.5.22", "0.5.22-0.5.23", CALL.legacy + ("ENTRY_PAGE_SIZE", "TOKEN_BLOCK_PARALLEL", "token_mapping"),
               "token_mapping (ids remapped in the same pass, -1 kept): the case's token_mapping"),
)

# (first release, variant): each release's kernel gets the modes its parameters take
RELEASE_VARIANTS = (("0.5.6", "default"), ("0.5.19", "entry_page"), ("0.5.20", "token_blocks"),
                    ("0.5.22", "token_mapping"))
