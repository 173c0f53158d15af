"""The batched engine keeps to its budget when cases are slow: each batch is sized to the
budget left from what its stint's cases took (kvfuzz/engines/case_cost.py), and on the CPU a
stint not yet measured runs one case before a batch of them. An interpreted production case
takes seconds; a batch of 16 drawn blind ends minutes past the budget.

The executor here is the real one (the builtin kernels under Triton's interpreter), slowed by
a fixed sleep per case launched, so that the cost is known and the same on every host."""

from __future__ import annotations

import time

import pytest

from kvfuzz.engines.batch_engine import fuzz_op
from kvfuzz.engines.case_cost import CaseCost
from kvfuzz.worker import InProcessExecutor

STINT = 64
SLOW_S = 0.25  # a slow case's seconds


class Slowed(InProcessExecutor):
    """Sleeps `slow(i)` seconds for the i-th case launched (the stream's order: no packing on
    the CPU), and records each batch's size and when the first slow case ran."""

    def __init__(self, slow) -> None:
        super().__init__("builtin", "cpu")
        self.slow, self.launched, self.sizes, self.first_slow = slow, 0, [], None

    def collect(self):
        _, batch = self._pending
        self.sizes.append(sum(b.run for b in batch))
        for b in batch:
            if b.run:
                s = self.slow(self.launched)
                if s and self.first_slow is None:
                    self.first_slow = time.monotonic()
                time.sleep(s)
                self.launched += 1
        return super().collect()


def test_slow_cases_end_near_the_budget_not_a_batch_or_two_past_it():
    ex = Slowed(lambda i: SLOW_S)
    t0 = time.monotonic()
    stats, _ = fuzz_op("num_kv_splits", ex, seed=1, budget_s=2.0, max_cases=10**6, stint=STINT)
    over = time.monotonic() - (t0 + 2.0)
    # drawn blind, the first batch alone is 16 cases (4 s) and the one drawn behind it as long
    assert over <= 2 * SLOW_S + 0.5, (over, ex.sizes)
    assert ex.sizes[0] == 1  # the stint's probe
    assert stats.cases >= 4  # and the budget is used, not given up after the probe


def test_a_batch_of_slow_cases_stays_well_inside_the_workers_deadline_for_it():
    # the worker gives a batch the case timeout and a second a case: 16 interpreted production
    # cases (160 s) ran past it and were lost as a hang, then run again one by one
    ex = Slowed(lambda i: SLOW_S)
    stats, _ = fuzz_op("num_kv_splits", ex, seed=1, budget_s=30.0, max_cases=12, stint=STINT, case_timeout_s=1.4)
    assert stats.cases == 12 and stats.lost_batches == 0
    assert ex.sizes[0] == 1 and max(ex.sizes) == 2, ex.sizes  # half the case timeout (0.7 s): two slow cases


@pytest.mark.thorough  # 9 s
def test_a_slow_stint_after_a_fast_one_is_probed_before_a_batch_of_it_is_drawn():
    # the second stint's cases are slow: the cost learnt from the first says nothing of them
    ex = Slowed(lambda i: SLOW_S if i >= STINT else 0.0)
    t0 = time.monotonic()
    stats, _ = fuzz_op("num_kv_splits", ex, seed=1, budget_s=8.0, max_cases=10**6, stint=STINT)
    end = time.monotonic()
    assert ex.first_slow is not None and ex.first_slow < t0 + 8.0, "the fast stint took the whole budget"
    assert end - (t0 + 8.0) <= 2 * SLOW_S + 0.5, (end - t0, ex.sizes)
    assert stats.cases > STINT + 1
    # the sizes by stint: a probe of one opens each (the batch holding case STINT is one case)
    starts = [sum(ex.sizes[:k]) for k in range(len(ex.sizes))]
    assert ex.sizes[starts.index(0)] == 1 and ex.sizes[starts.index(STINT)] == 1, ex.sizes


def test_a_stints_cost_is_learnt_from_the_batches_that_ran_it():
    cost = CaseCost("cpu")
    assert cost.probe and not CaseCost("cuda").probe
    cost.learn(["a"], 2.0)
    assert cost.of("a") == 2.0
    cost.learn(["a", "b", "b"], 2.0 + 1.0)  # b's two cases share what a's leaves
    assert cost.of("b") == 0.5
    cost.learn(["a", "b"], 5.0)  # both known: scaled by the batch's time against the prediction (2.5)
    assert (cost.of("a"), cost.of("b")) == (4.0, 1.0)
    cost.learn(["c", "a"], 1.0)  # a overestimated: the batch is spread evenly
    assert cost.of("c") == 0.5 and cost.predicted(["a", "c", "z"]) == 4.5
