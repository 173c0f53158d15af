"""Crash isolation: a target that kills or hangs its process costs one case, not the run."""

from __future__ import annotations

from kvfuzz.judge import judge
from kvfuzz.worker import WorkerExecutor

import cases

SEGV = """
import os, signal
def get_num_kv_splits_triton(out, seq_lens, num_seq, *args):
    if num_seq == 3:
        os.kill(os.getpid(), signal.SIGSEGV)
    out.fill_(1)
"""
HANG = """
import time
def get_num_kv_splits_triton(out, *args):
    time.sleep(60)
"""


def test_segfault_is_a_crash_finding_and_the_next_case_runs(tmp_path, device):
    f = tmp_path / "segv.py"
    f.write_text(SEGV)
    ex = WorkerExecutor(str(f), device)
    try:
        crash = judge(cases.splits([5, 5, 5]), ex.run(cases.splits([5, 5, 5])))
        assert crash.signatures() == ["num_kv_splits:splits:crash:-:SIGSEGV"]
        later = judge(cases.splits([1, 1]), ex.run(cases.splits([1, 1])))  # a fresh worker
        assert later.findings == [] and ex.restarts == 1
    finally:
        ex.close()


def test_hang_is_a_timeout_crash(tmp_path, device):
    f = tmp_path / "hang.py"
    f.write_text(HANG)
    ex = WorkerExecutor(str(f), device, timeout_s=3)
    try:
        v = judge(cases.splits([4]), ex.run(cases.splits([4])))
        assert v.signatures() == ["num_kv_splits:splits:crash:-:timeout"]
    finally:
        ex.close()


SLOW = """
import time
from kvfuzz.kernels import get_num_kv_splits


def get_num_kv_splits_triton(out, *args):
    time.sleep(1.5)
    get_num_kv_splits(out, *args)
"""


def test_the_timeout_is_each_runs_so_a_case_run_twice_is_not_a_hang(tmp_path, device):
    # a case's determinism re-run doubles its time: an interpreted production case of 35 s run
    # twice is no hang under the 60 s default
    f = tmp_path / "slow.py"
    f.write_text(SLOW)
    ex = WorkerExecutor(str(f), device, timeout_s=2.5)
    try:
        out = ex.run(cases.splits([4]), repeats=2)
        assert len(out.runs) == 2 and judge(cases.splits([4]), out).findings == []
    finally:
        ex.close()


THREADS = """
import torch
def get_num_kv_splits_triton(out, *args):
    raise RuntimeError(f"torch threads: {torch.get_num_threads()}")
"""


def test_the_worker_runs_torch_on_one_thread(tmp_path, device):
    # several workers share the host's cores (--jobs, the bench's shards): a thread per core
    # in each made them contend (a batch's arena copy 20x slower with two on two cores)
    f = tmp_path / "threads.py"
    f.write_text(THREADS)
    ex = WorkerExecutor(str(f), device)
    try:
        assert ex.run(cases.splits([4])).runs[0].error.endswith("torch threads: 1")
    finally:
        ex.close()
