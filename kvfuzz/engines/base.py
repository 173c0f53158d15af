"""The engine interface, and the bookkeeping every engine shares.

An engine (`Engine.fuzz`) proposes the cases of one op, has them run and judged, and hands
every verdict to the op's `OpRun`, which does the rest once for all engines: the statistics,
the resume position, the timeline sample and the campaign's `on_case`, the budget (a deadline
that the time spent confirming findings extends, never past the hard stop `until`), the known
signatures, and the re-run alone of a new signature before it counts. A finding that counts
goes to `sink` (the campaign's finding pipeline: `pipeline.FindingPipeline.add`).

Each engine runs its cases its own way, so running stays inside the engine: the batched engine
pipelines batches through the worker, Hypothesis calls its test function from its own loop
(the engine's test function judges the case Hypothesis proposes and gives the verdict to
`OpRun.take`; what `take` returns, the new signatures, is what makes Hypothesis shrink), and
atheris runs each case inside libFuzzer's process for coverage (its verdicts come back over a
pipe and are handed to `take` there, with the case re-run alone in the campaign's worker).
"""

from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, ClassVar

from ..case import Case
from ..check import Checker
from ..execute import Prepared
from ..findings import Finding
from ..judge import Verdict
from ..worker import Executor
from .common import Found, OpStats

if TYPE_CHECKING:
    from ..strategies.feature_filter import FeatureFilter


@dataclass
class EngineOptions:
    """What a campaign tells every engine; each engine reads the fields it uses."""

    seed: int = 0  # the case stream's seed (a shard's own)
    pool_seed: int | None = None  # the compile classes' seed (the campaign's: the same for every shard)
    shard: tuple[int, int] = (1, 1)
    device: str = "cpu"
    target: str = "builtin"
    in_contract_only: bool = False
    variant: str | None = None
    rerun_every: int = 1  # the determinism re-run of every N-th case (0: never)
    batch: int | None = None  # cases per synchronisation (batched engine); None: per device
    # cases per packed launch (batched engine, packing.py); None: the op's default on the device
    # (PackSpec.default), 0 or 1: none
    pack: int | None = None
    cross_every: int = 0  # every N-th case also runs on the cross-check backend (batched engine)
    case_timeout_s: float = 60.0
    shrink_budget_s: float = 20.0  # Hypothesis' own shrinking of a new finding
    campaign_dir: Path | None = None  # where atheris keeps its libFuzzer inputs (else kvfuzz's cache)
    feature: FeatureFilter | None = None  # --feature: only cases with a matching feature (batched engine)


class OpRun:
    """One op's fuzzing as every engine shares it. `known` and `stats` are updated in place,
    so a caller interrupted midway keeps what was found and counted."""

    def __init__(self, op: str, *, budget_s: float, max_cases: int, start: int = 0, until: float | None = None,
                 known: dict[str, Found] | None = None, stats: OpStats | None = None,
                 on_case: Callable[[OpStats, Verdict], None] | None = None,
                 sink: Callable[[Found], None] | None = None, first_by: float | None = None,
                 until_clean: float | None = None, to_minimize: Callable[[], bool] | None = None,
                 sink_many: Callable[[list[Found]], None] | None = None) -> None:
        self.stats = OpStats(op) if stats is None else stats
        self.found: dict[str, Found] = {} if known is None else known
        self.max_cases = max_cases  # this run's: a resumed stream counts from `start`
        self.start = start
        self.stats.position = start
        self.on_case, self.sink = on_case, sink
        self.sink_many = sink_many  # takes the findings one case shows together (confirmed in one batch)
        self.t0 = time.monotonic()
        self.deadline = self.t0 + budget_s
        self._until = math.inf if until is None else until  # a hard stop (--time-limit)
        # ... which, while the op has found nothing (nothing to minimize in the rest of its
        # share), moves on to this (plan.Turn.op_end)
        self._until_clean = until_clean
        # whether any finding waits to be minimized (the campaign's pipeline knows: a finding the
        # baseline shares, or one set aside as flaky, needs none); None: any finding does
        self._to_minimize = to_minimize
        # until then the op's first case is drawn however little of its share is left (the
        # run's end under --time-limit: an op whose turn came runs at least one batch)
        self.first_by = first_by
        self.extended = 0.0  # seconds that do not count as fuzzing (confirming, Hypothesis' shrinking)
        self.set_aside: set[str] = set()  # signatures that did not show with their case run alone
        self._gathered: list[Found] | None = None  # findings held for one `sink_many` (`gathering`)

    @property
    def until(self) -> float:
        """The hard stop now: the op's share's end while it has found nothing to minimize, else
        the end of its drawing (the rest of the share minimizes what it found)."""
        if self._until_clean is not None and not (self._to_minimize() if self._to_minimize else self.found):
            return max(self._until, self._until_clean)
        return self._until

    def time_left(self) -> float:
        return min(self.deadline + self.extended, self.until) - time.monotonic()

    def in_time(self) -> bool:
        if self.time_left() > 0:
            return True
        return not self.stats.cases and self.first_by is not None and time.monotonic() < self.first_by

    def extend(self, seconds: float) -> None:
        """`seconds` spent on something other than fuzzing: the budget moves on by as much."""
        self.extended += seconds

    def take(self, verdict: Verdict, case: Case | None, *, position: int | None = None, features=(),
             alone: Callable[[Case], Verdict] | None = None,
             not_alone: Callable[[Finding, Verdict], None] | None = None,
             keep: Callable[[], Case] | None = None) -> list[Finding]:
        """Count `verdict` (of `case`, the stream's case `position - 1`) and record its new
        signatures. Where the verdict was not given by the case run alone (inside a batch, in
        the fuzzing process), `alone(case)` runs it alone first and a signature counts only if
        it shows there; `not_alone` gets each one that does not (no `not_alone`: it is set
        aside, never reported again). `keep` gives the case a finding records, if not `case`
        (the batched engine draws it again with its choices recorded). Returns the findings
        recorded."""
        s = self.stats
        s.count(verdict)
        if position is not None:
            s.position = max(s.position, position)
        s.features.update(features)
        s.sample(time.monotonic() - self.t0, len(self.found))
        if self.on_case:
            self.on_case(s, verdict)
        new = [f for f in verdict.findings if f.signature not in self.found and f.signature not in self.set_aside]
        if not new or case is None:
            return []
        again = verdict if alone is None else alone(case)
        seen = {f.signature: f for f in again.findings}
        recorded, entries = [], []
        for f in new:
            if f.signature in self.found:  # recorded meanwhile (a batch's cases run alone by `not_alone`)
                continue
            if f.signature in seen:
                entry = self.add(seen[f.signature], case if keep is None else keep(), sink=self.sink_many is None)
                entries.append(entry)
                recorded.append(entry.finding)
            elif not_alone is not None:
                not_alone(f, again)
            else:
                self.set_aside.add(f.signature)
        if entries and self.sink_many is not None:
            self._sink_many(entries)
        return recorded

    def _sink_many(self, entries: list[Found]) -> None:
        if self._gathered is not None:
            self._gathered += entries
            return
        t = time.monotonic()
        self.sink_many(entries)
        self.extend(time.monotonic() - t)

    @contextlib.contextmanager
    def gathering(self):
        """The findings recorded inside go to `sink_many` together at its end: the new findings of
        a batch's cases are confirmed in one set of fresh processes, not one set per case. On an
        exception (an interrupt) they stay recorded, unsunk, as a finding recorded mid-way does."""
        if self.sink_many is None or self._gathered is not None:
            yield
            return
        self._gathered = []
        try:
            yield
        except BaseException:
            self._gathered = None
            raise
        entries, self._gathered = self._gathered, None
        if entries:
            self._sink_many(entries)

    def add(self, finding: Finding, case: Case, sink: bool = True) -> Found:
        """Record a new finding and hand it to the sink (unless `sink` is False: the caller hands
        it on); the seconds that takes (confirmation) do not count as fuzzing."""
        entry = self.found[finding.signature] = Found(
            finding, case, case, found_after_s=round(time.monotonic() - self.t0 - self.extended, 2),
            found_at_case=self.stats.cases)
        if sink and self._gathered is not None:
            self._gathered.append(entry)
        elif sink and self.sink:
            t = time.monotonic()
            self.sink(entry)
            self.extend(time.monotonic() - t)
        return entry

    def finish(self) -> tuple[OpStats, dict[str, Found]]:
        self.stats.seconds = time.monotonic() - self.t0
        self.stats.sample(self.stats.seconds, len(self.found), every_s=0.0)  # the timeline ends where the op did
        return self.stats, self.found


class Engine:
    """An engine for one op: `fuzz` proposes cases until `run` says the budget or the case
    count is spent, and hands every verdict to `run.take`."""

    name: ClassVar[str]

    def __init__(self, op: str, executor: Executor, options: EngineOptions) -> None:
        self.op, self.executor, self.options = op, executor, options
        self.checker = Checker(executor, op, options.variant)  # prepares, runs and judges every case

    @classmethod
    def missing(cls) -> str | None:
        """Why the engine cannot run here (an extra not installed), or None."""
        return None

    def fuzz(self, run: OpRun) -> None:
        raise NotImplementedError

    def alone(self, case: Case | Prepared) -> Verdict:
        """`case` (or the case already prepared) run alone in the executor, re-run as the
        determinism check asks."""
        return self.checker.check(case, repeats=2 if self.options.rerun_every else 1)


def run_engine(engine: Engine, **run: object) -> tuple[OpStats, dict[str, Found]]:
    """Fuzz `engine`'s op with an `OpRun` made of `run` (its keyword arguments); returns the
    op's stats and its findings keyed by signature."""
    op_run = OpRun(engine.op, **run)
    engine.fuzz(op_run)
    return op_run.finish()
