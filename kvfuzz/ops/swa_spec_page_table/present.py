"""How `kvfuzz replay` (show.py) and the short repro script (short_repro.py) present a
swa_spec_page_table case: the input rows and cells an output is computed from, and the call."""

from __future__ import annotations

from ...case import Case
from ...show import at
from ..record import ShortCall


def related_rows(case: Case, rows: list[int]) -> dict[str, list[int]]:
    """For the output rows `rows`, the first-dimension indices of each input they are computed from."""
    R = case.scalars.get("speculative_num_draft_tokens") or 1
    return {"seq_len_a": sorted({r // R for r in rows}), "page_table_a": sorted({r // R for r in rows}),
            "seq_len_b": rows, "page_table_b": rows}


def cell_sources(case: Case, tensor: str, index: list[int]) -> str | None:
    """The input cells a page_table_dst cell reads, in words."""
    if tensor != "page_table_dst":
        return None
    v, s = case.values, case.scalars
    m, c = index
    R = s["speculative_num_draft_tokens"]
    la_all, lb_all = v["seq_len_a"], v["seq_len_b"]
    if not (0 <= m // R < la_all.shape[0] and 0 <= m < lb_all.shape[0]):
        return None
    la, lb = int(la_all[m // R]), int(lb_all[m])
    head = f"seq_len_a[{m // R}] = {la}, seq_len_b[{m}] = {lb}"
    if c < la:
        return f"{head}, page_table_a{at(v['page_table_a'], m // R, c)}"
    if c < la + lb:
        return f"{head}, page_table_b{at(v['page_table_b'], m, c - la)}"
    return f"{head}: past la + lb = {la + lb}"


def short_call(case: Case, entry: str) -> ShortCall:
    s = case.scalars
    return ShortCall((f"{entry}(page_table_dst, page_table_a, page_table_b, seq_len_a, seq_len_b,",
                      f"    speculative_num_draft_tokens={s['speculative_num_draft_tokens']})"))
