"""`kvfuzz fuzz --feature REGEX` (strategies/feature_filter.py, the batched engine): every case a
campaign runs has a matching feature, whether the class decides it (the pool is restricted, no
case dropped) or each case does (cases drawn and dropped, counted); a feature no case of an op
can have leaves the op not run with its reason; a pattern that does not compile is one line and
exit 2; the filtered stream is the same for the same seed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kvfuzz import campaign
from kvfuzz.errors import BadInput
from kvfuzz.strategies import GENERATORS
from kvfuzz.strategies.feature_filter import SAMPLES, class_hits, feature_filter

ROOT = Path(__file__).resolve().parents[1]


def _campaign(tmp_path: Path, op: str, feature: str, **kw) -> dict:
    cfg = campaign.CampaignConfig(ops=[op], device="cpu", budget_s=60, max_cases=kw.pop("max_cases", 48),
                                  minimize_budget_s=0, report=tmp_path / "r.json", features=(feature,), **kw)
    campaign.run_campaign(cfg)
    return json.loads((tmp_path / "r.json").read_text())


@pytest.mark.thorough  # seconds of processes and campaigns: CI's thorough stage
@pytest.mark.interpreter
def test_a_class_level_mode_restricts_the_pool_and_drops_no_case(tmp_path):
    doc = _campaign(tmp_path, "num_kv_splits", "max_num_seq:1024")
    op = doc["ops"]["num_kv_splits"]
    assert doc["feature"] == ["max_num_seq:1024"]
    assert op["status"] == "ran" and op["cases"] == 48
    assert op["coverage"]["max_num_seq:1024"] == op["cases"]  # every case has it
    assert not any(f.startswith("max_num_seq:") and f != "max_num_seq:1024" for f in op["coverage"])
    ff = op["feature_filter"]
    assert ff["patterns"] == ["max_num_seq:1024"] and ff["dropped"] == 0
    assert ff["class_level"] == ff["classes"] > 0


@pytest.mark.thorough  # seconds of processes and campaigns: CI's thorough stage
@pytest.mark.interpreter
def test_a_case_level_mode_draws_and_drops_the_rest_and_counts_them(tmp_path):
    doc = _campaign(tmp_path, "decode_metadata", "tombstone:req_to_token", max_cases=32, in_contract_only=True)
    op = doc["ops"]["decode_metadata"]
    assert op["status"] == "ran" and op["cases"] > 0
    assert op["coverage"]["tombstone:req_to_token"] == op["cases"]
    ff = op["feature_filter"]
    assert ff["dropped"] > 0 and ff["drawn"] == op["cases"] + ff["dropped"]
    assert ff["class_level"] < ff["classes"]


@pytest.mark.interpreter
def test_a_feature_no_case_of_the_op_can_have_leaves_it_not_run(tmp_path):
    doc = _campaign(tmp_path, "num_kv_splits", "tombstone:.*")
    op = doc["ops"]["num_kv_splits"]
    assert op["status"] == "not_run" and op["cases"] == 0
    assert op["reason"].startswith("no case has a feature matching 'tombstone:.*'")


@pytest.mark.nokernel
def test_the_filtered_pool_holds_only_classes_that_give_the_feature_and_is_the_same_by_seed():
    gen = GENERATORS["decode_metadata"]
    flt = feature_filter(["delta:verify"])
    pool = gen.pool(0, 48, "strict", flt)
    assert pool and pool == gen.pool(0, 48, "strict", feature_filter(["delta:verify"]))
    assert all(class_hits(gen, k, flt) == SAMPLES for k in pool)  # seq_len_delta is the class's
    assert all(k["seq_len_delta"] >= 16 for k in pool)
    assert pool != gen.pool(0, 48, "strict")
    assert gen.pool(0, 48, "strict", feature_filter(["no_such_feature"])) == []


@pytest.mark.nokernel
def test_a_bad_pattern_or_another_engine_is_refused():
    with pytest.raises(BadInput, match=r"--feature '\(' is not a regular expression"):
        feature_filter(["("])
    with pytest.raises(BadInput, match="--feature needs --engine batch"):
        campaign.CampaignConfig(ops=["num_kv_splits"], engine="hypothesis", features=("x",)).validate()


@pytest.mark.nokernel
def test_the_cli_refuses_a_pattern_that_does_not_compile_in_one_line():
    p = subprocess.run([sys.executable, "-m", "kvfuzz.cli", "fuzz", "--op", "num_kv_splits",
                        "--feature", "max_num_seq:(", "--budget", "1"],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 2, p.stderr
    assert p.stderr.strip().splitlines() == [p.stderr.strip()]
    assert "--feature 'max_num_seq:(' is not a regular expression" in p.stderr and "Traceback" not in p.stderr


@pytest.mark.nokernel
def test_a_campaign_directory_refuses_another_filter(tmp_path):
    cfg = campaign.CampaignConfig(ops=["num_kv_splits"], campaign_dir=tmp_path, features=("max_num_seq:1024",))
    campaign.CampaignState(cfg).note("num_kv_splits", 5, force=True)
    assert campaign.CampaignState(cfg).start("num_kv_splits") == 5
    with pytest.raises(BadInput, match="holds another campaign"):
        campaign.CampaignState(campaign.CampaignConfig(ops=["num_kv_splits"], campaign_dir=tmp_path,
                                                       features=("max_num_seq:2048",)))
