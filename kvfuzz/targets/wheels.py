"""SGLang releases from PyPI as targets: fetch a wheel once, keep only its kernel file.

The cache (`$KVFUZZ_CACHE`, default `~/.cache/kvfuzz`) holds `sglang-X.Y.Z/metadata.py`;
copy that folder to a machine without network (e.g. a GPU box) to use the target there.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from ..errors import TargetLoadError

# Where the metadata kernels live inside the wheel, newest layout first (docs/releases.md).
KERNEL_PATHS = (
    "sglang/kernels/ops/attention/metadata.py",  # 0.5.16 to 0.5.23
    "sglang/srt/layers/attention/triton_ops/metadata.py",  # 0.5.13 to 0.5.15 (and their .post releases)
)
# Before 0.5.13 (0.5.6 to 0.5.12) the same entry points are defined inside these modules, which
# import sgl_kernel and most of sglang.srt: kvfuzz cannot load them yet (docs/releases.md).
BACKEND_PATHS = (
    "sglang/srt/layers/attention/flashattention_backend.py",
    "sglang/srt/layers/attention/triton_backend.py",
)
_VERSION = re.compile(r"^[0-9][0-9A-Za-z.+-]*$")


def cache_dir() -> Path:
    return Path(os.environ.get("KVFUZZ_CACHE") or Path.home() / ".cache" / "kvfuzz")


def sglang_kernel_file(version: str) -> Path:
    if not _VERSION.match(version):
        raise TargetLoadError(f"not a version: sglang=={version!r}")
    dest = cache_dir() / f"sglang-{version}" / "metadata.py"
    if dest.is_file():
        return dest
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--quiet",
               "--dest", tmp, f"sglang=={version}"]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        wheels = list(Path(tmp).glob("sglang-*.whl"))
        if proc.returncode != 0 or not wheels:
            last = (proc.stderr.strip().splitlines() or ["no wheel"])[-1]
            raise TargetLoadError(f"cannot fetch sglang=={version} from PyPI: {last}")
        with zipfile.ZipFile(wheels[0]) as wheel:
            names = set(wheel.namelist())
            member = next((p for p in KERNEL_PATHS if p in names), None)
            if member is None and any(b"def normal_decode_set_metadata" in wheel.read(p)
                                      for p in BACKEND_PATHS if p in names):
                raise TargetLoadError(
                    f"sglang=={version} keeps its metadata kernels inside {BACKEND_PATHS[0]} and "
                    f"triton_backend.py, which kvfuzz cannot load yet (they import sgl_kernel and most of "
                    f"sglang.srt); releases from 0.5.13 on can be targeted (docs/releases.md)")
            if member is None:
                raise TargetLoadError(f"sglang=={version}: no metadata kernel file in the wheel "
                                      f"(looked for {', '.join(KERNEL_PATHS)})")
            data = wheel.read(member)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp_dest = dest.with_suffix(f".tmp{os.getpid()}")
    tmp_dest.write_bytes(data)
    (dest.parent / "SOURCE").write_text(f"sglang=={version} {member}\n")
    os.replace(tmp_dest, dest)
    return dest


def installed_kernel_file() -> tuple[Path, str]:
    """(kernel file, version) of the installed `sglang` distribution, found without importing
    it (importlib.metadata, then the package's location)."""
    import importlib.util
    from importlib import metadata

    try:
        dist = metadata.distribution("sglang")
    except metadata.PackageNotFoundError:
        raise TargetLoadError("no sglang distribution is installed here (pip install sglang==X.Y.Z, "
                              "or use --target sglang==X.Y.Z)") from None
    roots = [Path(str(dist.locate_file("")))]
    try:
        spec = importlib.util.find_spec("sglang")
    except (ImportError, ValueError):
        spec = None
    for where in (spec.submodule_search_locations or []) if spec else []:
        roots.append(Path(where).parent)
    for root in roots:
        for member in KERNEL_PATHS:
            if (root / member).is_file():
                return root / member, dist.version
    raise TargetLoadError(f"installed sglang {dist.version} has no metadata kernel file "
                          f"(looked for {', '.join(KERNEL_PATHS)}; before 0.5.13 the kernels live in the "
                          f"attention backends, which kvfuzz cannot load yet: docs/releases.md)")
