"""num_kv_splits's own minimizer passes (kvfuzz/minimize.py runs them; the generic ones are there)."""

from __future__ import annotations

from typing import Iterator

import numpy as np

from ...case import Case
from ...minimize import Candidate, GENERIC, _chunks, _fmt, _take_many, _targets


def splits_rows_pass(case: Case) -> Iterator[Candidate]:
    """Drop sequences (seq_lens, their num_group outputs, num_seq), then fewer groups."""
    t, s = case.tensors, case.scalars
    G, ns = s.get("num_group"), s.get("num_seq")
    if not isinstance(G, int) or G < 1 or not isinstance(ns, int):
        return
    n = t["seq_lens"].shape[0]
    # the kernel's result depends on the batch's shortest and longest non-empty lengths (and an
    # empty one divides by zero): the rows holding them are the first candidate, before ddmin's halves,
    # which split such rows apart and cost a case of hundreds of rows most of its budget
    lens = case.values.get("seq_lens")
    if lens is not None and n > 3 and lens.shape == (n,):
        zero, nonzero = np.flatnonzero(lens == 0), np.flatnonzero(lens != 0)
        shortest = nonzero[np.argmin(lens[nonzero])] if len(nonzero) else 0
        keep = sorted({int(shortest), int(np.argmax(lens)), *(zero[:1].tolist())})
        dropped_n = n - len(keep)
        yield (f"kept the shortest and longest non-empty and the first empty sequences {_fmt(tuple(keep))} (num_seq {ns} -> {ns - dropped_n})",
               lambda: _take_many(case, {"seq_lens": keep,
                                         "num_kv_splits": [j for j in range(t["num_kv_splits"].shape[0]) if j // G in keep]},
                                  scalars={"num_seq": ns - dropped_n}))
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
