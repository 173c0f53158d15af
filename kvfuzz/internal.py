"""kvfuzz's own errors, recorded where a campaign caught them instead of dying of them.

An exception while a finding is confirmed, minimized, reduced, saved, merged or reported is a
defect of kvfuzz, not of the target: it ends that stage for that finding only (the finding is
kept, saved as far as it got), and the campaign goes on. `internal_error` turns it into the
record the saved case's `meta["internal_errors"]` and the JSON report's `internal_errors` hold,
and the run exits 4 (`outcome.INTERNAL_ERROR`) where no finding or bad input decides its exit code.
"""

from __future__ import annotations

import traceback
from pathlib import Path

from .faults import one_line

# the stages of a finding's way through a campaign (pipeline.FindingPipeline, the report)
STAGES = ("confirm", "minimize", "reduce", "save", "absorb", "settle", "site", "group", "report")
ROOT = Path(__file__).resolve().parent.parent


def where(exc: BaseException) -> str:
    """`file:line` of the frame that raised `exc` (relative to kvfuzz's checkout where inside it)."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return "?"
    last = frames[-1]
    path = Path(last.filename)
    try:
        path = path.resolve().relative_to(ROOT)
    except (OSError, ValueError):
        pass
    return f"{path}:{last.lineno}"


def internal_error(stage: str, exc: BaseException, signature: str | None = None) -> dict:
    """The record of `exc`, raised in `stage` (one of STAGES) for the finding `signature`."""
    from . import __version__

    message = one_line(exc)
    prefix = f"{type(exc).__name__}: "
    doc = {"stage": stage, "type": type(exc).__name__,
           "message": message[len(prefix):] if message.startswith(prefix) else message,
           "kvfuzz": __version__, "where": where(exc)}
    if signature is not None:
        doc["signature"] = signature
    return doc


def describe(err: dict) -> str:
    """One line for the console: 'internal error in minimize: ValueError: ... (kvfuzz/x.py:12)'."""
    return f"internal error in {err['stage']}: {err['type']}: {err['message']} ({err['where']})"
