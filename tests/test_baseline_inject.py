"""`--baseline` on a release with a one-line defect injected (scripts/inject_regressions.py's
0.5.14 set, on the seed, sglang 0.5.14's kernel file, which fails some decode cases by itself):
the defect is a regression even on a case the release fails elsewhere, and a campaign reports
it while the release's own defects stay shared, neither confirmed nor saved."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kvfuzz.baseline import pair
from kvfuzz.check import Checker
from kvfuzz.corpus import read_case_dir
from kvfuzz.worker import InProcessExecutor

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
from inject_regressions import DEFECTS, inject  # noqa: E402

CORPUS = Path(__file__).resolve().parents[1] / "corpora"
REGRESSION = "decode_metadata:swa:regression:cu_seqlens_k:mismatch.partial"
OWN = "decode_metadata:swa:mismatch:swa_page_table:all"  # the seed's own defect on that case


@pytest.fixture
def regressed(seed_path, tmp_path) -> Path:
    """The seed with `acc` -> `acc + 1` in the total of cu_seqlens_k."""
    _, _, old, new, nth, _ = next(d for d in DEFECTS["0.5.14"] if d[0] == "decode-general-total")
    path = tmp_path / "regressed.py"
    path.write_text(inject(seed_path.read_text(), old, new, nth))
    return path


def test_a_new_wrong_cell_on_a_case_the_release_fails_is_a_regression(regressed, seed_path, device):
    """09f1ce9ecaba5dda: the seed gets swa_page_table wrong; the copy gets that wrong the same
    way and cu_seqlens_k's total too. Judged per case it was `changed`; per cell a regression,
    and the seed's own defect is marked shared."""
    case = read_case_dir(CORPUS / "decode_metadata" / "09f1ce9ecaba5dda").case
    ex = pair(InProcessExecutor(str(regressed), device), None, str(regressed), str(seed_path), device, 60.0,
              isolate=False)
    try:
        verdict = Checker(ex, case.op).check(case)
    finally:
        ex.close()
    marks = {f.signature: f.against for f in verdict.findings}
    assert marks[OWN] == "shared" and marks["decode_metadata:swa:mismatch:cu_seqlens_k:partial"] == "regression"
    assert REGRESSION in marks
    assert not [s for s in marks if s.split(":")[2] in ("changed", "fixed")], marks


@pytest.mark.slow  # campaign-sized: CI's slow stage runs it (.ci/run)
def test_a_short_campaign_reports_the_regression_and_shares_the_rest(regressed, seed_path, tmp_path, device):
    """In worker processes, as `kvfuzz fuzz` runs: the confirmations borrow the pair's baseline
    worker (baseline.BaselineExecutor.fresh_many)."""
    from kvfuzz.campaign import CampaignConfig, run_campaign

    cfg = CampaignConfig(target=str(regressed), baseline=str(seed_path), ops=["decode_metadata"], device=device,
                         budget_s=60, max_cases=16, seed=1, isolate=True, in_contract_only=True,
                         minimize_budget_s=2, confirm_tries=2, corpus=tmp_path / "c")
    r = run_campaign(cfg)
    saved = {s for x in r.saved for s in x.signatures}
    assert [s for s in saved if s.split(":")[2] == "regression"], saved
    assert all(x.new and x.found.finding.kind == "regression" for x in r.saved), saved  # nothing else saved
    assert not r.flaky
    shared = {f.finding.signature for f in r.shared}
    assert shared and not shared & saved  # the seed's own decode defects: listed, not confirmed, not saved
    doc = r.report()
    assert {e["signature"] for e in doc["shared_with_baseline"]} == shared
    assert doc["against_baseline"]["regression"]
