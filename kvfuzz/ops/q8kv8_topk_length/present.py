"""How `kvfuzz replay` (show.py) and the short repro script (short_repro.py) present a
q8kv8_topk_length case: the input rows and cells an output is computed from, and the call."""

from __future__ import annotations

from ...case import Case
from ..record import ShortCall


def related_rows(case: Case, rows: list[int]) -> dict[str, list[int]]:
    """For the output rows `rows`, the first-dimension indices of each input they are computed from."""
    return {"indices": rows}


def short_call(case: Case, entry: str) -> ShortCall:
    return ShortCall((f"topk_length.copy_({entry}(indices))  # it returns its output",))
