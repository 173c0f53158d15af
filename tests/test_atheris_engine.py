"""The atheris engine: libFuzzer's bytes become kvfuzz's cases; the interpreted kernel's
branches are coverage; a finding is confirmed, minimized and saved as by the other engines;
the budget bounds a run; the fuzzing corpus persists."""

from __future__ import annotations

import importlib.util
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kvfuzz.engines.atheris_engine import decode, fuzz_op
from kvfuzz.jobs import merge_reports
from kvfuzz.strategies import GENERATORS
from kvfuzz.worker import WorkerExecutor

SPEC = "swa_spec_page_table"
ALL_A, ALL_B, MIXED = "block:all_a", "block:all_b", "block:mixed"
MUTANT = str(Path(__file__).resolve().parent / "fixtures" / "mutant_kernels.py")
needs_atheris = pytest.mark.skipif(importlib.util.find_spec("atheris") is None,
                                   reason="the [atheris] extra is not installed")


class NoReplay:
    """An executor for runs that must neither kill their fuzzing process nor find anything
    (the builtin kernels): nothing to replay, nothing to re-run."""

    def run(self, case, repeats=1, torch_ref=True):
        raise AssertionError(f"asked to re-run {case.digest()}: a crash or a finding")


@needs_atheris
def test_same_bytes_same_case():
    data = random.Random(1).randbytes(80)
    a, ka = decode(SPEC, data)
    b, kb = decode(SPEC, data)
    assert a == b and ka == kb
    assert decode(SPEC, b"")[0] == decode(SPEC, b"")[0]  # exhausted bytes: the simplest choices
    others = {decode(SPEC, random.Random(i).randbytes(80))[0].digest() for i in range(20)}
    assert len(others) > 10


def block_inputs() -> dict[frozenset, bytes]:
    """Inputs whose in-contract spec case takes exactly the given set of block paths."""
    rnd, out = random.Random(0), {}
    gen = GENERATORS[SPEC]
    for _ in range(3000):
        data = rnd.randbytes(64)
        case, _ = decode(SPEC, data, in_contract_only=True)
        out.setdefault(frozenset(f for f in gen.all_features(case) if f.startswith("block:")), data)
    return out


@pytest.mark.slow  # campaign-sized: `pytest -m slow`
@needs_atheris
def test_kernel_block_paths_are_distinct_coverage(tmp_path, seed_path, device):
    """Only the kernels are instrumented (not kvfuzz, not the host code), so every edge
    libFuzzer counts is a kernel branch: adding an input that takes one more of the spec
    kernel's block paths (all-A, all-B, mixed) adds coverage."""
    if device != "cpu":
        pytest.skip("kernel lines run only under the interpreter")
    inputs = block_inputs()
    b, m, am = inputs[frozenset({ALL_B})], inputs[frozenset({MIXED})], inputs[frozenset({ALL_A, MIXED})]

    def cov(*datas: bytes) -> int:
        corpus = tmp_path / f"c{len(list(tmp_path.iterdir()))}"
        corpus.mkdir()
        for i, data in enumerate(datas):
            (corpus / f"in{i}").write_bytes(data)
        stats, _ = fuzz_op(SPEC, worker, target=str(seed_path), device=device, seed=0, budget_s=120,
                               max_cases=100, corpus=corpus, in_contract_only=True, instrument=("kernels",),
                               libfuzzer_args=("-runs=0",))  # run the corpus, mutate nothing
        assert stats.engine["instrumented_kernels"] == 4 and stats.engine["instrumented_host_functions"] == 0
        assert stats.engine["lives"] == 1 and stats.not_target == 0
        return stats.engine["cov"]

    worker = WorkerExecutor(str(seed_path), device)  # re-runs what the seed gets wrong in these cases
    try:
        with_b, with_bm, with_am, with_abm = cov(b), cov(b, m), cov(am, m), cov(am, b, m)
    finally:
        worker.close()
    assert with_b > 0
    assert with_bm > with_b  # the mixed block's branch
    assert with_abm > with_bm  # the all-A block's branch
    assert with_abm > with_am  # the all-B block's branch


@pytest.mark.slow
@needs_atheris
def test_campaign_finds_planted_defect_and_saves_replayable_minimized_case(tmp_path, device):
    """A finding goes the same way as the other engines': confirmed in a fresh worker, saved,
    minimized by kvfuzz's reducer and saved again; the saved case replays with its signature."""
    from kvfuzz.campaign import CampaignConfig, run_campaign
    from kvfuzz.corpus import DirectoryCorpus
    from kvfuzz.replay import replay

    cfg = CampaignConfig(ops=["decode_metadata"], target=MUTANT, device=device, budget_s=20, engine="atheris", confirm_tries=2,
                         minimize_budget_s=3, campaign_dir=tmp_path / "campaign", report=tmp_path / "r.json")
    result = run_campaign(cfg)
    # the two deterministic planted defects (the random-row one may replay either way); 20 s, not
    # less: libFuzzer's stream depends on time, and a loaded 2-core host runs few cases in 8 s
    planted = [x for x in result.saved if x.found.finding.kind in ("invalid_accepted", "input_modified")]
    assert planted, [x.found.finding.signature for x in result.saved]
    for x in planted:
        assert x.path is not None and x.confirmation.confirmed and x.minimized_confirmed in (True, None)
        saved = DirectoryCorpus(tmp_path / "campaign" / "corpus").load(x.path.name)
        assert saved.origin == "atheris" and saved.case == x.case
        assert x.case.size_key() <= x.found.first.size_key()
        assert replay(saved, device=device).same_defect
    report = result.report()["ops"]["decode_metadata"]["engine"]
    # a plain torch target: every edge is kvfuzz's own code or the target's host function
    assert report["instrumented_kernels"] == 0 and report["instrumented_host_functions"] == 1
    assert report["execs"] > 0 and report["execs_per_s"] > 0 and report["cov"] > 0
    assert report["corpus"] == str(tmp_path / "campaign" / "atheris" / "decode_metadata")
    assert report["corpus_units"] > 0


@pytest.mark.slow  # campaign-sized: `pytest -m slow`
@needs_atheris
def test_budget_bounds_a_run_and_the_corpus_is_reused(tmp_path, device):
    corpus = tmp_path / "corpus"
    runs = []
    for _ in range(2):
        t = time.monotonic()
        stats, _ = fuzz_op("num_kv_splits", NoReplay(), target="builtin", device=device, seed=3, budget_s=6,
                           max_cases=10**6, corpus=corpus)
        runs.append((time.monotonic() - t, stats))
    for seconds, stats in runs:
        # libFuzzer is told what is left of the budget once its process has started (it would
        # run forever otherwise); the wall-clock bound is loose: this host is shared
        assert len(stats.engine["max_total_time"]) == 1 and 1 <= stats.engine["max_total_time"][0] <= 6
        assert seconds < 6 + 60
        assert stats.cases > 0 and stats.engine["lives"] == 1 and stats.not_target == 0
    first_units = runs[0][1].engine["corpus_units"]
    assert first_units > 0 and runs[1][1].engine["corpus_units"] >= first_units


@pytest.mark.thorough  # seconds of processes and campaigns: CI's thorough stage
@needs_atheris
def test_max_cases_bounds_a_run(tmp_path, device):
    stats, _ = fuzz_op("num_kv_splits", NoReplay(), target="builtin", device=device, seed=0, budget_s=300,
                       max_cases=25, corpus=tmp_path)
    assert 0 < stats.cases <= 25 and stats.seconds < 200  # -runs ended it, not the budget


def test_cli_without_the_extra_is_one_line_exit_2(tmp_path):
    code = ("import sys; sys.modules['atheris'] = None; from kvfuzz.cli import main; "
            "sys.exit(main(['fuzz', '--engine', 'atheris', '--budget', '1', '--device', 'cpu']))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert p.stderr.strip().splitlines() == [p.stderr.strip()] and "[atheris] extra" in p.stderr


def test_shard_reports_merge_engine_figures():
    def report(execs, rate, cov):
        return {"seconds": 10.0, "cases": execs, "findings": [], "ops": {SPEC: {
            "cases": execs, "engine": {"execs": execs, "execs_per_s": rate, "lives": 1, "cov": cov, "ft": cov}}}}
    merged = merge_reports([report(100, 10.0, 40), report(50, 5.0, 60)], jobs=2)["ops"][SPEC]["engine"]
    assert merged == {"execs": 150, "execs_per_s": 15.0, "lives": 2, "cov": 60, "ft": 60}


@pytest.mark.slow  # CI's slow stage runs it (.ci/run)
@needs_atheris
def test_a_finding_counts_only_if_the_worker_shows_it_too(tmp_path, device):
    """The fuzzing process runs the planted defects; the re-run goes to an executor of the
    builtin kernels, which has none: nothing counts, and the signatures are `fuzzer_only`."""
    from kvfuzz.worker import InProcessExecutor

    found_new = []
    stats, found = fuzz_op("decode_metadata", InProcessExecutor("builtin", device), target=MUTANT, device=device,
                           seed=0, budget_s=10, max_cases=300, corpus=tmp_path, on_new=found_new.append)
    assert found == {} and found_new == []
    assert stats.engine["fuzzer_only"] and all(s.startswith("decode_metadata:") for s in stats.engine["fuzzer_only"])
