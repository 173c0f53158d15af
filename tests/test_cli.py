"""The command line: exit codes, one-line errors, reports, replay of saved cases."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from kvfuzz.cli import main


def run(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "kvfuzz.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=dict(os.environ))


@pytest.mark.parametrize("args, message", [
    (["fuzz", "--op", "nope"], "unknown op 'nope'"),
    (["fuzz", "--budget", "x"], "invalid float value"),
    (["fuzz", "--budget", "0"], "--budget must be > 0"),
    (["fuzz", "--max-cases", "0"], "--max-cases must be >= 1"),
    (["fuzz", "--target", "/no/such/file.py"], "does not exist"),
    (["fuzz", "--device", "tpu"], "invalid choice"),
    (["fuzz", "--variant", "nope", "--op", "num_kv_splits"], "no contract variant"),
    (["replay", "/no/such/case"], "no such case"),
    (["frobnicate"], "invalid choice"),
])
def test_bad_usage_is_one_line_and_exit_2(args, message):
    p = run(*args)
    assert p.returncode == 2
    assert message in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "Traceback" not in p.stderr


def test_corrupt_case_is_refused(tmp_path):
    d = tmp_path / "case"
    d.mkdir()
    (d / "case.json").write_text("{ not json")
    p = run("replay", str(d))
    assert p.returncode == 2 and "case.json" in p.stderr and "Traceback" not in p.stderr


def test_fuzz_builtin_is_clean_and_reports(tmp_path):
    report = tmp_path / "r.json"
    rc = main(["fuzz", "--target", "builtin", "--budget", "30", "--max-cases", "60", "--seed", "3",
               "--report", str(report), "--corpus", str(tmp_path / "corpus")])
    doc = json.loads(report.read_text())
    assert rc == 0, doc["findings"]
    assert doc["findings"] == [] and doc["cases"] >= 60
    assert set(doc["ops"]) == {"decode_metadata", "swa_spec_page_table", "num_kv_splits"}


def test_fuzz_seed_finds_saves_and_replays(seed_path, tmp_path):
    corpus, report = tmp_path / "corpus", tmp_path / "r.json"
    p = run("fuzz", "--target", str(seed_path), "--op", "num_kv_splits", "--budget", "20", "--seed", "1",
            "--corpus", str(corpus), "--report", str(report), "--minimize-budget", "10")
    assert p.returncode == 1, p.stderr[-2000:]
    doc = json.loads(report.read_text())
    finding = doc["findings"][0]
    assert finding["kind"] == "mismatch" and os.path.isdir(finding["case"])
    # replay: still fails on the seed (exit 1), passes on builtin (exit 0)
    r1 = run("replay", finding["case"])
    assert r1.returncode == 1 and "FAIL" in r1.stdout and "numpy=" in r1.stdout
    r0 = run("replay", finding["case"], "--target", "builtin")
    assert r0.returncode == 0 and "PASS" in r0.stdout
    # the corpus runs as pytest tests: a strict xfail on the seed
    t = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(corpus)],
                       capture_output=True, text=True, timeout=600)
    assert "1 xfailed" in t.stdout, t.stdout[-2000:]
    t = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(corpus),
                        "--kvfuzz-target", "builtin"], capture_output=True, text=True, timeout=600)
    assert "1 failed" in t.stdout and "no longer shows" in t.stdout, t.stdout[-2000:]
