"""Launch one case on one target: materialise, call, synchronise, snapshot. No judging.

What comes back (`Outcome`) is plain data — host images of the arena after each run, the
error if the target raised, the torch oracle's answer computed on the same device — so the
same function can run inside a worker process and send its result back.
"""

from __future__ import annotations

import time
import traceback
from dataclasses import dataclass, field

import numpy as np

from .case import Case
from .device import torch_device
from .materialize import Plan, plan as make_plan, to_device
from .ops import CONTRACTS


@dataclass
class RunResult:
    error: str | None = None  # "TypeName: first line of the message"
    error_type: str | None = None
    after: np.ndarray | None = None  # the arena's bytes after the run (None if unreadable)
    seconds: float = 0.0
    detail: str | None = None  # the traceback's last frames, for replay output


@dataclass
class Outcome:
    runs: list[RunResult] = field(default_factory=list)
    torch_ref: dict[str, np.ndarray] | None = None
    torch_ref_error: str | None = None
    device_lost: bool = False  # a CUDA error left the context unusable: stop this process


def one_line(exc: BaseException) -> str:
    msg = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {msg[0] if msg else ''}"[:300]


def _sync(device: str) -> None:
    if device == "cuda":
        import torch

        torch.cuda.synchronize()


def run_case(target, case: Case, device: str, repeats: int = 1, torch_ref: bool = True,
             plan: Plan | None = None) -> Outcome:
    contract = CONTRACTS[case.op]
    p = plan or make_plan(case, contract.outputs)
    dev = torch_device(device)
    out = Outcome()
    for _ in range(repeats):
        arena, views = to_device(p, dev)
        run = RunResult()
        t0 = time.perf_counter()
        try:
            target.invoke(case.op, views, case.scalars)
            _sync(device)
        except Exception as exc:  # the target's exception is data here, judged later
            run.error, run.error_type = one_line(exc), type(exc).__name__
            run.detail = "".join(traceback.format_exception(exc)[-3:])
            try:
                _sync(device)
            except Exception:
                out.device_lost = True
        run.seconds = time.perf_counter() - t0
        try:
            run.after = arena.cpu().numpy()
        except Exception:
            out.device_lost = True
        out.runs.append(run)
        if out.device_lost:
            return out
    # the torch oracle only for in-contract cases: torch's own indexing of out-of-range values
    # is a device-side assert on CUDA, which would poison the context for every later case
    if torch_ref and contract.classify(case)[0] == "in_contract":
        try:
            out.torch_ref = contract.torch_ref(case, dev)
        except Exception as exc:
            out.torch_ref_error = one_line(exc)
    return out
