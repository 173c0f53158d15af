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
    image, batch = launches(prepared, [True] * len(prepared))
    before = image.copy()
    result = InProcessExecutor("builtin", device).run_batch(image, batch)
    assert not result.lost
    assert np.array_equal(image, before)
    for p in prepared:
        assert p.plan.image.tobytes() == plan(p.case, CONTRACTS[p.case.op].outputs).image.tobytes()
