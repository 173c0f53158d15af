"""Against a baseline, a regression (or change) is a new defect, or a new symptom of a defect
the baseline has: its site (the statement that went wrong, docs/defects.md) against where the
baseline goes wrong on the same case and on the cases the two share; with no site (a crash on
a GPU), "site unknown". Said in the JSON, console, JUnit and Markdown reports."""

from __future__ import annotations

import cases as hand
from kvfuzz import baseline as bl
from kvfuzz.campaign import CampaignConfig
from kvfuzz.engines.common import Found
from kvfuzz.findings import Finding
from kvfuzz.pipeline import FindingPipeline
from kvfuzz.reports import against_baseline, junit_xml, markdown
from kvfuzz.sites.attribute import Attribution
from kvfuzz.sites.site import Site

STORE = dict(kernel="_decode_kernel", op="tl.store", what="wrong_value", says="stores a wrong value")
TARGET_SITE = dict(STORE, file="/tmp/regressed.py", line=97, text="tl.store(page_table + offs, val, mask=mask)")
# the same statement in the baseline's file: another name, another line (a release's file moves)
BASE_SAME = dict(STORE, file="/cache/metadata.py", line=91, text="tl.store(page_table + offs,  val, mask=mask)")
BASE_OTHER = dict(STORE, file="/cache/metadata.py", line=60, text="tl.store(cu_seqlens_k + B, acc)")


def test_a_statement_the_baseline_goes_wrong_at_too_is_a_new_symptom():
    assert bl.defect_against(TARGET_SITE, [BASE_OTHER, BASE_SAME]) == {
        "is": bl.NEW_SYMPTOM, "baseline_site": "/cache/metadata.py:91"}
    assert bl.defect_against(TARGET_SITE, [BASE_OTHER]) == {"is": bl.NEW_DEFECT}
    assert bl.defect_against(TARGET_SITE, []) == {"is": bl.NEW_DEFECT}
    # the one-line defect in the statement's own text: the baseline's statement reads otherwise
    edited = dict(TARGET_SITE, text="tl.store(page_table + offs, val + 1, mask=mask)")
    assert bl.defect_against(edited, [BASE_SAME])["is"] == bl.NEW_DEFECT
    crash = bl.defect_against({"none": "a crash, hang or GPU fault: no statement to name"}, [BASE_SAME])
    assert crash["is"] == bl.SITE_UNKNOWN and "crash" in crash["why"]
    assert bl.against_line({"is": bl.NEW_SYMPTOM, "baseline_site": "m.py:91"}) == \
        "new symptom of a known defect (the baseline goes wrong at m.py:91 too)"
    assert bl.against_line(crash).startswith("site unknown (a crash")


def _pipeline(monkeypatch, baseline_sites: dict[str, list[dict]]):
    """A --baseline pipeline whose attribution of a case on the baseline gives
    `baseline_sites[case digest]`; it records each case it attributes."""
    asked = []

    def attribute_isolated(case, spec, timeout_s=60.0):
        asked.append((case.digest(), spec))
        return Attribution({f"w{i}": Site.from_json(s) for i, s in enumerate(baseline_sites.get(case.digest(), []))}), ""

    monkeypatch.setattr("kvfuzz.sites.run.attribute_isolated", attribute_isolated)
    cfg = CampaignConfig(ops=["decode_metadata"], target="/tmp/regressed.py", baseline="/cache/metadata.py")
    return FindingPipeline(cfg, None, None, "cpu", {}, None), asked


REGRESSION = Finding("regression", "decode_metadata", "general", "page_table", "mismatch.all", "r")


def test_the_baseline_is_asked_on_the_findings_case_then_on_the_cases_it_shares(monkeypatch):
    case, shared_case = hand.decode(ps=1, delta=3), hand.decode(ps=1, delta=1)
    pl, asked = _pipeline(monkeypatch, {shared_case.digest(): [BASE_SAME]})
    pl.shared.append(Found(Finding("mismatch", "decode_metadata", "general", "page_table", "all", "m"),
                           shared_case, shared_case))
    pl.sites[REGRESSION.signature] = TARGET_SITE
    got = pl._defect_against(Found(REGRESSION, case, case), case, None)
    assert got == {"is": bl.NEW_SYMPTOM, "baseline_site": "/cache/metadata.py:91", "cases": 2}
    assert asked == [(case.digest(), "/cache/metadata.py"), (shared_case.digest(), "/cache/metadata.py")]
    # each case once per run; a site elsewhere is a new defect
    pl.sites[REGRESSION.signature] = dict(TARGET_SITE, text="tl.store(swa_page_table + offs, v)")
    assert pl._defect_against(Found(REGRESSION, case, case), case, None) == {"is": bl.NEW_DEFECT, "cases": 2}
    assert len(asked) == 2


def test_with_no_time_left_the_baseline_is_not_asked_and_the_defect_is_unknown(monkeypatch):
    import time

    case = hand.decode(ps=1, delta=3)
    pl, asked = _pipeline(monkeypatch, {})
    pl.sites[REGRESSION.signature] = TARGET_SITE
    got = pl._defect_against(Found(REGRESSION, case, case), case, time.monotonic())
    assert got["is"] == bl.SITE_UNKNOWN and "no time" in got["why"] and asked == []


def test_reports_say_new_defect_or_new_symptom():
    findings = [
        {"op": "decode_metadata", "kind": "regression", "signature": REGRESSION.signature,
         "signatures": [REGRESSION.signature], "message": "m", "case": "c1", "new": True, "contract": "in contract",
         "site": TARGET_SITE, "against_defect": {"is": bl.NEW_SYMPTOM, "baseline_site": "metadata.py:91"}},
        {"op": "decode_metadata", "kind": "regression", "signature": "decode_metadata:general:regression:x:crash.SIGSEGV",
         "signatures": ["decode_metadata:general:regression:x:crash.SIGSEGV"], "message": "m", "case": "c2",
         "new": True, "contract": "in contract", "site": {"none": "a crash"}, "against_defect": None}]
    classes = against_baseline(findings)
    assert [e["defect"] for e in classes["regression"]] == ["new symptom of a known defect", "site unknown"]
    report = {"target": "t", "baseline": "b", "ops": {"decode_metadata": {"cases": 3}}, "findings": findings,
              "against_baseline": classes}
    assert "; new symptom of a known defect" in junit_xml(report) and "; site unknown" in junit_xml(report)
    assert "| new symptom of a known defect |" in markdown(report)
