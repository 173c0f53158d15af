"""The NumPy oracle's and the contract's fast paths give exactly what the slow definitions give
(each fast path answers only where it is sure, and the slow one decides the rest)."""

from __future__ import annotations


import numpy as np
import pytest

from kvfuzz.case import TensorSpec
from kvfuzz.contract import disjoint
from kvfuzz.ops.num_kv_splits import oracle as splits_oracle

pytestmark = pytest.mark.nokernel  # no kernel runs here (conftest: runs where the interpreter is refused)


def test_the_double_log2_shortcut_rounds_as_the_decimal_one():
    rng = np.random.default_rng(0)
    mx = np.concatenate([np.arange(1, 3000), rng.integers(1, 2**31 - 1, 3000)])  # max_seq_len, as the op takes it
    xs = {float(np.float32(np.float32(m) / np.float32(64.0))) for m in mx.tolist()}
    xs |= {float(v) for v in (rng.random(2000) * 4).astype(np.float32).tolist()}
    answered = 0
    for x in sorted(xs):
        fast = splits_oracle._log2_f32_unambiguous(np.float32(x))
        if fast is not None:
            answered += 1
            assert fast.tobytes() == splits_oracle.log2_f32_by_decimal(x).tobytes(), x
        assert splits_oracle.log2_f32(x).tobytes() == splits_oracle.log2_f32_by_decimal(x).tobytes(), x
    assert answered >= 0.99 * len(xs)


def test_the_shortcut_leaves_a_value_near_a_midpoint_to_the_decimal_log2():
    # a float32 whose double log2 lies within 2^-40 of itself from a float32 midpoint
    near = next(x for x in (float(np.float32(i / 64)) for i in range(64, 1 << 22))
                if splits_oracle._log2_f32_unambiguous(np.float32(x)) is None)
    assert splits_oracle.log2_f32(near).tobytes() == splits_oracle.log2_f32_by_decimal(near).tobytes()


@pytest.mark.parametrize("shape,strides", [
    ((3, 4), (4, 1)), ((3, 4), (1, 3)), ((3, 4), (5, 1)), ((4,), (0,)), ((1, 5), (0, 1)), ((3, 3), (1, 1)),
    ((2, 3), (3, 2)), ((2, 2, 2), (4, 1, 2)), ((2, 2, 2), (3, 1, 2)), ((5,), (2,)), ((0, 3), (0, 0)),
    ((4, 2), (1, 4)), ((3, 2), (2, 3)), ((2, 3), (2, 1)),
])
def test_disjoint_never_says_so_of_a_layout_that_overlaps(shape, strides):
    spec = TensorSpec("int32", shape, strides)
    if disjoint(spec):
        assert not spec.overlaps_itself()


def test_disjoint_knows_the_generated_layouts():
    rng = np.random.default_rng(1)
    seen = 0
    for _ in range(3000):
        rank = int(rng.integers(1, 4))
        shape = tuple(int(n) for n in rng.integers(0, 5, rank))
        strides = tuple(int(s) for s in rng.integers(0, 12, rank))
        spec = TensorSpec("int32", shape, strides)
        if disjoint(spec):
            seen += 1
            assert not spec.overlaps_itself(), spec
    assert seen > 500
