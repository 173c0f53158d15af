"""`pack` writes each plan's image straight into the batch image, and the plan's image is then
that part of it: the same bytes a plan writes alone, at ALIGN-aligned bases, and a batch run
never writes into the batch image (the judge compares each run with it)."""

from __future__ import annotations

import numpy as np
import pytest

from kvfuzz.engines.batch_engine import case_stream
from kvfuzz.execute import launches, prepare
from kvfuzz.materialize import ALIGN, pack, plan
from kvfuzz.ops import CONTRACTS


@pytest.mark.parametrize("op", sorted(CONTRACTS))
def test_a_packed_plan_is_the_plan_written_alone(op):
    cases = [c for _, c in case_stream(op, 11, 40, "cuda")]  # in and out of contract
    packed = [plan(c, CONTRACTS[op].outputs) for c in cases]
    alone = [plan(c, CONTRACTS[op].outputs).image for c in cases]
    image, bases = pack(packed)
    for p, base, want in zip(packed, bases, alone):
        assert base % ALIGN == 0
        assert np.shares_memory(p.image, image)  # a part of the batch image, not a copy
        assert not p.image.flags.writeable
        assert p.image.tobytes() == want.tobytes() == image[base : base + p.size].tobytes()
    again, bases_again = pack(packed)  # images already written: copied
    assert bases_again == bases
    for p, base in zip(packed, bases):
        assert again[base : base + p.size].tobytes() == p.image.tobytes()


def test_a_batch_run_leaves_the_batch_image_as_it_was(device):
    from kvfuzz.worker import InProcessExecutor

    prepared = [prepare(c) for _, c in case_stream("q8kv8_topk_length", 2, 6, device)]
    image, batch = launches(prepared, [True] * len(prepared), prove_on_device=False)
    before = image.copy()
    result = InProcessExecutor("builtin", device).run_batch(image, batch)
    assert not result.lost
    assert np.array_equal(image, before)
    for p in prepared:
        assert p.plan.image.tobytes() == plan(p.case, CONTRACTS[p.case.op].outputs).image.tobytes()


# the alternate image: the determinism re-run's start, the out-of-bounds read check ----------


@pytest.mark.parametrize("op", sorted(CONTRACTS))
def test_the_alternate_image_keeps_every_element_and_refills_every_other_byte(op):
    """Every tensor's elements as in the image; every other byte (guards, gaps, slack) the
    alternate fill, never the canary byte; built alike by the plan (run_case, the judge) and
    by `refill` from a batch's launch layouts (the worker's second pass)."""
    from kvfuzz.materialize import CANARY_BYTE, NOBODY, alt_fill, refill

    for _, c in case_stream(op, 5, 30, "cuda"):
        p = plan(c, CONTRACTS[op].outputs)
        alt = p.alt_image
        assert alt.shape == p.image.shape and not alt.flags.writeable
        for r in p.regions.values():
            assert np.array_equal(r.elements(alt), r.elements(p.image)), r.name
        nobody = p.owner == NOBODY
        assert np.array_equal(alt[nobody], alt_fill(p.size)[nobody])
        assert not (alt[nobody] == CANARY_BYTE).any()
        out = np.zeros(p.size, dtype=np.uint8)
        refill(out, p.image, p.layouts)
        assert out.tobytes() == alt.tobytes()


def test_a_run_from_the_alternate_image_reads_back_as_the_canary_image():
    """`as_canary` puts the fill back word by word: a run that wrote an output leaves the same
    bytes as the same run from the image, even where a stored value shares a byte with the
    fill (0 stored where the fill has a 0 byte); a word the kernel changed is kept."""
    import cases as hand

    p = plan(hand.spec(), CONTRACTS["swa_spec_page_table"].outputs)
    canary_run, alt_run = p.image.copy(), p.alt_image.copy()
    dst = p.regions["page_table_dst"]
    for arena in (canary_run, alt_run):
        dst.view(arena)[...] = 0
    assert p.as_canary(alt_run).tobytes() == canary_run.tobytes()
    past = dst.start + dst.nbytes + 64  # a word in the guard band after it, stored to in the alternate run
    alt_run[past : past + 4] = 7
    back = p.as_canary(alt_run)
    assert back[past] == 7 and np.flatnonzero(back != canary_run).tolist() == [past, past + 1, past + 2, past + 3]


@pytest.mark.parametrize("at", [0, 4, 4 * 1000, 4 * 123_457, 1 << 22])
def test_a_value_read_from_the_alternate_fill_tells_where_it_was_read(at):
    """A word copied out of the fill gives its byte offset back, also shifted right (a page
    size's shift), plus a constant (a delta), or read as the low word of an 8-byte read; a
    canary value paired with a value the fill never holds gives nothing."""
    from kvfuzz.fills import alt_source
    from kvfuzz.materialize import alt_fill

    word = int(alt_fill(at + 8)[at : at + 4].view("<u4")[0])
    word64 = int(alt_fill(at + 8)[at : at + 8].view("<i8")[0])
    canary32, canary64 = -0x5A5A5A5B, -0x5A5A5A5A5A5A5A5B
    assert alt_source(canary32, word, 32) == (at, 0)
    assert alt_source(canary32 + 3, word + 3, 32) == (at, 0)
    assert alt_source(canary64, word64, 64) == (at, 0)
    for s in (1, 4, 7, 12):
        got, off = alt_source(canary32 >> s, word >> s, 32)
        assert got <= at < got + off
        got, off = alt_source(canary64 >> s, word64 >> s, 64)
        assert got <= at < got + off
    assert alt_source(canary32, 12345, 32) is None
    assert alt_source(7, 7 + (word - canary32) % 2**20, 32) is None  # another value, nothing like a fill word
