"""Array values from a small recipe (pattern + RNG seed), so that large tables cost one draw
and shrink toward the simplest pattern and seed 0."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import strategies as st
from numpy.random import SeedSequence
from numpy.random.bit_generator import ISeedSequence

INT32_MAX = 2**31 - 1


def rng(seed: int) -> np.random.Generator:
    """`np.random.default_rng(seed)`, bit for bit, a quarter faster (a case seeds a few)."""
    if type(seed) is not int:
        return np.random.default_rng(seed)
    # default_rng is Generator(PCG64(SeedSequence(seed))), and PCG64 seeds itself from the
    # sequence's generate_state(4, np.uint64): that is done here, in plain Python, from the
    # sequence's pool (numpy's own loops over NumPy scalars, under np.errstate). Its 8 words
    # hash the pool's 4 in turn; each uint64 is a pair of them, the first the low half.
    p0, p1, p2, p3 = SeedSequence(seed).pool.tolist()
    w = _state_word
    state = np.array([w(p0, 0) | w(p1, 1) << 32, w(p2, 2) | w(p3, 3) << 32,
                      w(p0, 4) | w(p1, 5) << 32, w(p2, 6) | w(p3, 7) << 32], dtype=np.uint64)
    return np.random.Generator(np.random.PCG64(_Words(state)))


def _state_word(p: int, i: int) -> int:
    """Word i of SeedSequence.generate_state, from pool word p."""
    x, m = _STATE_HASH[i]
    v = ((p ^ x) * m) & 0xFFFFFFFF
    return v ^ (v >> 16)


class LazyRng:
    """`rng(seed)`, made at the first call: a case whose values draw nothing skips its cost."""

    __slots__ = ("seed", "g")

    def __init__(self, seed: int) -> None:
        self.seed, self.g = seed, None

    def __call__(self) -> np.random.Generator:
        if self.g is None:
            self.g = rng(self.seed)
        return self.g


def _state_hash() -> tuple[tuple[int, int], ...]:
    """SeedSequence.generate_state's hash constants for 8 words: (xor, multiplier) per word."""
    out, h = [], 0x8B51F9DD  # INIT_B
    for _ in range(8):
        nxt = (h * 0x58F38DED) & 0xFFFFFFFF  # MULT_B
        out.append((h, nxt))
        h = nxt
    return tuple(out)


_STATE_HASH = _state_hash()


class _Words(ISeedSequence):
    """A seed sequence whose state is already generated (PCG64 asks for 4 uint64 words)."""

    __slots__ = ("words",)

    def __init__(self, words: np.ndarray) -> None:
        self.words = words

    def generate_state(self, n_words: int, dtype=np.uint32) -> np.ndarray:
        if n_words != 4 or dtype is not np.uint64:
            raise ValueError(f"only PCG64's seeding (4 words of np.uint64), not {n_words} of {dtype}")
        return self.words


seeds = st.integers(0, 2**32 - 1)

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
