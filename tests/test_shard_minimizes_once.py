"""The shards of one campaign find the same defects; the shard whose case the corpus kept
minimizes it, and the others spend none of their minimizing time on it (on the H200, eight
shards each minimizing their own copy of five or six findings in about a minute left 13 of 29
saved cases at the size they were found). An earlier run's unminimized case is minimized again."""

from __future__ import annotations

import dataclasses
import datetime

import pytest

import kvfuzz.pipeline as pipeline_mod
from kvfuzz.campaign import CampaignConfig
from kvfuzz.confirm import Confirmation
from kvfuzz.corpus import DirectoryCorpus, environment_versions
from kvfuzz.engines.common import Found
from kvfuzz.findings import Finding
from kvfuzz.pipeline import FindingPipeline
from kvfuzz.strategies import random_cases

SIG_PARTS = ("mismatch", "num_kv_splits", "splits", "num_kv_splits", "all", "planted")


@pytest.fixture
def setting(tmp_path, monkeypatch):
    """(a pipeline over an empty corpus that confirms every finding, a finding, the corpus)."""
    store = DirectoryCorpus(tmp_path / "corpus")
    cfg = CampaignConfig(ops=["num_kv_splits"], target="sglang==0.5.14")
    pipe = FindingPipeline(cfg, None, None, "cpu", environment_versions(), store)
    monkeypatch.setattr(pipeline_mod, "confirm", lambda sc, fresh, tries: Confirmation(
        sc.finding.signature, tries, tries, seconds=0.1))
    case = random_cases("num_kv_splits", 0, 1, in_contract_only=True)[0]
    finding = Finding(*SIG_PARTS)
    return pipe, Found(finding, case, case), store


def _saved_by_another_process(pipe: FindingPipeline, f: Found, store: DirectoryCorpus, *, found_at: str,
                              minimized: bool):
    """The same finding's case, saved first by another writer (a shard, or an earlier run)."""
    sc = dataclasses.replace(pipe._saved_case(f, f.case), found_at=found_at, minimized=minimized)
    return store.save(sc).path


def _ago(seconds: float) -> str:
    t = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(seconds=seconds)
    return t.replace(microsecond=0).isoformat()


def test_a_case_another_shard_saved_during_this_run_is_not_minimized_here(setting, monkeypatch):
    pipe, f, store = setting
    path = _saved_by_another_process(pipe, f, store, found_at=_ago(1), minimized=False)
    assert pipe.add(f) == "known" and pipe.first_saved[f.finding.signature] == "kept"
    monkeypatch.setattr(pipeline_mod, "minimize", lambda *a, **k: pytest.fail("minimized a case held elsewhere"))
    found = {f.finding.signature: f}
    pipe.settle(found, until=None)
    assert found == {} and len(pipe.saved) == 1
    (s,) = pipe.saved
    assert s.path == path and not s.new and s.signatures == [f.finding.signature]


def test_an_earlier_runs_minimized_case_is_not_minimized_again(setting):
    pipe, f, store = setting
    _saved_by_another_process(pipe, f, store, found_at=_ago(3600), minimized=True)
    pipe.add(f)
    assert f.finding.signature in pipe.held_elsewhere


def test_an_earlier_runs_unminimized_case_is_minimized_by_this_process(setting):
    pipe, f, store = setting
    _saved_by_another_process(pipe, f, store, found_at=_ago(3600), minimized=False)
    pipe.add(f)
    assert pipe.first_saved[f.finding.signature] == "kept" and f.finding.signature not in pipe.held_elsewhere


def test_a_case_this_process_saved_first_is_its_own_to_minimize(setting):
    pipe, f, store = setting
    assert pipe.add(f) == "new" and pipe.held_elsewhere == {}
