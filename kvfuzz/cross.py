"""`--cross-check cpu`: run the same cases on a second backend and judge where the two differ.

A process runs one device (device.py), so the second backend is a second worker process: on
a CUDA machine, a worker on the CPU under Triton's interpreter. `CrossExecutor` wraps the
campaign's executor: a case it runs alone, and every batch launch marked `cross`, also runs
on the second worker from the same arena image, and comes back as `Outcome.cross`;
`judge.divergence` compares the two runs (`backend_divergence` findings).

Only in-contract cases go to the second backend: outside the contract a kernel may read
anything, and the interpreter does no bounds checking, so the two may legitimately differ
there (an out-of-contract write outside the tensors is already `out_of_bounds_write` on the
primary device).

The second worker's environment carries `WORKER_MARK=1`. Nothing in kvfuzz reads it; the
test fixture that behaves differently on the two backends does.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

from .case import Case
from .errors import BadInput, TargetLoadError
from .execute import BatchResult, Launch, Outcome, RunResult, outcomes
from .ops import CONTRACTS
from .worker import Executor, WorkerExecutor

BACKENDS = ("cpu",)  # what `--cross-check` accepts: the device of the second worker
WORKER_MARK = "KVFUZZ_CROSS_CHECK_WORKER"
_BACKEND_ENV = {"cpu": {"TRITON_INTERPRET": "1"}}  # the worker selects it too; this is before any import


def check_backend(device: str, backend: str) -> None:
    """Refuse, in one line, a cross-check that compares a backend with itself."""
    if backend not in BACKENDS:
        raise BadInput(f"--cross-check must be one of {', '.join(BACKENDS)}, got {backend!r}")
    if backend == device:
        raise BadInput(f"--cross-check {backend}: the primary device is already {backend}, so there is "
                       "nothing to compare it with; use it with --device cuda on a GPU machine")


def in_contract(case: Case) -> bool:
    return CONTRACTS[case.op].classify(case)[0] == "in_contract"


def _primarys(name: str) -> property:
    return property(lambda self: getattr(self.primary, name), doc=f"the primary executor's {name}")


class CrossExecutor:
    """The campaign's executor plus a worker on the cross-check backend. What the target is and
    can take, compile counts and the description are the primary's, read through (a copy made
    here once missed `lacks`, and the campaign then passed tensors the target cannot take): the
    second backend only checks."""

    description = _primarys("description")
    identity = _primarys("identity")
    missing = _primarys("missing")
    variants = _primarys("variants")
    lacks = _primarys("lacks")
    takes = _primarys("takes")
    launch_keys = _primarys("launch_keys")
    compiled = _primarys("compiled")

    def __init__(self, primary: Executor, secondary: WorkerExecutor, backend: str,
                 fresh_primary: Callable[[], Executor] | None = None) -> None:
        self.primary, self.secondary, self.backend = primary, secondary, backend
        self.fresh_primary = fresh_primary
        self._pending: tuple | None = None

    def run(self, case: Case, repeats: int = 1, torch_ref: bool | None = None) -> Outcome:
        """`torch_ref`: whether the case is in contract (check.Checker says it from the
        prepared case); None: classified here."""
        inside = in_contract(case) if torch_ref is None else torch_ref
        out = self.primary.run(case, repeats, inside)
        if inside:
            out.cross, out.cross_backend = self.secondary.run(case, 1, torch_ref=False), self.backend
        return out

    def submit(self, image: np.ndarray, batch: list[Launch]) -> None:
        """Both workers start on the same image; the second runs only the launches marked
        `cross` that are in contract (`torch_ref` marks those), once, without the torch oracle."""
        self.primary.submit(image, batch)
        chosen = [i for i, b in enumerate(batch) if b.cross and b.torch_ref]
        sub = [dataclasses.replace(batch[i], repeat=False, torch_ref=False) for i in chosen]
        if sub:
            self.secondary.submit(image, sub)
        self._pending = (image, chosen, sub)

    def collect(self) -> BatchResult:
        (image, chosen, sub), self._pending = self._pending, None
        result = self.primary.collect()
        if not sub:
            return result
        other = self.secondary.collect()  # always: the second worker's protocol stays in step
        if other.lost:  # pin the loss on its case: each launch alone, on the same image
            runs = [_single(self.secondary.run_batch(image, [b]), b) for b in sub]
        else:
            runs = outcomes(sub, other)
            for name, sec in other.stages.items():
                result.stages[f"cross-check {name}"] = result.stages.get(f"cross-check {name}", 0.0) + sec
        result.cross, result.cross_backend = dict(zip(chosen, runs)), self.backend
        return result

    def run_batch(self, image: np.ndarray, batch: list[Launch]) -> BatchResult:
        self.submit(image, batch)
        return self.collect()

    def fresh(self) -> "CrossExecutor":
        """Two processes that have run no case (confirmations)."""
        return CrossExecutor(self.fresh_primary() if self.fresh_primary else self.primary.fresh(),
                             self.secondary.fresh(), self.backend)

    def fresh_many(self, n: int) -> list["CrossExecutor"]:
        """`n` pairs of fresh processes, started together (`WorkerExecutor.fresh_many`)."""
        primaries = _many(self.fresh_primary, n) if self.fresh_primary else self.primary.fresh_many(n)
        return [CrossExecutor(p, s, self.backend) for p, s in zip(primaries, self.secondary.fresh_many(n))]

    def close(self) -> None:
        try:
            self.primary.close()
        finally:
            self.secondary.close()


def _many(fresh: Callable[[], Executor], n: int) -> list[Executor]:
    """`n` fresh executors, from the worker's spares or started together where `fresh` is a
    worker's own `fresh` (on a GPU each process takes seconds to start: one after the other,
    a pair's confirmation stalls)."""
    many = getattr(getattr(fresh, "__self__", None), "fresh_many", None)
    return many(n) if many is not None else [fresh() for _ in range(n)]


def _single(result: BatchResult, launch: Launch) -> Outcome:
    if result.lost:
        kind = result.lost.split(":", 1)[0]
        return Outcome(runs=[RunResult(error=result.lost, error_type=kind)], device_lost=True)
    return outcomes([launch], result)[0]


def pair(primary: Executor, fresh_primary: Callable[[], Executor], target: str, device: str, backend: str,
         timeout_s: float, standby: bool = False) -> CrossExecutor:
    """`primary` joined by a worker for `target` on `backend` (refused where pointless);
    `standby` as for `WorkerExecutor` (a campaign's confirmations want fresh processes at once)."""
    check_backend(device, backend)
    env = {WORKER_MARK: "1", **_BACKEND_ENV.get(backend, {})}
    try:
        secondary = WorkerExecutor(target, backend, timeout_s, env=env, standby=standby)
    except TargetLoadError as exc:
        raise BadInput(f"--cross-check {backend}: {exc}") from None
    return CrossExecutor(primary, secondary, backend, fresh_primary)
