"""The repeated launches' alternate images written on the device (`alt_arena.py`) hold, word for
word, what the host writes (`materialize.refill`, through `execute._alternate_into`) in every
repeated launch's bytes: for each op's streams (contiguous and strided layouts, optional tensors,
every class), for packed launches (their `fill` blocks), and for batches where only some cases
repeat. A batch run both ways judges alike."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kvfuzz import alt_arena, execute, packing
from kvfuzz.engines.batch_engine import case_stream
from kvfuzz.execute import prepare
from kvfuzz.ops import records

from sampling import sampled

OPS = list(records())


def stream(op: str, n: int, seed: int = 5) -> list:
    return [prepare(c, i) for i, (_, c) in enumerate(case_stream(op, seed, n, "cpu", stint=3))]


def host_alternate(image: np.ndarray, batch) -> np.ndarray:
    out = np.zeros(image.size, dtype=np.uint8)
    execute._alternate_into(image, batch, out)
    return out


def assert_same_where_repeated(image: np.ndarray, batch) -> int:
    assert alt_arena.fits(batch)
    first = torch.from_numpy(image.copy())
    got = alt_arena.alternate_on_device(first, batch, image.size).numpy()
    assert got.size == image.size
    want = host_alternate(image, batch)
    checked = 0
    for i, b in enumerate(batch):
        if b.repeat and b.run:
            lo, hi = b.base, b.base + b.size
            bad = np.flatnonzero(got[lo:hi] != want[lo:hi])
            assert not bad.size, f"launch {i} ({b.case.op}): {bad.size} bytes differ, first at {bad[0]}"
            checked += b.size
    assert np.array_equal(first.numpy(), image), "the first arena was written"
    return checked


@pytest.mark.parametrize("op", sampled("alt arena", OPS, share=3))
def test_device_alternate_images_equal_the_hosts_for_every_class(op):
    prepared = stream(op, 60)
    repeat = [i % 3 != 1 for i in range(len(prepared))]  # some cases not re-run: their bytes are left
    image, batch = execute.launches(prepared, repeat, prove_on_device=False)
    assert assert_same_where_repeated(image, batch) > 0


@pytest.mark.parametrize("op", [op for op in records() if packing.spec_of(op) is not None])
def test_device_alternate_images_equal_the_hosts_for_packed_launches(op):
    prepared = [p for p in stream(op, 64, seed=2) if p.status == "in_contract"]
    repeat = [True] * len(prepared)
    image, batch, packs = packing.launches(prepared, repeat, [False] * len(prepared), 8, prove_on_device=False)
    if packs is None:
        pytest.skip(f"{op}: no two cases of one class in this stream packed")
    assert any(b.fill for b in batch), "no packed launch"
    assert assert_same_where_repeated(image, batch) > 0


def test_element_runs_cover_exactly_a_strided_tensors_elements():
    # a (3, 4) int64 tensor with row stride 6, offset 1, at byte 512
    layout = ("t", "int64", 512, 8 * (1 + 2 * 6 + 3 * 1 + 1), (3, 4), (6, 1), 1)
    starts, lens = alt_arena.element_runs(layout)
    words = sorted(int(s) + k for s, n in zip(starts, lens) for k in range(int(n)))
    want = sorted(512 // 4 + 2 * (1 + r * 6 + c) + w for r in range(3) for c in range(4) for w in range(2))
    assert words == want
    # inner stride 1: one run a row
    starts, lens = alt_arena.element_runs(("t", "int32", 0, 4 * 40, (3, 5), (10, 1), 2))
    assert starts.tolist() == [2, 12, 22] and lens.tolist() == [5, 5, 5]
    # a one-element innermost dimension: one run an element of the outer ones
    starts, lens = alt_arena.element_runs(("t", "int64", 256, 8 * 30, (3, 1), (10, 7), 0))
    assert starts.tolist() == [64, 84, 104] and lens.tolist() == [2, 2, 2]
    # an innermost stride other than 1: no runs (copied through strided views)
    assert alt_arena.element_runs(("t", "int32", 0, 4 * 40, (3, 5), (1, 3), 0)) is None


@pytest.mark.parametrize("strides", [(6, 2), (1, 3), (0, 2), (2, 0)])
def test_a_strided_tensors_elements_are_copied_through_views(strides):
    """Innermost stride not 1, stride-0 dimensions included: the copy through views writes the
    elements' words and nothing else."""
    layout = ("t", "int64", 512, 8 * 64, (3, 4), strides, 1)
    image = np.random.default_rng(0).integers(0, 255, 4096, dtype=np.uint8)
    first = torch.from_numpy(image.copy())
    out = torch.zeros(4096, dtype=torch.uint8)
    alt_arena._copy_strided(out, first, layout, 256)
    want = np.zeros(4096, dtype=np.uint8)
    elems = np.ndarray((3, 4), "int64", want, 256 + 512 + 8, tuple(8 * x for x in strides))
    elems[...] = np.ndarray((3, 4), "int64", image, 256 + 512 + 8, tuple(8 * x for x in strides))
    assert np.array_equal(out.numpy(), want)


def test_a_batch_run_with_either_alternate_image_gives_the_same_second_runs(monkeypatch, device):
    from kvfuzz.worker import InProcessExecutor

    target = InProcessExecutor("builtin", device).target
    prepared = stream("flashinfer_kv_indices", 12)
    image, batch = execute.launches(prepared, [True] * len(prepared), prove_on_device=False)
    on_device = execute.run_batch(target, image, batch, device)
    monkeypatch.setattr(execute, "fits_alt", lambda batch: False)
    on_host = execute.run_batch(target, image, batch, device)
    assert not on_device.lost and not on_host.lost
    for i, b in enumerate(batch):
        assert on_device.errors[1][i] == on_host.errors[1][i]
        if b.run and b.size:
            assert np.array_equal(on_device.afters[1][i], on_host.afters[1][i]), f"case {i}'s second run"
