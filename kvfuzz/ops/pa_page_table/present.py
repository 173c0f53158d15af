"""How `kvfuzz replay` (show.py) and the short repro script (short_repro.py) present a
pa_page_table case: the input rows an output row is computed from, and the call."""

from __future__ import annotations

import numpy as np

from ...case import Case
from ..kv_index_common import request_rows
from ..record import ShortCall


def related_rows(case: Case, rows: list[int]) -> dict[str, list[int]]:
    """For the rows `rows` of dst_page_table (or cells of dst_kv_lens: request i writes row i),
    the requests, the req_to_token rows they read and those rows' prefill_lens entries."""
    bs = case.tensors["req_pool_indices"].shape[0]
    reqs = sorted({r for r in rows if 0 <= r < bs})
    out = request_rows(case, reqs, ("req_pool_indices", "seq_lens"))
    PL = case.tensors["prefill_lens"].shape[0]
    pool = np.asarray(case.values["req_pool_indices"]).tolist()
    out["prefill_lens"] = sorted({pool[i] for i in reqs if 0 <= pool[i] < PL})
    return out


def short_call(case: Case, entry: str) -> ShortCall:
    w, cap = case.scalars["window_size"], case.scalars["pa_max_len"]
    if case.scalars.get("eager"):
        return ShortCall((f"page_table, kv_lens = {entry}(req_to_token, req_pool_indices, seq_lens, prefill_lens, {w}, "
                          f"req_pool_indices.shape[0], {cap}, dst_page_table.device)"
                          "  # the FlashAttention backend's eager decode call: the wrapper allocates",
                          "dst_page_table.copy_(page_table)", "dst_kv_lens.copy_(kv_lens)"))
    return ShortCall((f"{entry}(req_to_token, req_pool_indices, seq_lens, prefill_lens, {w}, "
                      f"req_pool_indices.shape[0], {cap}, dst_page_table.device, "
                      "dst_page_table=dst_page_table, dst_kv_lens=dst_kv_lens)"
                      "  # window_size, bs, pa_max_len, device: the FlashAttention backend's CUDA-graph replay call",))
