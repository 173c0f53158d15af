"""flashinfer_kv_indices's own minimizer passes (kvfuzz/minimize.py runs them; the generic ones are there)."""

from __future__ import annotations

from typing import Iterator

import numpy as np

from ...case import Case
from ...minimize import Candidate, GENERIC, _chunks, _edit, _fmt, relayout


def requests_pass(case: Case) -> Iterator[Candidate]:
    """Drop requests: their pool index, length and start, and their span of kv_indptr (the later
    offsets shift down by the dropped lengths; kv_indices shrinks by as much)."""
    t, v = case.tensors, case.values
    bs = t["req_pool_indices"].shape[0]
    if bs < 2 or t["kv_indptr"].shape != (bs + 1,) or t["paged_kernel_lens"].shape != (bs,):
        return
    for drop in _chunks(bs):
        dropped = frozenset(drop)
        keep = [i for i in range(bs) if i not in dropped]

        def build(keep=keep) -> Case:
            ptr = np.asarray(v["kv_indptr"], np.int64)
            lens = ptr[1:] - ptr[:-1]
            new_ptr = ptr[0] + np.concatenate([[0], np.cumsum(lens[keep])]).astype(np.int64)
            specs, values = {}, {}
            for name in ("req_pool_indices", "paged_kernel_lens", "kv_start_idx"):
                if name in t:
                    values[name] = np.asarray(v[name])[keep]
                    specs[name] = relayout(t[name], (len(keep),))
            values["kv_indptr"] = new_ptr
            specs["kv_indptr"] = relayout(t["kv_indptr"], (len(keep) + 1,))
            shrink = int(ptr[-1] - new_ptr[-1])
            specs["kv_indices"] = relayout(t["kv_indices"], (max(t["kv_indices"].shape[0] - shrink, 0),))
            return _edit(case, specs, values)
        yield f"dropped request{'s' if len(drop) > 1 else ''} {_fmt(drop)} (bs {bs} -> {len(keep)})", build


def value_bound(case: Case, name: str) -> int | None:
    """The exclusive bound of an index-valued input: a pool index below the table's rows."""
    if name == "req_pool_indices":
        return case.tensors["req_to_token"].shape[0]
    return None


PASSES = (requests_pass, *GENERIC)
