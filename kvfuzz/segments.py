"""The shared-memory segments that carry a batch between kvfuzz and its worker (worker.py).

A segment is named after the process that owns it: `kvfuzz-<pid namespace>-<pid>-<random>`
(hex). The owner unlinks it when its worker closes, also when a SIGTERM or Ctrl-C ends the
run. A SIGKILL to a whole process group (an OOM killer, a scheduler's hard kill) takes the
owner and Python's resource tracker at once, and the segment would stay in /dev/shm, in RAM,
until the machine reboots: so each process, before it creates its first segment, unlinks the
kvfuzz segments of owners that are gone. Only owners of its own PID namespace are judged (a
PID means nothing across namespaces); a reused PID only delays a sweep.
"""

from __future__ import annotations

import os
import re
import secrets
from pathlib import Path

SHM_DIR = Path("/dev/shm")  # where Linux keeps POSIX shared memory
_NAME = re.compile(r"kvfuzz-([0-9a-f]+)-([0-9a-f]+)-[0-9a-f]+")
_swept = False


def _namespace() -> int:
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:  # no /proc: PIDs are the host's
        return 0


def new_name() -> str:
    """A fresh segment name owned by this process (at most 31 characters, as macOS allows)."""
    return f"kvfuzz-{_namespace() & 0xFFFFFFFF:x}-{os.getpid():x}-{secrets.token_hex(3)}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def sweep_orphans(shm_dir: Path = SHM_DIR) -> list[str]:
    """Unlink the kvfuzz segments whose owning process (of this PID namespace) is gone; the
    names unlinked. Nothing to do where there is no /dev/shm."""
    ns = f"{_namespace() & 0xFFFFFFFF:x}"
    gone = []
    try:
        entries = list(shm_dir.iterdir())
    except OSError:
        return gone
    for path in entries:
        m = _NAME.fullmatch(path.name)
        if m and m.group(1) == ns and not _alive(int(m.group(2), 16)):
            try:
                path.unlink()
                gone.append(path.name)
            except OSError:  # another sweeper was first, or not ours to remove
                pass
    return gone


def create(size: int):
    """A new segment of `size` bytes owned by this process; the first call sweeps orphans."""
    global _swept
    from multiprocessing import shared_memory

    if not _swept:
        _swept = True
        sweep_orphans()
    return shared_memory.SharedMemory(name=new_name(), create=True, size=size)
