"""A kernel file as it is at a revision of a local git repository: the `git:REV:PATH` target.

`git:origin/main:python/sglang/kernels/ops/attention/metadata.py` is that file at `origin/main`,
read from the repository that holds it (no checkout, no copy by hand), so a pull request's
kernel file can be judged beside its merge base's. The spec splits at the first ':' after
`git:`: REV is what precedes it (a REV that itself holds ':' cannot be written; give its sha),
PATH all that follows (':' may appear in it).

PATH is relative to the working directory or absolute, and need not exist in the work tree
(a file deleted or renamed since REV): the repository is the one holding PATH's nearest existing
directory. REV is anything `git rev-parse` takes, resolved to a commit. The blob is read with
`git cat-file` (raw bytes: no textconv) and written, keyed by its content, to
`cache_dir()/git/<sha256>.py`, from where the ordinary file loader loads it. A file of a package
(an `__init__.py` beside it at REV) is extracted with its whole folder, keyed by the folder's tree
id, so its relative imports find their siblings as they were at REV. git runs as a
subprocess: no library is needed beyond the `git` program.

Each process that loads the target resolves REV itself (a campaign's workers too, in the same
working directory): a branch that moves during a run may give a worker started later another
revision; a sha does not move.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

from ..errors import TargetLoadError
from .wheels import cache_dir

PREFIX = "git:"
FORM = "git:REV:PATH"


def parse(spec: str) -> tuple[str, str]:
    """(REV, PATH) of `git:REV:PATH`, split at the first ':' after `git:`; TargetLoadError if
    either is empty or the separator is missing."""
    rest = spec.removeprefix(PREFIX)
    rev, sep, path = rest.partition(":")
    if not sep or not rev or not path:
        what = "no revision" if not rev else "no path"
        raise TargetLoadError(f"target {spec!r}: {what}; expected {FORM} (the first ':' after 'git:' "
                              f"ends REV, e.g. git:HEAD~1:metadata.py)")
    if rev.startswith("-"):
        raise TargetLoadError(f"target {spec!r}: revision {rev!r} starts with '-'; expected {FORM}")
    return rev, path


def _git(spec: str, where: Path, *args: str) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(["git", "-C", str(where), *args], capture_output=True, timeout=60)
    except FileNotFoundError:
        raise TargetLoadError(f"target {spec}: git is not installed (no 'git' program on PATH)") from None
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise TargetLoadError(f"target {spec}: running git failed: {type(exc).__name__}: {exc}") from None


def _last_line(proc: subprocess.CompletedProcess) -> str:
    lines = proc.stderr.decode("utf-8", "replace").strip().splitlines()
    return lines[-1] if lines else f"exit status {proc.returncode}"


def _repository(spec: str, path: str) -> tuple[Path, str]:
    """(the work tree's top directory, PATH relative to it, '/'-separated) for PATH, found from
    its nearest existing directory."""
    full = Path(os.path.normpath(Path.cwd() / Path(path).expanduser()))
    here, parts = full.parent, [full.name]
    while not here.is_dir():
        if here.parent == here:
            raise TargetLoadError(f"target {spec}: no directory of {str(full)!r} exists")
        here, parts = here.parent, [here.name, *parts]
    proc = _git(spec, here, "rev-parse", "--show-toplevel", "--show-prefix")
    lines = proc.stdout.decode("utf-8", "surrogateescape").split("\n")
    if proc.returncode != 0 or len(lines) < 2 or not lines[0]:
        raise TargetLoadError(f"target {spec}: {str(here)!r} is not inside a git work tree ({_last_line(proc)})")
    top, prefix = Path(lines[0]), lines[1]
    return top, prefix + "/".join(parts)


def git_kernel_file(spec: str) -> tuple[Path, str]:
    """(the kernel file at that revision, in kvfuzz's cache; a one-line description
    `git REV (SHORTSHA) RELPATH in REPO`) for a `git:REV:PATH` spec, or TargetLoadError."""
    rev, path = parse(spec)
    top, rel = _repository(spec, path)
    proc = _git(spec, top, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    sha = proc.stdout.decode().strip()
    if proc.returncode != 0 or not sha:
        raise TargetLoadError(f"target {spec}: unknown revision {rev!r} in {top} (not a commit git rev-parse knows)")
    short = sha[:12]
    kind = _git(spec, top, "cat-file", "-t", f"{sha}:{rel}")
    if kind.returncode != 0:
        raise TargetLoadError(f"target {spec}: {rel} does not exist at {rev} ({short}) in {top}")
    if kind.stdout.decode().strip() != "blob":
        raise TargetLoadError(f"target {spec}: {rel} at {rev} ({short}) is a {kind.stdout.decode().strip()}, "
                              f"not a file, in {top}")
    description = f"git {rev} ({short}) {rel} in {top}"
    folder = rel.rpartition("/")[0]
    init = _git(spec, top, "cat-file", "-t", f"{sha}:{folder + '/' if folder else ''}__init__.py")
    if init.returncode == 0:
        return _store_package(spec, top, sha, folder, rel), description
    blob = _git(spec, top, "cat-file", "blob", f"{sha}:{rel}")
    if blob.returncode != 0:
        raise TargetLoadError(f"target {spec}: cannot read {rel} at {rev} ({short}): {_last_line(blob)}")
    return _store(spec, blob.stdout), description


def _store_package(spec: str, top: Path, sha: str, folder: str, rel: str) -> Path:
    """The file inside its package's folder as it is at `sha`, extracted whole (a file of a
    package may import its siblings relatively: `from ._args import ...`), at
    cache_dir()/git/tree-<the folder's tree id>/; returns the file's path there."""
    tree = _git(spec, top, "rev-parse", f"{sha}:{folder}").stdout.decode().strip()
    dest = cache_dir() / "git" / f"tree-{tree}"
    target = dest / rel.rpartition("/")[2]
    if target.is_file():
        return target
    archive = _git(spec, top, "archive", "--format=tar", f"{sha}:{folder}" if folder else sha)
    if archive.returncode != 0:
        raise TargetLoadError(f"target {spec}: cannot read {folder or '.'} at {sha[:12]}: {_last_line(archive)}")
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=dest.parent, prefix=".tmp-tree-"))
        with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
            tar.extractall(tmp, filter="data")
        try:
            os.replace(tmp, dest)
        except OSError:  # another process extracted the same tree first
            shutil.rmtree(tmp, ignore_errors=True)
    except (OSError, tarfile.TarError) as exc:
        raise TargetLoadError(f"target {spec}: cannot write {folder or '.'} into kvfuzz's cache "
                              f"{dest.parent}: {exc}") from None
    return target


def _store(spec: str, data: bytes) -> Path:
    """`data` at cache_dir()/git/<sha256 of data>.py, written atomically (another process may
    read it); a file already there has the same content."""
    folder = cache_dir() / "git"
    dest = folder / f"{hashlib.sha256(data).hexdigest()}.py"
    if dest.is_file():
        return dest
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=".py")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.chmod(tmp, 0o644)  # mkstemp's 0600 would keep the cache from others who share it
            os.replace(tmp, dest)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError as exc:
        raise TargetLoadError(f"target {spec}: cannot write the kernel file into kvfuzz's cache "
                              f"{folder}: {exc}") from None
    return dest
