"""trtllm_mha_kv_indices's own minimizer passes (kvfuzz/minimize.py runs them; the generic ones are there)."""

from __future__ import annotations

from typing import Iterator

import numpy as np

from ...case import Case
from ...minimize import Candidate, GENERIC, _chunks, _edit, _fmt, relayout

OUTPUTS = ("page_table", "swa_page_table")


def requests_pass(case: Case) -> Iterator[Candidate]:
    """Drop requests: their pool index and length, and their row of page_table (and swa_page_table)."""
    t, v = case.tensors, case.values
    bs = t["req_pool_indices"].shape[0]
    out = t["page_table"]
    if bs < 2 or t["seq_lens"].shape != (bs,) or len(out.shape) != 2 or out.shape[0] != bs:
        return
    for drop in _chunks(bs):
        dropped = frozenset(drop)
        keep = [i for i in range(bs) if i not in dropped]

        def build(keep=keep) -> Case:
            specs, values = {}, {}
            for name in ("req_pool_indices", "seq_lens"):
                values[name] = np.asarray(v[name])[keep]
                specs[name] = relayout(t[name], (len(keep),))
            for name in OUTPUTS:
                if name in t and len(t[name].shape) == 2:
                    specs[name] = relayout(t[name], (len(keep), t[name].shape[1]))
            return _edit(case, specs, values)
        yield f"dropped request{'s' if len(drop) > 1 else ''} {_fmt(drop)} (bs {bs} -> {len(keep)})", build


def swa_pass(case: Case) -> Iterator[Candidate]:
    """SWA off: full_to_swa and swa_page_table dropped (the finding may be page_table's alone)."""
    if "full_to_swa" not in case.tensors and "swa_page_table" not in case.tensors:
        return

    def build() -> Case:
        drop = ("full_to_swa", "swa_page_table")
        return case.replace(tensors={n: s for n, s in case.tensors.items() if n not in drop},
                            values={n: x for n, x in case.values.items() if n not in drop})
    yield "SWA dropped (full_to_swa, swa_page_table)", build


def value_bound(case: Case, name: str) -> int | None:
    """The exclusive bound of an index-valued input: a pool index below the table's rows; with
    SWA, a slot below the mapping's size."""
    if name == "req_pool_indices":
        return case.tensors["req_to_token"].shape[0]
    if name == "req_to_token" and "full_to_swa" in case.tensors:
        return case.tensors["full_to_swa"].shape[0]
    return None


PASSES = (requests_pass, swa_pass, *GENERIC)
