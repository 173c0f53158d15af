"""The packed fast path (`judge.quick_pack`): a packed launch's runs proved clean as a whole,
without unpacking each member's arena. It must never pass where the member-by-member path
(unpack, `quick_verdict`, the full judge) would not:

* per packable op, on the builtin kernel: the packs it passes are the packs whose members the
  member-by-member path passes, and it passes them (the point: a clean pack is judged at once);
* any one damaged byte of a clean pack's first or re-run arena (an output cell, an input, a
  guard band, the gap between two cases), and a torch oracle that disagrees: it refuses;
* the pack's one torch oracle over its merged inputs answers, at each member's rows, what
  the member's own torch oracle answers;
* a campaign's findings on a seeded defect are the same with the fast path as without.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from kvfuzz import packing
from kvfuzz.check import Checker
from kvfuzz.execute import Outcome, RunResult, outcome_of, torch_ref_alone
from kvfuzz.judge import judge, quick_pack, quick_verdict
from kvfuzz.worker import InProcessExecutor

from sampling import sampled
from test_pack_launch import PACKED, op_of, stream


def packed_run(executor, prepared, k=4, every_repeated=True):
    repeat = [every_repeated] * len(prepared)
    image, batch, packs = packing.launches(prepared, repeat, [False] * len(prepared), k, prove_on_device=False)
    assert packs is not None and packs.packed() >= len(prepared) // 2, "too few cases packed to test"
    result = executor.run_batch(image, batch)
    assert result.lost is None
    return batch, packs, result


def members_pass(pack, ran, own) -> bool:
    """The member-by-member path's answer for a pack: every member passes its fast path or,
    failing that, the full judge finds nothing."""
    afters = [pack.unpack(r.after, r.alt) for r in ran.runs]
    if any(a is None for a in afters):
        return False
    for m, p in enumerate(pack.members):
        runs = [RunResult(r.error, r.error_type, a[m], r.seconds, r.detail, r.alt) for r, a in zip(ran.runs, afters)]
        outcome = Outcome(runs, own[m].torch_ref, own[m].torch_ref_error)
        if quick_verdict(p, outcome) is None and judge(p.case, outcome, prepared=p).findings:
            return False
    return True


def _pack_runs(batch, packs, result):
    """Each pack, its launch's outcome and each member's own torch oracle (as `Outcome`s)."""
    for pack, li in zip(packs.packs, packs.launch_of):
        ran = outcome_of(batch, result, li, copy=True)
        own = [Outcome([], *torch_ref_alone(p.case)) for p in pack.members]
        yield pack, ran, own


def fast(pack, runs, ran) -> bool:
    return quick_pack(pack, runs, ran.torch_ref, ran.torch_ref_error)


@pytest.mark.parametrize("op", sampled("pack torch oracle", PACKED, share=2))
def test_the_packs_one_torch_oracle_answers_each_members_own_at_its_rows(op, device):
    """The worker runs the torch oracle once per pack, over the merged inputs (members' launches
    carry no bytes and compute nothing); at each member's rows it must say what the member's
    own torch oracle says, cell for cell."""
    executor = InProcessExecutor("builtin", device)
    batch, packs, result = packed_run(executor, stream(op, 12))
    compared = 0
    for i, (k, _) in packs.member_of.items():
        assert not batch[i].run and not batch[i].torch_ref and batch[i].size == 0
    for pack, ran, own in _pack_runs(batch, packs, result):
        assert ran.torch_ref_error is None and ran.torch_ref is not None
        for m, alone in enumerate(own):
            mine = pack.member_refs(ran.torch_ref, m)
            assert set(mine) == set(alone.torch_ref)
            for name, v in alone.torch_ref.items():
                assert np.array_equal(mine[name], v), (name, m)
                compared += 1
    assert compared


@pytest.mark.parametrize("op", sampled("pack fast path clean", PACKED, share=3))
def test_a_clean_pack_passes_at_once_and_only_where_each_member_passes(op, device):
    executor = InProcessExecutor("builtin", device)
    batch, packs, result = packed_run(executor, stream(op, 12))
    passed = 0
    for pack, ran, own in _pack_runs(batch, packs, result):
        ok = fast(pack, ran.runs, ran)
        assert not ok or members_pass(pack, ran, own)
        passed += ok
    assert passed >= 1, "no clean pack of the builtin kernel took the fast path"


def _damaged(ran, run: int, at: int, xor: int):
    runs = [RunResult(r.error, r.error_type, r.after.copy(), r.seconds, r.detail, r.alt) for r in ran.runs]
    runs[run].after[at] ^= xor
    return runs


@pytest.mark.parametrize("op", sampled("pack fast path damaged", PACKED, share=3))
def test_one_damaged_byte_anywhere_in_a_clean_pack_is_refused_unless_it_is_free(op, device):
    """Every byte the pack's fast path reads that is not a may-write cell's: flipped in the first
    run or the re-run, the pack is refused (the member-by-member path judges it), and where the
    fast path still passes (a free byte), the members pass too."""
    executor = InProcessExecutor("builtin", device)
    batch, packs, result = packed_run(executor, stream(op, 8))
    rng = random.Random(op)
    tried = 0
    for pack, ran, own in _pack_runs(batch, packs, result):
        if not fast(pack, ran.runs, ran):
            continue
        want, free = pack.clean_after()
        outputs = pack.output_mask()
        size = want.size
        # every output byte, then bytes anywhere (guard bands, gaps, inputs), in both runs
        spots = sorted(set(np.flatnonzero(outputs).tolist()[:: max(1, int(outputs.sum()) // 64)]
                           + [rng.randrange(size) for _ in range(64)]))
        for run in range(len(ran.runs)):
            for at in spots:
                runs = _damaged(ran, run, at, 1 << rng.randrange(8))
                if fast(pack, runs, ran):
                    assert free is not None and free[at], (run, at)
                    assert members_pass(pack, Outcome(runs), own)
                tried += 1
    assert tried >= 64


@pytest.mark.parametrize("op", sampled("pack fast path torch", PACKED[:2], share=2))
def test_a_torch_oracle_that_disagrees_is_refused(op, device):
    executor = InProcessExecutor("builtin", device)
    batch, packs, result = packed_run(executor, stream(op, 8))
    for pack, ran, own in _pack_runs(batch, packs, result):
        if not fast(pack, ran.runs, ran):
            continue
        last = len(pack.members) - 1
        name = next(n for n in ran.torch_ref if pack.member_refs(ran.torch_ref, last)[n].size)
        bad = {n: np.array(v) for n, v in ran.torch_ref.items()}
        bad[name][pack.rows_of(name, last)] += 1  # the last member's rows only
        assert not quick_pack(pack, ran.runs, bad, None)
        assert not quick_pack(pack, ran.runs, None, "RuntimeError: the torch oracle failed")
        return
    pytest.fail("no clean pack with a torch oracle")


def test_the_checker_takes_the_fast_path_for_a_clean_pack_and_judges_the_rest_alone(device):
    """Checker.verdicts: a clean pack's members get the in-contract verdict with no arena read;
    a pack with a changed byte goes member by member (and its case's finding is found)."""
    op = "flashinfer_kv_indices"
    executor = InProcessExecutor("builtin", device)
    prepared = stream(op, 8)
    batch, packs, result = packed_run(executor, prepared)
    clean = packs.clean(batch, result)
    assert clean and set(clean) <= set(packs.member_of)
    assert all(r.after is None for o in clean.values() for r in o.runs)
    verdicts = {p.index: v for p, _, v in Checker(executor, op).verdicts(prepared, batch, result, packs)}
    assert not any(v.findings for v in verdicts.values())
    # an output byte of the first pack changed: its members are judged one by one, and one has a mismatch
    pack, li = packs.packs[0], packs.launch_of[0]
    outputs = pack.output_mask()
    at = int(np.flatnonzero(outputs)[0])
    b = batch[li]
    result.afters[0][b.base + at] ^= 0x40
    clean = packs.clean(batch, result)
    assert not any(packs.member_of[i][0] == 0 for i in clean)
    verdicts = {p.index: v for p, _, v in Checker(executor, op).verdicts(prepared, batch, result, packs)}
    assert any(f.kind == "mismatch" for v in verdicts.values() for f in v.findings)
