"""Confirm before report, as ClusterFuzz does: a finding counts once its case, serialised as
it would be saved, shows the same signature in a fresh worker process.

A warm worker can carry state from earlier cases (a corrupted allocator, a poisoned CUDA
context, a kernel cache entry), and a case can change on its way to disk. So the case is
written to a temporary corpus directory, read back, and run in `tries` new workers, one after
another (at least two: one fresh run that shows it says little about the next). Where the
workers come from a campaign's executor they are its spares, started after the confirmation
before (`WorkerExecutor.fresh_many`), and confirming costs running the cases; the first time,
they are started together, so their imports overlap and it costs about one process start, not
`tries` of them. The finding
is confirmed only if every one of them shows the signature; where they disagree it is
reported as flaky with how many fresh tries showed it, and a flaky finding is never saved as
a regression case (its replay would pass or fail by chance).
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from .check import Checker
from .corpus import SavedCase, read_case_dir, write_case_dir
from .execute import prepare
from .worker import WorkerExecutor

TRIES = 3  # fresh processes each finding runs in
MIN_TRIES = 2  # fewer cannot tell a defect from a finding that shows now and then


@dataclass(frozen=True)
class Confirmation:
    signature: str
    reproduced: int  # fresh tries that showed the signature
    tries: int  # fresh tries made
    seconds: float = field(default=0.0, compare=False)  # what confirming took (the campaign plans by it)

    @property
    def confirmed(self) -> bool:
        return self.tries > 0 and self.reproduced == self.tries

    def describe(self) -> str:
        return f"{self.reproduced} of {self.tries} fresh runs reproduced it"


def round_trip(saved: SavedCase) -> SavedCase:
    """The case exactly as the corpus would hold it."""
    with tempfile.TemporaryDirectory(prefix="kvfuzz-confirm-") as tmp:
        write_case_dir(saved, Path(tmp), fsync=False)
        return read_case_dir(Path(tmp))


def confirm(saved: SavedCase, fresh: Callable[[], WorkerExecutor], tries: int = TRIES) -> Confirmation:
    """`saved` confirmed in `tries` fresh workers (`confirm_many` of one case)."""
    return confirm_many([saved], fresh, tries)[0]


def confirm_many(saved: list[SavedCase], fresh: Callable[[], WorkerExecutor], tries: int = TRIES) -> list[Confirmation]:
    """Several findings confirmed in one set of `tries` fresh workers: each worker runs every
    case (one run for findings that share a case), so a batch of findings costs one set of
    process starts, not one per finding. `fresh()` gives a worker that has run no case
    (`WorkerExecutor.fresh`, or a new one). Every try is made, even after one that did not show
    it: the report says how many did. Each case read back is prepared once (its NumPy oracle
    runs once) for all the tries. Each Confirmation's `seconds` is the whole batch's."""
    t0 = time.monotonic()
    cases: dict[str, object] = {}  # the case's digest -> the case read back and prepared
    # a crash's case last in each worker: run before another, the process it kills would be
    # restarted for the next case (a process start per try on the confirmation's path)
    for sc in sorted(saved, key=lambda sc: sc.finding.kind == "crash"):
        digest = sc.case.digest()
        if digest not in cases:
            cases[digest] = prepare(round_trip(sc).case)
    digests = [sc.case.digest() for sc in saved]
    reproduced = [0] * len(saved)
    n = max(tries, 1)
    many = getattr(getattr(fresh, "__self__", None), "fresh_many", None)  # fresh is executor.fresh
    started = many(n) if many is not None else None
    try:
        for i in range(n):
            executor = started[i] if started is not None else fresh()
            try:
                shown = {d: set(Checker(executor, p.case.op).check(p, repeats=2).signatures())
                         for d, p in cases.items()}
            finally:
                executor.close()
            for k, sc in enumerate(saved):
                reproduced[k] += sc.finding.signature in shown[digests[k]]
    finally:  # a try that raised leaves the ones after it started
        for executor in started or ():
            executor.close()
    seconds = time.monotonic() - t0
    return [Confirmation(sc.finding.signature, r, n, seconds) for sc, r in zip(saved, reproduced)]
