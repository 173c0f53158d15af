"""How draft_extend_metadata's entry point (`draft_extend_set_metadata`, SGLang 0.5.16 on) is
called, its API generations, and the contract variant of each release."""

from __future__ import annotations

from ...targets.calls import Generation, OpCall, optional_tensor, scalar, tensor


_DRAFT_EXTEND_PARAMS = ("cache_seqlens_int32", "cu_seqlens_k", "cu_seqlens_q", "page_table", "req_to_token",
                        "req_pool_indices", "seq_lens", "extend_seq_lens", "page_size", "full_to_swa_index_mapping",
                        "swa_page_table", "out_cache_loc", "swa_out_cache_loc")


CALL = OpCall(  # 0.5.16 on; the four SWA tensors are None without SWA (their defaults)
    supplied={name: optional_tensor(name) if name in ("full_to_swa_index_mapping", "swa_page_table", "out_cache_loc",
                                                      "swa_out_cache_loc") else scalar(name) if name == "page_size"
              else tensor(name) for name in _DRAFT_EXTEND_PARAMS},
    required=tuple((name,) for name in _DRAFT_EXTEND_PARAMS),
    neutral={},
    legacy=_DRAFT_EXTEND_PARAMS,  # the only signature so far: its own order
)

GENERATIONS = (
    Generation("0.5.16", "0.5.16-0.5.23", CALL.legacy, "new op; the same signature and kernel "
               "text in every release since"),
)

# (first release, variant): one contract since the op appeared (0.5.16; unchanged to 0.5.23)
RELEASE_VARIANTS = (("0.5.16", "default"),)
