"""How long a case of each stint takes, measured from the batches that ran it, so that a batch
is sized to the budget left.

An interpreted production case takes seconds (q8kv8's 4.6-18 s under Triton's interpreter);
a batch of 16 such cases, and the one drawn behind it, would end minutes past the budget.
A stint's cost (its compile class and its violation, if any: a refused case costs nothing)
is learnt from the batches that ran its cases. On the CPU a stint not yet measured runs one
case first (its probe), so that no batch of unknown cost is larger than one case; on a GPU a
case costs milliseconds and the first batch of a class is mostly its compile, so no probe.
"""

from __future__ import annotations

from collections import Counter
from typing import Hashable

PROBE = {"cpu": True}  # devices where a stint not yet measured runs one case first


class CaseCost:
    def __init__(self, device: str) -> None:
        self.probe = PROBE.get(device, False)
        self.seconds: dict[Hashable, float] = {}  # stint key -> seconds a case

    def of(self, key: Hashable) -> float | None:
        return self.seconds.get(key)

    def predicted(self, keys: list[Hashable]) -> float:
        """Seconds a batch of these cases should take (a stint not yet measured counts 0)."""
        return sum(self.seconds.get(k, 0.0) for k in keys)

    def learn(self, keys: list[Hashable], seconds: float) -> None:
        """A batch of cases of these stints took `seconds`. Unmeasured stints share what the
        measured ones' costs leave of it; with every stint measured, each is scaled by how far
        the batch ran from its prediction (a case's cost drifts: the first batch has the compile)."""
        if not keys:
            return
        counts = Counter(keys)
        unknown = sum(n for k, n in counts.items() if k not in self.seconds)
        known_s = sum(self.seconds[k] * n for k, n in counts.items() if k in self.seconds)
        if unknown:
            rest = seconds - known_s
            per = rest / unknown if rest > 0 else seconds / len(keys)
            for k in counts:
                self.seconds.setdefault(k, per)
        elif known_s > 0:
            for k in counts:
                self.seconds[k] *= seconds / known_s
        else:
            for k in counts:
                self.seconds[k] = seconds / len(keys)
