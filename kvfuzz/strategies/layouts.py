"""Memory layouts for one tensor, chosen independently per argument.

Simplest first, so Hypothesis shrinks toward a contiguous tensor at offset 0 when the
failure does not need the layout.
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from ..case import TensorSpec, contiguous_strides

KINDS_OUT = ("contiguous", "offset", "padded", "step", "transposed")
KINDS_IN = KINDS_OUT + ("broadcast",)


@st.composite
def layouts(draw, dtype: str, shape: tuple[int, ...], role: str = "in", allow: tuple[str, ...] | None = None,
            ) -> tuple[TensorSpec, int | None]:
    """(spec, broadcast_axis): broadcast_axis is the axis given stride 0, whose values the
    caller must make constant, or None."""
    kinds = allow or (KINDS_IN if role == "in" else KINDS_OUT)
    kind = draw(st.sampled_from(kinds))
    offset = draw(st.sampled_from([0, 1, 3, 64, 129])) if kind != "contiguous" else 0
    slack = draw(st.sampled_from([0, 1, 17])) if kind != "contiguous" else 0
    strides = list(contiguous_strides(shape))
    bcast = None
    if kind == "padded" and len(shape) == 2:
        strides = [shape[1] + draw(st.sampled_from([1, 7, 256])), 1]
    elif kind == "step":
        k = draw(st.sampled_from([2, 3]))
        if len(shape) == 1:
            strides = [k]
        else:
            strides = [shape[1] * k + draw(st.sampled_from([0, 1])), k]
    elif kind == "transposed" and len(shape) == 2:
        strides = [1, max(shape[0], 1) + draw(st.sampled_from([0, 0, 3]))]
    elif kind == "broadcast" and any(n > 1 for n in shape):
        bcast = draw(st.sampled_from([i for i, n in enumerate(shape) if n > 1]))
        strides[bcast] = 0
        if len(shape) == 2 and bcast == 0:
            strides[1] = 1
    spec = TensorSpec(dtype, tuple(shape), tuple(strides), offset)
    return TensorSpec(dtype, spec.shape, spec.strides, offset, spec.extent + slack), bcast


def apply_broadcast(values: np.ndarray, axis: int | None) -> np.ndarray:
    """Make values constant along a stride-0 axis (what such a view can hold)."""
    if axis is None:
        return values
    first = np.take(values, [0], axis=axis)
    return np.broadcast_to(first, values.shape).copy()
