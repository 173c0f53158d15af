"""chunked_prefix_kv_indices's own minimizer passes (kvfuzz/minimize.py runs them; the generic ones are there)."""

from __future__ import annotations

from typing import Iterator

import numpy as np

from ...case import Case
from ...minimize import Candidate, GENERIC, _chunks, _edit, _fmt, relayout


def requests_pass(case: Case) -> Iterator[Candidate]:
    """Drop requests: their pool index, start and length, and their span of chunk_cu_seq_lens
    (the later offsets shift down by the dropped lengths; chunk_kv_indices shrinks by as much)."""
    t, v = case.tensors, case.values
    bs = t["req_pool_indices"].shape[0]
    cu_n = t["chunk_cu_seq_lens"].shape[0] if len(t["chunk_cu_seq_lens"].shape) == 1 else -1
    if bs < 2 or cu_n not in (bs, bs + 1) or any(t[n].shape != (bs,) for n in ("chunk_start_idx", "chunk_seq_lens")):
        return
    for drop in _chunks(bs):
        dropped = frozenset(drop)
        keep = [i for i in range(bs) if i not in dropped]

        def build(keep=keep) -> Case:
            cu = np.asarray(v["chunk_cu_seq_lens"], np.int64)
            lens = np.asarray(v["chunk_seq_lens"], np.int64)
            new_cu = cu[0] + np.concatenate([[0], np.cumsum(lens[keep])]).astype(np.int64)
            if cu_n == bs:
                new_cu = new_cu[:-1]
            specs, values = {}, {}
            for name in ("req_pool_indices", "chunk_start_idx", "chunk_seq_lens"):
                values[name] = np.asarray(v[name])[keep]
                specs[name] = relayout(t[name], (len(keep),))
            values["chunk_cu_seq_lens"] = new_cu
            specs["chunk_cu_seq_lens"] = relayout(t["chunk_cu_seq_lens"], new_cu.shape)
            shrink = int(lens[[i for i in range(bs) if i not in keep]].clip(min=0).sum())
            out = t["chunk_kv_indices"]
            specs["chunk_kv_indices"] = relayout(out, (max(out.shape[0] - shrink, 0),))
            return _edit(case, specs, values)
        yield f"dropped request{'s' if len(drop) > 1 else ''} {_fmt(drop)} (bs {bs} -> {len(keep)})", build


def value_bound(case: Case, name: str) -> int | None:
    """The exclusive bound of an index-valued input: a pool index below the table's rows."""
    if name == "req_pool_indices":
        return case.tensors["req_to_token"].shape[0]
    return None


PASSES = (requests_pass, *GENERIC)
