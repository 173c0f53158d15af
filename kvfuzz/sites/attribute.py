"""Attribute a case's wrong cells, stray writes and stray reads to kernel statements.

The case runs once, in this process, on the CPU under Triton's interpreter, with every load and
store recorded (trace.py). Each store's addresses are then placed in the case's arena (which
output cell, which input element, which guard band or gap) or in a tensor the target's wrapper
made itself (a `.contiguous()` copy: the launches' own pointer arguments say where those lie),
and each load's addresses checked against every tensor argument of its launch. The first of
each kind of wrong is kept, with its statement:

* `wrong_value`: a required cell left with a value no oracle answer accepts, by the last store
  that wrote it; where the stored value equals a value one of the program's earlier loads
  returned on the same lane (or any lane), that load is named too (a wrong row read).
* `lost_write`: a required cell no store wrote: the store that wrote a wrapper's copy of the
  output, else the store that wrote the output's nearest cell.
* `stray_write` / `untouched_write` / `input_write`: a store outside every tensor's elements, to
  a cell the contract leaves alone, to an input.
* `stray_read`: a load outside every tensor argument's elements.
* `overlap`: a cell two programs wrote with different values (on a GPU, either may be left).
* `fault`: the first load or store (in the interpreter's order) with an address outside every
  tensor argument of its launch: where a crash or GPU fault of the case faults. A run whose wild
  access would kill the interpreter is traced guarded (trace.py): it stops before that access.

Besides the sites: `reads`, every load statement that read outside the tensors (a wrong read may
decide a store's address or mask without its value being stored), and `static`, per output the
one `tl.store` statement of the kernels that ran that writes it (static.py), where there is one.
"""

from __future__ import annotations

import dataclasses
import linecache
from dataclasses import dataclass, field

import numpy as np

from ..case import Case
from ..materialize import NOBODY, Plan
from ..places import region_of_byte
from .site import Site
from .trace import Access, Arg, Trace, Tracer

MAX_STRAY_LANES = 100_000  # stray load lanes kept to link to stores (`Attribution.lanes`)
ORDER = ("wrong_value", "lost_write", "stray_write", "untouched_write", "input_write", "stray_read", "overlap",
         "fault")


@dataclass
class Attribution:
    sites: dict[str, Site] = field(default_factory=dict)  # what -> the first such site
    error: str | None = None  # the target raised (the trace holds what ran before)
    truncated: bool = False
    guarded: bool = False  # traced guarded: the run stopped before its first access outside the tensors
    reads: list[dict] = field(default_factory=list)  # load statements that read outside: {file, line, text}
    static: dict[str, Site] = field(default_factory=dict)  # output -> the only store statement writing it
    depends: list[str] | None = None  # the inputs the case's broken precondition names ([]: in contract)
    unwritten: bool = False  # a required cell no store wrote (judged cases only)
    twice: dict | None = None  # {file, line}: the first store writing a cell another program wrote too
    # a load that read outside its tensors on a lane where the same program's store then wrote out
    # of place: [{"load": {file, line}, "store": {file, line, op}}], one per pair of statements
    lanes: list[dict] = field(default_factory=list)
    # per output: its own first `wrong_value` and `lost_write` sites (a finding names one tensor:
    # a case with two defects has the first wrong cell of each output at its own store)
    outputs: dict[str, dict[str, Site]] = field(default_factory=dict)
    # per output: (flat cell, the store access, lane) of its first wrong value; this process only
    first_wrong: dict = field(default_factory=dict, repr=False, compare=False)

    def to_json(self) -> dict:
        return {"sites": {k: s.to_json() for k, s in self.sites.items()}, "error": self.error,
                "truncated": self.truncated, "guarded": self.guarded, "reads": list(self.reads),
                "static": {k: s.to_json() for k, s in self.static.items()}, "depends": self.depends,
                "unwritten": self.unwritten, "lanes": list(self.lanes), "twice": self.twice,
                "outputs": {n: {k: s.to_json() for k, s in d.items()} for n, d in self.outputs.items()}}

    @classmethod
    def from_json(cls, d: dict) -> "Attribution":
        return cls({k: Site.from_json(s) for k, s in d.get("sites", {}).items()}, d.get("error"),
                   bool(d.get("truncated")), bool(d.get("guarded")), list(d.get("reads", ())),
                   {k: Site.from_json(s) for k, s in d.get("static", {}).items()}, d.get("depends"),
                   unwritten=bool(d.get("unwritten")), lanes=list(d.get("lanes", ())), twice=d.get("twice"),
                   outputs={n: {k: Site.from_json(s) for k, s in o.items()} for n, o in d.get("outputs", {}).items()})


def run_traced(target, case: Case, plan: Plan, guard: bool = False) -> tuple[Trace, np.ndarray, int, str | None]:
    """(trace, the arena's bytes after the run, the arena's address, the error raised or None):
    `case` run once on the CPU from its image; `guard`: stopped before its first access outside
    every tensor argument of its launch (`trace.stopped`)."""
    from ..materialize import to_device

    arena, views = to_device(plan, "cpu")
    error = None
    with Tracer(guard=guard) as tracer:
        try:
            target.invoke(case.op, views, case.scalars)
        except Exception as exc:  # what ran before it is still attributed
            error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    return tracer.trace, arena.numpy().copy(), arena.data_ptr(), error


def _text(file: str, line: int) -> str:
    return linecache.getline(file, line).strip()


def _site(a: Access, what: str, says: str, load: Access | None = None, origin: Access | None = None) -> Site:
    src = None
    if load is not None:
        src = {"kernel": load.func, "file": load.file, "line": load.line, "op": "tl.load",
               "text": _text(load.file, load.line)}
        if origin is not None and (origin.file, origin.line) != (load.file, load.line):
            src["via"] = {"file": origin.file, "line": origin.line, "text": _text(origin.file, origin.line)}
    return Site(a.func, a.file, a.line, f"tl.{a.op}", _text(a.file, a.line), what, says, src)


def _index(shape: tuple, flat: int) -> str:
    return "[" + ", ".join(str(int(i)) for i in np.unravel_index(flat, shape)) + "]" if shape else "[]"


class _Arena:
    """Addresses of a planned arena: whose element (region, flat cell index) each byte is."""

    def __init__(self, plan: Plan, base: int) -> None:
        self.plan, self.base = plan, base
        self._cell: dict[str, np.ndarray] = {}

    def inside(self, addr: int) -> bool:
        return self.base <= addr < self.base + self.plan.size

    def place(self, addr: int) -> tuple[str | None, int]:
        """(tensor whose element holds byte `addr`, its flat cell index), or (None, -1)."""
        off = addr - self.base
        who = int(self.plan.owner_of(np.array([off], dtype=np.int64))[0])
        if who == NOBODY:
            return None, -1
        name = self.plan.names[who]
        return name, int(self._cells(name)[off - self.plan.regions[name].start])

    def places(self, addrs: np.ndarray) -> list[tuple[int | None, int]]:
        """Per address: (index into the plan's names, or NOBODY; the flat cell index, or -1), or
        (None, -1) for an address outside the arena."""
        addrs = addrs.astype(np.int64) if addrs.size else np.zeros(0, dtype=np.int64)
        inside = (addrs >= self.base) & (addrs < self.base + self.plan.size)
        owner = np.full(addrs.shape, NOBODY, dtype=np.int64)
        offs = addrs - self.base
        owner[inside] = self.plan.owner_of(offs[inside])
        cell = np.full(addrs.shape, -1, dtype=np.int64)
        for who in np.unique(owner[inside & (owner != NOBODY)]).tolist():
            name = self.plan.names[who]
            sel = inside & (owner == who)
            cell[sel] = self._cells(name)[offs[sel] - self.plan.regions[name].start]
        return [(int(o) if ok else None, int(c)) for ok, o, c in zip(inside.tolist(), owner.tolist(), cell.tolist())]

    def _cells(self, name: str) -> np.ndarray:
        got = self._cell.get(name)
        if got is None:
            r = self.plan.regions[name]
            got = np.full(r.nbytes, -1, dtype=np.int64)
            idx = r.spec.element_index().ravel()
            for k in range(r.itemsize):
                got[idx * r.itemsize + k] = np.arange(idx.size)
            self._cell[name] = got
        return got

    def address(self, name: str, flat: int) -> int:
        r = self.plan.regions[name]
        return self.base + r.start + int(r.spec.element_index().ravel()[flat]) * r.itemsize

    def stray_words(self, addr: int) -> str:
        """Where a byte outside every element of the arena lies, in words."""
        off = addr - self.base
        name, where = region_of_byte(self.plan.regions.values(), off)
        if name == "-":
            return "outside every tensor"
        r = self.plan.regions[name]
        if where == "gap":
            return f"into a stride gap of {name}"
        if where == "after":
            n = (off - (r.start + r.nbytes)) // r.itemsize + 1
            return f"{n} element{'s' if n > 1 else ''} past the end of {name}"
        n = (r.start - off + r.itemsize - 1) // r.itemsize
        return f"{n} element{'s' if n > 1 else ''} before the start of {name}"


def _arg_place(args: list[Arg], addr: int) -> tuple[Arg | None, str, str]:
    """(the nearest argument, before|after|gap|outside, words) for an address outside every
    argument's elements."""
    best, out = None, (None, "outside", "outside every tensor argument")
    for a in args:
        if a.numel == 0:  # no elements: any access near its pointer is past its end
            d = abs(addr - a.ptr)
            n = max(addr - a.ptr, 0) // a.itemsize + 1
            w = f"{n} element{'s' if n > 1 else ''} past the end of {a.name} (it has no elements)"
            if best is None or d < best:
                best, out = d, (a, "after", w)
            continue
        if addr >= a.hi:
            d, place = addr - a.hi, "after"
            n = d // a.itemsize + 1
            w = f"{n} element{'s' if n > 1 else ''} past the end of {a.name}"
        elif addr < a.lo:
            d, place = a.lo - addr, "before"
            n = (d + a.itemsize - 1) // a.itemsize
            w = f"{n} element{'s' if n > 1 else ''} before the start of {a.name}"
        else:
            d, place, w = 0, "gap", f"into a stride gap of {a.name}"
        if best is None or d < best:
            best, out = d, (a, place, w)
    return out


def _bound(arena: "_Arena", args: list[Arg], a: Access, i: int, tensor: str) -> dict | None:
    """The bound of `tensor` that lane `i` of access `a` passed: {tensor, dim, side}, or None
    where the trace does not tell. A dimension of size 0 is passed by any access. Else the
    access's lanes must step along one dimension `k` (its stride is their address step): where
    its first lane is an element of the tensor, lane `i` is past dimension `k` when its index
    there, counted on from the first lane's, is outside it (a row written past its width); where
    the first lane is outside, by the only way its address splits into an index with every other
    dimension in range (the width passed) or with `k` in range (the rows passed), in 2-D; None
    where both splits exist (a contiguous table: a row past the last and the last row past its
    width are the same addresses) or the tensor is not the launch's own argument (a copy)."""
    r = arena.plan.regions.get(tensor)
    if r is None:
        return None
    spec, size = r.spec, r.itemsize
    zero = [d for d, n in enumerate(spec.shape) if n == 0]
    if zero:
        return {"tensor": tensor, "dim": zero[-1], "side": "after"}
    data = arena.base + r.start + spec.offset * size
    if not any(arg.ptr == data for arg in args) or a.addrs.size < 2:
        return None
    lanes, addrs = a.lanes.astype(np.int64), a.addrs.astype(np.int64)
    dl, da = int(lanes[1] - lanes[0]), int(addrs[1] - addrs[0])
    if dl <= 0 or da % (dl * size):
        return None
    step = da // (dl * size)
    if not np.array_equal(addrs - addrs[0], (lanes - lanes[0]) * step * size):
        return None  # not one run along a dimension
    dims = [d for d, (n, t) in enumerate(zip(spec.shape, spec.strides)) if t == step and n > 1]
    if len(dims) != 1 or (int(addrs[0]) - data) % size:
        return None
    k = dims[0]

    def past(d: int, at: int) -> dict | None:
        return None if 0 <= at < spec.shape[d] else {"tensor": tensor, "dim": d, "side": "after" if at > 0 else "before"}

    who, flat = arena.place(int(addrs[0])) if arena.inside(int(addrs[0])) else (None, -1)
    if who == tensor:
        first = np.unravel_index(flat, spec.shape)
        return past(k, int(first[k]) + int(lanes[i] - lanes[0]))
    if len(spec.shape) != 2 or 0 in spec.strides:
        return None
    j = 1 - k
    e = (int(addrs[0]) - data) // size
    tj, tk = spec.strides[j], spec.strides[k]
    rem = e - np.arange(spec.shape[j]) * tj  # j in range: k's index
    width = rem[rem % tk == 0] // tk
    rem = e - np.arange(spec.shape[k]) * tk  # k in range: j's index
    rows = rem[rem % tj == 0] // tj
    if width.size and not rows.size:
        return past(k, int(width[0]) + int(lanes[i] - lanes[0]))
    if rows.size and not width.size:
        return past(j, int(rows[0]))
    return None


def _overlap_bound(arena: "_Arena", trace: Trace, first: Access, fi: int, a: Access, i: int, name: str) -> dict | None:
    """The bound passed by either of two writes of one cell: a program that ran past its row
    writes the next row's first cell, which that row's own program writes too."""
    for x, k in ((first, fi), (a, i)):
        launch = trace.launches[x.launch] if 0 <= x.launch < len(trace.launches) else None
        got = _bound(arena, launch.args if launch else [], x, k, name)
        if got is not None:
            return got
    return None


def _case_tensor(arena: "_Arena", case: Case, arg: Arg | None, names) -> str:
    """The case's tensor a kernel argument is: its arena view's, or (a copy the wrapper made) the
    one of `names` with its element count and size, where only one has them."""
    if arg is None:
        return "-"
    if arena.inside(arg.ptr):
        name, _ = arena.place(arg.ptr)
        if name is not None:
            return name
    same = [n for n in names if n in case.tensors and n in arena.plan.regions
            and case.tensors[n].numel == arg.numel and arena.plan.regions[n].itemsize == arg.itemsize]
    return same[0] if len(same) == 1 else arg.name


def _source(trace: Trace, store: Access, lane: int, value) -> Access | None:
    """The program's last load before `store` that returned `value` on the store's lane `lane`
    (or a scalar load that returned it): where the stored value came from. A scalar store's value
    comes only from a scalar load: a lane of a vector reaches a scalar through a reduction, a
    value computed."""
    for a in reversed(trace.accesses[: store.seq]):
        if a.op != "load" or a.program != store.program or a.launch != store.launch:
            continue
        if a.width == 1 and a.values.size == 1 and a.values[0] == value:
            return a
        if store.width == 1:
            continue
        at = np.flatnonzero(a.lanes == lane)
        if at.size and a.values[at[0]] == value:
            return a
    return None


def _via(trace: Trace, load: Access) -> dict | None:
    """{file, line, text} of the load that gave the stray load `load` its addresses (`_origin`), or
    None where none did: a lookup through indices read wrong faults at the lookup."""
    if load.op != "load":
        return None
    first = _origin(trace, load)
    if first is load or (first.file, first.line) == (load.file, load.line):
        return None
    return {"file": first.file, "line": first.line, "text": _text(first.file, first.line)}


def _origin(trace: Trace, load: Access) -> Access:
    """The first load of the chain that gave `load` its addresses: an earlier load of the program
    whose values, on `load`'s lanes (a scalar load's: for a scalar `load`), are `load`'s element
    indices in one of the launch's tensor arguments (`ptr + vals`, an indirect load), followed
    back; `load` itself where none did. Indices all 0 prove nothing (`ptr + pid` at program 0
    looks the same). One wrong index read then shows at every store fed through it."""
    launch = trace.launches[load.launch] if 0 <= load.launch < len(trace.launches) else None
    ptrs = np.array([arg.ptr for arg in (launch.args if launch else [])], dtype=np.int64)
    for _ in range(8):  # a chain of indirections is short
        if not load.addrs.size or not ptrs.size:
            return load
        addrs = load.addrs.astype(np.int64)
        found = None
        for a in reversed(trace.accesses[: load.seq]):
            if a.op != "load" or a.program != load.program or a.launch != load.launch or not a.values.size \
                    or not np.issubdtype(a.values.dtype, np.integer):
                continue
            if a.width == 1:
                if load.width != 1:
                    continue
                v, addrs_at = a.values[:1].astype(np.int64), addrs
            else:  # the lanes both have active (a masked load's others returned its `other`)
                both, ia, il = np.intersect1d(a.lanes, load.lanes, return_indices=True)
                if not both.size:
                    continue
                v, addrs_at = a.values[ia].astype(np.int64), addrs[il]
            # indices all 0 prove nothing for a scalar (`ptr + pid` at program 0 looks the same);
            # a vector load all of whose lanes read one element is indirect all the same
            if not v.any() and (load.width == 1 or (addrs != addrs[0]).any()):
                continue
            base = addrs_at - v * load.itemsize
            if (base == base[0]).all() and (ptrs == base[0]).any():
                found = a
                break
        if found is None:
            return load
        load = found
    return load


def analyse(case: Case, plan: Plan, trace: Trace, after: np.ndarray, base: int, outputs: tuple[str, ...],
            cells: dict | None, accepted: tuple = ()) -> Attribution:
    """The first site of each kind of wrong (ORDER) the traced run shows. `cells`: the
    contract's cells per output (None: not judged, out of contract); `accepted`: the oracle's
    accepted answers (in-contract cases; empty: no wrong values judged)."""
    arena = _Arena(plan, base)
    out = Attribution(truncated=trace.truncated)
    sites = out.sites
    last_store: dict[int, tuple[Access, int, object]] = {}  # address -> (store, lane, value)
    writers: dict[int, tuple] = {}  # address -> (program, value, access, lane index) of its first writer
    inputs = [n for n in case.tensors if n not in outputs]
    strays: dict[tuple, tuple[str, int]] = {}  # (launch, program, lane) -> the first load statement reading outside
    copies = _copies(trace, arena, plan, outputs)
    via_copy: dict[int, tuple[Access, int, object]] = {}  # an output cell's address -> the store to its copy
    for a in trace.accesses:
        launch = trace.launches[a.launch] if 0 <= a.launch < len(trace.launches) else None
        args = launch.args if launch is not None else []
        held = np.zeros(a.addrs.shape, dtype=bool)  # per lane: in a tensor argument of the launch
        for arg in args:
            held |= arg.holds(a.addrs)
        if args and not held.all():
            addr = int(a.addrs[np.flatnonzero(~held)[0]])
            arg, place, words = _arg_place(args, addr)
            tensor = _case_tensor(arena, case, arg, inputs if a.op == "load" else outputs)
            if "fault" not in sites:
                verb = "reading" if a.op == "load" else "writing"
                sites["fault"] = dataclasses.replace(
                    _site(a, "stray_read" if a.op == "load" else "stray_write", f"faults, {verb} {words}"),
                    tensor=tensor, place=place, bound=_bound(arena, args, a, int(np.flatnonzero(~held)[0]), tensor),
                    via=_via(trace, a))
            if a.op == "load":
                if len(strays) < MAX_STRAY_LANES:
                    for lane in a.lanes[~held].tolist():
                        strays.setdefault((a.launch, a.program, lane), (a.file, a.line))
                read = {"file": a.file, "line": a.line, "text": _text(a.file, a.line)}
                if read not in out.reads:
                    out.reads.append(read)
                if "stray_read" not in sites:
                    sites["stray_read"] = dataclasses.replace(_site(a, "stray_read", f"reads {words}"),
                                                              tensor=tensor, place=place, via=_via(trace, a))
        if a.op == "load":
            continue
        places = arena.places(a.addrs)  # per lane: (owner index or NOBODY, cell), or (None, -1) outside it
        for i, (lane, addr, value) in enumerate(zip(a.lanes.tolist(), a.addrs.tolist(), a.values.tolist())):
            prev = writers.get(addr)
            if prev is None:
                writers[addr] = (a.program, value, a, i)
            elif prev[0] != a.program and out.twice is None:  # even with the same value: a moved segment's mark
                out.twice = {"file": a.file, "line": a.line}
            if prev is not None and prev[0] != a.program and prev[1] != value and "overlap" not in sites:
                name, flat = arena.place(addr) if arena.inside(addr) else (None, -1)
                cell = f"{name}{_index(plan.regions[name].spec.shape, flat)}" if name else f"address {addr:#x}"
                sites["overlap"] = dataclasses.replace(
                    _site(a, "overlap", f"writes {cell}, which another program writes with another value "
                                        f"({prev[1]} and {value})", _source(trace, a, lane, value)),
                    bound=_overlap_bound(arena, trace, prev[2], prev[3], a, i, name) if name else None)
            last_store[addr] = (a, lane, value)
            who, flat = places[i]
            if who is None and held[i] and copies.get(a.launch):
                for arg, name in copies[a.launch]:
                    if arg.ptr <= addr < arg.hi:  # the wrapper copies this cell into the output
                        via_copy[arena.address(name, (addr - arg.ptr) // arg.itemsize)] = (a, lane, value)
            if strays and _misplaced(who, flat, held[i], plan, outputs, cells):
                _link(out.lanes, strays.get((a.launch, a.program, lane)), a)
            if who is not None:
                name = plan.names[who] if who != NOBODY else None
                if name is None:
                    if "stray_write" not in sites:
                        tensor, place = region_of_byte(plan.regions.values(), addr - base)
                        source = _source(trace, a, lane, value)
                        sites["stray_write"] = dataclasses.replace(
                            _site(a, "stray_write", f"writes {arena.stray_words(addr)}", source),
                            tensor=tensor, place=place, bound=_bound(arena, args, a, i, tensor))
                elif name not in outputs:
                    if "input_write" not in sites:
                        sites["input_write"] = _site(a, "input_write", f"writes input {name}"
                                                     f"{_index(plan.regions[name].spec.shape, flat)}")
                elif cells is not None and "untouched_write" not in sites:
                    c = cells[name]
                    idx = np.unravel_index(flat, c.required.shape)
                    if c.untouched[idx]:
                        sites["untouched_write"] = _site(
                            a, "untouched_write", f"writes {name}{_index(c.required.shape, flat)}, a cell the contract "
                            "leaves alone", _source(trace, a, lane, value))
            elif not held[i]:
                if "stray_write" not in sites:
                    arg, place, words = _arg_place(args, addr)
                    tensor = _case_tensor(arena, case, arg, outputs)
                    sites["stray_write"] = dataclasses.replace(
                        _site(a, "stray_write", f"writes {words}", _source(trace, a, lane, value)),
                        tensor=tensor, place=place, bound=_bound(arena, args, a, i, tensor))
    out.static = _static(case, arena, trace, outputs)
    if cells is not None and accepted:
        out.unwritten = _wrong_cells(case, plan, arena, trace, after, outputs, cells, accepted, last_store, sites,
                                     out, via_copy, strays)
    return out


def _copies(trace: Trace, arena: "_Arena", plan: Plan, outputs: tuple[str, ...]) -> dict[int, list]:
    """Per launch: [(argument, output)] for each tensor argument the wrapper made itself (outside
    the arena, contiguous) with the element count and size of exactly one output: the wrapper's
    result, copied into the case's output after the kernel (a wrapper that returns a new
    tensor), so a store to its element i is a store to the output's cell i."""
    out: dict[int, list] = {}
    for n, launch in enumerate(trace.launches):
        for arg in launch.args:
            if arena.inside(arg.ptr) or not arg.contiguous or arg.numel == 0:
                continue
            same = [o for o in outputs if o in plan.regions and plan.regions[o].numel == arg.numel
                    and plan.regions[o].itemsize == arg.itemsize]
            if len(same) == 1:
                out.setdefault(n, []).append((arg, same[0]))
    return out


def _static(case: Case, arena: "_Arena", trace: Trace, outputs: tuple[str, ...]) -> dict[str, Site]:
    """Per output: the one `tl.store` statement, in the source of the kernels that were given it,
    whose pointer derives from its parameter (static.py); none where there are several or none."""
    from .static import stores_through

    found: dict[str, set[tuple]] = {}
    for launch in trace.launches:
        for arg in launch.args:
            name = _case_tensor(arena, case, arg, outputs)
            if name not in outputs or not launch.file:
                continue
            lines = stores_through(launch.file, launch.kernel, launch.line, arg.name)
            found.setdefault(name, set()).update((launch.kernel, launch.file, n) for n in lines)
            if not lines:
                found[name].add(("?", "?", 0))  # given it, no store seen through it: ambiguous
    out = {}
    for name, stores in found.items():
        if len(stores) == 1 and next(iter(stores))[2]:
            kernel, file, line = next(iter(stores))
            out[name] = Site(kernel, file, line, "tl.store", _text(file, line), "wrong_value",
                             f"is the only `tl.store` to {name} in {kernel}")
    return out


def _misplaced(who, flat: int, held: bool, plan: Plan, outputs, cells) -> bool:
    """Whether a store lane wrote out of place: outside every tensor, to an input, or to a cell
    the contract leaves alone."""
    if who is None:
        return not held
    if who == NOBODY:
        return True
    name = plan.names[who]
    if name not in outputs:
        return True
    if cells is None:
        return False
    c = cells[name]
    return bool(c.untouched[np.unravel_index(flat, c.required.shape)])


def _link(lanes: list[dict], load: tuple[str, int] | None, store: Access) -> None:
    if load is None:
        return
    link = {"load": {"file": load[0], "line": load[1]}, "store": {"file": store.file, "line": store.line, "op": "tl.store"}}
    if link not in lanes:
        lanes.append(link)


def _wrong_cells(case, plan, arena, trace, after, outputs, cells, accepted, last_store, sites, out,
                 via_copy=None, strays=None) -> bool:
    """Names the first wrong value and lost write in `sites`, and each output's own in
    `out.outputs`; whether a required cell no store wrote is left (a store whose writes moved
    leaves one, a store running past its end none). A cell no store wrote whose value is the one
    a store wrote to the wrapper's copy of it (`via_copy`: the copy reached the output) counts as
    written by that store."""
    unwritten = False
    for name in outputs:
        r = plan.regions.get(name)
        if r is None or r.numel == 0:
            continue
        got = r.elements(after).astype(np.int64)
        req = cells[name].required
        ok = np.zeros(got.shape, dtype=bool)
        for answer in accepted:
            want = np.asarray(answer[name]).astype(np.int64)
            if want.shape == got.shape:
                ok |= want == got
        wrong = np.flatnonzero((req & ~ok).ravel())
        want = np.asarray(accepted[0][name]).astype(np.int64).ravel()
        shape = r.spec.shape
        mine: dict[str, Site] = {}
        for flat in wrong.tolist():
            addr = arena.address(name, flat)
            cell = f"{name}{_index(shape, flat)}"
            hit = last_store.get(addr)
            if hit is None and via_copy and addr in via_copy and via_copy[addr][2] == got.ravel()[flat]:
                hit = via_copy[addr]
            unwritten |= hit is None
            if hit is not None and "wrong_value" not in mine:
                store, lane, value = hit
                load = _source(trace, store, lane, value)
                mine["wrong_value"] = _site(store, "wrong_value", f"writes {cell} = {value}, expected {want[flat]}",
                                            load, _origin(trace, load) if load is not None else None)
                out.first_wrong[name] = (flat, store)
                stray = strays.get((store.launch, store.program, lane)) if strays else None
                if load is not None and stray == (load.file, load.line):
                    # the value was read outside the tensors on this lane: a load and its store both
                    # run past the segment (a mask `<=`), not a value copied from a wrong place
                    _link(out.lanes, stray, store)
            elif hit is None and "lost_write" not in mine:
                lost = _lost(trace, arena, name, flat, cell, int(want[flat]), r, out.static.get(name))
                if lost is not None:
                    mine["lost_write"] = lost
            if "wrong_value" in mine and "lost_write" in mine and unwritten:
                break
        for what, site in mine.items():
            sites.setdefault(what, site)
        if mine:
            out.outputs[name] = mine
    return unwritten


def _lost(trace: Trace, arena: _Arena, name: str, flat: int, cell: str, want: int, r,
          static: Site | None = None) -> Site | None:
    """The store to blame for a required cell nobody wrote: one writing a wrapper's copy of the
    output (a tensor argument outside the arena with its element count and size), else the
    store that wrote the output's nearest cell, else (no lane of any store wrote the output: a
    mask all false, a page count of 0) the only `tl.store` statement to the output (`static`)."""
    copy_of = None
    for a in trace.accesses:
        if a.op != "store" or not a.addrs.size:
            continue
        launch = trace.launches[a.launch] if 0 <= a.launch < len(trace.launches) else None
        for arg in (launch.args if launch else []):
            if arg.numel == r.numel and arg.itemsize == r.itemsize and not arena.inside(arg.ptr) \
                    and arg.holds(a.addrs[:1])[0]:
                copy_of = (a, arg)
                break
        if copy_of:
            break
    if copy_of is not None:
        a, arg = copy_of
        return _site(a, "lost_write", f"never writes {cell} (expected {want}): it writes the kernel's argument "
                                      f"{arg.name}, a copy the wrapper made")
    best = None
    for a in trace.accesses:
        if a.op != "store":
            continue
        for addr in a.addrs.tolist():
            if not arena.inside(addr):
                continue
            who, k = arena.place(addr)
            if who == name and (best is None or abs(k - flat) < best[0]):
                best = (abs(k - flat), a)
    if best is None:
        if static is None:
            return None
        return dataclasses.replace(static, what="lost_write", says=f"never writes {cell} (expected {want}): "
                                                                   f"no lane of it wrote {name}")
    return _site(best[1], "lost_write", f"never writes {cell} (expected {want})")


def misread(case: Case, plan: Plan, trace: Trace, base: int, contract, accepted: tuple, name: str, flat: int,
            store: Access) -> dict | None:
    """{file, line, text, tensor} of the load statement that read the wrong elements for the wrong
    cell `name`[flat] (stored by `store`, its value computed, no load returned it), or None.

    The program that stored the cell read some elements of each input (its loads' lanes, in the
    arena or in a wrapper's contiguous copy of the input); where changing the elements of an
    input it did *not* read (each to another value the input holds, else by one) changes the
    oracle's answer for that cell, in contract, the cell depends on elements the program never
    read: its value was computed from the wrong place (a row stride dropped reads another row),
    not computed wrong. The blame is the program's last load statement that read that input."""
    arena = _Arena(plan, base)
    copies: dict[int, str] = {}
    inputs = [n for n in case.values if n in plan.regions]
    launch = trace.launches[store.launch] if 0 <= store.launch < len(trace.launches) else None
    for arg in (launch.args if launch else []):
        if not arena.inside(arg.ptr) and arg.contiguous:
            same = [n for n in inputs if plan.regions[n].numel == arg.numel and plan.regions[n].itemsize == arg.itemsize]
            if len(same) == 1:
                copies[arg.ptr] = same[0]
    read: dict[str, set[int]] = {}
    last: dict[str, Access] = {}
    for a in trace.accesses[: store.seq]:
        if a.op != "load" or a.program != store.program or a.launch != store.launch or not a.addrs.size:
            continue
        for (who, cell), addr in zip(arena.places(a.addrs), a.addrs.tolist()):
            n = plan.names[who] if who is not None and who != NOBODY else None
            if n is None:
                for ptr, m in copies.items():
                    arg = next(x for x in launch.args if x.ptr == ptr)
                    if arg.holds(np.array([addr], dtype=np.uint64))[0]:
                        n, cell = m, (addr - ptr) // arg.itemsize
                        break
            if n in inputs:
                read.setdefault(n, set()).add(int(cell))
                last[n] = a
    wants = {int(np.asarray(answer[name]).ravel()[flat]) for answer in accepted}
    for n, cells in read.items():
        values = np.asarray(case.values[n])
        unread = np.setdiff1d(np.arange(values.size), np.fromiter(cells, dtype=np.int64))
        if not unread.size:
            continue
        flat_vals = values.ravel().astype(np.int64)
        domain = np.unique(flat_vals)
        tries = []
        if domain.size > 1:
            nxt = domain[(np.searchsorted(domain, flat_vals[unread]) + 1) % domain.size]
            tries.append(nxt)
        tries += [flat_vals[unread] + 1, flat_vals[unread] - 1]
        for t in tries:
            changed = flat_vals.copy()
            changed[unread] = t
            try:
                other = case.replace(values={**case.values, n: changed.reshape(values.shape).astype(values.dtype)})
                status, _, expected, _ = contract.assessment(other)
            except Exception:  # a value the input cannot hold: try the next
                continue
            if status != "in_contract" or expected is None:
                continue
            got = {int(np.asarray(answer[name]).ravel()[flat]) for answer in expected.accepted()}
            if got and not got & wants:
                a = last[n]
                return {"file": a.file, "line": a.line, "text": _text(a.file, a.line), "tensor": n}
    return None
