"""`--baseline`: each case on the target and on a baseline, each judged by the oracle; a
regression (baseline right, target wrong), a fix, or a change is a finding of its own, so a
second defect on an output where the target already has one is not hidden by the first."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import cases as hand
from kvfuzz.baseline import Side, compare, pair
from kvfuzz.check import Checker
from kvfuzz.cli import fails_the_run, main
from kvfuzz.errors import BadInput
from kvfuzz.findings import Finding, defect_kind, runs_to_show
from kvfuzz.judge import Verdict
from kvfuzz.worker import InProcessExecutor

MUTANT = str(Path(__file__).resolve().parent / "fixtures" / "mutant_kernels.py")
MODIFIED = "decode_metadata:ps1:input_modified:seq_lens:elements"  # the mutant's planted in-place write


def paired(target: str, baseline: str, device: str):
    return pair(InProcessExecutor(target, device), None, target, baseline, device, 60.0, isolate=False)


def signatures(target: str, baseline: str, device: str, case) -> set[str]:
    ex = paired(target, baseline, device)
    try:
        return set(Checker(ex, case.op).check(case).signatures())
    finally:
        ex.close()


def test_the_target_wrong_where_the_baseline_is_right_is_a_regression(device):
    sigs = signatures(MUTANT, "builtin", device, hand.decode(ps=1, delta=3))
    assert sigs == {MODIFIED, "decode_metadata:ps1:regression:seq_lens:input_modified.elements"}


def test_the_target_right_where_the_baseline_is_wrong_is_a_fix(device):
    sigs = signatures("builtin", MUTANT, device, hand.decode(ps=1, delta=3))
    assert sigs == {"decode_metadata:ps1:fixed:seq_lens:input_modified.elements"}


@pytest.mark.parametrize("spec", ["builtin", MUTANT])
def test_a_target_against_itself_shows_no_class(spec, device):
    # (the mutant's ps=2, B>1 cases copy a random row: two runs of it differ, so not those)
    for case in (hand.decode(ps=1, delta=3), hand.decode(ps=16, B=2), hand.decode(ps=2, B=1)):
        sigs = signatures(spec, spec, device, case)
        assert not [s for s in sigs if s.split(":")[2] in ("regression", "fixed", "changed")], sigs


def _f(kind: str, tensor: str = "page_table", where: str = "all") -> Finding:
    return Finding(kind, "decode_metadata", "general", tensor, where, f"{kind} message")


def _v(*findings: Finding, not_target: str | None = None) -> Verdict:
    return Verdict("in_contract", [], list(findings), not_target=not_target)


ALL = frozenset({"run", "memory", "reads", "outputs"})


SHAPE = (4, 4)  # page_table's, in the sides built by hand


def _side(*wrong: tuple[Finding, dict], judged=ALL, not_target: str | None = None) -> Side:
    """A side built by hand: each finding with the units it covers, {index: value} of
    page_table's cells, or {("memory", byte): value} and {("run", kind): value}."""
    units = {}
    for f, cells in wrong:
        places: dict = {}
        for u, v in cells.items():
            if u[0] == "memory":
                place, i = ("memory",), u[1]
            elif isinstance(u[0], str):
                place, i = u, 0
            else:
                place, i = ("outputs", f.tensor), int(np.ravel_multi_index(u, SHAPE))
            places.setdefault(place, []).append((i, v))
        units[f.signature] = {
            place: (np.array([i for i, _ in items], np.int64),
                    np.array([v for _, v in items], dtype=object if place[0] == "run" else np.int64),
                    SHAPE if place[0] == "outputs" else None)
            for place, items in ((pl, sorted(it)) for pl, it in places.items())}
    return Side(_v(*(f for f, _ in wrong), not_target=not_target), units, judged)


def _classes(target: Side, base: Side) -> tuple[list[str], dict[str, str]]:
    found, marks = compare(target, base, "B")
    return [f.signature for f in found], marks


MISMATCH = "decode_metadata:general:mismatch:page_table:partial"


def test_a_cell_the_baseline_gets_right_is_a_regression_though_it_fails_other_cells():
    """The issue's case: the baseline fails some cells of the case, the target those same ones
    the same way and one more; one signature on both sides, still a regression (per case it
    was nothing, or `changed`)."""
    wrong = _f("mismatch", where="partial")
    found, marks = compare(_side((wrong, {(0, 1): 5, (0, 2): 6, (1, 0): 9})), _side((wrong, {(0, 1): 5, (0, 2): 6})),
                           "B")
    assert [f.signature for f in found] == ["decode_metadata:general:regression:page_table:mismatch.partial"]
    assert marks == {MISMATCH: "regression"}
    assert "1 cell the baseline B gets right; 2 wrong on both the same way" in found[0].message
    assert found[0].cells == ({"unit": "outputs", "tensor": "page_table", "index": [1, 0], "target": 9,
                               "baseline": None},)


def test_cells_wrong_on_both_the_same_way_are_shared_and_differently_changed():
    wrong = _f("mismatch", where="partial")
    assert _classes(_side((wrong, {(0, 1): 5})), _side((wrong, {(0, 1): 5}))) == ([], {MISMATCH: "shared"})
    # the target's finding is partial, the baseline's all: another signature, the same wrong cell
    assert _classes(_side((wrong, {(0, 1): 5})), _side((_f("mismatch"), {(0, 1): 5, (0, 2): 7})))[1] == \
        {MISMATCH: "shared"}
    found, marks = _classes(_side((wrong, {(0, 1): 5, (0, 2): 3})), _side((wrong, {(0, 1): 5, (0, 2): 7})))
    assert found == ["decode_metadata:general:changed:page_table:mismatch.partial"] and marks == {MISMATCH: "changed"}
    # a regression outranks a change on the same finding
    found, _ = _classes(_side((wrong, {(0, 1): 4, (0, 2): 3})), _side((wrong, {(0, 1): 5})))
    assert found == ["decode_metadata:general:regression:page_table:mismatch.partial"]


def test_a_cell_right_where_the_baseline_was_wrong_is_fixed():
    wrong = _f("mismatch", where="partial")
    found, marks = _classes(_side((wrong, {(0, 1): 5})), _side((wrong, {(0, 1): 5, (0, 2): 7})))
    assert found == ["decode_metadata:general:fixed:page_table:mismatch.partial"] and marks == {MISMATCH: "shared"}
    assert _classes(_side(), _side((wrong, {(0, 1): 5})))[0] == \
        ["decode_metadata:general:fixed:page_table:mismatch.partial"]


def test_bytes_written_out_of_bounds_are_classed_byte_by_byte():
    """A wild write the baseline has too, at more bytes on the target: a regression, never a
    new ordinary signature with no class."""
    oob = _f("out_of_bounds_write", where="after")
    sig = "decode_metadata:general:out_of_bounds_write:page_table:after"
    found, marks = _classes(_side((oob, {("memory", 100): 1, ("memory", 101): 2})), _side((oob, {("memory", 100): 1})))
    assert found == ["decode_metadata:general:regression:page_table:out_of_bounds_write.after"] and \
        marks == {sig: "regression"}
    assert _classes(_side((oob, {("memory", 100): 1})), _side((oob, {("memory", 100): 1}))) == ([], {sig: "shared"})
    assert _classes(_side((oob, {("memory", 100): 3})), _side((oob, {("memory", 100): 1})))[1] == {sig: "changed"}


def test_runs_that_judge_nothing_there_are_not_right_there():
    """A baseline whose run was lost judged no cell: the target's wrong cells are a change, not a
    regression; the target's crash where the baseline ran is a regression (the baseline's wrong
    cells are not fixed there: the target judged none), and a crash on both, of another kind, a
    change."""
    wrong, crash = _f("mismatch"), _f("crash", "-", "SIGSEGV")
    lost = _side((crash, {("run", "crash"): "SIGSEGV"}), judged=frozenset({"run"}))
    found, marks = _classes(_side((wrong, {(0, 1): 5})), lost)
    # the cells a change; the crash the target does not have, fixed
    assert found == ["decode_metadata:general:changed:page_table:mismatch.all",
                     "decode_metadata:general:fixed:-:crash.SIGSEGV"]
    found, _ = _classes(lost, _side((wrong, {(0, 1): 5})))
    assert found == ["decode_metadata:general:regression:-:crash.SIGSEGV"]  # the baseline's cells: not judged here
    timeout = _side((_f("crash", "-", "timeout"), {("run", "crash"): "timeout"}), judged=frozenset({"run"}))
    assert _classes(lost, timeout)[0] == ["decode_metadata:general:changed:-:crash.SIGSEGV"]
    assert _classes(lost, lost) == ([], {"decode_metadata:general:crash:-:SIGSEGV": "shared"})


def test_what_is_never_compared():
    wrong = _f("mismatch")
    # kvfuzz's own failures and its oracles' disagreements compare nothing
    assert compare(_side((wrong, {(0, 1): 5})), _side(not_target="no worker"), "B") == ([], {})
    assert compare(_side((_f("oracle_disagreement"), {})), _side(), "B")[0] == []
    # a race shows on some runs only: one side showing it says nothing about a change
    race = _f("nondeterministic", where="rerun")
    assert compare(_side((race, {})), _side(), "B")[0] == [] and compare(_side(), _side((race, {})), "B")[0] == []


def test_every_compared_target_finding_is_marked_with_its_class(device):
    """with_baseline on a real run: the mutant's in-place write, which builtin does not make,
    is marked a regression; the class finding stands beside it."""
    ex = paired(MUTANT, "builtin", device)
    try:
        verdict = Checker(ex, "decode_metadata").check(hand.decode(ps=1, delta=3))
    finally:
        ex.close()
    marks = {f.signature: f.against for f in verdict.findings}
    assert marks[MODIFIED] == "regression"
    regression = next(f for f in verdict.findings if f.kind == "regression")
    assert regression.cells and all(c["unit"] == "memory" and c["baseline"] is None for c in regression.cells)


def test_a_class_keeps_the_runs_and_strictness_of_the_defect_it_stands_on():
    sig = "decode_metadata:ps1:regression:req_to_token:out_of_bounds_read.after"
    assert defect_kind(sig) == "out_of_bounds_read" and runs_to_show(sig) == 2
    assert runs_to_show("decode_metadata:ps1:regression:seq_lens:input_modified.elements") == 1


def test_against_a_baseline_only_regressions_and_crashes_fail_the_run():
    sigs = ["op:p:fixed:t:mismatch.all", "op:p:changed:t:mismatch.all", "op:p:mismatch:t:all",
            "op:p:crash:-:cuda_fault",  # a crash the baseline shares (no class): not the change's
            "op:p:regression:t:mismatch.all", "op:p:regression:-:crash.error", "op:p:changed:-:crash.SIGSEGV"]
    assert fails_the_run(sigs, baseline=True) == sigs[4:]
    assert fails_the_run(sigs, baseline=False) == sigs


def test_a_baseline_that_does_not_load_is_one_line_and_exit_2(capsys, tmp_path):
    assert main(["fuzz", "--target", "builtin", "--baseline", str(tmp_path / "nope.py"), "--budget", "1",
                 "--op", "num_kv_splits", "--in-process"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--baseline" in err[0] and "nope.py" in err[0], err


def test_baseline_and_cross_check_together_are_refused(capsys):
    assert main(["fuzz", "--baseline", "builtin", "--cross-check", "cpu", "--device", "cpu", "--budget", "1"]) == 2
    assert "--baseline and --cross-check do not go together" in capsys.readouterr().err


@pytest.mark.slow  # CI's slow stage runs it (.ci/run)
def test_a_saved_regression_replays_beside_its_baseline(tmp_path, device, capsys):
    from kvfuzz.corpus import SavedCase, write_case_dir
    from kvfuzz.judge import judge

    regression = "decode_metadata:ps1:regression:seq_lens:input_modified.elements"
    case = hand.decode(ps=1, delta=3).with_meta(baseline="builtin")
    ex = paired(MUTANT, "builtin", device)
    finding = next(f for f in Checker(ex, case.op).check(case).findings if f.signature == regression)
    ex.close()
    (tmp_path / "case").mkdir()
    write_case_dir(SavedCase(case=case, finding=finding, target=MUTANT, device=device, versions={}, origin="hand",
                             expected="xfail", reason="a regression against builtin"), tmp_path / "case")
    assert main(["replay", str(tmp_path / "case"), "--device", device, "--in-process"]) == 1
    assert regression in capsys.readouterr().out
    # against the baseline itself there is nothing to compare: its own verdict (clean)
    assert main(["replay", str(tmp_path / "case"), "--device", device, "--in-process", "--target", "builtin"]) == 0
    # the repro script shows the defect on the target and passes on the baseline's kernels
    import subprocess
    import sys

    script = tmp_path / "repro.py"
    assert main(["replay", str(tmp_path / "case"), "--device", device, "--in-process",
                 "--emit-repro", str(script)]) == 1
    kernels = Path(__file__).resolve().parent.parent / "kvfuzz" / "kernels"
    runs = {k: subprocess.run([sys.executable, str(script), path, "--device", device], capture_output=True, text=True)
            for k, path in (("target", MUTANT), ("baseline", str(kernels)))}
    assert runs["target"].returncode == 1 and "input_modified" in runs["target"].stdout, runs["target"].stdout
    assert runs["baseline"].returncode == 0, runs["baseline"].stdout + runs["baseline"].stderr


def test_reports_list_regressions_fixes_and_changes_apart(tmp_path):
    import xml.etree.ElementTree as ET

    from kvfuzz.reports import against_baseline, junit_xml, markdown

    findings = [
        {"op": "num_kv_splits", "kind": "mismatch", "signature": "num_kv_splits:splits:mismatch:num_kv_splits:all",
         "signatures": ["num_kv_splits:splits:mismatch:num_kv_splits:all",
                        "num_kv_splits:splits:regression:num_kv_splits:mismatch.all"],
         "message": "m", "case": "c/1", "new": True, "contract": "in contract"},
        {"op": "num_kv_splits", "kind": "fixed", "signature": "num_kv_splits:splits:fixed:num_kv_splits:mismatch.partial",
         "message": "m", "case": "c/2", "new": True, "contract": "in contract"},
    ]
    classes = against_baseline(findings)
    assert [e["signature"] for e in classes["regression"]] == ["num_kv_splits:splits:regression:num_kv_splits:mismatch.all"]
    assert classes["regression"][0]["finding"] == "num_kv_splits:splits:mismatch:num_kv_splits:all"
    assert len(classes["fixed"]) == 1 and classes["changed"] == []
    report = {"target": "T", "baseline": "B", "ops": {"num_kv_splits": {"cases": 10, "seconds": 1.0}},
              "findings": findings, "flaky": [], "cases": 10, "seconds": 1.0}
    suite = ET.fromstring(junit_xml(report))
    tests = {c.get("name"): c for c in suite.iter("testcase")}
    assert tests["regression"].find("failure") is not None and tests["fixed"].find("failure") is None
    assert "c/2" in tests["fixed"].find("system-out").text and tests["changed"].find("failure") is None
    text = markdown(report, [])
    assert "## Against the baseline B" in text and "1 regressions, 1 fixed, 0 changed." in text
    assert text.index("### Regressions") < text.index("### Fixed") < text.index("## Findings")
    # --jobs: the merged report keeps the baseline and lists the classes of every shard
    from kvfuzz.jobs import merge_reports

    shard = dict(report, flaky=[], not_target=0, interrupted=False, notes=[], seed=0, versions={})
    merged = merge_reports([dict(shard, findings=findings[:1]), dict(shard, findings=findings[1:])], 2)
    assert merged["baseline"] == "B" and merged["against_baseline"] == classes


REGRESSION = "num_kv_splits:splits:regression:num_kv_splits:mismatch.all"


@pytest.mark.slow
def test_a_regression_on_an_output_the_release_already_gets_wrong_is_found(seed_path, tmp_path, device):
    """A one-line regression injected into the seed's num_kv_splits, whose output the seed
    already gets wrong (zero lengths): ordinary signatures alone cannot tell it from the
    release's own defect; against the release it is a regression, and a new one. (A target
    against itself: test_a_target_against_itself_shows_no_class.)"""
    from kvfuzz.campaign import CampaignConfig, run_campaign

    source = seed_path.read_text()
    assert "if max_seq_len * 8 < min_seq_len * 10:" in source
    regressed = tmp_path / "regressed.py"
    regressed.write_text(source.replace("if max_seq_len * 8 < min_seq_len * 10:",
                                        "if max_seq_len * 9 < min_seq_len * 10:"))
    common = dict(ops=["num_kv_splits"], device=device, budget_s=120, max_cases=128, seed=1, isolate=False,
                  in_contract_only=True, minimize_budget_s=5, confirm_tries=2)
    r = run_campaign(CampaignConfig(target=str(regressed), baseline=str(seed_path), corpus=tmp_path / "c", **common))
    shown = {s: x for x in r.saved for s in x.signatures}
    assert REGRESSION in shown and shown[REGRESSION].new
    saved = read_case(shown[REGRESSION].path)
    assert saved.case.meta["baseline"] == str(seed_path) and REGRESSION in saved.signatures


def read_case(path):
    from kvfuzz.corpus import read_case_dir

    return read_case_dir(path)


@pytest.mark.slow  # campaign-sized: `pytest -m slow`
def test_bench_measures_the_checked_loop_with_its_baseline(device, capsys):
    from kvfuzz.bench import render, run_bench

    r = run_bench(["num_kv_splits"], "builtin", device, 3.0, isolate=False, baseline="builtin")
    assert r["baseline"] == "builtin" and r["ops"]["num_kv_splits"]["checked_per_s"] > 0
    assert "each case also on the baseline builtin" in render(r)
    assert main(["bench", "--baseline", "/nope/x.py", "--op", "num_kv_splits", "--budget", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--baseline /nope/x.py" in err[0]


def _pipeline(tmp_path):
    from kvfuzz.campaign import CampaignConfig
    from kvfuzz.pipeline import FindingPipeline

    def fresh():
        raise AssertionError("a process was started to confirm it")

    cfg = CampaignConfig(target="builtin", baseline="builtin", ops=["decode_metadata"])
    return FindingPipeline(cfg, None, fresh, "cpu", {}, None)


def test_a_finding_the_baseline_shares_is_listed_and_costs_nothing(tmp_path):
    import dataclasses

    from kvfuzz.engines.common import Found

    pl = _pipeline(tmp_path)
    case = hand.decode(ps=1, delta=3)
    f = Found(dataclasses.replace(_f("mismatch"), against="shared"), case, case)
    assert pl.add(f) == "known" and pl.shared == [f] and not pl.confirmed
    pl.settle({f.finding.signature: f})
    assert pl.saved == [] and pl.flaky == []


def test_a_finding_under_a_class_joins_the_class_finding_unconfirmed(tmp_path):
    import dataclasses

    from kvfuzz.engines.common import Found
    from kvfuzz.pipeline import Saved

    pl = _pipeline(tmp_path)
    case = hand.decode(ps=1, delta=3)
    ordinary = dataclasses.replace(_f("mismatch"), against="regression")
    f = Found(ordinary, case, case)
    assert pl.add(f) == "known" and not pl.confirmed and pl.under_class == {ordinary.signature: f}
    regression = Finding("regression", "decode_metadata", "general", "page_table", "mismatch.all", "r")
    host = Saved(Found(regression, case, case), case, None, shows=frozenset({regression.signature, ordinary.signature}))
    pl.saved.append(host)
    pl._settle_under_class(pl.under_class.pop(ordinary.signature), 0, None)
    assert pl.saved == [host] and host.signatures == [regression.signature, ordinary.signature]


def test_a_baseline_run_plans_to_end_within_its_budget_after_start_up():
    from kvfuzz.campaign import CampaignConfig, _plan_limit
    from kvfuzz.plan import Plan

    plain = CampaignConfig(target="builtin", ops=["decode_metadata"], budget_s=10.0)
    gate = CampaignConfig(target="builtin", ops=["decode_metadata", "num_kv_splits"], budget_s=10.0, baseline="builtin")
    limited = CampaignConfig(target="builtin", ops=["decode_metadata"], budget_s=10.0, baseline="builtin",
                             time_limit_s=50.0)
    assert _plan_limit(plain, 7.0) is None  # a plain run minimizes after its generation budget
    assert _plan_limit(limited, 7.0) == 50.0  # --time-limit rules where given
    assert _plan_limit(gate, 7.0) == 17.0
    # what the plan makes of it: every op's generation and minimizing end by start-up + budget
    plan = Plan(gate.ops, gate.budget_s, _plan_limit(gate, 7.0), started=0.0)
    first = plan.turn("decode_metadata", now=7.0)
    plan.done("decode_metadata", first.budget_s)
    second = plan.turn("num_kv_splits", now=first.op_end)
    assert max(first.op_end, second.op_end, second.fuzz_end) <= 17.0
    assert first.budget_s + second.budget_s < gate.budget_s  # the budget pays for minimizing too
