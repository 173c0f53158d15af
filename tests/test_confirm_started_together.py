"""Confirmation's fresh workers are started together, so their imports overlap: a campaign's
confirmations cost about one process start, not one per try (on the H200 three tries one after
another stretched an op's fuzzing by about 50 s)."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from kvfuzz.campaign import CampaignConfig
from kvfuzz.pipeline import FindingPipeline
from kvfuzz.confirm import confirm
from kvfuzz.corpus import environment_versions
from kvfuzz.findings import Finding
from kvfuzz.judge import judge
from kvfuzz.strategies import random_cases
from kvfuzz.worker import WorkerExecutor


def test_fresh_many_starts_every_process_before_waiting_for_any(monkeypatch):
    spawned, waited = [], []

    class Proc:  # a started process, as far as fresh_many can tell
        def poll(self):
            return None

    ex = WorkerExecutor.__new__(WorkerExecutor)  # no real worker: only the spawning order matters
    ex.target_spec, ex.device, ex.timeout_s, ex.extra_env = "builtin", "cpu", 10.0, {}
    ex.standby, ex.use_standby, ex._standby_due = Proc(), True, False
    monkeypatch.setattr(WorkerExecutor, "_spawn", lambda self: spawned.append(time.monotonic()) or Proc())

    def made(self, *args, _proc=None, **kw):  # the constructor waits for its worker's hello
        waited.append(time.monotonic())
        self.proc = _proc

    monkeypatch.setattr(WorkerExecutor, "__init__", made)
    got = ex.fresh_many(3)
    assert len(got) == 3 and len(spawned) == 3  # two more tries and the next standby
    assert max(spawned) <= min(waited)  # all started before the first wait
    assert ex.standby is not None and all(g.proc is not None for g in got)


@pytest.mark.thorough  # seconds of processes and campaigns: CI's thorough stage
def test_a_campaign_confirmation_runs_in_as_many_fresh_workers_as_tries(device):
    """Through `executor.fresh`, as a campaign calls it: three new processes, each runs the case."""
    case = random_cases("num_kv_splits", 0, 1, in_contract_only=True)[0]
    planted = Finding("mismatch", "num_kv_splits", "splits", "num_kv_splits", "all", "planted")
    found = SimpleNamespace(finding=planted, first=case, case=case)
    cfg = CampaignConfig(ops=["num_kv_splits"], target="builtin")
    pipeline = FindingPipeline(cfg, None, None, device, environment_versions(), None)
    sc = pipeline._saved_case(found, case)
    executor = WorkerExecutor("builtin", device, standby=True)
    pids = []
    try:
        assert not judge(case, executor.run(case)).findings
        real_many = executor.fresh_many

        def many(n):
            got = real_many(n)
            pids.extend(g.proc.pid for g in got)
            return got

        executor.fresh_many = many
        c = confirm(sc, executor.fresh, 3)  # builtin does not show the planted finding
        assert (c.reproduced, c.tries) == (0, 3)
        assert len(set(pids)) == 3 and executor.proc.pid not in pids
    finally:
        executor.close()
