"""One defect, one finding: findings of a campaign whose minimized case shows the others'
signatures are one finding, one saved case listing every signature, and a later campaign
knows each listed signature."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kvfuzz.campaign import CampaignConfig, run_campaign
from kvfuzz.corpus import DirectoryCorpus, iter_cases
from kvfuzz.jobs import merge_reports

from conftest import REPO

# one planted defect that shows two signatures on every case it touches: a length above 1000
# makes the kernel write a wrong split count AND bump that length in its input
TWO_SIGNATURES = '''
from kvfuzz.kernels import get_num_kv_splits


def get_num_kv_splits_triton(out, seq_lens, num_seq, *args):
    get_num_kv_splits(out, seq_lens, num_seq, *args)
    if int(seq_lens[:num_seq].max()) > 1000:
        out.fill_(70)
        seq_lens[:1].add_(1)
'''


def campaign(target: str, corpus: Path, device: str, seed: int = 0):
    return run_campaign(CampaignConfig(ops=["num_kv_splits"], target=target, device=device, budget_s=30,
                                       max_cases=64, seed=seed, corpus=corpus, in_contract_only=True,
                                       minimize_budget_s=20))


@pytest.mark.slow  # campaign-sized: `pytest -m slow`
def test_one_defect_with_two_signatures_is_one_finding_and_one_case(tmp_path, device):
    target = tmp_path / "two_signatures.py"
    target.write_text(TWO_SIGNATURES)
    corpus = tmp_path / "corpus"
    result = campaign(str(target), corpus, device)
    [x] = result.saved
    kinds = sorted(s.split(":")[2] for s in x.signatures)
    assert kinds == ["input_modified", "mismatch"], x.signatures
    [(path, saved)] = list(iter_cases(corpus))  # the other finding's first case is gone
    assert path == x.path and list(saved.signatures) == x.signatures
    assert saved.case.meta["signatures"] == x.signatures
    [f] = result.report()["findings"]
    assert f["signatures"] == x.signatures and f["new"]
    # when it was first seen: within the op's fuzzing, at one of the cases it ran
    op = result.report()["ops"]["num_kv_splits"]
    assert 0 <= f["found_after_s"] <= op["seconds"] and 1 <= f["found_at_case"] <= op["cases"]
    # a second campaign on the same corpus: both signatures are known, neither adds a case
    again = campaign(str(target), corpus, device)
    assert again.new == [] and {s for y in again.saved for s in y.signatures} == set(x.signatures)
    assert len(list(iter_cases(corpus))) == 1
    assert DirectoryCorpus(corpus).listing("num_kv_splits", str(target), x.signatures[1]) == x.path


@pytest.mark.slow
def test_the_console_prints_one_finding_with_its_signatures(tmp_path, device):
    target = tmp_path / "two_signatures.py"
    target.write_text(TWO_SIGNATURES)
    out = subprocess.run([sys.executable, "-m", "kvfuzz.cli", "fuzz", "--op", "num_kv_splits", "--target",
                          str(target), "--device", device, "--budget", "30", "--max-cases", "64",
                          "--in-contract-only", "--minimize-budget", "20", "--corpus", str(tmp_path / "c")],
                         capture_output=True, text=True, timeout=600, cwd=REPO)
    assert out.returncode == 1, out.stdout + out.stderr
    assert out.stdout.count("FINDING ") == 1 and "  also shows: num_kv_splits:splits:" in out.stdout, out.stdout
    assert "1 new findings" in out.stdout


def test_shards_findings_that_share_a_signature_are_one():
    a = {"signature": "op:p:mismatch:t:all", "signatures": ["op:p:mismatch:t:all", "op:p:input_modified:s:all"],
         "new": False}
    b = {"signature": "op:p:input_modified:s:all", "new": True}
    c = {"signature": "op:p:crash:-:SIGSEGV", "new": True}
    shard = {"seconds": 1.0, "cases": 1, "ops": {}}
    merged = merge_reports([dict(shard, findings=[a]), dict(shard, findings=[b, c])], 2)
    assert [f["signatures"] for f in merged["findings"]] == [a["signatures"], [c["signature"]]]
    assert merged["findings"][0]["new"] is True
    json.dumps(merged)


def test_merged_shards_keep_the_feature_filter_and_sum_what_confirming_cost():
    op = {"cases": 3, "seconds": 2.0, "confirm_seconds": 1.5, "confirm_batches": 2}
    shard = {"seconds": 2.0, "cases": 3, "findings": [], "feature": ["mode:paged"]}
    merged = merge_reports([dict(shard, ops={"x": dict(op)}), dict(shard, ops={"x": dict(op, confirm_batches=1)})], 2)
    assert merged["feature"] == ["mode:paged"]
    assert merged["ops"]["x"]["confirm_seconds"] == 3.0
    assert merged["ops"]["x"]["confirm_batches"] == 3


def test_merged_batch_shards_report_no_atheris_figures():
    from kvfuzz.reports import engine_figures

    shard = {"seconds": 1.0, "cases": 1, "findings": []}
    batch = merge_reports([dict(shard, ops={"x": {"engine": {"launches": 3}}})] * 2, 2)
    assert batch["ops"]["x"]["engine"] == {"launches": 6}
    assert engine_figures(batch["ops"]["x"]["engine"]) == {}
    fuzzed = merge_reports([dict(shard, ops={"x": {"engine": {"execs": 10, "execs_per_s": 5.0, "lives": 1,
                                                              "cov": c, "ft": 7}}}) for c in (3, 4)], 2)
    assert fuzzed["ops"]["x"]["engine"] == {"execs": 20, "execs_per_s": 10.0, "lives": 2, "cov": 4, "ft": 7}
