"""How a run shares `--budget` and `--time-limit` among its ops.

Each op's share is worked out when its turn comes, from what is left then: the time a worker
took to start, the kernels an op compiled, an op that ran past its share or one that ended
early are spread over the ops still to come, instead of the first op losing its share to the
start-up and the last ones losing theirs to the ops before them.

* `--budget` (generation time): each op gets an equal share of the budget left; an op that
  used less leaves the rest to the later ops, an op that used more takes it from no one.
* `--time-limit` (wall clock for the whole run): a reserve (`reserve_s`) is kept back for
  closing workers and writing the reports; each op gets an equal share of the time left
  before it, draws cases for the first `1 - MINIMIZE_SHARE` of its share (or its budget
  share, if less) and minimizes its findings in the rest; an op that has found nothing by then
  has nothing to minimize and draws on to the end of its share (engines.base.OpRun.until). An op whose turn comes with no time
  left is not run (the report says so); one whose turn comes in time draws at least its first
  batch (`Turn.first_by`), however small its share.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

MINIMIZE_SHARE = 0.4  # of an op's time-limit share: for minimizing its findings
RESERVE_SHARE = 0.05  # of the time limit: kept back for closing workers and writing the reports
RESERVE_MIN_S = 3.0  # ... but at least this (a Markdown report imports matplotlib)
RESERVE_MAX_SHARE = 0.25  # ... and at most this share of a short limit


def reserve_s(limit_s: float) -> float:
    """The end of a `limit_s` run kept back for closing workers and writing the reports."""
    return min(max(RESERVE_SHARE * limit_s, RESERVE_MIN_S), RESERVE_MAX_SHARE * limit_s)


@dataclass(frozen=True)
class Turn:
    """One op's share, as monotonic times (None: no time limit)."""

    op: str
    budget_s: float  # generation seconds (confirming findings extends them, never past fuzz_end)
    fuzz_end: float | None  # once it has a finding, it draws no case after this (none yet: op_end)
    op_end: float | None  # its findings' minimizing ends here
    first_by: float | None  # its first batch may start until this, whatever its share says (the run's end)


class Plan:
    """The ops of one run, in order; `turn(op)` when an op starts, `done(op, seconds)` when it
    has fuzzed. `now` is injectable (tests)."""

    def __init__(self, ops: list[str], budget_s: float, limit_s: float | None = None,
                 started: float | None = None) -> None:
        started = time.monotonic() if started is None else started
        self.pending = list(ops)
        self.budget_left = budget_s
        self.end = started + limit_s - reserve_s(limit_s) if limit_s else None  # the last op's share ends here
        self.turns: dict[str, Turn] = {}

    def turn(self, op: str, now: float | None = None) -> Turn | None:
        """`op`'s share from what is left now; None when a time limit leaves it no time."""
        now = time.monotonic() if now is None else now
        n = max(len(self.pending), 1)
        budget = max(self.budget_left, 0.0) / n
        if self.end is None:
            t = Turn(op, budget, None, None, None)
        elif now >= self.end:
            return None
        else:
            share = (self.end - now) / n
            fuzz = share * (1 - MINIMIZE_SHARE)
            t = Turn(op, min(budget, share), now + fuzz, now + share, self.end)
        self.turns[op] = t
        return t

    def done(self, op: str, fuzz_s: float) -> None:
        """`op` fuzzed for `fuzz_s` seconds: what it left of its budget share goes to the later
        ops; what it used beyond its share is charged to no one."""
        if op in self.pending:
            self.pending.remove(op)
        t = self.turns.get(op)
        if t is not None:
            self.budget_left -= min(fuzz_s, t.budget_s)
