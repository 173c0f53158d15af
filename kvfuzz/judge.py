"""Outcome + oracles -> Verdict: the findings of one case, each with a signature.

The contract decides what is checked: an in-contract case must match the oracles on its
required cells and leave its untouched cells alone; an out-of-contract case may be refused
(any exception) or run, but must never write outside its tensors or change its inputs; a
must-refuse case that runs is `invalid_accepted`. A run that faulted the GPU, killed its
process or hung is a `crash` whatever the case, never a refusal. An in-contract case also run
on a cross-check backend (`Outcome.cross`, see cross.py) must give the same arena there, byte
for byte, and raise or not alike (`backend_divergence`). Which checks run and what each finds
is kvfuzz/judge_flow.py's, on NumPy arenas here (`PlanArena`); the repro script embeds that
module and runs it on torch arenas, so the two judges cannot drift. Here: the case's
classification and oracle (execute.prepare), and the fast path that proves a clean run
(`quick_verdict`).

Some failures are not the target's: kvfuzz's own harness failing (`HarnessError`) and
Triton's machinery failing on this machine (`EnvironmentError`, see environment.py). They
come back as `Verdict.not_target` and never as findings.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

import numpy as np

from .callsites.launch import as_called_path
from .case import Case
from .contract import Cells, Contract, Expected
from .execute import ENVIRONMENT, HARNESS, Outcome, Prepared, prepare
from .findings import Finding
from .judge_flow import OutputCells, divergence_findings, judge_runs
from .materialize import Plan, alt_fill, elements_view
from .ops import CONTRACTS
from .rules import same_on


@dataclass
class Verdict:
    status: str  # "in_contract" | "out_of_contract" | "must_refuse"
    reasons: list[str]
    findings: list[Finding] = field(default_factory=list)
    expected: Expected | None = None
    refused: str | None = None  # the error the target raised, if it raised one
    not_target: str | None = None  # kvfuzz's or the environment's failure: nothing was judged

    @property
    def failed(self) -> bool:
        return bool(self.findings)

    def signatures(self) -> list[str]:
        return [f.signature for f in self.findings]


def classify(case: Case) -> tuple[str, list[str]]:
    """("in_contract" | "out_of_contract" | "must_refuse", the reasons)."""
    return CONTRACTS[case.op].classify(case)


def judge(case: Case, outcome: Outcome, plan: Plan | None = None, prepared: Prepared | None = None) -> Verdict:
    """The verdict on one run of `case`: judge_flow's checks on its NumPy arenas. `prepared`
    (from `execute.prepare`) carries the plan, the classification and the NumPy oracle's
    answer, so nothing is computed twice."""
    if any(r.device_clean for r in outcome.runs):  # no bytes to judge: the caller runs the case again (check.verdicts)
        raise ValueError("a run proved clean on the device has no bytes for the full judge")
    if prepared is None:
        prepared = prepare(case)
        if plan is not None:
            prepared.plan = plan
    contract = CONTRACTS[case.op]
    p = prepared.plan
    path = contract.kernel_path(case) + as_called_path(case)  # a call site's own launch: a path of its own
    status, reasons = prepared.status, prepared.reasons
    verdict = Verdict(status, reasons)
    first = outcome.runs[0]
    verdict.refused = first.error
    if first.error_type in (HARNESS, ENVIRONMENT):
        verdict.not_target = first.error
        return verdict
    arena = PlanArena(p, contract.outputs)
    outputs = output_cells(contract, case, p, prepared.expected) if status == "in_contract" else {}
    racy = contract.racy(case) if contract.racy is not None else {}
    oracle = None if outcome.torch_ref is None else {name: np.asarray(v) for name, v in outcome.torch_ref.items()}
    steps, verdict.findings = judge_runs(arena, case.op, path, status, reasons, outcome.runs, outputs, racy, oracle,
                                         outcome.torch_ref_error)
    if "outputs" in steps:
        verdict.expected = prepared.expected
    cross = outcome.cross
    if cross is not None and status == "in_contract" and cross.runs[0].error_type not in (HARNESS, ENVIRONMENT):
        # (the second backend's machinery failing is not the target's)
        verdict.findings += divergence_findings(arena, case.op, path, first, cross.runs[0],
                                                outcome.cross_backend or "?", outputs)
    return verdict


def output_cells(contract: Contract, case: Case, p: Plan, expected: Expected | None) -> dict[str, OutputCells]:
    """{output: how it is judged} for an in-contract case: its cells and the accepted answers."""
    cells = contract.cells(case)
    accepted = expected.accepted() if expected is not None else ()
    return {name: OutputCells(cells[name].required, cells[name].may_write, cells[name].untouched,
                              [np.asarray(a[name]) for a in accepted])
            for name in contract.outputs if name in p.regions}


class PlanArena:
    """A materialize.Plan's NumPy arenas, as judge_flow reads one (its docstring lists what an
    arena offers)."""

    nowhere = np.zeros(0, np.int64)

    def __init__(self, p: Plan, outputs: tuple[str, ...]) -> None:
        self.plan, self.names, self.image = p, p.names, p.image
        self.outputs = tuple(n for n in outputs if n in p.regions)
        self.regions = tuple(p.regions.values())

    def elements(self, name: str, arena: np.ndarray) -> np.ndarray:
        return self.plan.regions[name].elements(arena).astype(np.int64)

    def itemsize(self, name: str) -> int:
        return self.plan.regions[name].itemsize

    def owner_of(self, positions: np.ndarray) -> np.ndarray:
        return self.plan.owner_of(positions)

    def owner_at(self, b: int) -> int:
        return int(self.plan.owner_of(np.array([b]))[0])

    def as_canary(self, arena: np.ndarray) -> np.ndarray:
        return self.plan.as_canary(arena)

    @staticmethod
    def differ(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        return np.flatnonzero(x != y)

    @staticmethod
    def where(mask: np.ndarray, limit: int) -> list[tuple[int, ...]]:
        return [tuple(int(i) for i in idx) for idx in np.argwhere(mask)[:limit]]

    @staticmethod
    def unique(values: np.ndarray) -> list[int]:
        return np.unique(values).tolist()

    @staticmethod
    def same(x: np.ndarray, y: np.ndarray) -> bool:
        return x.shape == y.shape and _same_bytes(x, y)

    @staticmethod
    def word(arena: np.ndarray, w: int) -> int:
        return int(arena[4 * w : 4 * w + 4].view("<i4")[0])


# the fast path ------------------------------------------------------------------------------
# Nearly every case of a campaign is clean. Proving that takes a handful of whole-array
# comparisons against the image a correct run leaves; `judge` then does the full work only for
# the few cases where one of them fails (and finds exactly what it always finds).


class CleanImage:
    """The arena a correct run of an in-contract case leaves, as the checks that prove it:
    every byte outside the checked outputs holds the plan's image (`spans`, byte ranges), and
    each checked output's bytes (its storage, or only its elements where it is contiguous and
    every cell is required) hold `want` (their initial bytes with the required cells set to
    the NumPy oracle's values) wherever `care` says (None: everywhere; the bytes of may-write
    cells are free). No copy of the whole arena is made. `oracle` is what the torch oracle's
    answer must agree with: (output, the NumPy oracle's values, its required cells or None
    for all of them)."""

    __slots__ = ("spans", "outputs", "cells", "oracle")

    def __init__(self, spans: tuple[tuple[int, int], ...],
                 outputs: tuple[tuple[int, np.ndarray, np.ndarray | None], ...], cells: Mapping[str, Cells],
                 oracle: tuple[tuple[str, np.ndarray, np.ndarray | None], ...]) -> None:
        self.spans, self.outputs, self.cells, self.oracle = spans, outputs, cells, oracle

    @property
    def free(self) -> bool:
        """Whether some bytes are free (may-write cells)."""
        return any(care is not None for _, _, care in self.outputs)

    def holds(self, image: np.ndarray, after: np.ndarray, kept: bool = False) -> bool:
        """Whether `after` is what a correct run leaves, from the plan's `image` (`kept`: its
        spans are known to hold the image's bytes, `execute.keep_checks`: outputs alone)."""
        if after.shape != image.shape:
            return False
        for a, b in () if kept else self.spans:
            if not _same_bytes(after[a:b], image[a:b]):
                return False
        for start, want, care in self.outputs:
            got = after[start : start + want.size]
            if care is None:
                if not _same_bytes(got, want):
                    return False
            elif ((got != want) & care).any():
                return False
        return True


def _same_bytes(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two uint8 arrays of one size hold the same bytes."""
    if a.size <= 1 << 16:  # small: comparing two copies costs less than numpy's elementwise pass
        return a.tobytes() == b.tobytes()
    if a.flags.c_contiguous and b.flags.c_contiguous:  # by words, 8 bytes a compare; the last few by bytes
        cut = a.size - a.size % 8
        return a[cut:].tobytes() == b[cut:].tobytes() and bool((a[:cut].view("<u8") == b[:cut].view("<u8")).all())
    return bool((a == b).all())


def clean_image(prepared: Prepared) -> CleanImage | None:
    """What a correct run of this in-contract case leaves, or None where no single image says
    it (out of contract, or an oracle with alternatives). Required cells hold the NumPy
    oracle's values, untouched cells their poison, every other byte its initial value;
    may-write cells are free."""
    if prepared.clean_image is None:
        prepared.clean_image = _clean_image(prepared) or ()
    return prepared.clean_image or None


def _clean_image(prepared: Prepared) -> CleanImage | None:
    exp = prepared.expected
    if prepared.status != "in_contract" or exp is None or exp.alternatives:
        return None
    contract = CONTRACTS[prepared.case.op]
    p = prepared.plan
    cells = contract.cells(prepared.case)
    outputs, oracle = [], []
    for name in contract.outputs:
        r = p.regions.get(name)
        if r is None:
            continue
        c, spec = cells[name], r.spec
        vals = np.asarray(exp.values[name])
        if r.numel == 0:  # its storage (if any) must keep its initial bytes: a span checks it
            oracle.append((name, vals, c.required))
            continue
        if vals.shape != spec.shape:
            return None
        every = bool(c.required.all())
        oracle.append((name, vals, None if every else c.required))
        req = vals if every else vals[c.required]
        cast = req.astype(spec.dtype)
        if not _equal(cast, req):
            return None  # a value the output's dtype cannot hold: the full judge says so
        if every and r.contiguous:  # the common case: its elements' bytes are the values (the rest: a span)
            outputs.append((r.start + spec.offset * r.itemsize, cast.reshape(-1).view(np.uint8), None))
            continue
        storage = p.storage(name)  # the output's storage only, written through its layout
        view = elements_view(spec, storage)
        if every:
            view[...] = cast
        else:
            view[c.required] = cast
        care = None
        free = None if every else c.may_write & ~c.required  # = ~(required | untouched)
        if free is not None and free.any():
            marks = np.zeros(spec.storage_size, dtype=spec.dtype)
            elements_view(spec, marks)[free] = -1  # every byte of a free cell nonzero
            care = marks.view(np.uint8) == 0
        outputs.append((r.start, storage.view(np.uint8), care))
    outputs.sort(key=lambda o: o[0])
    spans, at = [], 0
    for start, want, _ in outputs:
        if start > at:
            spans.append((at, start))
        at = start + want.size
    if p.size > at:
        spans.append((at, p.size))
    return CleanImage(tuple(spans), tuple(outputs), cells, tuple(oracle))


def quick_verdict(prepared: Prepared, outcome: Outcome) -> Verdict | None:
    """The verdict on a clean run of an in-contract case, when whole-array comparisons prove it
    clean (what `judge` would find: nothing); None when `judge` must look."""
    clean = clean_image(prepared)
    first = outcome.runs[0]
    if clean is None or first.error is not None or outcome.torch_ref_error \
            or outcome.cross is not None:  # a cross-checked run: the full judge compares the backends
        return None
    if first.device_clean:  # the worker proved its bytes clean on the device (execute.device_clean_launches)
        if not all(r.device_clean for r in outcome.runs):
            return None
    elif first.after is None or first.keep_ok is False or \
            not clean.holds(prepared.plan.image, first.after, kept=bool(first.keep_ok)):
        return None
    if outcome.torch_ref is not None:  # the torch oracle agrees with the NumPy one on every required cell
        for name, ours, required in clean.oracle:
            theirs = np.asarray(outcome.torch_ref[name])
            if not (_equal(theirs, ours) if required is None else same_on(theirs, ours, required)):
                return None
    for later in outcome.runs[1:]:
        if later.device_clean:
            continue
        if later.error is not None or later.after is None or later.after.shape != first.after.shape:
            return None
        if not ((later.fill_ok if later.fill_ok is not None else prepared.plan.fill_only(later.after, first.after))
                if later.alt
                else _same_bytes(later.after, first.after)):
            return None
    return Verdict(prepared.status, prepared.reasons, expected=prepared.expected)


def quick_pack(pack, runs, torch_ref: dict[str, np.ndarray] | None, torch_error: str | None) -> bool:
    """Whether a packed launch's runs prove every member clean at once (what `quick_verdict`
    on each member's unpacked arena would say, without unpacking): the first run left the
    packed image with each member's clean output bytes (`Pack.clean_after`; free bytes aside),
    a run from the same image left the same bytes, a run from the alternate image differs from
    the first run only in words holding the alternate fill (`Plan.fill_only`'s rule, over the
    packed arena), and the torch oracle over the merged inputs
    (`torch_ref`, one answer for the whole pack) agrees with each member's NumPy oracle at the
    member's rows. False sends the pack to the member-by-member path."""
    got = pack.clean_after()
    if got is None or not runs or torch_error is not None or torch_ref is None:
        return False
    want, free = got
    first = runs[0]
    if first.error is not None or first.after is None or first.after.shape != want.shape:
        return False
    after = first.after
    if not (_same_bytes(after, want) if free is None else bool(((after == want) | free).all())):
        return False
    for later in runs[1:]:
        if later.error is not None or later.after is None or later.after.shape != after.shape:
            return False
        if later.alt and later.fill_ok is not None:  # checked on the device (execute.fill_checks)
            if not later.fill_ok:
                return False
        elif later.alt:  # the first run left every byte but the outputs' elements alone: as `Plan.fill_only`,
            # where the two runs differ the re-run must hold the alternate fill (of packed positions)
            if after.size % 4:
                return False
            mine, theirs = after.view("<u4"), later.after.view("<u4")
            if not bool(((mine == theirs) | (theirs == alt_fill(after.size).view("<u4"))).all()):
                return False
        elif not _same_bytes(later.after, after):
            return False
    return pack_refs_agree(pack, torch_ref)


def pack_refs_agree(pack, torch_ref: dict[str, np.ndarray]) -> bool:
    """Whether the torch oracle over a pack's merged inputs (one answer) agrees with each
    member's NumPy oracle at the member's rows, on every required cell."""
    for m, p in enumerate(pack.members):
        clean = clean_image(p)
        if clean is None:
            return False
        for name, ours, required in clean.oracle:
            if name not in torch_ref:
                return False
            theirs = pack.member_ref(name, torch_ref[name], m)
            if theirs.shape != np.shape(ours) or not (_equal(theirs, ours) if required is None else same_on(theirs, ours, required)):
                return False
    return True


def _equal(a: np.ndarray, b: np.ndarray) -> bool:
    """np.array_equal for integer arrays, without its overhead (it runs many times a case)."""
    return a.shape == b.shape and bool((a == b).all())
