"""The generators' fast paths answer exactly what the plain calls they replace answer (the
batched engine's seed-pinned streams depend on it; scripts/stream_digest.py checks whole
streams against a saved run)."""

from __future__ import annotations

import itertools
import pickle
import random

import numpy as np
import pytest

from kvfuzz.case import Case, TensorSpec
from kvfuzz.ops.swa_spec_page_table import generate as spec
from kvfuzz.strategies import GENERATORS
from kvfuzz.strategies.coverage import generic_features
from kvfuzz.strategies.draw import CompileClass, RandomDraw
from kvfuzz.strategies.layouts import MEMO_SIZE, LayoutClass, apply_broadcast, apply_layout, class_layout

pytestmark = pytest.mark.nokernel  # no kernel runs here (conftest: runs where the interpreter is refused)


def test_random_draw_answers_as_random_does():
    bounds = [(0, 0), (2, 6), (-5, 5), (0, 2**32 - 1), (0, 2**70), (np.int64(1), 4), (True, 3)]
    options = [(1,), (1, 2, 3), "abc", range(7)]
    for i in range(50):
        ref, d = random.Random(f"s{i}"), RandomDraw(f"s{i}")
        for (lo, hi), opts in itertools.product(bounds, options):
            assert d.integer(lo, hi) == ref.randint(lo, hi)
            assert d.choice(opts) == opts[ref.randrange(len(opts))]
        assert d.rnd.getstate() == ref.getstate()
    with pytest.raises(ValueError, match="empty range"):
        RandomDraw(0).integer(5, 4)
    with pytest.raises(ValueError, match="empty range"):
        RandomDraw(0).choice(())


LAYOUTS = [LayoutClass(kind, offset, slack, pad, step, axis)
           for kind in ("contiguous", "offset", "padded", "step", "transposed", "broadcast")
           for offset, slack, pad, step, axis in itertools.product((0, 3), (0, 17), (0, 7), (1, 3), (0, 1, 2))]
SHAPES = [(), (0,), (1,), (5,), (0, 3), (3, 0), (1, 1), (4, 7), (2, 3, 4)]


def test_apply_layout_builds_what_the_checked_constructor_builds():
    for lc, shape, dtype in itertools.product(LAYOUTS, SHAPES, ("int32", "int64")):
        spec, _ = apply_layout(lc, dtype, shape)
        checked = TensorSpec(dtype, spec.shape, spec.strides, spec.offset)
        assert spec == TensorSpec(dtype, spec.shape, spec.strides, spec.offset, checked.storage_size + lc.slack)
        assert [type(x) for x in (*spec.shape, *spec.strides, spec.offset, spec.storage_size)] == [int] * (
            2 * len(shape) + 2)


def test_apply_layout_refuses_what_tensor_spec_refuses():
    for dtype, shape in (("float32", (3,)), ("int32", (-1,)), ("int64", (2, -3))):
        with pytest.raises(ValueError) as want:
            TensorSpec(dtype, shape, (1,) * len(shape))
        with pytest.raises(ValueError) as got:
            apply_layout(LayoutClass(), dtype, shape)
        assert str(got.value).split(" in ")[0] == str(want.value).split(" in ")[0]


@pytest.mark.parametrize("op", list(GENERATORS))
def test_class_layout_is_apply_layout(op):
    for k in GENERATORS[op].pool(0, 8):
        names = [name.split(":", 1)[1] for name, _ in k if name.startswith("layout:")]
        for name, shape, _ in itertools.product(names, [(3,), (2, 5), (0, 4)], range(2)):  # twice: then remembered
            assert class_layout(k, name, "int64", shape) == apply_layout(k[f"layout:{name}"], "int64", shape)
    k = GENERATORS[op].pool(0, 1)[0]
    name = next(name.split(":", 1)[1] for name, _ in k if name.startswith("layout:"))
    for n in range(MEMO_SIZE + 10):
        class_layout(k, name, "int32", (n,))
    assert len(k.memo) <= MEMO_SIZE


def test_compile_class_pickles_its_fields_only():
    k = CompileClass.of("op", {"b": 1, "a": (2,)})
    k.memo["x"] = 1
    back = pickle.loads(pickle.dumps(k))
    assert back == k and hash(back) == hash(k) and back["a"] == (2,) and back.get("c", 5) == 5
    assert back.memo == {} and b"memo" not in pickle.dumps(k) and b"_index" not in pickle.dumps(k)
    assert CompileClass("op", (("a", 1), ("a", 2)))["a"] == 1  # the first of a repeated name, as before
    with pytest.raises(KeyError):
        k["c"]


def _spec_blocks_by_scan(la: int, lb: int) -> set[str]:
    """The row's block classes by walking its blocks (what spec_features used to do)."""
    out = set()
    for start in range(0, la + lb, spec.BLOCK):
        out.add("block:all_a" if start + spec.BLOCK < la else "block:all_b" if start >= la else "block:mixed")
    return out


def test_spec_features_block_classes_match_a_scan_of_the_blocks():
    B = spec.BLOCK
    lengths = [*range(0, 20), *range(B - 16, B + 16), *range(2 * B - 8, 2 * B + 8), 3 * B, 3 * B + 1, 1000]
    for la, lb in itertools.product(lengths, lengths):
        case = Case(spec.OP, {"speculative_num_draft_tokens": 1},
                    {"seq_len_a": TensorSpec.contiguous("int64", (1,)), "seq_len_b": TensorSpec.contiguous("int64", (1,))},
                    {"seq_len_a": np.array([la]), "seq_len_b": np.array([lb])})
        got = spec.spec_features(case)
        assert {f for f in got if f.startswith("block:")} == _spec_blocks_by_scan(la, lb), (la, lb)
        assert ("edge:total:%d" % (la + lb) in got) == (abs(la + lb - B) <= 1)


def test_generic_features_remembered_per_spec_are_those_of_the_spec_and_name():
    shared = TensorSpec("int32", (4, 7), (17, 1), 3)  # misaligned, odd stride
    fresh = {"a": TensorSpec("int64", (4,), (0,)), "b": TensorSpec("int32", (4, 7), (17, 1), 3)}
    for tensors in ({"a": shared}, {"b": shared}, {"a": shared, "b": shared}, fresh, {"a": shared}):
        got = generic_features(Case("op", {}, tensors, {}))
        want = set()
        for name, s in tensors.items():
            want.add(f"dtype:{name}:{s.dtype}")
            if s.offset * s.itemsize % 16:
                want |= {"misaligned", f"misaligned:{name}"}
            if any(n > 1 and st not in (0, 1) and st % 16 for n, st in zip(s.shape, s.strides)):
                want |= {"odd_stride", f"odd_stride:{name}"}
            if any(n > 1 and st == 0 for n, st in zip(s.shape, s.strides)):
                want.add(f"broadcast:{name}")
        assert got == want, tensors


def test_apply_broadcast_is_a_copy_of_the_first_slice_broadcast():
    g = np.random.default_rng(0)
    for shape, dtype in itertools.product([(5,), (1,), (3, 4), (1, 7), (6, 300), (2, 3, 4)], (np.int32, np.int64)):
        values = g.integers(-9, 9, size=shape).astype(dtype)
        for axis in range(len(shape)):
            got = apply_broadcast(values, axis)
            want = np.broadcast_to(np.take(values, [0], axis=axis), values.shape).copy()
            assert got.dtype == want.dtype and got.strides == want.strides and np.array_equal(got, want)
    with pytest.raises(IndexError):
        apply_broadcast(np.zeros((0, 3), np.int64), 0)
