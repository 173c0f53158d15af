"""The CPU mutants record (benchmarks/cpu-mutants-ci.json) holds: its command, run again, kills
every mutant the record lists as killed, each within twice the cases it took then (cases, not
seconds: the seed fixes them, whatever the host's speed). A change that makes kvfuzz slower at
finding these bugs fails here."""

from __future__ import annotations

import json
import shlex

import pytest

from kvfuzz.cli import build_parser, mutants_config
from kvfuzz.mutants import run_mutants

from conftest import REPO

pytestmark = pytest.mark.slow

RECORD = REPO / "benchmarks" / "cpu-mutants-ci.json"
SLACK_CASES = 16  # one CPU batch


def test_the_recorded_mutants_are_still_killed_within_twice_the_cases(tmp_path):
    record = json.loads(RECORD.read_text())
    argv = shlex.split(record["command"])
    assert argv[:2] == ["kvfuzz", "mutants"]
    args = build_parser().parse_args(argv[1:])
    cfg = mutants_config(args)
    cfg.workdir = tmp_path / "w"
    report = run_mutants(cfg)
    got = {m["key"]: m for m in report["mutants"]}
    assert set(record["killed"]) <= set(got), sorted(got)
    slower = {key: (got[key]["status"], got[key].get("found_at_case"), cases)
              for key, cases in record["killed"].items()
              if got[key]["status"] != "killed" or got[key]["found_at_case"] > 2 * cases + SLACK_CASES}
    assert not slower, slower
