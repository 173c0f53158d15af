"""Whole campaigns against one corpus: four at once, and one killed with SIGKILL six
times while it saves. Nothing lost, nothing corrupt, no duplicate. (The store's own
fault-injection tests, tests/test_store_faults.py, kill writers at every step inside a save;
these run the real `kvfuzz fuzz` processes around it.)"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kvfuzz.corpus import iter_cases

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[1]

# num_kv_splits, right for one row, wrong in three ways for more (three signatures, so a
# campaign has several findings to confirm and save)
DEFECTS = '''
from kvfuzz.kernels import get_num_kv_splits


def get_num_kv_splits_triton(out, seq_lens, num_seq, *args):
    get_num_kv_splits(out, seq_lens, num_seq, *args)
    if num_seq == 2:
        raise RuntimeError("two rows")
    if num_seq >= 3:
        out[:1].fill_(70)
    if num_seq >= 64:
        out.fill_(70)
'''


def fuzz(target: Path, corpus: Path, *extra: str, **kw) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "kvfuzz.cli", "fuzz", "--op", "num_kv_splits", "--target", str(target),
           "--device", "cpu", "--in-contract-only", "--corpus", str(corpus), "--minimize-budget", "2",
           "--confirm-tries", "2", *extra]  # the fewest fresh processes a finding may confirm in: CI's time
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
                            start_new_session=True, **kw)


def check_corpus(corpus: Path) -> dict[str, int]:
    """Every case readable, one case per (signature, target), nothing half-written visible."""
    seen: dict[str, int] = {}
    if not corpus.exists():  # killed before its first save
        return seen
    for path, item in iter_cases(corpus):
        assert not isinstance(item, Exception), (path, item)
        seen[item.finding.signature] = seen.get(item.finding.signature, 0) + 1
    assert all(n == 1 for n in seen.values()), seen
    return seen


@pytest.mark.interpreter
def test_four_campaigns_save_into_one_corpus(tmp_path):
    target = tmp_path / "defects.py"
    target.write_text(DEFECTS)
    corpus, report = tmp_path / "corpus", tmp_path / "r.json"
    p = fuzz(target, corpus, "--budget", "8", "--jobs", "4", "--report", str(report))
    out, err = p.communicate(timeout=900)
    assert p.returncode == 1, out + err
    merged = json.loads(report.read_text())
    assert len(merged["shards"]) == 4
    sigs = {f["signature"] for f in merged["findings"]}
    assert len(sigs) == len(merged["findings"]) >= 2  # each signature once in the merged report
    assert set(check_corpus(corpus)) == sigs  # and once on disk, whoever saved it


@pytest.mark.interpreter
def test_a_campaign_killed_six_times_while_saving_loses_nothing(tmp_path):
    target = tmp_path / "defects.py"
    target.write_text(DEFECTS)
    corpus = tmp_path / "corpus"
    rnd = random.Random(1)
    saved_before: set[str] = set()
    for i in range(6):  # random kill points, kept to a count CI's time allows
        p = fuzz(target, corpus, "--budget", "30", "--seed", str(i))
        time.sleep(rnd.uniform(1.5, 5.0))  # started (about 2 s), then finding, confirming, saving
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
        p.communicate(timeout=60)
        now = set(check_corpus(corpus))
        assert saved_before <= now  # nothing saved before is lost
        saved_before = now
    # a last, complete run: every signature present once, every case replays
    p = fuzz(target, corpus, "--budget", "5", "--seed", "99")
    out, err = p.communicate(timeout=600)
    # exit 1 only for a new finding: the killed runs may already have saved every defect
    assert p.returncode in (0, 1) and "FINDING" in out, out + err
    findings = [line for line in out.splitlines() if line.startswith("FINDING")]
    assert (p.returncode == 0) == all(line.endswith("(known)") for line in findings), out + err
    final = check_corpus(corpus)
    assert len(final) >= 2
    assert not list(corpus.rglob(".tmp-*"))  # what the kills left was cleaned by later saves
    for path, saved in iter_cases(corpus):
        r = subprocess.run([sys.executable, "-m", "kvfuzz.cli", "replay", str(path), "--device", "cpu"],
                           capture_output=True, text=True, timeout=300, cwd=REPO)
        assert r.returncode == 1 and saved.finding.kind in r.stdout, r.stdout + r.stderr
