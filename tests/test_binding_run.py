"""Call-site binding in a run: `kvfuzz fuzz` checks the call sites of the target's release (or
`--call-sites FILE`) against the target's own signature and reports each argument that lands in
another parameter than it means as a finding of kind `binding` (JSON, console, JUnit, Markdown);
each misbound site's kernel is launched with the site's own argument list (`as_called`), so the
misbinding shows as wrong output, saved as a case that replays.

No release kvfuzz runs (0.5.6-0.5.23) has a binding finding; 0.4.10.post1's cutlass_mla_backend.py
has three (the page size in `NUM_PAGE_PER_BLOCK`). The target here is a kernel with that
release's signature (tests/fixtures/misbound_flashmla.py) and the call sites are 0.4.10.post1's,
from the shipped call-site data."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from kvfuzz.callsites import load
from kvfuzz.callsites.launch import as_called_cases, binding_findings, first_wrong, misbound, run_sites
from kvfuzz.check import Checker
from kvfuzz.cli import main
from kvfuzz.strategies import random_cases
from kvfuzz.targets.releases import parse_version
from kvfuzz.worker import make_executor

OP = "flashmla_kv_indices"
ROOT = Path(__file__).resolve().parents[1]
MISBOUND = str(ROOT / "tests" / "fixtures" / "misbound_flashmla.py")  # 0.4.10.post1's signature
BUILTIN = str(ROOT / "kvfuzz" / "kernels" / "flashmla_kv_indices.py")  # PAGED_SIZE the 8th parameter


def _sites() -> list[dict]:
    return [s for s in load()["releases"]["0.4.10.post1"]["sites"] if s["op"] == OP]


def test_only_0_4_10_post1_has_binding_findings_among_the_releases_kvfuzz_has_data_for():
    data = load()
    found = {v for v, r in data["releases"].items() if any(s["binding"] for s in r["sites"])}
    assert found == {"0.4.10.post1"}, found
    assert all(parse_version(v) < parse_version("0.5.6") for v in found)
    assert run_sites("sglang==0.5.23") and not binding_findings(OP, run_sites("sglang==0.5.23"), "sglang==0.5.23")


def test_a_positional_page_size_in_a_new_constexpr_slot_is_a_binding_finding_of_the_target():
    found = binding_findings(OP, _sites(), MISBOUND)
    assert [(f["site"]["line"], f["argument"], f["lands_in"], f["means"]) for f in found] == [
        (97, "PAGE_SIZE", "NUM_PAGE_PER_BLOCK", "PAGED_SIZE"), (160, "PAGE_SIZE", "NUM_PAGE_PER_BLOCK", "PAGED_SIZE"),
        (201, "PAGE_SIZE", "NUM_PAGE_PER_BLOCK", "PAGED_SIZE")]
    assert found[0]["signature"] == f"{OP}:call_site:binding:NUM_PAGE_PER_BLOCK:cutlass_mla_backend.py#97"
    assert found[0]["message"].startswith(
        "sglang/srt/layers/attention/cutlass_mla_backend.py:97: positional argument 8")
    cutlass = [s for s in _sites() if s["file"].endswith("cutlass_mla_backend.py")]
    assert binding_findings(OP, cutlass, BUILTIN) == []  # the same calls bind right to PAGED_SIZE there
    # trtllm's sites pass nine positionally (0.4.10.post1's NUM_PAGE_PER_BLOCK slot): against the
    # builtin's signature, whose 9th parameter is v2p_ptr, the page size lands there
    trtllm = binding_findings(OP, _sites(), BUILTIN)
    assert trtllm and {(f["what"], f["argument"], f["lands_in"], f["means"]) for f in trtllm} == \
        {("misbound", "self.page_size", "v2p_ptr", "PAGED_SIZE")}, trtllm


def test_the_site_launched_as_called_gives_wrong_output_where_kvfuzz_s_own_launch_is_clean():
    ex = make_executor(MISBOUND, "cpu", isolate=False)
    checker = Checker(ex, OP)
    assert all(not checker.check(c).findings for c in random_cases(OP, 1, 6, in_contract_only=True))
    site = misbound(binding_findings(OP, _sites(), MISBOUND))[0]
    f, ran = first_wrong(checker, as_called_cases(OP, site, 0, 16))
    assert f is not None and f"/as_called@cutlass_mla_backend.py#{site['line']}:" in f.finding.signature, ran
    # the same case launched as kvfuzz launches it (by name) is right: the site's binding is at fault
    plain = f.case.replace(meta={})
    assert not checker.check(plain).findings


def test_a_case_the_site_cannot_make_is_kvfuzz_s_not_the_target_s():
    ex = make_executor(MISBOUND, "cpu", isolate=False)
    site = misbound(binding_findings(OP, _sites(), MISBOUND))[0]  # passes kv_start_idx as None
    start = next(c for c in random_cases(OP, 3, 100, in_contract_only=True) if "kv_start_idx" in c.tensors)
    v = Checker(ex, OP).check(as_called_cases(OP, site, 0, 1)[0].replace(tensors=start.tensors, values=start.values,
                                                                          scalars=start.scalars))
    assert v.not_target and "kv_start_idx" in v.not_target and not v.findings, v


@pytest.mark.slow  # campaign-sized: CI's slow stage runs it (.ci/run)
def test_a_run_reports_binding_findings_and_saves_the_as_called_case_that_replays(tmp_path, capsys):
    sites = tmp_path / "sites.json"  # one misbound site and a FlashMLA site that binds right: one fresh confirmation
    sites.write_text(json.dumps([s for s in _sites() if s["line"] == 97 or s["file"].endswith("flashmla_backend.py")]))
    report, junit, md = tmp_path / "r.json", tmp_path / "r.xml", tmp_path / "r.md"
    code = main(["fuzz", "--target", MISBOUND, "--op", OP, "--device", "cpu", "--max-cases", "8", "--in-process",
                 "--call-sites", str(sites), "--corpus", str(tmp_path / "corpus"), "--report", str(report),
                 "--junit", str(junit), "--markdown", str(md), "--minimize-budget", "0", "--confirm-tries", "2"])
    out = capsys.readouterr().out
    assert code == 1, out
    doc = json.loads(report.read_text())
    bound = [f for f in doc["findings"] if f["kind"] == "binding"]
    assert [f["site"]["line"] for f in bound] == [97] and doc["findings_by_status"]["binding"] == 1
    assert all(f["lands_in"] == "NUM_PAGE_PER_BLOCK" and f["means"] == "PAGED_SIZE" for f in bound)
    assert all(f["as_called"]["signature"] and f["case"] for f in bound), bound
    assert "BINDING " + bound[0]["signature"] in out and "launched as called" in out
    tests = {(c.get("classname"), c.get("name")): c for c in ET.parse(junit).getroot().iter("testcase")}
    failed = [n for (cls, n), c in tests.items() if cls.endswith(".binding") and c.find("failure") is not None]
    assert failed == [f"{OP} sglang/srt/layers/attention/cutlass_mla_backend.py:97"], tests
    assert "## Binding findings" in md.read_text() and "`NUM_PAGE_PER_BLOCK`" in md.read_text()
    # what is saved replays: the as-called case shows the wrong output again (exit 1), naming its site
    assert main(["replay", bound[0]["case"], "--device", "cpu"]) == 1
    shown = capsys.readouterr().out
    assert "as called sglang/srt/layers/attention/cutlass_mla_backend.py:" in shown
    assert "binding  positional argument 8 `PAGE_SIZE` binds to `NUM_PAGE_PER_BLOCK`" in shown
    assert main(["replay", bound[0]["case"], "--device", "cpu", "--emit-repro", str(tmp_path / "r.py")]) == 2
    assert "the repro scripts launch by name only" in capsys.readouterr().err


def test_replay_on_a_release_names_its_call_sites_that_bind_elsewhere(tmp_path, monkeypatch, capsys):
    """Replaying any case of the op on a release lists that release's binding findings of the op
    (no release kvfuzz runs has one: the release's call sites are 0.4.10.post1's here)."""
    import shutil

    from kvfuzz.callsites import launch

    case = next(p.parent for p in sorted((ROOT / "corpora").glob("*/*/case.json"))
                if json.loads(p.read_text())["expected"] == "pass")  # a builtin case that runs clean
    op = json.loads((case / "case.json").read_text())["op"]
    here = tmp_path / case.name
    shutil.copytree(case, here)
    monkeypatch.setattr(launch, "run_sites", lambda target, call_sites=None: [
        dict(s, op=op, binding=[{"kind": "binding", "what": "misbound", "message": "arg lands elsewhere",
                                 "param": "P"}]) for s in _sites()[:1]])
    main(["replay", str(here), "--device", "cpu", "--in-process"])
    shown = capsys.readouterr().out
    assert "binding  sglang/srt/layers/attention/cutlass_mla_backend.py:97: arg lands elsewhere" in shown


@pytest.mark.parametrize("text, why", [("not json", "cannot read it as JSON"), ('{"x": 1}', "expected a list"),
                                       ('[{"op": "x"}]', "site 0 lacks")])
def test_a_bad_call_sites_file_is_one_line_and_exit_2(tmp_path, capsys, text, why):
    bad = tmp_path / "bad.json"
    bad.write_text(text)
    assert main(["fuzz", "--target", MISBOUND, "--op", OP, "--device", "cpu", "--max-cases", "1",
                 "--in-process", "--call-sites", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and why in err[0], err


def test_a_site_that_leaves_a_parameter_at_its_default_fits_only_cases_with_that_value():
    """FlashMLA's own sites leave PAGED_SIZE at its default 64: only page-size-64 cases fit them."""
    ex = make_executor(MISBOUND, "cpu", isolate=False)
    flashmla = next(s for s in _sites() if s["file"].endswith("flashmla_backend.py") and "PAGED_SIZE" not in s["kwargs"]
                    and len(s["args"]) < 8)
    cases = as_called_cases(OP, flashmla, 0, 16)
    verdicts = [(c.scalars["page_size"], Checker(ex, OP).check(c)) for c in cases]
    assert {ps for ps, v in verdicts if not v.not_target} == {64}, [(ps, v.not_target) for ps, v in verdicts]
    assert all(not v.findings for _, v in verdicts)
    assert any("leaves PAGED_SIZE at its default 64" in (v.not_target or "") for _, v in verdicts)
