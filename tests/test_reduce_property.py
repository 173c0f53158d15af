"""kvfuzz.reduce tested as Hypothesis tests a shrinker: random choice sequences replayed through
the ops' real generators, random `still_fails` and `admissible` predicates (some of which raise),
random time budgets read from a fake clock. Whatever they are, `reduce` ends, never raises, and
returns a case that still fails and is admissible, with a record that replays to it."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvfuzz.reduce import CHOICES, recorded, reduce, replay
from kvfuzz.strategies import GENERATORS
from kvfuzz.strategies.draw import RandomDraw, RecordingDraw

pytestmark = pytest.mark.filterwarnings("ignore:Conversion of an array with ndim > 0:DeprecationWarning")

OPS = sorted(GENERATORS)
KINDS = ("int", "choice", "bool")


class Raised(Exception):
    pass


def recorded_case(op: str, raw: list[tuple[str, int]]):
    """The case `op`'s generator makes from the raw answers `raw`, carrying the record of the
    choices it really took."""
    rec = {"op": op, "variant": None, "violation": None, "lacks": [], "class_choices": 0}
    case, taken = replay(rec, [(kind, 0, 1 << 32, v) for kind, v in raw])
    rec.update(choices=[list(c) for c in taken], digest=case.digest())
    return case.with_meta(**{CHOICES: rec})


def _bits(case, salt: int) -> int:
    return int.from_bytes(hashlib.blake2b(case._identity() + salt.to_bytes(8, "little"), digest_size=8).digest(),
                          "little")


def _elements(case) -> int:
    return case.size_key()[0]


@st.composite
def predicates(draw, original):
    """A deterministic predicate true of `original` (which it never raises on): true of a
    candidate with at least `floor` elements where a salted hash of the case lets it through,
    raising where another hash says so."""
    floor = draw(st.integers(0, _elements(original)))
    salt = draw(st.integers(0, 2**32))
    keep = draw(st.sampled_from([1, 1, 2, 3, 8]))  # 1 in `keep` cases above the floor still fails
    raise_one_in = draw(st.sampled_from([0, 0, 2, 5]))  # 0: never raises
    ident = original._identity()

    def pred(case) -> bool:
        if case._identity() == ident:
            return True
        h = _bits(case, salt)
        if raise_one_in and h % raise_one_in == 0:
            raise Raised(f"predicate {salt} raised")
        return _elements(case) >= floor and (h >> 8) % keep == 0
    return pred


class FakeClock:
    """Advances `step` seconds each time it is read; counts its reads."""

    def __init__(self, step: float) -> None:
        self.now, self.step, self.reads = 1000.0, step, 0

    def __call__(self) -> float:
        self.reads += 1
        self.now += self.step
        return self.now


def drawn(op: str, seed: int) -> list[tuple[str, int]]:
    """The answers a seeded random draw gives `op`'s generator (the batched engine's sequences)."""
    gen = GENERATORS[op]
    d = RecordingDraw(RandomDraw(seed))
    gen.case_in_stint(d, gen.class_for(None)(d), None)
    return [(c[0], c[3]) for c in d.choices]


# arbitrary answers (clamped into each draw's bounds as they replay), or a random stream's
raw_choices = st.lists(st.tuples(st.sampled_from(KINDS), st.integers(0, 1 << 20)), max_size=120)


def _reduce_ends_and_returns_a_case_that_still_fails(op, raw, data, budget, step):
    case = recorded_case(op, drawn(op, raw) if isinstance(raw, int) else raw)
    still_fails = data.draw(predicates(case), label="still_fails")
    admissible = data.draw(predicates(case), label="admissible")
    clock = FakeClock(step)
    r = reduce(case, still_fails, budget_s=budget, admissible=admissible, clock=clock)
    assert r is not None
    assert still_fails(r.case) and admissible(r.case)
    rec = recorded(r.case)
    assert rec is not None and replay(rec, rec["choices"])[0] == r.case
    assert (r.case._identity() == case._identity()) == (not r.log)
    if step:  # it reads the clock before each candidate: the budget bounds its work
        assert r.steps_tried <= budget / step + 1
        assert not r.complete or clock.now - 1000.0 <= budget + step


_REDUCE_ARGS = dict(op=st.sampled_from(OPS), raw=st.one_of(raw_choices, st.integers(0, 2**32)), data=st.data(),
                    budget=st.floats(0.0, 40.0), step=st.sampled_from([0.0, 0.01, 0.1, 1.0]))
_HEALTH = [HealthCheck.too_slow, HealthCheck.data_too_large]

# the fast suite's share: a step of 0 never ends the budget, so an example runs to its fixpoint
# (up to seconds): the fast suite's eight are the same on every run (derandomized), and the
# thorough run below draws ten times as many, new ones each run
test_reduce_ends_and_returns_a_case_that_still_fails = settings(
    max_examples=8, derandomize=True, deadline=None, suppress_health_check=_HEALTH)(given(**_REDUCE_ARGS)(
        _reduce_ends_and_returns_a_case_that_still_fails))
test_reduce_ends_and_returns_a_case_that_still_fails_thoroughly = pytest.mark.thorough(settings(
    max_examples=80, deadline=None, suppress_health_check=_HEALTH)(given(**_REDUCE_ARGS)(
        _reduce_ends_and_returns_a_case_that_still_fails)))


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(op=st.sampled_from(OPS), raw=raw_choices, salt=st.integers(0, 2**32))
def test_a_size_function_that_raises_rejects_its_candidate_only(op, raw, salt):
    """`size` raising on a candidate (not on the original) costs that candidate only."""
    from kvfuzz.minimize import rank

    case = recorded_case(op, raw)
    ident = case._identity()

    def size(c):
        if c._identity() != ident and _bits(c, salt) % 3 == 0:
            raise Raised("size")
        return rank(c)
    # 100 candidates: a third of them raise, which is the behaviour under test
    r = reduce(case, lambda c: True, budget_s=1.0, admissible=lambda c: True, size=size, clock=FakeClock(0.01))
    assert r is not None and recorded(r.case) is not None


def test_an_accepted_bisection_that_shortens_the_choices_is_read_afresh():
    """The IndexError of issue 33's campaigns: an accepted bisection of an integer choice made
    the generator draw fewer choices, and the loop over the sequence's indices went past its new
    end. This seeded sequence and predicate (found by the search above) shorten it so."""
    op = "flashmla_kv_indices"
    case = recorded_case(op, drawn(op, 3294916953))
    ident = case._identity()

    def still_fails(c) -> bool:
        return c._identity() == ident or (_elements(c) >= 178 and (_bits(c, 1912923437) >> 8) % 3 == 0)
    r = reduce(case, still_fails, budget_s=5.0, admissible=lambda c: True, clock=FakeClock(0.002))
    assert r is not None and r.log and still_fails(r.case)
    rec = recorded(r.case)
    assert rec is not None and replay(rec, rec["choices"])[0] == r.case
