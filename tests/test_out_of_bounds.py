"""A real Triton kernel that reads past an input and writes past its output
(tests/fixtures/overrun_kernels.py), through kvfuzz's worker, replay and batches: the read is
an `out_of_bounds_read` on the input it read past, the same on every replay (each replay runs
the case from its image and from its alternate image); the write is one `out_of_bounds_write`
on the output it overran, whatever neighbours it landed in."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kvfuzz.corpus import SavedCase, environment_versions
from kvfuzz.execute import launches, outcomes, prepare
from kvfuzz.judge import judge
from kvfuzz.replay import replay
from kvfuzz.worker import WorkerExecutor

import cases

OVERRUN = str(Path(__file__).resolve().parent / "fixtures" / "overrun_kernels.py")
READ = "swa_spec_page_table:spec:out_of_bounds_read:page_table_a:after"
WRITE = "swa_spec_page_table:spec:out_of_bounds_write:page_table_dst:after"

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def reads_past_a():
    """The last request's la = 7 > page_table_a's width 5: it reads 2 cells past the table's end."""
    c = cases.spec(la=(3, 5), extra=4)
    return c.replace(values={**c.values, "seq_len_a": np.array([3, 7])})


def writes_past_dst():
    """The last row's lb = 1600 > page_table_b's width: its store runs 6 KB past
    page_table_dst's end, through its guard band into seq_len_a's."""
    c = cases.spec(la=(3, 5))
    return c.replace(values={**c.values, "seq_len_b": np.array([0, 1, 1, 1600])})


def _saved(case, device):
    return SavedCase(case=case, finding=None, target=OVERRUN, device=device, versions=environment_versions(None),
                     origin="hand")


@pytest.mark.slow  # CI's slow stage runs it (.ci/run)
def test_a_read_past_an_input_is_the_same_out_of_bounds_read_on_every_replay(device):
    saved = _saved(reads_past_a(), device)
    verdicts = [replay(saved, device=device) for _ in range(5)]
    for r in verdicts:
        assert r.verdict.status == "out_of_contract"
        assert r.verdict.signatures() == [READ]
    f = verdicts[0].verdict.findings[0]
    assert "page_table_a's guard band after it" in f.message
    assert {c["tensor"] for c in f.cells} == {"page_table_dst"}
    assert sorted(c["read_at"] for c in f.cells) == [40, 40, 44, 44]  # two rows (R = 2), two cells after its 40 bytes


@pytest.mark.thorough  # seconds of processes and campaigns: CI's thorough stage
def test_a_write_past_an_output_is_charged_to_it_not_to_the_neighbour_it_hit(device):
    r = replay(_saved(writes_past_dst(), device), device=device)
    assert r.verdict.signatures() == [WRITE]
    assert "seq_len_a's guard band before it" in r.verdict.findings[0].message


def test_in_a_batch_the_rerun_from_the_alternate_image_finds_the_read(device):
    """The batch's second pass runs the repeated cases from their alternate images (the worker
    builds them in the shared segment): the read shows there as alone, a clean case stays clean."""
    prepared = [prepare(c) for c in (cases.spec(), reads_past_a(), cases.spec(la=(1, 2, 3)))]
    ex = WorkerExecutor(OVERRUN, device)
    try:
        image, batch = launches(prepared, [True] * len(prepared), prove_on_device=False)
        result = ex.run_batch(image, batch)
    finally:
        ex.close()
    assert not result.lost
    got = [judge(p.case, o, prepared=p).signatures() for p, o in zip(prepared, outcomes(batch, result))]
    assert got == [[], [READ], []]


@pytest.mark.slow
def test_the_minimizer_shrinks_a_case_and_keeps_its_out_of_bounds_read(device):
    """The campaign's minimizer runs each candidate twice for a finding only a second run shows
    (the first run alone never shows a read)."""
    from kvfuzz.check import Checker
    from kvfuzz.minimize import minimize

    ex = WorkerExecutor(OVERRUN, device)
    try:
        still = Checker(ex, reads_past_a().op).still_fails(READ)
        assert still(reads_past_a())
        m = minimize(reads_past_a(), still, budget_s=60)
        assert m.log and m.case != reads_past_a()
        assert judge(m.case, ex.run(m.case, repeats=2)).signatures() == [READ]
    finally:
        ex.close()


TESTS_PAST = '''
from kvfuzz.kernels import get_num_kv_splits


def get_num_kv_splits_triton(out, seq_lens, num_seq, num_group, num_head, num_kv_head, max_kv_splits,
                             device_core_count):
    get_num_kv_splits(out, seq_lens, num_seq, num_group, num_head, num_kv_head, max_kv_splits, device_core_count)
    if seq_lens.numel() and out.numel():  # reads the word after seq_lens's last element, and only tests it
        past = seq_lens.reshape(-1)[-1:].as_strided((1,), (1,), seq_lens.reshape(-1)[-1:].storage_offset() + 1)
        out.reshape(-1)[:1] += int(past.item() not in (-1515870811, -6510615555426900571))
'''


@pytest.mark.thorough  # seconds of processes and campaigns: CI's thorough stage
def test_a_read_the_batch_cannot_place_is_found_once_the_case_runs_alone(tmp_path, device):
    """A kernel that only tests a guard-band word: in a batch the re-run differs in a way no
    value explains (nondeterministic, as far as two runs can tell); the case alone (its probe
    runs) names the input read past, and that is what the engine records, not a batch-only
    nondeterministic finding."""
    from kvfuzz.engines.batch_engine import fuzz_op

    spec = tmp_path / "tests_past.py"
    spec.write_text(TESTS_PAST)
    ex = WorkerExecutor(str(spec), device)
    try:
        stats, found = fuzz_op("num_kv_splits", ex, seed=1, budget_s=600, max_cases=16, device=device,
                               in_contract_only=True, rerun_every=1, batch=16)
    finally:
        ex.close()
    kinds = {s.split(":")[2] for s in found}
    assert "out_of_bounds_read" in kinds and "nondeterministic" not in kinds, sorted(found)
    assert all(s.split(":")[3] == "seq_lens" for s in found if ":out_of_bounds_read:" in s), sorted(found)
    assert stats.batch_only == []
