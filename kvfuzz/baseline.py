"""`--baseline TARGET`: what a change broke.

Every case runs on the target and on a baseline target (the merge base of a pull request,
the previous release) from the same arena image, so both see identical inputs, strides and
guard bands, and each run is judged by the oracle. Against the two verdicts a case is:

* `regression`: the baseline right, the target wrong;
* `fixed`: the baseline wrong, the target right;
* `changed`: both wrong, differently (the target shows a signature the baseline does not,
  or, where it shows none of its own, the baseline one the target does not).

These are findings of their own kinds, beside the ordinary ones, with the ordinary finding
they stand on in their signature (`op:path:regression:TENSOR:KIND.WHERE`), so a regression is
new even where the target's ordinary signature is already known from other cases. The
classes live in `Checker` (check.py), the one checking path: confirmation in fresh processes,
the minimizer (a minimized regression is still a regression), replay and the pytest plugin
all see them. Two outputs that are wrong the same way but with other values are not told
apart (the signature is the same).

`BaselineExecutor` pairs the campaign's executor with a worker for the baseline; each batch
goes to both workers at once (two processes run side by side: a baseline run costs at most a
second run). The pair draws cases both targets can take: the target's contract variant where
the baseline takes its arguments, else the baseline's where the target takes its; an op where
neither fits is skipped with the reason, and a pair with no op in common is refused (`pair`).
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

from .case import Case
from .cross import _primarys, _single  # the cross-check's pairing helpers, the same here
from .errors import BadInput, TargetLoadError
from .execute import BatchResult, Launch, Outcome, Prepared, outcomes
from .findings import CLASSES, Finding
from .judge import Verdict, judge, quick_verdict
from .targets import variant_lacks
from .worker import Executor, InProcessExecutor, WorkerExecutor

# kinds that are kvfuzz's own or the machine's, never a difference between two targets; and a
# race, which shows on some runs only: one side showing it on a case and the other not says
# nothing about a change (the seed against itself on the H200 gave such pairs), so it stays the
# target's ordinary finding
NOT_COMPARED = ("oracle_disagreement", "backend_divergence", "nondeterministic") + CLASSES


def compare(target: Verdict, base: Verdict, baseline: str) -> list[Finding]:
    """The regression, fix or change one case shows between the target's verdict and the
    baseline's (`baseline`: its spec, for the messages); [] where they agree."""
    if target.not_target or base.not_target:
        return []
    mine = {f.signature: f for f in target.findings if f.kind not in NOT_COMPARED}
    theirs = {f.signature: f for f in base.findings if f.kind not in NOT_COMPARED}
    if set(mine) == set(theirs):
        return []
    if not theirs:
        return [_class("regression", f, f"baseline {baseline} is right on this case; the target: {f.message}")
                for f in mine.values()]
    if not mine:
        return [_class("fixed", f, f"the target is right on this case; baseline {baseline}: {f.message}")
                for f in theirs.values()]
    new = [f for s, f in mine.items() if s not in theirs]
    if new:
        return [_class("changed", f, f"both are wrong, differently: the target shows this, baseline {baseline} "
                                     f"shows {', '.join(sorted(theirs))}; the target: {f.message}") for f in new]
    return [_class("changed", f, f"both are wrong, differently: baseline {baseline} also shows this, the "
                                 f"target only {', '.join(sorted(mine))}; baseline: {f.message}")
            for s, f in theirs.items() if s not in mine]


def _class(kind: str, f: Finding, message: str) -> Finding:
    return Finding(kind, f.op, f.path, f.tensor, f"{f.kind}.{f.where}", message, f.cells)


def with_baseline(p: Prepared, outcome: Outcome, verdict: Verdict, baseline: str) -> Verdict:
    """`verdict` (the target's) with the classes its case shows against the baseline's run."""
    b = outcome.baseline
    base = quick_verdict(p, b) or judge(p.case, b, prepared=p)
    verdict.findings += compare(verdict, base, baseline)
    return verdict


class BaselineExecutor:
    """The campaign's executor plus the baseline's. What the target is, its compile counts and
    description are the primary's; what the pair can run (`missing`, `variants`, `lacks`,
    `takes`) is what both can."""

    description = _primarys("description")
    identity = _primarys("identity")
    launch_keys = _primarys("launch_keys")
    compiled = _primarys("compiled")

    def __init__(self, primary: Executor, baseline: Executor, spec: str, missing: dict, variants: dict,
                 fresh_primary: Callable[[], Executor] | None = None,
                 fresh_baseline: Callable[[], Executor] | None = None) -> None:
        self.primary, self.baseline, self.spec = primary, baseline, spec
        self.missing, self.variants = missing, variants
        self.fresh_primary, self.fresh_baseline = fresh_primary, fresh_baseline
        self._pending: tuple | None = None

    @property
    def lacks(self) -> dict:
        a, b = self.primary.lacks, self.baseline.lacks
        return {op: tuple(dict.fromkeys((*a.get(op, ()), *b.get(op, ())))) for op in {*a, *b}}

    @property
    def takes(self) -> dict:
        a, b = self.primary.takes, self.baseline.takes
        return {op: tuple(x for x in a.get(op, ()) if x in b.get(op, ())) for op in a}

    def run(self, case: Case, repeats: int = 1, torch_ref: bool | None = None) -> Outcome:
        out = self.primary.run(case, repeats, torch_ref)
        out.baseline = self._theirs(self.baseline.run(case, repeats, torch_ref=False), out)
        return out

    @staticmethod
    def _theirs(b: Outcome, mine: Outcome) -> Outcome:
        # one torch oracle for both: it depends on the case, not on the target
        b.torch_ref, b.torch_ref_error = mine.torch_ref, mine.torch_ref_error
        return b

    def submit(self, image: np.ndarray, batch: list[Launch]) -> None:
        """Both workers start on the same image at once; the baseline without the torch oracle."""
        self.primary.submit(image, batch)
        sub = [dataclasses.replace(b, torch_ref=False) for b in batch]
        self.baseline.submit(image, sub)
        self._pending = (image, sub)

    def collect(self) -> BatchResult:
        (image, sub), self._pending = self._pending, None
        result = self.primary.collect()
        other = self.baseline.collect()  # always: the baseline worker's protocol stays in step
        if result.lost:  # the engine re-runs it case by case (`run` pairs each case)
            return result
        if other.lost:  # pin the loss on its case: each launch alone, on the same image
            runs = [_single(self.baseline.run_batch(image, [b]), b) for b in sub]
        else:
            runs = outcomes(sub, other)
            for name, sec in other.stages.items():
                result.stages[f"baseline {name}"] = result.stages.get(f"baseline {name}", 0.0) + sec
        for i, r in enumerate(runs):
            r.torch_ref, r.torch_ref_error = result.torch_refs[i], result.torch_errors[i]
        result.baseline = dict(enumerate(runs))
        return result

    def run_batch(self, image: np.ndarray, batch: list[Launch]) -> BatchResult:
        self.submit(image, batch)
        return self.collect()

    def fresh(self) -> "BaselineExecutor":
        """Two processes that have run no case (confirmations)."""
        return self._paired(self.fresh_primary() if self.fresh_primary else self.primary.fresh(),
                            self.fresh_baseline() if self.fresh_baseline else self.baseline.fresh())

    def fresh_many(self, n: int) -> list["BaselineExecutor"]:
        """`n` pairs of fresh processes, started together."""
        mine = _many(self.fresh_primary, n) if self.fresh_primary else self.primary.fresh_many(n)
        theirs = _many(self.fresh_baseline, n) if self.fresh_baseline else self.baseline.fresh_many(n)
        return [self._paired(a, b) for a, b in zip(mine, theirs)]

    def _paired(self, a: Executor, b: Executor) -> "BaselineExecutor":
        return BaselineExecutor(a, b, self.spec, self.missing, self.variants)

    def close(self) -> None:
        try:
            self.primary.close()
        finally:
            self.baseline.close()


def _many(fresh: Callable[[], Executor], n: int) -> list[Executor]:
    """`n` fresh executors, started together where `fresh` is a worker's own `fresh` (on a GPU
    each process takes seconds to start: one after the other, a pair's confirmation stalls)."""
    many = getattr(getattr(fresh, "__self__", None), "fresh_many", None)
    return many(n) if many is not None else [fresh() for _ in range(n)]


def common_ground(primary: Executor, baseline: Executor, spec: str) -> tuple[dict, dict]:
    """(missing, variants) of the pair: an op either target lacks is missing, with the reason;
    each other op is drawn with the target's contract variant where the baseline takes its
    arguments, else with the baseline's where the target takes its, else it is missing too."""
    missing = dict(primary.missing)
    variants = {}
    for op, mine in primary.variants.items():
        if op in missing:
            continue
        if op in baseline.missing:
            missing[op] = f"baseline {spec}: {baseline.missing[op]}"
            continue
        theirs = baseline.variants.get(op, mine)
        if mine == theirs or not variant_lacks(op, mine, baseline):
            variants[op] = mine
        elif not variant_lacks(op, theirs, primary):
            variants[op] = theirs
        else:
            missing[op] = (f"the target and baseline {spec} cannot be compared: the target's variant {mine} "
                           f"passes {', '.join(variant_lacks(op, mine, baseline))}, which the baseline does not "
                           f"take, and the baseline's {theirs} passes {', '.join(variant_lacks(op, theirs, primary))}, "
                           "which the target does not take")
    return missing, variants


def pair(primary: Executor, fresh_primary: Callable[[], Executor] | None, target: str, spec: str, device: str,
         timeout_s: float, isolate: bool = True, standby: bool = False,
         ops: list[str] | None = None) -> BaselineExecutor:
    """`primary` joined by an executor for the baseline `spec` (a worker process when `isolate`),
    or BadInput, in one line, where the two cannot be compared: the baseline does not load,
    or no op of `ops` (None: every op) runs on both."""
    try:
        baseline = WorkerExecutor(spec, device, timeout_s, standby=standby) if isolate else \
            InProcessExecutor(spec, device)
    except TargetLoadError as exc:
        raise BadInput(f"--baseline {spec}: {exc}") from None
    missing, variants = common_ground(primary, baseline, spec)
    wanted = ops or list(primary.variants) + list(primary.missing)
    if not any(op not in missing for op in wanted):
        baseline.close()
        first = next((op for op in wanted if op in missing), None)
        raise BadInput(f"--baseline {spec}: target {target} and the baseline have no op in common to compare"
                       + (f" ({first}: {missing[first]})" if first else ""))
    fresh_baseline = None if isolate else (lambda: WorkerExecutor(spec, device, timeout_s))
    return BaselineExecutor(primary, baseline, spec, missing, variants, fresh_primary, fresh_baseline)
