"""Start-up: `kvfuzz fuzz` starts its worker before it imports torch and chooses the device
itself, so the two processes' imports overlap; the standby worker starts after the first
answer, so that it does not slow the first batch; reports say how long the start took."""

from __future__ import annotations

import json
from pathlib import Path
import subprocess
import sys

import pytest

from kvfuzz.case import Case
from kvfuzz.judge import judge
import kvfuzz.spawn
from kvfuzz.worker import WorkerExecutor, early_worker
from cases import splits


def test_what_fuzz_loads_before_its_worker_starts_imports_neither_torch_nor_triton():
    code = ("import sys, kvfuzz.cli, kvfuzz.campaign; "
            "print(sorted(m for m in ('torch', 'triton') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stdout + out.stderr


@pytest.mark.parametrize("asked", ["auto", "session"])
def test_an_early_worker_is_the_one_the_executor_runs_cases_on(asked, device):
    # "auto": the worker resolves the device itself, as this process did
    early = early_worker("builtin", device if asked == "session" else "auto")
    ex = WorkerExecutor("builtin", device, _early=early)
    try:
        assert ex.proc.pid == early.proc.pid
        case: Case = splits([5, 17, 0, 9])
        verdict = judge(case, ex.run(case))
        assert verdict.status == "in_contract" and not verdict.findings
        assert ex.proc.pid == early.proc.pid  # no restart
    finally:
        ex.close()
    assert early.proc.poll() is not None


@pytest.mark.slow
def test_the_standby_starts_after_the_first_answer_not_beside_the_first_batch(device):
    ex = WorkerExecutor("builtin", device, standby=True)
    try:
        assert ex.standby is None
        ex.run(splits([5, 17, 0, 9]))
        assert ex.standby is not None and ex.standby.poll() is None
        first_standby = ex.standby.pid
        fresh = ex.fresh()  # takes the standby and starts the next one at once
        try:
            assert fresh.proc.pid == first_standby and ex.standby is not None and ex.standby.pid != first_standby
        finally:
            fresh.close()
    finally:
        ex.close()


def test_a_refused_device_leaves_no_early_worker_behind(monkeypatch, tmp_path, device):
    if device == "cuda":
        pytest.skip("--device cuda is refused only where no GPU is visible")
    import kvfuzz.campaign as campaign
    from kvfuzz.errors import DeviceModeError

    started = []

    def spy(*args):
        started.append(early_worker(*args))
        return started[-1]

    monkeypatch.setattr(campaign, "early_worker", spy)
    with pytest.raises(DeviceModeError):
        campaign.run_campaign(campaign.CampaignConfig(ops=["num_kv_splits"], device="cuda", budget_s=1,
                                                      corpus=tmp_path / "c"))
    assert started and started[0].proc.poll() is not None  # killed and reaped


@pytest.mark.slow
def test_a_fuzz_report_says_how_long_the_start_took(tmp_path, device):
    report = tmp_path / "r.json"
    p = subprocess.run([sys.executable, "-m", "kvfuzz.cli", "fuzz", "--device", device, "--op", "num_kv_splits",
                        "--budget", "1", "--corpus", str(tmp_path / "c"), "--report", str(report)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    r = json.loads(report.read_text())
    # from kvfuzz's import: the imports, the device's choice and the worker's start, then the
    # first batch; the campaign's own figure starts later
    assert 0 < r["startup_s"] <= r["since_import_s"] < r["seconds"] + 30


@pytest.mark.gpu
def test_a_campaign_without_triton_cache_dir_compiles_into_its_own_and_reuses_it(tmp_path, device, monkeypatch):
    """Warm start with the early worker: it learns the GPU before its parent does, and puts
    what it compiles under kvfuzz's cache (per target and device); the same campaign again
    builds nothing new there (the same cases: `--max-cases` ends it, not the clock)."""
    if device != "cuda":
        pytest.skip("the interpreter compiles nothing")
    import os

    from kvfuzz.device import triton_cache_dir

    monkeypatch.setenv("KVFUZZ_CACHE", str(tmp_path / "kvcache"))
    where = triton_cache_dir("builtin", "cuda")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_CACHE_DIR"}
    counts = []
    for run in (1, 2):
        p = subprocess.run([sys.executable, "-m", "kvfuzz.cli", "fuzz", "--device", "cuda", "--op", "num_kv_splits",
                            "--budget", "60", "--max-cases", "384", "--seed", "4", "--corpus", str(tmp_path / "c")],
                           capture_output=True, text=True, timeout=300, env=env)
        assert p.returncode == 0, p.stderr[-2000:]
        counts.append(sum(1 for _ in where.rglob("*.cubin")))
    assert counts[0] > 0 and counts[1] == counts[0], counts


def test_workers_import_this_kvfuzz_even_from_inside_another_checkout(tmp_path, monkeypatch, device):
    """Run from a directory that holds another kvfuzz package (an older revision, a user's
    clone), `python -m kvfuzz.worker` would import that one; kvfuzz's own processes import
    the kvfuzz that started them, and a target module in the working directory still loads."""
    import kvfuzz

    other = tmp_path / "kvfuzz"
    other.mkdir()
    (other / "__init__.py").write_text("raise ImportError('the other checkout was imported')\n")
    (other / "worker.py").write_text("raise SystemExit('the other checkout was imported')\n")
    (tmp_path / "my_kernels.py").write_text("from kvfuzz.kernels import get_num_kv_splits as get_num_kv_splits_triton\n")
    monkeypatch.chdir(tmp_path)
    ex = WorkerExecutor("my_kernels", device)  # a module found in the working directory
    try:
        case = splits([5, 17, 0, 9])
        assert not judge(case, ex.run(case)).findings
    finally:
        ex.close()
    assert kvfuzz.__file__.startswith(str(Path(kvfuzz.spawn.ROOT)))
