"""How `kvfuzz replay` (show.py) and the short repro script (short_repro.py) present an
aiter_req_to_token_page_table case: the input rows an output row is computed from, and the call."""

from __future__ import annotations

from ...case import Case
from ..aiter_page_table_common import launch
from ..kv_index_common import request_rows
from ..record import ShortCall


def related_rows(case: Case, rows: list[int]) -> dict[str, list[int]]:
    """For the page_table rows `rows` (request i writes row i), the requests and their table rows."""
    bs = case.tensors["req_pool_indices"].shape[0]
    reqs = sorted({r for r in rows if 0 <= r < bs})
    return request_rows(case, reqs, ("req_pool_indices", "seq_lens"))


def short_call(case: Case, entry: str) -> ShortCall:
    return ShortCall((launch(case, entry, "req_pool_indices.shape[0]", "req_to_token, req_pool_indices, seq_lens, "
                             "page_table, req_to_token.stride(0), page_table.stride(0)",
                             f"DRAFT_NUM={case.scalars['draft_num']}, ", "_build_verify_unified_metadata: grid "
                             "(bs, cdiv(max(max_blocks, 1), 1024))"),))
