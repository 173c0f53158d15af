"""aiter_req_to_token_page_table's own minimizer passes (kvfuzz/minimize.py runs them; the generic ones are there)."""

from __future__ import annotations

from typing import Iterator

from ...case import Case
from ...minimize import Candidate, GENERIC, _edit, relayout
from ..aiter_page_table_common import OUTPUTS, mapping_bound, swa_pass
from ..kv_index_common import kept, request_drops


def requests_pass(case: Case) -> Iterator[Candidate]:
    """Drop requests: their pool index and length, and their row of each table (the spare rows
    past bs stay)."""
    t = case.tensors
    bs = t["req_pool_indices"].shape[0]
    if bs < 2 or t["seq_lens"].shape != (bs,):
        return
    if any(name in t and (len(t[name].shape) != 2 or t[name].shape[0] < bs) for name in OUTPUTS):
        return

    def build(keep: list[int]) -> Case:
        specs, values = kept(case, ("req_pool_indices", "seq_lens"), keep)
        for name in OUTPUTS:
            if name in t:
                specs[name] = relayout(t[name], (t[name].shape[0] - (bs - len(keep)), t[name].shape[1]))
        return _edit(case, specs, values)
    yield from request_drops(bs, build)


def value_bound(case: Case, name: str) -> int | None:
    """The exclusive bound of an index-valued input: a pool index below the table's rows; with
    SWA, a slot below the mapping's size."""
    if name == "req_pool_indices":
        return case.tensors["req_to_token"].shape[0]
    return mapping_bound(case, name, "req_to_token")


PASSES = (requests_pass, swa_pass, *GENERIC)
