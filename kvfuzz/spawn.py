"""How kvfuzz starts processes of its own (workers, shards, the atheris child): the same Python
and the same kvfuzz as this process.

`python -m kvfuzz.worker` looks in the working directory first, so run from inside another
kvfuzz checkout (an older revision to compare against, a user's clone) it would import that
one's worker beside this one's campaign. The command puts this kvfuzz's root first instead
(`-P` and PYTHONPATH, Python 3.11+), then the working directory, as before, so a target named
by a module in the working directory still loads.
"""

from __future__ import annotations

import os
import site
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent  # the directory that holds this kvfuzz package


def command(module: str, *args: str) -> list[str]:
    """argv that runs `module` of this kvfuzz with this Python."""
    safe = ["-P"] if sys.version_info >= (3, 11) else []  # older Pythons: the working directory first
    return [sys.executable, *safe, "-m", module, *args]


def environment(env: dict[str, str]) -> dict[str, str]:
    """`env` with PYTHONPATH led by this kvfuzz's root (where it is not a site directory: there
    it would shadow the user's own PYTHONPATH) and the working directory."""
    env = dict(env)
    sites = set(site.getsitepackages()) | {site.getusersitepackages()}
    lead = [os.getcwd()] if str(ROOT) in sites else [str(ROOT), os.getcwd()]
    rest = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(lead + [p for p in rest if p not in lead])
    return env
