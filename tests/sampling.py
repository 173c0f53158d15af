"""The fast suite's sample of a long family of tests. The rest is marked `thorough`: not in the
README's test command, run by `pytest -n auto -m thorough` and, a sixth of them a commit
(`thorough_shard`), by CI's second stage.

* `fast_if_first`: an item runs in the fast suite where it is the first to show one of its
  keys (its kind, its op, its expectation);
* `sampled`: a per-op (or per-anything) family runs one value in `share` in the fast suite; which
  values is fixed by the family's name, so different families cover different ops."""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Sequence

import pytest

THOROUGH = pytest.mark.thorough


def first_of_each(keys: Sequence[Iterable]) -> list[bool]:
    """Per item, whether it leaves the fast suite: True where every key it has was shown by an
    item before it."""
    seen: set = set()
    out = []
    for ks in keys:
        ks = set(ks)
        out.append(ks <= seen)
        seen |= ks
    return out


def _thorough(p, leave: bool):
    if not leave:
        return p
    return pytest.param(*p.values, id=p.id, marks=[*p.marks, THOROUGH])


def fast_if_first(params: Sequence, keys: Sequence[Iterable]) -> list:
    """`params` (pytest.param objects), `thorough` added to every one `first_of_each` sends there."""
    return [_thorough(p, leave) for p, leave in zip(params, first_of_each(keys))]


def sampled(family: str, values: Iterable, share: int = 4) -> list:
    """`values` as params, one in `share` in the fast suite (at least one), the rest `thorough`.
    A value may be a pytest.param already (its marks are kept)."""
    params = [v if isinstance(v, type(pytest.param(0))) else pytest.param(v) for v in values]
    at = zlib.crc32(family.encode()) % min(share, len(params) or 1)
    return [_thorough(p, i % share != at) for i, p in enumerate(params)]


SHARD_ENV = "KVFUZZ_THOROUGH_SHARD"


def thorough_shard(raw: str | None) -> tuple[int, int] | None:
    """`KVFUZZ_THOROUGH_SHARD=I/N`: run the I-th of N shards of the `thorough` tests (CI's
    second stage, which its time cannot hold whole: the shard is chosen by the commit); None
    where unset. A malformed value is a usage error."""
    if raw is None or not raw.strip():
        return None
    i, sep, n = raw.strip().partition("/")
    try:
        shard = (int(i), int(n))
    except ValueError:
        shard = (-1, 0)
    if not sep or not 0 <= shard[0] < shard[1]:
        raise pytest.UsageError(f"{SHARD_ENV}={raw!r}: expected I/N with 0 <= I < N")
    return shard


def in_shard(nodeid: str, shard: tuple[int, int]) -> bool:
    """Whether a test (by its node id, stable across machines) falls in shard (I, N)."""
    return zlib.crc32(nodeid.encode()) % shard[1] == shard[0]
