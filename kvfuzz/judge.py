"""Outcome + oracles -> Verdict: the findings of one case, each with a signature.

The contract decides what is checked: an in-contract case must match the oracles on its
required cells and leave its untouched cells alone; an out-of-contract case may be refused
(any exception) or run, but must never write outside its tensors or change its inputs; a
must-refuse case that runs is `invalid_accepted`. A run that faulted the GPU, killed its
process or hung is a `crash` whatever the case, never a refusal. An in-contract case also run
on a cross-check backend (`Outcome.cross`, see cross.py) must give the same arena there, byte
for byte, and raise or not alike (`backend_divergence`).

Some failures are not the target's: kvfuzz's own harness failing (`HarnessError`) and
Triton's machinery failing on this machine (`EnvironmentError`, see environment.py). They
come back as `Verdict.not_target` and never as findings.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator, Mapping

import numpy as np

from .case import Case
from .contract import Cells, Contract, Expected
from .execute import CUDA_FAULT, ENVIRONMENT, HARNESS, Outcome, Prepared, RunResult, prepare
from .findings import Finding
from .materialize import NOBODY, Plan, elements_view
from .ops import CONTRACTS

MAX_CELLS = 8  # differing cells kept per finding
# the process died or hung, or the kernel faulted the GPU: never acceptable, in contract or not
LOST = {"WorkerDied": None, "Timeout": "timeout", CUDA_FAULT: "cuda_fault"}


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
    """The verdict on one run of `case`. `prepared` (from `execute.prepare`) carries the plan,
    the classification and the NumPy oracle's answer, so nothing is computed twice."""
    if prepared is None:
        prepared = prepare(case)
        if plan is not None:
            prepared.plan = plan
    contract = CONTRACTS[case.op]
    p = prepared.plan
    path = contract.kernel_path(case)
    status, reasons = prepared.status, prepared.reasons
    verdict = Verdict(status, reasons)
    first = outcome.runs[0]
    verdict.refused = first.error

    def finding(kind, tensor, where, message, cells=()):
        return Finding(kind, case.op, path, tensor, where, message, tuple(cells))

    if first.error_type in (HARNESS, ENVIRONMENT):
        verdict.not_target = first.error
        return verdict
    if status == "must_refuse" and first.error is None:
        verdict.findings.append(finding("invalid_accepted", "-", reasons[0].split()[0],
                                        f"ran a case it must refuse: {reasons[0]}"))
    if first.error_type in LOST:
        where = LOST[first.error_type] or first.error.split()[-1]
        tail = (first.detail or "").strip().splitlines()[-1:]
        verdict.findings.append(finding("crash", "-", where, f"the run was lost: {first.error}"
                                        + (f" (last output: {tail[0][:200]})" if tail else "")))
    elif status == "in_contract" and first.error is not None:
        verdict.findings.append(finding("crash", "-", first.error_type or "Exception",
                                        f"raised on an in-contract case: {first.error}"))
    if first.after is None:
        return verdict

    changed = _changed(first.after, p.image)
    owner = p.owner_of(changed)
    verdict.findings += _memory_findings(contract, p, changed, owner, finding)
    if status == "in_contract" and first.error is None:
        verdict.expected = prepared.expected
        verdict.findings += _output_findings(contract, case, p, first, prepared.expected, outcome, finding)
    elif status == "must_refuse" and first.error is not None:
        # refused: it must have refused before touching anything, outputs included
        for name in contract.outputs:
            if name in p.regions:
                r = p.regions[name]
                got, before = r.elements(first.after), r.elements(p.image)
                hit = got != before
                if hit.any():
                    verdict.findings.append(finding(
                        "untouched_write", name, "after_error",
                        f"{name}: {int(hit.sum())} cells changed although the target raised {first.error_type}",
                        _cells(hit, got=got)))
    for later in outcome.runs[1:]:
        if later.after is not None and (later.error != first.error or not np.array_equal(later.after, first.after)):
            diff = np.flatnonzero(later.after != first.after)
            owners = sorted({p.names[o] if o != NOBODY else "-" for o in np.unique(p.owner_of(diff))})
            verdict.findings.append(finding(
                "nondeterministic", owners[0] if owners else "-", "rerun",
                f"a second run of the same case differs ({diff.size} bytes in {', '.join(owners) or 'the error'})"))
    if outcome.cross is not None and status == "in_contract":
        verdict.findings += _divergence(contract, case, p, first, outcome.cross, outcome.cross_backend or "?",
                                        prepared.expected, finding)
    return verdict


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

    def holds(self, image: np.ndarray, after: np.ndarray) -> bool:
        """Whether `after` is what a correct run leaves, from the plan's `image`."""
        if after.shape != image.shape:
            return False
        for a, b in self.spans:
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


def _changed(after: np.ndarray, image: np.ndarray) -> np.ndarray:
    """Offsets of the bytes of `after` that differ from `image` (an arena left as it was, as
    most refused cases leave it, is told by one comparison)."""
    if after.shape == image.shape and _same_bytes(after, image):
        return np.flatnonzero(np.zeros(0, dtype=bool))
    return np.flatnonzero(after != image)


def _same_bytes(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two uint8 arrays of one size hold the same bytes."""
    if a.size <= 1 << 16:  # small: comparing two copies costs less than numpy's elementwise pass
        return a.tobytes() == b.tobytes()
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
        storage = r.typed(p.image).copy()  # the output's storage only, written through its layout
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
    if clean is None or first.error is not None or first.after is None or outcome.torch_ref_error \
            or outcome.cross is not None:  # a cross-checked run: the full judge compares the backends
        return None
    if not clean.holds(prepared.plan.image, first.after):
        return None
    if outcome.torch_ref is not None:  # the torch oracle agrees with the NumPy one on every required cell
        for name, ours, required in clean.oracle:
            theirs = np.asarray(outcome.torch_ref[name])
            if not (_equal(theirs, ours) if required is None else _same(theirs, ours, required)):
                return None
    for later in outcome.runs[1:]:
        if later.error is not None or later.after is None or later.after.shape != first.after.shape \
                or not _same_bytes(later.after, first.after):
            return None
    return Verdict(prepared.status, prepared.reasons, expected=prepared.expected)


def _divergence(contract: Contract, case: Case, p: Plan, first: RunResult, other: Outcome, backend: str,
                expected: Expected | None, finding) -> Iterator[Finding]:
    """The primary run against the same case's run on the cross-check backend: whether each
    raised, then every byte of the case's arena (output cells by their contract class, inputs,
    guard bands, gaps). Required cells that differ but are each an answer the oracle accepts
    (a float32 rounding boundary) are not a divergence."""
    theirs = other.runs[0]
    if theirs.error_type in (HARNESS, ENVIRONMENT):
        return  # the second backend's machinery, not the target
    kind = "backend_divergence"
    if theirs.error_type in LOST:
        yield finding(kind, "-", "lost",
                      f"ran on the primary device, but the run on {backend} was lost: {theirs.error}")
        return
    if (first.error is None) != (theirs.error is None):
        who, error = ("the primary device", first.error) if first.error else (backend, theirs.error)
        yield finding(kind, "-", "raised", f"raised on {who} only: {error}")
        return
    if first.error is not None or theirs.after is None:
        return  # both raised: already a crash on an in-contract case
    changed = np.flatnonzero(first.after != theirs.after)
    if not changed.size:
        return
    owner = p.owner_of(changed)
    by_place: dict[tuple[str, str], int] = {}
    for b in changed[owner == NOBODY].tolist():
        place = p.region_of_byte(b)
        by_place[place] = by_place.get(place, 0) + 1
    for (tensor, where), n in sorted(by_place.items()):
        yield finding(kind, tensor, where, f"{n} bytes {where} {tensor}'s elements differ between the primary "
                      f"device and {backend}")
    cells = contract.cells(case)
    accepted = expected.accepted() if expected is not None else ()
    for i in np.unique(owner[owner != NOBODY]).tolist():
        name = p.names[i]
        r = p.regions[name]
        mine, yours = r.elements(first.after).astype(np.int64), r.elements(theirs.after).astype(np.int64)
        hit = mine != yours
        if name not in contract.outputs:
            yield finding(kind, name, "input", f"input {name}: {int(hit.sum())} elements differ between the "
                          f"primary device and {backend}", _cells(hit, primary=mine, **{backend: yours}))
            continue
        c = cells[name]
        for where, mask in (("required", c.required), ("may_write", c.may_write), ("untouched", c.untouched)):
            bad = hit & mask
            if not bad.any():
                continue
            if where == "required" and all(any(_same(got, np.asarray(a[name]), mask) for a in accepted)
                                           for got in (mine, yours)):
                continue  # both answers accepted (a rounding boundary)
            yield finding(kind, name, where, f"{name}: {int(bad.sum())} {where.replace('_', '-')} cells differ "
                          f"between the primary device and {backend}", _cells(bad, primary=mine, **{backend: yours}))


def _memory_findings(contract: Contract, p: Plan, changed: np.ndarray, owner: np.ndarray,
                     finding) -> Iterator[Finding]:
    """Bytes outside every element (guards, gaps) and input elements that changed."""
    stray = changed[owner == NOBODY]
    if stray.size:
        by_place: dict[tuple[str, str], list[int]] = {}
        for b in stray.tolist():
            by_place.setdefault(p.region_of_byte(b), []).append(b)
        for (tensor, where), bytes_ in sorted(by_place.items()):
            r = p.regions.get(tensor)
            rel = [b - r.start for b in bytes_[:MAX_CELLS]] if r else bytes_[:MAX_CELLS]
            yield finding("out_of_bounds_write", tensor, where,
                          f"{len(bytes_)} bytes {where} {tensor}'s elements changed "
                          f"(byte offsets from its storage start: {rel})",
                          [{"byte": x} for x in rel])
    for i, name in enumerate(p.names):
        if name in contract.outputs:
            continue
        hit = int((owner == i).sum())
        if hit:
            yield finding("input_modified", name, "elements", f"input {name} changed ({hit} bytes)")


def _output_findings(contract: Contract, case: Case, p: Plan, run: RunResult, expected: Expected,
                     outcome: Outcome, finding) -> Iterator[Finding]:
    cells: Mapping[str, Cells] = contract.cells(case)
    torch_vals = outcome.torch_ref
    accepted = expected.accepted()
    for name in contract.outputs:
        if name not in p.regions:
            continue
        c = cells[name]
        r = p.regions[name]
        got = r.elements(run.after).astype(np.int64)
        before = r.elements(p.image).astype(np.int64)
        want = np.asarray(expected.values[name])
        tv = None if torch_vals is None else np.asarray(torch_vals[name])

        if tv is not None and not any(_same(tv, np.asarray(a[name]), c.required) for a in accepted):
            bad = c.required & (tv != want)
            yield finding("oracle_disagreement", name, _extent(bad, c.required),
                          f"{name}: NumPy and torch oracles disagree on {int(bad.sum())} required cells",
                          _cells(bad, numpy=want, torch=tv))
        if not any(_same(got, np.asarray(a[name]), c.required) for a in accepted):
            bad = c.required & (got != want)
            lost = bad & (got == before)
            note = f" ({int(lost.sum())} never written)" if lost.any() else ""
            yield finding("mismatch", name, _extent(bad, c.required),
                          f"{name}: {int(bad.sum())} of {int(c.required.sum())} required cells differ{note}",
                          _cells(bad, numpy=want, torch=tv, got=got))
        hit = c.untouched & (got != before)
        if hit.any():
            yield finding("untouched_write", name, "cells",
                          f"{name}: {int(hit.sum())} cells the contract leaves untouched changed",
                          _cells(hit, got=got, before=before))
    if outcome.torch_ref_error:
        yield finding("oracle_disagreement", "-", "torch_error",
                      f"the torch oracle raised on an in-contract case: {outcome.torch_ref_error}")


def _equal(a: np.ndarray, b: np.ndarray) -> bool:
    """np.array_equal for integer arrays, without its overhead (it runs many times a case)."""
    return a.shape == b.shape and bool((a == b).all())


def _same(a: np.ndarray, b: np.ndarray, mask: np.ndarray) -> bool:
    return bool(np.array_equal(a[mask], b[mask]))


def _extent(bad: np.ndarray, required: np.ndarray) -> str:
    return "all" if bad.sum() == required.sum() else "partial"


def _cells(mask: np.ndarray, **arrays: np.ndarray | None) -> list[dict]:
    out = []
    for idx in np.argwhere(mask)[:MAX_CELLS]:
        key = tuple(int(i) for i in idx)
        row = {"index": list(key)}
        for label, arr in arrays.items():
            if arr is not None:
                row[label] = int(arr[key])
        out.append(row)
    return out
