"""draft_extend_set_metadata (SGLang 0.5.16 on) as the op `draft_extend_metadata`: the builtin
kernel against its contract, every release that has it under the interpreter, the releases
that lack it refused or skipped, and the op through the repro script, the minimizer and the
corpus. Oracles by hand: tests/test_oracles.py; generation: tests/test_generation.py."""

from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import pytest
import torch

import cases
from kvfuzz.case import TensorSpec
from kvfuzz.execute import run_case
from kvfuzz.judge import judge
from kvfuzz.strategies import random_cases
from kvfuzz.targets import load_target
from kvfuzz.targets.releases import RELEASES

OP = "draft_extend_metadata"
HAND = {
    "ps1": cases.draft_extend(ps=1),
    "general, rows past the table": cases.draft_extend(ps=4, W=3, dtype="int32"),
    "swa": cases.draft_extend(ps=16, swa=True),
    "swa zero width": cases.draft_extend(ps=1, swa=True, W=0),
    "block edges": cases.draft_extend(ps=1, lens=(255, 256, 257, 0)),
    "swa block edges, one write location": cases.draft_extend(ps=2, swa=True, lens=(510, 512, 514), tpr=1),
}
# SGLang reads the mapping and the write locations without their strides (0.5.16 - 0.5.23)
STRIDED_SWA_OUT = cases.draft_extend(ps=16, swa=True, swa_layouts={
    "swa_out_cache_loc": TensorSpec("int64", (12,), (2,), 0, 23)})
STRIDED_MAP = cases.draft_extend(ps=4, swa=True, swa_layouts={
    "full_to_swa_index_mapping": TensorSpec("int64", (103,), (2,), 0, 205)})


def release(version: str, device: str):
    from kvfuzz.errors import TargetLoadError
    from kvfuzz.targets.wheels import sglang_kernel_file

    try:
        sglang_kernel_file(version)
    except TargetLoadError as exc:
        pytest.skip(f"sglang=={version} is not cached and PyPI cannot be reached: {exc}")
    return load_target(f"sglang=={version}", device)


def findings(target, case, device):
    v = judge(case, run_case(target, case, device, repeats=2))
    assert v.status == "in_contract" and v.not_target is None, (v.status, v.reasons, v.not_target)
    return v.signatures()


# ------------------------------------------------------------------------------------- builtin


@pytest.mark.parametrize("name", list(HAND) + ["strided swa_out_cache_loc", "strided mapping"])
def test_builtin_passes_the_hand_cases(name, builtin_target, device):
    case = {"strided swa_out_cache_loc": STRIDED_SWA_OUT, "strided mapping": STRIDED_MAP}.get(name) or HAND[name]
    assert findings(builtin_target, case, device) == []


def test_builtin_passes_a_seeded_stream(builtin_target, device):
    """In and out of contract, fresh classes: nothing to find (out-of-contract cases are refused
    or stay inside their tensors)."""
    seen = set()
    for case in random_cases(OP, 2, 60):
        v = judge(case, run_case(builtin_target, case, device))
        assert v.findings == [] and v.not_target is None, (case.describe(), v.signatures(), v.not_target)
        seen.add(v.status)
    assert seen == {"in_contract", "out_of_contract", "must_refuse"}


def _args(case, device):
    t = {name: torch.zeros(spec.shape, dtype=getattr(torch, spec.dtype), device=device)
         for name, spec in case.tensors.items()}
    return t


@pytest.mark.parametrize("change, match", [
    (dict(page_size=3), "page_size must be a power of two"),
    (dict(cu_seqlens_q=torch.zeros(4, dtype=torch.int32)), r"cu_seqlens_q must have B \+ 1 = 5 elements"),
    (dict(page_table=torch.zeros(3, 5, dtype=torch.int32)), "page_table must have B = 4 rows"),
    (dict(extend_seq_lens=torch.zeros(4)), "extend_seq_lens must be int32 or int64"),
    (dict(swa_page_table=None), "swa_page_table, out_cache_loc and swa_out_cache_loc are required"),
    (dict(swa_page_table=torch.zeros(4, 3, dtype=torch.int32)), "swa_page_table must have page_table's shape"),
    (dict(out_cache_loc=torch.zeros(11, dtype=torch.int64),
          swa_out_cache_loc=torch.zeros(11, dtype=torch.int64)), "not a multiple of B = 4"),
])
def test_builtin_refuses_arguments_outside_the_contract(change, match, device):
    from kvfuzz.kernels import draft_extend_set_metadata

    case = cases.draft_extend(ps=16, swa=True)
    t = _args(case, device)
    t |= {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in change.items() if k != "page_size"}
    with pytest.raises(ValueError, match=match):
        draft_extend_set_metadata(t["cache_seqlens_int32"], t["cu_seqlens_k"], t["cu_seqlens_q"], t["page_table"],
                                  t["req_to_token"], t["req_pool_indices"], t["seq_lens"], t["extend_seq_lens"],
                                  change.get("page_size", 16), t["full_to_swa_index_mapping"], t["swa_page_table"],
                                  t["out_cache_loc"], t["swa_out_cache_loc"])


# ------------------------------------------------------------------------------------ releases


@pytest.mark.parametrize("version", ("0.5.16", "0.5.20", "0.5.23"))  # the kernel's text changed at 0.5.20
def test_each_release_with_the_op_passes_the_contiguous_cases(version, device):
    t = release(version, device)
    b = t.bindings[OP]
    assert b.by_name and b.generation == "0.5.16" and t.variants[OP] == "default"
    for name, case in HAND.items():
        assert findings(t, case, device) == [], name


@pytest.mark.parametrize("version", ("0.5.16", "0.5.23"))
def test_releases_read_the_swa_tensors_without_their_strides(version, device):
    """The defect every release has: a strided swa_out_cache_loc gets its values in the gaps,
    a strided mapping is read as if contiguous (the builtin kernel passes both, above)."""
    t = release(version, device)
    assert set(findings(t, STRIDED_SWA_OUT, device)) == {
        "draft_extend_metadata:swa:mismatch:swa_out_cache_loc:partial",
        "draft_extend_metadata:swa:out_of_bounds_write:swa_out_cache_loc:gap"}
    # read as if contiguous, the mapping's stride gaps are read too: the second run's fill there
    # can show it as a read past the mapping (compiled on CUDA it does)
    got = findings(t, STRIDED_MAP, device)
    gap_read = "draft_extend_metadata:swa:out_of_bounds_read:full_to_swa_index_mapping:gap"
    assert got and all(s.startswith("draft_extend_metadata:swa:mismatch:swa_") or s == gap_read for s in got), got


@pytest.mark.thorough  # seconds of processes and campaigns: CI's thorough stage
@pytest.mark.interpreter
def test_releases_before_0_5_16_do_not_offer_it(tmp_path, device):
    from kvfuzz.campaign import CampaignConfig, run_campaign

    t = release("0.5.15", device)
    assert OP not in t.bindings and "has no draft_extend_set_metadata" in t.missing[OP]
    r = subprocess.run([sys.executable, "-m", "kvfuzz.cli", "fuzz", "--op", OP, "--target", "sglang==0.5.15",
                        "--device", "cpu", "--budget", "5"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and r.stdout == "", r.stdout + r.stderr
    # one line, naming every kernel file the release has, once
    (line,) = r.stderr.strip().splitlines()
    m = re.fullmatch(r"kvfuzz: error: target sglang==0\.5\.15 has no draft_extend_metadata: sglang==0\.5\.15 "
                     r"\((.*) from the PyPI wheel\) has no draft_extend_set_metadata", line)
    assert m and sorted(m[1].split(", ")) == sorted(RELEASES["0.5.15"].files), line
    # a campaign over every op (no --op) skips it
    done = run_campaign(CampaignConfig(ops=[OP], target="sglang==0.5.15", device=device, budget_s=1, isolate=False))
    assert done.stats[0].skipped and done.stats[0].cases == 0


# ------------------------------------------------------------------ repro script, minimizer, corpus


@pytest.mark.thorough  # seconds of processes and campaigns: CI's thorough stage
def test_the_repro_script_runs_the_op(tmp_path, device):
    from kvfuzz.corpus import SavedCase, environment_versions
    from kvfuzz.repro import write_repro
    from kvfuzz.targets.wheels import sglang_kernel_file

    release("0.5.16", device)
    saved = SavedCase(case=STRIDED_SWA_OUT, finding=None, target="sglang==0.5.16", device=device,
                      versions=environment_versions(), origin="hand")
    script = tmp_path / "repro.py"
    write_repro(saved, script, device=device)
    kernels = (sglang_kernel_file("0.5.16"), cases.__file__.replace("tests/cases.py", "kvfuzz/kernels"))
    procs = [subprocess.Popen([sys.executable, str(script), str(k), "--device", device], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, cwd=tmp_path) for k in kernels]
    (bad, _), (ok, ok_err) = (p.communicate(timeout=300) for p in procs)
    assert procs[0].returncode == 1 and "draft_extend_metadata:swa:out_of_bounds_write:swa_out_cache_loc:gap" in bad
    assert procs[1].returncode == 0 and "OK:" in ok, ok + ok_err


def test_the_minimizer_keeps_the_strided_defect(device):
    from kvfuzz.minimize import minimize

    t = release("0.5.16", device)
    sig = "draft_extend_metadata:swa:out_of_bounds_write:swa_out_cache_loc:gap"
    big = cases.draft_extend(ps=2, swa=True, lens=(40, 3, 0, 17, 9), swa_layouts={
        "swa_out_cache_loc": TensorSpec("int64", (15,), (3,), 1, 45)})

    def still_fails(c):
        return sig in judge(c, run_case(t, c, device)).signatures()

    assert still_fails(big)
    m = minimize(big, still_fails, budget_s=60)
    assert m.complete and still_fails(m.case)
    assert m.case.tensors["seq_lens"].shape[0] == 1 and m.case.tensors["page_table"].shape[1] == 0, m.log
    assert m.case.tensors["swa_out_cache_loc"].strides != (1,)  # the defect needs the layout


def test_a_case_round_trips_through_the_corpus(tmp_path, device):
    from kvfuzz.corpus import DirectoryCorpus, SavedCase, environment_versions

    store = DirectoryCorpus(tmp_path / "corpus")
    saved = SavedCase(case=STRIDED_MAP, finding=None, target="builtin", device=device,
                      versions=environment_versions(), origin="hand")
    store.save(saved)
    (key,) = list(store.keys())
    back = store.load(key)
    assert back.case == STRIDED_MAP and back.case.op == OP
    assert all(np.array_equal(back.case.values[k], v) for k, v in STRIDED_MAP.values.items())


def test_kvfuzz_ops_lists_it(capsys):
    from kvfuzz.cli import main

    assert main(["ops"]) == 0
    out = capsys.readouterr().out
    assert "draft_extend_metadata" in out and "draft_extend_set_metadata" in out
