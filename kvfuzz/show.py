"""A case's tensors and a finding's cells as a person reads them (`kvfuzz replay`).

`input_lines`: every input tensor, small ones (at most `SMALL` elements) in full, larger ones
summarised (dtype, shape, layout, min/max) with the rows that matter for the failure spelled
out: the rows the wrong output cells were computed from (`related_rows`, per op: decode's
batch row i reads `seq_lens[i]`, `req_pool_indices[i]` and row `req_pool_indices[i]` of
`req_to_token`; the spec op's row m reads `page_table_a[m // R]` and `page_table_b[m]`, ...).
`cell_lines`: the wrong cells of a finding, `page_table[0, 1]: expected 5, got -559038737`,
and, for a page-table cell, the input cells it is computed from (`cell_sources`:
`reads req_to_token[2, 4] = 77, full_to_swa_index_mapping[77] = 9`).
"""

from __future__ import annotations

from typing import Iterable

import numpy as np

from .case import Case
from .findings import Finding
from .ops import records

SMALL = 64  # elements: an input this small is printed in full
ROW_SHOWN = 32  # elements of one row printed before "..."
ROWS_SHOWN = 4  # rows that matter printed per input
FIRST_SHOWN = 16  # elements of a large 1-D input shown when no row of it matters


def values_text(values: np.ndarray, limit: int = ROW_SHOWN) -> str:
    """A 1-D run of values as `[1, 2, 3]`, cut after `limit` with `... (N more)`."""
    flat = [int(x) for x in np.asarray(values).reshape(-1)]
    text = ", ".join(str(x) for x in flat[:limit])
    more = f", ... ({len(flat) - limit} more)" if len(flat) > limit else ""
    return f"[{text}{more}]"


def _full(values: np.ndarray) -> list[str]:
    if values.ndim <= 1:
        return [values_text(values, SMALL)]
    return [f"[{i}] {values_text(row, SMALL)}" for i, row in enumerate(values.reshape(values.shape[0], -1))]


def related_rows(case: Case, out_rows: Iterable[int]) -> dict[str, list[int]]:
    """For the output rows `out_rows` (the first index of wrong cells), the first-dimension
    indices of each input that those rows are computed from."""
    rows = sorted(set(int(r) for r in out_rows))
    if not rows:
        return {}
    rec = records().get(case.op)
    return rec.related_rows(case, rows) if rec is not None and rec.related_rows is not None else {}


def input_lines(case: Case, findings: Iterable[Finding] = ()) -> list[str]:
    """The inputs, one block each (see the module docstring)."""
    out_rows = [c["index"][0] for f in findings for c in f.cells
                if f.tensor in case.tensors and c.get("index")]
    related = related_rows(case, out_rows)
    lines = []
    for name, spec in sorted(case.tensors.items()):
        if name not in case.values:
            continue
        values = np.asarray(case.values[name])
        lines.append(f"  {name}: {spec.describe()}")
        if values.size <= SMALL:
            lines += [f"    {line}" for line in _full(values)]
            continue
        lines.append(f"    min {int(values.min())}, max {int(values.max())}")
        shown = [r for r in related.get(name, []) if 0 <= r < values.shape[0]][:ROWS_SHOWN]
        if not shown and values.ndim == 1:
            lines.append(f"    first {FIRST_SHOWN}: {values_text(values, FIRST_SHOWN)}")
        for r in shown:
            lines.append(f"    [{r}] {values_text(values[r])}")
    return lines


def at(table: np.ndarray, *index: int) -> str:
    """`[i, j] = v`, or `[i, j] outside` an index past the table."""
    where = "[" + ", ".join(str(i) for i in index) + "]"
    inside = len(index) == table.ndim and all(0 <= i < n for i, n in zip(index, table.shape))
    return f"{where} = {int(table[index])}" if inside else f"{where} (outside shape {list(table.shape)})"


def cell_sources(case: Case, tensor: str, index: list[int]) -> str | None:
    """The input cells an output cell is computed from, in words (page-table cells of the decode,
    draft-extend and spec ops); None for the other cells."""
    rec = records().get(case.op)
    return rec.cell_sources(case, tensor, index) if rec is not None and rec.cell_sources is not None else None


def cell_lines(f: Finding, case: Case | None = None) -> list[str]:
    """A finding's recorded cells in words: expected against what the target left, and with
    `case`, the input cells each is computed from."""
    lines = []
    for cell in f.cells:
        if "index" not in cell:  # bytes outside the elements
            lines.append("  ".join(f"{k}={val}" for k, val in cell.items()))
            continue
        at = f"{f.tensor}[{', '.join(str(i) for i in cell['index'])}]"
        if "numpy" in cell and "got" in cell:
            torch = f" (torch oracle {cell['torch']})" if cell.get("torch", cell["numpy"]) != cell["numpy"] else ""
            lines.append(f"{at}: expected {cell['numpy']}{torch}, got {cell['got']}")
        elif "before" in cell and "got" in cell:
            lines.append(f"{at}: must stay {cell['before']}, got {cell['got']}")
        else:
            rest = ", ".join(f"{k} {val}" for k, val in cell.items() if k != "index")
            lines.append(f"{at}: {rest}")
        sources = cell_sources(case, f.tensor, list(cell["index"])) if case is not None else None
        if sources:
            lines.append(f"  reads {sources}")
    return lines
