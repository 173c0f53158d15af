"""scripts/mode_soak.py: every op x mode the target's ops give, one `--feature` campaign each,
and a table that sums the invocations of the same command."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("mode_soak", ROOT / "scripts" / "mode_soak.py")
ms = importlib.util.module_from_spec(_spec)
sys.modules["mode_soak"] = ms  # dataclasses look their module up
_spec.loader.exec_module(ms)

TWO = "max_num_seq:(1024|2048)"  # two modes of num_kv_splits, each decided by the class


def _script(*argv: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "mode_soak.py"), *argv],
                          capture_output=True, text=True, cwd=ROOT, timeout=timeout)


@pytest.mark.nokernel
def test_the_pairs_are_the_modes_each_op_gives(tmp_path):
    pairs = ms.pairs_of("builtin", ["decode_metadata", "num_kv_splits"], re.compile(ms.MODE_FEATURES), 0, tmp_path)
    got = {(p.op, p.mode) for p in pairs}
    assert {("num_kv_splits", f"max_num_seq:{n}") for n in (1024, 2048, 4096)} <= got
    assert {("decode_metadata", "delta:verify"), ("decode_metadata", "tombstone:full_v2p")} <= got
    assert all(re.fullmatch(ms.MODE_FEATURES, m) for _, m in got)
    assert not {m for op, m in got if op == "decode_metadata"} & {"mode:mapped", "max_num_seq:1024"}
    assert all(p.classes > 0 and p.dir == tmp_path / ms.dir_name(p.op, p.mode) for p in pairs)


@pytest.mark.nokernel
def test_dry_run_lists_the_pairs_and_their_commands(tmp_path):
    p = _script("--op", "num_kv_splits", "--modes", TWO, "--budget", "5", "--out", str(tmp_path), "--dry-run")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0].startswith("2 pairs (op x mode), 2 to run")
    assert [ln.split("\t")[:2] for ln in lines[1:]] == [["num_kv_splits", "max_num_seq:1024"],
                                                        ["num_kv_splits", "max_num_seq:2048"]]
    assert f"--feature max_num_seq:1024 --device auto --budget 5 --seed 0 --campaign {tmp_path}/" in lines[1]
    assert not list(tmp_path.iterdir())  # nothing ran


@pytest.mark.nokernel
@pytest.mark.parametrize("argv, says", [
    (["--op", "no_such_op"], "has no no_such_op"),
    (["--modes", "("], "--modes is not a regular expression"),
    (["--op", "num_kv_splits", "--modes", "tombstone:.*"], "gives a mode matching"),
    (["--budget", "0"], "must be > 0"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, argv, says):
    p = _script(*argv, "--out", str(tmp_path), "--dry-run")
    assert p.returncode == 2 and says in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr


def _report(path: Path, op: str, cases: int, seconds: float, findings=()) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"seconds": seconds + 5, "findings": list(findings), "ops": {op: {
        "status": "ran", "cases": cases, "seconds": seconds,
        "feature_filter": {"drawn": cases + 1, "dropped": 1}}}}))


@pytest.mark.nokernel
def test_the_row_sums_the_invocations_and_counts_a_signature_once(tmp_path):
    pair = ms.Pair("decode_metadata", "delta:verify", tmp_path / "d")
    f = {"op": "decode_metadata", "signature": "s", "contract_status": "out_of_contract"}
    _report(pair.dir / "report-1.json", pair.op, 100, 300.0, [f])
    _report(pair.dir / "report-2.json", pair.op, 50, 280.5, [f])
    (pair.dir / "report-3.json").write_text('{"cut off')  # a report cut mid-write counts nothing
    pair.reports = ms.reports_of(pair)
    row = ms.row_of(pair)
    assert (row["invocations"], row["cases"], row["fuzz_s"], row["wall_s"]) == (2, 150, 580.5, 590.5)
    assert (row["in_contract"], row["out_of_contract"], row["drawn"], row["dropped"]) == (0, 1, 152, 2)
    md = ms.markdown([row], "cmd", "builtin", "cuda")
    assert "| `decode_metadata` | `delta:verify` | 150 | 0 | 1 | 580.5 | 590.5 |" in md


@pytest.mark.nokernel
def test_total_runs_only_what_a_pair_lacks(tmp_path):
    _report(tmp_path / ms.dir_name("num_kv_splits", "max_num_seq:1024") / "report-1.json", "num_kv_splits", 9, 600.0)
    _report(tmp_path / ms.dir_name("num_kv_splits", "max_num_seq:2048") / "report-1.json", "num_kv_splits", 9, 450.0)
    p = _script("--op", "num_kv_splits", "--modes", TWO, "--budget", "300", "--total", "600",
                "--out", str(tmp_path), "--dry-run")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0].startswith("2 pairs (op x mode), 1 to run")
    assert lines[1].endswith("(done: 600 s)")
    assert "--budget 150 " in lines[2]
    assert f"--report {tmp_path}/num_kv_splits__max_num_seq:2048/report-2.json" in lines[2]


@pytest.mark.slow
@pytest.mark.interpreter
def test_two_pairs_run_twice_and_the_table_sums_both_invocations(tmp_path):
    out, table = tmp_path / "soak", tmp_path / "t.json"
    argv = ("--op", "num_kv_splits", "--modes", TWO, "--device", "cpu", "--budget", "2", "--parallel", "2",
            "--timeout", "200", "--out", str(out), "--json", str(table), "--markdown", str(tmp_path / "t.md"))
    for n in (1, 2):
        p = _script(*argv)
        assert p.returncode == 0, p.stdout + p.stderr
        rows = json.loads(table.read_text())["rows"]
        assert [(r["mode"], r["invocations"]) for r in rows] == [("max_num_seq:1024", n), ("max_num_seq:2048", n)]
    for r in rows:
        reports = [json.loads((Path(r["dir"]) / f"report-{n}.json").read_text()) for n in (1, 2)]
        ops = [d["ops"]["num_kv_splits"] for d in reports]
        assert all(o["cases"] > 0 and o["coverage"][r["mode"]] == o["cases"] for o in ops)
        assert r["cases"] == sum(o["cases"] for o in ops)
        assert r["fuzz_s"] == round(sum(o["seconds"] for o in ops), 1)
        # the second invocation continued the campaign's stream where the first stopped
        assert reports[1]["positions"]["num_kv_splits"] > reports[0]["positions"]["num_kv_splits"] > 0
        assert (r["in_contract"], r["out_of_contract"]) == (0, 0)
    assert "| `num_kv_splits` | `max_num_seq:1024` |" in (tmp_path / "t.md").read_text()
