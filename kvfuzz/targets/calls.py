"""How each op's entry point is called: SGLang's call conventions, one function per op."""

from __future__ import annotations

from typing import Any, Callable, Mapping

from ..ops.num_kv_splits import sglang_max_num_seq
from .sglang_shim import make_swa_pool


def call_decode_metadata(entry: Callable, t: Mapping[str, Any], s: Mapping[str, Any]) -> None:
    swa = "swa_page_table" in t and "full_to_swa_index_mapping" in t
    entry(
        t["cache_seqlens_int32"], t["cu_seqlens_k"], t["page_table"], t["req_to_token"],
        t["req_pool_indices"], t["strided_indices"], s["max_seq_pages"], t["seq_lens"],
        s["seq_len_delta"], s["page_size"],
        swa_page_table=t["swa_page_table"] if swa else None,
        token_to_kv_pool=make_swa_pool(t["full_to_swa_index_mapping"]) if swa else None,
    )


def call_swa_spec_page_table(entry: Callable, t: Mapping[str, Any], s: Mapping[str, Any]) -> None:
    entry(t["page_table_dst"], t["page_table_a"], t["page_table_b"], t["seq_len_a"], t["seq_len_b"],
          s["speculative_num_draft_tokens"])


def is_bare_kernel(entry: Any) -> bool:
    """A @triton.jit function (compiled or interpreted), launched as kernel[grid](...)."""
    from triton.runtime.jit import KernelInterface

    return isinstance(entry, KernelInterface)


def call_num_kv_splits(entry: Any, t: Mapping[str, Any], s: Mapping[str, Any]) -> None:
    args = (t["num_kv_splits"], t["seq_lens"], s["num_seq"], s["num_group"], s["num_head"],
            s["num_kv_head"], s["max_kv_splits"], s["device_core_count"])
    if is_bare_kernel(entry):  # as SGLang's triton backend launches it
        entry[(1,)](*args, MAX_NUM_SEQ=sglang_max_num_seq(s["num_seq"]))
    else:  # a Python launcher with the kernel's argument order
        entry(*args)


CALLS: dict[str, Callable] = {
    "decode_metadata": call_decode_metadata,
    "swa_spec_page_table": call_swa_spec_page_table,
    "num_kv_splits": call_num_kv_splits,
}
