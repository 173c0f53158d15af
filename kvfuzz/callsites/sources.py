"""A release's Python sources, from its PyPI wheel, kept whole in kvfuzz's cache.

The call-site table reads every module of a release (backends, speculative workers, graph
runners, memory pools), not only the kernel files a target keeps, so the wheel itself is cached:
`$KVFUZZ_CACHE/wheels/sglang-X-*.whl` (default ~/.cache/kvfuzz), fetched once with
`pip download --no-deps`.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
import zipfile
from pathlib import Path

from ..errors import TargetLoadError
from ..targets.wheels import _VERSION, _pip_download, cache_dir


def wheel_path(version: str) -> Path:
    """The cached wheel of sglang==`version`, downloaded when the cache lacks it;
    TargetLoadError (one line) when it cannot be had."""
    if not _VERSION.match(version):
        raise TargetLoadError(f"not a version: sglang=={version!r}")
    folder = cache_dir() / "wheels"
    found = sorted(folder.glob(f"sglang-{version}-*.whl"))
    if found:
        return found[0]
    with tempfile.TemporaryDirectory() as tmp:
        got = _pip_download(version, Path(tmp))
        if isinstance(got, str):
            raise TargetLoadError(f"cannot fetch sglang=={version} from PyPI ({got}): copy its wheel into {folder}")
        folder.mkdir(parents=True, exist_ok=True)
        dest = folder / got.name
        shutil.move(str(got), dest)
    return dest


def release_sources(version: str) -> tuple[str, str, dict[str, str]]:
    """(wheel file name, its sha256, {path inside the wheel: text}) of every `sglang/**.py`."""
    path = wheel_path(version)
    data = path.read_bytes()
    with zipfile.ZipFile(path) as wheel:
        texts = {n: wheel.read(n).decode("utf-8", errors="replace") for n in wheel.namelist()
                 if n.startswith("sglang/") and n.endswith(".py")}
    return path.name, hashlib.sha256(data).hexdigest(), texts
