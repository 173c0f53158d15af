"""How decode_metadata's entry point (`normal_decode_set_metadata`) is called in each SGLang
release (kvfuzz/targets/calls.py binds it by parameter name), its API generations, and the
contract variant of each release."""

from __future__ import annotations

from typing import Any, Mapping

from ...targets.calls import Generation, OpCall, flag, optional_tensor, scalar, tensor
from ...targets.sglang_shim import make_swa_pool, make_unified_swa_pool


def _uses_swa(t: Mapping[str, Any]) -> bool:
    return "swa_page_table" in t and any(n in t for n in ("full_to_swa_index_mapping", "swa_v2p", "swa_src_table"))


def _swa_table(t, s):
    return t["swa_page_table"] if _uses_swa(t) else None


def _swa_pool(t, s):
    """Up to 0.5.22: an SWAKVPool holding the token mapping; 0.5.18's UnifiedSWAKVPool holding
    the SWA v2p table (a case carries swa_v2p only for a variant whose targets take it)."""
    if not _uses_swa(t):
        return None
    if "full_to_swa_index_mapping" in t:
        return make_swa_pool(t["full_to_swa_index_mapping"])
    # the unified pool's: its v2p table, or (0.5.19's read tables) the pool as SGLang's unified
    # backend passes it beside swa_src_table (0.5.19 reads the pool's mapping even then)
    return make_unified_swa_pool(t.get("swa_v2p"))


def _swa_mapping(t, s):  # 0.5.23: the mapping tensor itself (None with the unified pool's swa_v2p)
    return t.get("full_to_swa_index_mapping") if _uses_swa(t) else None


CALL = OpCall(
    supplied={
        "cache_seqlens_int32": tensor("cache_seqlens_int32"),
        "cu_seqlens_k": tensor("cu_seqlens_k"),
        "page_table": tensor("page_table"),
        "req_to_token": tensor("req_to_token"),
        "req_pool_indices": tensor("req_pool_indices"),
        "strided_indices": tensor("strided_indices"),  # up to 0.5.18
        "max_seq_pages": scalar("max_seq_pages"),
        "seq_lens": tensor("seq_lens"),
        "seq_len_delta": scalar("seq_len_delta"),
        "page_size": scalar("page_size"),
        "swa_page_table": _swa_table,
        "token_to_kv_pool": _swa_pool,  # up to 0.5.22
        "full_to_swa_index_mapping": _swa_mapping,  # 0.5.23
        "skip_page_table": flag("skip_page_table"),  # 0.5.20 on: lengths and prefix sum only
        "zero_tail": flag("zero_tail"),  # 0.5.23: also zero the columns between the live prefix and P
        "full_v2p": optional_tensor("full_v2p"),  # 0.5.23: unified memory's virtual -> physical pages
        "swa_v2p": optional_tensor("swa_v2p"),  # 0.5.23: the unified SWA pool's
        "v2p_page_table": optional_tensor("full_v2p"),  # 0.5.17-0.5.18: the same table, named so
        "kernel_page_multiplier": lambda t, s: s.get("kernel_page_multiplier", 1),  # 0.5.17-0.5.18
        "src_is_read_table": flag("src_is_read_table"),  # 0.5.19: req_to_token holds page ids
        "swa_src_table": optional_tensor("swa_src_table"),  # 0.5.19: the SWA read table
    },
    required=(("cache_seqlens_int32",), ("cu_seqlens_k",), ("page_table",), ("req_to_token",),
              ("req_pool_indices",), ("max_seq_pages",), ("seq_lens",), ("seq_len_delta",), ("page_size",),
              ("swa_page_table",), ("token_to_kv_pool", "full_to_swa_index_mapping")),
    neutral={},  # every later parameter of decode comes from the case
    legacy=("cache_seqlens_int32", "cu_seqlens_k", "page_table", "req_to_token", "req_pool_indices",
            "strided_indices", "max_seq_pages", "seq_lens", "seq_len_delta", "page_size"),
    legacy_kw=("swa_page_table", "token_to_kv_pool"),
    carries={"full_v2p": ("full_v2p", "v2p_page_table"), "swa_v2p": ("swa_v2p",),
             **{name: (name,) for name in ("kernel_page_multiplier", "src_is_read_table", "swa_src_table",
                                           "skip_page_table", "zero_tail")}},
    # 0.5.18's swa_v2p rides in token_to_kv_pool, which every release has: only its release tells
    rides={"swa_v2p": "token_to_kv_pool"},
)

_DECODE_0514 = CALL.legacy + CALL.legacy_kw
_DECODE_0519 = tuple(p for p in _DECODE_0514 if p != "strided_indices")
GENERATIONS = (
    Generation("0.5.14", "0.5.10-0.5.16", _DECODE_0514, "the seed's signature"),
    Generation("0.5.17", "0.5.17-0.5.18", _DECODE_0514 + ("v2p_page_table", "kernel_page_multiplier"),
               "v2p_page_table, kernel_page_multiplier (unified memory): the case's full_v2p and multiplier "
               "(variant v2p; 0.5.18 v2p_swa: and swa_v2p in a UnifiedSWAKVPool)"),
    Generation("0.5.19", "0.5.19", _DECODE_0519 + ("src_is_read_table", "swa_src_table"),
               "strided_indices dropped; src_is_read_table, swa_src_table: the case's (variant read_table)"),
    Generation("0.5.20", "0.5.20-0.5.22", _DECODE_0519 + ("skip_page_table",),
               "skip_page_table: the case's (variant skip)"),
    Generation("0.5.23", "0.5.23",
               tuple(p for p in _DECODE_0519 if p != "token_to_kv_pool")
               + ("full_to_swa_index_mapping", "skip_page_table", "full_v2p", "swa_v2p", "zero_tail"),
               "rewritten: the SWA mapping passed as a tensor; full_v2p, swa_v2p, zero_tail, skip_page_table: "
               "the case's (variant fused)"),
)

# Which contract variant judges which SGLang release, chosen automatically from the target
# (kvfuzz/targets/releases.py; --variant overrides): (first release, variant), oldest first.
# Read from the release wheels: 0.5.17's kernels return before the columns past
# cdiv(seq_len + seq_len_delta, page_size) ("Contract: only the live prefix ... is (re)written").
RELEASE_VARIANTS = (("0.5.10", "default"), ("0.5.17", "v2p"), ("0.5.18", "v2p_swa"), ("0.5.19", "read_table"),
                    ("0.5.20", "skip"), ("0.5.23", "fused"))
BUILTIN_VARIANT = "strict"  # kvfuzz's own kernel: every argument kvfuzz checks, every column c < P written
