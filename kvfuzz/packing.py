"""Packed launches: k cases of one op in one kernel launch, each judged as if it ran alone.

The kernels of the KV-index family run one program per request row (or per row and block),
and in contract a row touches only its own cells. k in-contract cases of one compile class
can therefore run as one launch over their stacked rows. An op record's `packing`
(`PackSpec`) says how: each tensor is

* `ROWS`: its first dimension is the request row (one program each): the cases' rows are
  stacked back to back, so program `i` of the launch is row `i` of the stacked batch;
* `PREFIX`: a prefix sum over the rows (`kv_indptr`, bs + 1 or bs entries): stacked as `ROWS`
  (each case's entries but its last; the last case keeps all), its values offset;
* `RUNNING`: an output holding 0 and then the running sum over the rows (decode's
  `cu_seqlens_k`, bs + 1 entries): stacked as `PREFIX`, so a case's packed entries hold its own
  sums plus the totals of the cases before it, and its first entry is the last of the case before.
  Unpacking reads them back by value, less the sum before the case (`Pack._carry_running`); a
  packed sum past its dtype drops the pack;
* `SHARED`: an input every row reads whole (decode's `strided_indices`): cases pack only with
  cases holding the same values (`pack_key`), and the launch gets one copy (its bytes are the
  first case's);
* `POOL`: its first dimension is indexed by values (a request-pool table, a flat CSR output):
  the cases' blocks are stacked with a gap between two blocks at least as wide as both cases'
  guard bands, and the inputs that index it (`indexes`) get their values offset by the block's
  first row (but negative ones where they mean "none": `keep_negative`; in whole units where
  one value spans several rows: `units`, each block then starting at a unit). An input can be both:
  a token table is a `POOL` indexed by request-pool indices whose values index a token mapping,
  a `POOL` too (the kernel writes the mapping's values, never the ids: the ids may move).
* `PackSpec.moved`: an output holding an index input's values // a scalar (decode's and
  trtllm_mha's `page_table`: token ids // page_size, where the ids index an SWA mapping and
  move to a case's block of it). The mapping's blocks start at a multiple of the scalar
  (`PackSpec.aligned`), so the ids move by whole pages, and the output's cells that hold such a
  value (`PackSpec.moved_cells`: not a zeroed tail) are read back less the pages moved.

A tensor the spec does not name (shared by every row) makes a case unpackable.

Each case keeps its own plan, image and oracles (`execute.prepare`). The packed arena
(`Pack`) holds one region per tensor, the merged view the launch gets, with the cases' blocks
inside; every byte of it lies in exactly one case's window, a byte range that maps it to the
same byte of that case's own arena (its elements, its stride gaps, its guard bands). After the
run each changed byte is carried over to its case's arena, whose other bytes are its image
(`Pack.unpack`): the judge then sees the case's own arena as a run alone would have left it,
and judges it with the same code. The gap between two `POOL` blocks is the first case's: a
store past the end of case i lands in its `after` band (and past that, in the bands after it in
its own arena, which the judge charges to the output that overran), as the judge charges a
neighbour's band to the output before it; a store before the start of case i+1 is charged to
case i too, and the re-runs alone below put it right. `ROWS` blocks have no band between them
(the grid covers every row): a row's stray access across the boundary shows as its
neighbour's cell.

A packed finding is never taken on trust: the engine re-runs the case alone (`OpRun.take`), and
a signature the case alone does not show is a packing artefact (the engine's `pack_artefacts`),
after which every case of the batch is run alone, as for any signature only a batch shows. A
changed byte that maps to no case (into another tensor's elements of its arena) loses the pack:
its cases are judged alone.

Out-of-bounds reads: the packed alternate image holds the alternate fill of the packed arena,
so a read outside every element still changes the second run; the fill's words encode packed
positions, so the judge of the unpacked arena may name the wrong input, and the case's re-run
alone names the right one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .case import TensorSpec
from .execute import Launch, Outcome, Prepared, RunResult
from .materialize import CANARY_BYTE, GUARD_MAX, GUARD_MIN, NOBODY, Layout, refill
from .ops.record import POOL, PREFIX, ROWS, RUNNING, SHARED, NoPacking, PackSpec
from .places import round_up

DEFAULT_K = {"cpu": 8, "cuda": 16}  # cases per packed launch in `kvfuzz bench`'s packed pass


def spec_of(op: str) -> PackSpec | None:
    from .ops import record

    spec = record(op).packing
    return spec if isinstance(spec, PackSpec) else None


def refusal(spec: PackSpec, p: Prepared) -> str | None:
    """Why the prepared case cannot pack (None: it can)."""
    case = p.case
    if p.status != "in_contract":
        return "out of contract: its rows may reach any cell"
    if case.meta.get("as_called"):
        return "a call site's own launch"
    why = spec.refuse(case) if spec.refuse is not None else None  # the op's own rule first: its words
    if why is not None:
        return why
    bs = None
    for name, t in case.tensors.items():
        kind = spec.kind(name)
        if kind is None:
            return f"{name} is shared by every row"
        if kind == SHARED:  # one copy for every case: pack_key holds its values
            continue
        if not t.shape or t.strides[0] <= 0:
            return f"{name}'s rows are not stacked (first stride {t.strides[0] if t.shape else '-'})"
        # stacked at its own row stride, a row must end before the next begins: a one-row tensor's
        # row stride is free (a transposed (1, n) has (1, 1)), and with the next case's row at
        # that stride the two would share elements
        extent = 1 + sum((n - 1) * abs(s) for n, s in zip(t.shape[1:], t.strides[1:])) \
            if all(t.shape[1:]) else 0
        if t.strides[0] < extent:
            return f"{name}'s rows overlap when stacked (row stride {t.strides[0]} < a row's {extent} elements)"
        if kind == ROWS:
            if bs is None:
                bs = t.shape[0]
            elif t.shape[0] != bs:
                return f"{name} has {t.shape[0]} rows, the batch {bs}"
    if not bs:
        return "no request row"
    for name, t in case.tensors.items():
        if spec.kind(name) == PREFIX and t.shape[0] not in (bs, bs + 1):
            return f"{name} has {t.shape[0]} entries for {bs} rows"
        if spec.kind(name) == RUNNING and t.shape[0] != bs + 1:
            return f"{name} has {t.shape[0]} entries for {bs} rows, not {bs + 1} (0, then a sum per row)"
    return None


def pack_key(spec: PackSpec, p: Prepared) -> tuple:
    """Cases with equal keys can share a launch: the same variant, scalars, tensors, dtypes,
    strides and every dimension but the first (what a compile class fixes)."""
    case = p.case
    bs = next(t.shape[0] for n, t in sorted(case.tensors.items()) if spec.kind(n) == ROWS)
    prefix_extra = tuple(t.shape[0] - bs for n, t in sorted(case.tensors.items()) if spec.kind(n) == PREFIX)
    shared = tuple((n, t.shape, np.ascontiguousarray(case.values[n]).tobytes())
                   for n, t in sorted(case.tensors.items()) if spec.kind(n) == SHARED)
    return (case.op, case.variant, tuple(sorted(case.scalars.items())), prefix_extra, shared,
            tuple((n, t.dtype, t.shape[1:], t.strides) for n, t in sorted(case.tensors.items())))


@dataclass
class _Window:
    lo: int  # packed-arena bytes [lo, hi) map to case `member`'s arena at byte - shift
    hi: int
    member: int
    shift: int
    tensor: str


class Pack:
    """k prepared cases laid out as one launch's arena (the module's notes)."""

    def __init__(self, spec: PackSpec, members: list[Prepared]) -> None:
        self.members = members
        self.views: list[Layout] = []  # the launch's merged tensors
        self.blocks: list[Layout] = []  # each case's elements inside them (the alternate image's refill)
        windows: list[_Window] = []
        placed: list[tuple[str, str, int, TensorSpec, list[int], list[int]]] = []
        cursor = 0
        case0 = members[0].case
        bs = [next(t.shape[0] for n, t in sorted(p.case.tensors.items()) if spec.kind(n) == ROWS) for p in members]
        self.first_rows: dict[str, list[int]] = {}
        # pool -> rows per unit of the values that index it (a block starts at a whole unit)
        units = dict(spec.units)
        unit = {pool: int(case0.scalars.get(units[inp], 1)) for inp, pool in spec.indexes if inp in units}
        self.units = unit
        step = dict(unit)  # rows a block starts at a multiple of: its index's unit, and its alignment
        for pool, scalar in spec.aligned:
            step[pool] = math.lcm(step.get(pool, 1), max(int(case0.scalars.get(scalar, 1)), 1))
        self._block: dict[tuple[str, int], slice] = {}  # (tensor, member) -> its rows of the merged tensor
        self.bs = bs
        # the outputs read back by value (RUNNING sums, moved outputs): name, start, merged, first
        self._running: list[tuple[str, int, TensorSpec, list[int]]] = []
        self._moved = {out: (inp, scalar) for out, inp, scalar in spec.moved if out in case0.tensors
                       and inp in case0.tensors and any(i == inp and pool in case0.tensors for i, pool in spec.indexes)}
        self._moved_cells = spec.moved_cells
        self._shifts: dict[str, np.ndarray] | None = None
        self._run_bytes: np.ndarray | None = None
        for name in sorted(case0.tensors):
            kind = spec.kind(name)
            specs = [p.case.tensors[name] for p in members]
            regions = [p.plan.regions[name] for p in members]
            t0 = specs[0]
            item = t0.itemsize
            s0 = t0.strides[0]
            if kind == SHARED:  # one copy, the first case's (the others hold the same values: pack_key)
                rows = [specs[0].shape[0]] + [0] * (len(members) - 1)
            else:
                rows = [bs[j] if kind == ROWS else specs[j].shape[0] if kind == POOL or j == len(members) - 1
                        else bs[j] for j in range(len(members))]
            first = [0]
            for j in range(len(members) - 1):
                if kind == POOL:  # room for case j's after band and case j+1's before band
                    r, nxt = regions[j], regions[j + 1]
                    tail = round_up(r.nbytes) - r.nbytes + r.guard + nxt.guard
                    span = specs[j].storage_size - specs[j].offset + specs[j + 1].offset + -(-tail // item)
                    at = first[-1] + -(-span // s0)
                    first.append(-(-at // step.get(name, 1)) * step.get(name, 1))  # whole units of its index
                else:
                    first.append(first[-1] + rows[j])
            self.first_rows[name] = first
            shape = (first[-1] + rows[-1],) + t0.shape[1:]
            merged = TensorSpec(t0.dtype, shape, t0.strides, t0.offset)
            # each member's own band: a stray access reaches as far past its block as past its
            # tensor alone (bands sized to the merged tensor would double a pack's arena)
            guard = round_up(max(GUARD_MIN, max(r.guard for r in regions)))
            start = cursor + guard
            nbytes = merged.storage_size * item
            end = round_up(start + nbytes) + guard
            self.views.append((name, t0.dtype, start, nbytes, shape, t0.strides, t0.offset))
            # alone storage byte x of case j <-> packed byte start + (offset0 + first_j * s0 - offset_j) * item + x
            shifts = [start + (t0.offset + first[j] * s0 - specs[j].offset) * item - regions[j].start
                      for j in range(len(members))]
            lo = cursor
            for j in range(1 if kind == SHARED else len(members)):  # a shared tensor's bytes are the first case's
                if j == len(members) - 1 or kind == SHARED:
                    hi = end
                elif kind == POOL:  # the gap is case j's: a store past its end, as the judge charges one
                    hi = regions[j + 1].start + shifts[j + 1]
                else:  # rows back to back: case j+1 begins at its first element
                    hi = start + (t0.offset + first[j + 1] * s0) * item
                windows.append(_Window(lo, hi, j, shifts[j], name))
                lo = hi
                if rows[j]:
                    block_shape = (rows[j],) + t0.shape[1:]
                    self.blocks.append((name, t0.dtype, start, nbytes, block_shape, t0.strides,
                                        t0.offset + first[j] * s0))
            placed.append((name, kind, start, merged, first, rows))
            if kind == RUNNING or name in self._moved:
                self._running.append((name, start, merged, first))
            for j in range(len(members)):
                self._block[(name, j)] = slice(first[j], first[j] + rows[j])
            cursor = end
        self.size = max(cursor, GUARD_MIN)
        self._placed = placed
        # the byte ranges `write` fills whole: a contiguous merged tensor of stacked rows (not a POOL's blocks)
        self._whole = sorted((start + merged.offset * merged.itemsize,
                              start + (merged.offset + merged.numel) * merged.itemsize)
                             for _, kind, start, merged, _, rows in placed
                             if kind in (ROWS, PREFIX, RUNNING, SHARED) and merged.numel and merged.is_contiguous
                             and sum(rows) == merged.shape[0])
        self._windows = windows
        self._lo = np.array([w.lo for w in windows], dtype=np.int64)
        self.scalars = dict(case0.scalars)
        self.indexes = spec.indexes
        self.keep_negative = spec.keep_negative
        self.image: np.ndarray | None = None
        self._alt: np.ndarray | None = None
        self._clean = None  # clean_after's answer, () for none
        self._plan = None  # _clean_plan's answer, () for none
        self._outputs: list = []  # clean_after's output blocks (output_mask)

    def rows_of(self, name: str, member: int) -> slice:
        """Member `member`'s rows of merged tensor `name` (its elements, as the launch sees them)."""
        return self._block[(name, member)]

    def member_refs(self, ref: dict[str, np.ndarray], member: int) -> dict[str, np.ndarray]:
        """A member's part of the torch oracle's answer for the whole pack (`ref`, one answer
        over the merged tensors): each output's rows of the member."""
        return {name: self.member_ref(name, v, member) for name, v in ref.items()}

    def member_ref(self, name: str, v, member: int) -> np.ndarray:
        """A member's part of one merged output (an answer over the whole pack): its rows; of a
        running sum, its bs + 1 entries less the sum of the members before it (their total:
        the entry its first one shares with the member before)."""
        v = np.asarray(v)
        if name in self._moved:
            rows = v[self.rows_of(name, member)]
            return (rows - self._move_of(name, member)).astype(v.dtype)
        for run_name, _, _, first in self._running:
            if run_name == name:
                a = v[first[member] : first[member] + self.bs[member] + 1]
                return (a.astype(np.int64) - (int(a[0]) if member and a.size else 0)).astype(v.dtype)
        return v[self.rows_of(name, member)]

    def shifts(self) -> dict[str, np.ndarray]:
        """Index input -> each member's value shift (summed over the pools it indexes)."""
        if self._shifts is not None:
            return self._shifts
        placed = {x[0] for x in self._placed}
        shifts: dict[str, np.ndarray] = {}
        for inp, pool in self.indexes:
            if inp in placed and pool in placed:  # else an optional tensor the cases lack
                move = np.asarray(self.first_rows[pool], dtype=np.int64) // self.units.get(pool, 1)
                shifts[inp] = shifts[inp] + move if inp in shifts else move
        self._shifts = shifts
        return shifts

    def _move_of(self, name: str, member: int) -> np.ndarray:
        """What moved output `name` adds to each of a member's own cells packed (0 where its
        cells hold values of their own)."""
        inp, scalar = self._moved[name]
        move = int(self.shifts()[inp][member]) // max(int(self.scalars.get(scalar, 1)), 1)
        cells = np.asarray(self._moved_cells(self.members[member].case, name), dtype=bool)
        return np.where(cells, move, 0)

    def offsets(self, name: str) -> list[int]:
        """Per member, the total of the members before it in running output `name` (its NumPy
        oracle's last entry, summed): what a correct run adds to its entries."""
        out, acc = [], 0
        for p in self.members:
            out.append(acc)
            acc += int(np.asarray(p.expected.values[name])[-1])
        return out + [acc]

    def write(self, buf: np.ndarray) -> bool:
        """Write the packed image into `buf` (`size` bytes): the canary, each case's elements
        in its block, the index inputs offset to their blocks. False where an offset value
        does not fit its dtype (the pack is then not used). Rows stacked back to back (`ROWS`,
        `PREFIX`) are written in one assignment; a `POOL` tensor's blocks one by one (gaps
        between them keep the canary)."""
        # the canary everywhere but the merged tensors written whole below (rows back to back, contiguous)
        at = 0
        for lo, hi in self._whole:
            if lo > at:
                buf[at:lo].fill(CANARY_BYTE)
            at = max(at, hi)
        if at < buf.size:
            buf[at:].fill(CANARY_BYTE)
        shifts = self.shifts()  # index input -> each member's value shift (summed over its pools)
        n = len(self.members)
        for name, kind, start, merged, first, rows in self._placed:
            shift = shifts.get(name)
            if kind == RUNNING:  # the merged sum must fit: past its dtype every later entry would wrap
                info = np.iinfo(merged.dtype)
                if self.offsets(name)[-1] > info.max:
                    return False
            if kind in (ROWS, PREFIX, RUNNING, SHARED):  # one block of every member's rows
                parts = [p.plan.elements(name)[: rows[j]] for j, p in enumerate(self.members) if rows[j]]
                blocks = [(0, sum(rows), np.concatenate(parts) if len(parts) > 1 else parts[0],
                           None if shift is None else np.repeat(shift, rows))]
            else:
                blocks = [(first[j], rows[j], p.plan.elements(name)[: rows[j]], None if shift is None else shift[j])
                          for j, p in zip(range(n), self.members) if rows[j]]
            for at, count, src, move in blocks:  # no member's own image is written
                if move is not None:
                    moved = src.astype(np.int64)
                    if np.ndim(move):  # per row: as wide as the rows' elements
                        move = move.reshape((-1,) + (1,) * (moved.ndim - 1))
                    moved += np.where(moved < 0, 0, move) if name in self.keep_negative else move
                    info = np.iinfo(merged.dtype)
                    if moved.size and (moved.max() > info.max or moved.min() < info.min):
                        return False
                    src = moved
                _view(buf, merged, start, at, count)[...] = src
        buf.setflags(write=False)
        self.image = buf
        return True

    @property
    def alt_image(self) -> np.ndarray:
        """The packed image under the alternate fill (every byte but the cases' elements)."""
        if self._alt is None:
            alt = np.empty(self.size, dtype=np.uint8)
            refill(alt, self.image, tuple(self.blocks))
            alt.setflags(write=False)
            self._alt = alt
        return self._alt

    def unpack(self, after: np.ndarray, alt: bool) -> list[np.ndarray] | None:
        """Each case's arena as the packed run left it: its image (alternate image for a run
        from the alternate one), with every byte the run changed carried over. None when a
        changed byte maps to no case (it lands in another tensor's elements of its arena)."""
        start = self.alt_image if alt else self.image
        outs = [(p.plan.alt_image if alt else p.plan.image).copy() for p in self.members]
        changed = np.flatnonzero(after != start)
        if self._running and changed.size:  # a running sum's entries are carried by value, not byte
            sums = np.isin(changed, self._running_bytes())
            if sums.any():
                self._carry_running(after, start, outs)
                changed = changed[~sums]
        if not changed.size:
            return outs
        slot = np.searchsorted(self._lo, changed, side="right") - 1
        for w_i in np.unique(slot).tolist():
            w = self._windows[w_i]
            sel = changed[slot == w_i]
            pos = sel - w.shift
            p = self.members[w.member]
            if pos.min() < 0 or pos.max() >= p.plan.size:
                return None
            owner = p.plan.owner_of(pos)
            mine = p.plan.names.index(w.tensor)
            if ((owner != NOBODY) & (owner != mine)).any():
                return None
            outs[w.member][pos] = after[sel]
        return outs

    def _running_bytes(self) -> np.ndarray:
        """The packed arena's bytes of every running sum's entries (sorted)."""
        if self._run_bytes is None:
            parts = [_entry_bytes(at, merged) for _, at, merged, _ in self._running]
            self._run_bytes = np.unique(np.concatenate(parts)) if parts else np.zeros(0, np.int64)
        return self._run_bytes

    def _carry_running(self, after: np.ndarray, start: np.ndarray, outs: list[np.ndarray]) -> None:
        """Each member's entries of every running sum as it would hold them alone: the packed
        entries it spans less the sum before it, read one of two ways, whichever leaves more of
        its entries as its NumPy oracle has them: the entry it shares with the member before, as
        the run wrote it, or the members' expected total. A wrong sum then shows in the member
        whose rows made it and not in the members after it, whether it carries into the later
        entries (the first reading holds) or stays in one entry (the second does). A member's
        first entry lies at the member before's last (judged there): alone it is 0, and it gets
        0. An entry the run did not write keeps the member's own initial bytes."""
        for name, at, merged, first in self._running:
            if name in self._moved:
                for j, p in enumerate(self.members):
                    rows = slice(first[j], first[j] + self.bs[j])
                    got = _view(after, merged, at, rows.start, self.bs[j]).astype(np.int64)
                    wrote = got != _view(start, merged, at, rows.start, self.bs[j]).astype(np.int64)
                    view = p.plan.regions[name].view(outs[j])
                    view[wrote] = (got - self._move_of(name, j))[wrote].astype(view.dtype)
                continue
            n = merged.shape[0]
            got = _view(after, merged, at, 0, n).astype(np.int64)
            written = got != _view(start, merged, at, 0, n).astype(np.int64)
            offsets = self.offsets(name)
            for j, p in enumerate(self.members):
                lo, hi = first[j], first[j] + self.bs[j] + 1
                vals, wrote = got[lo:hi], written[lo:hi].copy()
                base = offsets[j]
                if j and wrote[0] and int(vals[0]) != base:
                    want = np.asarray(p.expected.values[name], dtype=np.int64)[1:]
                    held = wrote[1:] & (vals[1:] - int(vals[0]) == want)
                    if held.sum() > (wrote[1:] & (vals[1:] - base == want)).sum():
                        base = int(vals[0])
                own = vals - base
                if j:
                    own[0], wrote[0] = 0, True
                view = p.plan.regions[name].view(outs[j])
                view[wrote] = own[wrote].astype(view.dtype)

    def clean_after(self) -> tuple[np.ndarray, np.ndarray | None] | None:
        """What a correct run of every member leaves in the packed arena, for the pack's fast
        path (`judge.quick_pack`): (want, free), `want` the packed image with each member's
        clean-image output bytes (`judge.clean_image`) at their packed places, `free` a mask of
        the may-write bytes (None: none); `output_mask` says which bytes are the outputs'.
        None where a member has no clean image or an output's bytes leave its window (then the
        members are unpacked and judged one by one)."""
        if self._clean is None:
            self._clean = self._clean_after() or ()
        return self._clean or None

    def _clean_after(self):
        plan = self._clean_plan()
        if plan is None:
            return None
        outputs, writes, free = plan
        want = self.image.copy()
        for write in writes:  # in order: a moved output's move adds to its clean bytes
            write(want)
        self._outputs = outputs
        return want, free

    def _clean_plan(self):
        """What `clean_after` needs but the packed image itself: (output blocks (lo, hi,
        element mask or None), the writes that turn the image into `want`, in order, `free`), or
        None where the pack has no clean answer. Known before the image is written, so a
        launch can reserve the bytes its device proof needs (`proof_size`)."""
        if self._plan is None:
            self._plan = self._make_clean_plan() or ()
        return self._plan or None

    def _make_clean_plan(self):
        from .judge import clean_image

        window = {(w.tensor, w.member): w for w in self._windows}
        outputs = []  # (lo, hi, element mask or None: every byte) per output block
        writes = []
        free = None
        running = {x[0] for x in self._running}

        def put(lo, hi, src):
            def write(want):
                want[lo:hi] = src
            return write

        for j, p in enumerate(self.members):
            clean = clean_image(p)
            if clean is None:
                return None
            regions = p.plan.regions
            for start, bytes_, care in clean.outputs:
                name = next((n for n, r in regions.items() if r.start <= start < r.start + max(r.nbytes, 1)), None)
                if name in running and name not in self._moved:  # below: by value
                    continue
                w = window.get((name, j))
                if w is None:
                    return None
                a, b = start + w.shift, start + w.shift + bytes_.size
                lo, hi = max(a, w.lo), min(b, w.hi)  # a whole storage's edges may lie in a neighbour's window
                if lo >= hi:
                    return None
                cut = slice(lo - a, hi - a)
                if start == regions[name].start and bytes_.size == regions[name].nbytes:  # its whole storage
                    elements = p.plan.element_mask(name)
                    if elements[: cut.start].any() or elements[cut.stop :].any():
                        return None
                    outputs.append((lo, hi, elements[cut]))  # the alternate run refills the rest
                elif (lo, hi) != (a, b):  # its elements alone, and not all in its window
                    return None
                else:
                    outputs.append((lo, hi, None))
                # the bytes cut off are never this member's when unpacking: its image keeps them
                writes.append(put(lo, hi, bytes_[cut]))
                if care is not None:
                    if free is None:
                        free = np.zeros(self.size, dtype=bool)
                    free[lo:hi] |= ~care[cut]
        for name, at, merged, first in self._running:
            if name in self._moved:  # placed above as each member's own values: plus their move
                for j in range(len(self.members)):
                    def add_move(want, name=name, at=at, merged=merged, j=j, first=first):
                        view = _view(want, merged, at, first[j], self.bs[j])
                        view[...] = view.astype(np.int64) + self._move_of(name, j)
                    writes.append(add_move)
                continue
            # each member's sums plus the totals before it
            vals = np.zeros(merged.shape[0], dtype=np.int64)
            for j, (p, offset) in enumerate(zip(self.members, self.offsets(name))):
                mine = np.asarray(p.expected.values[name], dtype=np.int64)
                if mine.shape != (self.bs[j] + 1,):
                    return None
                vals[first[j] : first[j] + mine.size] = mine + offset

            def put_sums(want, merged=merged, at=at, vals=vals):
                _view(want, merged, at, 0, vals.size)[...] = vals
            writes.append(put_sums)
            entries = _entry_bytes(at, merged)
            lo, hi = int(entries.min()), int(entries.max()) + 1
            mask = np.zeros(hi - lo, dtype=bool)
            mask[entries - lo] = True
            outputs.append((lo, hi, mask))
        return outputs, writes, free

    def proof_size(self) -> int:
        """Bytes of the batch image's tail the pack's device proof (`proof`) takes: each output
        block's wanted bytes, and its care mask where it holds free bytes; 0 where the pack has
        no clean answer (it is then judged on the host)."""
        plan = self._clean_plan()
        if plan is None:
            return 0
        outputs, _, free = plan
        return sum((hi - lo) * (2 if free is not None and free[lo:hi].any() else 1) for lo, hi, _ in outputs)

    def proof(self, at: int) -> tuple[tuple, tuple, list[tuple[int, np.ndarray]]] | None:
        """The packed launch's device proof (`execute.keep_checks`, `output_checks`), as a lone
        case's: (`Launch.changes`: the output blocks' byte ranges; `Launch.expect` with offsets
        from the tail's start; the tail's parts from byte `at` of it: (offset, bytes)). Together
        the two checks ask what `judge.quick_pack` asks of the first run: every byte as
        `clean_after` wants it, free bytes aside. None where the pack has no clean answer."""
        got = self.clean_after()
        if got is None:
            return None
        want, free = got
        changes, expect, tail = [], [], []
        for lo, hi, _ in self._clean_plan()[0]:
            changes.append((lo, hi))
            w, c = at, -1
            tail.append((w, want[lo:hi]))
            at += hi - lo
            if free is not None and free[lo:hi].any():
                c = at
                tail.append((c, (~free[lo:hi]).view(np.uint8)))
                at += hi - lo
            expect.append((lo, w, hi - lo, c))
        return tuple(changes), tuple(expect), tail

    def output_mask(self) -> np.ndarray | None:
        """A mask of the packed arena's output element bytes (those `clean_after` sets), or
        None where it has no answer; built on request (the fast path does not need it)."""
        if self.clean_after() is None:
            return None
        mask = np.zeros(self.size, dtype=bool)
        for lo, hi, elements in self._outputs:
            mask[lo:hi] = True if elements is None else elements
        return mask

    def launch(self, base: int, repeat: bool, changes=None, expect=None) -> Launch:
        """The packed launch as a worker runs it: the merged views, the first case's scalars,
        and the torch oracle once over the merged inputs (rows are independent in contract, so
        its answer holds every member's at the member's rows: `member_refs`); with its device
        proof (`proof`), where it has one."""
        case = self.members[0].case
        merged = case.replace(values={}, meta={}, tensors={v[0]: TensorSpec(v[1], v[4], v[5], v[6]) for v in self.views})
        return Launch(merged, tuple(self.views), base, self.size, repeat, True, fill=tuple(self.blocks),
                      changes=changes, expect=expect)


def _entry_bytes(start: int, merged: TensorSpec) -> np.ndarray:
    """The bytes of a merged tensor's elements, its storage starting at byte `start`."""
    item = merged.itemsize
    at = np.full(1, merged.offset, dtype=np.int64)
    for n, st in zip(merged.shape, merged.strides):
        at = (at[:, None] + np.arange(n, dtype=np.int64)[None, :] * st).reshape(-1)
    return ((start + at * item)[:, None] + np.arange(item)).reshape(-1)


def _view(buf: np.ndarray, merged: TensorSpec, start: int, first: int, rows: int) -> np.ndarray:
    """Rows [first, first + rows) of a merged tensor whose storage starts at byte `start`."""
    item = merged.itemsize
    shape = (rows,) + merged.shape[1:]
    at = start + (merged.offset + first * merged.strides[0]) * item
    return np.ndarray(shape, merged.dtype, buf, at, tuple(s * item for s in merged.strides))


@dataclass
class Packs:
    """A batch's packs, parent side: which launch runs which cases, and their unpacking."""

    packs: list[Pack]
    launch_of: list[int]  # per pack: its launch's index in the batch
    member_of: dict[int, tuple[int, int]]  # case index -> (pack, place in it)
    # cases of packs proved clean on the device whose torch oracle disagrees (`clean`): run again alone
    rerun: set = field(default_factory=set)

    def __len__(self) -> int:
        return len(self.packs)

    def packed(self) -> int:
        return len(self.member_of)

    def clean(self, batch: list[Launch], result) -> dict[int, Outcome]:
        """The packed cases whose pack the fast path proves clean as a whole (`judge.quick_pack`:
        no unpacking), each with an outcome that carries its runs' errors and seconds (no arena)
        and its rows of the pack's torch oracle."""
        from .execute import outcome_of
        from .judge import quick_pack

        from .judge import pack_refs_agree

        out: dict[int, Outcome] = {}
        case_at = {place: i for i, place in self.member_of.items()}
        self.rerun = set()
        for k, (pack, li) in enumerate(zip(self.packs, self.launch_of)):
            ran = outcome_of(batch, result, li, copy=False)
            on_device = li in result.device_clean  # its bytes stayed there (execute.device_clean_launches)
            if on_device:
                if ran.cross is not None or ran.baseline is not None or ran.torch_ref is None or \
                        not pack_refs_agree(pack, ran.torch_ref):
                    # proved clean on the device, but the torch oracle disagrees: no bytes to
                    # unpack, so its cases run again alone, judged in full (as a lone case's)
                    self.rerun.update(case_at[(k, m)] for m in range(len(pack.members)))
                    continue
            elif ran.cross is not None or ran.baseline is not None or \
                    not quick_pack(pack, ran.runs, ran.torch_ref, ran.torch_ref_error):
                continue
            n = len(pack.members)
            for m in range(n):
                runs = [RunResult(None, None, None, r.seconds / n, None, r.alt, device_clean=on_device) for r in ran.runs]
                out[case_at[(k, m)]] = Outcome(runs, pack.member_refs(ran.torch_ref, m))
        return out

    def outcomes(self, batch: list[Launch], result, skip=frozenset()) -> dict[int, Outcome] | None:
        """Each packed case's outcome from its pack's runs, but the packs of cases in `skip`
        (None: a pack lost a byte to no case; the caller judges the batch's cases alone). Each
        member's torch oracle is its own, computed here from its values: the pack's answer is
        one over every member, and a pack that gets here may be one it does not hold for."""
        from .execute import outcome_of, torch_ref_alone

        out: dict[int, Outcome] = {}
        case_at = {place: i for i, place in self.member_of.items()}
        for k, (pack, li) in enumerate(zip(self.packs, self.launch_of)):
            if case_at[(k, 0)] in skip or case_at[(k, 0)] in self.rerun:
                continue
            ran = outcome_of(batch, result, li, copy=False)
            afters = [pack.unpack(r.after, r.alt) if r.after is not None else None for r in ran.runs]
            if any(a is None for a, r in zip(afters, ran.runs) if r.after is not None):
                return None
            n = len(pack.members)
            for m, p in enumerate(pack.members):
                runs = [RunResult(r.error, r.error_type, None if a is None else a[m], r.seconds / n, r.detail, r.alt)
                        for r, a in zip(ran.runs, afters)]
                out[case_at[(k, m)]] = Outcome(runs, *torch_ref_alone(p.case))
        return out


def group(spec: PackSpec, prepared: list[Prepared], repeat: list[bool], cross: list[bool], k: int) -> list[list[int]]:
    """The batch's packs (case indices, each of 2 to `k` cases, in stream order): cases of equal
    `pack_key` and re-run flag, none cross-checked."""
    open_: dict[tuple, list[int]] = {}
    out: list[list[int]] = []
    for i, p in enumerate(prepared):
        if cross[i] or refusal(spec, p) is not None:
            continue
        key = (pack_key(spec, p), repeat[i])
        members = open_.setdefault(key, [])
        members.append(i)
        if len(members) == k:
            out.append(open_.pop(key))
    out += [m for m in open_.values() if len(m) > 1]
    return sorted(out)


def _written(pk: "Pack", part: np.ndarray) -> bool:
    """Whether a pack's image could be written into `part`; one that cannot (or raises on a
    layout the pack spec did not foresee) is dropped, and its cases launch alone: packing never
    costs a case."""
    try:
        return bool(pk.write(part))
    except Exception:
        return False


def launches(prepared: list[Prepared], repeat: list[bool], cross: list[bool], k: int, prove_on_device: bool = True,
             ring=None) -> tuple:
    """(image, launches, packs) of a batch: one launch per case (a packed case's launch runs
    nothing and has no bytes in the batch's image: its pack's launch runs it and computes the
    torch oracle for every member), then one launch per pack. `packs` is None where nothing
    packed. `prove_on_device`: as `execute.launches`'s, for the lone cases (never a pack's launch);
    `ring`: as its, too."""
    from .execute import changes_of, expectations, launches as plain, tail_size, with_tail

    spec = spec_of(prepared[0].case.op) if prepared and k > 1 else None
    groups = group(spec, prepared, repeat, cross, k) if spec is not None else []
    try:
        packs = [Pack(spec, [prepared[i] for i in g]) for g in groups]
    except Exception:  # a layout the pack spec did not foresee: these cases run alone, as unpacked
        packs = []
    kept = list(zip(groups, packs))
    while kept:  # a pack whose image cannot be written is dropped and the batch laid out again
        member_of = {i: (n, place) for n, (g, _) in enumerate(kept) for place, i in enumerate(g)}
        sizes = [0 if i in member_of else p.plan.size for i, p in enumerate(prepared)] + [pk.size for _, pk in kept]
        bases, cursor = [], 0
        for n in sizes:
            bases.append(cursor)
            cursor = round_up(cursor + n)
        # a lone case's wanted output bytes, in the image's tail (`execute.launches`'s `prove_on_device`),
        # then each pack's (`Pack.proof`), placed once the packs' images are written
        expect, tail = expectations(prepared, [prove_on_device and i not in member_of and not x for i, x in enumerate(cross)])
        lone_tail = sum(part.size for _, part in tail)
        proofs = [pk.proof_size() if prove_on_device else 0 for _, pk in kept]
        n = max(cursor + round_up(lone_tail + sum(proofs)), 1)
        image = ring.take(n, [p.plan for p in prepared]) if ring is not None else np.empty(n, dtype=np.uint8)
        failed = [n for n, ((_, pk), base) in enumerate(zip(kept, bases[len(prepared):]))
                  if not _written(pk, image[base : base + pk.size])]
        if not failed:
            break
        kept = [x for n, x in enumerate(kept) if n not in failed]
    if not kept:
        image, batch = plain(prepared, repeat, cross, prove_on_device, ring)
        return image, batch, None
    for i, (p, base) in enumerate(zip(prepared, bases)):
        if i in member_of:
            continue
        part = image[base : base + p.plan.size]
        if p.plan._image is None:
            p.plan._write(part)
        else:
            part[:] = p.plan._image
    proved, at = [], lone_tail
    for (_, pk), size in zip(kept, proofs):
        proof = pk.proof(at) if size else None
        if proof is None:
            proved.append((None, None))
            continue
        changes, pack_expect, parts = proof
        tail += parts
        at += size
        proved.append((changes, pack_expect))
    expect = with_tail(image, expect + [e for _, e in proved], tail)
    pack_expect = expect[len(prepared):]
    batch = [Launch(p.case.replace(values={}, meta={}), p.plan.layouts, 0, 0, False, False, x, run=False)
             if i in member_of else
             Launch(p.case.replace(values={}, meta={}), p.plan.layouts, base, p.plan.size, rep,
                    p.status == "in_contract", x, changes=changes_of(p), expect=expect[i])
             for i, (p, base, rep, x) in enumerate(zip(prepared, bases, repeat, cross))]
    launch_of = []
    for (g, pk), base, (changes, _), e in zip(kept, bases[len(prepared):], proved, pack_expect):
        launch_of.append(len(batch))
        batch.append(pk.launch(base, repeat[g[0]], changes, e))
    return image, batch, Packs([pk for _, pk in kept], launch_of, member_of)


__all__ = ["DEFAULT_K", "NoPacking", "POOL", "PREFIX", "PackSpec", "Packs", "ROWS", "Pack", "group", "launches",
           "pack_key", "refusal", "spec_of"]
