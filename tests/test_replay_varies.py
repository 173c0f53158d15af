"""A saved case whose verdict varies by nature (a read of stray memory: `nondeterministic`) is
judged by `kvfuzz replay` and the pytest plugin over several runs: every replay gives one exit
code (1 while the defect shows in any run) and says in how many runs it showed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import cases
from kvfuzz.cli import main
from kvfuzz.corpus import SavedCase, environment_versions, write_case_dir
from kvfuzz.findings import Finding
from kvfuzz.judge import Verdict
from kvfuzz.replay import RUNS, Replayed, check_runs, render

REPO = Path(__file__).resolve().parent.parent
STRAY = REPO / "tests" / "fixtures" / "stray_read_kernels.py"
SIG = "decode_metadata:swa:nondeterministic:swa_page_table:rerun"

# the stray-read kernel, where memory past the SWA mapping changes at every fourth call only: a
# case's two calls agree in some runs and differ in others, as a GPU's stray reads do
SOMETIMES = f'''
import importlib.util, itertools
_spec = importlib.util.spec_from_file_location("stray_read_kernels", {str(STRAY)!r})
_m = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_m)
_calls = itertools.count()
_m._stray_value = lambda: 1_000_000 if next(_calls) % 4 == 3 else 0
normal_decode_set_metadata = _m.normal_decode_set_metadata
'''


def finding(kind: str, tensor: str = "swa_page_table", where: str = "rerun") -> Finding:
    return Finding(kind, "decode_metadata", "swa", tensor, where, "m")


def saved_case(target: str, kind: str = "nondeterministic") -> SavedCase:
    case = cases.decode(ps=4, swa=True, B=1)
    rtt = case.values["req_to_token"].copy()
    rtt[case.values["req_pool_indices"][0], 0] = case.tensors["full_to_swa_index_mapping"].shape[0]  # past it
    case = case.replace(values={**case.values, "req_to_token": rtt})
    return SavedCase(case=case, finding=finding(kind), target=target, device="cpu",
                     versions=environment_versions(), origin="hypothesis", expected="xfail",
                     reason="reads past the SWA mapping")


class Fake:
    """A checker whose runs give the verdicts listed, one a run."""

    def __init__(self, *runs: list[Finding]) -> None:
        self.runs = list(runs)

    def prepare(self, case):
        return case

    def check(self, case, repeats=1):
        return Verdict("out_of_contract", ["r"], list(self.runs.pop(0)))


def test_a_varying_verdict_is_judged_over_runs_and_every_finding_counts():
    read = finding("out_of_bounds_read", "full_to_swa_index_mapping", "after")
    nd = finding("nondeterministic")
    runs = [[nd], [], [nd, read], [], [nd]]
    verdict, n, shown, failing = check_runs(Fake(*runs), None, saved_case("x.py"), runs=5)
    assert (n, failing) == (5, 3)
    assert verdict.signatures() == [nd.signature, read.signature]
    assert shown == {nd.signature: 3, read.signature: 1}
    text = render(Replayed(saved_case("x.py"), "x.py", "cpu", verdict, "file", n, shown, failing))
    assert "verdict  FAIL: 2 finding(s), shown in 3 of 5 runs (its runs differ by nature)" in text
    assert f"  out_of_bounds_read: {read.signature}  (shown in 1 of 5 runs)" in text


def test_a_varying_case_that_shows_nothing_passes_after_every_run():
    verdict, n, shown, failing = check_runs(Fake(*[[]] * RUNS), None, saved_case("x.py"))
    assert (n, failing, verdict.failed) == (RUNS, 0, False)
    text = render(Replayed(saved_case("x.py"), "x.py", "cpu", verdict, "file", n, shown, failing))
    assert f"verdict  PASS: no findings in {RUNS} runs" in text


def test_a_deterministic_case_runs_once():
    """A mismatch saved and shown needs no second run: what one run shows, every run shows."""
    f = Fake([finding("mismatch", where="all")])
    verdict, n, shown, failing = check_runs(f, None, saved_case("x.py", "mismatch"))
    assert (n, failing, len(f.runs)) == (1, 1, 0)
    assert "shown in" not in render(Replayed(saved_case("x.py", "mismatch"), "x.py", "cpu", verdict, "f", n,
                                             shown, failing))


@pytest.mark.slow  # campaign-sized: CI's slow stage runs it (.ci/run)
def test_ten_replays_of_a_stray_read_case_give_one_exit_code(tmp_path, device, capsys):
    """One replay judged by its first run alone passed where that run's two calls read the same
    stray value (exit 0 in some replays, 1 in others); over the runs, each replay fails."""
    if device != "cpu":
        pytest.skip("the kernel is plain torch on the host")
    kernel = tmp_path / "sometimes.py"
    kernel.write_text(SOMETIMES)
    case_dir = tmp_path / "case"
    case_dir.mkdir()
    write_case_dir(saved_case(str(kernel)), case_dir)
    codes, verdicts = [], []
    for _ in range(10):
        codes.append(main(["replay", str(case_dir), "--device", "cpu", "--in-process"]))
        out = capsys.readouterr().out
        verdicts.append(next(line for line in out.splitlines() if line.startswith("verdict")))
    assert codes == [1] * 10, (codes, verdicts)
    assert all(f"of {RUNS} runs (its runs differ by nature)" in v for v in verdicts), verdicts
    # the runs do differ: not every run of a replay shows it
    assert any(f"shown in {RUNS} of {RUNS}" not in v for v in verdicts), verdicts
