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

# Where the metadata kernels live inside the wheel, newest layout first (see shared/seed/README).
KERNEL_PATHS = (
    "sglang/kernels/ops/attention/metadata.py",  # 0.5.16 and later
    "sglang/srt/layers/attention/triton_ops/metadata.py",  # 0.5.14
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
