"""One way to check a case: prepare it once, run it on a target, judge it.

A `Checker` is bound to an executor (a target on a device, in a worker process or in this
one) and an op. Every path that checks a case goes through one: the engines' batches and
their cases re-run alone, a finding's confirmation, the minimizer's candidates, a replay,
the pytest plugin's saved cases and the cross-check.

* The contract variant that judges the op on this target is settled once (`settle_variant`:
  the one the campaign, a replay and the pytest plugin all use).
* Each case is prepared once (`execute.prepare`: its classification, its NumPy oracle's
  answer and its arena plan). The run is told from the prepared case whether the torch
  oracle is due, so the worker does not classify it again; the judge reads the prepared case
  (`judge.judge(prepared=)`, `judge.quick_verdict`); the minimizer reads a candidate's
  contract class from it before the candidate is run (`minimize(assess=)`).
"""

from __future__ import annotations

from typing import Callable, Iterator

from .case import Case
from .execute import BatchResult, Launch, Outcome, Prepared, outcome_of, prepare
from .findings import runs_to_show
from .judge import Verdict, judge, quick_verdict
from .targets import check_variant, variant_for


def settle_variant(op: str, executor, spec: str, requested: str | None = None, forced_by: str = "",
                   hint: str = "") -> str:
    """The contract variant that judges `op`'s cases on the target `spec` (an executor
    carrying its `variants` and `takes`): `requested` where given (`--variant`, or a saved
    case's own variant replayed on its own target), refused in one line (BadInput, naming
    `forced_by` and `hint`) when the target cannot take that variant's arguments; else the
    variant the target selects (its SGLang release)."""
    if requested:
        check_variant(op, requested, executor, spec, forced_by or f"variant {requested}", hint)
        return requested
    return variant_for(op, None, executor)


class Checker:
    """Checks `op`'s cases on `executor`. `variant`: the contract variant settled for the
    target (`settled`), which `adopt` gives a case; None: each case keeps its own."""

    def __init__(self, executor, op: str, variant: str | None = None) -> None:
        self.executor, self.op, self.variant = executor, op, variant
        self._last: Prepared | None = None  # the last case prepared, asked for again by the minimizer

    @classmethod
    def settled(cls, executor, op: str, spec: str, requested: str | None = None, forced_by: str = "",
                hint: str = "") -> "Checker":
        """A checker judging by the variant `settle_variant` gives."""
        return cls(executor, op, settle_variant(op, executor, spec, requested, forced_by, hint))

    @classmethod
    def for_saved(cls, executor, case: Case, spec: str, own_target: bool, hint: str = "") -> "Checker":
        """A checker for a saved case replayed on `spec`: on the case's own target the case
        keeps its variant (refused, BadInput, where the target would drop its arguments); on
        another target it is judged by the variant that target selects (`adopt` gives it)."""
        return cls.settled(executor, case.op, spec, case.variant if own_target else None,
                           f"the case's variant {case.variant}", hint)

    def adopt(self, case: Case) -> Case:
        """`case` as this checker judges it: under its settled variant."""
        if self.variant is None or case.variant == self.variant:
            return case
        return case.replace(variant=self.variant)

    def prepare(self, case: Case, index: int = -1, stage: Callable[[str, float], None] | None = None) -> Prepared:
        """`case` classified, its NumPy oracle run and its arena planned, once: the same case
        object asked for again (the minimizer classifies a candidate, then runs it) is not
        prepared again."""
        last = self._last
        if last is not None and last.case is case and last.index == index:
            return last
        self._last = p = prepare(case, index, stage)
        return p

    def run(self, case: Case | Prepared, repeats: int = 1) -> tuple[Prepared, Outcome]:
        """The prepared case and its run alone (its own arena): `repeats` runs, the torch
        oracle where the case is in contract."""
        p = case if isinstance(case, Prepared) else self.prepare(case)
        return p, self.executor.run(p.case, repeats=repeats, torch_ref=p.status == "in_contract")

    def check(self, case: Case | Prepared, repeats: int = 1) -> Verdict:
        """The verdict on `case` (or a case already prepared) run alone."""
        return self.verdict(*self.run(case, repeats))

    def verdict(self, p: Prepared, outcome: Outcome) -> Verdict:
        """The verdict on a prepared case's run (`run`); with a baseline's run beside it, the
        regression, fix or change between the two too (baseline.py)."""
        return self._against_baseline(p, outcome, judge(p.case, outcome, prepared=p))

    def _against_baseline(self, p: Prepared, outcome: Outcome, verdict: Verdict) -> Verdict:
        if outcome.baseline is None:
            return verdict
        from .baseline import with_baseline

        return with_baseline(p, outcome, verdict, getattr(self.executor, "spec", "the baseline"))

    def verdicts(self, prepared: list[Prepared], batch: list[Launch], result: BatchResult,
                 packs=None) -> Iterator[tuple[Prepared, Outcome, Verdict]]:
        """Each case of a collected batch that was not lost, with its outcome (a view into the
        batch's arena, valid while `result` lives; a packed case's own arena unpacked from its
        launch's, packing.Packs) and its verdict: the fast path where whole arrays prove the run
        clean, else the full judge. A pack that changed a byte no case owns has its cases run alone."""
        clean = packs.clean(batch, result) if packs is not None else {}
        unpacked = packs.outcomes(batch, result, skip=clean) if packs is not None else {}
        for i, p in enumerate(prepared):
            if i in clean:  # its whole pack proved clean (judge.quick_pack)
                yield p, clean[i], Verdict(p.status, p.reasons, expected=p.expected)
                continue
            if (unpacked is None and i in packs.member_of) or (packs is not None and i in packs.rerun):
                again = self.run(p, repeats=2 if batch[packs.launch_of[packs.member_of[i][0]]].repeat else 1)
                yield p, again[1], self.verdict(*again)
                continue
            outcome = unpacked.get(i) if unpacked else None
            outcome = outcome or outcome_of(batch, result, i, copy=False)
            quick = quick_verdict(p, outcome)
            if quick is None and outcome.runs[0].device_clean:
                # the device proved its bytes clean but the torch oracle disagrees, and its bytes
                # stayed there: the case alone, judged in full
                again = self.run(p, repeats=len(outcome.runs))
                yield p, again[1], self.verdict(*again)
                continue
            yield p, outcome, self._against_baseline(p, outcome, quick) if quick else self.verdict(p, outcome)

    def still_fails(self, signature: str) -> Callable[[Case], bool]:
        """The minimizer's predicate: whether a candidate still shows `signature` (run as
        often as that kind needs). A candidate kvfuzz fails on does not."""
        repeats = runs_to_show(signature)

        def still_fails(candidate: Case) -> bool:
            try:
                return signature in self.check(candidate, repeats).signatures()
            except Exception:
                return False
        return still_fails
