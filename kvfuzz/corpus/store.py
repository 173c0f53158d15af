"""Where saved cases live: a small store ABC and the directory corpus.

In the manner of Hypothesis' `ExampleDatabase` (a few abstract methods, atomic writes), with
one difference: Hypothesis' database is a cache, while this corpus IS the regression suite.
So a store never drops a case it cannot read (it raises `BadCaseFile`), and dedup only ever
replaces a case by a smaller one with the same key (same defect signature on the same target).

Layout of a `DirectoryCorpus`: `root/<op>/<key>/{case.json,tensors.npz}`. Names starting
with a dot are the store's own (`.tmp-*` cases being written, or just replaced; `.old-*`/`.del-*`
cases being replaced or deleted; `.<key>.lock` lock files) and every reader skips them.
docs/case-format.md ("Atomicity and concurrency") says what a save guarantees, to concurrent
writers and readers and across SIGKILL, and what it needs from the filesystem.

Nothing here imports torch or triton: `prune` takes the replay function as an argument.
"""

from __future__ import annotations

import abc
import contextlib
import ctypes
import dataclasses
import errno
import json
import os
import re
import shutil
import stat
import sys
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Union

from ..errors import BadCaseFile, BadInput
from .format import CASE_FILE, TENSORS_FILE, SavedCase, dumps_case_json, key_of, read_case_dir, write_case_dir

try:  # POSIX; elsewhere saves still are atomic, but concurrent dedup is best effort
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "SaveResult",
    "CorpusStore",
    "DirectoryCorpus",
    "CaseRow",
    "iter_cases",
    "list_cases",
    "merge",
    "prune",
    "set_meta",
]

PathLike = Union[str, "os.PathLike[str]"]
KEY_RE = re.compile(r"[0-9a-f]{16}")
_MAX_ATTEMPTS = 20  # compare-and-replace retries when another writer races us without the lock


@dataclass(frozen=True)
class SaveResult:
    key: str
    path: Path  # the case directory now holding the key's case
    status: str  # "new" | "replaced" (ours was smaller) | "kept" (the existing one was smaller or equal)


class CorpusStore(abc.ABC):
    """A set of saved cases keyed by `SavedCase.key()`: at most one case per key."""

    @abc.abstractmethod
    def save(self, saved: SavedCase) -> SaveResult:
        """Add `saved`; if its key is taken keep the smaller case. Atomic, safe concurrently."""

    @abc.abstractmethod
    def load(self, key: str) -> SavedCase:
        """The case under `key`: KeyError if absent, BadCaseFile if unreadable."""

    @abc.abstractmethod
    def keys(self) -> Iterator[str]:
        """Every key in the store, in a stable order."""

    @abc.abstractmethod
    def path_of(self, key: str) -> Path:
        """Where the case under `key` lives (KeyError if absent)."""

    @abc.abstractmethod
    def delete(self, key: str) -> None:
        """Remove the case under `key` atomically (KeyError if absent)."""

    def __contains__(self, key: object) -> bool:
        try:
            self.path_of(key)  # type: ignore[arg-type]
        except (KeyError, ValueError):
            return False
        return True

    def items(self) -> Iterator[tuple[str, SavedCase]]:
        for key in self.keys():
            yield key, self.load(key)


# filesystem helpers --------------------------------------------------------------------------


def _rank(saved: SavedCase) -> tuple:
    """Which of two cases of one defect a corpus keeps: the smaller, at equal size the one the
    minimizer went through (a campaign saves a finding as found, then its minimized form), and
    then the one known to show more signatures (a campaign lists the findings it merged into it),
    and then the one that records more of kvfuzz's internal errors on its way (`meta.internal_errors`)."""
    return (saved.case.size_key(), not saved.minimized, -len(saved.signatures),
            -len(saved.case.meta.get("internal_errors") or ()))


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def _key_lock(parent: Path, key: str) -> Iterator[None]:
    """Exclusive lock on `parent/.<key>.lock` (flock; released when the fd closes)."""
    fd = os.open(parent / f".{key}.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _try_rename(src: Path, dst: Path) -> bool:
    """os.rename, False if `dst` is a non-empty directory or `src` vanished (a racing writer)."""
    try:
        os.rename(src, dst)
    except FileNotFoundError:
        return False
    except OSError as exc:
        if exc.errno in (errno.EEXIST, errno.ENOTEMPTY):
            return False
        raise
    return True


def _load_renameat2():
    """glibc's renameat2 (Linux >= 3.15, glibc >= 2.28), or None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


_renameat2 = _load_renameat2()
_AT_FDCWD, _RENAME_EXCHANGE = -100, 2
# the filesystem (or kernel, or a seccomp filter) cannot exchange: fall back on two renames
_NO_EXCHANGE = {errno.EINVAL, errno.ENOSYS, errno.EPERM, errno.EOPNOTSUPP, getattr(errno, "ENOTSUP", errno.EOPNOTSUPP)}


def _exchange(a: Path, b: Path) -> bool:
    """Swap two existing directory entries in one atomic step (renameat2 RENAME_EXCHANGE), so
    that `b` is never missing. False where that cannot be done (not Linux, NFS, ...): the caller
    then renames twice. FileNotFoundError if either is gone."""
    if _renameat2 is None:
        return False
    if _renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in _NO_EXCHANGE:
        return False
    raise OSError(err, os.strerror(err), str(a), None, str(b))  # ENOENT: FileNotFoundError


def _aside_name(parent: Path, tag: str, name: str) -> Path:
    return parent / f".{tag}-{name}-{uuid.uuid4().hex[:8]}"


def _remove_case_dir(path: Path) -> None:
    """Delete a case directory: rename it aside (atomic), then rmtree the aside copy."""
    parent = path.parent
    lock = _key_lock(parent, path.name) if KEY_RE.fullmatch(path.name) else contextlib.nullcontext()
    with lock:
        aside = _aside_name(parent, "del", path.name)
        os.rename(path, aside)
        _fsync_dir(parent)
        shutil.rmtree(aside, ignore_errors=True)


def _identity(path: Path) -> tuple | None:
    try:
        st = os.stat(path)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ESTALE):  # ESTALE: removed by another NFS client
            return None
        raise
    return st.st_dev, st.st_ino, st.st_ctime_ns


def _read_stable(path: Path) -> SavedCase | None:
    """`read_case_dir(path)`, read again if a concurrent save or delete replaced or removed the
    directory while its two files were being read, so a reader never gets a case made of two
    cases' files nor a "missing case.json" from a replace. None if the directory is gone.
    BadCaseFile if the same directory stays unreadable."""
    error: BadCaseFile | None = None
    for _ in range(_MAX_ATTEMPTS):
        before = _identity(path)
        try:
            saved, error = read_case_dir(path), None
        except BadCaseFile as exc:
            saved, error = None, exc
        after = _identity(path)
        if before is not None and before == after:  # one directory throughout
            if error is not None:
                raise error
            return saved
        if before is None and after is None:
            return None
    raise error or BadCaseFile(path, f"replaced {_MAX_ATTEMPTS} times while being read")


def _check_key(key: str) -> str:
    if not isinstance(key, str) or not KEY_RE.fullmatch(key):
        raise ValueError(f"{key!r} is not a corpus key (16 lowercase hex digits)")
    return key


# the directory corpus -------------------------------------------------------------------------


class DirectoryCorpus(CorpusStore):
    """Cases as directories: `root/<op>/<key>/case.json|tensors.npz`.

    `save` is atomic (write into `root/<op>/.tmp-*`, fsync, rename into place, or exchange with
    the case it replaces) and safe when many processes save into one corpus at once (a per-key
    `flock` around recover, compare, write and replace). A writer killed at any point loses no
    saved case; the next save of the key cleans up after it (`_recover`).
    """

    def __init__(self, root: PathLike) -> None:
        self.root = Path(root)
        if self.root.exists() and not self.root.is_dir():
            raise BadInput(f"{self.root}: corpus root is not a directory")

    def __repr__(self) -> str:
        return f"DirectoryCorpus({str(self.root)!r})"

    def path_for(self, saved: SavedCase) -> Path:
        """Where `saved` goes (whether or not it is there yet)."""
        return self.root / saved.case.op / saved.key()

    def _op_dirs(self) -> list[Path]:
        if not self.root.is_dir():
            return []
        return sorted(p for p in self.root.iterdir() if p.is_dir() and not p.name.startswith("."))

    def keys(self) -> Iterator[str]:
        for op_dir in self._op_dirs():
            for p in sorted(op_dir.iterdir()):
                if p.is_dir() and KEY_RE.fullmatch(p.name):
                    yield p.name

    def path_of(self, key: str) -> Path:
        _check_key(key)
        for op_dir in self._op_dirs():
            if (op_dir / key).is_dir():
                return op_dir / key
        raise KeyError(key)

    def load(self, key: str) -> SavedCase:
        path = self.path_of(key)
        saved = self._read_checked(path, key)
        if saved is None:  # deleted meanwhile
            raise KeyError(key)
        return saved

    def delete(self, key: str) -> None:
        _remove_case_dir(self.path_of(key))

    @staticmethod
    def _read_checked(path: Path, key: str) -> SavedCase | None:
        """The case at `path` (None if the directory is gone), which must be the case of `key`."""
        saved = _read_stable(path)
        if saved is None:
            return None
        if saved.key() != key or saved.case.op != path.parent.name:
            raise BadCaseFile(
                path, f"holds a case whose place is {saved.case.op}/{saved.key()}, not "
                f"{path.parent.name}/{key} (was case.json edited?); fix it or move it with `kvfuzz corpus merge`")
        return saved

    def _stage(self, saved: SavedCase, op_dir: Path) -> Path:
        tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{saved.key()}-", dir=op_dir))
        try:
            write_case_dir(saved, tmp, fsync=True)
            _fsync_dir(tmp)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return tmp

    def _recover(self, op_dir: Path, key: str, final: Path) -> None:
        """Under the key's lock: clean up after saves and deletes of `key` that died halfway."""
        old = sorted(p for p in op_dir.glob(f".old-{key}-*") if p.is_dir())
        if not final.exists() and old:
            # a two-rename replace died between "rename the old case aside" and "rename the new
            # one in": put back the best readable old one (the new one is lost; it was not saved)
            readable = []
            for p in old:
                with contextlib.suppress(BadCaseFile):
                    readable.append((_rank(read_case_dir(p)), p))
            if readable:
                _, best = min(readable)
                os.rename(best, final)
                _fsync_dir(op_dir)
                old.remove(best)
        if final.exists():  # what is left was replaced by the (smaller) case now in place
            for p in old:
                shutil.rmtree(p, ignore_errors=True)
        for p in op_dir.glob(f".del-{key}-*"):
            shutil.rmtree(p, ignore_errors=True)
        if fcntl is not None:
            # a save stages its .tmp-<key>-* directory under this lock and removes it before
            # letting go, so any left now belongs to a dead process: half written, or after an
            # exchange the case it replaced
            for p in op_dir.glob(f".tmp-{key}-*"):
                shutil.rmtree(p, ignore_errors=True)

    def listing(self, op: str, target: str, signature: str) -> Path | None:
        """The case of `target` that lists `signature` among the signatures it shows (see
        `SavedCase.signatures`), its own key's case first; None if none does. Unreadable cases
        are passed over: they cannot say what they show."""
        own = self.root / op / key_of(signature, target)
        op_dir = self.root / op
        dirs = sorted(p for p in op_dir.iterdir() if KEY_RE.fullmatch(p.name)) if op_dir.is_dir() else []
        for path in sorted(dirs, key=lambda p: p != own):
            with contextlib.suppress(BadCaseFile):
                saved = _read_stable(path)
                if saved is not None and saved.target == target and signature in saved.signatures:
                    return path
        return None

    def save(self, saved: SavedCase) -> SaveResult:
        key = saved.key()
        op_dir = self.root / saved.case.op
        op_dir.mkdir(parents=True, exist_ok=True)
        final = op_dir / key
        staged: list[Path] = []
        tmp: Path | None = None

        def stage() -> Path:
            # (again, if it vanished: only a racing writer without working locks removes it)
            if tmp is not None and tmp.is_dir():
                return tmp
            staged.append(self._stage(saved, op_dir))
            return staged[-1]

        try:
            with _key_lock(op_dir, key):
                self._recover(op_dir, key, final)
                for _ in range(_MAX_ATTEMPTS):
                    if not os.path.lexists(final):
                        tmp = stage()
                        if _try_rename(tmp, final):
                            _fsync_dir(op_dir)
                            return SaveResult(key, final, "new")
                        continue  # a writer without the lock got there first: compare with it
                    existing = self._read_checked(final, key)  # unreadable: BadCaseFile, touch nothing
                    if existing is None:
                        continue  # vanished under us: start over
                    if not _rank(saved) < _rank(existing):
                        return SaveResult(key, final, "kept")
                    if existing.expected == "xfail" and saved.expected == "pass":
                        # triage belongs to the defect (the key), not to one example of it
                        saved = dataclasses.replace(saved, expected="xfail", reason=existing.reason)
                        tmp = None
                    tmp = stage()
                    try:
                        swapped = _exchange(tmp, final)
                    except FileNotFoundError:
                        continue  # ours or theirs vanished under us: start over
                    if swapped:  # `final` was never missing; `tmp` now holds the replaced case
                        _fsync_dir(op_dir)
                        shutil.rmtree(tmp, ignore_errors=True)
                        return SaveResult(key, final, "replaced")
                    aside = _aside_name(op_dir, "old", key)
                    if not _try_rename(final, aside):
                        continue  # vanished under us: start over
                    if _try_rename(tmp, final):
                        _fsync_dir(op_dir)
                        shutil.rmtree(aside, ignore_errors=True)
                        return SaveResult(key, final, "replaced")
                    if _try_rename(aside, final):
                        continue  # ours vanished (a writer without working locks): put the old one back
                    # another writer slipped a case in: ours is smaller than the one set aside,
                    # so that one can go; ours now competes with the newcomer
                    shutil.rmtree(aside, ignore_errors=True)
                raise OSError(f"{final}: gave up after {_MAX_ATTEMPTS} racing attempts to save")
        finally:
            for p in staged:
                if p.exists():
                    shutil.rmtree(p, ignore_errors=True)


# whole-corpus operations ----------------------------------------------------------------------


def _as_paths(paths: PathLike | Iterable[PathLike]) -> list[Path]:
    if isinstance(paths, (str, os.PathLike)):
        return [Path(paths)]
    return [Path(p) for p in paths]


def _case_dirs(root: Path) -> list[Path]:
    """Case directories under `root` (itself, if it holds case.json), sorted; dot-dirs skipped."""
    if root.is_file():
        if root.name == CASE_FILE:
            return [root.parent]
        raise BadInput(f"{root}: not a corpus directory, case directory or {CASE_FILE}")
    if (root / CASE_FILE).exists() or (root / TENSORS_FILE).exists():
        return [root]
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        if CASE_FILE in filenames or TENSORS_FILE in filenames:
            found.append(Path(dirpath))
            dirnames[:] = []  # a case directory holds no further cases
    return sorted(found)


def iter_cases(paths: PathLike | Iterable[PathLike]) -> Iterator[tuple[Path, SavedCase | BadCaseFile]]:
    """Every case under one or more corpus roots or case directories, sorted per root.

    Unreadable cases come back as BadCaseFile values (not raised), so a listing can show
    them and the pytest plugin can turn them into failing items. A path that does not exist
    raises BadInput before anything is yielded.
    """
    roots = _as_paths(paths)
    for p in roots:
        if not p.exists():
            raise BadInput(f"{p}: no such file or directory")
    seen: set[Path] = set()
    for root in roots:
        for case_dir in _case_dirs(root):
            real = case_dir.resolve()
            if real in seen:
                continue
            seen.add(real)
            item: SavedCase | BadCaseFile | None
            try:
                item = _read_stable(case_dir)
            except BadCaseFile as exc:
                item = exc
            if item is not None:  # None: deleted while we walked
                yield case_dir, item


@dataclass(frozen=True)
class CaseRow:
    """One line of `kvfuzz corpus ls`."""

    op: str
    key: str
    kind: str  # the finding kind; "-" for a case without a finding
    signature: str  # the finding signature; "-" without a finding
    target: str
    expected: str
    minimized: bool
    path: Path
    error: str | None = None  # why the case could not be read (then the other fields are "?")


def list_cases(paths: PathLike | Iterable[PathLike]) -> list[CaseRow]:
    rows = []
    for path, item in iter_cases(paths):
        if isinstance(item, BadCaseFile):
            rows.append(CaseRow("?", path.name, "?", "?", "?", "?", False, path, error=item.why))
            continue
        f = item.finding
        rows.append(CaseRow(
            op=item.case.op, key=item.key(), kind=f.kind if f else "-", signature=f.signature if f else "-",
            target=item.target, expected=item.expected, minimized=item.minimized, path=path,
        ))
    return rows


def merge(sources: PathLike | Iterable[PathLike], dest: CorpusStore | PathLike) -> list[SaveResult]:
    """Save every case under `sources` into `dest` (dedup by key: the smaller case wins).

    All sources are read first; if any case is unreadable its BadCaseFile is raised and
    nothing is saved.
    """
    store = dest if isinstance(dest, CorpusStore) else DirectoryCorpus(dest)
    cases = []
    for _path, item in iter_cases(sources):
        if isinstance(item, BadCaseFile):
            raise item
        cases.append(item)
    return [store.save(saved) for saved in cases]


def set_meta(case_dir: PathLike, values: Mapping[str, Any]) -> SavedCase:
    """Set keys of one saved case's `meta` (not part of the case's identity: its key and its
    directory stay) and return the case as read back. Nothing else changes: `case.json` is
    edited as a document (only `meta`'s keys named in `values`), written beside itself, fsynced
    and renamed over the old one (same mode), under the key's lock where the directory is named
    by a key (a save of that key waits); `tensors.npz` is not touched. A case that cannot be
    read is refused (BadCaseFile) and left as it is."""
    case_dir = Path(case_dir)
    named = KEY_RE.fullmatch(case_dir.name)
    with _key_lock(case_dir.parent, case_dir.name) if named else contextlib.nullcontext():
        before = read_case_dir(case_dir)
        path = case_dir / CASE_FILE
        doc = json.loads(path.read_text(encoding="utf-8"))
        doc["meta"] = {**doc["meta"], **json.loads(json.dumps(dict(values), allow_nan=False))}
        fd, tmp = tempfile.mkstemp(prefix=f".{CASE_FILE}.", dir=case_dir)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(dumps_case_json(doc))
                f.flush()
                os.fsync(f.fileno())
            os.chmod(tmp, stat.S_IMODE(os.stat(path).st_mode))
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        _fsync_dir(case_dir)
        after = read_case_dir(case_dir)
    if after.key() != before.key() or after.case != before.case or any(
            after.case.meta.get(k) != v for k, v in doc["meta"].items()):
        raise OSError(f"{case_dir}: case.json read back is not the case with its new meta")
    return after


WOULD_REMOVE = "would remove (no longer fails)"
REMOVED = "removed (no longer fails)"
DEVICES = ("cpu", "cuda")


def skipped_other_device(seen_on: str, device: str) -> str:
    """prune's action for an xfail case whose defect was seen on another device."""
    return (f"skipped (defect seen on {seen_on}, not replayed on {device}: "
            f"prune it on {seen_on})")


def prune(
    paths: PathLike | Iterable[PathLike],
    still_fails: Callable[[SavedCase], bool],
    apply: bool = False,
    *,
    device: str,
) -> list[tuple[Path, str]]:
    """Find xfail cases whose defect no longer shows (`still_fails(saved)` is False).

    `device` ("cpu" or "cuda") is where `still_fails` replays. A case whose defect was seen
    on the other device (`SavedCase.device`) is neither replayed nor deleted: a defect may show
    on one device only (a wild read that segfaults the CPU interpreter, a race on the GPU), so
    not seeing it here says nothing. Such cases are reported as skipped, with the reason.

    Returns (path, action) for each no-longer-failing case, each case skipped for its device
    and each unreadable case (never touched). With `apply=True` the no-longer-failing ones
    are deleted (renamed aside, then removed). Cases expected to pass are not replayed: they
    are the regression suite proper.
    """
    if device not in DEVICES:
        raise ValueError(f"prune: device must be one of {DEVICES} (where still_fails replays), got {device!r}")
    actions = []
    for path, item in iter_cases(paths):
        if isinstance(item, BadCaseFile):
            actions.append((path, f"skipped (unreadable: {item.why})"))
            continue
        if item.expected != "xfail":
            continue
        if item.device != device:
            actions.append((path, skipped_other_device(item.device, device)))
            continue
        if still_fails(item):
            continue
        if apply:
            _remove_case_dir(path)
            actions.append((path, REMOVED))
        else:
            actions.append((path, WOULD_REMOVE))
    return actions
