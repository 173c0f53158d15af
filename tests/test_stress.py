"""Stress apart from contract: an in-contract case that no SGLang call site launches
(`Contract.stress`) is judged as in contract but labelled `stress`, reported apart in the JSON,
JUnit, Markdown, console and replay, and dropped by `--in-contract-only`."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from kvfuzz.contract import status_text
from kvfuzz.ops import CONTRACTS, contract_label, contract_status
from kvfuzz.reports import by_status, junit_xml, markdown
from kvfuzz.strategies import random_cases

KERNEL = Path(__file__).resolve().parents[1] / "kvfuzz" / "kernels" / "flashmla_kv_indices.py"
# a defect of the kv_start_idx path only: every SGLang backend passes None there (stress)
START = "s = tl.load(starts + req * starts_s).to(tl.int64)"
START_MUTANT = (START, START + " + 1")


def _first(op: str, want) -> object:
    return next(c for c in random_cases(op, 3, 300, in_contract_only=True) if want(c))


def test_flashmla_with_kv_start_idx_or_an_unused_page_size_is_stress():
    c = CONTRACTS["flashmla_kv_indices"]
    start = _first("flashmla_kv_indices", lambda c: "kv_start_idx" in c.tensors)
    assert c.assess(start)[0] == "in_contract"  # judged as in contract, by the same oracles
    assert contract_label(start) == "stress"
    assert contract_status(start).startswith("stress: kv_start_idx given")
    plain = _first("flashmla_kv_indices", lambda c: "kv_start_idx" not in c.tensors
                   and c.scalars["page_size"] in (1, 32, 64, 128) and all(s for s in c.tensors["req_to_token"].strides))
    assert contract_label(plain) == "in_contract" and contract_status(plain) == "in contract"
    odd = plain.with_scalars(page_size=16)
    assert "page_size 16: no MLA backend uses it" in contract_status(odd)


def test_trtllm_graph_q_mode_1_is_stress_and_q_mode_0_and_2_are_not():
    c = CONTRACTS["trtllm_mha_graph_metadata"]
    q1 = _first("trtllm_mha_graph_metadata", lambda c: c.scalars.get("q_mode") == 1)
    assert c.assess(q1)[0] == "in_contract" and contract_label(q1) == "stress"
    assert any("q_mode 1" in r for r in c.stress_reasons(q1))
    q0 = _first("trtllm_mha_graph_metadata", lambda c: c.scalars.get("q_mode") in (0, 2))
    assert not any("q_mode" in r for r in c.stress_reasons(q0))


def test_out_of_contract_and_must_refuse_are_never_stress():
    c = CONTRACTS["flashmla_kv_indices"]
    start = _first("flashmla_kv_indices", lambda c: "kv_start_idx" in c.tensors)
    bad = start.with_scalars(page_size=3)
    assert contract_label(bad) != "stress" and not contract_status(bad).startswith("stress")
    assert status_text("in_contract", [], ["why"]) == "stress: why"
    assert status_text("out_of_contract", ["rule"], ["why"]) == "out of contract: rule"


def _report() -> dict:
    f = {"op": "flashmla_kv_indices", "kind": "mismatch", "message": "m", "case": "c", "new": True}
    return {"target": "t", "ops": {"flashmla_kv_indices": {"cases": 9, "seconds": 1.0}},
            "findings": [f | {"signature": "flashmla_kv_indices:start:mismatch:kv_indices:all",
                              "contract": "stress: kv_start_idx given", "contract_status": "stress"},
                         f | {"signature": "flashmla_kv_indices:no_start:mismatch:kv_indices:all",
                              "contract": "in contract", "contract_status": "in_contract"}]}


def test_junit_and_markdown_report_stress_findings_apart():
    report = _report()
    suite = ET.fromstring(junit_xml(report))
    cases = {(c.get("classname"), c.get("name")): c for c in suite.iter("testcase")}
    own = cases[("kvfuzz.t", "flashmla_kv_indices")].find("failure")
    assert "no_start" in own.get("message") and ":start:" not in own.get("message")
    stress = cases[("kvfuzz.t.stress", "flashmla_kv_indices")].find("failure")
    assert "1 new stress finding" in stress.get("message") and ":start:" in stress.get("message")
    assert suite.get("tests") == "2" and suite.get("failures") == "2"
    md = markdown(report)
    head, _, tail = md.partition("## Stress findings")
    assert "no_start:mismatch" in head and ":start:mismatch" not in head.split("## Findings")[1]
    assert ":start:mismatch" in tail
    assert by_status(report["findings"]) == {"in_contract": 1, "stress": 1, "out_of_contract": 0, "must_refuse": 0,
                                             "binding": 0}


def _mutant(tmp_path: Path) -> str:
    old, new = START_MUTANT
    src = KERNEL.read_text()
    assert src.count(old) == 1
    path = tmp_path / "start_mutant.py"
    path.write_text(src.replace(old, new).replace("from ._args import", "from kvfuzz.kernels._args import"))
    return str(path)


@pytest.mark.slow  # campaign-sized: CI's slow stage runs it (.ci/run)
@pytest.mark.parametrize("in_contract_only", [False, True])
def test_a_stress_only_defect_is_a_stress_finding_and_in_contract_only_drops_it(tmp_path, in_contract_only):
    from kvfuzz.campaign import CampaignConfig, run_campaign

    cfg = CampaignConfig(ops=["flashmla_kv_indices"], ops_named=True, target=_mutant(tmp_path), device="cpu",
                         max_cases=40, budget_s=120, seed=2, isolate=False, minimize_budget_s=0, confirm_tries=2,
                         in_contract_only=in_contract_only, corpus=tmp_path / "corpus")
    report = run_campaign(cfg).report()
    if in_contract_only:
        assert report["findings"] == [] and report["stress_dropped"] > 0, report["findings"]
    else:
        assert report["findings"], report
        assert {f["contract_status"] for f in report["findings"]} == {"stress"}
        assert report["findings_by_status"]["stress"] == len(report["findings"])
        assert all(f["contract"].startswith("stress: kv_start_idx given") for f in report["findings"])
        _collected_apart(tmp_path / "corpus")


def _collected_apart(corpus: Path) -> None:
    """The pytest plugin gives a saved stress case an id of its own and the kvfuzz_stress marker."""
    import os
    import subprocess
    import sys

    def collect(*extra: str) -> list[str]:
        r = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                            *extra, str(corpus)], capture_output=True, text=True, timeout=300, cwd=corpus,
                           env=dict(os.environ) | {"PYTHONPATH": str(KERNEL.parents[2])})
        return [line for line in r.stdout.splitlines() if "case.json::" in line]

    ids = collect()
    assert ids and all(":stress:" in line for line in ids), ids
    assert collect("-m", "not kvfuzz_stress") == []


@pytest.mark.slow  # campaign-sized: CI's slow stage runs it (.ci/run)
def test_in_contract_only_keeps_a_defect_a_stress_case_showed_first(tmp_path, monkeypatch):
    """A defect of every path, first seen on a stress case, is still found on an in-contract one
    (the stress rule here: the first case a finding is seen on, whatever it is)."""
    from kvfuzz.campaign import CampaignConfig, run_campaign
    from kvfuzz.engines import base

    first: list[str] = []
    sinks: list[str] = []

    def first_case_only(c) -> list[str]:
        first.append(first[0] if first else c.digest())
        return ["the first case a finding showed on"] if c.digest() == first[0] else []

    contract = CONTRACTS["flashmla_kv_indices"]
    monkeypatch.setitem(contract.__dict__, "stress", first_case_only)
    add = base.OpRun.add
    monkeypatch.setattr(base.OpRun, "add", lambda self, f, case, sink=True: sinks.append(f.signature) or add(self, f, case, sink))
    old = "pages = (tl.maximum(n, 0) + PS - 1) // PS"
    path = tmp_path / "rounded_down.py"
    src = KERNEL.read_text()
    assert src.count(old) == 1
    path.write_text(src.replace(old, "pages = tl.maximum(n, 0) // PS")
                    .replace("from ._args import", "from kvfuzz.kernels._args import"))
    cfg = CampaignConfig(ops=["flashmla_kv_indices"], ops_named=True, target=str(path), device="cpu", max_cases=40,
                         budget_s=120, seed=3, isolate=False, minimize_budget_s=0, confirm_tries=2,
                         in_contract_only=True, corpus=tmp_path / "corpus")
    report = run_campaign(cfg).report()
    assert report["stress_dropped"] == 1 and sinks, report["stress_dropped"]
    assert sinks[0] in {s for f in report["findings"] for s in f["signatures"]}, (sinks, report["findings"])
    assert {f["contract_status"] for f in report["findings"]} == {"in_contract"}
