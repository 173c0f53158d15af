"""Case -> tensors on a device, inside one guarded arena.

All tensors of a case live in one byte arena. Each tensor's storage sits between guard
bands; every byte that is no tensor's element (guards, stride gaps, slack) holds the canary
byte, inputs hold their values and outputs start from a poison value, never zeros. After a
run, one comparison of the arena against its image tells every byte that changed, and
`owner_of` says whose element (or nobody's) each of them is. `pack` puts a batch of case
images into one arena, so a batch needs one copy to the device and one back.

The determinism re-run uses the alternate image (`Plan.alt_image`, `refill`): the same
elements, every other byte holding the alternate fill, a word pattern that encodes each
word's own position in the case's arena. An output that differs between the two fills was
computed from bytes outside every tensor (an out-of-bounds read), and a value copied out of
the alternate fill says where it was read (`fills.alt_source`).
"""

from __future__ import annotations

import math

import numpy as np

from .case import DTYPES, Case, TensorSpec
from .contract import disjoint
from .fills import CANARY_BYTE, alt_words
from .places import ALIGN, band_range, region_of_byte, round_up

__all__ = ["ALIGN", "CANARY_BYTE", "GUARD_MAX", "GUARD_MIN", "NOBODY", "POISON", "Plan", "Region", "alt_fill",
           "elements_view", "layouts", "pack", "plan", "refill", "to_device", "views_at"]

GUARD_MIN, GUARD_MAX = 4096, 1 << 20  # bytes of canary on each side of each storage
POISON = {"int32": np.int32(-559038737), "int64": np.int64(-2401053088876216593)}  # 0xDEADBEEF.., 0xDEADBEEFDEADBEEF

NOBODY = -1  # owner of guard bytes, stride gaps and slack

# The alternate fill (fills.py): a word pattern that encodes its own position, no byte of it
# the canary; a value a kernel copied out of it says where it was read (alt_source).
_alt_cache = np.zeros(0, dtype=np.uint8)


def alt_fill(n: int) -> np.ndarray:
    """The first `n` bytes of the alternate fill (read-only; cached, grown as needed)."""
    global _alt_cache
    if _alt_cache.size < n:
        words = max(n, 2 * _alt_cache.size, 1 << 16) // 4 + 1
        _alt_cache = alt_words(np.arange(words, dtype=np.uint32)).astype("<u4").view(np.uint8)
        _alt_cache.setflags(write=False)
    return _alt_cache[:n]


def refill(out: np.ndarray, image: np.ndarray, regions: "tuple[Layout, ...]") -> None:
    """Write a case's alternate image into `out` (uint8, the case's size): the alternate fill
    everywhere, then every tensor's elements copied from `image`, the case's image."""
    out[:] = alt_fill(out.size)
    for _, dtype, start, nbytes, shape, strides, offset in regions:
        if not nbytes or 0 in shape:
            continue
        item = _ITEMSIZE[dtype]
        if not offset and nbytes == item * math.prod(shape) and strides == _contiguous(shape):
            out[start : start + nbytes] = image[start : start + nbytes]  # no gaps: its storage is its elements
            continue
        src, dst = (np.ndarray(shape, dtype, buf, start + offset * item, tuple(x * item for x in strides))
                    for buf in (image, out))
        dst[...] = src


def _contiguous(shape: tuple) -> tuple:
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= n
    return tuple(reversed(strides))


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


def _canary_around(buf: np.ndarray, regions) -> None:
    """The canary into every byte of `buf` but the elements of its contiguous tensors, which
    the image's writer then writes whole: a decode case's image is mostly guard bands, and
    filling its elements too cost a third of the fill for nothing."""
    at = 0
    for lo, hi in sorted((r.start + r.spec.offset * r.itemsize, r.start + (r.spec.offset + r.numel) * r.itemsize)
                         for r in regions if r.numel and r.contiguous):
        if lo > at:
            buf[at:lo].fill(CANARY_BYTE)
        at = max(at, hi)
    if at < buf.size:
        buf[at:].fill(CANARY_BYTE)


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
        self._alt: np.ndarray | None = None

    @property
    def image(self) -> np.ndarray:
        """The arena's initial image (read-only): canary, inputs' values, outputs' poison."""
        if self._image is None:
            self._write(np.empty(self.size, dtype=np.uint8))
        return self._image

    def forget_image(self, buf: np.ndarray | None) -> None:
        """Drop the image if it is a view into `buf` (a batch image's buffer about to be reused,
        `ImageRing`): asked for again, it is written anew."""
        if buf is not None and self._image is not None and self._image.base is buf:
            self._image = None

    def _write(self, buf: np.ndarray) -> None:
        """Write the image into `buf` (`size` bytes) and keep `buf`, read-only, as it."""
        _canary_around(buf, self.regions.values())
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

    def elements(self, name: str) -> np.ndarray:
        """Tensor `name`'s elements as the image holds them (read-only), from the case's values
        where each storage element is written once, so a pack can copy them without this
        case's image being written."""
        r = self.regions[name]
        if self._image is None and r.numel and (r.name in self._outputs or r.contiguous or disjoint(r.spec)):
            if r.name in self._outputs:
                return np.broadcast_to(POISON[r.spec.dtype], r.spec.shape)
            v = self._case.values[r.name]
            if isinstance(v, np.ndarray) and v.shape == r.spec.shape:  # the common case: as drawn
                return v
            return np.broadcast_to(np.asarray(v, dtype=r.spec.dtype), r.spec.shape)
        return r.view(self.image)

    def storage(self, name: str) -> np.ndarray:
        """Tensor `name`'s storage as the image holds it (a writable copy, of its dtype): its
        elements, the canary between them; without writing the whole image."""
        r = self.regions[name]
        if self._image is not None or not r.numel:
            return r.typed(self.image).copy()
        out = np.full(r.nbytes, CANARY_BYTE, dtype=np.uint8).view(r.spec.dtype)
        elements_view(r.spec, out)[...] = self.elements(name)
        return out

    @property
    def alt_image(self) -> np.ndarray:
        """The image under the alternate fill (read-only): the same elements, every other byte
        the alternate fill (`refill`). A determinism re-run starts from it."""
        if self._alt is None:
            alt = np.empty(self.size, dtype=np.uint8)
            refill(alt, self.image, self.layouts)
            alt.setflags(write=False)
            self._alt = alt
        return self._alt

    def as_canary(self, after_alt: np.ndarray) -> np.ndarray:
        """An arena after a run from `alt_image`, with every byte that still holds the
        alternate fill put back to the canary: comparable, byte for byte, with a run from
        `image` (a kernel that reads nothing outside its tensors leaves the same bytes)."""
        out = after_alt.copy()
        if after_alt.shape == self.image.shape:  # by whole words: a kernel stores whole elements, and a
            # stored value can share a byte with the fill (a 0), never a whole word of it
            words, alt = out.view("<u4"), self.alt_image.view("<u4")
            kept = words == alt
            words[kept] = self.image.view("<u4")[kept]
        return out

    def band(self, name: str, where: str) -> tuple[int, int]:
        """The byte range of `name`'s guard band before it, its storage (where="gap") or its
        guard band after it (alignment slack included)."""
        return band_range(self.regions[name], where)

    def bands(self, name: str) -> tuple[str, ...]:
        """`name`'s guard bands, and "gap" where its storage holds bytes that are no element's."""
        gaps = not bool(self.element_mask(name).all())
        return ("before", "gap", "after") if gaps else ("before", "after")

    def probe_image(self, name: str, *where: str) -> np.ndarray:
        """The image with the alternate fill in some bands of `name` alone (`band`): a run from
        it differs from a run from the image only if the kernel reads there."""
        out = self.image.copy()
        for w in where:
            lo, hi = self.band(name, w)
            part = out[lo:hi]
            fill = self.alt_image[lo:hi]
            if w == "gap":
                free = ~self.element_mask(name)
                part[free] = fill[free]
            else:
                part[:] = fill
        return out

    def fill_only(self, after_alt: np.ndarray, after: np.ndarray) -> bool:
        """Whether a run from `alt_image` left `after_alt` exactly where a run from the image
        left `after`, the fill aside: every word where they differ holds the alternate fill
        in `after_alt`. For a first run that left every byte outside the elements alone (the
        fast path has proved it): then no element's word can differ (an element never holds
        the fill word of its own address, unless the kernel wrote exactly that there), and
        the alternate image is never built."""
        if after_alt.shape != after.shape or after.size % 4:
            return False
        mine, theirs = after.view("<u4"), after_alt.view("<u4")
        return bool(((mine == theirs) | (theirs == alt_fill(after.size).view("<u4"))).all())

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
        the guard band on either side of its storage (places.region_of_byte)."""
        return region_of_byte(self.regions.values(), b)


def plan(case: Case, outputs: tuple[str, ...]) -> Plan:
    names = tuple(sorted(case.tensors))
    regions, lays, cursor = {}, [], 0
    for name in names:
        spec = case.tensors[name]
        nbytes = spec.storage_size * _ITEMSIZE[spec.dtype]
        guard = round_up(min(GUARD_MAX, max(GUARD_MIN, nbytes)))
        start = cursor + guard
        regions[name] = Region(name, spec, start, guard)
        lays.append((name, spec.dtype, start, nbytes, spec.shape, spec.strides, spec.offset))
        cursor = round_up(start + nbytes) + guard  # the guard after is the tensor's own too
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


def to_device(p: Plan, device, alt: bool = False, image: np.ndarray | None = None):
    """(arena, views): a fresh device copy of the image (`alt`: the alternate image; or
    `image`, another image of the plan's layout) and a strided view per tensor."""
    import torch

    if image is None:
        image = p.alt_image if alt else p.image
    arena = torch.from_numpy(image.copy()).to(device)
    return arena, views_at(arena, layouts(p))


class ImageRing:
    """Batch images in reused buffers, one batch after another: a fresh buffer of a few MiB
    costs its pages' first-touch faults each batch (on 2 CPU cores, writing a small decode batch
    took 100-210 microseconds a case into fresh memory, 25-40 into a reused buffer; a 64 MiB
    fill ran at 2.4 GB/s into fresh memory, 21 GB/s into a reused one). A batch's image must
    live until the batch is judged: the batch engine has at most three alive (one judged, one
    in flight, one drawn), so the buffer a batch took comes back `depth` batches later, into a
    pool; a batch takes the smallest pooled buffer that holds it (batches of the classes a
    campaign visits differ in size a hundredfold), or a new one with room to grow. When a
    buffer comes back, every plan whose image was a view into it forgets that image
    (`Plan.forget_image`): read again, it is written anew, never read from a later batch's
    bytes. Images larger than `cap` get buffers of their own, and the pool keeps at most
    `keep` bytes, the largest buffers dropped first (production batches: kept, they would hold
    a process's memory at its peak, heap.py)."""

    def __init__(self, depth: int = 4, cap: int = 128 << 20, keep: int = 256 << 20) -> None:
        self.depth, self.cap, self.keep = depth, cap, keep
        self._taken: list[tuple[np.ndarray, list[Plan]] | None] = [None] * depth  # the last `depth` batches'
        self._pool: list[np.ndarray] = []  # buffers no live batch uses, smallest first
        self._at = 0

    def take(self, n: int, plans: list[Plan]) -> np.ndarray:
        """A writable buffer of `n` bytes for the image of a batch of `plans`."""
        i, self._at = self._at, (self._at + 1) % self.depth
        back, self._taken[i] = self._taken[i], None
        if back is not None:  # the batch `depth` takes ago: its plans' images are about to be overwritten
            buf, old = back
            for p in old:
                p.forget_image(buf)
            self._pool.append(buf)
            self._pool.sort(key=len)
            while sum(b.size for b in self._pool) > self.keep:
                self._pool.pop()
        if n > self.cap:
            return np.empty(n, dtype=np.uint8)
        k = next((k for k, b in enumerate(self._pool) if b.size >= n), None)
        if k is not None:
            buf = self._pool.pop(k)
        else:  # room to grow: a batch a little larger than this one reuses it
            buf = np.empty(max(n, min(2 * n, self.cap), 1 << 20), dtype=np.uint8)
        self._taken[i] = (buf, list(plans))
        return buf[:n]


def pack(plans: list[Plan], extra: int = 0, ring: ImageRing | None = None) -> tuple[np.ndarray, list[int]]:
    """One image holding every plan's image (each at an ALIGN-aligned base): a batch of cases
    goes to the device in one copy, and each pointer keeps its alignment class. A plan whose
    image was not written yet is written here, and its image is then that part of the batch's
    image: the batch's image must never be written to (the judge compares runs with it)."""
    bases, cursor = [], 0
    for p in plans:
        bases.append(cursor)
        cursor = round_up(cursor + p.size)
    n = max(cursor + extra, 1)  # `extra`: a tail the caller writes
    image = ring.take(n, plans) if ring is not None else np.empty(n, dtype=np.uint8)
    for p, base in zip(plans, bases):
        part = image[base : base + p.size]
        if p._image is None:
            p._write(part)
        else:
            part[:] = p._image
    return image, bases
