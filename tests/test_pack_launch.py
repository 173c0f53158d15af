"""Packed launches (kvfuzz/packing.py): k cases in one launch, each judged as if run alone.

* per packable op, over a seeded stream: each case's verdict from a packed launch is its verdict
  run alone, on the builtin kernel and on a seeded one-line defect (found in the cases that show
  it alone, in no neighbour);
* a stray write past a case's block is that case's out_of_bounds_write, never its neighbour's;
* a byte that maps to no case loses the pack (its cases are judged alone);
* the same seed gives the same cases and the same findings with and without packing;
* ops whose rows interact say why they do not pack; decode's running sum packs (read back by value).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest

from kvfuzz import packing
from kvfuzz.case import TensorSpec
from kvfuzz.check import Checker
from kvfuzz.engines.batch_engine import case_stream, fuzz_op
from kvfuzz.execute import prepare
from kvfuzz.ops import records
from kvfuzz.ops.record import NoPacking, PackSpec
from kvfuzz.worker import InProcessExecutor

from kv_index_ops import KERNELS, mutant_copy

# the packable ops, and "op:tensor" for an op's cases with that optional tensor (their own pack
# rule: a token mapping's ids move with it), drawn from the variant that takes it
MAPPED = {"flashinfer_kv_indices:token_mapping": "token_mapping",
          "decode_metadata:full_to_swa_index_mapping": None,  # page_table read back less the pages moved
          "trtllm_mha_kv_indices:full_to_swa": None}
PACKED = sorted(op for op, r in records().items() if isinstance(r.packing, PackSpec)) + sorted(MAPPED)


def op_of(name: str) -> str:
    return name.split(":")[0]


def stream(name: str, n: int, seed: int = 2, stint: int = 6) -> list:
    """The first `n` cases that can pack of the op's seeded in-contract stream, a class every
    `stint` cases (a class whose table repeats one row by stride 0 does not pack); for an
    "op:tensor" name, its cases with that tensor."""
    op, _, tensor = name.partition(":")
    spec, out = packing.spec_of(op), []
    cases = case_stream(op, seed, 40 * n * (4 if tensor else 1), "cpu", in_contract_only=True, stint=stint,
                        variant=MAPPED.get(name))
    for i, (_, c) in enumerate(cases):
        if tensor and tensor not in c.tensors:
            continue
        p = prepare(c, i)
        if packing.refusal(spec, p) is None:
            out.append(p)
            if len(out) == n:
                return out
    raise AssertionError(f"{op}: fewer than {n} cases that pack")


def packed_verdicts(executor, op: str, prepared: list, k: int = 3):
    """(packs, {case index: verdict}) of the cases run as packed launches (every third repeated)."""
    repeat = [i % 3 == 0 for i in range(len(prepared))]
    image, batch, packs = packing.launches(prepared, repeat, [False] * len(prepared), k, prove_on_device=False)
    assert packs is not None and packs.packed() >= len(prepared) // 2, "too few cases packed to test"
    result = executor.run_batch(image, batch)
    assert result.lost is None
    outcomes = packs.outcomes(batch, result)
    checker = Checker(executor, op)
    return packs, repeat, {i: checker.verdict(prepared[i], o) for i, o in outcomes.items()}


def alone(executor, op: str, case, repeats: int):
    return Checker(executor, op).check(prepare(case), repeats=repeats)


def test_the_ops_that_pack_and_those_that_say_why_not():
    assert {"flashinfer_kv_indices", "chunked_prefix_kv_indices", "flashmla_kv_indices", "trtllm_mha_kv_indices",
            "q8kv8_topk_length", "flashinfer_kv_indices:token_mapping", "decode_metadata"} <= set(PACKED)
    for op in ("num_kv_splits",):
        assert isinstance(records()[op].packing, NoPacking) and records()[op].packing.why


@pytest.mark.parametrize("op", PACKED)
def test_each_packed_case_is_judged_as_it_is_alone(op, device):
    executor = InProcessExecutor("builtin", device)
    prepared = stream(op, 12)
    packs, repeat, verdicts = packed_verdicts(executor, op_of(op), prepared)
    for i, v in verdicts.items():
        again = alone(executor, op_of(op), prepared[i].case, 2 if repeat[i] else 1)  # a pack's cases share their flag
        assert (v.status, v.signatures()) == (again.status, again.signatures()), prepared[i].case.describe()
        assert v.status == "in_contract" and not v.findings  # the builtin kernel is clean


def test_a_seeded_defect_is_found_in_its_own_case_packed_as_alone(tmp_path, device):
    """Cell 2 of every request left unwritten: the cases with a request of 3 or more tokens show
    a mismatch, packed and alone alike; their neighbours stay clean."""
    op = "flashinfer_kv_indices"
    path = mutant_copy(KERNELS / f"{op}.py", "ids.to(out.dtype.element_ty), mask=mask)",
                       "ids.to(out.dtype.element_ty), mask=mask & (j != 2))", tmp_path / "mutant.py")
    executor = InProcessExecutor(str(path), device)
    prepared = stream(op, 12)
    packs, repeat, verdicts = packed_verdicts(executor, op, prepared)
    shown = 0
    for i, v in verdicts.items():
        lens = np.asarray(prepared[i].case.values["paged_kernel_lens"])
        again = alone(executor, op, prepared[i].case, 1)
        got = {s for s in v.signatures() if ":mismatch:" in s}
        assert got == {s for s in again.signatures() if ":mismatch:" in s}
        assert bool(got) == bool((lens >= 3).any()), (lens, got)
        shown += bool(got)
    assert 0 < shown < len(verdicts)  # some cases show it, some do not: nothing leaks to a neighbour


# decode's running sum, wrong where a row's length is odd: in that entry alone, or carried
# into every later entry (the sum itself off)
SUM_DEFECTS = {
    "one entry": ("(running + tl.cumsum(v64, axis=0)).to(tl.int32), mask=inb)",
                  "(running + tl.cumsum(v64, axis=0) + (v64 % 2 == 1)).to(tl.int32), mask=inb)"),
    "carried": ("(running + tl.cumsum(v64, axis=0)).to(tl.int32), mask=inb)",
                "(running + tl.cumsum(v64 + (v64 % 2 == 1), axis=0)).to(tl.int32), mask=inb)"),
}


@pytest.mark.parametrize("defect", sorted(SUM_DEFECTS))
def test_a_wrong_running_sum_shows_in_its_own_case_packed_as_alone(defect, tmp_path, device):
    """decode's cu_seqlens_k, packed: each case's entries read back less the sum before it, so a
    case whose own rows make the sum wrong shows it, packed as alone, and the cases after it
    in the pack (whose packed entries carry the wrong total, for the carried defect) do not."""
    op = "decode_metadata"
    old, new = SUM_DEFECTS[defect]
    path = mutant_copy(KERNELS / f"{op}.py", old, new, tmp_path / "mutant.py")
    executor = InProcessExecutor(str(path), device)
    prepared = stream(op, 16, seed=15, stint=6)  # packs with an odd-length case before an even one
    packs, repeat, verdicts = packed_verdicts(executor, op, prepared)
    shown = after_shown = 0
    for pack in packs.packs:
        before_bad = False
        for m, p in enumerate(pack.members):
            i = next(i for i, q in enumerate(prepared) if q is p)
            lens = np.asarray(p.case.values["seq_lens"]) + p.case.scalars["seq_len_delta"]
            again = alone(executor, op, p.case, 2 if repeat[i] else 1)
            got = {s for s in verdicts[i].signatures() if "cu_seqlens_k" in s}
            assert got == {s for s in again.signatures() if "cu_seqlens_k" in s}, (defect, m, lens)
            assert bool(got) == bool((lens % 2 == 1).any()), (defect, m, lens, got)
            shown += bool(got)
            after_shown += before_bad and not got
            before_bad = before_bad or bool(got)
    assert 0 < shown < len(verdicts)
    assert after_shown, "no clean case packed after a wrong one: the test shows nothing about carrying"


@pytest.mark.parametrize("defect", ["column 2 unwritten", "column 2 off by one"])
def test_a_page_table_defect_shows_in_its_own_swa_case_packed_as_alone(defect, tmp_path, device):
    """decode's SWA cases pack with their token ids moved to their mapping's block (whole pages):
    page_table's cells are read back less the pages moved, so a defect shows in the cases that
    show it alone, as it does alone, whether it leaves a cell unwritten or writes it wrong."""
    op = "decode_metadata"
    old = 'tl.store(pt_ptr, (page * page_mult).to(tl.int32), mask=m, cache_modifier=".cg")'
    new = {"column 2 unwritten": 'tl.store(pt_ptr, (page * page_mult).to(tl.int32), mask=m & (cols != 2), '
                                 'cache_modifier=".cg")',
           "column 2 off by one": 'tl.store(pt_ptr, (page * page_mult + (cols == 2)).to(tl.int32), mask=m, '
                                  'cache_modifier=".cg")'}[defect]
    path = mutant_copy(KERNELS / f"{op}.py", old, new, tmp_path / "mutant.py")
    executor = InProcessExecutor(str(path), device)
    prepared = stream(f"{op}:full_to_swa_index_mapping", 12)
    packs, repeat, verdicts = packed_verdicts(executor, op, prepared)
    moved = [pk for pk in packs.packs if any(pk.shifts()["req_to_token"])]
    assert moved, "no pack moved its token ids"
    shown = 0
    for i, v in verdicts.items():
        again = alone(executor, op, prepared[i].case, 2 if repeat[i] else 1)
        got = {s for s in v.signatures() if "page_table" in s}
        assert got == {s for s in again.signatures() if "page_table" in s}, (defect, i)
        shown += bool(got)
    assert 0 < shown


def test_a_packed_running_sum_past_int32_drops_the_pack():
    """Each case's sum fits int32, the packed one would not: the cases launch alone."""
    op = "decode_metadata"
    prepared = stream(op, 4)
    big = []
    for p in prepared[:2]:
        lens = np.full_like(p.case.values["seq_lens"], (2**31 - 1) // (2 * len(p.case.values["seq_lens"])) + 1)
        big.append(prepare(p.case.replace(values={**p.case.values, "seq_lens": lens})))
    assert all(b.status == "in_contract" for b in big), [b.reasons for b in big]
    assert packing.pack_key(packing.spec_of(op), big[0]) == packing.pack_key(packing.spec_of(op), big[1])
    _, batch, packs = packing.launches(big, [False, False], [False, False], 2, prove_on_device=False)
    assert packs is None and all(b.run for b in batch)


def mapped_cases(ps: int, k: int = 3, seed: int = 0) -> list:
    """k hand cases of flashinfer_kv_indices with a token mapping read through a table of
    `ps`-token entries: pages in the mapping (or -1), mapping entries -1 or ids, starts off a
    page, a -1 page read in each."""
    from test_flashinfer_kv_indices_modes import gather

    rng = np.random.default_rng(seed)
    out = []
    for _ in range(k):
        m = int(rng.integers(2, 6)) * ps  # the mapping: whole pages
        table = rng.integers(0, m // ps, size=(3, 4))
        if ps == 1:  # a -1 page reads as token -ps + pos % ps: in contract only where that is -1
            table[rng.random(table.shape) < 0.25] = -1
        table[2, 0] = -1  # the first request's first page, read at its last token: -1 in each case
        mapping = rng.integers(0, 1 << 20, size=m)
        mapping[rng.random(m) < 0.2] = -1
        lens = [1 + int(rng.integers(0, 2 * ps + 1)), int(rng.integers(1, 3 * ps + 1))]
        starts = [ps - 1, int(rng.integers(0, ps))]
        out.append(prepare(gather(table, [2, 0], lens, starts=starts, ps=ps, mapping=mapping, out="int64", blocks=1)))
    return out


@pytest.mark.parametrize("ps", [1, 3, 4])
def test_a_token_mapping_packs_with_its_ids_moved_by_whole_entries_and_minus_one_kept(ps, device):
    """With a token mapping the kernel writes the mapping's values: each case's mapping gets its
    own block, starting at a whole entry, the table's entries move by its first row / ps and -1
    stays -1 (page -1 reads no mapping). Each packed case is judged as alone: the builtin clean,
    and a kernel that writes 0 for a -1 token found in the cases that have one."""
    op = "flashinfer_kv_indices"
    prepared = mapped_cases(ps)
    assert all(p.status == "in_contract" for p in prepared)
    image, batch, packs = packing.launches(prepared, [False] * 3, [False] * 3, 3, prove_on_device=False)
    assert packs is not None and packs.packed() == 3
    pack = packs.packs[0]
    first = pack.first_rows["token_mapping"]
    assert first[0] == 0 and all(f % ps == 0 and f > 0 for f in first[1:])
    table = next(v for v in pack.views if v[0] == "req_to_token")
    packed = packing._view(pack.image, TensorSpec(*table[1:2], table[4], table[5], table[6]), table[2], 0,
                           table[4][0])
    for j, p in enumerate(prepared):
        mine = np.asarray(packed[pack.rows_of("req_to_token", j)], dtype=np.int64)
        drawn = np.asarray(p.case.values["req_to_token"], dtype=np.int64)
        assert np.array_equal(mine, np.where(drawn < 0, drawn, drawn + first[j] // ps))
    mutant = mutant_copy(KERNELS / f"{op}.py", "mask=hit, other=-1)", "mask=hit, other=0)",
                         Path(tempfile.mkdtemp()) / "mutant.py")
    shown = 0
    for target, clean in (("builtin", True), (str(mutant), False)):
        executor = InProcessExecutor(target, device)
        result = executor.run_batch(image, batch)
        outcomes = packs.outcomes(batch, result)
        for i, o in outcomes.items():
            v = Checker(executor, op).verdict(prepared[i], o)
            again = alone(executor, op, prepared[i].case, 1)
            assert (v.status, v.signatures()) == (again.status, again.signatures())
            assert clean == (not v.findings)
            shown += not clean
    assert shown == 3


def _pack_of(op: str, device: str, k: int = 3):
    executor = InProcessExecutor("builtin", device)
    prepared = stream(op, k, stint=k)
    image, batch, packs = packing.launches(prepared, [False] * k, [False] * k, k, prove_on_device=False)
    assert packs is not None and len(packs) == 1
    result = executor.run_batch(image, batch)
    return executor, prepared, batch, packs, result


def _write(result, batch, packs, at: int, value: int = 0x5A) -> None:
    """Write a byte into the first pack's arena after its run, at packed byte `at`."""
    after = result.afters[0] = result.afters[0].copy()
    after[batch[packs.launch_of[0]].base + at] = value


@pytest.mark.parametrize("where", ["just past its end", "before the next case's block"])
def test_a_stray_write_past_a_case_is_that_cases_out_of_bounds_write(where, device):
    op = "flashinfer_kv_indices"
    executor, prepared, batch, packs, result = _pack_of(op, device)
    pack = packs.packs[0]
    first = prepared[0].plan.regions["kv_indices"]
    w0 = next(w for w in pack._windows if w.member == 0 and w.tensor == "kv_indices")
    w1 = next(w for w in pack._windows if w.member == 1 and w.tensor == "kv_indices")
    at = first.start + first.nbytes + w0.shift if where == "just past its end" else w1.lo - 1
    _write(result, batch, packs, at)
    outcomes = packs.outcomes(batch, result)
    checker = Checker(executor, op)
    sigs = [checker.verdict(prepared[i], outcomes[i]).signatures() for i in range(3)]
    assert [s for s in sigs[0] if ":out_of_bounds_write:kv_indices:after" in s], sigs
    assert not sigs[1] and not sigs[2], sigs


def test_a_byte_no_case_owns_loses_the_pack(device):
    """A write that lands, in its case's own arena, on another tensor's elements cannot be judged
    as that case's run: the pack's cases are run alone."""
    op = "flashinfer_kv_indices"
    executor, prepared, batch, packs, result = _pack_of(op, device)
    pack = packs.packs[0]
    at = None
    for w in pack._windows:  # a packed byte whose place in its case's arena is another tensor's element
        plan = prepared[w.member].plan
        lo, hi = max(w.lo - w.shift, 0), min(w.hi - w.shift, plan.size)
        owner = plan.owner[lo:hi]
        other = np.flatnonzero((owner != -1) & (owner != plan.names.index(w.tensor)))
        if other.size:
            at = lo + int(other[0]) + w.shift
            break
    assert at is not None
    _write(result, batch, packs, at)
    assert packs.outcomes(batch, result) is None
    verdicts = list(Checker(executor, op).verdicts(prepared, batch, result, packs))
    assert len(verdicts) == 3 and all(not v.findings for _, _, v in verdicts)


def test_rows_that_would_overlap_when_stacked_do_not_pack(device):
    """A one-row tensor's row stride is free: q8kv8's transposed layout on one row, (1, 256)
    strides (1, 1), is in contract (its column stride is 1), and stacked at that row stride two
    such cases would share 255 of their 256 elements (a packed launch showed a mismatch that
    neither case alone shows). Such a case runs alone, its verdict its own."""
    import cases

    op = "q8kv8_topk_length"
    spec = TensorSpec("int32", (1, 256), (1, 1), 0, 256)
    pair = [cases.topk([[5] * 200], K=256, spec=spec), cases.topk([[-1] * 256], K=256, spec=spec)]
    prepared = [prepare(c, i) for i, c in enumerate(pair)]
    assert [p.status for p in prepared] == ["in_contract"] * 2
    assert all("overlap when stacked" in packing.refusal(packing.spec_of(op), p) for p in prepared)
    image, batch, packs = packing.launches(prepared, [False, False], [False, False], 16, prove_on_device=False)
    assert packs is None or packs.packed() == 0
    executor = InProcessExecutor("builtin", device)
    verdicts = list(Checker(executor, op).verdicts(prepared, batch, executor.run_batch(image, batch), packs))
    assert [v.findings for _, _, v in verdicts] == [[], []]
    # the same rows at a row stride that clears a row pack as before
    wide = TensorSpec("int32", (1, 256), (256, 1), 0, 256)
    assert packing.refusal(packing.spec_of(op), prepare(cases.topk([[5] * 200], K=256, spec=wide))) is None


@pytest.mark.thorough  # seconds of processes and campaigns: CI's thorough stage
def test_the_same_seed_finds_the_same_with_and_without_packing(tmp_path, device):
    op = "flashinfer_kv_indices"
    path = mutant_copy(KERNELS / f"{op}.py", "ids.to(out.dtype.element_ty), mask=mask)",
                       "ids.to(out.dtype.element_ty), mask=mask & (j != 2))", tmp_path / "mutant.py")
    found = {}
    for pack in (1, 4):
        executor = InProcessExecutor(str(path), device)
        stats, got = fuzz_op(op, executor, seed=5, budget_s=600, max_cases=24, device=device, in_contract_only=True,
                             rerun_every=3, pack=pack, stint=6)
        assert stats.cases == 24
        found[pack] = {s: (f.found_at_case, f.first) for s, f in got.items()}  # where, on which case
        if pack > 1:
            assert stats.engine["packed_cases"] > 0 and stats.engine["launches"] < 24
            assert not stats.engine.get("pack_artefacts")
        else:
            assert stats.engine["launches"] == 24 and "packed_cases" not in stats.engine
    assert found[1] == found[4] and found[1]


@pytest.fixture()
def dry(device):
    from kvfuzz.specialize import recorder

    rec = recorder()  # the process's recorder: launches are recorded by Triton's rules, not run
    rec.dry = True
    yield rec
    rec.dry = False


@pytest.mark.parametrize("op", PACKED)
def test_a_packed_launch_compiles_nothing_its_cases_alone_do_not(op, device, dry):
    """A packed launch keeps its cases' compile class: launched after the class's cases alone,
    the packed launches of those cases add no specialisation key (no new kernel variant, so the
    bound of a campaign's compiles per 1,000 cases holds packed)."""
    from collections import defaultdict

    import torch

    from kvfuzz.materialize import to_device, views_at

    target = InProcessExecutor("builtin", device).target
    dev = torch.device(device)
    alone_keys, packed_keys = defaultdict(set), defaultdict(set)
    cases = [(k, c) for k, c in case_stream(op_of(op), 3, 8 * 24 * (4 if op in MAPPED else 1), "cpu",
                                            in_contract_only=True, stint=8, variant=MAPPED.get(op))
             if op not in MAPPED or op.partition(":")[2] in c.tensors]
    packed = 0
    for k in sorted({k for k, _ in cases}):
        prepared = [prepare(c, i) for i, (kk, c) in enumerate(cases) if kk == k]
        for p in prepared:
            before = set(dry.keys)
            target.invoke(op_of(op), to_device(p.plan, dev)[1], p.case.scalars)
            alone_keys[k] |= set(dry.keys) - before
        image, batch, packs = packing.launches(prepared, [False] * len(prepared), [False] * len(prepared), 4, prove_on_device=False)
        if packs is None:
            continue
        arena = torch.from_numpy(image.copy()).to(dev)
        for li in packs.launch_of:
            before = set(dry.keys)
            target.invoke(op_of(op), views_at(arena, batch[li].regions, batch[li].base), batch[li].case.scalars)
            packed_keys[k] |= set(dry.keys) - before
            packed += 1
    assert packed >= 4, "too few packed launches to test"
    assert {k: keys for k, keys in packed_keys.items() if keys} == {}


@pytest.mark.parametrize("where", ["write", "build"])
def test_a_pack_that_cannot_be_made_launches_its_cases_alone(monkeypatch, where):
    # a layout the pack spec did not foresee (a production class's view numpy cannot make) raised
    # out of the campaign; the pack is dropped and every case keeps its own launch
    def boom(*_a, **_k):
        raise ValueError("strides is incompatible with shape of requested array and size of buffer")

    monkeypatch.setattr(packing.Pack, "write" if where == "write" else "__init__", boom)
    prepared = stream("flashinfer_kv_indices", 3, stint=3)
    image, batch, packs = packing.launches(prepared, [False] * 3, [False] * 3, 3, prove_on_device=False)
    assert packs is None
    assert len(batch) == 3 and all(b.run for b in batch)


def test_a_campaign_packs_by_default_only_where_a_gpu_bench_measured_it_to_pay():
    from kvfuzz.engines.base import EngineOptions
    from kvfuzz.engines.batch_engine import pack_size

    executor = object()
    assert pack_size(EngineOptions(device="cuda"), executor) == 1
    assert pack_size(EngineOptions(device="cuda", pack=16), executor) == 16
    # q8kv8 packs 16 a launch on a GPU unless told otherwise; not under the interpreter
    assert pack_size(EngineOptions(device="cuda"), executor, "q8kv8_topk_length") == 16
    assert pack_size(EngineOptions(device="cuda:0"), executor, "q8kv8_topk_length") == 16
    assert pack_size(EngineOptions(device="cpu"), executor, "q8kv8_topk_length") == 1
    assert pack_size(EngineOptions(device="cuda", pack=1), executor, "q8kv8_topk_length") == 1
    assert pack_size(EngineOptions(device="cuda", pack=4), executor, "q8kv8_topk_length") == 4
    for op in ("flashinfer_kv_indices", "chunked_prefix_kv_indices", "trtllm_mha_kv_indices", "decode_metadata",
               "num_kv_splits"):
        assert pack_size(EngineOptions(device="cuda"), executor, op) == 1, op
    # never beside a cross-check
    assert pack_size(EngineOptions(device="cuda", cross_every=4), executor, "q8kv8_topk_length") == 1
