"""How `kvfuzz replay` (show.py) and the short repro script (short_repro.py) present a
chunked_prefix_kv_indices case: the input rows an output cell is computed from, and the call."""

from __future__ import annotations

import numpy as np

from ...case import Case
from ..kv_index_common import request_rows
from ..record import ShortCall


def _requests(case: Case, cells: list[int]) -> list[int]:
    cu = np.asarray(case.values["chunk_cu_seq_lens"], np.int64)
    lens = np.asarray(case.values["chunk_seq_lens"], np.int64)
    bs = min(lens.shape[0], cu.shape[0])
    return sorted({i for c in cells for i in range(bs) if cu[i] <= c < cu[i] + lens[i]})


def related_rows(case: Case, rows: list[int]) -> dict[str, list[int]]:
    """For the chunk_kv_indices cells `rows`, the requests they belong to, and their table rows."""
    return request_rows(case, _requests(case, rows),
                        ("req_pool_indices", "chunk_start_idx", "chunk_seq_lens", "chunk_cu_seq_lens"))


def short_call(case: Case, entry: str) -> ShortCall:
    return ShortCall((f"{entry}[(req_pool_indices.shape[0],)](req_to_token, req_pool_indices, chunk_start_idx, "
                      "chunk_seq_lens, chunk_cu_seq_lens, chunk_kv_indices, req_to_token.stride(0))"
                      "  # SGLang's chunked-prefix callers: grid (bs,)",))
