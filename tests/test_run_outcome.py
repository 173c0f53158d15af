"""Every op a run was asked for runs, or the run says it did not: the plan that shares
`--budget` and `--time-limit` among the ops (plan.py), each op's status in the reports, exit
codes (outcome.py), and a run stopped by SIGTERM or its time limit that still writes its
reports, cut short (stopping.py, scripts/nightly.sh)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import cases as hand
from kvfuzz import stopping
from kvfuzz.engines.base import OpRun
from kvfuzz.jobs import merge_reports
from kvfuzz.outcome import exit_code, not_run_ops, op_status
from kvfuzz.plan import MINIMIZE_SHARE, Plan, reserve_s
from kvfuzz.reports import junit_xml, markdown

ROOT = Path(__file__).resolve().parents[1]


# the plan -----------------------------------------------------------------------------------


def test_a_budget_is_shared_at_each_turn_and_what_an_op_leaves_goes_to_the_later_ones():
    p = Plan(["a", "b", "c"], budget_s=30.0)
    a = p.turn("a", now=0.0)
    assert a.budget_s == 10.0 and a.fuzz_end is None and a.first_by is None
    p.done("a", 4.0)  # ended early (its case count): 6 s go to b and c
    assert p.turn("b", now=5.0).budget_s == 13.0
    p.done("b", 40.0)  # ran over: charged to no one
    assert p.turn("c", now=50.0).budget_s == 13.0


def test_a_time_limit_shares_what_is_left_at_each_turn_start_up_included():
    limit, t0 = 45.0, 1000.0
    p = Plan(["a", "b", "c"], budget_s=1e6, limit_s=limit, started=t0)
    end = t0 + limit - reserve_s(limit)
    assert p.end == end
    # the workers took 10 s to start: the first op's share comes out of what is left, not of 45 s
    a = p.turn("a", now=t0 + 10)
    share = (end - (t0 + 10)) / 3
    assert a.op_end == pytest.approx(t0 + 10 + share)
    assert a.fuzz_end == pytest.approx(t0 + 10 + share * (1 - MINIMIZE_SHARE))
    assert a.budget_s == pytest.approx(share) and a.first_by == end
    p.done("a", 20.0)
    # `a` ran past its share: b and c share what is left, each still gets its turn
    b = p.turn("b", now=end - 6)
    assert b.op_end == pytest.approx(end - 3) and b.fuzz_end > end - 6
    p.done("b", 1.0)
    assert p.turn("c", now=end + 0.1) is None  # no time left: not run (and the report says so)


def test_the_reserve_for_closing_and_reports_is_bounded():
    assert reserve_s(45) == 3.0  # at least 3 s
    assert reserve_s(1800) == 90.0  # 5 %
    assert reserve_s(4) == 1.0  # at most a quarter of a tiny limit


def test_an_op_whose_turn_came_draws_its_first_case_however_small_its_share():
    now = time.monotonic()
    late = OpRun("a", budget_s=0.0, max_cases=10, until=now - 1, first_by=now + 60)
    assert late.in_time()  # no case yet, the run's end not reached
    late.stats.cases = 1
    assert not late.in_time()
    assert not OpRun("a", budget_s=0.0, max_cases=10, until=now - 1).in_time()  # no first_by: as before
    assert not OpRun("a", budget_s=0.0, max_cases=10, until=now - 1, first_by=now - 0.1).in_time()


# statuses, reports and exit codes ---------------------------------------------------------------


def test_op_status():
    assert op_status({"cases": 5}) == ("ran", None)
    assert op_status({"cases": 0}, "the time limit (45 s) left it no time") == (
        "not_run", "the time limit (45 s) left it no time")
    assert op_status({"cases": 0, "skipped": "no entry point"}) == ("skipped", "no entry point")
    assert op_status({"cases": 7}, cut="SIGTERM") == ("cut_short", "cut short by SIGTERM after 7 cases")


@pytest.mark.parametrize("kw, code", [
    (dict(failing=True, not_target=3, internal_errors=["x"], cut_short=True, not_run=["a"]), 1),
    (dict(failing=False, not_target=3, internal_errors=["x"], cut_short=True, not_run=["a"]), 2),
    (dict(failing=False, bad_input=True, internal_errors=["x"], cut_short=True), 2),
    (dict(failing=False, internal_errors=["x"], cut_short=True, not_run=["a"]), 4),
    (dict(failing=False, cut_short=True, not_run=["a"]), 130),
    (dict(failing=False, not_run=["a"]), 3),
    (dict(failing=False), 0),
])
def test_exit_code_precedence(kw, code):
    assert exit_code(**kw) == code


REPORT = {"target": "builtin", "seconds": 40.0, "findings": [], "flaky": [], "cases": 96, "cut_short": True,
          "interrupted": True, "cut_short_by": "SIGTERM", "ops": {
              "a": {"cases": 96, "seconds": 9.0, "status": "ran", "reason": None},
              "b": {"cases": 3, "seconds": 2.0, "status": "cut_short", "reason": "cut short by SIGTERM after 3 cases"},
              "c": {"cases": 0, "seconds": 0.0, "status": "not_run",
                    "reason": "the run was stopped by SIGTERM before its turn"},
              "d": {"cases": 0, "seconds": 0.0, "skipped": "no such entry point", "status": "skipped"}}}


def test_junit_fails_an_op_that_ran_no_case_and_tells_one_cut_short():
    suite = ET.fromstring(junit_xml(REPORT))
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    assert suite.get("failures") == "1" and suite.get("skipped") == "1"
    failure = cases["c"].find("failure")
    assert failure is not None and "ran no case: the run was stopped by SIGTERM" in failure.get("message")
    assert cases["a"].find("failure") is None and cases["b"].find("failure") is None
    assert "cut short by SIGTERM" in cases["b"].find("system-out").text
    assert cases["d"].find("skipped") is not None
    # an op with no case fails even in a report written without statuses
    old = {"target": "t", "findings": [], "ops": {"x": {"cases": 0}}}
    assert ET.fromstring(junit_xml(old)).get("failures") == "1"


def test_markdown_says_cut_short_and_which_op_ran_no_case():
    md = markdown(REPORT)
    assert "(cut short by SIGTERM)" in md
    assert "| c | **ran no case**: the run was stopped by SIGTERM before its turn |" in md
    assert "Cut short while running: b (cut short by SIGTERM after 3 cases)." in md


def test_jobs_merge_op_statuses():
    def shard(cases_b, status_b, cut=False):
        return {"target": "t", "seconds": 5.0, "cases": 4 + cases_b, "findings": [], "flaky": [], "interrupted": cut,
                "cut_short_by": "SIGTERM" if cut else None, "ops": {
                    "a": {"cases": 4, "status": "ran"},
                    "b": {"cases": cases_b, "status": status_b,
                          "reason": "the time limit (45 s) left it no time" if status_b == "not_run" else None}}}
    m = merge_reports([shard(0, "not_run"), shard(2, "ran")], 2)
    assert m["ops"]["b"]["status"] == "ran" and not m["cut_short"] and not_run_ops(m) == []
    m = merge_reports([shard(0, "not_run"), shard(0, "not_run")], 2)
    assert m["ops"]["b"]["status"] == "not_run" and not_run_ops(m) == ["b"]
    assert m["ops"]["b"]["reason"] == "the time limit (45 s) left it no time"
    m = merge_reports([shard(0, "not_run"), shard(1, "cut_short", cut=True)], 2)
    assert m["ops"]["b"]["status"] == "cut_short" and m["cut_short"] and m["cut_short_by"] == "SIGTERM"


def test_only_the_first_stop_signal_interrupts_and_signals_wait_while_reports_are_written():
    with stopping.stop_on_signals():
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
        assert stopping.stopped_by() == "SIGTERM"
        assert stopping.close_wait_s() == stopping.STOPPING_CLOSE_WAIT_S
        os.kill(os.getpid(), signal.SIGTERM)  # a second one (to the process group): noted only
        time.sleep(0.05)
    with stopping.stop_on_signals():
        assert stopping.stopped_by() is None
        with stopping.deferred():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)
        assert stopping.stopped_by() == "SIGTERM"


def test_a_run_stopped_during_start_up_still_writes_its_report(tmp_path, monkeypatch):
    """Stopped before any worker answered (SIGTERM while torch is imported): every op is
    reported not run, the report says cut short."""
    from kvfuzz import campaign

    def stopped(cfg):
        stopping.note("SIGTERM")
        raise KeyboardInterrupt

    monkeypatch.setattr(campaign, "_start", stopped)
    monkeypatch.setattr(stopping, "_why", [])
    cfg = campaign.CampaignConfig(ops=["num_kv_splits", "decode_metadata"], device="cpu", budget_s=5,
                                  report=tmp_path / "r.json")
    r = campaign.run_campaign(cfg)
    doc = json.loads((tmp_path / "r.json").read_text())
    assert r.interrupted and doc["cut_short"] and doc["cut_short_by"] == "SIGTERM"
    assert {op: s["status"] for op, s in doc["ops"].items()} == {"num_kv_splits": "not_run",
                                                                   "decode_metadata": "not_run"}
    assert doc["ops"]["decode_metadata"]["reason"] == "the run was stopped by SIGTERM before its turn"


# whole runs ----------------------------------------------------------------------------------


def _kvfuzz(*args, **kw):
    return subprocess.Popen([sys.executable, "-m", "kvfuzz.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kw)


def _wait_for(path: Path, proc, timeout=300):
    deadline = time.monotonic() + timeout
    while not path.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert path.exists(), proc.communicate()


@pytest.mark.thorough  # seconds of processes and campaigns: CI's thorough stage
def test_sigterm_writes_every_report_cut_short(tmp_path):
    """SIGTERM once the first op is fuzzing: JSON, JUnit and Markdown written, cut short, the op
    that ran cut short, the one never reached a JUnit failure; exit 130."""
    r, j, md, camp = tmp_path / "r.json", tmp_path / "j.xml", tmp_path / "r.md", tmp_path / "camp"
    proc = _kvfuzz("fuzz", "--device", "cpu", "--op", "num_kv_splits", "--op", "decode_metadata",
                   "--budget", "600", "--campaign", str(camp), "--report", str(r), "--junit", str(j),
                   "--markdown", str(md))
    try:
        _wait_for(camp / "state-1-of-1.json", proc)  # written at the first case
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, out + err
    assert "Traceback" not in err, err
    doc = json.loads(r.read_text())
    assert doc["cut_short"] is True and doc["cut_short_by"] == "SIGTERM"
    assert doc["ops"]["num_kv_splits"]["status"] == "cut_short"
    assert doc["ops"]["decode_metadata"]["status"] == "not_run"
    assert "decode_metadata: NOT RUN: the run was stopped by SIGTERM before its turn" in out
    suite = ET.parse(j).getroot()
    failed = {c.get("name") for c in suite.iter("testcase") if c.find("failure") is not None}
    assert failed == {"decode_metadata"}
    assert "(cut short by SIGTERM)" in md.read_text()


@pytest.mark.slow
def test_a_short_time_limit_runs_every_op_or_says_it_did_not(tmp_path):
    """Five ops in 30 s on the CPU, start-up included: each op runs at least one case, or is
    reported not run (a console line, a JUnit failure, exit 3); the run ends near its limit."""
    ops = ["decode_metadata", "swa_spec_page_table", "num_kv_splits", "q8kv8_topk_length", "pa_page_table"]
    r, j = tmp_path / "r.json", tmp_path / "j.xml"
    t = time.monotonic()
    proc = _kvfuzz("fuzz", "--device", "cpu", *[a for op in ops for a in ("--op", op)], "--budget", "600",
                   "--time-limit", "30", "--report", str(r), "--junit", str(j))
    out, err = proc.communicate(timeout=300)
    took = time.monotonic() - t
    doc = json.loads(r.read_text())
    suite = ET.parse(j).getroot()
    failed = {c.get("name") for c in suite.iter("testcase") if c.find("failure") is not None}
    not_run = {op for op, s in doc["ops"].items() if s["status"] == "not_run"}
    assert set(doc["ops"]) == set(ops)
    for op in ops:
        assert doc["ops"][op]["cases"] >= 1 or op in not_run, doc["ops"][op]
    assert failed == not_run
    for op in not_run:
        assert f"{op}: NOT RUN: " in out
    # stopped by the limit: cut short (130), which comes before an op not run (3; docs/cli.md)
    assert proc.returncode == (130 if doc["cut_short"] else 3 if not_run else 0), out + err
    assert doc["cut_short"] == ("(cut short by the time limit (30 s))" in out)
    # a bound that tells a planned run from an unplanned one (600 s of budget), not host speed
    assert took < 2 * 30, took


@pytest.mark.slow
def test_nightly_stopped_by_sigterm_writes_its_reports_and_summary(tmp_path):
    """SIGTERM to scripts/nightly.sh mid-target: the running target writes its reports cut
    short, the next target is listed as not run, the summary is written, exit 130."""
    out, state = tmp_path / "out", tmp_path / "state"
    env = dict(os.environ, TARGETS="builtin sglang==0.5.14", BUDGET="600", DEVICE="cpu", STATE=str(state),
               CORPUS=str(tmp_path / "corpus"), FUZZ_ARGS="--op num_kv_splits --op decode_metadata")
    proc = subprocess.Popen(["bash", str(ROOT / "scripts" / "nightly.sh"), str(out)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    try:
        _wait_for(state / "builtin" / "state-1-of-1.json", proc)
        proc.send_signal(signal.SIGTERM)  # to the script only: it passes it on
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stdout + stderr
    doc = json.loads((out / "builtin.json").read_text())
    assert doc["cut_short"] and doc["cut_short_by"] == "SIGTERM"
    assert (out / "builtin.xml").is_file() and (out / "builtin.md").is_file()
    summary = (out / "summary.txt").read_text()
    assert "builtin: exit 130" in summary and "cut short by SIGTERM" in summary
    assert "sglang==0.5.14: not run (the nightly was stopped by SIGTERM)" in summary


def test_the_batched_engine_runs_one_batch_of_an_op_whose_share_is_spent(device):
    """Under a time limit an op whose turn came draws its first batch even with its share spent
    (start-up, a slow op before it), and no second one beside it; without `first_by` it draws none.
    On the CPU that batch is its stint's probe, one case (engines/case_cost.py)."""
    from kvfuzz.engines.base import EngineOptions, run_engine
    from kvfuzz.engines.batch_engine import BatchEngine
    from kvfuzz.worker import InProcessExecutor

    executor = InProcessExecutor("builtin", device)
    options = EngineOptions(device=device, batch=8, rerun_every=0)
    now = time.monotonic()
    s, _ = run_engine(BatchEngine("num_kv_splits", executor, options), budget_s=0.0, max_cases=1000,
                      until=now - 1, first_by=now + 600)
    assert s.cases == (1 if device == "cpu" else 8) and s.batches == 1
    s, _ = run_engine(BatchEngine("num_kv_splits", executor, options), budget_s=0.0, max_cases=1000,
                      until=time.monotonic() - 1)
    assert s.cases == 0


def test_shards_that_all_failed_before_their_reports_are_not_called_cut_short():
    """Every shard refused (bad usage, a refused environment): the merged report says no shard
    wrote a report; it claims no interrupt that did not happen."""
    from kvfuzz.jobs import merge_reports

    merged = merge_reports([], 4)
    assert merged["cut_short"] is False and merged["interrupted"] is False
    assert merged["error"] == "no shard wrote a report" and merged["cases"] == 0


def test_an_op_that_has_found_nothing_draws_to_the_end_of_its_share():
    from kvfuzz.engines.common import Found

    now = time.monotonic()
    run = OpRun("a", budget_s=100.0, max_cases=10, until=now - 1, until_clean=now + 60)
    assert run.in_time() and run.until == now + 60  # nothing to minimize: the whole share draws
    case = hand.decode(ps=1, delta=3)
    run.found["x"] = Found(None, case, case)  # a finding: the rest of the share minimizes it
    assert run.until == now - 1 and not run.in_time()
    # a finding that needs no minimizing (shared with the baseline, flaky) leaves the share drawing
    shared = OpRun("a", budget_s=100.0, max_cases=10, until=now - 1, until_clean=now + 60, to_minimize=lambda: False)
    shared.found["x"] = Found(None, case, case)
    assert shared.until == now + 60 and shared.in_time()
