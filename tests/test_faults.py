"""Fault injection: kernels that fault, hang or kill their process, findings that do not
reproduce, and failures that are not the target's. Each must end as the right kind of
report, with its case saved or deliberately not, and the campaign must finish.

The targets are small files written per test. Triton kernels where the fault is the
kernel's (a wild store, an endless loop); plain torch where only the host side matters.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kvfuzz.campaign import CampaignConfig, run_campaign
from kvfuzz.corpus import iter_cases, read_case_dir
from kvfuzz.engines.batch_engine import case_stream, run_prepared
from kvfuzz.execute import prepare
from kvfuzz.judge import judge
from kvfuzz.worker import WorkerExecutor

import cases

REPO = Path(__file__).resolve().parents[1]

# num_kv_splits computed right (kvfuzz's own launcher), plus a planted fault in a Triton kernel
# of its own, by the number of rows: a store far outside any allocation for 3 rows (a
# segfault under the interpreter, an illegal address on a GPU), an endless loop for 255 rows,
# a write one element past the output for 2 rows (inside its guard band: memory the
# allocator owns).
FAULTING = '''
import triton
import triton.language as tl

from kvfuzz.kernels import get_num_kv_splits


@triton.jit
def _planted(out_ptr, n, num_seq):
    if num_seq == 3:
        tl.store(out_ptr + (1 << 40), 1)
    if num_seq == 255:
        i = 0
        while num_seq == 255:  # a store in the loop: the compiler cannot drop it
            tl.store(out_ptr, i)
            i += 1
    if num_seq == 2:
        tl.store(out_ptr + n, 1)


def get_num_kv_splits_triton(out, seq_lens, num_seq, num_group, num_head, num_kv_head, max_kv_splits,
                             device_core_count):
    get_num_kv_splits(out, seq_lens, num_seq, num_group, num_head, num_kv_head, max_kv_splits,
                      device_core_count)
    _planted[(1,)](out, num_seq * num_group, num_seq)
'''
WILD, HANG, PAST, CLEAN = [5, 5, 5], [5] * 255, [5, 5], [5, 5, 5, 5]


def _target(tmp_path: Path, name: str, text: str) -> str:
    f = tmp_path / f"{name}.py"
    f.write_text(text)
    return str(f)


def splits_case(lens=CLEAN):
    return cases.splits(list(lens))


def test_a_wild_store_is_a_crash_and_the_worker_is_replaced(tmp_path, device):
    ex = WorkerExecutor(_target(tmp_path, "faulting", FAULTING), device, timeout_s=60)
    try:
        bad = judge(splits_case(WILD), ex.run(splits_case(WILD)))
        where = "cuda_fault" if device == "cuda" else "SIGSEGV"
        assert bad.signatures() == [f"num_kv_splits:splits:crash:-:{where}"]
        assert judge(splits_case(), ex.run(splits_case())).findings == []  # a new worker
    finally:
        ex.close()


@pytest.mark.thorough  # seconds of processes and campaigns: CI's thorough stage
def test_a_fault_inside_a_batch_is_pinned_on_its_case(tmp_path, device):
    """One faulting case among clean ones: the batch is lost, re-run case by case, and only
    that case is a crash."""
    ex = WorkerExecutor(_target(tmp_path, "faulting", FAULTING), device, timeout_s=60)
    try:
        prepared = [prepare(splits_case([3 + i] * 4)) for i in range(5)]
        prepared.insert(2, prepare(splits_case(WILD)))
        verdicts = [judge(p.case, o, prepared=p) for p, o in zip(prepared, run_prepared(ex, prepared))]
        assert [v.failed for v in verdicts] == [False, False, True, False, False, False]
        assert verdicts[2].findings[0].kind == "crash"
    finally:
        ex.close()


@pytest.mark.slow  # CI's slow stage runs it (.ci/run)
def test_a_hang_is_a_timeout_crash(tmp_path, device):
    ex = WorkerExecutor(_target(tmp_path, "faulting", FAULTING), device, timeout_s=5)
    try:
        v = judge(splits_case(HANG), ex.run(splits_case(HANG)))
        assert v.signatures() == ["num_kv_splits:splits:crash:-:timeout"]
        assert judge(splits_case(), ex.run(splits_case())).findings == []
    finally:
        ex.close()


def test_a_write_just_past_an_output_is_caught_by_its_guard_band(tmp_path, device):
    ex = WorkerExecutor(_target(tmp_path, "faulting", FAULTING), device)
    try:
        v = judge(splits_case(PAST), ex.run(splits_case(PAST)))
        assert v.signatures() == ["num_kv_splits:splits:out_of_bounds_write:num_kv_splits:after"]
    finally:
        ex.close()


def _seed_whose_first_stint_has(device: str, rows: set[int], repeats_skip=(3, 255)) -> int:
    """A seed whose first 32 cases hold every one of `rows` before any fault or hang repeats: a
    known device fault or hang seen again skips the rest of its stint (batch_engine), so rows
    drawn after the repeat would never run (on the H200 the 2- and 255-row cases did not)."""
    for seed in range(2000):
        seen: set[int] = set()
        for _, c in case_stream("num_kv_splits", seed, 32, device, True):
            n = c.scalars["num_seq"]
            if n in repeats_skip and n in seen:
                break
            seen.add(n)
        if rows <= seen:
            return seed
    raise AssertionError("no seed")


@pytest.mark.slow
def test_a_campaign_against_a_faulting_target_saves_each_crash_and_finishes(tmp_path, device):
    spec = _target(tmp_path, "faulting", FAULTING)
    seed = _seed_whose_first_stint_has(device, {2, 3, 255})
    result = run_campaign(CampaignConfig(ops=["num_kv_splits"], target=spec, device=device, budget_s=5, seed=seed,
                                         corpus=tmp_path / "corpus", minimize_budget_s=5, case_timeout_s=3, confirm_tries=2,
                                         in_contract_only=True, max_cases=32, batch=4))
    # (batches of 4: a batch holding the hang waits out its deadline, 3 s plus 1 s a case)
    sigs = {s for x in result.saved for s in x.signatures}  # a finding lists the others its case shows
    where = "cuda_fault" if device == "cuda" else "SIGSEGV"
    assert f"num_kv_splits:splits:crash:-:{where}" in sigs
    assert "num_kv_splits:splits:crash:-:timeout" in sigs
    # one element past the rows: after the tensor, or in a strided layout's gap
    assert sigs & {f"num_kv_splits:splits:out_of_bounds_write:num_kv_splits:{w}" for w in ("after", "gap")}, sigs
    saved = [s for _, s in iter_cases(tmp_path / "corpus")]
    assert sorted(x for s in saved for x in s.signatures) == sorted(sigs)  # one case per finding, no duplicate
    for s in saved:
        again = judge(s.case, WorkerExecutor(spec, device, timeout_s=3).run(s.case))
        assert s.finding.signature in again.signatures()


# A target whose defects depend on the process: the first process that imports it (the
# campaign's warm worker) writes 70 for every case; later processes write 70 only when
# num_seq >= 3. So a finding first seen with 3 or more rows confirms in a fresh process,
# while the 1-row case the minimizer reaches in the warm worker does not.
PROCESS_DEPENDENT = '''
import os
MARK = {mark!r}
try:
    os.close(os.open(MARK, os.O_CREAT | os.O_EXCL))
    FIRST = True
except FileExistsError:
    FIRST = False


from kvfuzz.kernels import get_num_kv_splits


def get_num_kv_splits_triton(out, seq_lens, num_seq, *args):
    get_num_kv_splits(out, seq_lens, num_seq, *args)
    if FIRST or ({threshold} and num_seq >= {threshold}):
        out.fill_(70)
'''


@pytest.mark.slow  # campaign-sized: `pytest -m slow`
def test_a_minimized_case_that_does_not_reproduce_fresh_is_not_saved(tmp_path, device):
    spec = _target(tmp_path, "by_process", PROCESS_DEPENDENT.format(mark=str(tmp_path / "mark"), threshold=3))
    # a seed whose first case has 3 rows or more: the finding is first seen there
    seed = next(s for s in range(100)
                if next(case_stream("num_kv_splits", s, 1, device, True))[1].scalars["num_seq"] >= 3)
    result = run_campaign(CampaignConfig(ops=["num_kv_splits"], target=spec, device=device, budget_s=6,
                                         seed=seed, corpus=tmp_path / "corpus", minimize_budget_s=10,
                                         in_contract_only=True))
    [x] = result.saved
    assert x.confirmation.confirmed and x.minimized_confirmed is False
    saved = read_case_dir(x.path)
    assert saved.case.scalars["num_seq"] >= 3 and not saved.minimized


@pytest.mark.slow  # campaign-sized: `pytest -m slow`
def test_a_finding_that_does_not_reproduce_fresh_is_flaky_and_not_saved(tmp_path, device):
    spec = _target(tmp_path, "first_only", PROCESS_DEPENDENT.format(mark=str(tmp_path / "mark"), threshold=0))
    env = dict(os.environ, KVFUZZ_DEVICE=device)
    out = subprocess.run([sys.executable, "-m", "kvfuzz.cli", "fuzz", "--op", "num_kv_splits", "--target", spec,
                          "--device", device, "--budget", "5", "--in-contract-only", "--corpus",
                          str(tmp_path / "corpus"), "--report", str(tmp_path / "r.json")],
                         capture_output=True, text=True, timeout=600, env=env, cwd=REPO)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "FLAKY num_kv_splits:splits:mismatch" in out.stdout and "0 of 3 fresh runs reproduced it" in out.stdout
    import json

    report = json.loads((tmp_path / "r.json").read_text())
    assert report["findings"] == [] and report["flaky"][0]["reproduced"] == 0 and report["flaky"][0]["tries"] == 3
    assert not (tmp_path / "corpus").exists() or list(iter_cases(tmp_path / "corpus")) == []


# Triton's interpreter failing inside its own machinery (not in the target's code) is the
# environment's failure: never a finding. inline_asm has no interpreter implementation.
INTERPRETER_CANNOT = '''
import triton
import triton.language as tl


@triton.jit
def get_num_kv_splits_triton(num_kv_splits_ptr, seq_lens_ptr, num_seq, num_group, num_head,
                             num_kv_head, max_kv_splits, device_core_count, MAX_NUM_SEQ: tl.constexpr):
    offs = tl.arange(0, MAX_NUM_SEQ)
    x = tl.inline_asm_elementwise("mov.u32 $0, $1;", "=r,r", [offs], dtype=tl.int32, is_pure=True, pack=1)
    tl.store(num_kv_splits_ptr + offs, x, mask=offs < num_seq * num_group)
'''


@pytest.mark.thorough  # seconds of processes and campaigns: CI's thorough stage
@pytest.mark.skipif(os.environ.get("KVFUZZ_DEVICE") == "cuda", reason="an interpreter failure")
def test_an_interpreter_failure_is_an_environment_problem_not_a_finding(tmp_path, device):
    if device != "cpu":
        pytest.skip("an interpreter failure")
    spec = _target(tmp_path, "no_asm", INTERPRETER_CANNOT)
    out = subprocess.run([sys.executable, "-m", "kvfuzz.cli", "fuzz", "--op", "num_kv_splits", "--target", spec,
                          "--device", "cpu", "--budget", "3", "--in-contract-only", "--corpus",
                          str(tmp_path / "corpus"), "--report", str(tmp_path / "r.json")],
                         capture_output=True, text=True, timeout=600, cwd=REPO)
    assert out.returncode == 2, out.stdout + out.stderr
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("kvfuzz: error: ") and "not the target's" in last
    assert "FINDING" not in out.stdout and not (tmp_path / "corpus").exists()
    import json

    report = json.loads((tmp_path / "r.json").read_text())
    assert report["findings"] == [] and report["not_target"] > 0


# A worker killed outright (the OOM killer's SIGKILL) in the middle of a case.
KILLED = '''
import os
import signal

from kvfuzz.kernels import get_num_kv_splits


def get_num_kv_splits_triton(out, seq_lens, num_seq, *args):
    if num_seq == 3:
        os.kill(os.getpid(), signal.SIGKILL)
    get_num_kv_splits(out, seq_lens, num_seq, *args)
'''


@pytest.mark.thorough  # seconds of processes and campaigns: CI's thorough stage
def test_a_worker_killed_mid_case_is_a_crash_alone_and_in_a_batch(tmp_path, device):
    ex = WorkerExecutor(_target(tmp_path, "killed", KILLED), device)
    try:
        assert judge(splits_case(WILD), ex.run(splits_case(WILD))).signatures() == [
            "num_kv_splits:splits:crash:-:SIGKILL"]
        prepared = [prepare(splits_case([4 + i] * 4)) for i in range(3)] + [prepare(splits_case(WILD))]
        verdicts = [judge(p.case, o, prepared=p) for p, o in zip(prepared, run_prepared(ex, prepared))]
        assert [v.signatures() for v in verdicts] == [[], [], [], ["num_kv_splits:splits:crash:-:SIGKILL"]]
    finally:
        ex.close()
