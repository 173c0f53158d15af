"""Fault injection for the corpus store, with real processes (tests/fixtures/store_writer.py):
many writers saving into one corpus at once, and a writer SIGKILLed at varied moments of its
saves. No test waits for time to pass: processes signal over pipes when they are ready,
where they stand, or that they paused at the point where they are to be killed.
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from kvfuzz.corpus import iter_cases, read_case_dir
from kvfuzz.corpus import store as store_mod

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGKILL") or os.name != "posix", reason="POSIX processes")

REPO = Path(__file__).resolve().parents[1]
WRITER = REPO / "tests" / "fixtures" / "store_writer.py"
_spec = importlib.util.spec_from_file_location("store_writer", WRITER)
sw = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sw)

TIMEOUT = 120  # per process: generous for a loaded 2-core machine; a hang fails, it never passes


def spawn(*args: str) -> subprocess.Popen:
    """Start a writer. Its stderr goes to a file and a watchdog kills it after TIMEOUT seconds,
    so reading its stdout line by line can never hang the test."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
    err = tempfile.TemporaryFile(mode="w+")
    p = subprocess.Popen([sys.executable, str(WRITER), *map(str, args)], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=err, text=True, env=env)
    p.errfile = err
    p.watchdog = threading.Timer(TIMEOUT, p.kill)
    p.watchdog.start()
    return p


def drain(p: subprocess.Popen) -> tuple[str, str]:
    """The rest of its stdout (what readline() had buffered included) and its stderr, once it ended."""
    p.stdin.close()
    out = p.stdout.read()
    p.wait()
    p.watchdog.cancel()
    p.errfile.seek(0)
    return out, p.errfile.read()


def finish(p: subprocess.Popen) -> str:
    out, err = drain(p)
    assert p.returncode == 0, f"writer exited {p.returncode}:\n{err[-3000:]}"
    return out


def visible_cases(root: Path) -> dict:
    """What a reader sees: every non-dot entry under root, which must be op/<key> case
    directories, each readable, holding the case of its key, no key twice."""
    cases = {}
    for op_dir in sorted(root.iterdir()):
        if op_dir.name.startswith("."):
            continue
        assert op_dir.is_dir(), op_dir
        for d in sorted(op_dir.iterdir()):
            if d.name.startswith("."):
                continue
            assert d.is_dir() and store_mod.KEY_RE.fullmatch(d.name), f"stray entry {d}"
            saved = read_case_dir(d)  # BadCaseFile: a corrupt or half-written case is visible
            assert saved.key() == d.name and saved.case.op == op_dir.name, d
            assert d.name not in cases, f"key {d.name} twice"
            cases[d.name] = saved
    walked = [(p, item) for p, item in iter_cases(root)]
    assert sorted(p.name for p, _ in walked) == sorted(cases)  # iter_cases sees the same, once each
    return cases


def leftovers(root: Path) -> list[Path]:
    """The store's work-in-progress entries (lock files are kept on purpose)."""
    return sorted(p for p in root.rglob(".*") if not p.name.endswith(".lock"))


# many writers ---------------------------------------------------------------------------------


def test_eight_writer_processes_keep_exactly_the_smallest_case_per_key(tmp_path):
    root = tmp_path / "corpus"
    root.mkdir()
    rng = random.Random(8)
    wheres = [f"k{i}" for i in range(10)]
    pool = {w: [{"where": w, "W": W, "fill": fill, "min": m}
                for W in (1, 2, 3, 4) for fill in (1, 2) for m in (False, True)] for w in wheres}
    jobs = []
    for n in range(8):  # each writer offers 6 of each key's 16 cases, in its own order
        mine = [spec for w in wheres for spec in rng.sample(pool[w], 6)]
        rng.shuffle(mine)
        if n % 2 == 0:  # half of them largest first: many replaces, while the others mostly compare
            mine.sort(key=lambda s: (-s["W"], -s["fill"], s["min"]))
        jobs.append(mine)
    offered: dict[str, set] = {}
    for spec in (s for job in jobs for s in job):
        saved = sw.build(spec)
        offered.setdefault(saved.key(), set()).add(saved)
    assert len(offered) == len(wheres)
    for cases in offered.values():  # no two different cases of a key rank equal: one right answer
        assert len({store_mod._rank(c) for c in cases}) == len(cases)
    want = {key: min(cases, key=store_mod._rank) for key, cases in offered.items()}

    files = []
    for n, job in enumerate(jobs):
        files.append(tmp_path / f"jobs{n}.json")
        files[-1].write_text(json.dumps(job))
    all_jobs = tmp_path / "all.json"
    all_jobs.write_text(json.dumps([s for job in jobs for s in job]))
    stop = tmp_path / "stop"
    reader = spawn("read", root, all_jobs, stop)
    writers = [spawn("batch", root, f, "--jitter", n) for n, f in enumerate(files)]
    for w in writers:  # all imported and waiting: then start them together
        line = w.stdout.readline()
        assert line == "ready\n", drain(w)[1][-3000:]
    for w in writers:
        w.stdin.write("go\n")
        w.stdin.flush()
    results = [json.loads(line) for w in writers for line in finish(w).splitlines()]
    stop.touch()
    seen = json.loads(finish(reader))

    assert len(results) == sum(map(len, jobs))
    for key in want:
        statuses = [r["status"] for r in results if r["key"] == key]
        assert statuses.count("new") == 1, (key, statuses)
    cases = visible_cases(root)
    assert sorted(cases) == sorted(want)
    for key, saved in cases.items():
        assert saved == want[key], f"{key}: kept {saved.case.size_key()} minimized={saved.minimized}, " \
            f"smallest offered {want[key].case.size_key()} minimized={want[key].minimized}"
    assert leftovers(root) == []
    assert seen["scans"] >= 1 and seen["errors"] == [], seen["errors"]


def exchange_works(tmp_path: Path) -> bool:
    a, b = tmp_path / "xa", tmp_path / "xb"
    a.mkdir(), b.mkdir()
    (a / "f").touch()
    try:
        return store_mod._exchange(a, b) and (b / "f").exists()
    finally:
        for d in (a, b):
            for f in d.iterdir():
                f.unlink()
            d.rmdir()


def test_a_reader_racing_a_replacing_writer_sees_whole_cases_only(tmp_path):
    """400 saves, all but two of them replaces, of two keys while another process reads the corpus
    over and over: every read gives one case a writer offered; a key once there never goes missing."""
    if not exchange_works(tmp_path):
        pytest.skip("this filesystem cannot exchange two directories (renameat2): see docs/case-format.md")
    root = tmp_path / "corpus"
    root.mkdir()
    jobs = [{"where": w, "W": W, "fill": 1, "min": m}
            for W in range(100, 0, -1) for w in ("a", "b") for m in (False, True)]
    (tmp_path / "jobs.json").write_text(json.dumps(jobs))
    stop = tmp_path / "stop"
    reader = spawn("read", root, tmp_path / "jobs.json", stop)
    writer = spawn("batch", root, tmp_path / "jobs.json")
    assert writer.stdout.readline() == "ready\n", drain(writer)[1][-3000:]
    writer.stdin.write("go\n")
    writer.stdin.flush()
    statuses = [json.loads(line)["status"] for line in finish(writer).splitlines()]
    stop.touch()
    seen = json.loads(finish(reader))
    assert statuses.count("new") == 2 and statuses.count("replaced") == len(jobs) - 2
    assert seen["errors"] == [], seen["errors"]
    assert seen["scans"] >= 2
    assert leftovers(root) == []


# a writer killed with SIGKILL ---------------------------------------------------------------------


KILL_POINTS = {"fsync": 8, "rename": 3, "rmtree": 3, "unlink": 4}  # op: the largest N drawn


def key_of(i: int) -> str:
    return sw.build(sw.loop_spec(i)).key()


def check_after_kill(root: Path, acked: set[int], attempted: set[int], may_miss: set[str] = frozenset()):
    """Nothing lost, nothing corrupt, no duplicate: every acknowledged save's key is there with a
    case at least as small (a later save may have put a smaller one in), and every case there is
    one the writer offered. `may_miss`: keys allowed to be missing (in .old-*) for now."""
    cases = visible_cases(root)
    offered = {}
    for i in attempted:
        offered.setdefault(key_of(i), []).append(sw.build(sw.loop_spec(i)))
    for i in sorted(acked):
        key = key_of(i)
        if key not in cases:
            assert key in may_miss, f"save {i} was acknowledged, its key {key} is gone"
            assert any(root.rglob(f".old-{key}-*")), f"save {i}: key {key} missing and not set aside"
            continue
        assert store_mod._rank(cases[key]) <= store_mod._rank(sw.build(sw.loop_spec(i))), \
            f"save {i} was acknowledged but key {key} holds a larger case"
    for key, saved in cases.items():
        assert saved in offered[key], f"{key} holds a case never offered"
    return cases


def read_acks(path: Path) -> set[int]:
    if not path.exists():
        return set()
    text = path.read_text()
    return {int(line) for line in text.split("\n")[:-1]}  # a torn last line (no newline) was not acked


@pytest.mark.slow
@pytest.mark.parametrize("exchange", [True, False], ids=["exchange", "two-renames"])
def test_a_writer_killed_20_times_mid_save_loses_and_corrupts_nothing(tmp_path, exchange):
    """Kill -9 a saving writer 20 times: half of them at a chosen point inside `save` (after the
    N-th fsync, rename or exchange, rmtree, or unlink within an rmtree: the writer says where it
    paused), half of them a random 0-4 ms after it announced a save. After each kill the corpus
    is checked, then the writer is restarted on the save it was killed in, which must succeed
    (recovering the leftovers); at the end nothing of the store's work in progress is left."""
    if exchange and not exchange_works(tmp_path):
        pytest.skip("this filesystem cannot exchange two directories (renameat2)")
    root, ack = tmp_path / "corpus", tmp_path / "acks"
    root.mkdir()
    mode = [] if exchange else ["--no-exchange"]
    rng = random.Random(20 + exchange)
    attempted: set[int] = set()
    start, kills, points = 0, 0, []
    dirty, missing = 0, 0  # rounds whose kill left work in progress; or left a key in .old-* only
    for round_ in range(20):
        pause = None
        if round_ % 2 == 0:
            op = sorted(KILL_POINTS)[(round_ // 2) % len(KILL_POINTS)]
            pause = f"{op}:{rng.randint(1, KILL_POINTS[op])}"
            points.append(pause)
        p = spawn("loop", root, ack, "--start", start, "--stop", start + 60, *mode,
                  *(["--pause-at", pause] if pause else []))
        kill_at = start + 1 + rng.randrange(4)  # "saving start+1" comes after save `start` was acked
        while True:
            line = p.stdout.readline()
            assert line, "writer ended before its kill:\n" + drain(p)[1][-3000:]
            if line.startswith("saving "):
                attempted.add(int(line.split()[1]))
            if line.startswith("paused ") or (pause is None and line == f"saving {kill_at}\n"):
                break
        if pause is None:
            time.sleep(rng.uniform(0, 0.004))  # anywhere in that save or the next ones
        p.kill()
        out, err = drain(p)
        attempted |= {int(x.split()[1]) for x in out.splitlines() if x.startswith("saving ")}
        assert p.returncode == -signal.SIGKILL, f"writer exited {p.returncode} before the kill:\n{err[-3000:]}"
        kills += 1
        acked = read_acks(ack)
        assert start in acked, f"round {round_}: the first save after a restart (save {start}) failed"
        in_flight = max(attempted)
        # killed between the two renames of a replace: that key is back at its next save
        allowed = set() if exchange else {key_of(in_flight)}
        cases = check_after_kill(root, acked, attempted, may_miss=allowed)
        dirty += bool(leftovers(root))
        missing += not {key_of(i) for i in acked} <= set(cases)
        start = in_flight  # restart on the save it was killed in: the same key, its leftovers
    assert kills == 20
    # a last run, not killed: saves every key once more, each one recovering that key's leftovers
    p = spawn("loop", root, ack, "--start", start, "--stop", start + 8, *mode)
    attempted |= {int(x.split()[1]) for x in finish(p).splitlines()}
    acked = read_acks(ack)
    assert set(range(start, start + 8)) <= acked
    cases = check_after_kill(root, acked, attempted)
    assert len(cases) == 4
    assert leftovers(root) == [], leftovers(root)
    assert len(points) == 10  # half of the kills at a chosen point inside save
    assert dirty >= 5  # the kills did leave work in progress for the next save to recover
    if not exchange:  # and some came between the two renames of a replace (rename:1 always does)
        assert missing >= 1
