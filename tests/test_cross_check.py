"""`--cross-check`: a second backend runs the same cases and the judge reports where the two
differ. On the CPU both backends are the CPU (on CUDA the primary is the GPU, as users run it);
the fixture target `backend_split_kernels.py` behaves differently in the cross-check worker (it
reads the mark kvfuzz puts in that worker's environment), and the refusal of a same-device
cross-check is lifted for these tests only."""

from __future__ import annotations

import copy
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import cases
from kvfuzz import cross
from kvfuzz.campaign import CampaignConfig, run_campaign
from kvfuzz.cli import main
from kvfuzz.corpus import read_case_dir
from kvfuzz.execute import RunResult, prepare
from kvfuzz.judge import judge
from kvfuzz.replay import replay
from kvfuzz.repro import write_repro
from kvfuzz.worker import InProcessExecutor

SPLIT = str(Path(__file__).parent / "fixtures" / "backend_split_kernels.py")
SIG = ":backend_divergence:cache_seqlens_int32:required"


@pytest.fixture
def same_device_ok(monkeypatch):
    monkeypatch.setattr(cross, "check_backend", lambda device, backend: None)


def _campaign(target, tmp_path, device, **kw):
    cfg = CampaignConfig(ops=["decode_metadata"], target=target, device=device, budget_s=30, max_cases=16,
                         corpus=tmp_path / "corpus", cross_check="cpu", minimize_budget_s=4, **kw)
    return run_campaign(cfg)


@pytest.mark.slow  # campaign-sized: `pytest -m slow`
@pytest.mark.interpreter
def test_divergence_is_found_minimized_confirmed_saved_and_replayed(same_device_ok, tmp_path, device):
    r = _campaign(SPLIT, tmp_path, device)
    assert [x.found.finding.signature.endswith(SIG) for x in r.saved] == [True], r.report()["findings"]
    x = r.saved[0]
    assert x.new and x.confirmation.confirmed and x.path is not None and r.stats[0].cross_checked > 0
    saved = read_case_dir(x.path)
    assert saved.case.meta["cross_check"] == "cpu"
    assert saved.case.tensors["cache_seqlens_int32"].shape == (2,)  # minimized to the two rows it needs
    cell = saved.finding.cells[0]
    assert cell["index"] == [1] and cell["cpu"] == cell["primary"] + 1
    # replay checks it again on both backends; without the cross-check the primary alone is clean
    again = replay(saved, device=device, isolate=False)
    assert again.same_defect, again.verdict.signatures()
    assert judge(saved.case, InProcessExecutor(SPLIT, device).run(saved.case)).findings == []


@pytest.mark.thorough  # seconds of processes and campaigns: CI's thorough stage
@pytest.mark.interpreter
def test_identical_backends_report_no_divergence(same_device_ok, tmp_path, device):
    r = _campaign("builtin", tmp_path, device, cross_check_every=2)
    assert r.saved == [] and r.flaky == []
    assert 0 < r.stats[0].cross_checked <= 8  # every second case, those in contract
    assert r.report()["ops"]["decode_metadata"]["cross_checked"] == r.stats[0].cross_checked


@pytest.mark.slow  # campaign-sized: CI's slow stage runs it (.ci/run)
@pytest.mark.interpreter
def test_a_cross_checked_campaign_leaves_out_what_the_target_cannot_take(same_device_ok, seed_path, tmp_path, device):
    """0.5.14's num_kv_splits has no uneven_batch_ptr: the campaign must draw its cases without
    that tensor when the executor is the cross-check pair too (every case was kvfuzz's own
    call-building error on the H200, 34,944 of 81,856 not judged)."""
    cfg = CampaignConfig(ops=["num_kv_splits"], target=str(seed_path), device=device, budget_s=30, max_cases=64,
                         corpus=tmp_path / "corpus", cross_check="cpu", minimize_budget_s=2)
    r = run_campaign(cfg)
    op = r.report()["ops"]["num_kv_splits"]
    assert op["cases"] >= 64 and op["not_target"] == 0 and op["cross_checked"] > 0, op


def test_same_device_is_refused_in_one_line(capsys, device):
    if device != "cpu":
        pytest.skip("this process runs CUDA kernels; a cpu primary needs a process of its own")
    assert main(["fuzz", "--device", "cpu", "--cross-check", "cpu", "--budget", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--cross-check cpu: the primary device is already cpu" in err[0]


def _gpu_divergence_case(corpus: Path, target: str = "builtin", rows: int = 2, where: str = "required") -> Path:
    """A backend_divergence case as a CUDA campaign would save it (found on cuda against cpu)."""
    from kvfuzz.corpus import DirectoryCorpus, SavedCase, environment_versions
    from kvfuzz.findings import Finding

    case = cases.decode(B=rows).with_meta(cross_check="cpu")
    tensor = "-" if where == "lost" else "cache_seqlens_int32"
    f = Finding("backend_divergence", "decode_metadata", "ps1", tensor, where, "differs")
    return DirectoryCorpus(corpus).save(SavedCase(case=case, finding=f, target=target, device="cuda",
                                                  versions=environment_versions(None), origin="hand",
                                                  expected="xfail", reason="a divergence")).path


def _emitted(script: Path):
    """An emitted repro script imported as a module (its CASE set; nothing runs)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"emitted_{script.stem}", script)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # as any imported module: the dataclasses it embeds look themselves up there
    spec.loader.exec_module(module)
    return module


def _defects(text: str) -> list[str]:
    return re.findall(r"^DEFECT \w+: .*  \[([^\]\s]+)\]$", text, re.M)


@pytest.mark.slow  # campaign-sized: `pytest -m slow`
@pytest.mark.interpreter
def test_a_divergence_replays_on_both_backends_and_so_does_its_repro_script(same_device_ok, tmp_path, capsys,
                                                                            monkeypatch, device):
    """`kvfuzz replay` runs a saved divergence on both backends (each in a worker process) and
    fails with its signature; the script `--emit-repro` writes runs it on both too (each side in
    a process of its own) and prints the same defects; where its second side is missing it
    says so in one line (exit 2), never a pass."""
    import torch

    from kvfuzz import repro_script

    assert repro_script.CROSS_CHECK_MARK == cross.WORKER_MARK
    path = _gpu_divergence_case(tmp_path / "corpus", SPLIT)
    script = tmp_path / "repro.py"
    assert main(["replay", str(path), "--device", device, "--emit-repro", str(script)]) == 1
    out = capsys.readouterr().out
    assert "cross-checked on cpu" in out and f"backend_divergence: decode_metadata:ps1{SIG}" in out
    replayed = {line.split()[-1] for line in out.splitlines() if line.startswith("  backend_divergence: ")}

    # as a user runs it: the primary side needs CUDA (a cpu-only machine refuses in one line)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    p = subprocess.run([sys.executable, str(script), SPLIT], capture_output=True, text=True, timeout=300, env=env)
    if torch.cuda.is_available():
        assert p.returncode == 1 and set(_defects(p.stdout)) == replayed, p.stdout + p.stderr
    else:
        assert p.returncode == 2 and p.stdout == "", p.stdout + p.stderr
        (line,) = p.stderr.strip().splitlines()
        assert "divergence between cuda and cpu" in line and "no CUDA device" in line
    module = _emitted(script)
    assert (module.CASE.cross_check, module.CASE.found_on) == ("cpu", "cuda")
    assert module.main([SPLIT, "--device", "cpu"]) == 2  # the backend is no primary
    assert "give a device other than cpu" in capsys.readouterr().err

    # both sides on this machine's device and the interpreter (the refusal lifted, as above)
    monkeypatch.setattr(module, "cross_devices", lambda requested, case: (device, "cpu"))
    assert module.main([SPLIT]) == 1
    out = capsys.readouterr().out
    assert set(_defects(out)) == replayed and "cache_seqlens_int32[1]: primary 17, cpu 18" in out
    assert "The saved finding reproduces." in out
    assert module.main([str(Path(cross.__file__).parent / "kernels")]) == 0  # kvfuzz's kernels: no divergence
    assert module.main([SPLIT, "--in-process"]) == 2  # one process cannot run both sides
    capsys.readouterr()

    # the backend's process dies: the divergence is `lost`, as kvfuzz's judge says
    monkeypatch.setenv("KVFUZZ_TEST_CROSS_KILL", "1")
    lost = read_case_dir(_gpu_divergence_case(tmp_path / "corpus", SPLIT, rows=3, where="lost"))
    write_repro(lost, tmp_path / "lost.py", device="cuda")
    module = _emitted(tmp_path / "lost.py")
    monkeypatch.setattr(module, "cross_devices", lambda requested, case: (device, "cpu"))
    assert module.main([SPLIT]) == 1
    out = capsys.readouterr().out
    assert _defects(out) == ["decode_metadata:ps1:backend_divergence:-:lost"] and "SIGKILL" in out


@pytest.mark.thorough  # seconds of processes and campaigns: CI's thorough stage
def test_a_divergence_on_its_own_backend_is_refused_by_replay_and_skipped_by_pytest(tmp_path, capsys, device):
    from test_pytest_plugin import junit_results, run_pytest

    if device != "cpu":
        pytest.skip("this process runs CUDA kernels; replaying on the cpu needs a process of its own")
    path = _gpu_divergence_case(tmp_path / "corpus")
    assert main(["replay", str(path), "--device", "cpu"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "divergence between cuda and cpu" in err[0]
    run_pytest([str(tmp_path / "corpus")], tmp_path, tmp_path / "j.xml")  # the regression suite, no GPU
    (only,) = junit_results(tmp_path / "j.xml").values()
    assert only["outcome"] == "skipped" and "a divergence between cuda and cpu" in only["message"]


@pytest.mark.thorough  # seconds of processes and campaigns: CI's thorough stage
@pytest.mark.interpreter
def test_a_batch_on_both_backends_and_a_lost_second_run(monkeypatch, device):
    """The second worker runs the marked in-contract launches of a batch from the same image;
    when it dies, each launch is run alone there, so the loss is pinned on its case."""
    from kvfuzz.execute import launches, outcomes
    from kvfuzz.worker import WorkerExecutor

    monkeypatch.delenv(cross.WORKER_MARK, raising=False)  # the primary runs in this process
    monkeypatch.setenv("KVFUZZ_TEST_CROSS_KILL", "1")
    bad = cases.decode(B=2).replace(values={**cases.decode(B=2).values, "req_pool_indices": np.array([0, 99])})
    prepared = [prepare(c, i) for i, c in enumerate([cases.decode(B=2), cases.decode(B=3), cases.decode(B=1), bad])]
    assert [p.status for p in prepared] == ["in_contract"] * 3 + ["out_of_contract"]
    secondary = WorkerExecutor(SPLIT, "cpu", env={cross.WORKER_MARK: "1", "TRITON_INTERPRET": "1"})
    ex = cross.CrossExecutor(InProcessExecutor(SPLIT, device), secondary, "cpu")
    try:
        image, batch = launches(prepared, [False] * 4, [True, True, True, True], prove_on_device=False)
        result = ex.run_batch(image, batch)
    finally:
        ex.close()
    assert sorted(result.cross) == [0, 1, 2]  # the out-of-contract launch is not cross-checked
    got = [[(f.tensor, f.where) for f in judge(p.case, o, prepared=p).findings]
           for p, o in zip(prepared, outcomes(batch, result))]
    assert got[0] == [("cache_seqlens_int32", "required")]
    assert got[1] == [("-", "lost")] and "SIGKILL" in result.cross[1].runs[0].error
    assert got[2] == []


# the judge's rules, on outcomes made by hand from one real run -----------------------------


@pytest.fixture(scope="module")
def run_once(device):
    ex = InProcessExecutor("builtin", device)
    case = cases.decode(B=3)
    out = ex.run(case)
    assert out.runs[0].error is None
    return case, out


def _with_cross(outcome, after=None, error=None, error_type=None):
    out = copy.deepcopy(outcome)
    other = copy.deepcopy(outcome)
    other.runs = [RunResult(error=error, error_type=error_type,
                            after=None if error_type in ("WorkerDied",) else
                            (outcome.runs[0].after.copy() if after is None else after))]
    out.cross, out.cross_backend = other, "cpu"
    return out


def _divergences(case, outcome):
    return [f for f in judge(case, outcome).findings if f.kind == "backend_divergence"]


def test_judge_same_arena_no_divergence(run_once):
    case, out = run_once
    assert _divergences(case, _with_cross(out)) == []


def test_judge_places_each_difference(run_once):
    case, out = run_once
    p = prepare(case).plan
    after = out.runs[0].after.copy()
    pt = p.regions["page_table"]
    after[pt.start - 1] ^= 0xFF  # the guard band before page_table
    cs = p.regions["cache_seqlens_int32"]
    after[cs.start] ^= 0x01  # cache_seqlens_int32[0], a required cell
    seqs = p.regions["seq_lens"]
    after[seqs.start] ^= 0x01  # an input element
    got = {(f.tensor, f.where) for f in _divergences(case, _with_cross(out, after))}
    assert got == {("page_table", "before"), ("cache_seqlens_int32", "required"), ("seq_lens", "input")}


def test_judge_raised_on_one_backend_only_and_lost(run_once):
    case, out = run_once
    raised = _divergences(case, _with_cross(out, error="ValueError: no", error_type="ValueError"))
    assert [(f.tensor, f.where) for f in raised] == [("-", "raised")] and "raised on cpu only" in raised[0].message
    lost = _divergences(case, _with_cross(out, error="WorkerDied: killed by SIGSEGV", error_type="WorkerDied"))
    assert [(f.tensor, f.where) for f in lost] == [("-", "lost")]
    harness = _divergences(case, _with_cross(out, error="HarnessError: x", error_type="HarnessError"))
    assert harness == []  # kvfuzz's failure on the second backend is never the target's


def test_judge_out_of_contract_is_not_cross_checked(run_once, device):
    case, _ = run_once
    bad = case.replace(values={**case.values, "req_pool_indices": np.array([0, 99, 1])})  # a row past req_to_token
    assert prepare(bad).status != "in_contract"
    out = InProcessExecutor("builtin", device).run(bad)
    after = (out.runs[0].after if out.runs[0].after is not None else prepare(bad).plan.image).copy()
    after[prepare(bad).plan.regions["page_table"].start] ^= 0xFF
    assert _divergences(bad, _with_cross(out, after)) == []
