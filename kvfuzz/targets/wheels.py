"""SGLang releases from PyPI as targets: fetch a wheel once, keep only its kernel files.

The cache (`$KVFUZZ_CACHE`, default `~/.cache/kvfuzz`) holds, per release, `sglang-X.Y.Z/` with
each kernel file kvfuzz keeps (`releases.kernel_files()`) that the release has: `metadata.py`
(the metadata kernels), `kv_indices.py` (the KV-index kernels: FlashInfer's, FlashMLA's, the
chunked prefix's), `trtllm_mha_page_table.py` (the TRT-LLM MHA page table, 0.5.14 on) and
`pa_page_table.py` (the prefill-aware SWA page table, 0.5.15 on; extracted from the
FlashAttention backend in 0.5.15), `trtllm_mha_graph_metadata.py` (the TRT-LLM MHA backend's fused
CUDA-graph metadata update, 0.5.15 on), `aiter_unified_attention.py` (the AITER unified-attention
page tables, 0.5.12 on; 0.5.23's `aiter_unified_page_table.py`), and `SOURCE`, where each came
from. One download writes every file; a folder an older kvfuzz wrote (metadata.py only, or without
a later file) gets the missing file on demand, with one more download. A file that `RELEASES` says a release does not have is not looked for (no
download). Copy the folder to a machine without network (e.g. a
GPU box) to use the target there. Releases before 0.5.13 have no such files: their `RELEASES`
entry names the modules that hold the entry points, and the file is generated from them
(`extract.py`); a generated file whose header names other entry points than `RELEASES` takes now
(an older kvfuzz's) is generated again, with one more download (without network the old file is
kept: the entry points it has still load).
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Callable

from ..errors import TargetLoadError
from .extract import Source, extract
from .releases import AITER_UNIFIED, KV_INDICES, METADATA, PA_PAGE_TABLE, TRTLLM_GRAPH, TRTLLM_MHA, kernel_files, \
    release_entry

# Where the metadata kernels live inside the wheel, newest layout first (docs/releases.md).
KERNEL_PATHS = (
    "sglang/kernels/ops/attention/metadata.py",  # 0.5.16 to 0.5.23
    "sglang/srt/layers/attention/triton_ops/metadata.py",  # 0.5.13 to 0.5.15 (and their .post releases)
)
# Where each kernel file lives inside the wheel, newest layout first (a release RELEASES does not
# know is looked up here; before 0.5.13 the file is extracted, as RELEASES says).
WHEEL_PATHS = {
    METADATA: KERNEL_PATHS,
    KV_INDICES: (
        "sglang/kernels/ops/attention/kv_indices.py",  # 0.5.23
        "sglang/kernels/ops/kvcache/kv_indices.py",  # 0.5.16 to 0.5.22
        "sglang/srt/layers/attention/triton_ops/kv_indices.py",  # 0.5.13 to 0.5.15
    ),
    TRTLLM_MHA: (
        "sglang/kernels/ops/attention/trtllm_mha_page_table.py",  # 0.5.23
        "sglang/kernels/ops/kvcache/trtllm_mha_page_table.py",  # 0.5.16 to 0.5.22
        "sglang/srt/layers/attention/triton_ops/trtllm_mha_page_table.py",  # 0.5.14 to 0.5.15
    ),
    PA_PAGE_TABLE: (
        "sglang/kernels/ops/attention/pa_page_table.py",  # 0.5.16 to 0.5.23 (0.5.15: extracted, RELEASES)
    ),
    TRTLLM_GRAPH: (
        "sglang/kernels/ops/attention/trtllm_mha_graph_metadata.py",  # 0.5.23
        "sglang/kernels/ops/kvcache/trtllm_mha_graph_metadata.py",  # 0.5.16 to 0.5.22
        "sglang/srt/layers/attention/triton_ops/trtllm_mha_graph_metadata.py",  # 0.5.15
    ),
    AITER_UNIFIED: (
        "sglang/kernels/ops/attention/aiter_unified_page_table.py",  # 0.5.23 (renamed, the same text)
        "sglang/kernels/ops/kvcache/aiter_unified_attention.py",  # 0.5.16 to 0.5.22
        "sglang/srt/layers/attention/triton_ops/aiter_unified_attention.py",  # 0.5.12 to 0.5.15
    ),
}
# Before 0.5.13 the same entry points are defined inside these modules, which import sgl_kernel
# and most of sglang.srt: kvfuzz extracts them for the releases RELEASES lists (0.5.6 - 0.5.12).
BACKEND_PATHS = (
    "sglang/srt/layers/attention/flashattention_backend.py",
    "sglang/srt/layers/attention/triton_backend.py",
)
_VERSION = re.compile(r"^[0-9][0-9A-Za-z.+-]*$")
_HEADER_ENTRY = re.compile(r"^#   (\S+) \(sha256 [0-9a-f]+\): (.+)$")  # a module line of `_generated`'s header


def cache_dir() -> Path:
    return Path(os.environ.get("KVFUZZ_CACHE") or Path.home() / ".cache" / "kvfuzz")


def sglang_kernel_file(version: str, name: str = METADATA) -> Path:
    """The cached kernel file `name` (metadata.py, kv_indices.py, trtllm_mha_page_table.py, ...) of
    sglang==`version`, fetched from its PyPI wheel when the cache lacks it (every kernel file the
    cache lacks is written from that one download). TargetLoadError, one line, when it cannot be
    had, at once (no download) when `RELEASES` says the release has no such file."""
    if not _VERSION.match(version):
        raise TargetLoadError(f"not a version: sglang=={version!r}")
    if name not in kernel_files():
        raise TargetLoadError(f"kvfuzz keeps no {name} of an SGLang release (it keeps {', '.join(kernel_files())})")
    release = release_entry(version)
    if release is not None and name not in release.files:
        raise TargetLoadError(f"sglang=={version} has no {name} (docs/releases.md)")
    folder = cache_dir() / f"sglang-{version}"
    dest = folder / name
    if _current(dest, version, name):
        return dest
    with tempfile.TemporaryDirectory() as tmp:
        wheel_path = _pip_download(version, Path(tmp))
        if isinstance(wheel_path, str):  # why it could not
            if dest.is_file():  # extracted by an older kvfuzz: its entry points still load, the others are missing
                return dest
            raise TargetLoadError(_unfetched(version, name, folder, wheel_path))
        with zipfile.ZipFile(wheel_path) as wheel:
            for other in kernel_files():
                if other != name and _current(folder / other, version, other):
                    continue
                try:
                    data, member = _from_wheel(version, other, wheel, wheel_path)
                except TargetLoadError:
                    if other == name:
                        raise
                    continue  # said when that file is asked for
                _store(folder / other, data, f"sglang=={version} {member}")
    return dest


def _current(path: Path, version: str, name: str) -> bool:
    """Whether the cached kernel file `path` is there and is what this kvfuzz writes: a file
    `RELEASES` says is extracted must name in its header the modules and entry points `RELEASES`
    takes now (an older kvfuzz took fewer: 0.5.6 - 0.5.12's kv_indices.py held FlashInfer's kernel
    alone), else it is extracted again from the wheel."""
    if not path.is_file():
        return False
    release = release_entry(version)
    own = release.files.get(name) if release is not None else None
    if own is None or own.member is not None or not own.backends:
        return True
    return extracted_from(path.read_text(errors="replace")) == tuple((m, tuple(e)) for m, e in own.backends)


def extracted_from(text: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """(module, entry points) of each module an extracted kernel file's header names (`_generated`);
    () for a file that is not extracted."""
    out = []
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        m = _HEADER_ENTRY.match(line)
        if m:
            out.append((m[1], tuple(m[2].split(", "))))
    return tuple(out)


# pip's answer when the index lists the package but not the version: "(from versions: 0.1.3, ...)"
_NO_SUCH_VERSION = re.compile(r"Could not find a version that satisfies the requirement sglang==\S+ \(from versions: ([^)]*)\)")


def _pip_download(version: str, into: Path) -> Path | str:
    """The wheel of sglang==`version` downloaded into `into`, or pip's last line of why not."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--quiet",
           "--dest", str(into), f"sglang=={version}"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wheels = list(into.glob("sglang-*.whl"))
    if proc.returncode != 0 or not wheels:
        listed = _NO_SUCH_VERSION.search(proc.stderr)
        known = [v.strip() for v in listed[1].split(",") if v.strip()] if listed else []
        if known and known != ["none"]:  # the index answered, and it has no such release: nothing to copy
            raise TargetLoadError(f"sglang=={version}: no such release on the package index (its newest is {known[-1]})")
        return (proc.stderr.strip().splitlines() or ["no wheel"])[-1]
    return wheels[0]


def _unfetched(version: str, name: str, folder: Path, why: str) -> str:
    """The one line saying a kernel file is neither cached nor fetchable, and what to copy."""
    if folder.is_dir() and any((folder / f).is_file() for f in kernel_files()):  # an older kvfuzz's folder
        return (f"cannot fetch sglang=={version} from PyPI ({why}) for {name}, which {folder} lacks (a cache "
                f"written before kvfuzz kept {name}): copy sglang-{version}/{name} there from the kvfuzz cache "
                f"of a machine that can reach PyPI (KVFUZZ_CACHE, default ~/.cache/kvfuzz)")
    return (f"cannot fetch sglang=={version} from PyPI ({why}): copy the folder sglang-{version}/ into "
            f"{folder.parent} from the kvfuzz cache of a machine that can reach PyPI (KVFUZZ_CACHE, "
            f"default ~/.cache/kvfuzz)")


def _from_wheel(version: str, name: str, wheel: zipfile.ZipFile, wheel_path: Path) -> tuple[bytes, str]:
    """(the bytes of kernel file `name`, where in the wheel it came from), or TargetLoadError."""
    names = set(wheel.namelist())
    member = next((p for p in WHEEL_PATHS[name] if p in names), None)
    if member is not None:
        return wheel.read(member), member
    release = release_entry(version)
    own = release.files.get(name) if release is not None else None
    if own is not None and own.backends:
        where = [f"the wheel of sglang=={version}:", f"{wheel_path.name} (sha256 {_sha256(wheel_path.read_bytes())}),"]
        data = _generated(version, where, lambda m: wheel.read(m) if m in names else None, own.backends)
        return data, " + ".join(m for m, _ in own.backends) + " (extracted)"
    if name == METADATA and any(b"def normal_decode_set_metadata" in wheel.read(p) for p in BACKEND_PATHS if p in names):
        raise TargetLoadError(
            f"sglang=={version} keeps its metadata kernels inside {BACKEND_PATHS[0]} and "
            f"triton_backend.py, and kvfuzz has not read this release (it extracts them for "
            f"0.5.6 - 0.5.12); releases from 0.5.6 on can be targeted (docs/releases.md)")
    what = "metadata kernel file" if name == METADATA else name
    raise TargetLoadError(f"sglang=={version}: no {what} in the wheel (looked for {', '.join(WHEEL_PATHS[name])})")


def _store(dest: Path, data: bytes, source: str) -> Path:
    """Write a kernel file into the cache (atomically: another process may read it) and, in the
    folder's SOURCE, where it came from (a line per file)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp_dest = dest.with_suffix(f".tmp{os.getpid()}")
    tmp_dest.write_bytes(data)
    record = dest.parent / "SOURCE"
    lines = record.read_text().splitlines() if record.is_file() else []
    lines = [line for line in lines if not line.startswith(f"{dest.name}: ")] + [f"{dest.name}: {source}"]
    tmp_record = record.with_suffix(f".tmp{os.getpid()}")
    tmp_record.write_text("\n".join(lines) + "\n")
    os.replace(tmp_record, record)
    os.replace(tmp_dest, dest)
    return dest


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _generated(version: str, where: list[str], read: Callable[[str], bytes | None], backends) -> bytes:
    """A kernel file generated from a release's modules (`read(member)`: a module's bytes, or
    None), headed by where they came from (`where`) and their checksums."""
    sources, lines = [], []
    for member, entries in backends:
        data = read(member)
        if data is None:
            raise TargetLoadError(f"sglang {version}: {member} is missing, so {', '.join(entries)} cannot be extracted")
        sources.append(Source(data.decode("utf-8"), member, entries))
        lines.append(f"#   {member} (sha256 {_sha256(data)}): {', '.join(entries)}")
    header = "\n".join([
        f"# Generated by kvfuzz (kvfuzz/targets/extract.py) from {where[0]}",
        *(f"# {line}" for line in where[1:]),
        "# the entry points below and the module-level definitions they need, taken from",
        *lines,
        "# without importing those modules. SGLang's code (Apache-2.0): it lives in kvfuzz's cache only.",
    ])
    return extract(sources, header).encode("utf-8")


def installed_kernel_file(name: str = METADATA) -> tuple[Path, str]:
    """(kernel file `name`, version) of the installed `sglang` distribution, found without
    importing it (importlib.metadata, then the package's location)."""
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
    release = release_entry(dist.version)
    own = release.files.get(name) if release else None
    backends = own.backends if own else ()
    for root in roots:
        for member in WHEEL_PATHS.get(name, ()):
            if (root / member).is_file():
                return root / member, dist.version
        if backends and all((root / m).is_file() for m, _ in backends):  # 0.5.6 - 0.5.12: extract
            data = _generated(dist.version, [f"the installed sglang {dist.version}:", f"{root},"],
                              lambda m: (root / m).read_bytes(), backends)
            # keyed by content: the installed modules may differ from the wheel's
            dest = cache_dir() / f"sglang-{dist.version}-installed-{_sha256(data)[:12]}" / name
            if not dest.is_file():
                _store(dest, data, f"installed sglang {dist.version} at {root} (extracted)")
            return dest, dist.version
    what = "metadata kernel file" if name == METADATA else name
    raise TargetLoadError(f"installed sglang {dist.version} has no {what} "
                          f"(looked for {', '.join(WHEEL_PATHS.get(name, ()))}" + ("" if backends or name != METADATA else
                          "; before 0.5.6 kvfuzz does not read the attention backends: docs/releases.md") + ")")
