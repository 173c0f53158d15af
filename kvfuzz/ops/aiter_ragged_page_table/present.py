"""How `kvfuzz replay` (show.py) and the short repro script (short_repro.py) present an
aiter_ragged_page_table case: the input rows an output row is computed from, and the call."""

from __future__ import annotations

import numpy as np

from ...case import Case
from ..aiter_page_table_common import launch
from ..record import ShortCall


def related_rows(case: Case, rows: list[int]) -> dict[str, list[int]]:
    """For the page_table rows `rows` (request i writes row i), the kv_indptr entries bounding
    the requests' ranges, and the kv_flat elements the kernel reads for them."""
    ptr = np.asarray(case.values["kv_indptr"], np.int64)
    ps = case.scalars["page_size"]
    reqs = sorted({r for r in rows if 0 <= r < ptr.shape[0] - 1})
    read = sorted({int(c) for i in reqs for c in range(int(ptr[i]), int(ptr[i + 1]), ps)
                   if 0 <= c < case.tensors["kv_flat"].shape[0]})
    return {"kv_indptr": sorted({j for i in reqs for j in (i, i + 1)}), "kv_flat": read}


def short_call(case: Case, entry: str) -> ShortCall:
    return ShortCall((launch(case, entry, "kv_indptr.shape[0] - 1", "kv_flat, kv_indptr, page_table, "
                             "page_table.stride(0)", "", "_build_unified_page_table_from_spec: grid "
                             "(bs, cdiv(max(max_blocks, 1), 1024))"),))
