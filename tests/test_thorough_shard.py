"""`KVFUZZ_THOROUGH_SHARD=I/N` (CI's second stage runs one shard of the thorough tests, chosen
by the commit): the shards split the thorough tests without overlap or loss, and leave every
other test alone; a malformed value stops pytest with one line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FILES = ["tests/test_cli.py"]


def collected(shard: str | None, marks: str) -> tuple[int, set[str], str]:
    env = {k: v for k, v in os.environ.items() if k != "KVFUZZ_THOROUGH_SHARD"}
    if shard is not None:
        env["KVFUZZ_THOROUGH_SHARD"] = shard
    p = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--collect-only", "-q",
                        "-m", marks, *FILES], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    return p.returncode, {line for line in p.stdout.splitlines() if "::" in line}, p.stdout + p.stderr


def test_the_shards_split_the_thorough_tests_and_keep_the_rest():
    # four collections (each a pytest start-up of seconds): the thorough tests, everything but
    # the slow campaigns, and each of two shards of that
    rc, thorough, _ = collected(None, "thorough")
    assert rc == 0 and len(thorough) >= 4
    rc, everything, out = collected(None, "not slow")
    assert rc == 0 and thorough < everything, out
    fast = everything - thorough
    parts = []
    for i in range(2):
        rc, got, out = collected(f"{i}/2", "not slow")
        assert rc == 0, out
        assert got - thorough == fast, out  # every other test stays, in each shard
        parts.append(got & thorough)
    assert parts[0] and parts[1], "a shard of these files is empty: the split was not tried"
    assert not parts[0] & parts[1] and parts[0] | parts[1] == thorough


def test_a_malformed_shard_is_one_usage_line():
    rc, _, out = collected("2/2", "thorough")
    assert rc == 4, out
    lines = [line for line in out.splitlines() if "KVFUZZ_THOROUGH_SHARD" in line]
    assert len(lines) == 1 and "Traceback" not in out, out


def test_the_shard_setting_is_read_as_i_of_n():
    import pytest

    from sampling import in_shard, thorough_shard

    assert thorough_shard(None) is None and thorough_shard(" ") is None
    assert thorough_shard("1/3") == (1, 3)
    for bad in ("3/3", "x", "1/0", "-1/3", "1", "1/3/4"):
        with pytest.raises(pytest.UsageError):
            thorough_shard(bad)
    ids = [f"tests/t.py::test_{k}" for k in range(60)]
    assert sorted(sum(([x for x in ids if in_shard(x, (i, 3))] for i in range(3)), [])) == sorted(ids)
