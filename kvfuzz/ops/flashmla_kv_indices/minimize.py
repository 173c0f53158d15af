"""flashmla_kv_indices's own minimizer passes (kvfuzz/minimize.py runs them; the generic ones are there)."""

from __future__ import annotations

from typing import Iterator

from ...case import Case
from ...minimize import Candidate, GENERIC, _edit, relayout
from ..kv_index_common import kept, request_drops


def requests_pass(case: Case) -> Iterator[Candidate]:
    """Drop requests: their pool index, length and start, and their row of kv_indices (its
    spare rows past bs stay)."""
    t = case.tensors
    bs = t["req_pool_indices"].shape[0]
    out = t["kv_indices"]
    if bs < 2 or t["paged_kernel_lens"].shape != (bs,) or len(out.shape) != 2 or out.shape[0] < bs:
        return

    def build(keep: list[int]) -> Case:
        specs, values = kept(case, ("req_pool_indices", "paged_kernel_lens", "kv_start_idx"), keep)
        specs["kv_indices"] = relayout(out, (out.shape[0] - (bs - len(keep)), out.shape[1]))
        return _edit(case, specs, values)
    yield from request_drops(bs, build)


PASSES = (requests_pass, *GENERIC)
