"""aiter_ragged_page_table's own minimizer passes (kvfuzz/minimize.py runs them; the generic ones are there)."""

from __future__ import annotations

from typing import Iterator

import numpy as np

from ...case import Case
from ...minimize import Candidate, GENERIC, _edit, relayout
from ..aiter_page_table_common import OUTPUTS, mapping_bound, swa_pass
from ..kv_index_common import request_drops


def requests_pass(case: Case) -> Iterator[Candidate]:
    """Drop requests: their range of kv_flat (the later offsets shift down by its length,
    kv_flat shrinks by as much) and their row of each table (the spare rows past bs stay)."""
    t, v = case.tensors, case.values
    ptr = np.asarray(v["kv_indptr"], np.int64)
    bs = ptr.shape[0] - 1
    if bs < 2 or np.any(ptr[1:] < ptr[:-1]) or ptr[0] < 0 or ptr[-1] > t["kv_flat"].shape[0]:
        return
    if any(name in t and (len(t[name].shape) != 2 or t[name].shape[0] < bs) for name in OUTPUTS):
        return

    def build(keep: list[int]) -> Case:
        flat = np.asarray(v["kv_flat"])
        lens = ptr[1:] - ptr[:-1]
        pieces = [flat[:ptr[0]]] + [flat[ptr[i]:ptr[i + 1]] for i in keep] + [flat[ptr[-1]:]]
        values = {"kv_flat": np.concatenate(pieces),
                  "kv_indptr": ptr[0] + np.concatenate([[0], np.cumsum(lens[keep])]).astype(np.int64)}
        specs = {"kv_flat": relayout(t["kv_flat"], (values["kv_flat"].shape[0],)),
                 "kv_indptr": relayout(t["kv_indptr"], (len(keep) + 1,))}
        for name in OUTPUTS:
            if name in t:
                specs[name] = relayout(t[name], (t[name].shape[0] - (bs - len(keep)), t[name].shape[1]))
        return _edit(case, specs, values)
    yield from request_drops(bs, build)


def value_bound(case: Case, name: str) -> int | None:
    """The exclusive bound of an index-valued input: kv_indptr's offsets within kv_flat (one past
    its last element); with SWA, a slot below the mapping's size."""
    if name == "kv_indptr":
        return case.tensors["kv_flat"].shape[0] + 1
    return mapping_bound(case, name, "kv_flat")


PASSES = (requests_pass, swa_pass, *GENERIC)
