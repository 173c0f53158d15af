"""flashinfer_kv_indices's own minimizer passes (kvfuzz/minimize.py runs them; the generic ones are there)."""

from __future__ import annotations

from typing import Iterator

import numpy as np

from ...case import Case
from ...minimize import Candidate, GENERIC, _edit, relayout
from ..kv_index_common import kept, request_drops


def requests_pass(case: Case) -> Iterator[Candidate]:
    """Drop requests: their pool index, length and start, and their span of kv_indptr (the later
    offsets shift down by the dropped lengths; kv_indices shrinks by as much)."""
    t, v = case.tensors, case.values
    bs = t["req_pool_indices"].shape[0]
    if bs < 2 or t["kv_indptr"].shape != (bs + 1,) or t["paged_kernel_lens"].shape != (bs,):
        return

    def build(keep: list[int]) -> Case:
        ptr = np.asarray(v["kv_indptr"], np.int64)
        lens = ptr[1:] - ptr[:-1]
        new_ptr = ptr[0] + np.concatenate([[0], np.cumsum(lens[keep])]).astype(np.int64)
        specs, values = kept(case, ("req_pool_indices", "paged_kernel_lens", "kv_start_idx"), keep)
        values["kv_indptr"] = new_ptr
        specs["kv_indptr"] = relayout(t["kv_indptr"], (len(keep) + 1,))
        shrink = int(ptr[-1] - new_ptr[-1])
        specs["kv_indices"] = relayout(t["kv_indices"], (max(t["kv_indices"].shape[0] - shrink, 0),))
        return _edit(case, specs, values)
    yield from request_drops(bs, build)


PASSES = (requests_pass, *GENERIC)
