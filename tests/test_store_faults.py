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
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
    return subprocess.Popen([sys.executable, str(WRITER), *map(str, args)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def finish(p: subprocess.Popen) -> str:
    out, err = p.communicate(timeout=TIMEOUT)
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
    for _ in range(8):  # each writer offers 4 of each key's 16 cases, in its own order
        mine = [spec for w in wheres for spec in rng.sample(pool[w], 4)]
        rng.shuffle(mine)
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
        assert line == "ready\n", w.communicate(timeout=TIMEOUT)[1][-3000:]
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
