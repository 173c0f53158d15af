"""Array values from a small recipe (pattern + RNG seed), so that large tables cost one draw
and shrink toward the simplest pattern and seed 0."""

from __future__ import annotations

import math

import numpy as np

INT32_MAX = 2**31 - 1


def rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


class LazyRng:
    """`rng(seed)`, made at the first call: a case whose values draw nothing skips its cost."""

    __slots__ = ("seed", "g")

    def __init__(self, seed: int) -> None:
        self.seed, self.g = seed, None

    def __call__(self) -> np.random.Generator:
        if self.g is None:
            self.g = rng(self.seed)
        return self.g


# token ids for req_to_token: simplest first
TOKEN_PATTERNS = ("arange", "permuted", "repeated", "random", "large", "negative", "zeros")
SWA_TOKEN_PATTERNS = ("arange", "permuted", "repeated", "random", "zeros")  # all inside [0, high)


def tokens(pattern: str, seed: int, shape: tuple[int, ...], high: int) -> np.ndarray:
    """Token ids in [0, high) (or around int32's edges for `large`/`negative`)."""
    n = int(math.prod(shape))
    if pattern == "arange":
        flat = np.arange(n, dtype=np.int64)
        if n > high:  # else the modulo changes nothing
            flat %= max(high, 1)
    elif pattern == "permuted":
        g = rng(seed)
        # distinct ids in random order, spread over [0, high): O(n), not O(high)
        step = max(high // max(n, 1), 1)
        flat = g.permutation(n)
        flat *= step
        flat += g.integers(0, step)
        if n * step > max(high, 1):  # else every id is below high already
            flat %= max(high, 1)
    elif pattern == "repeated":
        g = rng(seed)
        flat = g.choice(g.integers(0, max(high, 1), size=3), size=n)
    elif pattern == "random":
        flat = rng(seed).integers(0, max(high, 1), size=n)
    elif pattern == "large":
        flat = INT32_MAX - rng(seed).integers(0, 4096, size=n)
    elif pattern == "negative":
        flat = rng(seed).integers(-(2**31), 2**20, size=n)
    else:
        flat = np.zeros(n, dtype=np.int64)
    # a fresh array already; an empty one copied all the same (a copy's strides differ)
    return flat.reshape(shape).astype(np.int64, copy=n == 0)


def pick(seed: int, n: int, high: int, pattern: str) -> np.ndarray:
    """n indices in [0, high): a permutation when possible, all equal, or random with repeats."""
    if pattern == "sequential":
        return np.arange(n) % high
    g = rng(seed)
    if pattern == "permuted" and n <= high:
        return g.permutation(high)[:n]
    if pattern == "same":
        return np.full(n, int(g.integers(0, high)))
    return g.integers(0, high, size=n)


INDEX_PATTERNS = ("sequential", "permuted", "same", "random")
