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

from .callsites.launch import as_called_path
from .case import Case
from .contract import Cells, Contract, Expected
from .execute import CUDA_FAULT, ENVIRONMENT, HARNESS, Outcome, Prepared, RunResult, prepare
from .findings import Finding
from .fills import alt_source
from .materialize import NOBODY, Plan, elements_view
from .ops import CONTRACTS
from .judge_flow import judge_steps
from .places import band_words, charge_writes, read_place
from .rules import after_error_rule, divergence_rules, extent, output_rules, racy_only, rerun_rules, same_on

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
    path = contract.kernel_path(case) + as_called_path(case)  # a call site's own launch: a path of its own
    status, reasons = prepared.status, prepared.reasons
    verdict = Verdict(status, reasons)
    first = outcome.runs[0]
    verdict.refused = first.error

    def finding(kind, tensor, where, message, cells=()):
        return Finding(kind, case.op, path, tensor, where, message, tuple(cells))

    if first.error_type in (HARNESS, ENVIRONMENT):
        verdict.not_target = first.error
        return verdict
    lost = first.error_type in LOST
    steps = judge_steps(status, first.error is not None, lost, first.after is not None)
    if "invalid_accepted" in steps:
        verdict.findings.append(finding("invalid_accepted", "-", reasons[0].split()[0],
                                        f"ran a case it must refuse: {reasons[0]}"))
    if "lost" in steps:
        where = LOST[first.error_type] or first.error.split()[-1]
        tail = (first.detail or "").strip().splitlines()[-1:]
        verdict.findings.append(finding("crash", "-", where, f"the run was lost: {first.error}"
                                        + (f" (last output: {tail[0][:200]})" if tail else "")))
    if "raised" in steps:
        verdict.findings.append(finding("crash", "-", first.error_type or "Exception",
                                        f"raised on an in-contract case: {first.error}"))
    if "memory" not in steps:
        return verdict

    changed = _changed(first.after, p.image)
    owner = p.owner_of(changed)
    verdict.findings += _memory_findings(contract, p, changed, owner, finding)
    if "outputs" in steps:
        verdict.expected = prepared.expected
        verdict.findings += _output_findings(contract, case, p, first, prepared.expected, outcome, finding)
    if "unchanged_outputs" in steps:  # it must have refused before touching anything, outputs included
        for name in contract.outputs:
            if name in p.regions:
                r = p.regions[name]
                got = r.elements(first.after)
                broken = after_error_rule(name, got, r.elements(p.image), first.error_type)
                if broken is not None:
                    kind, where, message, hit = broken
                    verdict.findings.append(finding(kind, name, where, message, _cells(hit, got=got)))
    verdict.findings += _reruns(contract, case, p, first, outcome.runs[1:], finding)
    if outcome.cross is not None and status == "in_contract":
        verdict.findings += _divergence(contract, case, p, first, outcome.cross, outcome.cross_backend or "?",
                                        prepared.expected, finding)
    return verdict


def _reruns(contract: Contract, case: Case, p: Plan, first: RunResult, later: list[RunResult],
            finding) -> list[Finding]:
    """The runs after the first, by rules.rerun_rules: `nondeterministic`, or an
    `out_of_bounds_read` where a differing value was read from the fill (decoded from it), or
    else where the fill in one input's guard band or gap alone (a probe run, run_case) changes
    each run of it the same way, while the image run again does not change and no image's runs
    disagree with one another (rules.stable)."""
    out: dict[str, Finding] = {}
    seen_diff: dict[int, tuple[bool, np.ndarray, np.ndarray]] = {}

    def compare(run: RunResult) -> tuple[bool, np.ndarray, np.ndarray]:
        """(differs, the arena it left with the fill put back to the canary, the bytes that differ)."""
        if id(run) not in seen_diff:
            seen = p.as_canary(run.after) if run.alt else run.after
            if seen.shape != first.after.shape:
                seen_diff[id(run)] = True, seen, np.zeros(0, np.int64)
            elif run.error == first.error and _same_bytes(seen, first.after):
                seen_diff[id(run)] = False, seen, np.zeros(0, np.int64)
            else:
                seen_diff[id(run)] = True, seen, np.flatnonzero(seen != first.after)
        return seen_diff[id(run)]

    def same(a: RunResult, b: RunResult) -> bool:
        """Whether two runs left the same arena (the fill put back to the canary) and raised alike."""
        (da, sa, _), (db, sb, _) = compare(a), compare(b)
        if a.error != b.error or sa.shape != sb.shape:
            return False
        return not (da or db) or _same_bytes(sa, sb)

    def decoded(run: RunResult) -> dict:
        _, seen, diff = compare(run)
        return _reads(contract, p, first.after, seen, diff)

    racy = contract.racy(case) if contract.racy is not None else {}
    racy = {name: cells for name, cells in racy.items() if cells.any()}

    def only_racy(run: RunResult) -> bool:
        """Whether `run` differs from the first only in cells two programs of this
        (out-of-contract) case write: either program's value may be left there."""
        _, seen, diff = compare(run)
        if run.error != first.error or diff.size == 0 or seen.shape != first.after.shape:
            return False
        owners = {p.names[o] if o != NOBODY else "-" for o in np.unique(p.owner_of(diff)).tolist()}

        def differs_outside(name: str, cells: np.ndarray) -> bool:
            region = p.regions[name]
            return bool(((region.elements(first.after) != region.elements(seen)) & ~cells).any())
        return racy_only(owners, racy, differs_outside)

    # "*": all of an input's bands at once (run_case's first probe); its bands, one by one, tell where
    banded = [r for r in later if r.probe is None or not r.probe.endswith(":*")]
    for kind, run, places in rerun_rules(banded, first.error, lambda r: compare(r)[0], decoded, same):
        diff = compare(run)[2]
        if kind == "nondeterministic" and only_racy(run):
            continue
        if kind == "nondeterministic":
            owners = sorted({p.names[o] if o != NOBODY else "-" for o in np.unique(p.owner_of(diff))})
            fill = " (from the alternate image: not explained by the fill)" if run.alt else ""
            reads = {(owners[0] if owners else "-", "rerun"): (
                f"a second run of the same case differs{fill} ({diff.size} bytes in "
                f"{', '.join(owners) or 'the error'})", [])}
        elif kind == "read_decoded":
            reads = places
        else:
            reads = {tuple(band.split(":")): _probed_read(p, band, compare(probe)[2]) for band, probe in places.items()}
        for (tensor, where), (message, cells) in reads.items():
            f = finding(kind if kind == "nondeterministic" else "out_of_bounds_read", tensor, where, message, cells)
            out.setdefault(f.signature, f)
    return list(out.values())


def _probed_read(p: Plan, band: str, diff: np.ndarray) -> tuple[str, list[dict]]:
    """(message, cells) of an out-of-bounds read told by the probe runs of `band` ("input:where")."""
    tensor, where = band.split(":")
    owners = sorted({p.names[o] if o != NOBODY else "bytes outside the tensors"
                     for o in np.unique(p.owner_of(diff))}) or ["the error raised"]
    return (f"{', '.join(owners)} changed with the fill of the bytes outside every tensor: the kernel reads "
            f"{band_words(tensor, where)} (the alternate fill there alone changes the run, and the image run again "
            f"does not; the value read is not what it stored)", [{"changed": o} for o in owners[:MAX_CELLS]])


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
            if not (_equal(theirs, ours) if required is None else same_on(theirs, ours, required)):
                return None
    for later in outcome.runs[1:]:
        if later.error is not None or later.after is None or later.after.shape != first.after.shape:
            return None
        if not (prepared.plan.fill_only(later.after, first.after) if later.alt
                else _same_bytes(later.after, first.after)):
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
        answers = [np.asarray(a[name]) for a in accepted]
        for where, message, bad in divergence_rules(name, backend, c.required, c.may_write, c.untouched, mine, yours,
                                                    answers):
            yield finding(kind, name, where, message, _cells(bad, primary=mine, **{backend: yours}))


def _memory_findings(contract: Contract, p: Plan, changed: np.ndarray, owner: np.ndarray,
                     finding) -> Iterator[Finding]:
    """Bytes outside every element (guards, gaps) and input elements that changed. A stray
    byte is charged to the output whose store overran (`write_place`), never to the
    neighbour it landed in (places.charge_writes): the message lists those."""
    stray = changed[owner == NOBODY]
    if stray.size:
        charged = charge_writes(p.regions.values(), contract.outputs, stray.tolist())
        for (tensor, where), (bytes_, victims) in sorted(charged.items()):
            r = p.regions.get(tensor)
            rel = [b - r.start for b in bytes_[:MAX_CELLS]] if r else bytes_[:MAX_CELLS]
            landed = ", ".join(f"{n} {band_words(t, w)}" for (t, w), n in sorted(victims.items()))
            yield finding("out_of_bounds_write", tensor, where,
                          f"{len(bytes_)} bytes {where} {tensor}'s elements changed, written by a store to "
                          f"{tensor} (byte offsets from its storage start: {rel}); they landed in: {landed}",
                          [{"byte": x} for x in rel])
    for i, name in enumerate(p.names):
        if name in contract.outputs:
            continue
        hit = int((owner == i).sum())
        if hit:
            yield finding("input_modified", name, "elements", f"input {name} changed ({hit} bytes)")


MAX_DECODED = 64  # differing elements read back per tensor when telling where a read came from


def _reads(contract: Contract, p: Plan, canary: np.ndarray, alt: np.ndarray,
           diff: np.ndarray) -> dict[tuple[str, str], tuple[str, list[dict]]]:
    """The out-of-bounds reads that explain the difference between a run from the image
    (`canary`) and a run from the alternate image (`alt`, its bytes still holding the fill put
    back to the canary): {(input, where): (message, cells)} for each place a differing value
    was read from, decoded from the value (materialize.alt_source); {} when no differing value
    is a read of the fill (then the difference is not the fill's)."""
    inputs = tuple(n for n in p.names if n not in contract.outputs) or p.names
    found: dict[tuple[str, str], list] = {}
    owner = p.owner_of(diff)

    def note(src: tuple[int, int], shown: dict) -> None:
        if p.owner_of(np.array([src[0]]))[0] != NOBODY:
            return  # decodes to an element's address: not a read of the fill
        place, how = read_place(p.regions.values(), inputs, src[0])
        entry = found.setdefault(place, [how, src[1], []])
        if len(entry[2]) < MAX_CELLS:
            shown["read_at"] = src[0] - p.regions[place[0]].start if place[0] in p.regions else src[0]
            entry[2].append(shown)

    for i in np.unique(owner[owner != NOBODY]).tolist():
        r = p.regions[p.names[i]]
        bits = 8 * r.itemsize
        mine, theirs = r.elements(canary), r.elements(alt)
        for idx in np.argwhere(mine != theirs)[:MAX_DECODED]:
            key = tuple(int(x) for x in idx)
            src = alt_source(int(mine[key]), int(theirs[key]), bits)
            if src is not None:
                note(src, {"tensor": r.name, "index": list(key), "canary": int(mine[key]),
                           "alternate": int(theirs[key])})
    words = np.unique(diff[owner == NOBODY] // 4)[:MAX_DECODED]  # stray words written with what was read
    for w in words.tolist():
        a, b = (int(x.view("<i4")[0]) for x in (canary[4 * w : 4 * w + 4], alt[4 * w : 4 * w + 4]))
        src = alt_source(a, b, 32)
        if src is not None:
            note(src, {"tensor": "-", "byte": 4 * w, "canary": a, "alternate": b})
    out = {}
    for (tensor, where), (how, off, cells) in found.items():
        into = sorted({c["tensor"] if c["tensor"] != "-" else "bytes outside the tensors" for c in cells})
        within = f", to within {off} bytes" if off else ""
        out[(tensor, where)] = (
            f"{', '.join(into)} changed with the fill of the bytes outside every tensor: a value was read "
            f"{how} (the address told from the value stored under the alternate fill{within}; "
            f"read_at: byte offset from {tensor}'s storage start)", cells)
    return out


def _output_findings(contract: Contract, case: Case, p: Plan, run: RunResult, expected: Expected,
                     outcome: Outcome, finding) -> Iterator[Finding]:
    """The torch oracle against the NumPy one, then the output rules (rules.output_rules) on
    every output."""
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
        answers = [np.asarray(a[name]) for a in accepted]
        want = answers[0]
        tv = None if torch_vals is None else np.asarray(torch_vals[name])

        if tv is not None and not any(same_on(tv, a, c.required) for a in answers):
            bad = c.required & (tv != want)
            yield finding("oracle_disagreement", name, extent(bad, c.required),
                          f"{name}: NumPy and torch oracles disagree on {int(bad.sum())} required cells",
                          _cells(bad, numpy=want, torch=tv))
        for kind, where, message, mask in output_rules(name, c.required, c.untouched, got, before, answers):
            shown = _cells(mask, numpy=want, torch=tv, got=got) if kind == "mismatch" else \
                _cells(mask, got=got, before=before)
            yield finding(kind, name, where, message, shown)
    if outcome.torch_ref_error:
        yield finding("oracle_disagreement", "-", "torch_error",
                      f"the torch oracle raised on an in-contract case: {outcome.torch_ref_error}")


def _equal(a: np.ndarray, b: np.ndarray) -> bool:
    """np.array_equal for integer arrays, without its overhead (it runs many times a case)."""
    return a.shape == b.shape and bool((a == b).all())


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
