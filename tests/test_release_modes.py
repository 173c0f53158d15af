"""scripts/release_modes.py: the release x mode matrix runner."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("release_modes", ROOT / "scripts" / "release_modes.py")
rm = importlib.util.module_from_spec(_spec)
sys.modules["release_modes"] = rm  # dataclasses look their module up
_spec.loader.exec_module(rm)


def _script(*argv: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "release_modes.py"), *argv],
                          capture_output=True, text=True, cwd=ROOT, timeout=timeout)


@pytest.mark.slow  # a real campaign of a release: CI runs it in its slow stage
def test_one_release_one_op_on_the_cpu(tmp_path):
    """A real campaign, tiny: its report is read back into the `all` row and one row per mode."""
    out = tmp_path / "runs"
    p = _script("--releases", "0.5.23", "--no-builtin", "--op", "num_kv_splits", "--device", "cpu",
                "--budget", "3", "--timeout", "240", "--out", str(out),
                "--json", str(tmp_path / "m.json"), "--markdown", str(tmp_path / "m.md"))
    assert p.returncode in (0, 1), p.stderr  # 1: the release's findings are no failure of the runner
    data = json.loads((tmp_path / "m.json").read_text())
    assert [(r["target"], r["op"]) for r in data["runs"]] == [("sglang==0.5.23", "num_kv_splits")]
    assert (out / "0.5.23" / "num_kv_splits.json").is_file()
    rows = data["rows"]
    assert rows[0]["feature"] == "all" and rows[0]["status"] == "ran" and rows[0]["cases"] > 0
    assert all(re.fullmatch(rm.MODE_FEATURES, r["feature"]) for r in rows[1:])
    assert {r["feature"] for r in rows[1:]} & {"max_num_seq:1024", "max_num_seq:2048", "max_num_seq:4096"}
    report = json.loads((out / "0.5.23" / "num_kv_splits.json").read_text())
    assert rows[0]["in_contract"] == report["findings_by_status"]["in_contract"]
    md = (tmp_path / "m.md").read_text()
    assert "| 0.5.23 | `num_kv_splits` | all (default) |" in md


def _fake_report(run, coverage: dict, findings: list[dict]) -> None:
    run.report.parent.mkdir(parents=True, exist_ok=True)
    run.report.write_text(json.dumps({"ops": {run.op: {"status": "ran", "cases": 100, "coverage": coverage,
                                                       "contract_variant": "default",
                                                       "by_status": {"in_contract": 80}}},
                                      "findings": findings}))


def test_findings_count_for_the_modes_their_saved_case_has(tmp_path, monkeypatch):
    run = rm.Run("sglang==0.5.23", "decode_metadata", tmp_path / "d.json", tmp_path / "c", tmp_path / "d.log")
    _fake_report(run, {"delta:verify": 10, "tombstone:full_v2p": 5, "dtype:seq_lens:int32": 100},
                 [{"op": "decode_metadata", "signature": "a", "contract_status": "in_contract"},
                  {"op": "decode_metadata", "signature": "b", "contract_status": "out_of_contract"},
                  {"op": "decode_metadata", "signature": "c", "contract_status": "stress"}])
    monkeypatch.setattr(rm, "_finding_features", lambda r: {"a": {"delta:verify"}, "b": {"delta:verify", "tombstone:full_v2p"}})
    rows = rm.rows_of(run, re.compile(rm.MODE_FEATURES))
    got = {r["feature"]: (r["cases"], r["in_contract"], r["out_of_contract"], r["stress"]) for r in rows}
    assert got == {"all": (100, 1, 1, 1), "delta:verify": (10, 1, 1, 0), "tombstone:full_v2p": (5, 0, 1, 0)}
    assert "| 0.5.23 | `decode_metadata` | all (default) | 100 (80) | 1 | 1 | 1 |" in rm.markdown(rows, "x")


def test_a_stuck_run_is_killed_and_the_others_reports_survive(tmp_path):
    stuck = rm.Run("sglang==0.5.23", "num_kv_splits", tmp_path / "s.json", tmp_path / "sc", tmp_path / "s.log",
                   command=[sys.executable, "-c", "import time; time.sleep(600)"])
    rm.execute(stuck, timeout=1, grace=0)
    assert stuck.killed and stuck.rc is not None and stuck.seconds < 60
    done = rm.Run("builtin", "num_kv_splits", tmp_path / "b.json", tmp_path / "bc", tmp_path / "b.log")
    _fake_report(done, {}, [])
    rows = rm.rows_of(stuck, re.compile(rm.MODE_FEATURES)) + rm.rows_of(done, re.compile(rm.MODE_FEATURES))
    assert [(r["target"], r["status"]) for r in rows] == [("sglang==0.5.23", "no report"), ("builtin", "ran")]


@pytest.mark.parametrize("argv, message", [
    (["--releases", "0.5.99"], "not an SGLang release kvfuzz knows"),
    (["--releases", "", "--no-builtin"], "no target"),
    (["--op", "nope"], "no op nope"),
    (["--budget", "0"], "must be > 0"),
    (["--parallel", "0"], "--parallel >= 1"),
    (["--features", "("], "--features"),
])
def test_bad_input_is_one_line_and_exit_2(argv, message):
    p = _script(*argv, timeout=120)
    assert p.returncode == 2, p.stderr
    assert message in p.stderr and len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr


def test_the_runs_do_not_inherit_the_interpreter_the_op_listing_switched_on(monkeypatch):
    """Listing a release's ops loads it on the CPU (TRITON_INTERPRET=1 in this process); a CUDA
    run started with that would refuse to run compiled."""
    monkeypatch.setattr(rm, "BASE_ENV", {k: v for k, v in rm.BASE_ENV.items() if k != "TRITON_INTERPRET"})
    assert rm.ops_of("sglang==0.5.14")
    import os
    assert os.environ.get("TRITON_INTERPRET") == "1"
    env = rm.child_env()
    assert "TRITON_INTERPRET" not in env
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(ROOT)


def test_a_dry_run_plans_one_run_per_op_a_release_offers(tmp_path):
    p = _script("--releases", "0.5.14", "--device", "cuda", "--budget", "85", "--timeout", "115", "--dry-run",
                "--out", str(tmp_path), timeout=300)
    assert p.returncode == 0, p.stderr
    head, *commands = p.stdout.strip().splitlines()
    assert head == "22 runs, 1 at once, budget 85 s, timeout 115 s"  # 0.5.14's 9 ops, builtin's 13
    assert sum("--target sglang==0.5.14 " in c for c in commands) == 9
    assert not any("--op pa_page_table" in c and "0.5.14" in c for c in commands)  # 0.5.15 on
    assert all("--device cuda" in c and "--time-limit 115.0" in c and "--minimize-budget 0" in c for c in commands)
    assert not list(tmp_path.iterdir())
