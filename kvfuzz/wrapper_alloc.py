"""Guarded storage for the buffers a target's Python wrapper allocates itself.

kvfuzz sees a write past an output only where that output lies in its guarded arena. An entry
point that allocates its own result (0.5.23's `q8kv8_topk_length_from_indices`: `torch.empty`,
then a launch; pa_page_table's eager call) writes into memory kvfuzz never placed, so a grid
one program too large writes past the result unseen.

While the wrapper runs, `Guard.watch` hands every allocation it makes through the target
module's namespace (`torch.empty`, `zeros`, `ones`, `full`, their `_like` forms,
`empty_strided`, and the tensor methods `new_empty`, `new_zeros`, `new_ones`, `new_full` called
from that module's code) from a buffer with `BAND` canary bytes on either side of the storage.
Calls made from other modules (torch itself, kvfuzz) are untouched. After the device is
synchronised, `Guard.settle` reads each band:

* a buffer of the shape and dtype of an output the entry point returns (`Binding.returns`)
  starts with bands holding the arena's own bytes beside that output (its canary, or on a
  re-run its alternate fill); once it is known to be what the entry point returned (the
  output then holds its values), its bands are written back into the arena there, so a store
  past it is judged as a store past any output: `out_of_bounds_write` of that output, its
  byte offsets the store's own, the same under both fills;
* any other buffer (scratch) has bands of materialize's canary (0xA5); a changed byte is the
  call's error, `WrapperBufferOverrun` and one line naming the allocation (a crash on an
  in-contract case).

As in kvfuzz's arena, a store of exactly the band's bytes is not seen. Helpers in other
modules allocating for the wrapper are not covered, nor are allocations by C++ extensions.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Iterator, Mapping

from .fills import CANARY_BYTE

BAND = 4096  # canary bytes on either side of a wrapper's buffer: materialize.GUARD_MIN
ALIGN = 256  # the buffer's element storage starts this aligned, as the caching allocator's do
FUNCTIONS = ("empty", "zeros", "ones", "full", "empty_like", "zeros_like", "ones_like", "full_like",
             "empty_strided")
METHODS = ("new_empty", "new_zeros", "new_ones", "new_full")
OVERRUN = "WrapperBufferOverrun"  # the error type of a store past a wrapper's scratch buffer


@dataclass
class Allocation:
    tensor: Any  # what the wrapper got: a view into `buf`
    buf: Any  # uint8: BAND canary, the storage, slack to ALIGN, BAND canary
    nbytes: int  # the storage's bytes (from byte BAND of buf)
    made_by: str  # "torch.empty(...) at file:line"
    output: str | None = None  # the returned output it may become: its bands hold the arena's bytes there
    fill: tuple = ()  # the bands' bytes as allocated (before, after)


@dataclass
class Watched:
    """One call of the entry point: the case's tensors and the buffers its wrapper allocated."""

    key: Any
    op: str
    views: Mapping[str, Any]
    returns: tuple[str, ...]  # the outputs the entry point returns (their buffers are its own)
    allocations: list[Allocation] = field(default_factory=list)


def _extent(shape, strides) -> int:
    """Elements a strided tensor's storage spans from its first element (0 when it has none)."""
    if any(s == 0 for s in shape):
        return 0
    return 1 + sum((n - 1) * abs(st) for n, st in zip(shape, strides))


def _arena_bytes(view):
    """The whole storage of a case tensor's view (the arena), as uint8, and the byte range of
    the view's elements in it."""
    import torch

    item = view.element_size()
    arena = torch.empty(0, dtype=torch.uint8, device=view.device).set_(view.untyped_storage())
    first = view.storage_offset() * item
    return arena, first, first + _extent(view.shape, view.stride()) * item


def _beside(view, where: str):
    """The BAND bytes of the arena before or after a view's elements (the canary byte where the
    arena ends)."""
    import torch

    arena, first, end = _arena_bytes(view)
    lo = first - BAND if where == "before" else end
    out = torch.full((BAND,), CANARY_BYTE, dtype=torch.uint8, device=view.device)
    a, b = max(lo, 0), min(lo + BAND, arena.numel())
    if b > a:
        out[a - lo: b - lo] = arena[a:b]
    return out


def _guarded(torch, made: Any, made_by: str, w: Watched) -> Allocation:
    """A copy of the tensor `made` (its shape, strides, dtype, device and values) in a buffer
    with bands: the arena's bytes beside the returned output it may become, else the canary."""
    item = made.element_size()
    nbytes = _extent(made.shape, made.stride()) * item
    span = -(-nbytes // ALIGN) * ALIGN
    buf = torch.full((BAND + span + BAND,), CANARY_BYTE, dtype=torch.uint8, device=made.device)
    output = next((n for n in w.returns if n in w.views and w.views[n].dtype == made.dtype
                   and tuple(w.views[n].shape) == tuple(made.shape) and w.views[n].device == made.device), None)
    if output is not None:
        buf[:BAND] = _beside(w.views[output], "before")
        buf[BAND + nbytes: BAND + nbytes + BAND] = _beside(w.views[output], "after")
    fill = (buf[:BAND].clone(), buf[BAND + nbytes: BAND + nbytes + BAND].clone())
    storage = buf[BAND: BAND + nbytes] if nbytes else buf[BAND: BAND + item]
    view = storage.view(made.dtype).as_strided(tuple(made.shape), tuple(made.stride()))
    if nbytes:
        view.copy_(made)
    view.requires_grad_(made.requires_grad)
    return Allocation(view, buf, nbytes, made_by, output, fill)


def _where(depth: int) -> str:
    frame = sys._getframe(depth)
    return f"{frame.f_code.co_filename.rsplit('/', 1)[-1]}:{frame.f_lineno}"


class _TorchProxy:
    """The torch module as the target's namespace sees it during a watched call: its allocators
    guarded, every other name torch's own."""

    def __init__(self, torch: ModuleType, functions: dict[str, Any]) -> None:
        self._torch, self._functions = torch, functions

    def __getattr__(self, name: str) -> Any:
        return self._functions.get(name) or getattr(self._torch, name)


class Guard:
    """The wrapper-allocation check of one target: `watch` around each call of an entry point,
    `settle` once the device has finished them."""

    def __init__(self, target: Any) -> None:
        self.target = target
        self.pending: list[Watched] = []

    def _namespace(self, op: str) -> dict | None:
        entry = getattr(self.target, "entries", {}).get(op)
        namespace = getattr(entry, "__globals__", None)  # None: a bare @triton.jit kernel, no wrapper
        return namespace if isinstance(namespace, dict) else None

    def watch(self, op: str, views: Mapping[str, Any], key: Any = None):
        """A context for one call of `op`'s entry point on the case's tensors `views`."""
        namespace = self._namespace(op)
        if namespace is None:
            return nullcontext()
        binding = getattr(self.target, "bindings", {}).get(op)
        returns = getattr(binding, "returns", None) or ()
        watched = Watched(key, op, views, (returns,) if isinstance(returns, str) else tuple(returns))
        self.pending.append(watched)
        return _patched(namespace, watched)

    def settle(self) -> dict[Any, str]:
        """After the device synchronised: every watched call's bands read, a changed byte beside
        a returned output written into the arena, one beside a scratch buffer an error line.
        key -> error line, for the calls that overran a scratch buffer."""
        errors = {}
        for w in self.pending:
            for a in w.allocations:
                line = _settle(w, a)
                if line is not None and w.key not in errors:
                    errors[w.key] = line
        self.pending = []
        return errors


class _Hooks:
    """What one target module's namespace is patched with during a watched call, built once:
    a torch proxy and guarded allocators that record into `watched` (set per call), and which
    of the namespace's names to replace."""

    def __init__(self, namespace: dict) -> None:
        import torch

        self.namespace = namespace
        self.watched: Watched | None = None
        originals = {name: getattr(torch, name) for name in FUNCTIONS}
        self.functions = {name: self._function(torch, name, fn) for name, fn in originals.items()}
        proxy = _TorchProxy(torch, self.functions)
        by_identity = {id(fn): self.functions[name] for name, fn in originals.items()}
        self.replace = {name: proxy if value is torch else by_identity[id(value)]
                        for name, value in namespace.items() if value is torch or id(value) in by_identity}
        # the Tensor.new_* methods only where the module's code names them (patching the class costs)
        used = {n for v in namespace.values() for n in getattr(getattr(v, "__code__", None), "co_names", ())}
        self.methods = {name: self._method(torch, name, getattr(torch.Tensor, name)) for name in METHODS
                        if name in used}

    def _record(self, torch, made, made_by: str):
        a = _guarded(torch, made, made_by, self.watched)
        self.watched.allocations.append(a)
        return a.tensor

    def _function(self, torch, name: str, original):
        def guarded(*args, **kwargs):
            made = original(*args, **kwargs)
            if self.watched is None or "out" in kwargs or not isinstance(made, torch.Tensor) or made.is_sparse:
                return made
            return self._record(torch, made, f"torch.{name} at {_where(2)}")
        return guarded

    def _method(self, torch, name: str, original):
        namespace = self.namespace

        def guarded(tensor, *args, **kwargs):
            made = original(tensor, *args, **kwargs)
            if self.watched is None or sys._getframe(1).f_globals is not namespace:  # the module's own calls only
                return made
            return self._record(torch, made, f"Tensor.{name} at {_where(2)}")
        return guarded


_HOOKS: dict[int, _Hooks] = {}  # id(namespace) -> its hooks


@contextmanager
def _patched(namespace: dict, watched: Watched) -> Iterator[None]:
    import torch

    hooks = _HOOKS.get(id(namespace))
    if hooks is None or hooks.namespace is not namespace:
        hooks = _HOOKS[id(namespace)] = _Hooks(namespace)
    saved = {name: namespace[name] for name in hooks.replace if name in namespace}
    originals = {name: getattr(torch.Tensor, name) for name in hooks.methods}
    hooks.watched = watched
    namespace.update({name: hooks.replace[name] for name in saved})
    for name, method in hooks.methods.items():
        setattr(torch.Tensor, name, method)
    try:
        yield
    finally:
        hooks.watched = None
        for name, original in originals.items():
            setattr(torch.Tensor, name, original)
        namespace.update(saved)


def _settle(w: Watched, a: Allocation) -> str | None:
    before, after = a.buf[:BAND], a.buf[BAND + a.nbytes: BAND + a.nbytes + BAND]
    changed = [int((band != fill).sum()) for band, fill in zip((before, after), a.fill)]
    if not any(changed):
        return None
    if a.output is None or not _returned(w, a):
        first = (int((before != a.fill[0]).nonzero()[0]) - BAND if changed[0]
                 else a.nbytes + int((after != a.fill[1]).nonzero()[0]))
        return (f"{OVERRUN}: a store changed {sum(changed)} bytes outside the {a.nbytes}-byte buffer "
                f"{a.made_by} allocated (the first at byte {first} from its start)")
    arena, first, end = _arena_bytes(w.views[a.output])
    for band, lo in ((before, first - BAND), (after, end)):  # the bands, back where they were read
        lo_, hi = max(lo, 0), min(lo + BAND, arena.numel())
        if hi > lo_:
            arena[lo_:hi] = band[lo_ - lo: hi - lo].to(arena.device)
    return None


def _returned(w: Watched, a: Allocation) -> bool:
    """Whether `a` is what the entry point returned as its output: the case's tensor holds its values."""
    import torch

    return torch.equal(w.views[a.output], a.tensor)
