"""The engine interface: what `OpRun` does with the verdicts an engine hands it, and a campaign
that runs an engine it knows only through the registry, its findings going through the
finding pipeline (confirmed, minimized, saved)."""

from __future__ import annotations

import time

import pytest

from kvfuzz import engines
from kvfuzz.campaign import CampaignConfig, run_campaign
from kvfuzz.corpus import iter_cases
from kvfuzz.engines.base import Engine, OpRun
from kvfuzz.engines.batch_engine import case_stream
from kvfuzz.engines.common import fit_target
from kvfuzz.findings import Finding
from kvfuzz.judge import Verdict

WRONG = Finding("mismatch", "num_kv_splits", "p", "num_kv_splits", "partial", "wrong split count")
ONLY_IN_BATCH = Finding("out_of_bounds_write", "num_kv_splits", "p", "num_kv_splits", "after", "a stray write")

# a planted defect: a wrong split count for the first sequence of every batch
WRONG_FIRST = '''
from kvfuzz.kernels import get_num_kv_splits


def get_num_kv_splits_triton(out, seq_lens, num_seq, *args):
    get_num_kv_splits(out, seq_lens, num_seq, *args)
    out[:1].fill_(70)
'''


def a_case():
    [(_, case)] = case_stream("num_kv_splits", 0, 1)
    return case


def test_a_new_signature_counts_only_if_the_case_alone_shows_it_and_each_counts_once():
    case, sunk, runs_alone = a_case(), [], []

    def alone(c):
        runs_alone.append(c)
        return Verdict("in_contract", [], [WRONG])  # the case alone shows one of the two

    run = OpRun("num_kv_splits", budget_s=60, max_cases=10, start=5, sink=sunk.append)
    recorded = run.take(Verdict("in_contract", [], [WRONG, ONLY_IN_BATCH]), case, position=6, alone=alone)
    assert recorded == [WRONG] and [f.finding for f in sunk] == [WRONG] and runs_alone == [case]
    assert ONLY_IN_BATCH.signature in run.set_aside and ONLY_IN_BATCH.signature not in run.found
    # both known now: counted, never run alone or handed on again
    assert run.take(Verdict("in_contract", [], [WRONG, ONLY_IN_BATCH]), case, position=7, alone=alone) == []
    assert len(runs_alone) == 1 and len(sunk) == 1
    stats, found = run.finish()
    assert stats.cases == 2 and stats.position == 7 and list(found) == [WRONG.signature]
    assert stats.timeline[-1][1:] == (2, 1)  # the timeline ends with the op's counts


def test_the_time_the_sink_takes_extends_the_budget_but_not_past_the_hard_stop():
    def slow_sink(found):
        time.sleep(0.3)

    run = OpRun("num_kv_splits", budget_s=0.2, max_cases=10, sink=slow_sink)
    run.take(Verdict("in_contract", [], [WRONG]), a_case())
    assert run.extended >= 0.3 and run.in_time()  # confirming does not count as fuzzing
    stopped = OpRun("num_kv_splits", budget_s=0.2, max_cases=10, until=time.monotonic() + 0.1, sink=slow_sink)
    stopped.take(Verdict("in_contract", [], [WRONG]), a_case())
    assert stopped.extended >= 0.3 and not stopped.in_time()


class ListedEngine(Engine):
    """An engine the campaign has never heard of: the in-contract stream's first cases, one
    at a time, each run alone."""

    name = "listed"

    def fuzz(self, run: OpRun) -> None:
        lacks = getattr(self.executor, "lacks", {})  # optional tensors the target cannot take
        for i, (_, case) in enumerate(case_stream(self.op, self.options.seed, run.max_cases, in_contract_only=True)):
            if not run.in_time():
                break
            case = fit_target(case, lacks)
            run.take(self.alone(case), case, position=i + 1)


@pytest.mark.slow  # campaign-sized: `pytest -m slow`
def test_a_campaign_runs_any_registered_engine_and_its_findings_are_confirmed_and_saved(tmp_path, device,
                                                                                      monkeypatch):
    monkeypatch.setitem(engines.ENGINES, "listed", (__name__, "ListedEngine"))
    target = tmp_path / "wrong.py"
    target.write_text(WRONG_FIRST)
    corpus = tmp_path / "corpus"
    result = run_campaign(CampaignConfig(ops=["num_kv_splits"], target=str(target), device=device, engine="listed",
                                         budget_s=120, max_cases=24, corpus=corpus, in_contract_only=True,
                                         minimize_budget_s=5))
    [stats] = result.stats
    assert stats.cases == 24 and stats.position == 24 and stats.not_target == 0
    [x] = result.saved
    assert x.found.finding.kind == "mismatch" and x.confirmation.confirmed and x.new
    [(path, saved)] = list(iter_cases(corpus))
    assert path == x.path and saved.origin == "listed"
    assert result.report()["engine"] == "listed"
