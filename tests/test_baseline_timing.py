"""A `--baseline` run (and a `--time-limit` one) ends within its budget plus start-up, however
long confirmations take: none starts that cannot end by the run's deadline, and a finding left
unconfirmed is saved and reported as `unconfirmed` with its case, never dropped. On the H200 a
confirmation's fresh CUDA processes took 8-10 s each and a 10 s `--baseline` run that found
regressions ran up to 5 times its budget."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from kvfuzz import campaign
from kvfuzz.campaign import CampaignConfig, run_campaign
from kvfuzz.confirm import Confirmation
from kvfuzz.corpus import read_case_dir
from kvfuzz.worker import InProcessExecutor

TOTAL = "tl.store(cu_seqlens_k + B * cu_seqlens_k_stride_0, acc)"  # the seed's decode total of cu_seqlens_k
SPLITS = "if max_seq_len * 8 < min_seq_len * 10:"  # the seed's num_kv_splits threshold
SLOW_S = 6.0  # what the fake confirmation takes: fresh CUDA processes on the H200, scaled down
BUDGET_S = 12.0
SLACK_S = 2.5  # a batch in flight, attributing a site, closing the workers, on a busy host


def regressed_seed(seed_path: Path, tmp_path: Path) -> Path:
    """The seed with a one-line regression in decode_metadata and one in num_kv_splits, each
    shown within the first cases of its op."""
    source = seed_path.read_text()
    assert TOTAL in source and SPLITS in source
    target = tmp_path / "regressed.py"
    target.write_text(source.replace(TOTAL, TOTAL[:-1] + " + 1)", 1)
                      .replace(SPLITS, SPLITS.replace("* 8", "* 9"), 1))
    return target


@pytest.mark.thorough  # seconds of processes and campaigns: CI's thorough stage
def test_a_baseline_run_with_slow_confirmations_ends_in_time_and_keeps_its_findings(seed_path, tmp_path, device,
                                                                                   monkeypatch):
    calls = []

    def slow(saved, fresh, tries):
        calls.append(len(saved))
        time.sleep(SLOW_S)
        return [Confirmation(sc.finding.signature, tries, tries, SLOW_S) for sc in saved]

    monkeypatch.setattr("kvfuzz.pipeline.confirm_many", slow, raising=False)
    monkeypatch.setattr("kvfuzz.pipeline.confirm", lambda sc, fresh, tries: slow([sc], fresh, tries)[0])
    monkeypatch.setattr(campaign, "_fresh_workers", lambda ex, cfg, dev: lambda: InProcessExecutor(cfg.target, dev))
    cfg = CampaignConfig(ops=["num_kv_splits", "decode_metadata"], target=str(regressed_seed(seed_path, tmp_path)),
                         baseline=str(seed_path), device=device, in_contract_only=True,
                         budget_s=BUDGET_S, minimize_budget_s=5, seed=1, isolate=False, confirm_tries=2,
                         corpus=tmp_path / "corpus", report=tmp_path / "r.json")
    t = time.monotonic()
    r = run_campaign(cfg)
    took = time.monotonic() - t
    assert took <= r.startup_s + BUDGET_S + SLACK_S, (took, r.startup_s, calls)
    # every finding is kept: confirmed, or saved unconfirmed with its case and why (where the
    # first confirmation leaves the second op a turn: on a busy host it may leave it none)
    unconfirmed = [x for x in r.saved if x.unconfirmed]
    for x in unconfirmed:
        assert "time ran out" in x.unconfirmed_why and x.path is not None
        meta = read_case_dir(x.path).case.meta
        assert meta["unconfirmed"] is True and "time ran out" in meta["unconfirmed_why"]
    report = r.report()
    assert [f["signature"] for f in report["findings"] if f["unconfirmed"]] == \
        [x.found.finding.signature for x in unconfirmed]
    assert any(k == "regression" for k in (s.split(":")[2] for x in r.saved for s in x.signatures))


def test_findings_of_one_case_are_confirmed_in_one_set_of_processes(tmp_path, monkeypatch):
    """Two signatures of one case: one confirmation batch; the case runs once per process."""
    import cases as hand
    from kvfuzz.engines.common import Found
    from kvfuzz.findings import Finding
    from kvfuzz.pipeline import FindingPipeline

    batches = []

    def fake(saved, fresh, tries):
        batches.append([sc.finding.signature for sc in saved])
        return [Confirmation(sc.finding.signature, tries, tries, 0.1) for sc in saved]

    monkeypatch.setattr("kvfuzz.pipeline.confirm_many", fake)
    pl = FindingPipeline(CampaignConfig(ops=["decode_metadata"]), None, None, "cpu", {}, None)
    case = hand.decode(ps=1, delta=3)
    fs = [Found(Finding(kind, "decode_metadata", "general", "page_table", "all", "m"), case, case)
          for kind in ("mismatch", "untouched_write")]
    assert pl.add_many(fs) == ["new", "new"]
    assert batches == [[f.finding.signature for f in fs]] and set(pl.confirmed) == {f.finding.signature for f in fs}
    # past the deadline nothing starts: the finding is kept, unconfirmed, with why
    pl.deadline, pl.confirm_took = time.monotonic() + 0.5, [5.0]
    late = Found(Finding("mismatch", "decode_metadata", "general", "cu_seqlens_k", "all", "m"), case, case)
    assert pl.add(late) == "new" and len(batches) == 1
    (x,) = [x for x in pl.saved if x.found is late]
    assert x.unconfirmed and "time ran out" in x.unconfirmed_why
