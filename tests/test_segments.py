"""A batch's shared-memory segment (kvfuzz/segments.py): named after its owner, and unlinked by
the next kvfuzz process once a SIGKILL has taken its owner and Python's resource tracker."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kvfuzz import segments

ORPHAN = """
import os, signal
from multiprocessing import resource_tracker
from kvfuzz import segments
shm = segments.create(4096)
resource_tracker.unregister(shm._name, "shared_memory")  # as a SIGKILL to the group takes the tracker too
print(shm.name, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_names_carry_the_owner_and_fit_macos_limit():
    name = segments.new_name()
    m = segments._NAME.fullmatch(name)
    assert m and int(m.group(2), 16) == __import__("os").getpid() and len(name) <= 31


def test_the_sweep_unlinks_only_kvfuzz_segments_of_gone_owners_of_this_namespace(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(dead.stdout)
    ns = f"{segments._namespace() & 0xFFFFFFFF:x}"
    orphan = tmp_path / f"kvfuzz-{ns}-{dead_pid:x}-abcdef"
    live = tmp_path / f"kvfuzz-{ns}-{__import__('os').getpid():x}-abcdef"
    elsewhere = tmp_path / f"kvfuzz-{int(ns, 16) ^ 1:x}-{dead_pid:x}-abcdef"  # another PID namespace
    other = tmp_path / "psm_1234abcd"  # not kvfuzz's
    for path in (orphan, live, elsewhere, other):
        path.write_bytes(b"x")
    assert segments.sweep_orphans(tmp_path) == [orphan.name]
    assert not orphan.exists() and live.exists() and elsewhere.exists() and other.exists()


@pytest.mark.skipif(not segments.SHM_DIR.is_dir(), reason="no /dev/shm on this system")
def test_a_segment_left_by_a_killed_owner_is_unlinked_by_the_next_sweep():
    child = subprocess.run([sys.executable, "-c", ORPHAN], capture_output=True, text=True, timeout=60)
    assert child.returncode == -9, child.stderr
    left = segments.SHM_DIR / child.stdout.strip()
    assert left.exists()  # nobody cleaned up after the SIGKILL
    assert left.name in segments.sweep_orphans()
    assert not left.exists()


def test_closing_an_executor_whose_segment_is_already_gone_does_not_raise():
    """A SIGTERMed nightly's campaign closed its worker after the segment had been unlinked
    elsewhere: `shm_unlink` raised FileNotFoundError, a traceback and exit 1 instead of 130."""
    from multiprocessing import shared_memory

    from kvfuzz.worker import WorkerExecutor

    ex = object.__new__(WorkerExecutor)  # its segment alone: no worker process
    ex._shm = segments.create(1 << 12)
    gone = shared_memory.SharedMemory(name=ex._shm.name)
    gone.close()
    gone.unlink()
    ex._drop_shared()
    assert ex._shm is None
