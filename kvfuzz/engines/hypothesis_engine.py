"""The Hypothesis engine: generate cases from `kvfuzz.strategies`, judge each, and let
Hypothesis shrink every new finding while it keeps its exact signature.

Hypothesis stops a test at its first failure, so a campaign runs in chunks of examples,
each chunk under its own seed derived from the campaign's (same seed, same cases). Inside
a chunk the test function records every finding; the first new signature raises, which
makes Hypothesis shrink toward the smallest case with that same signature.
"""

from __future__ import annotations

import hashlib
import time
from typing import Callable

from hypothesis import HealthCheck, Phase, Verbosity, given, settings
from hypothesis import seed as hyp_seed
from hypothesis.errors import HypothesisException

from .. import strategies
from ..case import Case
from ..judge import Verdict
from ..worker import Executor
from .base import Engine, EngineOptions, OpRun, run_engine
from .common import Found, OpStats, fit_target

CHUNK = 64  # examples per Hypothesis run


class _NewFinding(Exception):
    """Raised inside the Hypothesis test to make it shrink; never escapes the engine."""


def chunk_seed(seed: int, op: str, chunk: int) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}:{op}:{chunk}".encode()).digest()[:8], "little")


class HypothesisEngine(Engine):
    """Chunks of Hypothesis examples. Hypothesis drives its own loop and cannot be asked for
    one case at a time, so the engine meets the interface from inside it: the test function
    judges the case Hypothesis proposes and hands the verdict to `OpRun.take`; a signature
    `take` records is what the test function raises on, to make Hypothesis shrink."""

    name = "hypothesis"

    def fuzz(self, run: OpRun) -> None:
        op, executor, o = self.op, self.executor, self.options
        stats, found = run.stats, run.found
        rerun_every = o.rerun_every
        strategy = strategies.cases(op, o.in_contract_only, o.variant or None)  # judged by the variant, with its arguments
        lacks = getattr(executor, "lacks", {})
        if lacks.get(op):
            strategy = strategy.map(lambda c: fit_target(c, lacks))

        def judged(case: Case) -> Verdict:
            repeats = 2 if rerun_every and (stats.cases + stats.shrink_runs) % rerun_every == 0 else 1
            stats.reruns += repeats - 1
            prepared, outcome = self.checker.run(case, repeats)
            stats.cross_checked += outcome.cross is not None  # every in-contract run, shrinking's too
            return self.checker.verdict(prepared, outcome)

        chunk = run.start  # chunks of the stream: a resumed campaign starts past those it ran
        while run.in_time() and stats.cases < run.max_cases:
            state: dict = {"sig": None, "best": None, "shrink_deadline": None}

            @hyp_seed(chunk_seed(o.seed, op, chunk))
            @settings(max_examples=min(CHUNK, run.max_cases - stats.cases), deadline=None, database=None,
                      phases=[Phase.generate, Phase.shrink], report_multiple_bugs=False,
                      suppress_health_check=list(HealthCheck), verbosity=Verbosity.quiet)
            @given(strategy)
            def test(case: Case) -> None:
                # one raise site: Hypothesis tells failures apart by where they are raised
                if interesting(case):
                    raise _NewFinding

            def interesting(case: Case) -> bool:
                if state["sig"] is None:  # generating
                    if not run.in_time() or stats.cases >= run.max_cases:
                        return False
                    new = run.take(judged(case), case)  # judged alone already: the sink sees it at once
                    if new:
                        state.update(sig=new[0].signature, best=case, found_at=time.monotonic(),
                                     shrink_deadline=time.monotonic() + o.shrink_budget_s)
                    return bool(new)
                # shrinking: only the exact signature counts; past the budget only the best does
                if time.monotonic() >= state["shrink_deadline"]:
                    return case == state["best"]
                stats.shrink_runs += 1
                verdict = judged(case)
                match = [f for f in verdict.findings if f.signature == state["sig"]]
                if match:  # case and finding move together: an interrupt may save them any time
                    state["best"] = case
                    found[state["sig"]].case, found[state["sig"]].finding = case, match[0]
                return bool(match)

            t_chunk = time.monotonic()
            try:
                test()
            except _NewFinding:
                pass
            except HypothesisException:  # e.g. flaky: the shrunk case did not replay; keep what we have
                pass
            if state["sig"] is not None:  # shrinking does not eat the generation budget
                run.extend(time.monotonic() - max(t_chunk, state["found_at"]))
            if state["sig"] is not None and state["best"] is not None:
                entry = found[state["sig"]]
                if state["best"] != entry.first:
                    entry.case = state["best"]
                    entry.shrunk_by.append("hypothesis")
            chunk += 1
            stats.position = chunk


def fuzz_op(op: str, executor: Executor, *, seed: int, budget_s: float, max_cases: int,
            in_contract_only: bool = False, variant: str | None = None, rerun_every: int = 10,
            shrink_budget_s: float = 20.0, known: dict[str, Found] | None = None,
            on_case: Callable[[OpStats, Verdict], None] | None = None,
            on_new: Callable[[Found], None] | None = None,
            stats: OpStats | None = None, start: int = 0,
            until: float | None = None) -> tuple[OpStats, dict[str, Found]]:
    """Fuzz one op with Hypothesis outside a campaign (tests) until the budget or the case
    count runs out. Returns stats and findings keyed by signature. `on_new` sees each new
    finding as it is first seen, before any shrinking; it runs inside Hypothesis' test
    function, so it must not raise."""
    options = EngineOptions(seed=seed, in_contract_only=in_contract_only, variant=variant,
                            rerun_every=rerun_every, shrink_budget_s=shrink_budget_s)
    return run_engine(HypothesisEngine(op, executor, options), budget_s=budget_s, max_cases=max_cases,
                      start=start, until=until, known=known, stats=stats, on_case=on_case, sink=on_new)
