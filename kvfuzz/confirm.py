"""Confirm before report, as ClusterFuzz does: a finding counts once its case, serialised as
it would be saved, shows the same signature in a fresh worker process.

A warm worker can carry state from earlier cases (a corrupted allocator, a poisoned CUDA
context, a kernel cache entry), and a case can change on its way to disk. So the case is
written to a temporary corpus directory, read back, and run in a new worker. If that first
fresh try shows the signature, the finding is confirmed. If not, it is tried again
`tries - 1` times and reported as flaky with how many fresh tries showed it; a flaky finding
is never saved as a regression case.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .corpus import SavedCase, read_case_dir, write_case_dir
from .judge import judge
from .worker import WorkerExecutor

TRIES = 3  # fresh processes for a finding that does not show on the first one


@dataclass(frozen=True)
class Confirmation:
    signature: str
    reproduced: int  # fresh tries that showed the signature
    tries: int  # fresh tries made

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
    """`fresh()` gives a worker that has run no case (`WorkerExecutor.fresh`, or a new one)."""
    signature = saved.finding.signature
    case = round_trip(saved).case
    reproduced = made = 0
    for attempt in range(max(tries, 1)):
        executor = fresh()
        try:
            shows = signature in judge(case, executor.run(case, repeats=2)).signatures()
        finally:
            executor.close()
        made += 1
        reproduced += shows
        if attempt == 0 and shows:
            break  # confirmed on the first fresh process
    return Confirmation(signature, reproduced, made)
