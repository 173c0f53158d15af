"""Nothing lost to a defect of kvfuzz's own: an exception in one stage of one finding's way
(confirming, minimizing, the generic reducer, saving, settling, reporting) ends that stage only.

A real campaign (`kvfuzz fuzz`, in-process) against the mutant decode kernel, with one stage made
to raise: the campaign ends normally, its JSON report is written and names the error (top level
and per finding), every finding a clean run confirms is in the corpus (unminimized where
minimizing raised, unconfirmed where confirming raised), the saved case's meta names the error,
and the run exits 4. The corpus starts with the clean run's cases, unminimized and saved long ago
(so this run minimizes its own, and its findings are known: no new finding decides the exit code).
The campaign's seed is the first of SEEDS whose clean run saves the mutant's two defects as two
cases of one signature each: a case showing both is one finding's case, and the other finding,
known by it, goes through no stage of its own."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import kvfuzz.campaign as campaign
from kvfuzz import cli
from kvfuzz.corpus import DirectoryCorpus
from kvfuzz.corpus.store import iter_cases
from kvfuzz.pipeline import FindingPipeline
from kvfuzz.worker import InProcessExecutor
from sampling import sampled

pytestmark = pytest.mark.filterwarnings("ignore:Conversion of an array with ndim > 0:DeprecationWarning")

MUTANT = str(Path(__file__).resolve().parent / "fixtures" / "mutant_kernels.py")
# 608 cases of one of these seeds: the mutant's invalid_accepted and input_modified defects, one case each
SEEDS = (4, 8, 9)
RUN = dict(ops=["decode_metadata"], target=MUTANT, budget_s=120, max_cases=608, confirm_tries=2, isolate=False)


def _argv(seed: int) -> list[str]:
    return ["fuzz", "--op", "decode_metadata", "--target", MUTANT, "--budget", "120", "--max-cases", "608",
            "--seed", str(seed), "--confirm-tries", "2", "--in-process", "--minimize-budget", "5"]


LONG_AGO = "2000-01-01T00:00:00+00:00"


class Injected(RuntimeError):
    pass


@pytest.fixture(autouse=True)
def in_process_confirmations(monkeypatch, device):
    """Fresh executors in this process (a worker process per confirmation is the slow part)."""
    monkeypatch.setattr(campaign, "_fresh_workers", lambda ex, cfg, dev: lambda: InProcessExecutor(cfg.target, dev))


@pytest.fixture(scope="module")
def clean(tmp_path_factory, device):
    """The seed, the clean run's corpus (cases unminimized, found long ago) and its signatures."""
    import kvfuzz.campaign as c

    keep = c._fresh_workers
    c._fresh_workers = lambda ex, cfg, dev: lambda: InProcessExecutor(cfg.target, dev)
    try:
        for seed in SEEDS:
            root = tmp_path_factory.mktemp("clean")
            r = c.run_campaign(c.CampaignConfig(device=device, corpus=root / "corpus", minimize_budget_s=0,
                                                seed=seed, **RUN))
            if len(r.saved) >= 2 and all(len(x.signatures) == 1 for x in r.saved):
                break
        else:
            pytest.fail(f"no seed of {SEEDS} saves two findings of the mutant in cases of one signature each")
    finally:
        c._fresh_workers = keep
    assert all(x.path for x in r.saved) and not r.internal_errors
    for x in r.saved:
        doc = x.path / "case.json"
        text = doc.read_text()
        found = json.loads(text)["found_at"]
        doc.write_text(text.replace(f'"found_at": "{found}"', f'"found_at": "{LONG_AGO}"'))
    sigs = {s for x in r.saved for s in x.signatures}
    assert len(sigs) >= 2
    return seed, root / "corpus", sigs, {s: x.case for x in r.saved for s in x.signatures}


def _raise(*args, **kwargs):
    raise Injected("injected fault")


def _inject(stage: str, monkeypatch) -> None:
    if stage == "confirm":
        monkeypatch.setattr("kvfuzz.pipeline.confirm", _raise)
        monkeypatch.setattr("kvfuzz.pipeline.confirm_many", _raise)
    elif stage == "minimize":
        monkeypatch.setattr("kvfuzz.pipeline.minimize", _raise)
    elif stage == "reduce":
        monkeypatch.setattr("kvfuzz.reduce.reduce", _raise)  # minimize imports it when it runs
    elif stage == "save":  # each case's first save raises; the save after minimizing keeps it
        save, seen = DirectoryCorpus.save, set()

        def save_once(self, sc):
            if sc.key() not in seen:
                seen.add(sc.key())
                raise Injected("injected fault")
            return save(self, sc)
        monkeypatch.setattr(DirectoryCorpus, "save", save_once)
    elif stage == "settle":
        finish = FindingPipeline._finish

        def finish_raises(self, f, interrupted=False, until=None):
            if not interrupted:
                raise Injected("injected fault")
            return finish(self, f, interrupted=interrupted, until=until)
        monkeypatch.setattr(FindingPipeline, "_finish", finish_raises)
    elif stage == "report":
        monkeypatch.setattr(campaign, "contract_status", _raise)
    else:
        raise AssertionError(stage)


STAGES = ["confirm", "minimize", "reduce", "save", "settle", "report"]


@pytest.mark.parametrize("stage", sampled("fault per stage", STAGES, share=3))
def test_a_fault_in_one_stage_loses_no_finding(stage, clean, tmp_path, monkeypatch, capsys):
    seed, corpus_at, sigs, first_cases = clean
    corpus = tmp_path / "corpus"
    shutil.copytree(corpus_at, corpus)
    _inject(stage, monkeypatch)
    code = cli.main(_argv(seed) + ["--corpus", str(corpus), "--report", str(tmp_path / "r.json"),
                            "--junit", str(tmp_path / "j.xml"), "--markdown", str(tmp_path / "r.md")])
    assert code == 4, capsys.readouterr().err
    report = json.loads((tmp_path / "r.json").read_text())
    junit = (tmp_path / "j.xml").read_text()
    assert 'errors="1"' in junit and "<error " in junit and f"internal error in {stage}" in junit
    assert "## Internal errors of kvfuzz" in (tmp_path / "r.md").read_text()
    errors = report["internal_errors"]
    assert errors and {e["stage"] for e in errors} == {stage}, errors
    for e in errors:
        assert e["type"] == "Injected" and e["message"] == "injected fault" and e["kvfuzz"]
        assert e["where"].startswith("tests/test_pipeline_faults.py:"), e
    assert "internal error in " + stage in capsys.readouterr().err
    reported = {s for f in report["findings"] for s in f["signatures"]}
    assert sigs <= reported
    assert all(f["internal_errors"] for f in report["findings"])  # each finding went through the stage
    saved = {s: sc for _, sc in iter_cases(corpus) for s in sc.signatures}
    assert sigs <= set(saved), "a confirmed finding is missing from the corpus"
    for sig in sigs:
        meta = saved[sig].case.meta
        if stage != "report":  # the report is made after the last save
            assert [e["stage"] for e in meta["internal_errors"]] and \
                {e["stage"] for e in meta["internal_errors"]} == {stage}, meta
        if stage in ("confirm", "minimize", "settle"):  # saved as it was found
            assert not saved[sig].minimized and saved[sig].case == first_cases[sig]
        if stage == "confirm":
            assert meta["unconfirmed"] is True
            assert all(f["unconfirmed"] for f in report["findings"])


def test_a_fault_merging_two_findings_keeps_both(tmp_path, device, monkeypatch):
    """One case shows two signatures: the second finding would be merged into the first
    (`_absorb`). Merging raises: the second stays a finding of its own, saved with the error."""
    import cases as hand
    from kvfuzz.corpus import environment_versions, read_case_dir
    from kvfuzz.engines.common import Found
    from kvfuzz.judge import judge

    case = hand.decode(ps=3, B=6, delta=3)  # a page size the mutant accepts, and its in-place write
    verdict = judge(case, InProcessExecutor(MUTANT, device).run(case))
    founds = {f.signature: Found(f, case, case) for f in verdict.findings}
    assert len(founds) == 2
    cfg = campaign.CampaignConfig(ops=["decode_metadata"], target=MUTANT, device=device, minimize_budget_s=0,
                                  confirm_tries=2)
    pipe = FindingPipeline(cfg, InProcessExecutor(MUTANT, device), lambda: InProcessExecutor(MUTANT, device), device,
                           environment_versions(), DirectoryCorpus(tmp_path / "corpus"))
    monkeypatch.setattr(FindingPipeline, "_absorb", _raise)
    for f in founds.values():
        assert pipe.add(f) == "new"
    pipe.settle(dict(founds))
    assert {s for x in pipe.saved for s in x.signatures} == set(founds)
    assert len(pipe.saved) == 2 and all(x.path is not None for x in pipe.saved)
    (err,) = pipe.internal_errors
    assert err["stage"] == "absorb" and err["signature"] in founds
    absorbed = next(x for x in pipe.saved if x.found.finding.signature == err["signature"])
    assert read_case_dir(absorbed.path).case.meta["internal_errors"][0]["stage"] == "absorb"
