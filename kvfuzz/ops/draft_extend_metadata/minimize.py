"""draft_extend_metadata's own minimizer passes (kvfuzz/minimize.py runs them; the generic ones are there)."""

from __future__ import annotations

from typing import Iterator

import numpy as np

from ...case import Case
from ...minimize import (Candidate, GENERIC, _block_edges, _chunks, _contract, _edit, _fmt, _narrow,
                        _take_many, _targets)


DRAFT_BATCH = ("cache_seqlens_int32", "page_table", "swa_page_table", "req_pool_indices", "seq_lens",
               "extend_seq_lens")
DRAFT_SWA = ("full_to_swa_index_mapping", "swa_page_table", "out_cache_loc", "swa_out_cache_loc")


def draft_rows_pass(case: Case) -> Iterator[Candidate]:
    """Drop batch rows: from every batch-indexed tensor, both prefix sums, and each dropped
    row's block of write locations."""
    t, B = case.tensors, case.tensors["cache_seqlens_int32"].shape[0]
    tpr = t["out_cache_loc"].shape[0] // B if "out_cache_loc" in t and B else 0
    for drop in _chunks(B):
        dropped = frozenset(drop)
        keep = [i for i in range(B) if i not in dropped]
        rows = {name: keep for name in DRAFT_BATCH if name in t}
        rows |= {name: list(range(len(keep) + 1)) for name in ("cu_seqlens_k", "cu_seqlens_q")}
        if tpr:
            rows["out_cache_loc"] = rows["swa_out_cache_loc"] = [i * tpr + j for i in keep for j in range(tpr)]
        word = "row" if len(drop) == 1 else "rows"
        yield (f"dropped batch {word} {_fmt(drop)} (B {B} -> {B - len(drop)})",
               lambda rows=rows: _take_many(case, rows))


def draft_swa_pass(case: Case) -> Iterator[Candidate]:
    if any(name in case.tensors for name in DRAFT_SWA):
        yield f"dropped SWA ({', '.join(DRAFT_SWA)})", lambda: _edit(case, drop=DRAFT_SWA)


def draft_widths_pass(case: Case) -> Iterator[Candidate]:
    """The page tables (together: SGLang wants one shape) down to the live pages; req_to_token
    down to the tokens they read."""
    t, ps = case.tensors, case.scalars.get("page_size")
    if not isinstance(ps, int) or ps <= 0 or len(t["page_table"].shape) != 2:
        return
    W = t["page_table"].shape[1]
    lens = case.values["seq_lens"].astype(np.int64)
    need = int(np.clip(-(-lens // ps), 0, W).max()) if lens.size else 0
    c = _contract(case.op)
    for w in _targets(W, need, _block_edges(W, c.block_sizes if c else ())):

        def narrow(w=w):
            out = _narrow(case, "page_table", w)
            return _narrow(out, "swa_page_table", w) if "swa_page_table" in t else out

        yield f"page tables width {W} -> {w}", narrow
    rtt = t["req_to_token"]
    if len(rtt.shape) == 2:
        for w in _targets(rtt.shape[1], max((need - 1) * ps + 1, 1)):
            yield f"req_to_token width {rtt.shape[1]} -> {w}", (lambda w=w: _narrow(case, "req_to_token", w))


PASSES = (draft_rows_pass, draft_swa_pass, draft_widths_pass, *GENERIC)
