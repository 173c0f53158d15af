"""How `kvfuzz replay` (show.py) and the short repro script (short_repro.py) present a
trtllm_mha_graph_metadata case: the input rows an output row is computed from, and the call."""

from __future__ import annotations

from ...case import Case
from ..kv_index_common import request_rows
from ..record import ShortCall


def related_rows(case: Case, rows: list[int]) -> dict[str, list[int]]:
    """For output rows `rows` (request i writes row i of the page tables and cell i of
    cache_seqlens), the requests and their table rows."""
    bs = case.tensors["req_pool_indices"].shape[0]
    return request_rows(case, sorted({r for r in rows if 0 <= r < bs}), ("req_pool_indices", "seq_lens", "qlens"))


def short_call(case: Case, entry: str) -> ShortCall:
    s, t = case.scalars, case.tensors
    opt = ", ".join(f"{n}={n}" for n in ("page_table", "swa_mapping", "swa_page_table", "out_cache_loc",
                                          "swa_out_cache_loc", "cu_seqlens_q", "qlens") if n in t)
    skip = ", skip_page_table=True" if s.get("skip_page_table") else ""
    return ShortCall((f"{entry}(req_pool_indices=req_pool_indices, seq_lens=seq_lens, req_to_token=req_to_token, "
                      f"cache_seqlens=cache_seqlens, cu_seqlens_k=cu_seqlens_k, bs=req_pool_indices.shape[0], "
                      f"seqlen_offset={s['seqlen_offset']}, max_seq_pages={s['max_seq_pages']}, "
                      f"page_size={s['page_size']}, q_stride={s['q_stride']}, q_mode={s['q_mode']}"
                      + (", page_table=None" if "page_table" not in t else "")
                      + (f", {opt}" if opt else "") + f"{skip})  # as TRTLLMHAAttnBackend._apply_cuda_graph_metadata",))
