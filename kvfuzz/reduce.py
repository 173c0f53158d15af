"""The generic reducer: shrink the choices that made a case, not the case.

A case the batched engine finds carries the record of the draws that made it
(`meta["choices"]`, see `record_case`): the op, the contract variant, the stint's violation,
the tensors its target lacks, and every choice of the compile class and of the case, each
(kind, lower bound, upper bound, answer). Replaying the choices through the op's generator
(`ReplayDraw`) gives the case again; a shorter or simpler sequence gives a simpler case of
the same generator, so one reducer serves every op without knowing any of them.

`reduce` shrinks the sequence as Hypothesis' shrinker does: each answer toward its
simplest (integers to their lower bound, then by bisection; choices toward the first
option; booleans to False), and spans of choices deleted (the draws after them then read
the choices that follow, clamped into their own bounds, and the simplest past the end). A
candidate is kept while `still_fails` holds. It must also be no larger in `minimize.rank`,
admissible by the minimizer's rule (a valid case in the original's contract class, aliased
inputs consistent), and its sequence must be simpler: shorter, or as long and smaller
answer by answer. That order is a well-order, so the loop ends without the time budget too.

`reduce` never raises for a candidate: a `still_fails`, `admissible` or `size` that raises on
one counts as "no" for it, and an accepted candidate that shortens the sequence is read afresh
before the next index is used. Its result is therefore the original case or a candidate
`still_fails` accepted. `clock` (default `time.monotonic`) is the time the budget is read from.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

from .case import Case
from .engines.common import fit_target
from .strategies import GENERATORS
from .strategies.coverage import CLASS_SEED
from .strategies.draw import Choice, CompileClass, RandomDraw, RecordingDraw, ReplayDraw

__all__ = ["CHOICES", "Reduced", "record_case", "recorded", "reduce", "replay"]

CHOICES = "choices"  # the meta key of a case's record
BISECT_SPAN = 1 << 16  # wider integers (a value recipe's seed) are only tried at their lower bound


@dataclass
class Reduced:
    case: Case  # carries the record of its own choices
    log: list[str]
    steps_tried: int  # candidates shown to still_fails
    seconds: float
    complete: bool  # False if the time budget ran out before a fixpoint


def record_case(case: Case, k: CompileClass, stream_seed: str, violation: str | None,
                variant: str | None, lacks: dict) -> Case:
    """`case`, drawn from `RandomDraw(stream_seed)` in pool class `k` (with `violation`), with
    the record of its choices in its meta; unchanged if they cannot be recorded (a class not
    drawn by `class_pool`) or do not replay to it. The case is drawn again, so a fuzzing
    loop records only the few cases that become findings."""
    gen = GENERATORS[case.op]
    class_seed = k.memo.get(CLASS_SEED)
    if class_seed is None:
        return case
    d = RecordingDraw(RandomDraw(class_seed))
    if gen.class_for(variant)(d) != k:
        return case
    n_class = len(d.choices)
    d.inner = RandomDraw(stream_seed)
    gen.case_in_stint(d, k, violation)
    record = {"op": case.op, "variant": variant, "violation": violation,
              "lacks": sorted(lacks.get(case.op, ())), "class_choices": n_class,
              "choices": [list(c) for c in d.choices], "digest": case.digest()}
    try:
        again, _ = replay(record, record["choices"])
    except Exception:
        return case
    return case.with_meta(**{CHOICES: record}) if again == case else case


def recorded(case: Case) -> dict | None:
    """The record in `case.meta` if it describes this very case (a case edited after it was
    recorded, by the minimizer's passes, no longer matches it)."""
    rec = case.meta.get(CHOICES)
    if not isinstance(rec, dict) or rec.get("op") != case.op or rec.get("op") not in GENERATORS:
        return None
    return rec if rec.get("digest") == case.digest() else None


def replay(record: dict, choices: Sequence[Sequence]) -> tuple[Case, list[Choice]]:
    """The case the op's generator makes from `choices`, and the choices it really took."""
    gen, variant = GENERATORS[record["op"]], record.get("variant")
    d = ReplayDraw(choices)
    k = gen.class_for(variant)(d)
    case = gen.case_in_stint(d, k, record.get("violation"))
    if variant:
        case = case.replace(variant=variant)
    return fit_target(case, {record["op"]: tuple(record.get("lacks", ()))}), d.choices


def _order(choices: Sequence[Sequence]) -> tuple:
    """Shortlex over the answers' distances from their simplest: what a kept candidate lowers."""
    return len(choices), tuple(int(c[3]) - int(c[1]) for c in choices)


def _candidates(choices: list[list]) -> Iterator[tuple[str, list[list]]]:
    """Simpler sequences: each answer to its simplest, then spans deleted (long ones first),
    then each answer one option lower (choices) or bisected (integers)."""
    n = len(choices)
    for i, (kind, lo, hi, v) in enumerate(choices):
        if v != lo:
            yield f"choice {i} ({kind} in [{lo}, {hi}]): {v} -> {lo}", _with(choices, i, lo)
    for span in (8, 4, 2, 1):
        for i in range(n - span, -1, -1):
            yield f"choices {i}..{i + span - 1} deleted", choices[:i] + choices[i + span:]
    for i, (kind, lo, hi, v) in enumerate(choices):
        if kind == "choice" and v - lo > 1:
            yield f"choice {i} (one of {hi + 1}): {v} -> {v - 1}", _with(choices, i, v - 1)


def _with(choices: list[list], i: int, v: int) -> list[list]:
    out = list(choices)
    out[i] = [*choices[i][:3], v]
    return out


def _says_yes(pred: Callable[[Case], Any], case: Case) -> bool:
    """`pred(case)`, where a predicate that raises says no."""
    try:
        return bool(pred(case))
    except Exception:
        return False


def reduce(case: Case, still_fails: Callable[[Case], bool], budget_s: float = 30.0,
           admissible: Callable[[Case], bool] | None = None,
           size: Callable[[Case], Any] | None = None,
           clock: Callable[[], float] = time.monotonic) -> Reduced | None:
    """Shrink `case`'s recorded choices while `still_fails` holds (None: it has no record, or
    it cannot be replayed or sized). `admissible` and `size` default to the minimizer's rule
    and `minimize.rank`."""
    from .minimize import _admissible, contract_class, rank  # the minimizer's rules (it imports this module)

    rec = recorded(case)
    if rec is None:
        return None
    t0 = clock()
    deadline = t0 + budget_s
    size = size or rank
    try:
        if admissible is None:
            klass = contract_class(case)
            admissible = lambda c: _admissible(c, klass)  # noqa: E731
        current, choices = replay(rec, rec["choices"])
        if current != case:
            return None
        choices = [list(c) for c in choices]
        cur_key = (size(current), _order(choices))
    except Exception:  # a record this generator cannot replay, or a case the rules cannot read
        return None
    tried: set[bytes] = {current._identity()}
    log: list[str] = []
    steps = 0

    def attempt(desc: str, cand_choices: list[list]) -> bool:
        """Replay, filter and test one candidate; True if it became the current case."""
        nonlocal current, choices, cur_key, steps
        try:
            cand, taken = replay(rec, cand_choices)
            key = (size(cand), _order(taken))
            simpler = key < cur_key  # no larger a case, and simpler choices
        except Exception:  # choices the generator cannot build from (or size): not a case
            return False
        if not simpler:
            return False
        ident = cand._identity()
        if ident == current._identity():  # the same case from simpler choices: keep them
            choices, cur_key = [list(c) for c in taken], key
            return True
        if ident in tried:
            return False
        tried.add(ident)
        if not _says_yes(admissible, cand):
            return False
        steps += 1
        ok = _says_yes(still_fails, cand)
        if ok:
            current, choices, cur_key = cand, [list(c) for c in taken], key
            log.append(f"choices: {desc}")
        return ok

    def bisect(i: int) -> bool:
        """Lower integer choice `i` as far as still_fails allows (its lower bound failed)."""
        progress = False
        kind, lo, hi, good = choices[i]
        bad = lo
        while good - bad > 1 and clock() < deadline:
            mid = (bad + good) // 2
            if i >= len(choices) or choices[i][:3] != [kind, lo, hi] or choices[i][3] != good:
                break  # an accepted move shortened the sequence or changed what choice i is
            if attempt(f"choice {i} (int in [{lo}, {hi}]): {good} -> {mid}", _with(choices, i, mid)):
                good, progress = mid, True
            else:
                bad = mid
        return progress

    complete = False
    while clock() < deadline:
        progress = False
        for desc, cand in _candidates(choices):
            if clock() >= deadline:
                break
            if attempt(desc, cand):
                progress = True
                break  # the candidates of the new sequence
        if progress:
            continue
        i = 0
        while i < len(choices) and clock() < deadline:  # an accepted bisection can shorten choices
            kind, lo, hi, v = choices[i]
            if kind == "int" and v - lo > 1 and hi - lo < BISECT_SPAN:
                progress |= bisect(i)
            i += 1
        if not progress:
            complete = clock() < deadline
            break
    result = current.with_meta(**{CHOICES: {**rec, "choices": choices, "digest": current.digest()}})
    return Reduced(result, log, steps, clock() - t0, complete)
