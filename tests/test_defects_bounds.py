"""One missing guard, one defect (kvfuzz/sites/defects.py `_merge_bounds`): accesses of one kernel
past the same bound of the same tensor, at statements with the same pointer and mask, are one
defect whichever statement and broken precondition each case names. The seed's SWA spec kernel
(docs/findings.md section 2) masks its three stores with `mask = offs_n < total_len` and never
with the destination's width: a store past the width from its all-A path (`:102`, `la` past
`page_table_a`) and a fault on a zero-width destination (`:122`) are one defect; a destination
with fewer rows than the batch passes another bound (its rows: a check of the wrapper's) and stays
another. Hand-made cases of the seed (loaded by path), attributed in subprocesses."""

from __future__ import annotations

import numpy as np
import pytest

from kvfuzz.case import Case, TensorSpec
from kvfuzz.sites.choose import site_meta
from kvfuzz.sites.defects import bound_key, defect_key, defects_of
from kvfuzz.sites.run import attribute_isolated

C = TensorSpec.contiguous
OP = "swa_spec_page_table"
WIDTH = {"tensor": "page_table_dst", "dim": 1, "side": "after"}
ROWS = {"tensor": "page_table_dst", "dim": 0, "side": "after"}


@pytest.fixture(autouse=True)
def _cpu(device):
    if device != "cpu":
        pytest.skip("attribution runs under the interpreter (the CPU)")


def case(dst: TensorSpec, la: list[int], lb: list[int], wa: int = 4) -> Case:
    bs = len(la)
    return Case(OP, {"speculative_num_draft_tokens": 1}, {
        "page_table_dst": dst, "page_table_a": C("int32", (bs, wa)), "page_table_b": C("int32", (bs, 4)),
        "seq_len_a": C("int32", (bs,)), "seq_len_b": C("int32", (bs,))}, {
        "page_table_a": np.arange(bs * wa).reshape(bs, wa) + 10, "page_table_b": np.arange(bs * 4).reshape(bs, 4) + 50,
        "seq_len_a": np.array(la), "seq_len_b": np.array(lb)})


def finding(seed_path, kind: str, c: Case) -> dict:
    a, why = attribute_isolated(c, str(seed_path))
    assert a is not None, why
    sig = f"{OP}:spec:{kind}:{'-' if kind == 'crash' else 'page_table_dst'}:x"
    return {"op": OP, "signature": sig, "signatures": [sig], "contract": "out of contract", "case": kind,
            "site": site_meta(sig, a)}


@pytest.fixture(scope="module")
def seen(seed_path) -> dict[str, dict]:
    return {
        # all-A path, la = 300 past page_table_a's width 4: row 0 runs past the 8 columns
        "past the width (:102)": finding(seed_path, "out_of_bounds_write", case(C("int32", (2, 8)), [300, 0], [1, 1])),
        # a zero-width destination: the mixed path faults
        "zero width (:122)": finding(seed_path, "crash", case(TensorSpec("int32", (2, 0), (1, 1)), [1, 0], [1, 1])),
        # one row for a batch of two, its columns 2 apart: row 1 lands in a stride gap
        "fewer rows (gap)": finding(seed_path, "out_of_bounds_write", case(TensorSpec("int32", (1, 8), (1, 2)), [2, 2], [1, 1])),
        # one row, contiguous: row 1 and row 0 past its width are the same addresses
        "fewer rows (contiguous)": finding(seed_path, "out_of_bounds_write", case(C("int32", (1, 8)), [2, 2], [1, 1])),
    }


@pytest.mark.thorough  # seconds of processes and campaigns: CI's thorough stage
def test_each_access_names_the_bound_it_passed(seed_path, seen):
    width, zero, gap, flat = seen.values()
    assert (width["site"]["line"], width["site"]["bound"], width["site"]["depends"]) == (
        102, WIDTH, ["seq_len_a"])
    assert (zero["site"]["line"], zero["site"]["bound"], zero["site"]["depends"]) == (122, WIDTH, ["page_table_dst"])
    assert gap["site"]["bound"] == ROWS
    assert "bound" not in flat["site"]  # the trace cannot tell which bound: none named, nothing merged
    guard = {"kernel": "_prepare_swa_spec_page_table_kernel", "pointer": "dst", "mask": "mask"}
    assert width["site"]["guard"] == zero["site"]["guard"] == gap["site"]["guard"] == guard


@pytest.mark.thorough  # seconds of processes and campaigns: CI's thorough stage
def test_one_missing_guard_is_one_defect_and_another_bound_another(seed_path, seen):
    width, zero, gap, flat = seen.values()
    assert defect_key(OP, width["site"]) != defect_key(OP, zero["site"])  # two statements, two preconditions
    ds = defects_of([width, zero, gap, flat])
    assert [[s["case"] for s in d["symptoms"]] for d in ds] == [
        ["out_of_bounds_write", "crash"], ["out_of_bounds_write"], ["out_of_bounds_write"]]
    assert ds[0]["defect"] == f"{OP} at {seed_path.name}:102 (place; out of contract: seq_len_a)"


def _site(line: int, kernel: str = "k", pointer: str = "dst", mask: str = "mask", bound=WIDTH) -> dict:
    return {"kernel": kernel, "file": "/x/f.py", "line": line, "op": "tl.store", "text": "tl.store(...)",
            "what": "stray_write", "says": "writes", "depends": [f"in{line}"], "bound": dict(bound),
            "guard": {"kernel": kernel, "pointer": pointer, "mask": mask}}


def test_only_the_same_bound_guard_and_kernel_merge():
    def n(*sites) -> int:
        return len(defects_of([{"op": "o", "signature": f"o:p:out_of_bounds_write:t:{i}", "site": s, "case": i}
                               for i, s in enumerate(sites)]))
    assert n(_site(1), _site(2)) == 1
    assert n(_site(1), _site(2, mask="mask2")) == 2  # another mask: another guard
    assert n(_site(1), _site(2, pointer="dst + 1")) == 2
    assert n(_site(1), _site(2, kernel="k2")) == 2
    assert n(_site(1), _site(2, bound=ROWS)) == 2
    assert n(_site(1), _site(2, bound=dict(WIDTH, side="before"))) == 2
    no_guard = dict(_site(2))
    del no_guard["guard"]
    assert n(_site(1), no_guard) == 2 and bound_key("o", no_guard) is None
    # one statement passing two bounds is split by bound first: no chain joins the two bounds
    ds = defects_of([{"op": "o", "signature": f"o:p:out_of_bounds_write:t:{i}", "site": s, "case": i}
                     for i, s in enumerate((_site(1), _site(2, bound=ROWS), _site(1, bound=ROWS)))])
    assert [[s["case"] for s in d["symptoms"]] for d in ds] == [[0], [1, 2]]
    assert ds[0]["defect"] == "o at f.py:1 (place; out of contract: in1; past page_table_dst dim 1 (after))"
