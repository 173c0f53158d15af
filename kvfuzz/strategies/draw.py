"""One generator, two sources of choices: Hypothesis (explores and shrinks) or a seeded RNG (fast).

Every case generator in `kvfuzz.strategies` is written against `Draw`: `integer`, `choice`,
`boolean`, `seed`. `HypothesisDraw` turns each call into a Hypothesis draw, so the public
strategies (`decode_cases()`, ...) keep Hypothesis' search and shrinking; `RandomDraw` answers
from `random.Random`, about a hundred times cheaper per case, for the batched engine;
`FuzzedDraw` answers from libFuzzer's bytes (the atheris engine). The same code therefore
defines what every engine can reach. `RecordingDraw` keeps the choices any of them made,
and `ReplayDraw` answers from such a record: kvfuzz's generic reducer (`kvfuzz.reduce`)
shrinks the record and replays it through the generator.

Choices are ordered simplest first: Hypothesis shrinks `choice` toward the first option,
`boolean` toward False and `integer` toward its lower bound.

`CompileClass` is the part of a case that selects a compiled kernel variant (see
`kvfuzz.specialize`): the batched engine draws a few classes on purpose and runs many cases
inside each. `int_class` and `fit` are Triton's integer specialisation rule (a value of 1
is a constant, a multiple of 16 is marked divisible, anything else is plain).
"""

from __future__ import annotations

import abc
import random
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping, Sequence, TypeVar

T = TypeVar("T")

# Triton's integer specialisation classes (triton.runtime.jit: `== 1` and `% 16 == 0`)
ONE, DIV16, PLAIN = "one", "div16", "plain"
INT_CLASSES = (PLAIN, DIV16, ONE)


def int_class(v: int) -> str:
    return ONE if v == 1 else DIV16 if v % 16 == 0 else PLAIN


def fit(v: int, cls: str) -> int:
    """The smallest value >= v in integer class `cls` (ONE only admits 1; v > 1 stays plain)."""
    if cls == DIV16:
        return -(-v // 16) * 16
    if cls == ONE:
        return 1 if v <= 1 else fit(v, PLAIN)
    while int_class(v) != PLAIN:
        v += 1
    return v


def round16(v: int) -> int:
    return -(-v // 16) * 16


ZERO = "zero"  # a row length of 0: an empty tensor (Triton's class of its row stride is ONE)
WIDTH_CLASSES = (PLAIN, DIV16, ONE, ZERO)


def width_class(v: int) -> str:
    """The class of a row length: ZERO, ONE, or that of the contiguous row stride it makes."""
    return ZERO if v == 0 else int_class(v)


def narrower(v: int, cls: str) -> int:
    """The largest row length <= v of class `cls` (0 if there is none)."""
    while v > 0 and width_class(v) != cls:
        v -= 1
    return max(v, 0)


def width(v: int, cls: str) -> int:
    """A row length of class `cls`, at least v where the class allows (ZERO and ONE are
    exactly 0 and 1: the caller draws them only when v <= 1 suffices)."""
    if cls == ZERO:
        return 0
    if cls == ONE:
        return 1
    if cls == DIV16:
        return max(round16(v), 16)
    return fit(max(v, 2), PLAIN)


class Draw(abc.ABC):
    """The choices a case generator makes."""

    @abc.abstractmethod
    def integer(self, lo: int, hi: int) -> int:
        """An int in [lo, hi]."""

    @abc.abstractmethod
    def choice(self, options: Sequence[T]) -> T:
        """One of `options` (simplest first)."""

    @abc.abstractmethod
    def boolean(self) -> bool: ...

    def seed(self) -> int:
        """A 32-bit seed for a NumPy value recipe (large tables cost one draw)."""
        return self.integer(0, 2**32 - 1)

    def one_of(self, *makers: Callable[[], T]) -> T:
        """Call one of `makers` (the first is the simplest)."""
        return makers[self.integer(0, len(makers) - 1)]()


class RandomDraw(Draw):
    # int bounds take randrange's own fast path (`start + _randbelow(width)`) without its
    # argument checks; anything else goes through randint/randrange, which raise as before
    __slots__ = ("rnd", "_below")

    def __init__(self, seed: int | str) -> None:
        self.rnd = random.Random(seed)
        self._below = self.rnd._randbelow

    def integer(self, lo: int, hi: int) -> int:
        if type(lo) is int and type(hi) is int and hi >= lo:
            return lo + self._below(hi - lo + 1)
        return self.rnd.randint(lo, hi)

    def choice(self, options: Sequence[T]) -> T:
        n = len(options)
        return options[self._below(n) if n else self.rnd.randrange(n)]

    def boolean(self) -> bool:
        return self.rnd.random() < 0.5

    def seed(self) -> int:
        return self.rnd.getrandbits(32)


class HypothesisDraw(Draw):
    """Wraps the `draw` of an `@st.composite` strategy."""

    __slots__ = ("draw",)

    def __init__(self, draw: Callable[[Any], Any]) -> None:
        self.draw = draw

    def integer(self, lo: int, hi: int) -> int:
        from hypothesis import strategies as st

        return self.draw(st.integers(lo, hi))

    def choice(self, options: Sequence[T]) -> T:
        from hypothesis import strategies as st

        return self.draw(st.sampled_from(list(options)))

    def boolean(self) -> bool:
        from hypothesis import strategies as st

        return self.draw(st.booleans())


class FuzzedDraw(Draw):
    """Answers from an `atheris.FuzzedDataProvider` over libFuzzer's bytes. Exhausted bytes
    answer the lower bound (the simplest choice), so a short input is a small case and the
    same bytes always decode to the same case."""

    __slots__ = ("fdp",)

    def __init__(self, fdp: Any) -> None:
        self.fdp = fdp

    def integer(self, lo: int, hi: int) -> int:
        return self.fdp.ConsumeIntInRange(lo, hi)

    def choice(self, options: Sequence[T]) -> T:
        return options[self.fdp.ConsumeIntInRange(0, len(options) - 1)]

    def boolean(self) -> bool:
        return self.fdp.ConsumeBool()


# A recorded choice: (kind, a, b, answer). "int": answer in [a, b]; "choice": answer the index
# of the option taken among b options (a = 0); "bool": answer 0 or 1 (a = 0, b = 1). In each
# kind the answer `a` is the simplest.
Choice = tuple[str, int, int, int]


class RecordingDraw(Draw):
    """Any `Draw`, with the choices it answered kept in `choices` (`kvfuzz.reduce` shrinks
    them). The inner draw is asked exactly what it would be asked alone, so a seeded
    `RandomDraw` gives the same case with or without the recording."""

    __slots__ = ("inner", "choices")

    def __init__(self, inner: Draw) -> None:
        self.inner = inner
        self.choices: list[Choice] = []

    def integer(self, lo: int, hi: int) -> int:
        v = self.inner.integer(lo, hi)
        self.choices.append(("int", int(lo), int(hi), int(v)))
        return v

    def choice(self, options: Sequence[T]) -> T:
        v = self.inner.choice(options)
        i = next(i for i, o in enumerate(options) if o is v)  # inner draws hand back one of the options
        self.choices.append(("choice", 0, len(options) - 1, i))
        return v

    def boolean(self) -> bool:
        v = self.inner.boolean()
        self.choices.append(("bool", 0, 1, int(v)))
        return v

    def seed(self) -> int:
        v = self.inner.seed()
        self.choices.append(("int", 0, 2**32 - 1, v))
        return v


class ReplayDraw(Draw):
    """Answers from a recorded choice sequence, one choice per call: an answer that no longer
    fits the call (another kind, or outside its bounds, after an earlier choice changed) is
    clamped into them, and past the end every call gets its simplest answer, as Hypothesis
    replays a shrunk buffer. `choices` holds what was really answered, so a replay is also
    a recording (of a sequence that replays to the same case)."""

    __slots__ = ("recorded", "choices")

    def __init__(self, recorded: Sequence[Sequence]) -> None:
        self.recorded = recorded
        self.choices: list[Choice] = []

    def _answer(self, kind: str, lo: int, hi: int) -> int:
        i = len(self.choices)
        v = lo
        if i < len(self.recorded):
            r = self.recorded[i]
            v = min(max(int(r[3]), lo), hi) if r[0] == kind else lo
        self.choices.append((kind, lo, hi, v))
        return v

    def integer(self, lo: int, hi: int) -> int:
        return self._answer("int", lo, hi)

    def choice(self, options: Sequence[T]) -> T:
        return options[self._answer("choice", 0, len(options) - 1)]

    def boolean(self) -> bool:
        return bool(self._answer("bool", 0, 1))


@dataclass(frozen=True)
class CompileClass:
    """The properties of a case that select a compiled variant, as sorted (name, value) pairs.

    Everything a Triton kernel specialises on must be fixed by the class: constexpr values
    exactly, dtypes, 16-byte alignment of every pointer, the integer class of every stride,
    size and scalar a kernel receives. Cases of one class differ in values and in sizes that
    keep those classes, so a target compiles each of its kernels once per class."""

    op: str
    items: tuple[tuple[str, Any], ...]

    # a name -> value index (a case looks up dozens) and `memo`, what generators derive from
    # the class once for all its cases: neither is a field, so neither is compared nor pickled
    def __post_init__(self) -> None:
        self.__dict__["_index"] = dict(reversed(self.items))  # reversed: the first of a repeated name wins
        self.__dict__["memo"] = {}

    def __getstate__(self) -> dict:
        return {"op": self.op, "items": self.items}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self.__post_init__()

    @classmethod
    def of(cls, op: str, params: Mapping[str, Any]) -> "CompileClass":
        return cls(op, tuple(sorted(params.items())))

    def __getitem__(self, name: str) -> Any:
        return self._index[name]

    def get(self, name: str, default: Any = None) -> Any:
        return self._index.get(name, default)

    def __iter__(self) -> Iterator[tuple[str, Any]]:
        return iter(self.items)

    def describe(self) -> str:
        return f"{self.op}{{" + ", ".join(f"{k}={v}" for k, v in self.items) + "}"
