"""Memory layouts for one tensor: a layout class drawn once, then applied to any shape.

A `LayoutClass` fixes the kind (contiguous, offset, padded, step, transposed, broadcast), the
storage offset and the padding rule, so that every stride it produces keeps its Triton
integer class whatever the shape (padding rounds the row length up to 16 first), and the
pointer keeps its 16-byte alignment. Shapes then vary freely inside a compile class. A
contiguous row stride is the row length itself: its class is the width's, which the op's
generator fixes.

Simplest first, so Hypothesis shrinks toward a contiguous tensor at offset 0.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..case import DTYPES, TensorSpec, contiguous_strides
from .draw import CompileClass, Draw, round16

KINDS_OUT = ("contiguous", "offset", "padded", "step", "transposed")
KINDS_IN = KINDS_OUT + ("broadcast",)
OFFSETS = (0, 1, 3, 64, 129)  # elements: 0 and 64 keep a 16-byte aligned pointer, the rest do not


@dataclass(frozen=True)
class LayoutClass:
    kind: str = "contiguous"
    offset: int = 0
    slack: int = 0  # storage elements past the view's extent (a view into a larger buffer)
    pad: int = 0  # padded: row stride = round16(width) + pad; step: + pad (0 or 1)
    step: int = 1  # step: elements between neighbours along the last axis
    axis: int = 0  # broadcast: the axis with stride 0

    def __str__(self) -> str:
        extra = {"padded": f"+{self.pad}", "step": f"x{self.step}+{self.pad}", "transposed": f"+{self.pad}",
                 "broadcast": f"@{self.axis}"}.get(self.kind, "")
        return f"{self.kind}{extra}@{self.offset}" + (f"+{self.slack}" if self.slack else "")


def layout_class(d: Draw, role: str = "in", ndim: int = 1, allow: tuple[str, ...] | None = None) -> LayoutClass:
    kinds = allow or (KINDS_IN if role == "in" else KINDS_OUT)
    kind = d.choice(kinds)
    if kind == "contiguous":
        return LayoutClass()
    offset = d.choice(OFFSETS)
    slack = d.choice((0, 1, 17))
    if kind == "padded":
        return LayoutClass(kind, offset, slack, pad=d.choice((1, 7, 16, 256)))
    if kind == "step":
        return LayoutClass(kind, offset, slack, pad=d.choice((0, 1)), step=d.choice((2, 3, 16)))
    if kind == "transposed":
        return LayoutClass(kind, offset, slack, pad=d.choice((0, 3)))
    if kind == "broadcast":
        return LayoutClass(kind, offset, slack, axis=d.integer(0, max(ndim - 1, 0)))
    return LayoutClass(kind, offset, slack)


def apply_layout(lc: LayoutClass, dtype: str, shape: tuple[int, ...]) -> tuple[TensorSpec, int | None]:
    """(spec, broadcast_axis) of a `shape` tensor laid out by `lc`; broadcast_axis is the
    axis given stride 0 (the caller makes its values constant along it), or None."""
    shape = tuple(map(int, shape))
    kind, ndim, bcast = lc.kind, len(shape), None
    if kind == "broadcast":
        strides = list(contiguous_strides(shape))
        if lc.axis < ndim:
            # stride 0 even over one element, so the stride's class does not depend on the size
            strides[lc.axis] = 0
            bcast = lc.axis if shape[lc.axis] > 1 else None
    elif ndim == 2:
        width = max(shape[1], 1)
        strides = ((round16(width) + lc.pad, 1) if kind == "padded"
                   else (round16(width * lc.step) + lc.pad, lc.step) if kind == "step"
                   else (1, round16(max(shape[0], 1)) + lc.pad) if kind == "transposed" else (width, 1))
    elif ndim == 1:
        strides = (lc.step if kind == "step" else 1,)
    else:
        strides = contiguous_strides(shape)
    strides = tuple(map(int, strides))
    offset, slack = lc.offset, lc.slack
    if (dtype in DTYPES and type(offset) is int and type(slack) is int and offset >= 0 and slack >= 0
            and min(shape, default=0) >= 0 and min(strides, default=0) >= 0):  # what TensorSpec checks
        extent = offset if 0 in shape else offset + 1 + sum((n - 1) * s for n, s in zip(shape, strides))
        return TensorSpec.trusted(dtype, shape, strides, offset, extent + slack), bcast
    spec = TensorSpec(dtype, shape, strides, offset)  # raises what it always raised
    return TensorSpec(dtype, spec.shape, spec.strides, offset, spec.extent + slack), bcast


MEMO_SIZE = 512  # layouts a class remembers (a stint's cases repeat most of their shapes)


def class_layout(k: CompileClass, name: str, dtype: str, shape: tuple[int, ...],
                 layout: str | None = None) -> tuple[TensorSpec, int | None]:
    """`apply_layout(k[f"layout:{layout or name}"], dtype, shape)` for tensor `name` of a case
    of class `k`, remembered by the class (each name keeps its own specs)."""
    memo = k.memo
    key = (name, layout, dtype, shape)
    got = memo.get(key)
    if got is None:
        if len(memo) >= MEMO_SIZE:
            memo.clear()
        got = memo[key] = apply_layout(k[f"layout:{layout or name}"], dtype, shape)
    return got


def relayout(lc: LayoutClass, dtype: str, shape: tuple[int, ...], values: np.ndarray | None = None) -> TensorSpec:
    """`lc` applied to a new shape (a contract violation resizing a tensor). A broadcast
    layout stays one if the new values are constant along its axis; otherwise a 1-D tensor
    takes stride 16, which keeps stride 0's integer class and the pointer's alignment."""
    if lc.kind == "broadcast" and len(shape) > lc.axis and shape[lc.axis] > 1:
        if values is not None and np.all(np.asarray(values) == np.take(values, [0], axis=lc.axis)):
            return apply_layout(lc, dtype, shape)[0]
        lc = LayoutClass("step", lc.offset, lc.slack, step=16) if len(shape) == 1 else LayoutClass()
    return apply_layout(lc, dtype, shape)[0]


def apply_broadcast(values: np.ndarray, axis: int | None) -> np.ndarray:
    """Make values constant along a stride-0 axis (what such a view can hold)."""
    if axis is None:
        return values
    if isinstance(values, np.ndarray) and 0 <= axis < values.ndim and values.shape[axis]:
        out = np.empty(values.shape, values.dtype)  # what broadcast_to(first).copy() makes, in a fifth of the time
        out[...] = values[(slice(None),) * axis + (slice(0, 1),)]
        return out
    first = np.take(values, [0], axis=axis)
    return np.broadcast_to(first, values.shape).copy()


def layouts(dtype: str, shape: tuple[int, ...], role: str = "in", allow: tuple[str, ...] | None = None):
    """Hypothesis strategy: (spec, broadcast_axis) for one tensor (public API)."""
    from hypothesis import strategies as st

    from .draw import HypothesisDraw

    @st.composite
    def strategy(draw):
        return apply_layout(layout_class(HypothesisDraw(draw), role, len(shape), allow), dtype, tuple(shape))
    return strategy()
