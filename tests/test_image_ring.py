"""Batch images in reused buffers (`materialize.ImageRing`): a batch packed into a reused buffer
holds the bytes the batch packed into fresh memory holds (every case's, and the wanted output
bytes); when a slot comes back, the plans whose
images were views into it forget them and write them anew when asked, so no case is ever judged
against a later batch's bytes; and a campaign finds the same things with the ring as without."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from kvfuzz import materialize
from kvfuzz.engines.batch_engine import case_stream, fuzz_op
from kvfuzz.execute import launches, prepare
from kvfuzz.materialize import ImageRing
from kvfuzz.worker import WorkerExecutor

MUTANT = str(Path(__file__).resolve().parent / "fixtures" / "mutant_kernels.py")


def batches(op: str, n: int, k: int) -> list[list]:
    cases = [c for _, c in case_stream(op, 1, n * k, "cpu", in_contract_only=True, stint=k)]
    return [[prepare(c, i) for i, c in enumerate(cases[j : j + k], j)] for j in range(0, n * k, k)]


def test_a_reused_buffer_holds_the_same_batch_and_a_returning_slot_is_forgotten():
    ring = ImageRing(depth=2)
    seen = []
    for prepared in batches("decode_metadata", 5, 4):
        fresh = [prepare(p.case, p.index) for p in prepared]
        want, want_batch = launches(fresh, [True] * len(fresh))
        got, got_batch = launches(prepared, [True] * len(prepared), ring=ring)
        assert got.size == want.size and got_batch == want_batch
        for b in got_batch:  # each case's bytes and its wanted output bytes (the slack between is never read)
            assert got[b.base : b.base + b.size].tobytes() == want[b.base : b.base + b.size].tobytes()
            assert all(got[w : w + n].tobytes() == want[w : w + n].tobytes() for _, w, n, _ in b.expect)
        assert all(np.shares_memory(p.plan.image, got) for p in prepared)  # the plans' images: views into it
        seen.append((prepared, fresh))
    # depth 2: the slots of batches 0-2 came back (for batches 2-4), so those batches' plans forgot
    # their images; asked for, each is written anew, equal to a fresh plan's
    for b, (prepared, fresh) in enumerate(seen):
        kept = [p.plan._image is not None for p in prepared]
        assert all(kept) if b >= 3 else not any(kept), (b, kept)
        for p, q in zip(prepared, fresh):
            assert p.plan.image.tobytes() == q.plan.image.tobytes()


def test_images_past_the_cap_get_buffers_of_their_own():
    ring = ImageRing(depth=2, cap=1024)
    a = ring.take(4096, [])
    b = ring.take(512, [])
    c = ring.take(4096, [])
    assert a.base is None and c.base is None and not np.shares_memory(a, c)  # each its own
    assert b.base is not None and b.size == 512


def test_a_returned_buffer_serves_a_later_batch_it_holds_and_the_pool_keeps_its_bound():
    """Batches of a campaign's classes differ in size a hundredfold: a buffer that comes back
    serves whichever later batch it holds, the smallest such first, and the pool drops buffers
    past `keep` bytes (given back to the system) rather than hold a process at its peak."""
    mib = 1 << 20
    ring = ImageRing(depth=2, cap=8 * mib, keep=8 * mib)
    a = ring.take(3 * mib, [])  # a new buffer with room to grow: 6 MiB
    b = ring.take(mib, [])  # 2 MiB
    c = ring.take(5 * mib, [])  # a's buffer came back: it holds 5 MiB
    d = ring.take(mib // 2, [])  # b's came back (the smallest that holds it)
    assert np.shares_memory(a, c) and np.shares_memory(b, d)
    assert not np.shares_memory(c, d)
    tight = ImageRing(depth=1, cap=8 * mib, keep=2 * mib)
    x = tight.take(3 * mib, [])
    y = tight.take(mib, [])  # x's 6 MiB buffer came back past `keep`: dropped, not reused
    assert not np.shares_memory(x, y)


def test_a_campaign_finds_the_same_with_reused_buffers_as_with_fresh_ones(device, monkeypatch):
    """The mutant fixture's planted defects, seed 2's first 96 cases in stints of 8, small batches
    (many slots come back): the same findings, at the same cases, and the same statuses. In a
    worker process, as a campaign runs: the fixture is torch code, and on a GPU its gather past a
    table in an out-of-contract case is a device-side assert, which ends the process's CUDA context."""
    def run():
        ex = WorkerExecutor(MUTANT, device)
        try:
            stats, found = fuzz_op("decode_metadata", ex, seed=2, budget_s=300, max_cases=96, device=device,
                                   rerun_every=1, stint=8, batch=8)
        finally:
            ex.close()
        return ({s: (f.found_at_case, f.finding.kind) for s, f in found.items()}, dict(stats.by_status))

    with_ring = run()
    monkeypatch.setattr(materialize.ImageRing, "take", lambda self, n, plans: np.empty(n, dtype=np.uint8))
    assert run() == with_ring
    assert with_ring[0], "the fixture's defects were not found: nothing was compared"


def test_an_image_written_over_stale_bytes_is_the_image_written_into_fresh_memory():
    """The writer leaves the canary out of contiguous tensors' elements (it writes them whole
    after): over a buffer full of another batch's bytes, every op's images (contiguous,
    strided, broadcast, empty tensors) come out byte for byte as over fresh memory."""
    from kvfuzz.ops import CONTRACTS

    for op in sorted(CONTRACTS):
        for i, (_, case) in enumerate(case_stream(op, 2, 24, "cpu", stint=3)):
            plan = prepare(case, i).plan
            fresh = np.empty(plan.size, dtype=np.uint8)
            fresh.fill(materialize.CANARY_BYTE ^ 0xFF)
            stale = np.random.default_rng(i).integers(0, 256, plan.size, dtype=np.uint8)
            plan._write(fresh)
            want = fresh.tobytes()
            plan._write(stale)
            assert stale.tobytes() == want, (op, i)
            assert (fresh == materialize.CANARY_BYTE).any(), (op, i)


def test_a_pack_written_over_stale_bytes_is_the_pack_written_into_fresh_memory():
    """A packed image leaves the canary out of the merged tensors it writes whole (stacked rows):
    over another batch's bytes every packing op's packs come out as over fresh memory."""
    from kvfuzz import packing
    from test_pack_launch import PACKED, op_of, stream

    written = 0
    for name in PACKED:
        prepared = stream(name, 8)
        spec = packing.spec_of(op_of(name))
        for group in packing.group(spec, prepared, [False] * len(prepared), [False] * len(prepared), 4):
            images = []
            for n, buf in enumerate((np.full(1, materialize.CANARY_BYTE ^ 0xFF, dtype=np.uint8), None)):
                pk = packing.Pack(spec, [prepared[i] for i in group])
                buf = np.full(pk.size, materialize.CANARY_BYTE ^ 0xFF, dtype=np.uint8) if n == 0 else \
                    np.random.default_rng(len(group)).integers(0, 256, pk.size, dtype=np.uint8)
                images.append(buf.tobytes() if pk.write(buf) else None)
            assert images[0] == images[1], (name, group)
            written += images[0] is not None
    assert written >= len(PACKED)
