"""Case -> tensors on a device, inside one guarded arena.

All tensors of a case live in one byte arena. Each tensor's storage sits between guard
bands; every byte that is no tensor's element (guards, stride gaps, slack) holds the canary
byte, inputs hold their values and outputs start from a poison value, never zeros. After a
run, one comparison of the arena against its image tells every byte that changed, and
`owner` says whose element (or nobody's) each byte is.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .case import Case, TensorSpec

ALIGN = 256
GUARD_MIN, GUARD_MAX = 4096, 1 << 20  # bytes of canary on each side of each storage
CANARY_BYTE = 0xA5
POISON = {"int32": np.int32(-559038737), "int64": np.int64(-2401053088876216593)}  # 0xDEADBEEF.., 0xDEADBEEFDEADBEEF

NOBODY = -1  # owner of guard bytes, stride gaps and slack


@dataclass(frozen=True)
class Region:
    name: str
    spec: TensorSpec
    start: int  # byte offset of the tensor's storage in the arena
    guard: int  # canary bytes before (and after) the storage

    @property
    def nbytes(self) -> int:
        return self.spec.storage_size * self.spec.itemsize

    def typed(self, arena: np.ndarray) -> np.ndarray:
        """The tensor's storage, as its dtype, inside a host image of the arena."""
        return arena[self.start : self.start + self.nbytes].view(self.spec.dtype)

    def elements(self, arena: np.ndarray) -> np.ndarray:
        """The tensor's logical values (a copy), read through its layout."""
        if self.spec.numel == 0:
            return np.zeros(self.spec.shape, dtype=self.spec.dtype)
        return self.typed(arena)[self.spec.element_index()]


@dataclass(frozen=True)
class Plan:
    """Where every tensor of a case lives in the arena, and the arena's initial image."""

    regions: dict[str, Region]
    image: np.ndarray  # uint8, read-only
    owner: np.ndarray  # int16 per byte: index into `names`, or NOBODY
    names: tuple[str, ...]

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
    regions, cursor = {}, 0
    for name in names:
        spec = case.tensors[name]
        nbytes = spec.storage_size * spec.itemsize
        guard = _round_up(min(GUARD_MAX, max(GUARD_MIN, nbytes)))
        start = cursor + guard
        regions[name] = Region(name, spec, start, guard)
        cursor = _round_up(start + nbytes) + guard  # the guard after is the tensor's own too
    total = max(cursor, GUARD_MIN)
    image = np.full(total, CANARY_BYTE, dtype=np.uint8)
    owner = np.full(total, NOBODY, dtype=np.int16)
    for i, name in enumerate(names):
        r = regions[name]
        if r.spec.numel == 0:
            continue
        idx = r.spec.element_index().ravel()
        if name in outputs:
            r.typed(image)[idx] = POISON[r.spec.dtype]
        else:
            r.typed(image)[idx] = np.asarray(case.values[name], dtype=r.spec.dtype).ravel()
        item = r.spec.itemsize
        byte_idx = (r.start + idx[:, None] * item + np.arange(item)[None, :]).ravel()
        owner[byte_idx] = i
    image.setflags(write=False)
    owner.setflags(write=False)
    return Plan(regions, image, owner, names)


def to_device(p: Plan, device):
    """(arena, views): a fresh device copy of the image and a strided view per tensor."""
    import torch

    arena = torch.from_numpy(p.image.copy()).to(device)
    views = {}
    for name, r in p.regions.items():
        dtype = getattr(torch, r.spec.dtype)
        base = arena[r.start : r.start + r.nbytes].view(dtype)
        views[name] = base.as_strided(r.spec.shape, r.spec.strides, base.storage_offset() + r.spec.offset)
    return arena, views
