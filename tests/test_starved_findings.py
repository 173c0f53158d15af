"""A finding whose op's minimizing time ran out before it came up is saved as confirmed, then
minimized once every op has run, in the minimizing time the later ops left unused. On the H200
(eight shards, slow fresh processes, a fuzz phase that ran long) 13 of 29 saved cases of a seed
campaign were left at the size they were found, up to 82,123 elements, while the last op's
minimizing slot went unused. Within an op, the findings that take no time (another process
minimizes them) do not take a share, and the rest settle smallest first."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import cases as hand
from kvfuzz.campaign import CampaignConfig
from kvfuzz.corpus import DirectoryCorpus, environment_versions, read_case_dir
from kvfuzz.engines.common import Found
from kvfuzz.judge import judge
from kvfuzz.pipeline import FindingPipeline
from kvfuzz.worker import InProcessExecutor

MUTANT = str(Path(__file__).resolve().parent / "fixtures" / "mutant_kernels.py")
MODIFIED = "decode_metadata:ps1:input_modified:seq_lens:elements"  # the mutant's planted in-place write


@pytest.fixture
def pipeline(tmp_path, device):
    cfg = CampaignConfig(ops=["decode_metadata"], target=MUTANT, device=device, minimize_budget_s=30)
    ex = InProcessExecutor(MUTANT, device)
    pipe = FindingPipeline(cfg, ex, lambda: InProcessExecutor(MUTANT, device), device, environment_versions(),
                           DirectoryCorpus(tmp_path / "corpus"))
    yield pipe
    ex.close()


def found(case, device) -> Found:
    verdict = judge(case, InProcessExecutor(MUTANT, device).run(case))
    return Found(next(f for f in verdict.findings if f.signature == MODIFIED), case, case)


def test_a_finding_left_without_time_is_minimized_after_the_last_op(pipeline, device):
    f = found(hand.decode(ps=1, B=6, delta=3), device)
    assert pipeline.add(f) == "new"
    pipeline.settle({MODIFIED: f}, until=time.monotonic() - 1.0)  # the op's slot is spent
    (s,) = pipeline.saved
    assert s.starved and s.case == f.case and s.minimize_seconds == 0.0
    assert read_case_dir(s.path).case.tensors["seq_lens"].shape == (6,)  # saved as confirmed

    pipeline.settle_starved(time.monotonic() + 60.0)
    assert pipeline.saved == [s] and not s.starved and s.minimized_confirmed
    kept = read_case_dir(s.path)
    assert kept.minimized and kept.case.tensors["seq_lens"].shape == (1,)
    assert MODIFIED in judge(kept.case, InProcessExecutor(MUTANT, device).run(kept.case)).signatures()


def test_without_time_after_the_last_op_the_confirmed_case_stays(pipeline, device):
    f = found(hand.decode(ps=1, B=6, delta=3), device)
    pipeline.add(f)
    pipeline.settle({MODIFIED: f}, until=time.monotonic() - 1.0)
    pipeline.settle_starved(time.monotonic() - 1.0)
    (s,) = pipeline.saved
    assert s.starved and read_case_dir(s.path).case.tensors["seq_lens"].shape == (6,)


def test_an_op_shares_its_time_among_the_findings_that_need_it_smallest_first(pipeline, device, monkeypatch):
    big = found(hand.decode(ps=1, B=6, delta=3), device)
    small = found(hand.decode(ps=1, B=2, delta=3), device)
    elsewhere = found(hand.decode(ps=1, B=4, delta=3), device)
    names = {id(big): "big", id(small): "small", id(elsewhere): "elsewhere"}
    sigs = ["op:p:mismatch:t:big", "op:p:mismatch:t:small", "op:p:mismatch:t:elsewhere"]
    for sig in sigs:
        pipeline.confirmed[sig] = None
    pipeline.held_elsewhere["op:p:mismatch:t:elsewhere"] = Path("x")
    calls = []
    monkeypatch.setattr(pipeline, "_settle", lambda f, groups_from, until: calls.append(
        (names[id(f)], None if until is None else until - time.monotonic())))
    until = time.monotonic() + 100.0
    pipeline.settle(dict(zip(sigs, [big, small, elsewhere])), until)
    assert [name for name, _ in calls] == ["elsewhere", "small", "big"]
    # two findings need time: the first of them gets half of it, not a third
    assert 45.0 <= calls[1][1] <= 50.5


def test_a_sliver_of_time_leaves_a_finding_starved_not_minimized_in_vain(pipeline, device):
    f = found(hand.decode(ps=1, B=6, delta=3), device)
    pipeline.add(f)
    pipeline.settle({MODIFIED: f}, until=time.monotonic() + 1.0)  # one second left: less than MIN_MINIMIZE_S
    (s,) = pipeline.saved
    assert s.starved and s.case == f.case


def test_a_regression_settles_before_the_ordinary_findings_its_case_may_show(pipeline, device, monkeypatch):
    ordinary = found(hand.decode(ps=1, B=2, delta=3), device)
    regression = found(hand.decode(ps=1, B=6, delta=3), device)  # larger, yet first: it hosts the other
    names = {id(ordinary): "ordinary", id(regression): "regression"}
    sigs = ["op:p:mismatch:t:all", "op:p:regression:t:mismatch.all"]
    for sig in sigs:
        pipeline.confirmed[sig] = None
    calls = []
    monkeypatch.setattr(pipeline, "_settle", lambda f, groups_from, until: calls.append(names[id(f)]))
    pipeline.settle(dict(zip(sigs, [ordinary, regression])), None)
    assert calls == ["regression", "ordinary"]
