"""num_kv_splits's own minimizer passes (kvfuzz/minimize.py runs them; the generic ones are there)."""

from __future__ import annotations

from typing import Iterator

from ...case import Case
from ...minimize import Candidate, GENERIC, _chunks, _fmt, _take_many, _targets


def splits_rows_pass(case: Case) -> Iterator[Candidate]:
    """Drop sequences (seq_lens, their num_group outputs, num_seq), then fewer groups."""
    t, s = case.tensors, case.scalars
    G, ns = s.get("num_group"), s.get("num_seq")
    if not isinstance(G, int) or G < 1 or not isinstance(ns, int):
        return
    n = t["seq_lens"].shape[0]
    for drop in _chunks(n):
        dropped = frozenset(drop)
        rows = {"seq_lens": [i for i in range(n) if i not in dropped],
                "num_kv_splits": [j for j in range(t["num_kv_splits"].shape[0]) if j // G not in dropped]}
        word = "sequence" if len(drop) == 1 else "sequences"
        yield (f"dropped {word} {_fmt(drop)} (num_seq {ns} -> {ns - len(drop)})",
               lambda rows=rows, d=len(drop): _take_many(case, rows, scalars={"num_seq": ns - d}))
    for g2 in _targets(G, 1):
        rows = {"num_kv_splits": [j for j in range(t["num_kv_splits"].shape[0]) if j % G < g2]}
        yield f"num_group {G} -> {g2}", (lambda rows=rows, g2=g2: _take_many(case, rows, scalars={"num_group": g2}))


def splits_scalars_pass(case: Case) -> Iterator[Candidate]:
    for name in ("num_head", "num_kv_head", "max_kv_splits", "device_core_count"):
        x = case.scalars.get(name)
        if isinstance(x, int) and x > 1:
            for y in _targets(x, 1):
                yield f"{name} {x} -> {y}", (lambda n=name, y=y: case.with_scalars(**{n: y}))


PASSES = (splits_rows_pass, *GENERIC, splits_scalars_pass)
