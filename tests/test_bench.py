"""`kvfuzz bench`: the figures it reports are consistent with each other, with one job and
with several shards at once (the speeds themselves depend on the host and are not tested)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from kvfuzz import bench
from kvfuzz.bench import render, run_bench

STAGES_OF_THE_LOOP = {"generate", "judge", "submit", "wait", "worker launch", "worker transfer"}


def check_op(r: dict, device: str) -> None:
    assert r["cases"] > 0 and r["bare_per_s"] > 0 and r["checked_per_s"] > 0 and r["checked_one_job_per_s"] > 0
    assert r["ratio"] == pytest.approx(r["checked_per_s"] / r["bare_per_s"], abs=2e-3)
    if device == "cpu":
        assert r["compiles_per_1000"] == {"cold": 0.0, "warm": 0.0}  # the interpreter compiles nothing
    else:  # the warm pass runs the cold pass's cases again: nothing left to compile
        assert r["compiles_per_1000"]["warm"] == 0.0
    assert r["variants"] > 0 and r["variants_per_1000"] == round(1000 * r["variants"] / r["cases"], 2)
    assert STAGES_OF_THE_LOOP <= set(r["stages"])
    assert r["checked_unpacked_per_s"] > 0 and r["cases_per_launch"] >= 1.0
    assert set(r["host_us_per_case"]) == {"unpacked", "packed"}
    assert set(r["host_us_per_case"]["packed"]) == set(bench.HOST_STAGES)


def check_jobs(r: dict, jobs: int, device: str) -> None:
    """The shards against one job on the very same cases (on the CPU): a speed-up of at most
    the shards' count (with slack for a host busier while the alone passes ran), at least a
    fraction of one."""
    if device == "cpu":
        assert r["jobs_speedup"] is not None and 0.2 < r["jobs_speedup"] < jobs * 1.25
    else:
        assert r["jobs_speedup"] is None
    # the ratio is against the bare calls on the shards' own cases; the one-process mix's figure kept
    assert r["bare_cases"] >= jobs and r["bare_one_job_per_s"] > 0
    # each window's rate and each bare pass's, for the spread; the figures lie within them
    w = r["window_rates"]
    assert set(w) == {"unpacked", "packed"} and all(len(v) == bench.ROUNDS and min(v) > 0 for v in w.values())
    assert min(w["packed"]) * 0.99 <= r["checked_per_s"] <= max(w["packed"]) * 1.01
    assert min(w["unpacked"]) * 0.99 <= r["checked_unpacked_per_s"] <= max(w["unpacked"]) * 1.01
    # per launch, packing, proofs and host work: the windows' own, the one process's kept apart
    assert set(r["one_job"]) == {"cases_per_launch", "packed_cases_per_launch", "packed_share", "device_clean_share",
                                 "host_us_per_case"}
    assert r["cases_per_launch"] >= 1.0 and 0.0 <= r["packed_share"] <= 1.0
    assert set(r["device_clean_share"]) == set(r["host_us_per_case"]) == {"unpacked", "packed"}
    assert len(r["bare_rates"]) == bench.ROUNDS and r["bare_per_s"] == max(r["bare_rates"])


def test_the_jobs_bare_mix_is_the_shards_cases():
    """With shards, the bare calls run each shard's first cases (its own classes of the pool),
    not the one-job stream's: a figure over other classes would not be the checked one's peer."""
    from kvfuzz.engines import batch_engine

    shards = [((1, 3), 4), ((2, 3), 2), ((3, 3), 9)]
    bare = bench._Bare("decode_metadata", "builtin", "cpu", 7, 100, "small", None, shards=shards)
    want = []
    for shard, n in shards:
        s = bench._stream_seed(7, shard)
        want += [c for _, c in batch_engine.case_stream("decode_metadata", s, n, "cpu", in_contract_only=True,
                                                        shard=shard, pool_seed=7, sizes="small")]
    got = [c for c, _ in bare.inputs]
    assert [c.values.keys() for c in got] == [c.values.keys() for c in want]
    assert all(a.tensors == b.tensors and a.scalars == b.scalars for a, b in zip(got, want)) and len(got) == len(want)
    one = [c for _, c in batch_engine.case_stream("decode_metadata", 7, len(want), "cpu", in_contract_only=True,
                                                  sizes="small")]
    assert any(a.tensors != b.tensors for a, b in zip(got, one))  # other classes than the one-job stream's
    capped = bench._Bare("decode_metadata", "builtin", "cpu", 7, 6, "small", None, shards=shards)
    assert len(capped.inputs) == 2 + 2 + 2  # MAX_BARE shared out: at most n // shards each


def test_the_jobs_bare_figure_is_over_exactly_the_cases_the_windows_checked(monkeypatch):
    """A window that ends inside a pass checked that pass's first cases only: the bare figure
    times each pass's count of its shard's first cases (whole passes and cut prefixes), not
    every case, so a slow class's tail cannot flatter the ratio; a count past the cases held is
    timed at their mean."""
    shards = [((1, 2), 6), ((2, 2), 4)]
    bare = bench._Bare("decode_metadata", "builtin", "cpu", 7, 100, "small", None, shards=shards)
    assert bare.spans == {(1, 2): (0, 6), (2, 2): (6, 4)}
    cost = {id(c): 0.01 * (i + 1) for i, (c, _) in enumerate(bare.inputs)}  # later cases cost more
    timed = []

    def one_pass(self, inputs=None):
        inputs = self.inputs if inputs is None else inputs
        timed.append(len(inputs))
        return sum(cost[id(c)] for c, _ in inputs)

    monkeypatch.setattr(bench._Bare, "_one_pass", one_pass)
    # shard 1: a whole pass of 6, then a prefix of 2; shard 2: a prefix of 1
    rate = bare.windows_rate({(1, 2): [6, 2, 0], (2, 2): [1]})
    seconds = (0.01 + 0.02 + 0.03 + 0.04 + 0.05 + 0.06) + (0.01 + 0.02) + 0.07
    assert rate == pytest.approx(9 / seconds)
    assert sorted(timed) == [1, 2, 6]  # each distinct count timed once, on the CPU
    # all the cases, as the figure was before, would be 10 cases in 0.55 s: slower than the windows' mix here
    assert 10 / 0.55 < rate
    # a count past the cases held (a shard's cap): at the held cases' mean
    timed.clear()
    assert bare.windows_rate({(2, 2): [8]}) == pytest.approx(8 / ((0.07 + 0.08 + 0.09 + 0.10) * 8 / 4))
    assert bench._widest([((1, 2), 3), ((2, 2), 9)], [((1, 2), 5), ((2, 2), 2)]) == [((1, 2), 5), ((2, 2), 9)]


@pytest.mark.slow
@pytest.mark.parametrize("jobs", [1, 2])
def test_bench_reports_consistent_figures(jobs, device):
    # the session's device: a process that runs CUDA kernels cannot switch to the interpreter
    result = run_bench(["num_kv_splits"], "builtin", device, budget_s=max(6.0, bench.min_budget(1, jobs)), seed=1,
                       jobs=jobs)
    assert result["jobs"] == jobs and result["device"] == device
    r = result["ops"]["num_kv_splits"]
    check_op(r, device)
    if jobs > 1:
        check_jobs(r, jobs, device)
        pj = r["production"]["jobs"]  # its production classes as shards too, against bare calls on their cases
        assert pj["cases"] > 0 and pj["bare_cases"] >= jobs and "invalid" not in pj
        assert pj["ratio"] == pytest.approx(pj["checked_per_s"] / pj["bare_per_s"], abs=2e-3)
        assert min(pj["window_rates"]["packed"]) * 0.99 <= pj["checked_per_s"] <= max(pj["window_rates"]["packed"]) * 1.01
    else:
        assert r["jobs_speedup"] is None and "jobs" not in r["production"]
    text = render(result)
    assert ("production, 2 shards" in text) == (jobs == 2)
    assert "num_kv_splits" in text and ("2 shards at once" in text) == (jobs == 2)
    assert ("vs one job" in text) == (jobs == 2)


def test_checked_and_bare_passes_alternate_and_each_figure_sums_its_rounds(monkeypatch, device):
    """A busy spell of a shared host must weigh on every side of the ratios: after the first
    (compiling) pass, each round is a warm checked pass over the same cases unpacked, one packed
    and, right after them, a bare pass over them; the bare figure is all its rounds' calls over
    their seconds."""
    events, bare_times = [], iter([0.5, 1.0, 2.0])
    real_run = bench._run

    def run(op, executor, device_, seed, shard, max_cases, budget_s, on_case=None, pack=None, sizes=None,
            variant=None):
        stats = real_run(op, executor, device_, seed, shard, max_cases, budget_s, on_case, pack, sizes, variant)
        events.append(("unpacked" if pack == 1 else "packed", stats.cases))
        return stats

    def bare_pass(self):
        events.append(("bare", len(self.inputs)))
        return next(bare_times)

    monkeypatch.setattr(bench, "_run", run)
    monkeypatch.setattr(bench._Bare, "pass_seconds", bare_pass)
    first, _, unpacked, packed, bare_per_s = bench._checked("q8kv8_topk_length", "builtin", device, 2, 1.5, 40, False,
                                                            rounds=3)
    n = first.cases
    assert n > 0 and [w.cases for w in unpacked] == [w.cases for w in packed] == [n, n, n]
    assert events == [("packed", n)] + [("unpacked", n), ("packed", n), ("bare", n)] * 3
    assert bare_per_s == pytest.approx(3 * n / 3.5)
    assert all(w.engine["launches"] == n for w in unpacked)  # one launch a case
    assert all(w.engine["launches"] < n and w.engine["packed_cases"] for w in packed), [w.engine for w in packed]


def test_figures_report_both_passes_cases_per_launch_and_host_work_by_stage():
    from kvfuzz.engines.common import OpStats

    def stats(cases, seconds, launches, packed=0, packs=0):
        s = OpStats("x", cases=cases, seconds=seconds)
        s.engine.update(launches=launches, device_clean=launches // 2,
                        **({"packed_cases": packed, "packed_launches": packs} if packs else {}))
        s.stages.update({"generate": 0.001 * cases, "materialize": 0.002 * cases, "submit": 0.001 * cases,
                         "worker launch": 0.01 * launches, "oracle (numpy)": 0.003 * cases, "judge": 0.004 * cases,
                         "wait": 1.0})
        return s

    f = bench._figures([stats(100, 2.0, 100)], [stats(100, 1.0, 20, 96, 16)], bare=50.0)
    assert f["checked_unpacked_per_s"] == 50.0 and f["checked_per_s"] == 100.0 and f["packed_vs_unpacked"] == 2.0
    assert f["ratio_unpacked"] == 1.0 and f["ratio"] == 2.0
    assert f["cases_per_launch"] == 5.0 and f["packed_cases_per_launch"] == 6.0 and f["packed_share"] == 0.96
    assert f["device_clean_share"] == {"unpacked": 0.5, "packed": 0.5}
    us = f["host_us_per_case"]
    assert us["unpacked"] == {"generate": 1000.0, "materialize": 3000.0, "launch": 10000.0, "oracle": 3000.0,
                              "judge": 4000.0}
    assert us["packed"]["launch"] == 2000.0  # a fifth of the launches: a fifth of the launch time a case


@pytest.mark.slow  # campaign-sized: `pytest -m slow`
def test_bench_cli_writes_its_report_and_refuses_bad_input(tmp_path, device):
    bad = subprocess.run([sys.executable, "-m", "kvfuzz.cli", "bench", "--device", device, "--jobs", "0"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "--jobs" in bad.stderr
    report = tmp_path / "bench.json"
    ok = subprocess.run([sys.executable, "-m", "kvfuzz.cli", "bench", "--device", device, "--op", "swa_spec_page_table",
                         "--budget", "4", "--report", str(report)], capture_output=True, text=True, timeout=300)
    assert ok.returncode == 0, ok.stderr
    check_op(json.loads(report.read_text())["ops"]["swa_spec_page_table"], device)


def test_render_shows_the_speedup_where_measured_and_a_dash_where_not():
    op = {"cases": 8, "bare_per_s": 10.0, "checked_per_s": 5.0, "checked_unpacked_per_s": 4.0,
          "cases_per_launch": 2.0, "ratio": 0.5, "variants_per_1000": 1.0,
          "compiles_per_1000": {"cold": 0.0, "warm": 0.0}, "stages": {}, "jobs_speedup": 1.87}
    result = {"target": "builtin", "device_name": "x", "cold_cache": True, "jobs": 2, "ops": {"num_kv_splits": op}}
    assert render(result).splitlines()[2].endswith("1.87x")
    op["jobs_speedup"] = None  # a GPU bench measures no alone passes
    assert render(result).splitlines()[2].endswith(" -")
    op.update(window_rates={"unpacked": [3.0, 4.0, 5.0], "packed": [4.5, 5.0, 5.5]}, bare_rates=[9.0, 10.0, 9.5])
    assert "  num_kv_splits spread: checked/s by window unpacked 3.0-5.0, packed 4.5-5.5; bare/s by pass 9.0-10.0" \
        in render(result).splitlines()


def test_bare_calls_run_on_a_workers_torch_threads(monkeypatch, device):
    """Bare and checked calls run on as many torch threads (the worker's); the bench's own
    setting comes back after the pass."""
    import torch

    from kvfuzz.worker import TORCH_THREADS

    bare = bench._Bare("num_kv_splits", "builtin", device, 1, 4)
    seen = []
    monkeypatch.setattr(bare.target, "invoke", lambda *args: seen.append(torch.get_num_threads()))
    before = torch.get_num_threads()
    torch.set_num_threads(before + 1)
    try:
        bare.pass_seconds()
        assert seen and set(seen) == {TORCH_THREADS}
        assert torch.get_num_threads() == before + 1
    finally:
        torch.set_num_threads(before)


def _descendants(pid: int) -> list[int]:
    children = Path(f"/proc/{pid}/task/{pid}/children")
    kids = [int(x) for x in children.read_text().split()] if children.exists() else []
    return kids + [d for k in kids for d in _descendants(k)]


def _segments(pids: list[int]) -> set[str]:
    """The POSIX shared-memory segments these processes have mapped (/dev/shm/NAME)."""
    names = set()
    for pid in pids:
        try:
            maps = Path(f"/proc/{pid}/maps").read_text()
        except OSError:  # gone meanwhile
            continue
        names.update(line.split("/dev/shm/", 1)[1].split(" ")[0] for line in maps.splitlines() if "/dev/shm/kvfuzz-" in line)
    return names


# the bench's process as `kvfuzz bench --jobs 2` runs its shards (cli.main: SIGTERM is Ctrl-C)
SHARDS_THEN_SIGTERM = """
import signal, sys
from kvfuzz import bench
signal.signal(signal.SIGTERM, signal.default_int_handler)
try:
    bench._checked_jobs("num_kv_splits", "builtin", "cpu", 1, 120.0, True, 2)
except KeyboardInterrupt:
    sys.exit(130)
"""


@pytest.mark.slow  # campaign-sized: `pytest -m slow`
@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="reads the process tree from /proc")
def test_a_terminated_jobs_bench_stops_its_shards_and_unlinks_their_shared_memory():
    """SIGTERM to the bench alone (its shards and their workers are not signalled) while its
    shards run: it exits, no shard or worker outlives it, and every shared-memory segment the
    shards had mapped is unlinked by kvfuzz, not left to Python's resource tracker (which warns
    of a leak) or to a reboot."""
    proc = subprocess.Popen([sys.executable, "-c", SHARDS_THEN_SIGTERM], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline, seen, tree = time.monotonic() + 120, set(), []
        while time.monotonic() < deadline and proc.poll() is None and len(seen) < 2:
            tree = _descendants(proc.pid)
            seen = _segments(tree)  # both shards with a batch in flight: their first pass runs
            time.sleep(0.05)
        assert len(seen) >= 2, "the shards never ran a batch"
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, err
    assert "leaked" not in err and "Traceback" not in err, err
    assert [name for name in seen if Path("/dev/shm", name).exists()] == []
    assert _gone(tree, within_s=15) == []


def _gone(pids: list[int], within_s: float) -> list[str]:
    """The status lines of those of `pids` still running (not zombies) after `within_s`."""
    deadline = time.monotonic() + within_s
    while True:
        alive = []
        for pid in pids:
            try:
                status = Path(f"/proc/{pid}/status").read_text()
            except OSError:
                continue
            state = next(line for line in status.splitlines() if line.startswith("State:"))
            if "zombie" not in state:
                alive.append(f"{pid} {state} {Path(f'/proc/{pid}/cmdline').read_bytes()[:80]!r}")
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.1)


@pytest.mark.slow
def test_sizes_small_measures_no_production_class(device):
    """`--sizes small`: an op whose pool has production-size classes gets no production figures
    (under the CPU's interpreter a production case takes minutes); the report says so."""
    from kvfuzz.targets import load_target, variant_for

    op = "flashinfer_kv_indices"
    assert bench._has_production(op, 1, variant_for(op, None, load_target("builtin", device)))
    result = run_bench([op], "builtin", device, budget_s=4.0, seed=1, sizes="small")
    assert result["sizes"] == "small" and "production" not in result["ops"][op]
    check_op(result["ops"][op], device)


def test_a_budget_too_short_for_the_jobs_windows_is_refused_before_anything_runs():
    """`--jobs` windows of a fraction of a second end before a shard's first case: the bench
    refuses such a budget up front, in one line, and says the least it takes."""
    from kvfuzz.errors import BadInput

    floor = bench.min_budget(2, 12)
    assert floor == 2 * 3 * bench.ROUNDS * bench.MIN_WINDOW_S and bench.min_budget(2, 1) == 0.0
    with pytest.raises(BadInput, match=r"--budget 3 is too short for 2 op\(s\) at --jobs 12.*at least 18") as err:
        run_bench(["num_kv_splits", "decode_metadata"], "builtin", "cpu", budget_s=3.0, jobs=12)
    assert "\n" not in str(err.value)


def _fake_passes(monkeypatch, first_cases: int, mix: list, windows: list[float], production=None) -> None:
    """The bench's passes replaced by figures: a first pass of `first_cases` cases; `--jobs`
    shards whose first passes checked `mix` and whose windows ran at `windows` (at production
    sizes: `production`'s (mix, windows), where given)."""
    from kvfuzz.engines.common import OpStats

    def stats(cases):
        s = OpStats("num_kv_splits", cases=cases, seconds=1.0, classes=1)
        s.engine.update(launches=cases)
        s.stages.update({"generate": 0.1})
        return s

    def checked(op, target, device, seed, budget_s, max_cases, isolate, rounds=0, baseline=None, pack=None,
                sizes=None, variant=None):
        first = stats(first_cases)
        passes = [stats(first_cases) for _ in range(rounds if first_cases else 0)]
        return first, 1, passes, passes, 50.0 if first_cases else 0.0

    def checked_jobs(op, target, device, seed, budget_s, isolate, jobs, baseline=None, variant=None, pack=None,
                     sizes="small"):
        m, w = (production if sizes == "production" else (mix, windows)) if production else (mix, windows)
        cases = sum(c for _, c in m)
        # the windows packed two cases a launch, where the one process's passes packed none
        return bench.Windows(cases, 1.0, Counter({"generate": 0.1}), None, m, w, {shard: [c] for shard, c in m},
                             Counter(launches=max(cases // 2, 1), packed_cases=cases, packed_launches=max(cases // 2, 1)))

    class Bare:
        def __init__(self, *a, **k):
            self.inputs = [None] * 4

        def pass_seconds(self):
            return 0.1

        def windows_rate(self, passes):
            return 40.0  # as 4 cases in 0.1 s

    monkeypatch.setattr(bench, "_checked", checked)
    monkeypatch.setattr(bench, "_checked_jobs", checked_jobs)
    monkeypatch.setattr(bench, "_Bare", Bare)


def test_figures_over_no_case_are_void_and_said_why_never_a_rate_of_0(monkeypatch):
    """A pass that checked nothing leaves its figures void (null, a dash in the table) with the
    reason, and `kvfuzz bench` writes what it measured and exits 2 in one line."""
    _fake_passes(monkeypatch, 0, [], [])
    r = run_bench(["num_kv_splits"], "builtin", "cpu", budget_s=8.0, sizes="small")["ops"]["num_kv_splits"]
    assert r["invalid"] == [f"the first pass checked no case in {8.0 / bench.COLD_SHARE:.2f} s",
                            "the warm-cache pass checked no case"]
    assert all(r[k] is None for k in ("bare_per_s", "checked_per_s", "ratio", "ratio_unpacked", "cases_per_launch"))
    assert r["compiles_per_1000"]["warm"] is None

    # shards: one whose first pass checked nothing, a window over no case
    _fake_passes(monkeypatch, 10, [((1, 2), 0), ((2, 2), 7)], [5.0, 0.0, 6.0])
    result = run_bench(["num_kv_splits"], "builtin", "cpu", budget_s=30.0, jobs=2, sizes="small")
    r = result["ops"]["num_kv_splits"]
    assert r["invalid"] == ["shard 1/2's first pass checked no case", "unpacked window 2 checked no case",
                            "packed window 2 checked no case"]
    assert r["ratio"] is None and r["checked_per_s"] is None and "window_rates" not in r
    assert bench.invalid(result) == ["num_kv_splits: " + "; ".join(r["invalid"])]
    row = render(result).splitlines()[2]
    assert row.split()[2:6] == ["-", "-", "-", "-"]  # bare, unpacked, checked, per launch
    assert "  VOID num_kv_splits: shard 1/2's first pass checked no case; unpacked window 2" in render(result)

    # a measure over cases is not void
    _fake_passes(monkeypatch, 10, [((1, 2), 5), ((2, 2), 7)], [5.0, 4.0, 6.0])
    r = run_bench(["num_kv_splits"], "builtin", "cpu", budget_s=30.0, jobs=2, sizes="small")["ops"]["num_kv_splits"]
    assert "invalid" not in r and r["checked_per_s"] > 0 and r["ratio"] > 0
    # per launch, packing and host work are the windows' own (12 cases in 6 launches, all packed),
    # the one process's (one launch a case) kept apart
    assert r["cases_per_launch"] == 2.0 and r["packed_share"] == 1.0 and r["packed_cases_per_launch"] == 2.0
    assert r["one_job"]["cases_per_launch"] == 1.0 and r["one_job"]["packed_share"] == 0.0
    assert r["host_us_per_case"]["packed"]["generate"] == pytest.approx(1e6 * 0.1 / 12, abs=0.1)


def test_the_bench_command_keeps_a_void_report_and_exits_2(monkeypatch, tmp_path, capsys):
    from kvfuzz import cli

    _fake_passes(monkeypatch, 0, [], [])
    report = tmp_path / "bench.json"
    rc = cli.main(["bench", "--device", "cpu", "--op", "num_kv_splits", "--budget", "8", "--sizes", "small",
                   "--report", str(report)])
    err = capsys.readouterr().err.splitlines()
    # one line of error, after the progress lines (each size as it was measured)
    assert rc == 2 and [line for line in err if not line.startswith("kvfuzz bench: ")] == err[-1:]
    assert err[-1].startswith("kvfuzz: error: --budget 8 too short: num_kv_splits: the first pass checked no case")
    saved = json.loads(report.read_text())
    assert saved["complete"] is True  # every op and size was measured, though void
    assert saved["ops"]["num_kv_splits"]["ratio"] is None and saved["ops"]["num_kv_splits"]["invalid"]


def test_a_bench_cut_short_keeps_what_it_measured_in_its_report(monkeypatch, tmp_path, capsys):
    """Each size is written to the report as it is measured and said on stderr: a scheduler's
    limit or Ctrl-C during the production shards leaves the small and one-process production
    figures in the report, marked incomplete, and the table of them on stdout."""
    from kvfuzz import cli

    _fake_passes(monkeypatch, 10, [((1, 2), 5), ((2, 2), 7)], [5.0, 4.0, 6.0])

    def cut(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(bench, "_production_jobs", cut)
    report = tmp_path / "bench.json"
    rc = cli.main(["bench", "--device", "cpu", "--op", "num_kv_splits", "--budget", "30", "--jobs", "2",
                   "--report", str(report)])
    out, err = capsys.readouterr()
    assert rc == 130 and err.splitlines()[-1] == "kvfuzz: interrupted"
    assert "kvfuzz bench: num_kv_splits: small sizes measured" in err
    assert "kvfuzz bench: num_kv_splits: production sizes measured" in err
    saved = json.loads(report.read_text())
    assert saved["complete"] is False
    r = saved["ops"]["num_kv_splits"]
    assert r["checked_per_s"] > 0 and r["production"]["cases"] == 10 and "jobs" not in r["production"]
    assert "cut short: the ops and sizes measured so far" in out and "num_kv_splits" in out


def test_production_sizes_are_measured_as_shards_too_and_void_where_a_window_checked_nothing(monkeypatch):
    """With `--jobs N` the production-size classes run as N shards at once as well (the figure a
    nightly job at production sizes gets), against bare calls on those shards' own cases; a
    window over no case leaves that figure void, the small classes' figures standing."""
    seen = []
    _fake_passes(monkeypatch, 10, [((1, 2), 5), ((2, 2), 7)], [5.0, 4.0, 6.0],
                 production=([((1, 2), 3), ((2, 2), 2)], [2.0, 2.5, 3.0]))
    real = bench._checked_jobs
    monkeypatch.setattr(bench, "_checked_jobs", lambda *a, **k: seen.append(k.get("sizes", "small")) or real(*a, **k))
    result = run_bench(["num_kv_splits"], "builtin", "cpu", budget_s=30.0, jobs=2, sizes="all")
    pj = result["ops"]["num_kv_splits"]["production"]["jobs"]
    assert seen == ["small", "small", "production"]  # unpacked and packed small windows, then production
    assert pj["cases"] == 5 and pj["checked_per_s"] == 5.0 and pj["bare_per_s"] == 40.0  # 4 bare inputs / 0.1 s
    assert pj["ratio"] == pytest.approx(5.0 / 40.0, abs=1e-3) and pj["window_rates"] == {"packed": [2.0, 2.5, 3.0]}
    assert set(pj["host_us_per_case"]["packed"]) == set(bench.HOST_STAGES) and "invalid" not in pj
    text = render(result)
    assert "  production, 2 shards" in text and "num_kv_splits production, 2 shards host us/case packed" in text

    _fake_passes(monkeypatch, 10, [((1, 2), 5), ((2, 2), 7)], [5.0, 4.0, 6.0],
                 production=([((1, 2), 3), ((2, 2), 0)], [2.0, 0.0, 3.0]))
    result = run_bench(["num_kv_splits"], "builtin", "cpu", budget_s=30.0, jobs=2, sizes="all")
    r = result["ops"]["num_kv_splits"]
    pj = r["production"]["jobs"]
    assert pj["invalid"] == ["shard 2/2's first pass checked no case", "window 2 checked no case"]
    assert pj["ratio"] is None and pj["checked_per_s"] is None and "window_rates" not in pj
    assert "invalid" not in r and r["ratio"] > 0  # the small classes' figures stand
    assert bench.invalid(result) == ["num_kv_splits production shards: " + "; ".join(pj["invalid"])]
    assert "VOID num_kv_splits production shards: shard 2/2" in render(result)
