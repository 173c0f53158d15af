"""What every op's NumPy oracle (`kvfuzz/ops/<op>/oracle.py`, `numpy_ref`) is built from.

The oracles are pure functions, independent of torch. Integer arithmetic is exact (Python ints
or int64 with explicit range checks): a value that would leave int32 where the kernel computes
in int32 raises `OutOfContract` (`check32`, `cdiv32`), never wraps.
"""

from __future__ import annotations

import numpy as np

from ..case import Case
from ..contract import INT32_MAX, INT32_MIN, OutOfContract


def cdiv(a: int, b: int) -> int:
    return (a + b - 1) // b


def check32(what: str, x: int) -> int:
    if not INT32_MIN <= x <= INT32_MAX:
        raise OutOfContract(f"{what} = {x} does not fit int32")
    return x


def cdiv32(what: str, a: int, b: int) -> int:
    """cdiv as a kernel computes it in int32: the numerator a + b - 1 must fit."""
    check32(f"{what} numerator", a + b - 1)
    return cdiv(a, b)


def outside(values: np.ndarray, end: int, start: int = 0) -> np.ndarray:
    """Where `values` lie outside [start, end)."""
    return (values < start) | (values >= end)


def first_at(mask: np.ndarray) -> int | tuple[int, ...]:
    """The first True position of `mask` (an int in 1-D, else a tuple): what a broken rule names."""
    at = tuple(int(i) for i in np.argwhere(mask)[0])
    return at[0] if len(at) == 1 else at


def not_int32(name: str, values: np.ndarray) -> str:
    """The rule an output value past int32 breaks, naming the first such cell."""
    at = first_at(outside(np.asarray(values, dtype=np.int64), INT32_MAX + 1, INT32_MIN))
    where = ", ".join(str(i) for i in (at if isinstance(at, tuple) else (at,)))
    return f"{name}[{where}] = {np.asarray(values)[at]} does not fit int32"


def empty_out(case: Case, name: str) -> np.ndarray:
    return np.zeros(case.tensors[name].shape, dtype=np.int64)
