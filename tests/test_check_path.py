"""One checking path: on every path a case takes (a campaign batch and its re-run alone, a
finding's confirmation, a minimizer candidate, a replay) its NumPy oracle runs once and its
structural checks once, in the worker's side as in the judge's.

The target is the mutant fixture (plain torch, fast): its in-place write to `seq_lens` on a
draft step with `seq_len_delta == 3` is an `input_modified` finding on an in-contract case.
Its executor runs in this process, so the worker's side is counted too.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

import cases as hand
from kvfuzz.case import Case
from kvfuzz.confirm import confirm
from kvfuzz.corpus import SavedCase, write_case_dir
from kvfuzz.engines.batch_engine import fuzz_op
from kvfuzz.judge import judge
from kvfuzz.ops import records
from kvfuzz.replay import replay
from kvfuzz.worker import InProcessExecutor

MUTANT = str(Path(__file__).resolve().parent / "fixtures" / "mutant_kernels.py")
OP = "decode_metadata"
MODIFIED = "decode_metadata:ps1:input_modified:seq_lens:elements"


class Counts:
    """NumPy oracle runs and structural checks per case object (each object kept alive, so
    no two share an id)."""

    def __init__(self) -> None:
        self.seen: dict[int, list] = {}  # id -> [case, oracle runs, structural checks]

    def note(self, case: Case, which: int) -> None:
        self.seen.setdefault(id(case), [case, 0, 0])[which] += 1

    def of(self, case: Case) -> tuple[int, int]:
        _, oracle, structural = self.seen.get(id(case), [case, 0, 0])
        return oracle, structural

    def most(self) -> tuple[int, int]:
        return (max((o for _, o, _ in self.seen.values()), default=0),
                max((s for _, _, s in self.seen.values()), default=0))

    def oracle_runs(self) -> int:
        return sum(o for _, o, _ in self.seen.values())


@pytest.fixture
def counts(monkeypatch) -> Counts:
    c = Counts()
    record = records()[OP]
    contract = record.contract

    def numpy_ref(case, _ref=contract.numpy_ref):
        c.note(case, 1)
        return _ref(case)

    def structural_reasons(case, _reasons=contract.structural_reasons):
        c.note(case, 2)
        return _reasons(case)

    counted = dataclasses.replace(contract, numpy_ref=numpy_ref,
                                  structural_reasons=structural_reasons)
    monkeypatch.setitem(records(), OP, dataclasses.replace(record, contract=counted))
    return c


@pytest.fixture(scope="module")
def mutant(device):
    ex = InProcessExecutor(MUTANT, device)
    yield ex
    ex.close()


def modified_case() -> Case:
    return hand.decode(ps=1, delta=3)


def saved_finding(case: Case, device: str) -> SavedCase:
    verdict = judge(case, InProcessExecutor(MUTANT, device).run(case))
    finding = next(f for f in verdict.findings if f.signature == MODIFIED)
    return SavedCase(case=case, finding=finding, target=MUTANT, device=device, versions={}, origin="hand",
                     expected="xfail", reason="the mutant fixture's planted input_modified")


def test_a_campaign_batch_runs_each_cases_oracle_once_its_rerun_alone_included(counts, mutant, device):
    # seed 2's first 64 cases, in stints of 8: in and out of contract, and an input_modified (a ps1
    # class with seq_len_delta 3, its third stint)
    stats, found = fuzz_op(OP, mutant, seed=2, budget_s=120, max_cases=64, device=device, rerun_every=1, stint=8)
    assert stats.cases == 64 and stats.by_status["out_of_contract"]
    assert any(f.finding.kind == "input_modified" for f in found.values())  # its case was re-run alone
    assert counts.oracle_runs() > 0
    assert counts.most() == (1, 1)


def test_a_confirmation_runs_the_oracle_once_for_all_its_fresh_runs(counts, device):
    saved = saved_finding(modified_case(), device)
    counts.seen.clear()
    c = confirm(saved, lambda: InProcessExecutor(MUTANT, device), tries=3)
    assert c.confirmed and c.tries == 3
    assert len(counts.seen) == 1  # the case read back from its saved form
    assert counts.most() == (1, 1)


def test_a_minimizer_candidate_runs_the_oracle_once(counts, device, tmp_path):
    from kvfuzz.cli import main

    case = hand.decode(ps=1, B=6, delta=3)  # rows to drop: candidates in and out of the class
    (tmp_path / "case").mkdir()
    write_case_dir(saved_finding(case, device), tmp_path / "case")
    counts.seen.clear()
    assert main(["minimize", str(tmp_path / "case"), "-o", str(tmp_path / "out"), "--device", device,
                 "--in-process", "--budget", "60"]) == 0
    assert len(counts.seen) > 3  # the case and several candidates
    assert counts.most() == (1, 1)


def test_a_replay_runs_the_oracle_once(counts, device):
    saved = saved_finding(modified_case(), device)
    counts.seen.clear()
    r = replay(saved, None, device, isolate=False)
    assert r.same_defect
    assert counts.of(saved.case) == (1, 1) and counts.most() == (1, 1)


def test_one_function_settles_the_variant_a_saved_case_is_judged_by():
    """`Checker.for_saved`, as replay and the pytest plugin call it: on its own target a case
    keeps its variant, refused where the target would drop that variant's arguments; on
    another target it takes the variant that target selects. The campaign's `--variant` goes
    through the same `settle_variant`."""
    from types import SimpleNamespace

    from kvfuzz.check import Checker, settle_variant
    from kvfuzz.errors import BadInput

    release = SimpleNamespace(variants={OP: "skip"}, takes={OP: ("skip_page_table", "swa_v2p")})  # SGLang 0.5.20-like
    fused = hand.decode(variant="fused")
    with pytest.raises(BadInput, match="the case's variant fused: target sglang==0.5.20 does not take"):
        Checker.for_saved(release, fused, "sglang==0.5.20", own_target=True)
    other = Checker.for_saved(release, fused, "sglang==0.5.20", own_target=False)
    assert other.variant == "skip" and other.adopt(fused).variant == "skip"
    own = Checker.for_saved(release, hand.decode(variant="skip"), "sglang==0.5.20", own_target=True)
    assert own.variant == "skip"
    assert settle_variant(OP, release, "sglang==0.5.20", "live_prefix", "--variant live_prefix") == "live_prefix"
    with pytest.raises(BadInput, match="--variant fused"):
        settle_variant(OP, release, "sglang==0.5.20", "fused", "--variant fused")


def test_a_checker_prepares_the_same_case_object_once(counts, mutant):
    from kvfuzz.check import Checker

    checker = Checker(mutant, OP)
    case = modified_case()
    assert checker.prepare(case) is checker.prepare(case)  # the minimizer's class, then its run
    again = modified_case()  # equal content, another object: prepared anew
    assert checker.prepare(again) is not checker.prepare(case)
    assert counts.of(case)[0] == 2 and counts.of(again)[0] == 1
