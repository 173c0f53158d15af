"""kvfuzz's judge and the repro script agree on racy cells (rules.racy_only): a later run that
differs from the first only in cells two programs of an out-of-contract case write is no
defect; a difference anywhere else is `nondeterministic`, in both."""

from __future__ import annotations

import numpy as np
import pytest

from kvfuzz.case import Case, TensorSpec
from kvfuzz.corpus import SavedCase
from kvfuzz.execute import Outcome, RunResult
from kvfuzz.judge import judge
from kvfuzz.materialize import elements_view, plan as make_plan
from kvfuzz.ops import CONTRACTS

OP = "trtllm_mha_kv_indices"


def racy_case() -> Case:
    """Request 0's third page (out of contract: rows hold two) lands on row 1's first cell,
    which request 1 writes too: page_table[1, 0] is racy."""
    C = TensorSpec.contiguous
    return Case(OP, {"page_size": 16}, {"req_to_token": C("int32", (2, 64)), "req_pool_indices": C("int64", (2,)),
                                        "seq_lens": C("int32", (2,)), "page_table": C("int32", (2, 2))},
                {"req_to_token": np.arange(128).reshape(2, 64), "req_pool_indices": np.array([0, 1]),
                 "seq_lens": np.array([40, 40])})


def arenas(cell: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """(a first run's arena: the page table written 7s, a second's: `cell` written 9)."""
    case = racy_case()
    p = make_plan(case, CONTRACTS[OP].outputs)
    first, second = p.image.copy(), p.image.copy()
    table = p.regions["page_table"]
    for arena in (first, second):
        elements_view(table.spec, table.typed(arena))[...] = 7
    elements_view(table.spec, table.typed(second))[cell] = 9
    return first, second


def kvfuzz_says(cell) -> list[str]:
    first, second = arenas(cell)
    return judge(racy_case(), Outcome(runs=[RunResult(after=first), RunResult(after=second)])).signatures()


def script_says(cell) -> list[str]:
    torch = pytest.importorskip("torch")
    from kvfuzz import repro_script
    from kvfuzz.repro import repro_case

    case = repro_case(SavedCase(case=racy_case(), finding=None, target="builtin", device="cpu", versions={},
                                origin="hand"))
    runs = [repro_script.Run(after=torch.from_numpy(a.copy())) for a in arenas(cell)]
    _, found = repro_script.judge_runs(repro_script.TorchArena(case), case.op, case.kernel_path, case.status,
                                       case.reasons, runs, racy=repro_script.racy_cells(case))
    return [f.signature for f in found]


def test_the_case_is_racy_where_the_contract_says():
    assert CONTRACTS[OP].classify(racy_case())[0] == "out_of_contract"
    assert CONTRACTS[OP].racy(racy_case())["page_table"].tolist() == [[False, False], [True, False]]


def test_a_difference_in_a_racy_cell_is_no_defect_for_either():
    assert kvfuzz_says((1, 0)) == [] == script_says((1, 0))


def test_a_difference_elsewhere_is_nondeterministic_for_both():
    want = [f"{OP}:" + kvfuzz_says((0, 0))[0].split(":", 1)[1]]
    assert "nondeterministic" in want[0]
    assert script_says((0, 0)) == want
