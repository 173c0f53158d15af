"""Case -> tensors on a device, inside one guarded arena.

All tensors of a case live in one byte arena. Each tensor's storage sits between guard
bands; every byte that is no tensor's element (guards, stride gaps, slack) holds the canary
byte, inputs hold their values and outputs start from a poison value, never zeros. After a
run, one comparison of the arena against its image tells every byte that changed, and
`owner_of` says whose element (or nobody's) each of them is. `pack` puts a batch of case
images into one arena, so a batch needs one copy to the device and one back.
"""

from __future__ import annotations

import numpy as np

from .case import DTYPES, Case, TensorSpec
from .contract import disjoint

ALIGN = 256
GUARD_MIN, GUARD_MAX = 4096, 1 << 20  # bytes of canary on each side of each storage
CANARY_BYTE = 0xA5
POISON = {"int32": np.int32(-559038737), "int64": np.int64(-2401053088876216593)}  # 0xDEADBEEF.., 0xDEADBEEFDEADBEEF

NOBODY = -1  # owner of guard bytes, stride gaps and slack


class Region:
    """One tensor's place in the arena: its storage from byte `start`, `guard` canary bytes on
    either side. What the spec says of its layout is read once, here (the judge asks often)."""

    __slots__ = ("name", "spec", "start", "guard", "nbytes", "itemsize", "numel", "contiguous")

    def __init__(self, name: str, spec: TensorSpec, start: int, guard: int) -> None:
        self.name, self.spec, self.start, self.guard = name, spec, start, guard
        self.itemsize = _ITEMSIZE[spec.dtype]
        self.nbytes = spec.storage_size * self.itemsize
        self.numel = spec.numel
        self.contiguous = spec.is_contiguous

    def __repr__(self) -> str:
        return f"Region({self.name!r}, {self.spec!r}, start={self.start}, guard={self.guard})"

    def typed(self, arena: np.ndarray) -> np.ndarray:
        """The tensor's storage, as its dtype, inside a host image of the arena."""
        return arena[self.start : self.start + self.nbytes].view(self.spec.dtype)

    def elements(self, arena: np.ndarray) -> np.ndarray:
        """The tensor's logical values (a copy), read through its layout."""
        if self.numel == 0:
            return np.zeros(self.spec.shape, dtype=self.spec.dtype)
        return self.view(arena).copy()

    def view(self, arena: np.ndarray) -> np.ndarray:
        """The tensor's elements as a view into a host image of the arena (writable if the
        image is). For a tensor with elements (numel > 0)."""
        return _view(self.spec, self.typed(arena), self.contiguous, self.numel)


_ITEMSIZE = {d: np.dtype(d).itemsize for d in DTYPES}


def elements_view(spec: TensorSpec, storage: np.ndarray) -> np.ndarray:
    """The elements of a tensor laid out by `spec` as a strided view into its `storage` (1-D,
    of its dtype): no index arrays. For a tensor with elements (numel > 0)."""
    return _view(spec, storage, spec.is_contiguous, spec.numel)


def _view(spec: TensorSpec, storage: np.ndarray, contiguous: bool, numel: int) -> np.ndarray:
    if contiguous:
        return storage[spec.offset : spec.offset + numel].reshape(spec.shape)
    item = storage.itemsize
    return np.ndarray(spec.shape, storage.dtype, storage, spec.offset * item, tuple(x * item for x in spec.strides))


# (name, dtype, byte start in the case image, bytes, shape, strides, storage offset): a region
# as plain data, cheap to send to a worker
Layout = tuple[str, str, int, int, tuple, tuple, int]


class Plan:
    """Where every tensor of a case lives in the arena, and the arena's initial image.

    The image is written when first asked for, or by `pack` straight into its batch's image
    (each byte written once, not once here and again there). `owner` (whose element each byte
    is, or NOBODY) is built only when asked for: the judge needs it only for the few bytes
    that changed (`owner_of`)."""

    def __init__(self, regions: dict[str, Region], names: tuple[str, ...], size: int, case: Case,
                 outputs: tuple[str, ...], layouts: tuple[Layout, ...]) -> None:
        self.regions, self.names, self.size = regions, names, size
        self._case, self._outputs, self.layouts = case, outputs, layouts
        self._image: np.ndarray | None = None
        self._elem_masks: dict[str, np.ndarray] = {}
        self._owner: np.ndarray | None = None
        self._starts: np.ndarray | None = None

    @property
    def image(self) -> np.ndarray:
        """The arena's initial image (read-only): canary, inputs' values, outputs' poison."""
        if self._image is None:
            self._write(np.empty(self.size, dtype=np.uint8))
        return self._image

    def _write(self, buf: np.ndarray) -> None:
        """Write the image into `buf` (`size` bytes) and keep `buf`, read-only, as it."""
        buf.fill(CANARY_BYTE)
        case, outputs = self._case, self._outputs
        for r in self.regions.values():
            if r.numel == 0:
                continue
            if r.name in outputs:
                r.view(buf)[...] = POISON[r.spec.dtype]
            elif r.contiguous or disjoint(r.spec):  # each storage element written once: order is moot
                r.view(buf)[...] = case.values[r.name]
            else:  # elements sharing storage: the last one written wins, in index order
                r.typed(buf)[r.spec.element_index()] = case.values[r.name]
        buf.setflags(write=False)
        self._image = buf

    def element_mask(self, name: str) -> np.ndarray:
        """One bool per byte of `name`'s storage: True where an element lies (cached)."""
        got = self._elem_masks.get(name)
        if got is None:
            r = self.regions[name]
            got = np.zeros(r.nbytes, dtype=bool)
            spec, item = r.spec, r.itemsize
            if r.numel and r.contiguous:
                got[spec.offset * item : (spec.offset + r.numel) * item] = True
            elif r.numel:
                idx = spec.element_index().ravel()
                got[(idx[:, None] * item + np.arange(item)[None, :]).ravel()] = True
            self._elem_masks[name] = got
        return got

    def owner_of(self, byte_idx: np.ndarray) -> np.ndarray:
        """owner for the given arena byte offsets: the index into `names`, or NOBODY."""
        out = np.full(byte_idx.shape, NOBODY, dtype=np.int16)
        if byte_idx.size == 0:
            return out
        if self._starts is None:
            self._starts = np.array([self.regions[n].start for n in self.names], dtype=np.int64)
        slot = np.searchsorted(self._starts, byte_idx, side="right") - 1
        for i in np.unique(slot[slot >= 0]).tolist():
            name = self.names[i]
            r = self.regions[name]
            sel = np.flatnonzero(slot == i)
            rel = byte_idx[sel] - r.start
            inside = rel < r.nbytes  # past the storage: its guard band, nobody's
            hit = sel[inside][self.element_mask(name)[rel[inside]]]
            out[hit] = i
        return out

    @property
    def owner(self) -> np.ndarray:
        """int16 per byte: index into `names`, or NOBODY (the whole map; for repro scripts)."""
        if self._owner is None:
            owner = np.full(self.image.size, NOBODY, dtype=np.int16)
            for i, name in enumerate(self.names):
                r = self.regions[name]
                owner[r.start : r.start + r.nbytes][self.element_mask(name)] = i
            owner.setflags(write=False)
            self._owner = owner
        return self._owner

    def region_of_byte(self, b: int) -> tuple[str, str]:
        """(tensor, before|after|gap) for a byte that belongs to no element: each tensor owns
        the guard band on either side of its storage."""
        for r in self.regions.values():
            if r.start - r.guard <= b < r.start:
                return r.name, "before"
            if r.start <= b < r.start + r.nbytes:
                return r.name, "gap"
            if r.start + r.nbytes <= b < r.start + r.nbytes + r.guard + ALIGN:
                return r.name, "after"
        return "-", "outside"


def _round_up(n: int, a: int = ALIGN) -> int:
    return (n + a - 1) // a * a


def plan(case: Case, outputs: tuple[str, ...]) -> Plan:
    names = tuple(sorted(case.tensors))
    regions, lays, cursor = {}, [], 0
    for name in names:
        spec = case.tensors[name]
        nbytes = spec.storage_size * _ITEMSIZE[spec.dtype]
        guard = _round_up(min(GUARD_MAX, max(GUARD_MIN, nbytes)))
        start = cursor + guard
        regions[name] = Region(name, spec, start, guard)
        lays.append((name, spec.dtype, start, nbytes, spec.shape, spec.strides, spec.offset))
        cursor = _round_up(start + nbytes) + guard  # the guard after is the tensor's own too
    return Plan(regions, names, max(cursor, GUARD_MIN), case, outputs, tuple(lays))


def layouts(p: Plan) -> tuple[Layout, ...]:
    return p.layouts


def views_at(arena, regions: tuple[Layout, ...], base: int = 0) -> dict:
    """A strided view per tensor into a device arena whose case image starts at byte `base`."""
    import torch

    views, typed = {}, {}
    for name, dtype, start, nbytes, shape, strides, offset in regions:
        t = typed.get(dtype)
        if t is None:  # the whole arena as this dtype, once: then one as_strided per tensor
            t = typed[dtype] = arena.view(getattr(torch, dtype))
        item = t.element_size()
        at = arena.storage_offset() + base + start
        if at % item == 0 and arena.storage_offset() % item == 0:
            views[name] = t.as_strided(shape, strides, at // item + offset)
        else:  # not on an element boundary (never for a planned arena: regions are ALIGN-aligned)
            buf = arena[base + start : base + start + nbytes].view(getattr(torch, dtype))
            views[name] = buf.as_strided(shape, strides, buf.storage_offset() + offset)
    return views


def to_device(p: Plan, device):
    """(arena, views): a fresh device copy of the image and a strided view per tensor."""
    import torch

    arena = torch.from_numpy(p.image.copy()).to(device)
    return arena, views_at(arena, layouts(p))


def pack(plans: list[Plan]) -> tuple[np.ndarray, list[int]]:
    """One image holding every plan's image (each at an ALIGN-aligned base): a batch of cases
    goes to the device in one copy, and each pointer keeps its alignment class. A plan whose
    image was not written yet is written here, and its image is then that part of the batch's
    image: the batch's image must never be written to (the judge compares runs with it)."""
    bases, cursor = [], 0
    for p in plans:
        bases.append(cursor)
        cursor = _round_up(cursor + p.size)
    image = np.empty(max(cursor, 1), dtype=np.uint8)
    for p, base in zip(plans, bases):
        part = image[base : base + p.size]
        if p._image is None:
            p._write(part)
        else:
            part[:] = p._image
    return image, bases
