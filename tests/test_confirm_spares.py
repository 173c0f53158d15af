"""From a campaign's first confirmation on, `confirm_tries` fresh workers are kept started and
idle (spares), so the next confirmation costs running its cases, not a process start. On the
H200 a plain 30 s run of a release's draft_extend_metadata confirmed 14 findings, each in
fresh processes started for it, and ran past 112 s."""

from __future__ import annotations

import os
import select
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from kvfuzz import worker
from kvfuzz.campaign import CampaignConfig, run_campaign
from kvfuzz.confirm import confirm
from kvfuzz.corpus import environment_versions
from kvfuzz.engines.base import OpRun
from kvfuzz.findings import Finding
from kvfuzz.pipeline import FindingPipeline
from kvfuzz.strategies import random_cases
from kvfuzz.worker import WorkerExecutor

from test_baseline_timing import regressed_seed

READY_WAIT_S = 120.0  # a spare's imports on a busy two-core host


def alive(pid: int) -> bool:
    """Whether `pid` is a running kvfuzz worker (not a zombie, not a reused pid)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, IndexError):
        return False
    return state != "Z" and b"kvfuzz.worker" in cmdline


def wait_ready(ex: WorkerExecutor) -> None:
    """Until every spare has said hello (its reply waits in its pipe, unread)."""
    pending = list(ex._spares)
    assert pending
    deadline = time.monotonic() + READY_WAIT_S
    while pending and time.monotonic() < deadline:
        ready = select.select([p.stdout for p in pending], [], [], 1.0)[0]
        pending = [p for p in pending if p.stdout not in ready]
    assert not pending, "spares never became ready"


def counting_spawns(monkeypatch) -> list[int]:
    pids: list[int] = []
    real = worker._spawn_worker

    def spawn(*args, **kw):
        proc = real(*args, **kw)
        pids.append(proc.pid)
        return proc

    monkeypatch.setattr(worker, "_spawn_worker", spawn)
    return pids


def planted(op: str):
    case = random_cases(op, 0, 1, in_contract_only=True)[0]
    finding = Finding("mismatch", op, "planted", "planted", "all", "planted")
    found = SimpleNamespace(finding=finding, first=case, case=case)
    pipeline = FindingPipeline(CampaignConfig(ops=[op]), None, None, "cpu", environment_versions(), None)
    return pipeline._saved_case(found, case), case


@pytest.mark.thorough  # seconds of processes and campaigns: CI's thorough stage
@pytest.mark.interpreter
def test_a_confirmation_after_the_first_takes_spares_and_starts_nothing(monkeypatch):
    sc, case = planted("num_kv_splits")
    pids = counting_spawns(monkeypatch)
    ex = WorkerExecutor("builtin", "cpu", standby=True)
    try:
        ex.run(case)  # the standby starts once the worker has answered
        assert not ex.spare_pids  # nothing before the first confirmation
        t = time.monotonic()
        first = confirm(sc, ex.fresh, 3)
        first_s = time.monotonic() - t
        assert (first.reproduced, first.tries) == (0, 3)
        ex.run(case)  # the worker's next answer restarts the spares
        spares = ex.spare_pids
        assert len(spares) == 3 and ex.proc.pid not in spares
        wait_ready(ex)
        before = len(pids)
        t = time.monotonic()
        again = confirm(sc, ex.fresh, 3)
        again_s = time.monotonic() - t
        assert (again.reproduced, again.tries) == (0, 3)
        assert len(pids) == before  # no process started on the confirmation's path
        assert not any(alive(p) for p in spares)  # the spares ran it, and were killed after
        assert again_s < first_s / 3, (again_s, first_s)
        ex.run(case)
        assert len(ex.spare_pids) == 3
    finally:
        ex.close()
    assert not any(alive(p) for p in pids)  # close kills the spares and the standby


def test_a_batchs_findings_go_to_the_sink_together():
    got = []
    run = OpRun("num_kv_splits", budget_s=10, max_cases=10, sink=lambda f: got.append([f]),
                sink_many=lambda fs: got.append(list(fs)))
    case = random_cases("num_kv_splits", 0, 1)[0]
    one, two = (Finding("mismatch", "num_kv_splits", t, t, "all", "m") for t in ("a", "b"))
    with run.gathering():
        run.add(one, case)
        assert not got  # held until the batch is judged
        run.add(two, case)
    assert [[f.finding.signature for f in fs] for fs in got] == [[one.signature, two.signature]]
    run.add(Finding("mismatch", "num_kv_splits", "c", "c", "all", "m"), case)
    assert len(got) == 2 and len(got[1]) == 1  # outside a batch: at once
    cut = Finding("mismatch", "num_kv_splits", "d", "d", "all", "m")
    with pytest.raises(KeyboardInterrupt):
        with run.gathering():
            run.add(cut, case)
            raise KeyboardInterrupt
    assert len(got) == 2 and cut.signature in run.found  # recorded, not confirmed on the way out


BUDGET_S = 12.0


@pytest.mark.slow
@pytest.mark.interpreter
def test_a_campaigns_later_confirmations_start_no_process_and_leave_none(seed_path, tmp_path, monkeypatch):
    """A seeded defect with several findings: only the first confirmation starts processes;
    the fuzzing ends near its budget plus the confirmations; nothing is left running."""
    pids = counting_spawns(monkeypatch)
    confirmations = []  # (seconds, findings, processes started to give it fresh workers)
    real, real_many = FindingPipeline._confirm, WorkerExecutor.fresh_many
    started = [0]

    def many(self, n):  # what a worker lost to a crash case costs after is not counted
        before = len(pids)
        try:
            return real_many(self, n)
        finally:
            started[0] += len(pids) - before

    def timed(self, cases):
        t, started[0] = time.monotonic(), 0
        try:
            return real(self, cases)
        finally:
            confirmations.append((time.monotonic() - t, len(cases), started[0]))

    monkeypatch.setattr(FindingPipeline, "_confirm", timed)
    monkeypatch.setattr(WorkerExecutor, "fresh_many", many)
    cfg = CampaignConfig(ops=["decode_metadata"], target=str(regressed_seed(seed_path, tmp_path)), device="cpu",
                         budget_s=BUDGET_S, minimize_budget_s=1, seed=1, sites=False,
                         corpus=tmp_path / "corpus", report=tmp_path / "r.json")
    r = run_campaign(cfg)
    assert len(confirmations) >= 3, confirmations
    (first_s, _, first_started), later = confirmations[0], confirmations[1:]
    assert first_started == 3  # two more tries and the next standby; the standby was one try
    assert all(started == 0 for _, _, started in later), confirmations
    assert min(s for s, _, _ in later) < first_s / 2, confirmations
    s = r.stats[0]
    assert s.confirm_batches == len(confirmations)
    assert s.confirm_seconds == pytest.approx(sum(c[0] for c in confirmations), abs=0.05)
    op = r.report()["ops"]["decode_metadata"]
    assert op["confirm_batches"] == s.confirm_batches and op["confirm_seconds"] == round(s.confirm_seconds, 2)
    # the op fuzzed its budget, moved on by what confirming took, and no further
    assert s.seconds <= BUDGET_S + s.confirm_seconds + 3.0, (s.seconds, confirmations)
    assert r.saved and all(x.confirmation and x.confirmation.confirmed for x in r.saved)
    assert not [p for p in pids if alive(p)]
    assert os.getpid() not in pids


def worker_children(pid: int) -> set[int]:
    """The live kvfuzz workers whose parent is `pid` (/proc: psutil is not a dependency)."""
    out = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            if ppid == pid and alive(int(entry.name)):
                out.add(int(entry.name))
    return out


@pytest.mark.slow
def test_sigterm_to_the_run_alone_kills_its_spares(tmp_path):
    """SIGTERM to the fuzzing process only (its workers not signalled) once spares are up: the
    run stops, and every worker it started, spares included, is gone."""
    import signal

    from test_cli import _fuzz_until_shrinking, _no_process_left

    proc, _, _ = _fuzz_until_shrinking(tmp_path, "SIG_IGN")
    seen: set[int] = set()
    try:
        deadline = time.monotonic() + READY_WAIT_S
        # the worker, its standby and three spares (restarted once the worker answered again)
        while len(worker_children(proc.pid)) < 5 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        seen = worker_children(proc.pid)
        assert len(seen) >= 5 and proc.poll() is None, seen
        os.kill(proc.pid, signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert "Traceback" not in err, err
    assert not [p for p in seen if alive(p)]
    _no_process_left(proc)


def test_findings_pile_up_while_spares_start_and_are_confirmed_together(monkeypatch, tmp_path):
    """While the spares are starting the fuzzing goes on: the findings wait (PENDING) and the
    next one that finds the spares ready is confirmed with them; the op's end confirms the rest;
    an interrupt saves those still waiting, unconfirmed."""
    import cases as hand
    from kvfuzz.confirm import Confirmation
    from kvfuzz.corpus import DirectoryCorpus
    from kvfuzz.engines.common import Found
    from kvfuzz.pipeline import PENDING

    batches = []

    def fake(saved, fresh, tries):
        batches.append([sc.finding.signature for sc in saved])
        return [Confirmation(sc.finding.signature, tries, tries, 0.1) for sc in saved]

    monkeypatch.setattr("kvfuzz.pipeline.confirm_many", fake)
    monkeypatch.setattr("kvfuzz.pipeline.confirm", lambda sc, fresh, tries: fake([sc], fresh, tries)[0])
    ready = [False]
    owner = SimpleNamespace(spares_ready=lambda n: ready[0])
    owner.fresh = lambda: None
    fresh = SimpleNamespace(__self__=owner)  # what pipeline asks: the executor behind `fresh`
    pl = FindingPipeline(CampaignConfig(ops=["decode_metadata"]), None, fresh, "cpu", {},
                         DirectoryCorpus(tmp_path / "corpus"))
    case = hand.decode(ps=1, delta=3)
    a, b, c, d = (Found(Finding("mismatch", "decode_metadata", "general", t, "all", "m"), case, case)
                  for t in ("page_table", "cu_seqlens_k", "cache_seqlens", "swa_page_table"))
    assert pl.add_many([a], may_wait=True) == [PENDING] and not batches
    assert pl.waiting({a.finding.signature: a})  # the op keeps time to minimize it
    ready[0] = True
    assert pl.add_many([b], may_wait=True) == ["new", "new"]  # b's, then a's, piled before it
    assert batches == [[b.finding.signature, a.finding.signature]]
    ready[0] = False
    assert pl.add_many([c], may_wait=True) == [PENDING]
    assert pl.confirm_piled() == ["new"] and batches[-1] == [c.finding.signature]
    assert pl.confirm_piled() == [] and len(batches) == 2
    assert pl.add_many([d], may_wait=True) == [PENDING]
    pl.save_unminimized({})
    (x,) = [x for x in pl.saved if x.found is d]
    assert x.unconfirmed and "cut short" in x.unconfirmed_why and x.path is not None
    assert len(batches) == 2  # nothing ran on the way out
