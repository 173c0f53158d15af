"""How `kvfuzz replay` (show.py) and the short repro script (short_repro.py) present a
trtllm_mha_kv_indices case: the input rows an output row is computed from, and the call."""

from __future__ import annotations

import numpy as np

from ...case import Case
from ..record import ShortCall


def related_rows(case: Case, rows: list[int]) -> dict[str, list[int]]:
    """For the page_table rows `rows` (request i writes row i), the requests and their table rows."""
    bs = case.tensors["req_pool_indices"].shape[0]
    reqs = sorted({r for r in rows if 0 <= r < bs})
    out = {name: reqs for name in ("req_pool_indices", "seq_lens")}
    pool = np.asarray(case.values["req_pool_indices"]).tolist()
    out["req_to_token"] = sorted({pool[i] for i in reqs})
    return out


def short_call(case: Case, entry: str) -> ShortCall:
    ps = case.scalars["page_size"]
    swa = "full_to_swa" in case.tensors
    args = "full_to_swa, page_table, swa_page_table" if swa else "None, page_table, None"
    return ShortCall((f"kwargs = {{'full_to_swa_numel': {'full_to_swa.numel()' if swa else '0'}}} "
                      f"if 'full_to_swa_numel' in {entry}.arg_names else {{}}  # SGLang 0.5.16 on",
                      f"{entry}[(page_table.shape[0], -(-page_table.shape[1] // (4096 // {ps})))]"
                      f"(req_to_token, req_pool_indices, seq_lens, {args}, "
                      f"req_to_token_stride=req_to_token.stride(0), page_table_stride=page_table.stride(0), "
                      f"PAGE_SIZE={ps}, HAS_SWA={swa}, **kwargs)"
                      "  # SGLang's build_trtllm_mha_page_table: grid (bs, get_num_mha_kv_index_blocks(W, page_size))",))
