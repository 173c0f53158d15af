"""`kvfuzz fuzz --feature REGEX`: a campaign of the cases having a feature that matches.

A feature is decided either by the compile class (a constexpr, a dtype, a production size:
every case of the class has it or none does) or per case (a tombstone drawn into one table, a
batch past 256 rows). One test serves both: each candidate class of the pool is sampled,
`SAMPLES` in-contract cases drawn from seeds of its own, and only the classes where some
sample matched enter the pool (a class-level feature: the pool is restricted and no case is
dropped later); the stream then drops each drawn case without a matching feature (a
case-level feature), and the engine counts what it drew and dropped. Nothing here depends on
the campaign's seed beyond the pool's, so the stream stays deterministic by seed.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Iterable

from ..errors import BadInput
from .coverage import CANDIDATES, CLASS_SEED
from .draw import CompileClass, RandomDraw

SAMPLES = 8  # in-contract cases drawn per candidate class to see which features it gives
HITS = "feature_hits"  # the key of a class's sampled matches in its memo


@dataclass(frozen=True)
class FeatureFilter:
    """Cases having a feature that fully matches one of `patterns` (several: any of them)."""

    patterns: tuple[str, ...]

    @property
    def regex(self) -> re.Pattern:
        return _compiled(self.patterns)

    def matches(self, features: Iterable[str]) -> bool:
        rx = self.regex
        return any(rx.fullmatch(f) for f in features)

    def describe(self) -> str:
        return " or ".join(repr(p) for p in self.patterns)


@functools.lru_cache(maxsize=32)
def _compiled(patterns: tuple[str, ...]) -> re.Pattern:
    return re.compile("|".join(f"(?:{p})" for p in patterns))


def feature_filter(patterns: Iterable[str] | None) -> FeatureFilter | None:
    """The filter of `--feature` values (None when none is given); BadInput, one line, for a
    pattern that does not compile."""
    patterns = tuple(patterns or ())
    if not patterns:
        return None
    for p in patterns:
        try:
            re.compile(p)
        except re.error as exc:
            raise BadInput(f"--feature {p!r} is not a regular expression: {exc}") from None
    return FeatureFilter(patterns)


def class_hits(gen, k: CompileClass, flt: FeatureFilter) -> int:
    """How many of the class's `SAMPLES` in-contract cases have a matching feature (kept in
    the class's memo: a pool asks once per class)."""
    memo = k.memo.setdefault(HITS, {})
    if flt not in memo:
        base = k.memo.get(CLASS_SEED) or k.describe()
        memo[flt] = sum(flt.matches(gen.all_features(gen.in_class(RandomDraw(f"{base}:feature:{j}"), k)))
                        for j in range(SAMPLES))
    return memo[flt]


def reachable(gen, draw_class, seed: int, regex: re.Pattern, candidates: int = CANDIDATES) -> dict[str, int]:
    """The features fully matching `regex` that an op's generator gives, each with the number
    of candidate classes (the pool's candidates, `SAMPLES` cases each) where a sample has it."""
    out: dict[str, int] = {}
    for i in range(candidates):
        base = f"{seed}:{gen.op}:class:{i}"
        k = draw_class(RandomDraw(base))
        seen: set[str] = set()
        for j in range(SAMPLES):
            seen |= {f for f in gen.all_features(gen.in_class(RandomDraw(f"{base}:feature:{j}"), k))
                     if regex.fullmatch(f)}
        for f in seen:
            out[f] = out.get(f, 0) + 1
    return dict(sorted(out.items()))
