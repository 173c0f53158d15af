"""The pytest plugin, run the way users run it: `pytest` in a subprocess over a corpus
directory, outcomes read back from its JUnit XML."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from kvfuzz import pytest_plugin
from kvfuzz.corpus import iter_cases
from kvfuzz.findings import KINDS

from conftest import DEVICE, REPO

CORPORA = REPO / "corpora"


def builtin_pass_cases(n: int) -> list[Path]:
    """The first n must-pass builtin cases of the shipped corpus, one per op first."""
    docs = {p.parent: json.loads(p.read_text()) for p in sorted(CORPORA.glob("*/*/case.json"))}
    ok = [d for d, doc in docs.items() if doc["target"] == "builtin" and doc["expected"] == "pass"]
    by_op: dict[str, list[Path]] = {}
    for d in ok:
        by_op.setdefault(d.parent.name, []).append(d)
    order = [d for i in range(max(map(len, by_op.values()))) for ds in by_op.values() for d in ds[i:i + 1]]
    return order[:n]


def run_pytest(args: list[str], cwd: Path, junit: Path, env: dict[str, str] | None = None):
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA",
           f"--junitxml={junit}", "--kvfuzz-device", DEVICE, *args]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=600,
                          env=dict(os.environ) | (env or {}))


def junit_results(junit: Path) -> dict[str, dict]:
    """classname::name -> {"outcome": passed|failed|skipped|xfailed|error, "message": str, "props": {..}}"""
    out = {}
    for tc in ET.parse(junit).getroot().iter("testcase"):
        outcome, message = "passed", ""
        for tag in ("failure", "error", "skipped"):
            el = tc.find(tag)
            if el is not None:
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
                message = (el.get("message") or "") + (el.text or "")
                if tag == "skipped" and el.get("type") == "pytest.xfail":
                    outcome = "xfailed"
        props = {p.get("name"): p.get("value") for p in tc.iter("property")}
        out[f'{tc.get("classname")}::{tc.get("name")}'] = {"outcome": outcome, "message": message, "props": props}
    return out


def test_collects_one_test_per_case_with_readable_ids():
    r = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                        str(CORPORA)], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert r.returncode == 0, r.stdout + r.stderr
    ids = [line for line in r.stdout.splitlines() if "case.json::" in line]
    n_cases = sum(1 for _ in iter_cases([CORPORA]))
    assert len(ids) == n_cases == len(list(CORPORA.glob("*/*/case.json")))
    for line in ids:
        op_dir = line.split("/")[-3]
        name = line.split("::")[-1]
        op, kind, key = name.split(":")
        assert op == op_dir and key == line.split("/")[-2]
        assert kind in (*KINDS, "regression")


@pytest.mark.thorough  # seconds of processes and campaigns: CI's thorough stage
def test_outcomes_pass_strict_xfail_skip_and_unreadable(tmp_path):
    corpus = tmp_path / "corpus"
    good, fixed = builtin_pass_cases(2)
    shutil.copytree(good, corpus / "a" / good.name)
    # a builtin case marked as a known defect: the kernel passes, so the strict xfail fails
    shutil.copytree(fixed, corpus / "b" / fixed.name)
    doc = json.loads((corpus / "b" / fixed.name / "case.json").read_text())
    doc["expected"], doc["reason"] = "xfail", "pretend this was a defect"
    doc["device"] = DEVICE  # seen here: else it would be skipped as a defect of another device
    (corpus / "b" / fixed.name / "case.json").write_text(json.dumps(doc))
    # a case whose target file is not here
    away = corpus / "c" / good.name
    shutil.copytree(good, away)
    doc = json.loads((away / "case.json").read_text())
    doc["target"] = str(tmp_path / "no_such_kernels.py")
    (away / "case.json").write_text(json.dumps(doc))
    # a truncated case
    bad = corpus / "d" / "0123456789abcdef"
    shutil.copytree(good, bad)
    (bad / "case.json").write_text((bad / "case.json").read_text()[:40])

    junit = tmp_path / "junit.xml"
    r = run_pytest([str(corpus)], tmp_path, junit)
    res = junit_results(junit)
    assert r.returncode == 1, r.stdout[-3000:]
    assert len(res) == 4, res
    [ok] = [v for k, v in res.items() if k.startswith("corpus.a.")]
    by_outcome: dict[str, list] = {}
    for v in res.values():
        by_outcome.setdefault(v["outcome"], []).append(v)
    assert ok["outcome"] == "passed"
    assert ok["props"]["kvfuzz_device"].endswith("cpu" if DEVICE == "cpu" else "")
    assert len(by_outcome["failed"]) == 2, res  # the fixed "defect" and the unreadable case
    msgs = " ".join(v["message"] for v in by_outcome["failed"])
    assert "strict xfail" in msgs and "prune" in msgs
    assert "case.json" in msgs  # the unreadable case names its file
    [skip] = by_outcome["skipped"]
    assert "not available here" in skip["message"] and "no_such_kernels.py" in skip["message"]


@pytest.mark.thorough  # seconds of processes and campaigns: CI's thorough stage
def test_corpus_option_and_target_override(tmp_path):
    corpus = tmp_path / "corpus"
    [good] = builtin_pass_cases(1)
    shutil.copytree(good, corpus / good.name)
    junit = tmp_path / "junit.xml"
    # --kvfuzz-corpus adds the directory; --kvfuzz-target replays against another target
    r = run_pytest(["--kvfuzz-corpus", str(corpus), "--kvfuzz-target", "builtin"], tmp_path, junit)
    assert r.returncode == 0, r.stdout[-3000:]
    assert [v["outcome"] for v in junit_results(junit).values()] == ["passed"]
    r = run_pytest(["--kvfuzz-corpus", str(tmp_path / "missing")], tmp_path, junit)
    assert r.returncode == 4 and "no such directory" in r.stderr


@pytest.mark.parametrize("worker, visible, count, device, expect", [
    ("gw0", None, 2, "cuda", {"CUDA_VISIBLE_DEVICES": "0"}),
    ("gw3", None, 2, "cuda", {"CUDA_VISIBLE_DEVICES": "1"}),
    ("gw5", None, 4, "cuda", {"CUDA_VISIBLE_DEVICES": "1"}),
    ("gw1", None, 1, "cuda", {}),        # one GPU: nothing to pin
    ("gw1", "2,3", 4, "cuda", {}),       # the user chose: leave it
    ("", None, 2, "cuda", {}),           # not under xdist
    ("gw1", None, 2, "cpu", {}),
])
def test_xdist_workers_are_pinned_round_robin(monkeypatch, worker, visible, count, device, expect):
    import torch

    monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
    assert pytest_plugin._gpu_env(device) == expect


@pytest.mark.skipif(DEVICE != "cuda", reason="needs CUDA")
def test_each_xdist_worker_runs_on_one_gpu_and_several_gpus_are_all_used(tmp_path):
    import torch

    n_gpu = torch.cuda.device_count()
    if n_gpu < 2 or "CUDA_VISIBLE_DEVICES" in os.environ:
        pytest.skip(f"needs several GPUs visible ({n_gpu} here)")
    corpus = tmp_path / "corpus"
    for d in builtin_pass_cases(4 * n_gpu):
        shutil.copytree(d, corpus / d.parent.name / d.name)
    junit = tmp_path / "junit.xml"
    r = run_pytest(["-n", str(2 * n_gpu), "--dist", "load", str(corpus)], tmp_path, junit)
    assert r.returncode == 0, r.stdout[-3000:]
    res = junit_results(junit)
    per_worker: dict[str, set] = {}
    for v in res.values():
        per_worker.setdefault(v["props"]["kvfuzz_xdist_worker"], set()).add(v["props"]["kvfuzz_device"])
    assert all(len(devs) == 1 for devs in per_worker.values()), per_worker
    used = set().union(*per_worker.values())
    assert len(used) == min(n_gpu, len(per_worker)) and len(per_worker) >= 2, per_worker


@pytest.mark.slow  # campaign-sized: `pytest -m slow`
def test_target_override_follows_the_release_triage(tmp_path):
    """--kvfuzz-target X (tox -e release): a triaged defect is a strict xfail exactly on the
    targets it affects (its own and meta.affects), must pass on the others; an untriaged one is
    skipped; a must-pass case failing only with X's known defects is xfail, with others a failure."""
    mutant = "tests/fixtures/mutant_kernels.py"  # accepts an invalid page_size (as no release does)
    swa_xfail, general_xfail, swa_builtin = (CORPORA / "decode_metadata" / k for k in
                                             ("306fae2129a62215", "ca51948d685ec03d", "34b4ff54bb34dcb7"))

    def put(src: Path, name: str, **changes) -> None:
        dst = tmp_path / "corpus" / name / src.name
        shutil.copytree(src, dst)
        doc = json.loads((dst / "case.json").read_text())
        for k, v in changes.items():
            if k == "affects":
                doc["meta"]["affects"] = v
            else:
                doc[k] = v
        (dst / "case.json").write_text(json.dumps(doc))

    put(swa_xfail, "triaged", affects=[])             # the mutant's defect, triaged: only the mutant has it
    put(general_xfail, "untriaged")                   # the mutant's, never triaged against releases
    put(swa_builtin, "builtin")                       # must pass on any correct target
    # a release's defect, triaged clean on every other target (the mutant included)
    put(general_xfail, "release", target="sglang==0.5.14", affects=["sglang==0.5.14"])

    (tmp_path / mutant).parent.mkdir(parents=True)
    shutil.copy(REPO / mutant, tmp_path / mutant)  # the cases name it relative to where pytest runs

    def outcomes(target: str, skip: str = "") -> dict[str, str]:
        junit = tmp_path / f"junit-{len(target)}-{skip}.xml"
        args = [f"corpus/{d.name}" for d in sorted((tmp_path / "corpus").iterdir()) if d.name != skip]
        run_pytest([*args, "--kvfuzz-target", target], tmp_path, junit)
        names = ("triaged", "untriaged", "builtin", "release")
        return {next(n for n in names if f".{n}." in f".{k}."): v["outcome"] for k, v in junit_results(junit).items()}

    assert outcomes("builtin") == {"triaged": "passed", "untriaged": "skipped", "builtin": "passed",
                                   "release": "passed"}
    assert outcomes(mutant) == {"triaged": "xfailed", "untriaged": "xfailed",
                                "builtin": "xfailed",  # the mutant's known swa defect
                                "release": "xfailed"}  # its general defect is the mutant's too (untriaged)
    # without the untriaged case, the mutant's general defect is known nowhere: a failure
    assert outcomes(mutant, skip="untriaged") == {"triaged": "xfailed", "builtin": "xfailed", "release": "failed"}


def test_a_rerun_difference_beside_a_known_wild_write_is_that_write():
    """A must-pass case failing on a release with the release's known defects only is xfail;
    a second run differing beside a known out-of-bounds write is that write (its stores land
    differently), but not beside known defects that write nothing out of bounds, and never
    when an unknown defect shows too."""
    known = {"swa_spec_page_table:spec:out_of_bounds_write:page_table_dst",
             "swa_spec_page_table:spec:untouched_write:page_table_dst"}
    wild = ["swa_spec_page_table:spec:out_of_bounds_write:page_table_dst:after",
            "swa_spec_page_table:spec:untouched_write:page_table_dst:cells"]
    race = "swa_spec_page_table:spec:nondeterministic:-:rerun"
    assert pytest_plugin.only_known_defects(wild, known)
    assert pytest_plugin.only_known_defects([*wild, race], known)
    assert not pytest_plugin.only_known_defects([wild[1], race], known)  # no wild write known beside it
    assert not pytest_plugin.only_known_defects(
        [*wild, race, "swa_spec_page_table:spec:mismatch:page_table_dst:all"], known)
