"""The vocabulary of findings: what kind of wrong, where, and a signature for dedup."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

KINDS = (
    "mismatch",  # a required output cell differs from both oracles
    "out_of_bounds_write",  # a byte outside every tensor's elements changed (guard band, stride gap): named after the output written
    "out_of_bounds_read",  # an output changed with the fill of the bytes outside every tensor: named after the input read past
    "untouched_write",  # an output cell the contract says must stay untouched changed
    "input_modified",  # an input tensor's element changed
    "crash",  # the target raised on an in-contract case
    "invalid_accepted",  # the target ran a case it must refuse
    "oracle_disagreement",  # the NumPy and torch oracles disagree (a kvfuzz bug or a torch bug)
    "nondeterministic",  # two runs of the same case differ, and not by the fill of the guard bands
    "backend_divergence",  # the cross-check backend (the interpreter) gives another arena or raises otherwise
    # --baseline (baseline.py): the same case on the target and on a baseline target, each judged by
    # the oracle; `where` names the ordinary finding it stands on, as KIND.WHERE
    "regression",  # a unit (cell, byte, read place, the run) the baseline gets right, the target wrong
    "fixed",  # a unit the baseline gets wrong, the target right
    "changed",  # a unit both get wrong, differently (another value, another crash)
)
CLASSES = ("regression", "fixed", "changed")  # the kinds that compare a target with its baseline

# kinds whose runs of one case differ by nature (a race, a read of stray memory): a replay that
# does not show one proves nothing, so its saved case is a non-strict expectation
VARIES = frozenset({"nondeterministic"})


def kind_of(signature: str) -> str:
    """The kind named in a signature (`op:path:kind:tensor:where`)."""
    return signature.split(":")[2]


def defect_kind(signature: str) -> str:
    """The kind of the ordinary finding a signature stands on: its own kind, or for a
    regression, fix or change against a baseline, the kind its `where` names (KIND.WHERE)."""
    parts = signature.split(":")
    return parts[4].split(".", 1)[0] if parts[2] in CLASSES else parts[2]


def ordinary_signature(signature: str) -> str:
    """The ordinary finding a signature stands on: itself, or for a regression, fix or change
    against a baseline (op:path:CLASS:TENSOR:KIND.WHERE) op:path:KIND:TENSOR:WHERE, what one
    target run alone shows (a fix's: the baseline's defect)."""
    parts = signature.split(":")
    if len(parts) < 5 or parts[2] not in CLASSES:
        return signature
    kind, _, where = parts[4].partition(".")
    return ":".join([*parts[:2], kind, parts[3], where, *parts[5:]])


# how a wild memory access ends, by backend: the interpreter's process dies (a signal), a GPU
# kernel faults the device; one defect, two crash names
MEMORY_FAULTS = ("SIGSEGV", "SIGBUS", "cuda_fault")


def backend_neutral(signature: str) -> str:
    """`signature` with a memory-fault crash's backend-specific name made one
    (op:path:crash:-:memory_fault): the same wild access is SIGSEGV under the interpreter and
    cuda_fault on a GPU."""
    parts = signature.split(":")
    if len(parts) == 5 and parts[2] == "crash" and parts[4] in MEMORY_FAULTS:
        return ":".join([*parts[:4], "memory_fault"])
    return signature


# kinds only a second run shows (the determinism re-run, from the alternate image)
NEED_A_SECOND_RUN = ("nondeterministic", "out_of_bounds_read")


def runs_to_show(signature: str) -> int:
    """How many runs a case needs for the judge to show a finding with this signature."""
    return 2 if defect_kind(signature) in NEED_A_SECOND_RUN else 1


@dataclass(frozen=True)
class Finding:
    """One defect seen on one case. `signature` is what dedup and the corpus key on."""

    kind: str
    op: str
    path: str  # kernel path inside the op (decode: ps1 / general / swa)
    tensor: str  # the output (or input) concerned; "-" when none
    where: str  # coarse class of where: all / partial / before / after / gap / an error type
    message: str
    cells: tuple[dict[str, Any], ...] = field(default=(), compare=False)  # first differing cells
    # against a baseline (baseline.py): "regression", "changed" or "shared" (the baseline wrong
    # the same way on every unit it covers); "" alone, or a kind never compared. The campaign's
    # (pipeline.py), not the saved case's: a case is judged against its baseline again on replay
    against: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown finding kind {self.kind!r}")

    @property
    def signature(self) -> str:
        return f"{self.op}:{self.path}:{self.kind}:{self.tensor}:{self.where}"

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "op": self.op,
            "path": self.path,
            "tensor": self.tensor,
            "where": self.where,
            "signature": self.signature,
            "message": self.message,
            "cells": [dict(c) for c in self.cells],
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Finding":
        return cls(d["kind"], d["op"], d["path"], d["tensor"], d["where"], d["message"],
                   tuple(d.get("cells", ())))
