"""scripts/check_repros.py's logic, with a fake runner: which targets a case is checked on, how exit
codes and output are read, the cause each disagreement is given, the table, --json, bad input."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

import check_repros as cr  # noqa: E402

from kvfuzz.corpus import read_case_dir  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO / "corpora"
KNOWN = ("0.5.13", "0.5.14", "0.5.15", "0.5.16", "0.5.17", "0.5.18")
STRIDE = "a6ff9ade7ec924ba"  # 0.5.14's swa_page_table stride defect, affects 0.5.10 to 0.5.16
OWN_BUILTIN = "581beeb0c93abb1b"  # a builtin mismatch case (a short script), no affects


class Saved:
    def __init__(self, target: str, affects=()) -> None:
        self.target = target
        self.case = type("C", (), {"meta": {"affects": list(affects)} if affects else {}})()


def test_a_triaged_case_is_checked_on_its_releases_and_one_either_side():
    saved = Saved("sglang==0.5.15", ["sglang==0.5.14", "sglang==0.5.15", "sglang==0.5.99"])
    assert cr.targets_of(saved, KNOWN) == ["sglang==0.5.15", "builtin", "sglang==0.5.13", "sglang==0.5.14",
                                           "sglang==0.5.16"]
    # at the ends of what kvfuzz knows there is no release beyond
    assert cr.release_targets(["sglang==0.5.18"], KNOWN) == ["sglang==0.5.17", "sglang==0.5.18"]
    assert cr.release_targets(["sglang==0.5.13"], KNOWN) == ["sglang==0.5.13", "sglang==0.5.14"]


def test_releases_keep_only_the_named_ones_and_an_untriaged_case_runs_on_its_own_target_and_builtin():
    saved = Saved("sglang==0.5.15", ["sglang==0.5.15"])
    assert cr.targets_of(saved, KNOWN, {"0.5.16"}) == ["builtin", "sglang==0.5.16"]
    assert cr.targets_of(saved, KNOWN, {"0.5.16"}, builtin=False) == ["sglang==0.5.16"]
    assert cr.targets_of(Saved("tests/fixtures/mutant_kernels.py"), KNOWN) == [
        "tests/fixtures/mutant_kernels.py", "builtin"]
    assert cr.targets_of(Saved("builtin"), KNOWN) == ["builtin"]
    assert cr.targets_of(Saved("builtin"), KNOWN, builtin=False) == []


def test_exit_codes_and_output_are_read_as_verdicts():
    assert [cr.verdict_of(rc) for rc in (0, 1, 2, 124, -11, 3)] == [
        "pass", "fail", "cannot-run", "timeout", "killed by signal 11", "exit 3"]
    tb = "Traceback (most recent call last):\n  File \"x\", line 1\nTypeError: bad operand\n"
    assert cr.raised(tb) == "TypeError"
    assert cr.raised(tb.replace("TypeError", "AssertionError")) is None  # the short script's own failure
    assert cr.raised("FAIL: 2 defect(s)") is None
    out = "case     a6ff  (decode_metadata [v2p], content digest 1)\nverdict  PASS: no findings\n"
    r = cr.read(0, out, "", "replay")
    assert (r.verdict, r.variant, r.varies) == ("pass", "v2p", False)
    assert cr.read(1, out.replace("PASS: no findings", "FAIL: 1 finding(s), shown in 2 of 5 runs "
                                  "(its runs differ by nature)"), "", "replay").varies


def row(replay: cr.Run, full: cr.Run, short: cr.Run, variant: str = "default") -> cr.Row:
    r = cr.Row("k", "decode_metadata", "mismatch", variant, "sglang==0.5.17",
               {"replay": replay, "full": full, "short": short})
    r.cause = cr.cause(r)
    return r


PASS, FAIL = cr.Run(0, "pass"), cr.Run(1, "fail")


def test_each_disagreement_gets_its_cause():
    assert row(PASS, PASS, cr.Run(None, "-")).agrees and row(PASS, PASS, PASS).cause is None
    # a script that refuses the file in one line claims nothing: no disagreement, listed apart
    r = row(PASS, PASS, cr.Run(2, "cannot-run"))
    assert r.agrees and r.refused == ["short"] and r.cause is None
    assert "with a script refusing the file (exit 2, one line): k short on sglang==0.5.17" in cr.table([r])
    assert not row(FAIL, PASS, cr.Run(2, "cannot-run")).agrees
    # a script that died of an exception exits 1, which reads as 'the defect shows'
    r = row(PASS, PASS, cr.Run(1, "fail", raised="TypeError"))
    assert r.cause.startswith("script raised: the short script died of TypeError")
    # replay judges another release's file by that release's variant, the script by the case's
    r = row(cr.Run(0, "pass", variant="v2p"), FAIL, FAIL)
    assert r.cause.startswith("script variant: the scripts judge by the case's variant default; replay judges "
                              "sglang==0.5.17 by v2p")
    assert row(PASS, cr.Run(124, "timeout", tail="ran past 9 s"), PASS).cause == "full timeout: ran past 9 s"
    assert row(cr.Run(1, "fail", varies=True), PASS, PASS).cause.startswith("varies")
    assert row(FAIL, PASS, PASS).cause == "other: replay fail; full pass; short pass"
    # every cause that applies: a short script's exception beside the full script's variant
    r = row(cr.Run(0, "pass", variant="v2p"), FAIL, cr.Run(1, "fail", raised="TypeError"))
    assert r.cause.startswith("script raised: the short script died of TypeError")
    assert "; script variant: the scripts judge by the case's variant default" in r.cause


def fake_runner(calls: list):
    """replay passes; the full script fails; the short script dies of a TypeError."""

    def runner(cmd, timeout):
        calls.append(cmd)
        if "replay" in cmd:
            return 0, "case     k  (op [default], content digest d)\nverdict  PASS: no findings\n", ""
        if cmd[1].endswith("full.py"):
            return 1, "FAIL: 1 defect(s)", ""
        return 1, "", "Traceback (most recent call last):\nTypeError: x\n"
    return runner


def test_main_prints_the_table_and_writes_json(tmp_path, capsys):
    calls: list = []
    code = cr.main([str(CORPUS), "--cases", OWN_BUILTIN, "--json", str(tmp_path / "rows.json")],
                   runner=fake_runner(calls))
    out = capsys.readouterr().out
    assert code == 1, out
    assert out.splitlines()[0] == "0 agree, 1 disagree (1 case x target rows, 1 cases)"
    assert "  1 script raised" in out
    assert f"{OWN_BUILTIN}  decode_metadata" in out
    [doc] = json.loads((tmp_path / "rows.json").read_text())
    assert doc["target"] == "builtin" and doc["agrees"] is False
    assert doc["runs"]["short"]["raised"] == "TypeError"
    assert len(calls) == 3  # replay, full, short: one row
    assert calls[0][3:] == ["replay", str(CORPUS / "decode_metadata" / OWN_BUILTIN), "--target", "builtin"]


def test_a_release_without_its_kernel_file_is_cannot_run_for_the_scripts(monkeypatch, tmp_path):
    def unavailable(target, case_dir, op):
        raise cr.TargetLoadError(f"{target}: not cached")

    monkeypatch.setattr(cr, "kernel_path", unavailable)
    runner = lambda cmd, timeout: (2, "", "kvfuzz: sglang==0.5.17: not cached")  # noqa: E731
    saved = read_case_dir(CORPUS / "decode_metadata" / STRIDE)
    scripts = cr.write_scripts(saved, CORPUS / "decode_metadata" / STRIDE, tmp_path, "cpu")
    r = cr.check_row(CORPUS / "decode_metadata" / STRIDE, saved, "sglang==0.5.17", scripts, "cpu", 5, runner)
    assert r.agrees and {t: x.verdict for t, x in r.runs.items()} == {
        "replay": "cannot-run", "full": "cannot-run", "short": "cannot-run"}


@pytest.mark.parametrize("argv, says", [
    (["--releases", "0.5.99"], "kvfuzz knows no SGLang release 0.5.99"),
    (["--cases", "nosuchcase"], "no case nosuchcase under"),
    (["--jobs", "0"], "--jobs must be >= 1"),
    (["/no/such/folder"], "/no/such/folder: no such folder"),
])
def test_bad_input_is_one_line_and_exit_2(argv, says, capsys):
    assert cr.main(argv, runner=fake_runner([])) == 2
    err = capsys.readouterr().err
    assert err.startswith("check_repros: ") and says in err and len(err.strip().splitlines()) == 1
