"""Every `tl.load` and `tl.store` of a kernel run under Triton's interpreter, recorded.

Triton's interpreter runs a kernel as Python: each `tl.load` / `tl.store` ends in
`InterpreterBuilder.create_masked_load` / `create_masked_store` (plain, masked and block-pointer
accesses alike) with the lanes' addresses, mask and values as NumPy arrays, and each launch goes
through `GridExecutor.__call__` with the kernel's own arguments. `Tracer` wraps those three (the
narrowest points that are stable across the triton versions kvfuzz supports) for as long as it is
entered; the kernel's source line is the innermost frame outside Triton's package, the statement
that called `tl.load` or `tl.store` (a `@triton.jit` helper's line where the helper made the call).
"""

from __future__ import annotations

import inspect
import os
import sys
from dataclasses import dataclass, field

import numpy as np

MAX_LANES = 2_000_000  # lanes recorded in all; a larger run is cut (`Trace.truncated`)


@dataclass
class Arg:
    """One tensor argument of a launch: where its elements lie."""

    name: str
    ptr: int  # address of its first element (data_ptr)
    itemsize: int
    numel: int
    contiguous: bool
    starts: np.ndarray | None  # the elements' addresses, sorted (strided tensors only)

    @property
    def lo(self) -> int:
        return self.ptr if self.starts is None else int(self.starts[0]) if self.starts.size else self.ptr

    @property
    def hi(self) -> int:
        """One past its last element's last byte."""
        if self.starts is None:
            return self.ptr + self.numel * self.itemsize
        return int(self.starts[-1]) + self.itemsize if self.starts.size else self.ptr

    def holds(self, addrs: np.ndarray) -> np.ndarray:
        """Per address: whether it is the address of one of its elements' bytes."""
        if self.numel == 0:
            return np.zeros(addrs.shape, dtype=bool)
        inside = (addrs >= self.lo) & (addrs < self.hi)
        if self.starts is None or not inside.any():
            return inside
        at = np.searchsorted(self.starts, addrs, side="right") - 1
        ok = at >= 0
        ok[ok] &= addrs[ok] < self.starts[at[ok]] + self.itemsize
        return inside & ok


@dataclass
class Launch:
    kernel: str
    args: list[Arg]
    file: str = ""  # the kernel's source file and the line of its `def`
    line: int = 0


@dataclass
class Access:
    """One `tl.load` or `tl.store` of one program: its active lanes."""

    seq: int
    launch: int  # index into Trace.launches
    op: str  # "load" | "store"
    func: str  # the function whose line it is (the kernel, or a @triton.jit helper)
    file: str
    line: int
    program: tuple[int, int, int]
    lanes: np.ndarray  # flat lane indices of the active lanes
    addrs: np.ndarray  # uint64, one per active lane
    values: np.ndarray  # the value loaded or stored, one per active lane
    itemsize: int
    width: int  # lanes of the access, active or not (1: a scalar access)


@dataclass
class Trace:
    launches: list[Launch] = field(default_factory=list)
    accesses: list[Access] = field(default_factory=list)
    lanes: int = 0
    truncated: bool = False
    failed: str | None = None  # the tracer's own exception (kvfuzz's, never the target's): nothing to attribute
    stopped: Access | None = None  # guarded: the access the run stopped before (outside every tensor argument)


class Stopped(Exception):
    """Raised by a guarded tracer instead of making an access outside every tensor argument of
    its launch (one that may kill the interpreter: a wild read or write)."""


def _arg(name: str, t) -> Arg | None:
    base = getattr(t, "base", t)  # triton's TensorWrapper
    if not hasattr(base, "data_ptr") or not hasattr(base, "stride"):
        return None
    item, n = base.element_size(), base.numel()
    contiguous = bool(base.is_contiguous()) or n <= 1
    starts = None
    if not contiguous:
        idx = np.zeros(1, dtype=np.int64)
        for size, stride in zip(base.shape, base.stride()):
            idx = (idx[:, None] + np.arange(size, dtype=np.int64)[None, :] * stride).ravel()
        starts = np.unique(base.data_ptr() + idx * item).astype(np.uint64)
    return Arg(name, base.data_ptr(), item, n, contiguous, starts)


class Tracer:
    """`with Tracer() as t:` records every launch, load and store of kernels run under the
    interpreter in this process into `t.trace`. `Tracer(guard=True)` checks each access's
    active addresses before it is made and stops the run (`Stopped`, `trace.stopped`) at the
    first one outside every tensor argument of its launch, so a wild access cannot kill the
    interpreter."""

    def __init__(self, guard: bool = False) -> None:
        self.guard = guard
        self.trace = Trace()
        self._saved: list[tuple[object, str, object]] = []
        self._launch = -1

    def __enter__(self) -> "Tracer":
        from triton.runtime import interpreter as interp

        skip = (os.path.dirname(interp.__file__).rsplit(os.sep, 1)[0], os.path.dirname(__file__))
        tracer = self
        builder = interp.InterpreterBuilder
        load, store, call = builder.create_masked_load, builder.create_masked_store, interp.GridExecutor.__call__

        def site():
            f = sys._getframe(3)
            while f is not None and f.f_code.co_filename.startswith(skip):
                f = f.f_back
            return (f.f_code.co_name, f.f_code.co_filename, f.f_lineno) if f is not None else ("?", "?", 0)

        def create_masked_load(self, ptrs, mask, other, *rest, **kw):
            tracer._check("load", self, ptrs, mask, site)
            ret = load(self, ptrs, mask, other, *rest, **kw)
            tracer._guarded("load", self, ptrs, mask, lambda: ret.data, site)
            return ret

        def create_masked_store(self, ptrs, value, mask, *rest, **kw):
            tracer._check("store", self, ptrs, mask, site, lambda: value.data)
            tracer._guarded("store", self, ptrs, mask, lambda: value.data, site)
            return store(self, ptrs, value, mask, *rest, **kw)

        def grid_call(self, *args, **kwargs):
            try:
                bound = inspect.signature(self.fn).bind_partial(*args, **kwargs).arguments
            except TypeError:
                bound = dict(zip(self.arg_names, args))
            try:
                tensors = [a for a in (_arg(n, v) for n, v in bound.items()) if a is not None]
            except Exception as exc:  # kvfuzz's own: the run goes on, untraced
                tracer.trace.failed = tracer.trace.failed or f"{type(exc).__name__}: {exc}"
                tensors = []
            code = getattr(self.fn, "__code__", None)
            tracer.trace.launches.append(Launch(self.fn.__name__, tensors, getattr(code, "co_filename", ""),
                                                getattr(code, "co_firstlineno", 0)))
            tracer._launch = len(tracer.trace.launches) - 1
            return call(self, *args, **kwargs)

        for owner, name, new in ((builder, "create_masked_load", create_masked_load),
                                 (builder, "create_masked_store", create_masked_store),
                                 (interp.GridExecutor, "__call__", grid_call)):
            self._saved.append((owner, name, getattr(owner, name)))
            setattr(owner, name, new)
        return self

    def __exit__(self, *exc) -> None:
        for owner, name, old in reversed(self._saved):
            setattr(owner, name, old)
        self._saved.clear()

    def _check(self, op: str, builder, ptrs, mask, site, values=None) -> None:
        """Guarded: `Stopped` before an access with an active lane outside every tensor argument
        of its launch (recorded as the trace's last access and `trace.stopped`)."""
        if not self.guard or self.trace.stopped is not None:
            return
        launch = self.trace.launches[self._launch] if 0 <= self._launch < len(self.trace.launches) else None
        if launch is None or not launch.args:
            return
        addrs = np.asarray(ptrs.data).reshape(-1).astype(np.uint64)
        active = np.broadcast_to(np.asarray(mask.data, dtype=bool), np.shape(ptrs.data)).reshape(-1)
        ok = np.zeros(addrs.shape, dtype=bool)
        for arg in launch.args:
            ok |= arg.holds(addrs)
        if (ok | ~active).all():
            return
        fill = (lambda: values()) if values is not None else (lambda: np.zeros(np.shape(ptrs.data), dtype=np.int64))
        n = len(self.trace.accesses)
        self._guarded(op, builder, ptrs, mask, fill, site)
        self.trace.stopped = self.trace.accesses[-1] if len(self.trace.accesses) > n else None
        raise Stopped(f"{op} outside every tensor argument")

    def _guarded(self, op: str, builder, ptrs, mask, values, site) -> None:
        """`_record`, where an exception of the tracer's own is kept in `trace.failed` and never
        reaches the kernel (it would pass for the target's)."""
        try:
            self._record(op, builder, ptrs, mask, values(), site())
        except Exception as exc:
            self.trace.failed = self.trace.failed or f"{type(exc).__name__}: {exc}"

    def _record(self, op: str, builder, ptrs, mask, values, where) -> None:
        t = self.trace
        if t.truncated:
            return
        addrs = np.asarray(ptrs.data).reshape(-1)
        active = np.broadcast_to(np.asarray(mask.data, dtype=bool), np.shape(ptrs.data)).reshape(-1)
        vals = np.broadcast_to(np.asarray(values), np.shape(ptrs.data)).reshape(-1)
        lanes = np.flatnonzero(active)
        if t.lanes + lanes.size > MAX_LANES:
            t.truncated = True
            return
        t.lanes += lanes.size
        func, file, line = where
        grid = getattr(builder, "grid_idx", None) or (0, 0, 0)
        t.accesses.append(Access(len(t.accesses), self._launch, op, func, file, line, tuple(int(g) for g in grid),
                                 lanes, addrs[lanes].astype(np.uint64), vals[lanes].copy(), vals.dtype.itemsize,
                                 addrs.size))
