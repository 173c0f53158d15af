"""The re-run schedule kvfuzz and the repro script share (kvfuzz/rerun_schedule.py)."""

from __future__ import annotations

from kvfuzz.rerun_schedule import run_schedule


def schedule(repeats, matters, fault_at=None):
    """The runs made, as (alt, probe, bands), with `matters(run)` saying whether a run's fill
    matters and a CUDA fault at run number `fault_at`."""
    made = []

    def once(alt, probe, bands):
        made.append((alt, probe, bands))
        return (alt, probe), len(made) != fault_at

    run_schedule(repeats, ["a", "b"], lambda name: ("before", "after") if name == "a" else ("before", "gap", "after"),
                 once, lambda first, run: matters(run))
    return made


def test_a_clean_pair_makes_no_probe():
    assert schedule(2, lambda run: False) == [(False, None, ()), (True, None, ())]
    assert schedule(1, lambda run: True) == [(False, None, ())]


def test_an_input_whose_fill_matters_is_probed_band_by_band_after_all_its_bands_at_once():
    made = schedule(2, lambda run: run[1] in (None, "b:*"))
    assert made == [(False, None, ()), (True, None, ()), (False, None, ()), (False, None, ()),
                    (True, "a:*", ("before", "after")),
                    (True, "b:*", ("before", "gap", "after")),
                    (True, "b:before", ("before",)), (True, "b:before", ("before",)),
                    (True, "b:gap", ("gap",)), (True, "b:gap", ("gap",)),
                    (True, "b:after", ("after",)), (True, "b:after", ("after",)),
                    (False, None, ())]


def test_a_cuda_fault_ends_the_schedule():
    assert len(schedule(2, lambda run: True, fault_at=1)) == 1
    assert len(schedule(2, lambda run: True, fault_at=5)) == 5


def test_judge_steps_by_status_and_run():
    """The checks kvfuzz's judge and the repro script make (kvfuzz/judge_flow.py), per status
    and first run: both run these steps, in this order."""
    from kvfuzz.judge_flow import judge_steps

    assert judge_steps("in_contract", False, False, True) == ["memory", "outputs", "reruns"]
    assert judge_steps("in_contract", True, False, True) == ["raised", "memory", "reruns"]
    assert judge_steps("in_contract", True, True, False) == ["lost"]
    assert judge_steps("must_refuse", False, False, True) == ["invalid_accepted", "memory", "reruns"]
    assert judge_steps("must_refuse", True, False, True) == ["memory", "unchanged_outputs", "reruns"]
    assert judge_steps("must_refuse", True, True, False) == ["lost"]
    assert judge_steps("out_of_contract", True, False, True) == ["memory", "reruns"]
    assert judge_steps("out_of_contract", False, False, True) == ["memory", "reruns"]
    assert judge_steps("out_of_contract", True, False, False) == []
