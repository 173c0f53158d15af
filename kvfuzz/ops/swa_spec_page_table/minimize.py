"""swa_spec_page_table's own minimizer passes (kvfuzz/minimize.py runs them; the generic ones are there)."""

from __future__ import annotations

from typing import Iterator

import numpy as np

from ...case import Case
from ...minimize import Candidate, GENERIC, _chunks, _edit, _fmt, _narrow, _take_many, _targets


SPEC_ROWS_M = ("page_table_dst", "page_table_b", "seq_len_b")
SPEC_TABLE_OF = {"seq_len_a": "page_table_a", "seq_len_b": "page_table_b"}  # a length and the table it measures
SPEC_ROWS_BS = ("page_table_a", "seq_len_a")


def spec_rows_pass(case: Case) -> Iterator[Candidate]:
    """Drop requests (A row, and its R expanded rows), then fewer draft tokens R."""
    t, R = case.tensors, case.scalars["speculative_num_draft_tokens"]
    if not isinstance(R, int) or R < 1:
        return
    bs = t["seq_len_a"].shape[0]
    for drop in _chunks(bs):
        dropped = frozenset(drop)
        rows = {n: [i for i in range(t[n].shape[0]) if i not in dropped] for n in SPEC_ROWS_BS}
        rows.update({n: [m for m in range(t[n].shape[0]) if m // R not in dropped] for n in SPEC_ROWS_M})
        word = "request" if len(drop) == 1 else "requests"
        yield f"dropped {word} {_fmt(drop)} (bs {bs} -> {bs - len(drop)})", (lambda rows=rows: _take_many(case, rows))
    for r2 in _targets(R, 1):
        for where, sel in (("first", range(r2)), ("last", range(R - r2, R))):
            sel = set(sel)
            rows = {n: [m for m in range(t[n].shape[0]) if m % R in sel] for n in SPEC_ROWS_M}
            yield (f"speculative_num_draft_tokens {R} -> {r2} (kept the {where} {r2} rows of each request)",
                   lambda rows=rows, r2=r2: _take_many(case, rows, scalars={"speculative_num_draft_tokens": r2}))


def spec_widths_pass(case: Case) -> Iterator[Candidate]:
    """A, B and dst no wider than the lengths need (never narrower: no new overflow)."""
    t, v, R = case.tensors, case.values, case.scalars["speculative_num_draft_tokens"]
    la, lb = v["seq_len_a"].astype(np.int64), v["seq_len_b"].astype(np.int64)
    needs = {"page_table_a": int(la.max(initial=0)), "page_table_b": int(lb.max(initial=0))}
    rows = min(la.size * R, lb.size, t["page_table_dst"].shape[0])
    m = np.arange(rows)
    needs["page_table_dst"] = int((la[m // R] + lb[m]).max(initial=0)) if rows else 0
    for name, need in needs.items():
        W = t[name].shape[1]
        for w in _targets(W, max(need, 0)):
            yield f"{name} width {W} -> {w}", (lambda n=name, w=w: _narrow(case, n, w))
    for length, name in SPEC_TABLE_OF.items():  # a table past which a length runs: narrower, the length with it
        W, lens = t[name].shape[1], v[length].astype(np.int64)
        wild = lens > W
        if not wild.any():
            continue
        for w in _targets(W, max(int(lens[~wild].max(initial=0)), 0)):

            def narrow(name=name, length=length, w=w, W=W, lens=lens, wild=wild):
                return _edit(_narrow(case, name, w), values={length: np.where(wild, lens - (W - w), lens)})

            yield f"{name} width {W} -> {w}, its wild {length} {W - w} lower (as far past it)", narrow


def value_escape(case: Case, name: str) -> int | None:
    """Where a wild length escapes the table it measures (la in [0, WA], lb in [0, WB])."""
    if name in SPEC_TABLE_OF:
        return case.tensors[SPEC_TABLE_OF[name]].shape[1] + 1
    return None


PASSES = (spec_rows_pass, spec_widths_pass, *GENERIC)
