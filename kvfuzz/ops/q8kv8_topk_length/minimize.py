"""q8kv8_topk_length's own minimizer passes (kvfuzz/minimize.py runs them; the generic ones are there)."""

from __future__ import annotations

from typing import Iterator

from ...case import Case
from ...minimize import Candidate, GENERIC, _chunks, _fmt, _narrow, _take_many, _targets


def topk_rows_pass(case: Case) -> Iterator[Candidate]:
    """Drop rows of indices with their lengths; then narrow the rows (the widths SGLang's block
    choice turns on first)."""
    spec = case.tensors["indices"]
    if len(spec.shape) != 2 or case.tensors["topk_length"].shape != spec.shape[:1]:
        return
    S, K = spec.shape
    for drop in _chunks(S):
        dropped = frozenset(drop)
        keep = [i for i in range(S) if i not in dropped]
        yield (f"dropped row{'s' if len(drop) > 1 else ''} {_fmt(drop)} (S {S} -> {len(keep)})",
               lambda keep=keep: _take_many(case, {"indices": keep, "topk_length": keep}))
    for w in _targets(K, 0, [b for b in (128, 256, 512) if b < K]):
        yield f"indices width {K} -> {w}", (lambda w=w: _narrow(case, "indices", w))


PASSES = (topk_rows_pass, *GENERIC)
