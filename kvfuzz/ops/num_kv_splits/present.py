"""How `kvfuzz replay` (show.py) and the short repro script (short_repro.py) present a
num_kv_splits case: the input rows and cells an output is computed from, and the call."""

from __future__ import annotations

from ...case import Case
from ..record import ShortCall
from .call import sglang_max_num_seq


def related_rows(case: Case, rows: list[int]) -> dict[str, list[int]]:
    """For the output rows `rows`, the first-dimension indices of each input they are computed from."""
    g = case.scalars.get("num_group") or 1
    return {"seq_lens": sorted({r // g for r in rows})}


def short_call(case: Case, entry: str) -> ShortCall:
    t, s = case.tensors, case.scalars
    extra = ", uneven_batch_ptr=uneven_batch" if "uneven_batch" in t else ""
    n = s["num_seq"]
    max_num_seq = sglang_max_num_seq(n)
    return ShortCall(("# a bare @triton.jit kernel: SGLang's triton backend launches it on grid (1,)",
                      f"{entry}[(1,)](num_kv_splits, seq_lens, {n}, {s['num_group']}, {s['num_head']}, "
                      f"{s['num_kv_head']},",
                      f"    {s['max_kv_splits']}, {s['device_core_count']}, MAX_NUM_SEQ={max_num_seq}{extra})"))
