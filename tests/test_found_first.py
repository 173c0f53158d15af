"""A finding that stands for several signatures (one defect, one finding) was found when the
first of them was: a defect whose partial mismatch showed at case 129 and whose fuller case
(showing both) came at case 641 is reported at case 129. Time to a finding (`kvfuzz mutants`'
time to kill, scripts/seeded_defect_times.py) reads `found_after_s` and `found_at_case`."""

from __future__ import annotations

from pathlib import Path

import pytest

import kvfuzz.campaign as campaign
from kvfuzz.pipeline import FindingPipeline
from kvfuzz.worker import InProcessExecutor

MUTANT = str(Path(__file__).resolve().parent / "fixtures" / "mutant_kernels.py")


@pytest.mark.parametrize("earlier_first", [True, False])
def test_one_finding_for_two_signatures_keeps_the_earliest_time(tmp_path, device, earlier_first):
    import cases as hand
    from kvfuzz.corpus import DirectoryCorpus, environment_versions
    from kvfuzz.engines.common import Found
    from kvfuzz.judge import judge

    case = hand.decode(ps=3, B=6, delta=3)  # the mutant shows two signatures on it
    verdict = judge(case, InProcessExecutor(MUTANT, device).run(case))
    sigs = sorted(f.signature for f in verdict.findings)
    assert len(sigs) == 2
    times = {sigs[0]: (5.0, 129), sigs[1]: (22.0, 641)}
    founds = {f.signature: Found(f, case, case, found_after_s=times[f.signature][0],
                                 found_at_case=times[f.signature][1]) for f in verdict.findings}
    cfg = campaign.CampaignConfig(ops=["decode_metadata"], target=MUTANT, device=device, minimize_budget_s=0,
                                  confirm_tries=2)
    pipe = FindingPipeline(cfg, InProcessExecutor(MUTANT, device), lambda: InProcessExecutor(MUTANT, device), device,
                           environment_versions(), DirectoryCorpus(tmp_path / "corpus"))
    order = sigs if earlier_first else sigs[::-1]
    for s in order:
        assert pipe.add(founds[s]) == "new"
    pipe.settle({s: founds[s] for s in order})
    (x,) = pipe.saved
    assert set(x.signatures) == set(sigs)
    assert (x.found.found_after_s, x.found.found_at_case) == (5.0, 129)
