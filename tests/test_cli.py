"""The command line: exit codes, one-line errors, reports, replay of saved cases."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from kvfuzz.cli import main
from kvfuzz.ops import CONTRACTS
from sampling import sampled


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


@pytest.mark.parametrize("value", ["lots", "-1", "1.5"])
def test_a_malformed_device_oracle_setting_is_one_line_and_exit_2(value, monkeypatch):
    monkeypatch.setenv("KVFUZZ_DEVICE_ORACLE_BYTES", value)
    p = run("fuzz", "--budget", "1", "--op", "num_kv_splits", "--target", "builtin")
    assert p.returncode == 2, p.stderr
    assert "KVFUZZ_DEVICE_ORACLE_BYTES" in p.stderr and "Traceback" not in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1, p.stderr


def test_the_device_oracle_threshold_comes_from_the_environment(monkeypatch):
    from kvfuzz import execute

    monkeypatch.delenv("KVFUZZ_DEVICE_ORACLE_BYTES", raising=False)
    assert execute.device_oracle_bytes() is execute.DEVICE_ORACLE_BYTES
    monkeypatch.setenv("KVFUZZ_DEVICE_ORACLE_BYTES", "1048576")
    assert execute.device_oracle_bytes() == 1 << 20
    monkeypatch.setenv("KVFUZZ_DEVICE_ORACLE_BYTES", "0")
    assert execute.device_oracle_bytes() == 0


def test_corrupt_case_is_refused(tmp_path):
    d = tmp_path / "case"
    d.mkdir()
    (d / "case.json").write_text("{ not json")
    p = run("replay", str(d))
    assert p.returncode == 2 and "case.json" in p.stderr and "Traceback" not in p.stderr


@pytest.mark.slow
def test_fuzz_builtin_is_clean_and_reports(tmp_path):
    # kvfuzz's own kernels pass every check: no findings in >= 200 cases within 120 s (each op's
    # own test file runs its builtin longer)
    report = tmp_path / "r.json"
    rc = main(["fuzz", "--target", "builtin", "--budget", "30", "--seed", "3",
               "--report", str(report), "--corpus", str(tmp_path / "corpus")])
    doc = json.loads(report.read_text())
    assert rc == 0, doc["findings"]
    assert doc["findings"] == [] and doc["cases"] >= 200 and doc["seconds"] < 120
    assert set(doc["ops"]) == set(CONTRACTS)  # builtin has every op, the newest releases' too


@pytest.mark.slow
def test_fuzz_seed_finds_saves_and_replays(seed_path, tmp_path):
    corpus, report = tmp_path / "corpus", tmp_path / "r.json"
    p = run("fuzz", "--target", str(seed_path), "--op", "num_kv_splits", "--budget", "20", "--max-cases", "64",
            "--seed", "1", "--corpus", str(corpus), "--report", str(report), "--minimize-budget", "10")
    assert p.returncode == 1, p.stderr[-2000:]
    doc = json.loads(report.read_text())
    finding = doc["findings"][0]
    assert finding["kind"] == "mismatch" and os.path.isdir(finding["case"])
    # saved when first seen, then its minimized form over it: one case, minimized, reported new
    from kvfuzz.corpus import read_case_dir
    assert len(list(corpus.rglob("case.json"))) == len(doc["findings"])
    assert read_case_dir(finding["case"]).minimized
    assert f"-> {finding['case']} (new)" in p.stderr, p.stderr[-2000:]
    # replay: still fails on the seed (exit 1), passes on builtin (exit 0)
    r1 = run("replay", finding["case"])
    assert r1.returncode == 1 and "FAIL" in r1.stdout and ": expected " in r1.stdout
    r0 = run("replay", finding["case"], "--target", "builtin")
    assert r0.returncode == 0 and "PASS" in r0.stdout
    # the corpus runs as pytest tests: a strict xfail on the seed, one per saved finding
    n = len(doc["findings"])
    t = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(corpus)],
                       capture_output=True, text=True, timeout=600)
    assert f"{n} xfailed" in t.stdout, t.stdout[-2000:]
    # against another target: skipped until triaged for it (meta.affects, kvfuzz bisect --write)
    t = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", str(corpus),
                        "--kvfuzz-target", "builtin"], capture_output=True, text=True, timeout=600)
    assert f"{n} skipped" in t.stdout and "not triaged for builtin" in t.stdout, t.stdout[-2000:]


def _saved_case(tmp_path, expected="xfail", target="builtin"):
    """A must-refuse case (page_size 48) recorded as a known defect of `target`, seen on the
    device this test run uses (prune replays only cases seen on its own device)."""

    from kvfuzz import device as devmod
    from kvfuzz.corpus import DirectoryCorpus, SavedCase, environment_versions
    from kvfuzz.findings import Finding

    import cases
    from conftest import DEVICE

    case = cases.decode(ps=4).with_scalars(page_size=48)
    finding = Finding("invalid_accepted", "decode_metadata", "general", "-", "page_size", "ran it")
    versions = environment_versions(devmod.gpu_name(DEVICE))  # as a campaign on this device records them
    saved = SavedCase(case=case, finding=finding, target=target, device=DEVICE, versions=versions,
                      origin="hand", expected=expected, reason="hand-made" if expected == "xfail" else None)
    return DirectoryCorpus(tmp_path / "c").save(saved).path


@pytest.mark.thorough  # seconds of processes and campaigns: CI's thorough stage
def test_corpus_ls_merge_prune(tmp_path):
    path = _saved_case(tmp_path)
    ls = run("corpus", "ls", str(tmp_path / "c"))
    assert ls.returncode == 0 and "invalid_accepted" in ls.stdout and "1 cases" in ls.stdout
    mg = run("corpus", "merge", str(tmp_path / "c"), str(tmp_path / "d"))
    assert mg.returncode == 0 and "1 new" in mg.stdout
    # builtin refuses page_size 48, so the "known defect" no longer shows: prune reports it ...
    pr = run("corpus", "prune", str(tmp_path / "d"))
    assert pr.returncode == 0 and "would remove" in pr.stdout
    assert any((tmp_path / "d").rglob("case.json"))
    # ... and with --apply deletes it
    pr = run("corpus", "prune", str(tmp_path / "d"), "--apply")
    assert "removed" in pr.stdout and not any((tmp_path / "d").rglob("case.json"))
    assert path.is_dir()  # the source corpus is untouched


@pytest.mark.thorough  # seconds of processes and campaigns: CI's thorough stage
def test_minimize_command(seed_path, tmp_path):
    import cases
    from kvfuzz.case import TensorSpec
    from kvfuzz.corpus import DirectoryCorpus, SavedCase, environment_versions, read_case_dir
    from kvfuzz.findings import Finding

    big = cases.decode(ps=16, swa=True, B=5, swa_table=TensorSpec("int32", (5, 20), (1, 5)))
    f = Finding("mismatch", "decode_metadata", "swa", "swa_page_table", "all", "lost writes")
    src = DirectoryCorpus(tmp_path / "src").save(SavedCase(
        case=big, finding=f, target=str(seed_path), device="cpu", versions=environment_versions(),
        origin="hand", expected="xfail", reason="seed copies a non-contiguous swa_page_table")).path
    p = run("minimize", str(src), "-o", str(tmp_path / "out"), "--budget", "20")
    assert p.returncode == 0, p.stderr
    out = next((tmp_path / "out").rglob("case.json")).parent
    small = read_case_dir(out)
    assert small.minimized and small.finding.signature == f.signature
    assert small.case.tensors["seq_lens"].shape[0] <= 2 and small.minimize_log
    assert not small.case.tensors["swa_page_table"].is_contiguous  # the defect needs it


WRONG_SPLITS = '''
import os, time

def get_num_kv_splits_triton(num_kv_splits_ptr, seq_lens_ptr, num_seq, num_group, num_head, num_kv_head,
                             max_kv_splits, device_core_count):
    open({marker!r}, "a").close()  # tells the test the campaign is running cases
    time.sleep(0.05)  # slow enough that the interrupt lands while the finding is being shrunk
    num_kv_splits_ptr.fill_(1000)
'''


def _sigint(disposition):
    """Start the child with SIGINT at `disposition`: a shell's background job (CI's runner, nohup)
    starts with it ignored, and Python then never turns it into KeyboardInterrupt."""
    import signal

    return lambda: signal.signal(signal.SIGINT, getattr(signal, disposition))


def _fuzz_until_shrinking(tmp_path, sigint_at_start="SIG_DFL"):
    """`kvfuzz fuzz` on a target whose every answer is wrong, in its own process group, returned
    once its first finding is being shrunk (a long minimize budget keeps it there)."""
    import time

    marker = tmp_path / "running"
    kernels = tmp_path / "wrong_splits.py"
    kernels.write_text(WRONG_SPLITS.format(marker=str(marker)))
    corpus, report = tmp_path / "corpus", tmp_path / "r.json"
    proc = subprocess.Popen([sys.executable, "-m", "kvfuzz.cli", "fuzz", "--target", str(kernels), "--op",
                             "num_kv_splits", "--budget", "300", "--minimize-budget", "600", "--corpus", str(corpus),
                             "--report", str(report)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=_sigint(sigint_at_start))
    deadline = time.monotonic() + 300
    while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    # the first case fails at once; once a fresh process has confirmed it, it is saved and
    # then shrunk (for up to 600 s): wait for the save
    while not list(corpus.rglob("case.json")) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(1)
    return proc, corpus, report


def _no_process_left(proc):
    import time

    with pytest.raises(ProcessLookupError):  # no worker left in the group
        for _ in range(50):
            os.killpg(proc.pid, 0)
            time.sleep(0.2)


@pytest.mark.slow
@pytest.mark.parametrize("sig, sigint_at_start", [("SIGTERM", "SIG_IGN"), ("SIGINT", "SIG_DFL")])
def test_an_interrupted_fuzz_run_keeps_its_finding_and_report(tmp_path, sig, sigint_at_start):
    """A scheduler's SIGTERM (or Ctrl-C) to the process group mid-run: the finding found so far
    is saved (unminimized), the report is written and says so, no worker is left behind. SIGTERM
    is sent to a run started as a background job (SIGINT ignored), as schedulers start them."""
    import signal

    proc, corpus, report = _fuzz_until_shrinking(tmp_path, sigint_at_start)
    try:
        assert proc.poll() is None, proc.communicate()
        os.killpg(proc.pid, getattr(signal, sig))  # the whole group, as `timeout` and Ctrl-C do
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 1, out + err  # a finding was saved
    assert f"(cut short by {sig})" in out and "Traceback" not in err, out + err
    doc = json.loads(report.read_text())
    assert doc["interrupted"] is True and doc["cases"] >= 1
    [finding] = doc["findings"]
    assert finding["signature"] == "num_kv_splits:splits:mismatch:num_kv_splits:all"
    assert finding["minimize_log"] == []
    r = run("replay", finding["case"])  # the saved case is whole and still shows the defect
    assert r.returncode == 1 and "mismatch" in r.stdout, r.stdout + r.stderr
    _no_process_left(proc)


@pytest.mark.slow
def test_a_killed_fuzz_run_has_already_saved_its_finding(tmp_path):
    """SIGKILL (the OOM killer, a scheduler's hard stop) leaves no chance to clean up: the finding
    went to the corpus the moment it was seen, before the shrink it is killed in, and replays."""
    import signal

    from kvfuzz.corpus import iter_cases

    proc, corpus, report = _fuzz_until_shrinking(tmp_path)
    try:
        assert proc.poll() is None, proc.communicate()
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert not report.exists()  # the report is lost with the process ...
    [(path, saved)] = list(iter_cases(corpus))  # ... the finding is not
    assert saved.finding.signature == "num_kv_splits:splits:mismatch:num_kv_splits:all"
    assert not saved.minimized and saved.expected == "xfail"
    r = run("replay", str(path))
    assert r.returncode == 1 and "mismatch" in r.stdout, r.stdout + r.stderr
    assert not [p for p in corpus.rglob(".tmp-*")]  # nothing half-written
    _no_process_left(proc)


@pytest.mark.slow
def test_a_finding_the_corpus_refuses_is_reported_and_the_run_goes_on(tmp_path):
    """The finding's slot holds an unreadable case: that case is left as it is (never replaced by
    a guess), the finding is still reported with the reason it was not saved, the run ends normally."""
    import cases
    from kvfuzz.corpus import DirectoryCorpus, SavedCase, environment_versions
    from kvfuzz.findings import Finding

    kernels = tmp_path / "wrong_splits.py"
    kernels.write_text(WRONG_SPLITS.format(marker=str(tmp_path / "running")))
    f = Finding("mismatch", "num_kv_splits", "splits", "num_kv_splits", "all", "wrong")
    sig = f.signature
    slot = DirectoryCorpus(tmp_path / "corpus").path_for(SavedCase(  # where the finding will be saved
        case=cases.splits([5]), finding=f, target=str(kernels), device="cpu", versions=environment_versions(),
        origin="hypothesis", expected="xfail", reason="wrong"))
    slot.mkdir(parents=True)
    (slot / "case.json").write_text("{")
    report = tmp_path / "r.json"
    p = run("fuzz", "--target", str(kernels), "--op", "num_kv_splits", "--budget", "3", "--minimize-budget", "2",
            "--corpus", str(tmp_path / "corpus"), "--report", str(report))
    assert p.returncode == 1 and "Traceback" not in p.stderr, p.stdout + p.stderr
    [finding] = json.loads(report.read_text())["findings"]
    assert finding["signature"] == sig and finding["case"] is None
    assert "case.json" in finding["save_error"], finding
    assert f"FINDING mismatch {sig} (NOT SAVED: " in p.stdout, p.stdout
    assert (slot / "case.json").read_text() == "{" and sorted(p.name for p in slot.iterdir()) == ["case.json"]


@pytest.mark.slow  # CI's slow stage runs it (.ci/run)
def test_replay_warns_when_the_case_was_found_with_other_versions(tmp_path):
    import dataclasses

    from kvfuzz.corpus import DirectoryCorpus, read_case_dir

    path = _saved_case(tmp_path, expected="pass")
    saved = read_case_dir(path)
    other = dataclasses.replace(saved, versions={**saved.versions, "triton": "3.0.0", "torch": "2.4.0"})
    moved = DirectoryCorpus(tmp_path / "other").save(other).path
    r = run("replay", str(moved))
    warnings = [line for line in r.stderr.splitlines() if line.startswith("kvfuzz: warning:")]
    assert any("triton 3.0.0" in w for w in warnings) and any("torch 2.4.0" in w for w in warnings), r.stderr
    same = run("replay", str(path))
    assert "kvfuzz: warning" not in same.stderr, same.stderr


WRONG_FOR_THREE = '''
from kvfuzz.kernels import get_num_kv_splits


def get_num_kv_splits_triton(out, seq_lens, num_seq, *args):
    get_num_kv_splits(out, seq_lens, num_seq, *args)
    if num_seq >= 3:
        out[:1].fill_(70)
'''


@pytest.mark.slow  # campaign-sized: `pytest -m slow`
def test_a_finding_the_corpus_already_holds_is_known_and_fails_nothing(tmp_path):
    """Nightly runs into one corpus: the second run sees the same defect, reports it as known,
    exits 0, and its JUnit test passes; the first run's test failed."""
    import xml.etree.ElementTree as ET

    kernels = tmp_path / "wrong.py"
    kernels.write_text(WRONG_FOR_THREE)
    corpus = tmp_path / "corpus"
    args = ["fuzz", "--target", str(kernels), "--op", "num_kv_splits", "--budget", "4", "--in-contract-only",
            "--minimize-budget", "2", "--corpus", str(corpus)]
    first = run(*args, "--junit", str(tmp_path / "1.xml"))
    assert first.returncode == 1 and "1 new findings" in first.stdout, first.stdout + first.stderr
    second = run(*args, "--seed", "1", "--junit", str(tmp_path / "2.xml"), "--report", str(tmp_path / "2.json"))
    assert second.returncode == 0 and "(known)" in second.stdout, second.stdout + second.stderr
    [finding] = json.loads((tmp_path / "2.json").read_text())["findings"]
    assert finding["new"] is False
    one, two = (ET.parse(tmp_path / f"{i}.xml").getroot() for i in (1, 2))
    assert one.get("failures") == "1" and one.find("testcase/failure") is not None
    assert two.get("failures") == "0" and "known: num_kv_splits" in two.find("testcase/system-out").text


@pytest.mark.slow
def test_a_campaign_killed_and_started_again_continues_and_knows_its_findings(tmp_path):
    import signal
    import time

    kernels = tmp_path / "wrong.py"
    kernels.write_text(WRONG_FOR_THREE)
    camp = tmp_path / "camp"
    args = ["fuzz", "--target", str(kernels), "--op", "num_kv_splits", "--in-contract-only",
            "--minimize-budget", "2", "--campaign", str(camp)]
    p = subprocess.Popen([sys.executable, "-m", "kvfuzz.cli", *args, "--budget", "300"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    state = camp / "state-1-of-1.json"
    deadline = time.monotonic() + 300
    while p.poll() is None and time.monotonic() < deadline and not (
            list((camp / "corpus").rglob("case.json")) and state.is_file()
            and json.loads(state.read_text())["positions"].get("num_kv_splits", 0) > 100):
        time.sleep(0.2)
    os.killpg(p.pid, signal.SIGKILL)
    p.communicate(timeout=60)
    stopped_at = json.loads(state.read_text())["positions"]["num_kv_splits"]
    again = run(*args, "--budget", "3", "--report", str(tmp_path / "r.json"))
    assert again.returncode == 0, again.stdout + again.stderr  # nothing new
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["positions"]["num_kv_splits"] > stopped_at  # it went on from where it stopped
    assert doc["findings"] and not any(f["new"] for f in doc["findings"])
    assert json.loads(state.read_text())["positions"]["num_kv_splits"] == doc["positions"]["num_kv_splits"]
    other = run(*args[:-1], str(camp), "--seed", "5", "--budget", "1")
    assert other.returncode == 2 and "another campaign" in other.stderr.strip().splitlines()[-1]


@pytest.mark.slow
def test_markdown_report_with_plots(tmp_path):
    kernels = tmp_path / "wrong.py"
    kernels.write_text(WRONG_FOR_THREE)
    md = tmp_path / "page" / "nightly.md"
    p = run("fuzz", "--target", str(kernels), "--op", "num_kv_splits", "--budget", "3", "--in-contract-only",
            "--minimize-budget", "1", "--markdown", str(md))
    assert p.returncode == 1, p.stdout + p.stderr
    text = md.read_text()
    assert "| num_kv_splits |" in text and "## Findings" in text and "`num_kv_splits:splits:mismatch" in text
    assert "## Coverage" in text and "`zero_length`" in text
    for name in ("nightly-cases.png", "nightly-ops.png", "nightly-coverage.png"):
        assert (md.parent / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f"]({name})" in text


# ------------------------------------------------------------- --variant forced onto a release


def _release(spec):
    from test_releases import kernel_file

    if spec.startswith("sglang=="):
        kernel_file(spec.split("==")[1])  # skips when neither cached nor reachable


@pytest.mark.parametrize("target, variant, lacked", [
    ("sglang==0.5.14", "fused", "skip_page_table, zero_tail, full_v2p, swa_v2p"),
    ("sglang==0.5.17", "v2p_swa", "swa_v2p"),  # 0.5.18's unified SWA pool: the same signature as 0.5.17's
    ("sglang==0.5.23", "strict", "kernel_page_multiplier"),
    ("builtin", "read_table", "src_is_read_table, swa_src_table"),
])
def test_a_forced_variant_whose_arguments_the_target_lacks_is_refused(target, variant, lacked, capsys):
    """Its entry point would drop them: every case using one a false finding or a false pass."""
    from conftest import DEVICE

    _release(target)
    code = main(["fuzz", "--target", target, "--op", "decode_metadata", "--variant", variant, "--in-process",
                 "--device", DEVICE, "--budget", "1"])
    out, err = capsys.readouterr()
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"target {target} does not take decode_metadata's {lacked}, which variant {variant} passes" in err
    assert "cases" not in out  # refused before any case ran


@pytest.mark.slow
def test_a_forced_variant_is_refused_once_for_jobs_and_by_replay_and_the_corpus_plugin(tmp_path):
    from kvfuzz.corpus import DirectoryCorpus, SavedCase, environment_versions

    import cases
    from conftest import DEVICE

    _release("sglang==0.5.14")
    _release("sglang==0.5.23")
    p = run("fuzz", "--target", "sglang==0.5.14", "--op", "decode_metadata", "--variant", "fused", "--jobs", "2",
            "--budget", "1")
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "does not take decode_metadata's skip_page_table" in p.stderr and "Traceback" not in p.stderr
    # a case judged by fused, recorded against 0.5.14: replayed there it keeps its variant
    case = cases.unified(cases.decode(ps=4), full_v2p="permuted", variant="fused")
    saved = SavedCase(case=case, finding=None, target="sglang==0.5.14", device=DEVICE,
                      versions=environment_versions(), origin="hand")
    path = DirectoryCorpus(tmp_path / "c").save(saved).path
    r = run("replay", str(path))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "the case's variant fused: target sglang==0.5.14 does not take decode_metadata's skip_page_table" in r.stderr
    ok = run("replay", str(path), "--target", "sglang==0.5.23")  # a release taking them judges it by its own
    assert ok.returncode == 0 and "[fused]" in ok.stdout, ok.stdout + ok.stderr
    t = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--kvfuzz-device", DEVICE,
                        str(tmp_path / "c")], capture_output=True, text=True, timeout=600, env=dict(os.environ))
    assert "1 failed" in t.stdout and "does not take decode_metadata's skip_page_table" in t.stdout, t.stdout[-2000:]


@pytest.mark.parametrize("target, op, variant", sampled("forced variant", [
    pytest.param("sglang==0.5.14", "decode_metadata", "live_prefix"),  # a judging rule only
    pytest.param("sglang==0.5.14", "num_kv_splits", "sglang"),
    pytest.param("builtin", "decode_metadata", "fused"),  # a subset of what builtin takes
], share=3))
def test_a_forced_variant_the_target_takes_still_runs(target, op, variant, tmp_path):
    _release(target)
    p = run("fuzz", "--target", target, "--op", op, "--variant", variant, "--in-contract-only", "--max-cases", "16",
            "--minimize-budget", "0", "--budget", "20", "--report", str(tmp_path / "r.json"))
    assert p.returncode in (0, 1), p.stdout + p.stderr  # 0.5.14 may show its known defects
    s = json.loads((tmp_path / "r.json").read_text())["ops"][op]
    assert s["contract_variant"] == variant and s["cases"] >= 1, s
