"""A case: one call of one op, as plain data.

A `Case` names the op, its scalar arguments, the memory layout of every tensor argument
(`TensorSpec`: dtype, shape, strides, storage offset and storage size, in elements), and
the logical values of every input tensor. It holds no torch objects and no device, so it
pickles across a process boundary, serialises to JSON + npz, and compares by content.
Outputs have a layout but no values: materialisation fills them with poison.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

DTYPES = ("int32", "int64")


@dataclass(frozen=True)
class TensorSpec:
    """Where a tensor's elements live inside its storage (all counts in elements)."""

    dtype: str
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int = 0
    storage_size: int = -1  # -1: exactly the extent the view needs

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {DTYPES}, got {self.dtype!r}")
        shape, strides = tuple(map(int, self.shape)), tuple(map(int, self.strides))
        fields = self.__dict__  # frozen: set as object.__setattr__ would
        fields["shape"], fields["strides"] = shape, strides
        if len(shape) != len(strides):
            raise ValueError(f"shape {shape} and strides {strides} differ in rank")
        if min(shape, default=0) < 0 or min(strides, default=0) < 0 or self.offset < 0:
            raise ValueError(f"negative shape, stride or offset in {self}")
        extent = _extent(shape, strides, self.offset)
        if self.storage_size < 0:
            fields["storage_size"] = extent
        elif self.storage_size < extent:
            raise ValueError(f"storage_size {self.storage_size} < extent {extent} of {self}")

    @classmethod
    def trusted(cls, dtype: str, shape: tuple[int, ...], strides: tuple[int, ...], offset: int,
                storage_size: int) -> "TensorSpec":
        """A spec from fields the caller has already checked (a dtype of DTYPES, tuples of
        Python ints, nothing negative, storage_size >= extent): what `TensorSpec(...)` would
        build, without the checks (case generators build many)."""
        spec = object.__new__(cls)
        spec.__dict__.update(dtype=dtype, shape=shape, strides=strides, offset=offset, storage_size=storage_size)
        return spec

    @classmethod
    def contiguous(cls, dtype: str, shape: tuple[int, ...]) -> "TensorSpec":
        return cls(dtype, tuple(shape), contiguous_strides(shape))

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def extent(self) -> int:
        """Elements from the start of storage to one past the last element the view reaches."""
        return _extent(self.shape, self.strides, self.offset)

    @property
    def itemsize(self) -> int:
        return _ITEMSIZE.get(self.dtype) or np.dtype(self.dtype).itemsize  # also a np.dtype equal to a name

    @property
    def is_contiguous(self) -> bool:
        return self.strides == contiguous_strides(self.shape) or self.numel <= 1

    def element_index(self) -> np.ndarray:
        """Storage index (elements) of every logical element, shaped like the tensor."""
        idx = np.full(self.shape, self.offset, dtype=np.int64)
        for axis, (n, s) in enumerate(zip(self.shape, self.strides)):
            shape = [1] * len(self.shape)
            shape[axis] = n
            idx = idx + (np.arange(n, dtype=np.int64) * s).reshape(shape)
        return idx

    def overlaps_itself(self) -> bool:
        flat = self.element_index().ravel()
        return len(np.unique(flat)) != flat.size

    def to_json(self) -> dict[str, Any]:
        return {
            "dtype": self.dtype,
            "shape": list(self.shape),
            "strides": list(self.strides),
            "offset": self.offset,
            "storage_size": self.storage_size,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "TensorSpec":
        return cls(d["dtype"], tuple(d["shape"]), tuple(d["strides"]), int(d["offset"]), int(d["storage_size"]))

    def describe(self) -> str:
        lay = "contiguous" if self.is_contiguous else f"strides={self.strides}"
        off = f" offset={self.offset}" if self.offset else ""
        return f"{self.dtype}{list(self.shape)} {lay}{off} storage={self.storage_size}"


_ITEMSIZE = {dt: np.dtype(dt).itemsize for dt in DTYPES}


def _extent(shape: tuple[int, ...], strides: tuple[int, ...], offset: int) -> int:
    if 0 in shape:  # no element
        return offset
    end = offset + 1
    for n, s in zip(shape, strides):
        end += (n - 1) * s
    return end


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, acc = [], 1
    for n in reversed(shape):
        strides.append(acc)
        acc *= max(n, 1)
    return tuple(reversed(strides))


@dataclass(frozen=True, eq=False)
class Case:
    """One call of op `op`: scalars, tensor layouts, input values. Compared by content."""

    op: str
    scalars: Mapping[str, Any]
    tensors: Mapping[str, TensorSpec]
    values: Mapping[str, np.ndarray]  # logical values of the input tensors, keyed like `tensors`
    variant: str = "default"  # which variant of the op's contract judges this case
    meta: Mapping[str, Any] = field(default_factory=dict)  # provenance; not part of identity

    def __post_init__(self) -> None:
        vals = {}
        for name, arr in self.values.items():
            spec = self.tensors.get(name)
            if spec is None:
                raise ValueError(f"value for {name!r} but no tensor spec")
            arr = np.asarray(arr, dtype=spec.dtype)
            if arr.shape != spec.shape:
                raise ValueError(f"{name}: values have shape {arr.shape}, spec says {spec.shape}")
            arr.setflags(write=False)
            vals[name] = arr
        object.__setattr__(self, "values", vals)
        object.__setattr__(self, "scalars", dict(self.scalars))
        object.__setattr__(self, "tensors", dict(self.tensors))

    # identity -----------------------------------------------------------------------
    def _identity(self) -> bytes:
        h = hashlib.sha256()
        head = {
            "op": self.op,
            "variant": self.variant,
            "scalars": self.scalars,
            "tensors": {k: v.to_json() for k, v in sorted(self.tensors.items())},
        }
        h.update(json.dumps(head, sort_keys=True, default=str).encode())
        for name in sorted(self.values):
            h.update(name.encode())
            h.update(np.ascontiguousarray(self.values[name]).tobytes())
        return h.digest()

    def digest(self) -> str:
        return self._identity().hex()[:16]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Case) and self._identity() == other._identity()

    def __hash__(self) -> int:
        return hash(self._identity())

    # edits (return new cases) ----------------------------------------------------------
    def replace(self, **changes: Any) -> "Case":
        return dataclasses.replace(self, **changes)

    def with_scalars(self, **scalars: Any) -> "Case":
        return self.replace(scalars={**self.scalars, **scalars})

    def with_meta(self, **meta: Any) -> "Case":
        return self.replace(meta={**self.meta, **meta})

    # size, for the minimizer and dedup (smaller is better) --------------------------------
    def size_key(self) -> tuple:
        elems = sum(s.numel for s in self.tensors.values())
        storage = sum(s.storage_size for s in self.tensors.values())
        noncontig = sum(not s.is_contiguous or s.offset > 0 for s in self.tensors.values())
        wide = sum(s.dtype == "int64" for s in self.tensors.values())
        mag = sum(int(np.abs(v.astype(np.int64)).sum()) for v in self.values.values())
        return (elems, noncontig, storage, wide, mag)

    def describe(self) -> str:
        parts = [f"{k}={v}" for k, v in sorted(self.scalars.items())]
        parts += [f"{k}: {v.describe()}" for k, v in sorted(self.tensors.items())]
        return f"{self.op}[{self.variant}] " + "; ".join(parts)
