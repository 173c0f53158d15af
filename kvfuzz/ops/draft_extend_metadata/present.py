"""How `kvfuzz replay` (show.py) and the short repro script (short_repro.py) present a
draft_extend_metadata case: the input rows and cells an output is computed from, and the call."""

from __future__ import annotations

from ...case import Case
from ..record import ShortCall


def short_call(case: Case, entry: str) -> ShortCall:
    t, s = case.tensors, case.scalars
    swa = ", ".join(f"{n}={n if n in t else None}" for n in ("full_to_swa_index_mapping", "swa_page_table",
                                                              "out_cache_loc", "swa_out_cache_loc"))
    return ShortCall((f"{entry}(cache_seqlens_int32, cu_seqlens_k, cu_seqlens_q, page_table, req_to_token, "
                      "req_pool_indices,",
                      f"    seq_lens, extend_seq_lens, page_size={s['page_size']}, {swa})"))
