"""`--time-limit`: a nightly gives each target a fixed slot. Confirming findings extends an op's
budget (so a target full of known defects still gets fuzzed), which can make a run take three
times its budget and cut the last target of the night; under a time limit every op the target
has gets a share of the wall clock (plan.py) and the run ends inside it."""

from __future__ import annotations

import time

import pytest

from kvfuzz.campaign import CampaignConfig, run_campaign
from kvfuzz.cli import main
from kvfuzz.errors import BadInput


@pytest.mark.slow
def test_a_defective_target_fuzzes_every_op_and_ends_inside_its_limit(seed_path, tmp_path, device):
    """The seed has defects in all three of its ops: without the limit, a budget this large
    would keep the first op busy for 20 minutes."""
    limit = 45.0
    cfg = CampaignConfig(ops=["decode_metadata", "swa_spec_page_table", "num_kv_splits", "q8kv8_topk_length"],
                         target=str(seed_path), device=device, budget_s=3600, minimize_budget_s=30,
                         corpus=tmp_path / "corpus", time_limit_s=limit)
    t = time.monotonic()
    r = run_campaign(cfg)
    took = time.monotonic() - t
    ran = {s.op: s.cases for s in r.stats if not s.skipped}
    assert set(ran) == {"decode_metadata", "swa_spec_page_table", "num_kv_splits"}  # the seed has no q8kv8
    assert all(n > 0 for n in ran.values()), ran
    assert r.saved and not r.interrupted
    # the plan ends a reserve before the limit, plus a batch or a minimizing step in flight
    # and closing the workers; without the limit the first op alone would run 1200 s. The bound
    # is loose so that a slow host (CI) passes: it tells the two apart, not how fast the host is.
    assert took < 2 * limit, took


def test_time_limit_must_be_positive(capsys):
    with pytest.raises(BadInput, match="--time-limit must be > 0"):
        CampaignConfig(ops=["num_kv_splits"], time_limit_s=0).validate()
    assert main(["fuzz", "--time-limit", "-1", "--budget", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--time-limit must be > 0" in err[0]


def test_fair_share_splits_what_is_left_over_the_findings_waiting():
    import time as _t

    from kvfuzz.pipeline import fair_share
    assert fair_share(None, 3) is None
    now = _t.monotonic()
    until = now + 30.0
    first = fair_share(until, 3)
    assert now + 9.0 <= first <= now + 10.5  # a third of what is left, not all of it
    assert abs(fair_share(until, 1) - until) < 0.5  # the last one gets the rest
    assert fair_share(now - 5.0, 2) <= _t.monotonic() + 0.01  # a spent slot gives nothing


def test_a_finding_keeps_back_time_for_confirming_its_minimized_case():
    import time as _t

    from kvfuzz.pipeline import minimize_seconds
    from kvfuzz.confirm import Confirmation
    until = _t.monotonic() + 20.0
    slow = Confirmation("s", 3, 3, seconds=8.0)  # its fresh workers took 8 s: keep 12 s back
    assert 7.0 <= minimize_seconds(30.0, until, slow) <= 8.1
    assert 19.0 <= minimize_seconds(30.0, until, None) <= 20.1
    assert minimize_seconds(5.0, until, slow) == 5.0
    assert minimize_seconds(30.0, None, slow) == 30.0
    assert minimize_seconds(30.0, until, Confirmation("s", 3, 3, seconds=20.0)) == 0.0
