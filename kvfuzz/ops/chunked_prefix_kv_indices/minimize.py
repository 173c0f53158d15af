"""chunked_prefix_kv_indices's own minimizer passes (kvfuzz/minimize.py runs them; the generic ones are there)."""

from __future__ import annotations

from typing import Iterator

import numpy as np

from ...case import Case
from ...minimize import Candidate, GENERIC, _edit, relayout
from ..kv_index_common import kept, request_drops


def requests_pass(case: Case) -> Iterator[Candidate]:
    """Drop requests: their pool index, start and length, and their span of chunk_cu_seq_lens
    (the later offsets shift down by the dropped lengths; chunk_kv_indices shrinks by as much)."""
    t, v = case.tensors, case.values
    bs = t["req_pool_indices"].shape[0]
    cu_n = t["chunk_cu_seq_lens"].shape[0] if len(t["chunk_cu_seq_lens"].shape) == 1 else -1
    if bs < 2 or cu_n not in (bs, bs + 1) or any(t[n].shape != (bs,) for n in ("chunk_start_idx", "chunk_seq_lens")):
        return

    def build(keep: list[int]) -> Case:
        cu = np.asarray(v["chunk_cu_seq_lens"], np.int64)
        lens = np.asarray(v["chunk_seq_lens"], np.int64)
        new_cu = cu[0] + np.concatenate([[0], np.cumsum(lens[keep])]).astype(np.int64)
        if cu_n == bs:
            new_cu = new_cu[:-1]
        specs, values = kept(case, ("req_pool_indices", "chunk_start_idx", "chunk_seq_lens"), keep)
        values["chunk_cu_seq_lens"] = new_cu
        specs["chunk_cu_seq_lens"] = relayout(t["chunk_cu_seq_lens"], new_cu.shape)
        shrink = int(lens[[i for i in range(bs) if i not in keep]].clip(min=0).sum())
        out = t["chunk_kv_indices"]
        specs["chunk_kv_indices"] = relayout(out, (max(out.shape[0] - shrink, 0),))
        return _edit(case, specs, values)
    yield from request_drops(bs, build)


PASSES = (requests_pass, *GENERIC)
