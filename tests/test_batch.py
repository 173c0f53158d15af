"""A batch judges exactly as cases run one by one: the same findings, from the same arena
bytes and the same oracles, with the torch oracle read from the batch image's inputs (on the host)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvfuzz.engines.batch_engine import case_stream, run_prepared
from kvfuzz.execute import prepare
from kvfuzz.judge import judge
from kvfuzz.strategies import GENERATORS
from kvfuzz.worker import InProcessExecutor, WorkerExecutor
from sampling import sampled

MUTANT = str(Path(__file__).resolve().parent / "fixtures" / "mutant_kernels.py")


def _verdicts_both_ways(executor, cases):
    prepared = [prepare(c) for c in cases]
    batched = [judge(p.case, o, prepared=p) for p, o in zip(prepared, run_prepared(executor, prepared, repeat=True))]
    alone = [judge(c, executor.run(c, repeats=2)) for c in cases]
    return batched, alone


# the two slowest under the interpreter (tens of seconds each on 2 cores): campaign-sized, slow
# only (by hand: `pytest -m slow`); their packed-against-alone tests (test_pack_launch.py) run in CI
HEAVY = {"flashinfer_kv_indices", "trtllm_mha_kv_indices"}


@pytest.mark.parametrize("op", sampled("batch alone", [op for op in GENERATORS if op not in HEAVY])
                         + [pytest.param(op, marks=pytest.mark.slow) for op in sorted(HEAVY)])
def test_a_batch_of_builtin_cases_is_judged_as_each_case_alone(op, device):
    ex = InProcessExecutor("builtin", device)
    cases = [c for _, c in case_stream(op, 3, 24, device)]  # in and out of contract, several classes
    batched, alone = _verdicts_both_ways(ex, cases)
    for b, a, c in zip(batched, alone, cases):
        assert (b.status, b.signatures(), b.refused is None) == (a.status, a.signatures(), a.refused is None), \
            c.describe()
        assert b.signatures() == []  # builtin: nothing to find


def test_a_batch_finds_what_cases_alone_find(device):
    """The mutant's planted defects (an input modified in place, a refused page size accepted,
    a page chosen at random) show in a batch exactly as alone."""
    import cases as hand

    ex = WorkerExecutor(MUTANT, device)
    try:
        picked = [hand.decode(ps=4, delta=3), hand.decode(ps=4).with_scalars(page_size=48), hand.decode(ps=2, B=4),
                  hand.decode(ps=16), hand.decode(ps=1, B=1)]
        batched, alone = _verdicts_both_ways(ex, picked)
    finally:
        ex.close()
    kinds = set()
    for i, (b, a) in enumerate(zip(batched, alone)):
        if i == 2:  # the random page: a mismatch or a differing second run, as the draw falls, not an
            # out_of_bounds_read (test_random_is_not_a_read.py); the draws that still pass for one
            # come about once in 2,700 runs of the case alone (docs/findings.md)
            assert b.findings and a.findings
            assert {f.kind for f in a.findings + b.findings} <= {"mismatch", "nondeterministic"}
        else:
            assert b.signatures() == a.signatures()
        kinds |= {f.kind for f in b.findings}
    assert {"input_modified", "invalid_accepted"} <= kinds


# Correct on its first run of each case; on every later call one off where the case has 3 rows
# or more: in a batch, the runs that repeat cases (the second pass) are the calls after the
# batch's first `n`.
SECOND_PASS_DIFFERS = '''
from kvfuzz.kernels import get_num_kv_splits

CALLS = [0]
FIRST_PASS = {n}


def get_num_kv_splits_triton(out, seq_lens, num_seq, *args):
    get_num_kv_splits(out, seq_lens, num_seq, *args)
    CALLS[0] += 1
    if CALLS[0] > FIRST_PASS and num_seq >= 3:
        out.add_(1)
'''


@pytest.mark.parametrize("repeat", [[True] * 4, [True, False, True, False]], ids=["every case", "some cases"])
def test_a_worker_batch_returns_each_repeated_run_through_shared_memory(repeat, tmp_path, device):
    """Both ways the repeated runs come back (the whole second arena where every case repeats,
    as on a GPU; case by case where some do, as on the CPU), each case's from its own bytes:
    a repeated case of 3 rows or more is nondeterministic, every other case clean (a repeated
    run read from the wrong bytes would differ too)."""
    import cases as hand

    from kvfuzz.execute import launches, outcomes

    target = tmp_path / "second_pass_differs.py"
    target.write_text(SECOND_PASS_DIFFERS.format(n=len(repeat)))
    ex = WorkerExecutor(str(target), device)
    try:
        prepared = [prepare(hand.splits(lens)) for lens in ([5, 17, 0, 9], [300, 2], [1], [64, 65, 66])]
        image, batch = launches(prepared, repeat, prove_on_device=False)
        result = ex.run_batch(image, batch)
    finally:
        ex.close()
    assert not result.lost
    for p, o, again in zip(prepared, outcomes(batch, result), repeat):
        v = judge(p.case, o, prepared=p)
        assert v.status == "in_contract"
        differs = again and p.case.scalars["num_seq"] >= 3
        assert {f.kind for f in v.findings} == ({"nondeterministic"} if differs else set()), v.signatures()


def test_the_shared_segments_sections_lie_a_guard_band_apart():
    """On the CPU a batch's kernels run in the shared segment's sections themselves, and the
    interpreter checks no bounds: a write up to GUARD_MAX bytes past a section's end lands in a
    gap, never in the next section's cases; every section keeps the arena's 256-byte alignment
    (a pointer's alignment class is part of the case)."""
    import numpy as np

    from kvfuzz.materialize import ALIGN, GUARD_MAX
    from kvfuzz.worker import sections, segment_size

    for n in (ALIGN, 64 * ALIGN, 3 << 20):
        segment = np.zeros(segment_size(n), np.uint8)
        starts = [part.ctypes.data - segment.ctypes.data for part in sections(segment, n)]
        assert [part.size for part in sections(segment, n)] == [n, n, n]
        assert all(s % ALIGN == 0 for s in starts)
        ends = [s + n for s in starts]
        assert all(nxt - end >= GUARD_MAX for end, nxt in zip(ends, starts[1:] + [segment.size]))
