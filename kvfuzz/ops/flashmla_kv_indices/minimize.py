"""flashmla_kv_indices's own minimizer passes (kvfuzz/minimize.py runs them; the generic ones are there)."""

from __future__ import annotations

from typing import Iterator

import numpy as np

from ...case import Case
from ...minimize import Candidate, GENERIC, _chunks, _edit, _fmt, relayout


def requests_pass(case: Case) -> Iterator[Candidate]:
    """Drop requests: their pool index, length and start, and their row of kv_indices (its
    spare rows past bs stay)."""
    t, v = case.tensors, case.values
    bs = t["req_pool_indices"].shape[0]
    out = t["kv_indices"]
    if bs < 2 or t["paged_kernel_lens"].shape != (bs,) or len(out.shape) != 2 or out.shape[0] < bs:
        return
    for drop in _chunks(bs):
        dropped = frozenset(drop)
        keep = [i for i in range(bs) if i not in dropped]

        def build(keep=keep) -> Case:
            specs, values = {}, {}
            for name in ("req_pool_indices", "paged_kernel_lens", "kv_start_idx"):
                if name in t:
                    values[name] = np.asarray(v[name])[keep]
                    specs[name] = relayout(t[name], (len(keep),))
            specs["kv_indices"] = relayout(out, (out.shape[0] - (bs - len(keep)), out.shape[1]))
            return _edit(case, specs, values)
        yield f"dropped request{'s' if len(drop) > 1 else ''} {_fmt(drop)} (bs {bs} -> {len(keep)})", build


def value_bound(case: Case, name: str) -> int | None:
    """The exclusive bound of an index-valued input: a pool index below the table's rows."""
    if name == "req_pool_indices":
        return case.tensors["req_to_token"].shape[0]
    return None


PASSES = (requests_pass, *GENERIC)
