"""Launch cases on a target: materialise, call, synchronise, snapshot. No judging.

What comes back (`Outcome`) is plain data (host images of the arena after each run, the
error if the target raised, the torch oracle's answer) so the same functions run inside a
worker process and send their result back. The torch oracle runs on the host, from the
inputs' values, whatever device runs the target: on a GPU its many tiny kernels per case
would cost more device time than the kernel under test.

Two ways to run:
* `run_case`: one case, its own arena, one synchronisation per run. Replays, the minimizer
  and every finding's confirmation use it. Runs alternate between the case's image and its
  alternate image (materialize.refill): a second run is the determinism check and the
  out-of-bounds read check at once.
* `run_batch`: many cases packed into one device arena (`materialize.pack`): one copy to
  the device, every case launched, one synchronisation, one copy back (on a GPU, of the
  launches the worker could not prove clean there: `output_checks`). The fuzzing loop uses
  it. A CUDA fault inside a batch poisons the context and cannot be pinned on one case from
  there, so the batch reports itself lost and the caller re-runs its cases one by one.

A CUDA error raised by the target's call or by the synchronisation after it is a device
fault (`CudaFault`): the kernel made an illegal access, never an argument refusal.
"""

from __future__ import annotations

import os
import time
import traceback
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from .alt_arena import alternate_on_device, fits as fits_alt
from .case import Case
from .contract import Expected
from .device import torch_device
from .errors import BadInput
from .faults import CUDA_FAULT, is_device_fault, one_line
from .fills import alt_words
from .materialize import ImageRing, Layout, Plan, layouts, pack, plan as make_plan, refill, to_device, views_at
from .ops import CONTRACTS
from .places import round_up
from .rerun_schedule import run_schedule
from .wrapper_alloc import OVERRUN, Guard

ENVIRONMENT = "EnvironmentError"  # Triton's own machinery failed (not the target): see environment.py
HARNESS = "HarnessError"  # kvfuzz itself failed on the case (a kvfuzz bug, never a finding)
HOST = "cpu"  # where the torch oracle runs, whatever runs the target (see oracles/torch_ref.py)
# ... but for a launch of at least this many bytes on a GPU, where set: there the host's oracle
# costs milliseconds (production tables), the device's a few dozen small kernels. None (off):
# its answers agree with the host's on an H100 (tests/test_torch_oracle_device.py), but one H200
# bench saw it gain for one op of two (docs/performance.md).
# KVFUZZ_DEVICE_ORACLE_BYTES=N sets it (workers inherit it), to measure it on a GPU
DEVICE_ORACLE_BYTES: int | None = None
DEVICE_ORACLE_ENV = "KVFUZZ_DEVICE_ORACLE_BYTES"


def device_oracle_bytes() -> int | None:
    """The launch size from which a GPU runs the torch oracle: `DEVICE_ORACLE_BYTES`, or the
    environment's `KVFUZZ_DEVICE_ORACLE_BYTES` where set."""
    raw = os.environ.get(DEVICE_ORACLE_ENV, "").strip()
    if not raw:
        return DEVICE_ORACLE_BYTES
    try:
        n = int(raw)
    except ValueError:
        n = -1
    if n < 0:
        raise BadInput(f"{DEVICE_ORACLE_ENV}={raw!r}: expected a number of bytes, 0 or more")
    return n


@dataclass
class RunResult:
    error: str | None = None  # "TypeName: first line of the message"
    error_type: str | None = None
    after: np.ndarray | None = None  # the arena's bytes after the run (None if unreadable)
    seconds: float = 0.0
    detail: str | None = None  # the traceback's last frames, for replay output
    alt: bool = False  # the run started from the alternate image (guard bands and gaps refilled)
    probe: str | None = None  # "tensor:where": only that guard band or gap held the alternate fill
    # for a re-run from the alternate image in a batch on a GPU: whether it differs from the first
    # run only in words holding the alternate fill (`Plan.fill_only`), checked on the device
    # (`fill_checks`); None: not checked there
    fill_ok: bool | None = None
    # for a first run in a batch on a GPU: whether every byte it changed lies in the case's
    # outputs (`Launch.changes`), checked on the device (`keep_checks`); None: not checked there
    keep_ok: bool | None = None
    # a run of a batch on a GPU that the worker proved clean on the device (`device_clean_launches`):
    # its bytes never left the device, so `after` is None and only `judge.quick_verdict` may judge it
    device_clean: bool = False


@dataclass
class Outcome:
    runs: list[RunResult] = field(default_factory=list)
    torch_ref: dict[str, np.ndarray] | None = None
    torch_ref_error: str | None = None
    device_lost: bool = False  # a CUDA error left the context unusable: stop this process
    cross: "Outcome | None" = None  # the same case on the cross-check backend (cross.py), if it ran there
    cross_backend: str | None = None  # that backend's device ("cpu": the interpreter)
    baseline: "Outcome | None" = None  # the same case on the baseline target (baseline.py), if it ran there


@dataclass
class Prepared:
    """One case planned and classified once: what the launch and the judge both need."""

    case: Case
    plan: Plan
    status: str  # in_contract | out_of_contract | must_refuse
    reasons: list[str]
    expected: Expected | None  # the NumPy oracle's answer (in-contract cases)
    index: int = -1  # its place in the engine's case stream
    structural: bool = False  # out of contract by its structure, not its values (Contract.assessment)
    clean_image: object = field(default=None, repr=False)  # judge.clean_image's answer, once computed


def prepare(case: Case, index: int = -1, stage: Callable[[str, float], None] | None = None) -> Prepared:
    """Classify (the NumPy oracle runs here) and plan `case`; `stage(name, seconds)` is told
    how long each took."""
    contract = CONTRACTS[case.op]
    t0 = time.perf_counter()
    status, reasons, expected, structural = contract.assessment(case)
    t1 = time.perf_counter()
    p = Prepared(case, make_plan(case, contract.outputs), status, reasons, expected, index, structural)
    if stage is not None:
        stage("oracle (numpy)", t1 - t0)
        stage("materialize", time.perf_counter() - t1)
    return p


def _sync(device: str) -> None:
    if device == "cuda":
        import torch

        torch.cuda.synchronize()


def _error_of(exc: BaseException, device: str) -> tuple[str, str]:
    """(error line, error type) of an exception raised by a target call or its synchronisation."""
    if device == "cuda" and is_device_fault(exc):
        return f"{CUDA_FAULT}: {one_line(exc)}", CUDA_FAULT
    from .environment import classify_error

    if classify_error(exc) == "environment":
        return f"{ENVIRONMENT}: {one_line(exc)}", ENVIRONMENT
    return one_line(exc), type(exc).__name__


def _call(target, case: Case, views, device: str, run: RunResult) -> bool:
    """Call the target and synchronise; record an error in `run`. False if the device faulted."""
    t0 = time.perf_counter()
    guard = Guard(target)  # the buffers the wrapper allocates itself: guarded (wrapper_alloc.py)
    try:
        with guard.watch(case.op, views):
            target.invoke(case.op, views, case.scalars, case.meta.get("as_called"))
        _sync(device)
        overrun = guard.settle().get(None)
        if overrun is not None:
            run.error, run.error_type = overrun, OVERRUN
    except Exception as exc:  # the target's exception is data here, judged later
        run.error, run.error_type = _error_of(exc, device)
        run.detail = "".join(traceback.format_exception(exc)[-3:])
        if run.error_type != CUDA_FAULT and device == "cuda":
            try:  # an ordinary error can still leave a faulting kernel behind it
                _sync(device)
            except Exception as late:
                run.error, run.error_type = f"{CUDA_FAULT}: {one_line(late)}", CUDA_FAULT
    run.seconds = time.perf_counter() - t0
    return run.error_type != CUDA_FAULT


def run_case(target, case: Case, device: str, repeats: int = 1, torch_ref: bool | None = None,
             plan: Plan | None = None) -> Outcome:
    """`repeats` runs, every second from the alternate image; then the torch oracle where
    `torch_ref` says it is due (True: the case is in contract, as its prepared case says:
    check.Checker; None: the case is classified here, its NumPy oracle run again). Where the first two differ by
    more than the fill, the case runs again from its image (the same fill: is it the run or
    the fill?) and once per input guard band and gap holding the alternate fill alone
    (`Plan.probe_image`; `RunResult.probe`: first all of an input's bands, "name:*", then each
    band of an input whose bands matter), so the judge can tell which input was read past even
    where the value read is not what the kernel stored (a length, an index)."""
    contract = CONTRACTS[case.op]
    p = plan or make_plan(case, contract.outputs)
    dev = torch_device(device)
    out = Outcome()

    def once(run: RunResult, image: np.ndarray) -> bool:
        arena, views = to_device(p, dev, image=image)
        ok = _call(target, case, views, device, run)
        if ok:
            try:
                run.after = arena.cpu().numpy()
            except Exception as exc:  # the fault showed only when the arena was read back
                run.error, run.error_type = f"{CUDA_FAULT}: {one_line(exc)}", CUDA_FAULT
        out.runs.append(run)
        if run.error_type == CUDA_FAULT:
            out.device_lost = True
            return False
        return True

    def make(alt: bool, probe: str | None, bands: tuple[str, ...]) -> tuple[RunResult, bool]:
        run = RunResult(alt=alt, probe=probe)
        image = p.probe_image(probe.split(":")[0], *bands) if probe else p.alt_image if alt else p.image
        return run, once(run, image)

    run_schedule(repeats, [n for n in p.names if n not in contract.outputs], p.bands, make,
                 lambda first, run: _fill_matters(p, first, run))
    if out.device_lost:
        return out
    # the torch oracle only for in-contract cases (out of them its indexing can fail), and on the
    # host, as in a batch
    if torch_ref is None:
        torch_ref = contract.classify(case)[0] == "in_contract"
    if torch_ref:
        out.torch_ref, out.torch_ref_error = torch_ref_alone(case)
    return out


def torch_ref_alone(case: Case) -> tuple[dict[str, np.ndarray] | None, str | None]:
    """(answer, None) or (None, the error's line): the torch oracle on the case's own values,
    on the host."""
    try:
        return {k: v.numpy() for k, v in CONTRACTS[case.op].torch_ref(case, HOST).items()}, None
    except Exception as exc:
        return None, one_line(exc)


def _fill_matters(p: Plan, first: RunResult, alt: RunResult) -> bool:
    """Whether a run from the alternate image left other bytes than the first run (the fill
    aside), or raised otherwise."""
    if first.after is None or alt.after is None:
        return False
    return first.error != alt.error or p.as_canary(alt.after).tobytes() != first.after.tobytes()


# batches ----------------------------------------------------------------------------------


@dataclass
class Launch:
    """One case of a batch, as a worker needs it: plain data, no values (they are in the
    image), no oracle answer, no owner map."""

    case: Case  # the case without its values: op, scalars, layouts, variant
    regions: tuple[Layout, ...]
    base: int  # byte offset of the case's image in the batch image
    size: int  # bytes of the case's image
    repeat: bool  # run it a second time, from its alternate image (determinism, out-of-bounds reads)
    torch_ref: bool  # compute the torch oracle (in-contract cases)
    cross: bool = False  # also run it on the cross-check backend (cross.py)
    run: bool = True  # launch it (False: a case of a packed launch, here for its torch oracle: packing.py)
    fill: tuple[Layout, ...] | None = None  # the elements its alternate image keeps, where not `regions` (a pack's)
    # the byte ranges (from `base`) a correct run may change: its outputs' storage, from its clean
    # image (`judge.CleanImage`); None: no such single image (or a pack's launch)
    changes: tuple[tuple[int, int], ...] | None = None
    # what a correct run leaves in those ranges, for the worker to compare on the device
    # (`output_checks`): per output (start from `base`, start of the wanted bytes in the batch
    # image, bytes, start of its care mask there or -1 where every byte counts). The wanted bytes
    # lie in the image's tail, past every case. None: the worker sends the run's bytes back
    expect: tuple[tuple[int, int, int, int], ...] | None = None


def launches(prepared: list[Prepared], repeat: list[bool], cross: list[bool] | None = None,
             prove_on_device: bool = True, ring: ImageRing | None = None) -> tuple[np.ndarray, list[Launch]]:
    """The batch's image and launches. `prove_on_device`: each in-contract case with a single
    clean image (not cross-checked) carries its wanted output bytes (`Launch.expect`), so a worker
    that checks on the device (`FILL_ON_DEVICE`) proves its clean runs clean there and sends none
    of their bytes back. `ring`: the image's buffer comes from it (`materialize.ImageRing`)."""
    cross = cross or [False] * len(prepared)
    changes = [changes_of(p) for p in prepared]
    expect, tail = expectations(prepared, [prove_on_device and not x for x in cross])
    image, bases = pack([p.plan for p in prepared], extra=tail_size(tail), ring=ring)
    expect = with_tail(image, expect, tail)
    return image, [Launch(p.case.replace(values={}, meta={}), layouts(p.plan), base, p.plan.image.size, rep,
                          p.status == "in_contract", x, changes=c, expect=e)
                   for p, base, rep, x, c, e in zip(prepared, bases, repeat, cross, changes, expect)]


def expectations(prepared: list[Prepared], wanted: list[bool]) -> tuple[list, list[tuple[int, np.ndarray]]]:
    """(each case's `Launch.expect` with offsets from the image's tail, the tail's parts: (offset,
    bytes)) for the cases `wanted` picks that have a single clean image (`judge.clean_image`)."""
    from .judge import clean_image  # (judge imports this module)

    expect, tail, at = [], [], 0
    for p, want in zip(prepared, wanted):
        clean = clean_image(p) if want else None
        if clean is None:
            expect.append(None)
            continue
        mine = []
        for start, good, care in clean.outputs:
            w, c = at, -1
            tail.append((w, good))
            at += good.size
            if care is not None:  # the may-write cells' bytes are free: 0 in the mask
                c = at
                tail.append((c, care.view(np.uint8)))
                at += good.size
            mine.append((start, w, good.size, c))
        expect.append(tuple(mine))
    return expect, tail


def tail_size(tail: list[tuple[int, np.ndarray]]) -> int:
    """The tail's bytes, in whole units: the batch's arena is viewed as every dtype."""
    return round_up(sum(part.size for _, part in tail))


def with_tail(image: np.ndarray, expect: list, tail: list[tuple[int, np.ndarray]]) -> list:
    """Write the tail's parts into the image's last `tail_size` bytes; `expect` with offsets in
    the image."""
    at = image.size - tail_size(tail)
    for off, part in tail:
        image[at + off : at + off + part.size] = part
    return [None if e is None else tuple((s, at + w, n, c if c < 0 else at + c) for s, w, n, c in e) for e in expect]


def changes_of(prepared: Prepared) -> tuple[tuple[int, int], ...] | None:
    """`Launch.changes`: the byte ranges a correct run of the case may change, its outputs'
    storage in its clean image (None where no single clean image says it)."""
    from .judge import clean_image  # (judge imports this module)

    clean = clean_image(prepared)
    return None if clean is None else tuple((start, start + want.size) for start, want, _ in clean.outputs)


@dataclass
class BatchResult:
    afters: list  # the batch arena after the first pass; {case: its bytes} after the second
    errors: list[list[tuple[str, str, str] | None]]  # per pass, per launch: (error, type, detail)
    seconds: list[list[float]]
    torch_refs: list[dict[str, np.ndarray] | None]
    torch_errors: list[str | None]
    lost: str | None = None  # why the batch cannot be judged (a device fault): re-run one by one
    stages: dict[str, float] = field(default_factory=dict)  # seconds: transfer, launch, torch oracle, sync
    cross: dict[int, "Outcome"] = field(default_factory=dict)  # launch index -> its run on the cross-check backend
    cross_backend: str | None = None
    baseline: dict[int, "Outcome"] = field(default_factory=dict)  # launch index -> its run on the baseline target
    fill_ok: dict[int, bool] = field(default_factory=dict)  # launch index -> `fill_checks`' answer
    keep_ok: dict[int, bool] = field(default_factory=dict)  # launch index -> `keep_checks`' answer
    # launches the worker proved clean on the device (`device_clean_launches`): none of their bytes came back
    device_clean: set[int] = field(default_factory=set)


def run_batch(target, image: np.ndarray, batch: list[Launch], device: str,
              after_out: np.ndarray | None = None, repeat_out: np.ndarray | None = None) -> BatchResult:
    """Every launch of `batch` on one arena (and the repeated ones on a second, which holds
    their alternate images: materialize.refill), one sync.
    With `after_out` (shared memory, from a worker's parent) the first arena is copied back
    into it, and `afters[0]` is None; with `repeat_out` too, the repeated cases' bytes of the
    second arena go there, each at its case's base, and `afters[1]` is None (on a GPU every
    case repeats: megabytes a batch that would otherwise be pickled through the pipe). On the
    CPU with both, the two arenas are those sections themselves."""
    import torch

    dev = torch_device(device)
    guard = Guard(target)  # the buffers the wrapper allocates itself: guarded (wrapper_alloc.py)
    contract_of = {b.case.op: CONTRACTS[b.case.op] for b in batch}
    stages = {"transfer": 0.0, "views": 0.0, "launch": 0.0, "torch_oracle": 0.0, "synchronise": 0.0}
    host = torch.from_numpy(image)
    passes = [list(range(len(batch))), [i for i, b in enumerate(batch) if b.repeat]]
    arenas, errors, seconds = [], [], []
    refs: list = [None] * len(batch)
    ref_errors: list = [None] * len(batch)
    t0 = time.perf_counter()
    # the interpreter runs on host memory: each pass runs in its section of the shared segment
    # itself, so nothing is copied back, and the second gets only the repeated cases' bytes
    in_place = dev.type == "cpu" and after_out is not None and repeat_out is not None
    if in_place:
        first = torch.from_numpy(after_out)
        first.copy_(host)
        spare = None
        if passes[1]:
            _alternate_into(image, batch, repeat_out)
            spare = torch.from_numpy(repeat_out)
    else:
        first = host.to(dev, copy=True)
        # the repeated cases' arena: their alternate images, written on the device from the
        # batch's copy there (alt_arena.py); else built on the host and copied over
        spare = None
        if passes[1] and fits_alt(batch):
            spare = alternate_on_device(first, batch, image.size)
        elif passes[1]:
            alt = repeat_out if repeat_out is not None else np.empty(image.size, dtype=np.uint8)
            _alternate_into(image, batch, alt)
            spare = torch.from_numpy(alt[: image.size]).to(dev, copy=True)
    # a large launch's torch oracle runs on the device, from a copy of its bytes taken before
    # any launch (the target may write its inputs)
    # (whole 256-byte units: its dtype views need a multiple of their item size; the batch
    # image is laid out in such units)
    # the batch's bytes before any launch, on the device, for `keep_checks`: a device-to-device copy
    before = first.clone() if dev.type in FILL_ON_DEVICE and any(b.changes is not None and b.run for b in batch) \
        else None
    limit = device_oracle_bytes()
    pristine = {i: first[b.base : b.base + round_up(b.size)].clone() for i, b in enumerate(batch)
                if limit is not None and b.torch_ref and dev.type != "cpu" and b.size >= limit}
    stages["transfer"] += time.perf_counter() - t0
    for sel, arena in zip(passes, (first, spare)):
        if not sel:
            arenas.append(None)
            errors.append([None] * len(batch))
            seconds.append([0.0] * len(batch))
            continue
        errs: list = [None] * len(batch)
        secs = [0.0] * len(batch)
        chosen = set(sel)
        t0 = time.perf_counter()
        views = [views_at(arena, b.regions, b.base) if i in chosen and b.run else None for i, b in enumerate(batch)]
        stages["views"] += time.perf_counter() - t0
        for i in sel:
            b = batch[i]
            if not b.run:
                continue
            t0 = time.perf_counter()
            try:
                with guard.watch(b.case.op, views[i], (len(errors), i)):  # (pass, case)
                    target.invoke(b.case.op, views[i], b.case.scalars, b.case.meta.get("as_called"))
            except Exception as exc:
                error, kind = _error_of(exc, device)
                if kind == CUDA_FAULT:
                    return lost_batch(batch, f"{error} (case {i} of the batch)")
                errs[i] = (error, kind, "".join(traceback.format_exception(exc)[-3:]))
            secs[i] = time.perf_counter() - t0
            stages["launch"] += secs[i]
        arenas.append(arena)
        errors.append(errs)
        seconds.append(secs)
    # the torch oracle on the host, from the batch's image (no kernel wrote it), while the device
    # runs the batch: on a GPU its dozen tiny kernels per case cost more device time than the target's
    t0 = time.perf_counter()
    for i, b in sorted(enumerate(batch), key=lambda x: x[0] in pristine):  # the host's first, overlapping the device
        if b.torch_ref:
            try:
                if i in pristine:
                    refs[i] = contract_of[b.case.op].torch_ref(b.case, dev, views_at(pristine[i], b.regions, 0))
                else:
                    refs[i] = contract_of[b.case.op].torch_ref(b.case, HOST, views_at(host, b.regions, b.base))
            except Exception as exc:
                ref_errors[i] = one_line(exc)
    stages["torch_oracle"] += time.perf_counter() - t0
    try:
        t0 = time.perf_counter()
        fill_ok = fill_checks(arenas[0], arenas[1], batch) \
            if dev.type in FILL_ON_DEVICE and arenas[1] is not None else {}
        keep_ok = keep_checks(before, arenas[0], batch) if before is not None else {}
        out_ok = output_checks(before, arenas[0], batch) if before is not None else {}
        _sync(device)
        for (pass_, i), line in guard.settle().items():  # a store past a wrapper's scratch buffer
            errors[pass_][i] = errors[pass_][i] or (line, OVERRUN, "")
        t1 = time.perf_counter()
        fill_ok = dict(zip(fill_ok[0], fill_ok[1].tolist())) if fill_ok else {}
        keep_ok = dict(zip(keep_ok[0], keep_ok[1].tolist())) if keep_ok else {}
        out_ok = dict(zip(out_ok[0], out_ok[1].tolist())) if out_ok else {}
        proved = device_clean_launches(batch, errors, ref_errors, fill_ok, keep_ok, out_ok)
        if in_place:
            afters = [None, None]  # the kernels ran in the sections
        else:
            if after_out is not None:
                _not_clean_into(arenas[0], batch, after_out, proved)
                after = None
            else:
                after = arenas[0].cpu().numpy()
            if repeat_out is not None and arenas[1] is not None:
                _repeated_into(arenas[1], batch, repeat_out, proved)
                afters = [after, None]
            else:
                afters = [after, _repeated(arenas[1], batch)]
        refs = _refs_to_host(refs, host)
        stages["synchronise"] += t1 - t0
        stages["transfer"] += time.perf_counter() - t1
    except Exception as exc:
        return lost_batch(batch, f"{CUDA_FAULT}: {one_line(exc)} (at the batch's synchronisation)")
    return BatchResult(afters, errors, seconds, refs, ref_errors, stages=stages, fill_ok=fill_ok, keep_ok=keep_ok,
                       device_clean=proved)


def device_clean_launches(batch: list[Launch], errors: list, ref_errors: list, fill_ok: dict, keep_ok: dict,
                     out_ok: dict) -> set[int]:
    """The launches whose runs the device proved clean: no error in either run, no torch oracle
    error, the first run changed only its outputs (`keep_checks`) and left there the bytes a
    correct run leaves (`output_checks`), and the re-run, where there was one, differs from it
    only in alternate-fill words (`fill_checks`). What `judge.quick_verdict` would check on the
    host but the torch oracle's agreement, which the parent checks on its own answer."""
    return {i for i, good in out_ok.items()
            if good and keep_ok.get(i) is True and errors[0][i] is None and ref_errors[i] is None
            and (not batch[i].repeat or (fill_ok.get(i) is True and errors[1][i] is None))}


def output_checks(before, after, batch: list[Launch]):
    """For each launch with `expect`: whether its first run (`after`) left in its outputs the
    bytes a correct run leaves, read from the image's tail in `before` (the batch's bytes before
    any launch: a stray store into the tail cannot make a run look clean), wherever the care
    mask counts the byte. On the device, byte by byte over the outputs alone; returns (launch
    indices, a bool tensor) for the caller to read after its synchronisation ({} where none is
    checked)."""
    import torch

    picked = [(i, b) for i, b in enumerate(batch) if b.expect is not None and b.run and b.size]
    if not picked:
        return {}
    dev = after.device
    segs = [(j, b.base + s, w, n, c) for j, (_, b) in enumerate(picked) for s, w, n, c in b.expect if n]
    if not segs:
        return [i for i, _ in picked], torch.ones(len(picked), dtype=torch.bool, device=dev)
    total = sum(s[3] for s in segs)
    meta = torch.tensor(segs, dtype=torch.int64).to(dev, non_blocking=True)
    seg = torch.repeat_interleave(torch.arange(len(segs), device=dev), meta[:, 3], output_size=total)
    off = torch.arange(total, device=dev, dtype=torch.int64) - (torch.cumsum(meta[:, 3], 0) - meta[:, 3])[seg]
    bad = after[meta[seg, 1] + off] != before[meta[seg, 2] + off]
    if any(s[4] >= 0 for s in segs):
        care = meta[seg, 4]
        counted = care < 0
        bad &= counted | (before[torch.where(counted, 0, care + off)] != 0)
    per_seg = torch.zeros(len(segs), dtype=torch.int64, device=dev).index_add_(0, seg, bad.to(torch.int64))
    counts = torch.zeros(len(picked), dtype=torch.int64, device=dev).index_add_(0, meta[:, 0], per_seg)
    return [i for i, _ in picked], counts == 0


# past this many launches not proved clean a batch's arenas come back in one copy, not one per launch
BACK_COPIES = 8


def _not_clean_into(arena, batch: list[Launch], out: np.ndarray, proved: set[int]) -> None:
    """The first arena's bytes of every launch not proved clean into `out` (a shared section):
    all of it in one copy where none was proved clean or many were not, else launch by launch."""
    import torch

    host = torch.from_numpy(out)
    rest = [b for i, b in enumerate(batch) if i not in proved and b.size]
    if not proved or len(rest) > BACK_COPIES:
        host[: arena.numel()].copy_(arena)
        return
    for b in rest:
        host[b.base : b.base + b.size].copy_(arena[b.base : b.base + b.size])


# where the re-runs' fill rule is checked by the worker, on the device, for the whole batch at
# once: on a GPU it is free there, and on the host it was the judge's costliest pass (a pass
# over every word of every re-run arena); the interpreter's arenas are host memory already
FILL_ON_DEVICE = {"cuda"}


def fill_checks(first, second, batch: list[Launch]):
    """For each launch re-run from its alternate image (`second`, the second arena) whose
    bytes are whole words: whether its bytes differ from the first run's (`first`) only in
    words that hold the alternate fill of their place in the launch's arena (`Plan.fill_only`'s
    rule, the fill from `materialize.alt_fill`). A dozen tensor operations over the batch's
    words wherever the arenas are, nothing read back: returns (launch indices, a bool tensor)
    for the caller to read after its synchronisation ({} where none is checked)."""
    import torch

    picked = [(i, b) for i, b in enumerate(batch)
              if b.repeat and b.run and b.size and b.base % 4 == 0 and b.size % 4 == 0]
    if not picked:
        return {}
    dev = first.device
    nw = min(first.numel(), second.numel()) // 4
    starts = torch.tensor([b.base // 4 for _, b in picked], dtype=torch.int64).to(dev, non_blocking=True)
    ends = torch.tensor([(b.base + b.size) // 4 for _, b in picked], dtype=torch.int64).to(dev, non_blocking=True)
    w1 = first[: 4 * nw].view(torch.int32)
    w2 = second[: 4 * nw].view(torch.int32)
    g = torch.arange(nw, device=dev, dtype=torch.int64)
    k = (torch.searchsorted(starts, g, right=True) - 1).clamp_(min=0)  # the picked launch at or before each word
    local = g - starts[k]
    inside = (local >= 0) & (g < ends[k])
    bad = inside & (w1 != w2) & ((w2.to(torch.int64) & 0xFFFFFFFF) != alt_words(local))
    counts = torch.zeros(len(picked), dtype=torch.int64, device=dev).index_add_(0, k, bad.to(torch.int64))
    return [i for i, _ in picked], counts == 0


def keep_checks(before, after, batch: list[Launch]):
    """For each launch with `changes`: whether every byte of its part of the batch that the
    first pass changed (`after` against `before`, the batch's bytes before any launch) lies
    in one of its `changes` ranges, i.e. whether the bytes a correct run leaves alone
    (`judge.CleanImage.spans`) were left alone. On the device, over the changed bytes only
    (a clean batch changes its outputs' bytes and nothing else); returns (launch indices, a
    bool tensor) for the caller to read after its synchronisation ({} where none is checked).
    The judge then compares the outputs alone on the host (`quick_verdict`)."""
    import torch

    picked = [(i, b) for i, b in enumerate(batch) if b.changes is not None and b.run and b.size]
    if not picked:
        return {}
    dev = after.device
    n = min(after.numel(), before.numel())
    starts = torch.tensor([b.base for _, b in picked], dtype=torch.int64)
    ends = torch.tensor([b.base + b.size for _, b in picked], dtype=torch.int64)
    ranges = sorted((b.base + a, b.base + z) for _, b in picked for a, z in b.changes if z > a)
    r_starts = torch.tensor([a for a, _ in ranges] or [n], dtype=torch.int64).to(dev, non_blocking=True)
    r_ends = torch.tensor([z for _, z in ranges] or [n], dtype=torch.int64).to(dev, non_blocking=True)
    starts, ends = starts.to(dev, non_blocking=True), ends.to(dev, non_blocking=True)
    changed = torch.nonzero(after[:n] != before[:n]).flatten()
    k = (torch.searchsorted(starts, changed, right=True) - 1).clamp_(min=0)  # the picked launch at or before it
    mine = (changed >= starts[k]) & (changed < ends[k])
    r = (torch.searchsorted(r_starts, changed, right=True) - 1).clamp_(min=0)
    allowed = (changed >= r_starts[r]) & (changed < r_ends[r])
    bad = mine & ~allowed
    counts = torch.zeros(len(picked), dtype=torch.int64, device=dev).index_add_(0, k, bad.to(torch.int64))
    return [i for i, _ in picked], counts == 0


def _alternate_into(image: np.ndarray, batch: list[Launch], out: np.ndarray) -> None:
    """The repeated cases' alternate images into `out`, each at its case's base (the bytes
    between them are not read)."""
    for b in batch:
        if b.repeat:
            refill(out[b.base : b.base + b.size], image[b.base : b.base + b.size], b.fill or b.regions)


def _repeated(arena, batch: list[Launch]) -> dict[int, np.ndarray] | None:
    """The repeated cases' part of the second arena, on the host (no shared segment to put
    it in: an in-process run)."""
    if arena is None:
        return None
    out = np.empty(arena.numel(), dtype=np.uint8)
    _repeated_into(arena, batch, out)
    return repeated_from(out, batch)


def _repeated_into(arena, batch: list[Launch], out: np.ndarray, proved: set[int] = frozenset()) -> None:
    """The repeated cases' bytes of `arena` (the second arena after its run) into `out`, each
    at its own base, but those of the cases proved clean on the device: in one copy where every
    case repeats and none was proved clean (or many were not), else case by case."""
    import torch

    picked = [b for i, b in enumerate(batch) if b.repeat and i not in proved]
    host = torch.from_numpy(out)
    if (len(picked) == len(batch) and not proved) or (proved and len(picked) > BACK_COPIES):
        host[: arena.numel()].copy_(arena)
        return
    for b in picked:
        host[b.base : b.base + b.size].copy_(arena[b.base : b.base + b.size])


def repeated_from(section: np.ndarray, batch: list[Launch], proved: set[int] = frozenset()) -> dict[int, np.ndarray]:
    """`afters[1]` from what `_repeated_into` wrote: each repeated case's bytes, copied out (a
    case proved clean on the device never came back)."""
    return {i: np.array(section[b.base : b.base + b.size]) for i, b in enumerate(batch)
            if b.repeat and i not in proved}


def not_clean_from(section: np.ndarray, batch: list[Launch], proved: set[int]) -> np.ndarray:
    """`afters[0]` from what `_not_clean_into` wrote: the whole section copied out where nothing
    was proved clean, else the other launches' bytes alone, each at its base (the rest never came
    back)."""
    if not proved:
        return np.array(section)
    out = np.empty(section.size, dtype=np.uint8)
    for i, b in enumerate(batch):
        if i not in proved and b.size:
            out[b.base : b.base + b.size] = section[b.base : b.base + b.size]
    return out


def _refs_to_host(refs: list[dict | None], image) -> list[dict[str, np.ndarray] | None]:
    """The torch oracle's answers as host arrays (a device answer copied back); one that
    aliases the batch's image (the parent reuses that memory for the next batch) is copied."""
    shared = image.untyped_storage().data_ptr()
    return [None if r is None else {k: t.cpu().numpy() if t.device.type != "cpu" else
                                    t.clone().numpy() if t.untyped_storage().data_ptr() == shared
                                    else t.numpy() for k, t in r.items()}
            for r in refs]


def lost_batch(batch: list[Launch], why: str) -> BatchResult:
    n = len(batch)
    return BatchResult([None, None], [[None] * n, [None] * n], [[0.0] * n, [0.0] * n], [None] * n, [None] * n,
                       lost=why)


def outcomes(batch: list[Launch], result: BatchResult) -> list[Outcome]:
    """Split a batch result into one `Outcome` per case (empty list if the batch was lost)."""
    if result.lost:
        return []
    return [outcome_of(batch, result, i) for i in range(len(batch))]


def outcome_of(batch: list[Launch], result: BatchResult, i: int, copy: bool = True) -> Outcome:
    """Case `i`'s `Outcome` of a batch that was not lost (`copy=False`: its arena bytes are a
    view into the batch's, valid while the batch result lives)."""
    b = batch[i]
    runs = []
    for p in (0, 1):
        if p == 1 and not b.repeat:
            break
        err = result.errors[p][i]
        clean = i in result.device_clean
        if clean:  # its bytes stayed on the device
            after = None
        elif p == 0:
            after = None if result.afters[0] is None else result.afters[0][b.base : b.base + b.size]
            after = after.copy() if copy and after is not None else after
        else:
            after = result.afters[1][i]
        run = RunResult(seconds=result.seconds[p][i], after=after, alt=p == 1,
                        fill_ok=result.fill_ok.get(i) if p == 1 else None,
                        keep_ok=result.keep_ok.get(i) if p == 0 else None, device_clean=clean)
        if err is not None:
            run.error, run.error_type, run.detail = err
        runs.append(run)
    return Outcome(runs, result.torch_refs[i], result.torch_errors[i],
                   cross=result.cross.get(i), cross_backend=result.cross_backend, baseline=result.baseline.get(i))
