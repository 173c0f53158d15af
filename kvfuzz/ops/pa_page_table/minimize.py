"""pa_page_table's own minimizer passes (kvfuzz/minimize.py runs them; the generic ones are there)."""

from __future__ import annotations

from typing import Iterator

import numpy as np

from ...case import Case
from ...minimize import GENERIC, Candidate, _edit, relayout
from ..kv_index_common import kept, request_drops

PER_REQUEST = ("req_pool_indices", "seq_lens", "dst_kv_lens")


def requests_pass(case: Case) -> Iterator[Candidate]:
    """Drop requests: their pool index, length and kv_len cell, and their row of dst_page_table
    (prefill_lens, pool-sized, stays)."""
    t = case.tensors
    bs = t["req_pool_indices"].shape[0]
    out = t["dst_page_table"]
    if bs < 2 or any(len(t[n].shape) != 1 or t[n].shape[0] != bs for n in PER_REQUEST) or len(out.shape) != 2 \
            or out.shape[0] != bs:
        return

    def build(keep: list[int]) -> Case:
        specs, values = kept(case, PER_REQUEST, keep)
        specs["dst_page_table"] = relayout(out, (len(keep), out.shape[1]))
        return _edit(case, specs, values)
    yield from request_drops(bs, build)


def width_pass(case: Case) -> Iterator[Candidate]:
    """dst_page_table narrowed to pa_max_len (the eager path's width), when it is wider."""
    out, cap = case.tensors["dst_page_table"], case.scalars.get("pa_max_len")
    if len(out.shape) != 2 or type(cap) is not int or not 0 <= cap < out.shape[1]:
        return
    yield (f"dst_page_table narrowed to pa_max_len ({out.shape[1]} -> {cap} columns)",
           lambda: _edit(case, {"dst_page_table": relayout(out, (out.shape[0], cap))}))


def table_pass(case: Case) -> Iterator[Candidate]:
    """req_to_token cut to the rows and columns requests read: the pool's rows up to the largest
    pool index, the columns up to the longest length (prefill_lens, indexed by pool row, stays)."""
    t, v = case.tensors, case.values
    table = t["req_to_token"]
    if len(table.shape) != 2 or len(t["req_pool_indices"].shape) != 1 or len(t["seq_lens"].shape) != 1:
        return
    P, C = table.shape
    rows, lens = np.asarray(v["req_pool_indices"], np.int64), np.asarray(v["seq_lens"], np.int64)
    rows_kept = int(rows.max()) + 1 if rows.size else 1
    cols_kept = max(int(lens.max()) if lens.size else 1, 1)
    if not (1 <= rows_kept <= P and 1 <= cols_kept <= C) or (rows_kept, cols_kept) == (P, C):
        return
    yield (f"req_to_token cut to the rows and columns read ({P}x{C} -> {rows_kept}x{cols_kept})",
           lambda: _edit(case, {"req_to_token": relayout(table, (rows_kept, cols_kept))},
                         {"req_to_token": np.asarray(v["req_to_token"])[:rows_kept, :cols_kept]}))


def value_bound(case: Case, name: str) -> int | None:
    """The exclusive bound of an index-valued input: a pool index below the table's rows and
    prefill_lens's entries."""
    if name == "req_pool_indices":
        return min(case.tensors["req_to_token"].shape[0], case.tensors["prefill_lens"].shape[0])
    return None


PASSES = (requests_pass, table_pass, width_pass, *GENERIC)
