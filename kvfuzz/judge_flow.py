"""The judge of one case's runs, written once for both array libraries: which checks judge
the case and in which order (`judge_steps`), and what each check finds (`judge_runs`,
`divergence_findings`). kvfuzz.judge runs it on NumPy arenas (`judge.PlanArena`, over a
materialize.Plan), the repro script on torch ones (its `TorchArena`); the script embeds this
module, so it imports only modules the script embeds too.

The contract's status and how the first run ended decide the checks:
- "invalid_accepted": a must-refuse case that ran;
- "lost": the run was lost (its process died or hung, or it faulted the device): a crash in
  contract or not, never a refusal; "raised": an in-contract case that raised (a crash);
- with the arena read back: "memory" (bytes outside every tensor's elements: an
  `out_of_bounds_write` charged to the output whose store overran; input elements:
  `input_modified`), then "outputs" (an in-contract case that ran: the output rules,
  `mismatch` and `untouched_write`) or "unchanged_outputs" (a must-refuse case that raised: it
  must have raised before writing), then "reruns" (the runs after the first against it,
  rules.rerun_rules: `nondeterministic` unless only racy cells differ, or an
  `out_of_bounds_read` named after the input read past).

An arena (`a` below) is the case's layout with the few array operations the checks need:
  a.names, a.outputs      the tensors in arena order, and the outputs among them
  a.regions               their places (name, start, nbytes, guard), as kvfuzz.places takes them
  a.image                 the arena before the call (a uint8 array)
  a.elements(name, arena) that tensor's logical values read from `arena`, as int64
  a.itemsize(name)        its element's size in bytes
  a.owner_of(positions)   per byte offset: the index of the tensor whose element holds it, or NOBODY
  a.owner_at(b)           the same for one byte offset (NOBODY outside the arena)
  a.as_canary(arena)      a run from the alternate image with the fill put back to the canary
  a.differ(x, y)          the byte offsets (ascending) where two arenas of one size differ
  a.nowhere               no byte offsets (an empty array of them)
  a.where(mask, limit)    the first `limit` indices (tuples of ints) where a boolean array holds
  a.unique(values)        the sorted distinct values of an integer array, as a list of ints
  a.same(x, y)            whether two arenas of one size hold the same bytes
  a.word(arena, w)        the little-endian int32 at byte 4 * w
A run is an object with `error` ("Type: first line" or None), `error_type`, `detail` (its
traceback or process log, or None), `after` (the arena after it, or None), `alt` (it started
from the alternate image) and `probe` (the band it probed, or None): kvfuzz's
execute.RunResult, the script's Run.
"""

from .faults import CUDA_FAULT
from .fills import alt_source
from .findings import Finding
from .places import band_words, charge_writes, read_place, region_of_byte
from .rules import after_error_rule, divergence_rules, extent, output_rules, racy_only, rerun_rules, same_on

NOBODY = -1  # owner of a byte that is no tensor's element (guard bands, stride gaps, slack)
MAX_CELLS = 8  # differing cells kept per finding
MAX_DECODED = 64  # differing elements read back per tensor when telling where a read came from
# the process died or hung, or the kernel faulted the GPU: never acceptable, in contract or not
# (error type -> the crash's `where`; None: the error's last word, its signal or exit status)
LOST = {"WorkerDied": None, "Timeout": "timeout", CUDA_FAULT: "cuda_fault"}


class OutputCells:
    """How one output of an in-contract case is judged: its required, may-write and untouched
    cells (boolean arrays of its logical shape) and the accepted answers (int64 arrays, the
    oracle's first; more at a float32 rounding boundary)."""

    __slots__ = ("required", "may_write", "untouched", "answers")

    def __init__(self, required, may_write, untouched, answers):
        self.required, self.may_write, self.untouched, self.answers = required, may_write, untouched, list(answers)


def judge_steps(status, raised, lost, arena_left):
    """The checks, in order, that judge a case of contract `status` ("in_contract",
    "out_of_contract", "must_refuse") whose first run `raised` (or was `lost`), and left an
    arena to read back (`arena_left`)."""
    steps = []
    if status == "must_refuse" and not raised and not lost:
        steps.append("invalid_accepted")
    if lost:
        steps.append("lost")
    elif status == "in_contract" and raised:
        steps.append("raised")
    if not arena_left:
        return steps
    steps.append("memory")
    if status == "in_contract" and not raised and not lost:
        steps.append("outputs")
    elif status == "must_refuse" and raised:
        steps.append("unchanged_outputs")
    steps.append("reruns")
    return steps


def judge_runs(a, op, path, status, reasons, runs, outputs=None, racy=None, oracle=None, oracle_error=None):
    """(the checks made, the findings) of one case's runs: the first judged in full, the later
    ones against it. `outputs`: {output: OutputCells} of an in-contract case; `racy`: {output:
    its cells two programs write} of an out-of-contract one; `oracle`: {output: the torch
    oracle's values} and `oracle_error` (what it raised), where kvfuzz ran it. A run lost after
    the first (a CUDA fault in a later run) is a crash too."""
    first = runs[0]

    def finding(kind, tensor, where, message, cells=()):
        return Finding(kind, op, path, tensor, where, message, tuple(cells))

    lost = first.error_type in LOST
    steps = judge_steps(status, first.error is not None, lost, first.after is not None)
    out = []
    if "invalid_accepted" in steps:
        out.append(finding("invalid_accepted", "-", reasons[0].split()[0], f"ran a case it must refuse: {reasons[0]}"))
    gone = first if lost else next((r for r in runs[1:] if r.error_type in LOST), None)
    if gone is not None:
        where = LOST[gone.error_type] or gone.error.split()[-1]
        tail = (gone.detail or "").strip().splitlines()[-1:]
        out.append(finding("crash", "-", where, f"the run was lost: {gone.error}"
                           + (f" (last output: {tail[0][:200]})" if tail else "")))
    if "raised" in steps:
        out.append(finding("crash", "-", first.error_type or "Exception",
                           f"raised on an in-contract case: {first.error}"))
    if "memory" not in steps:
        return steps, out
    out += memory_findings(a, first.after, finding)
    if "outputs" in steps:
        out += output_findings(a, first.after, outputs or {}, oracle, oracle_error, finding)
    if "unchanged_outputs" in steps:  # it must have refused before touching anything, outputs included
        for name in a.outputs:
            got = a.elements(name, first.after)
            broken = after_error_rule(name, got, a.elements(name, a.image), first.error_type)
            if broken is not None:
                kind, where, message, hit = broken
                out.append(finding(kind, name, where, message, cells_of(a, hit, got=got)))
    out += rerun_findings(a, first, runs[1:], racy or {}, finding)
    return steps, out


def memory_findings(a, after, finding):
    """Bytes outside every element (guards, gaps) and input elements that changed. A stray
    byte is charged to the output whose store overran (`write_place`), never to the
    neighbour it landed in (places.charge_writes): the message lists those."""
    changed = a.nowhere if a.same(after, a.image) else a.differ(after, a.image)
    owner = a.owner_of(changed)
    stray = changed[owner == NOBODY]
    out = []
    if len(stray):
        starts = {r.name: r.start for r in a.regions}
        for (tensor, where), (bytes_, victims) in sorted(charge_writes(a.regions, a.outputs, stray.tolist()).items()):
            rel = [b - starts[tensor] for b in bytes_[:MAX_CELLS]] if tensor in starts else bytes_[:MAX_CELLS]
            landed = ", ".join(f"{n} {band_words(t, w)}" for (t, w), n in sorted(victims.items()))
            out.append(finding("out_of_bounds_write", tensor, where,
                               f"{len(bytes_)} bytes {where} {tensor}'s elements changed, written by a store to "
                               f"{tensor} (byte offsets from its storage start: {rel}); they landed in: {landed}",
                               [{"byte": x} for x in rel]))
    for i, name in enumerate(a.names):
        if name in a.outputs:
            continue
        hit = int((owner == i).sum())
        if hit:
            out.append(finding("input_modified", name, "elements", f"input {name} changed ({hit} bytes)"))
    return out


def output_findings(a, after, outputs, oracle, oracle_error, finding):
    """The torch oracle against the NumPy one (where kvfuzz ran it), then the output rules
    (rules.output_rules) on every output."""
    out = []
    for name, c in outputs.items():
        got = a.elements(name, after)
        before = a.elements(name, a.image)
        want = c.answers[0]
        tv = None if oracle is None else oracle[name]
        if tv is not None and not any(same_on(tv, x, c.required) for x in c.answers):
            bad = c.required & (tv != want)
            out.append(finding("oracle_disagreement", name, extent(bad, c.required),
                               f"{name}: NumPy and torch oracles disagree on {int(bad.sum())} required cells",
                               cells_of(a, bad, numpy=want, torch=tv)))
        for kind, where, message, mask in output_rules(name, c.required, c.untouched, got, before, c.answers):
            shown = cells_of(a, mask, numpy=want, torch=tv, got=got) if kind == "mismatch" else \
                cells_of(a, mask, got=got, before=before)
            out.append(finding(kind, name, where, message, shown))
    if oracle_error:
        out.append(finding("oracle_disagreement", "-", "torch_error",
                           f"the torch oracle raised on an in-contract case: {oracle_error}"))
    return out


def rerun_findings(a, first, later, racy, finding):
    """The runs after the first, by rules.rerun_rules: `nondeterministic`, or an
    `out_of_bounds_read` where a differing value was read from the fill (decoded from it), or
    else where the fill in one input's guard band or gap alone (a probe run) changes each run
    of it the same way, while the image run again does not change and no image's runs
    disagree with one another (rules.stable). A difference only in `racy` cells is none."""
    out = {}
    seen_diff = {}

    def compare(run):
        """(differs, the arena it left with the fill put back to the canary, the bytes that differ)."""
        if id(run) not in seen_diff:
            seen = a.as_canary(run.after) if run.alt else run.after
            if tuple(seen.shape) != tuple(first.after.shape):
                seen_diff[id(run)] = True, seen, a.nowhere
            elif run.error == first.error and a.same(seen, first.after):
                seen_diff[id(run)] = False, seen, a.nowhere
            else:
                seen_diff[id(run)] = True, seen, a.differ(seen, first.after)
        return seen_diff[id(run)]

    def same(x, y):
        """Whether two runs left the same arena (the fill put back to the canary) and raised alike."""
        (dx, sx, _), (dy, sy, _) = compare(x), compare(y)
        if x.error != y.error or tuple(sx.shape) != tuple(sy.shape):
            return False
        return not (dx or dy) or a.same(sx, sy)

    def owners(diff):
        return sorted({a.names[o] if o != NOBODY else "-" for o in a.unique(a.owner_of(diff))})

    def decoded(run):
        _, seen, diff = compare(run)
        return decoded_reads(a, first.after, seen, diff)

    racy = {name: cells for name, cells in racy.items() if bool(cells.any())}

    def only_racy(run):
        """Whether `run` differs from the first only in cells two programs of this
        (out-of-contract) case write: either program's value may be left there."""
        _, seen, diff = compare(run)
        if run.error != first.error or len(diff) == 0 or tuple(seen.shape) != tuple(first.after.shape):
            return False

        def differs_outside(name, cells):
            return bool(((a.elements(name, first.after) != a.elements(name, seen)) & ~cells).any())
        return racy_only(set(owners(diff)), racy, differs_outside)

    # "*": all of an input's bands at once (the schedule's first probe); its bands, one by one, tell where
    banded = [r for r in later if r.probe is None or not r.probe.endswith(":*")]
    for kind, run, places in rerun_rules(banded, first.error, lambda r: compare(r)[0], decoded, same):
        diff = compare(run)[2]
        if kind == "nondeterministic" and only_racy(run):
            continue
        if kind == "nondeterministic":
            names = owners(diff)
            fill = " (from the alternate image: not explained by the fill)" if run.alt else ""
            reads = {(names[0] if names else "-", "rerun"): (
                f"a second run of the same case differs{fill} ({len(diff)} bytes in "
                f"{', '.join(names) or 'the error'})", [])}
        elif kind == "read_decoded":
            reads = places
        else:
            reads = {tuple(band.split(":")): probed_read(a, band, compare(probe)[2]) for band, probe in places.items()}
        for (tensor, where), (message, cells) in reads.items():
            f = finding(kind if kind == "nondeterministic" else "out_of_bounds_read", tensor, where, message, cells)
            out.setdefault(f.signature, f)
    return list(out.values())


def probed_read(a, band, diff):
    """(message, cells) of an out-of-bounds read told by the probe runs of `band` ("input:where")."""
    tensor, where = band.split(":")
    owners = sorted({a.names[o] if o != NOBODY else "bytes outside the tensors"
                     for o in a.unique(a.owner_of(diff))}) or ["the error raised"]
    return (f"{', '.join(owners)} changed with the fill of the bytes outside every tensor: the kernel reads "
            f"{band_words(tensor, where)} (the alternate fill there alone changes the run, and the image run again "
            f"does not; the value read is not what it stored)", [{"changed": o} for o in owners[:MAX_CELLS]])


def decoded_reads(a, canary, alt, diff):
    """The out-of-bounds reads that explain the difference between a run from the image
    (`canary`) and a run from the alternate image (`alt`, its bytes still holding the fill put
    back to the canary; `diff`, the bytes where they differ): {(input, where): (message, cells)}
    for each place a differing value was read from, decoded from the value (fills.alt_source);
    {} when no differing value is a read of the fill (then the difference is not the fill's)."""
    inputs = tuple(n for n in a.names if n not in a.outputs) or tuple(a.names)
    starts = {r.name: r.start for r in a.regions}
    found = {}
    owner = a.owner_of(diff)

    def note(src, shown):
        if a.owner_at(src[0]) != NOBODY:
            return  # decodes to an element's address: not a read of the fill
        place, how = read_place(a.regions, inputs, src[0])
        entry = found.setdefault(place, [how, src[1], []])
        if len(entry[2]) < MAX_CELLS:
            shown["read_at"] = src[0] - starts[place[0]] if place[0] in starts else src[0]
            entry[2].append(shown)

    for i in a.unique(owner[owner != NOBODY]):
        name = a.names[i]
        bits = 8 * a.itemsize(name)
        mine, theirs = a.elements(name, canary), a.elements(name, alt)
        for key in a.where(mine != theirs, MAX_DECODED):
            src = alt_source(int(mine[key]), int(theirs[key]), bits)
            if src is not None:
                note(src, {"tensor": name, "index": list(key), "canary": int(mine[key]), "alternate": int(theirs[key])})
    for w in a.unique(diff[owner == NOBODY] // 4)[:MAX_DECODED]:  # stray words written with what was read
        x, y = a.word(canary, w), a.word(alt, w)
        src = alt_source(x, y, 32)
        if src is not None:
            note(src, {"tensor": "-", "byte": 4 * w, "canary": x, "alternate": y})
    out = {}
    for (tensor, where), (how, off, cells) in found.items():
        into = sorted({c["tensor"] if c["tensor"] != "-" else "bytes outside the tensors" for c in cells})
        within = f", to within {off} bytes" if off else ""
        out[(tensor, where)] = (
            f"{', '.join(into)} changed with the fill of the bytes outside every tensor: a value was read "
            f"{how} (the address told from the value stored under the alternate fill{within}; "
            f"read_at: byte offset from {tensor}'s storage start)", cells)
    return out


def divergence_findings(a, op, path, first, theirs, backend, outputs):
    """The primary run (`first`) against the same case's run on the cross-check backend
    (`theirs`): whether each raised or was lost, then every byte of the case's arena (output
    cells by their contract class, `outputs`: {output: OutputCells}; inputs; guard bands,
    gaps). Required cells that differ but are each an answer the oracle accepts (a float32
    rounding boundary) are not a divergence."""
    kind = "backend_divergence"

    def finding(tensor, where, message, cells=()):
        return Finding(kind, op, path, tensor, where, message, tuple(cells))

    if first.error_type in LOST:
        return []  # the primary run was lost: a crash already, nothing to compare
    if theirs.error_type in LOST:
        return [finding("-", "lost", f"ran on the primary device, but the run on {backend} was lost: {theirs.error}")]
    if (first.error is None) != (theirs.error is None):
        who, error = ("the primary device", first.error) if first.error else (backend, theirs.error)
        return [finding("-", "raised", f"raised on {who} only: {error}")]
    if first.error is not None or theirs.after is None or a.same(first.after, theirs.after):
        return []  # both raised (already a crash on an in-contract case), or the same arena
    changed = a.differ(first.after, theirs.after)
    owner = a.owner_of(changed)
    by_place = {}
    for b in changed[owner == NOBODY].tolist():
        place = region_of_byte(a.regions, b)
        by_place[place] = by_place.get(place, 0) + 1
    out = [finding(tensor, where, f"{n} bytes {where} {tensor}'s elements differ between the primary device and "
                   f"{backend}") for (tensor, where), n in sorted(by_place.items())]
    for i in a.unique(owner[owner != NOBODY]):
        name = a.names[i]
        mine, yours = a.elements(name, first.after), a.elements(name, theirs.after)
        hit = mine != yours
        if name not in a.outputs:
            out.append(finding(name, "input", f"input {name}: {int(hit.sum())} elements differ between the "
                               f"primary device and {backend}", cells_of(a, hit, primary=mine, **{backend: yours})))
            continue
        c = outputs[name]
        for where, message, bad in divergence_rules(name, backend, c.required, c.may_write, c.untouched, mine, yours,
                                                    c.answers):
            out.append(finding(name, where, message, cells_of(a, bad, primary=mine, **{backend: yours})))
    return out


def cells_of(a, mask, **arrays):
    """The first MAX_CELLS cells of `mask`, each with its index and its value in each array
    given (None: left out), as a finding lists them."""
    out = []
    for key in a.where(mask, MAX_CELLS):
        row = {"index": list(key)}
        for label, arr in arrays.items():
            if arr is not None:
                row[label] = int(arr[key])
        out.append(row)
    return out
