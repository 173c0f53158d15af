"""The on-disk case format: one directory per saved case, `case.json` + `tensors.npz`.

`case.json` is small, sorted and indented so a case reads well in code review; it holds the
op, scalars, every tensor's layout and role, the finding, where it was found and how to
treat it (`expected`). `tensors.npz` holds the input tensors' logical values, one array per
"in" tensor, never pickled objects. docs/case-format.md is the reference for both files.

Reading is strict and cheap (json + numpy, no torch): anything wrong with the files raises
`BadCaseFile(path, why)` with a one-line `why`, never another exception type.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import re
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from ..case import DTYPES, Case, TensorSpec
from ..errors import BadCaseFile
from ..findings import KINDS, VARIES, Finding, defect_kind

__all__ = [
    "SCHEMA_VERSION",
    "CASE_FILE",
    "TENSORS_FILE",
    "EXPECTED",
    "ORIGINS",
    "SavedCase",
    "write_case_dir",
    "read_case_dir",
    "case_to_json",
    "case_from_json",
    "dumps_case_json",
    "now_iso",
    "environment_versions",
]

# bump for ANY change an older reader would misread; readers refuse newer. 2: origin "batch"
# (the batched engine); 3: decode_metadata's optional tensors and scalars of SGLang 0.5.17-0.5.23
# (full_v2p, swa_v2p, swa_src_table; the flags, kernel_page_multiplier) and their variants.
# Schema-1 and -2 cases read unchanged.
SCHEMA_VERSION = 3
CASE_FILE = "case.json"
TENSORS_FILE = "tensors.npz"
EXPECTED = ("pass", "xfail")
NOT_ENGINES = ("hand", "imported", "minimizer")  # origins of cases no engine drew


def origins() -> tuple[str, ...]:
    """Who may have produced a case: each registered engine (`kvfuzz.engines.ENGINES`), or one
    of NOT_ENGINES. Read at each check, so an engine registered later saves its cases too."""
    from ..engines import ENGINES

    return (*ENGINES, *NOT_ENGINES)


ORIGINS = origins()

_TOP_KEYS = frozenset({
    "schema", "op", "variant", "scalars", "tensors", "target", "device", "versions", "finding",
    "expected", "reason", "minimized", "minimize_log", "found_at", "origin", "meta",
})
_SPEC_KEYS = frozenset({"dtype", "shape", "strides", "offset", "storage_size", "role"})
_FINDING_KEYS = frozenset(Finding("crash", "op", "path", "-", "all", "").to_json())
_NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")  # op names: safe as a directory name
_FIXED_ZIP_TIME = (1980, 1, 1, 0, 0, 0)  # same content -> same npz bytes


def now_iso() -> str:
    """The current UTC time, ISO 8601 to the second (the default `found_at`)."""
    return datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat()


def environment_versions(gpu: str | None = None) -> dict[str, str]:
    """Versions for `SavedCase.versions`, read from package metadata (imports no torch).

    `gpu` is the device name (e.g. `torch.cuda.get_device_name()`); None means the case ran
    on the CPU under the Triton interpreter.
    """
    import platform
    from importlib import metadata

    def version(dist: str) -> str:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return "not installed"

    return {
        "kvfuzz": version("kvfuzz"),
        "torch": version("torch"),
        "triton": version("triton"),
        "numpy": np.__version__,
        "python": platform.python_version(),
        "gpu": gpu if gpu is not None else "cpu (triton interpreter)",
    }


def _le(dtype: str) -> np.dtype:
    """The little-endian form of `dtype`: what tensors.npz stores on every machine."""
    return np.dtype(dtype).newbyteorder("<")


def _is_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _normalize_scalar(name: str, v: Any) -> Any:
    """JSON-native scalar: int, bool, None or str (NumPy ints and bools become Python ones)."""
    if v is None or isinstance(v, (bool, int, str)):
        return v
    if isinstance(v, np.bool_):
        return bool(v)
    if isinstance(v, np.integer):
        return int(v)
    raise ValueError(f"scalar {name!r} must be an int, bool, None or str, got {type(v).__name__} {v!r}")


def _json_default(o: Any) -> Any:
    """For `meta` and finding `cells`: NumPy scalars and arrays become JSON values."""
    if isinstance(o, np.bool_):
        return bool(o)
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, (tuple, set, frozenset)):
        return list(o)
    raise TypeError(f"{type(o).__name__} is not JSON-serialisable")


@dataclass(frozen=True, kw_only=True)
class SavedCase:
    """A case as the corpus keeps it: the Case, what went wrong, where, and how to treat it.

    Construct with keywords; `case`, `finding`, `target`, `device`, `versions`, `origin` are
    required. Case scalars that are NumPy ints/bools are normalised to Python ones here (so
    the saved case equals what reading it back gives).
    """

    case: Case
    finding: Finding | None  # None: a hand-written case that must pass
    target: str  # the target spec it was found with: "builtin", "sglang==0.5.14", "path/x.py"
    device: str  # "cuda" or "cpu"
    versions: Mapping[str, str]  # kvfuzz, torch, triton, numpy, python, gpu (see environment_versions)
    origin: str  # one of ORIGINS: who produced the case
    expected: str = "pass"  # "pass": replay must be clean; "xfail": a known, triaged defect
    reason: str | None = None  # why it is xfail (required for xfail), e.g. an issue link
    minimized: bool = False  # the minimizer has shrunk it
    minimize_log: tuple[str, ...] = ()  # what the minimizer removed, one line each
    found_at: str = field(default_factory=now_iso)  # ISO 8601 time

    def __post_init__(self) -> None:
        c = self.case
        if not isinstance(c, Case):
            raise ValueError(f"case must be a Case, got {type(c).__name__}")
        if not isinstance(c.op, str) or not _NAME_RE.fullmatch(c.op):
            raise ValueError(f"op {c.op!r} is not a valid op name (letters, digits, _ . -)")
        for name in c.tensors:
            if not isinstance(name, str) or not name.isidentifier():
                raise ValueError(f"tensor name {name!r} is not an identifier")
        for name in c.scalars:
            if not isinstance(name, str):
                raise ValueError(f"scalar name {name!r} is not a string")
        scalars = {k: _normalize_scalar(k, v) for k, v in c.scalars.items()}
        if any(type(scalars[k]) is not type(v) for k, v in c.scalars.items()):
            object.__setattr__(self, "case", c.replace(scalars=scalars))
        try:
            json.dumps(dict(c.meta), default=_json_default, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"case.meta is not JSON-serialisable: {exc}") from None
        if self.finding is not None:
            if not isinstance(self.finding, Finding):
                raise ValueError(f"finding must be a Finding or None, got {type(self.finding).__name__}")
            if self.finding.op != c.op:
                raise ValueError(f"finding is for op {self.finding.op!r} but the case is {c.op!r}")
        for attr in ("target", "device", "origin", "found_at"):
            v = getattr(self, attr)
            if not isinstance(v, str) or not v:
                raise ValueError(f"{attr} must be a non-empty string, got {v!r}")
        if self.origin not in origins():
            raise ValueError(f"origin must be one of {origins()}, got {self.origin!r}")
        try:
            datetime.datetime.fromisoformat(self.found_at)
        except ValueError:
            raise ValueError(f"found_at {self.found_at!r} is not an ISO 8601 time") from None
        if not isinstance(self.versions, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in self.versions.items()
        ):
            raise ValueError(f"versions must map str to str, got {self.versions!r}")
        object.__setattr__(self, "versions", dict(sorted(self.versions.items())))
        if self.expected not in EXPECTED:
            raise ValueError(f"expected must be one of {EXPECTED}, got {self.expected!r}")
        if self.reason is not None and not isinstance(self.reason, str):
            raise ValueError(f"reason must be a string or None, got {self.reason!r}")
        if self.expected == "xfail" and not (self.reason and self.reason.strip()):
            raise ValueError("an xfail case needs a reason (why it fails, e.g. an issue link)")
        if not isinstance(self.minimized, bool):
            raise ValueError(f"minimized must be a bool, got {self.minimized!r}")
        log = tuple(self.minimize_log)
        if not all(isinstance(line, str) and "\n" not in line for line in log):
            raise ValueError("minimize_log must be strings, one line each")
        object.__setattr__(self, "minimize_log", log)

    def __hash__(self) -> int:
        return hash((self.key(), self.case))

    @property
    def signatures(self) -> tuple[str, ...]:
        """Every signature the case shows: its finding's, then the others a campaign found the
        same case to show (`meta["signatures"]`, when it merged their findings into this one)."""
        own = (self.finding.signature,) if self.finding is not None else ()
        listed = self.case.meta.get("signatures", ())
        return own + tuple(s for s in listed if isinstance(s, str) and s not in own)

    @property
    def strict(self) -> bool:
        """An xfail case whose replay must show its defect; False for a defect whose runs differ
        by nature (`findings.VARIES`): a replay that happens not to show it proves nothing."""
        return self.finding is None or defect_kind(self.finding.signature) not in VARIES

    def key(self) -> str:
        """The corpus directory name: one defect (signature) per target is one directory."""
        return key_of(self.finding.signature if self.finding is not None else self.case.digest(), self.target)


def key_of(ident: str, target: str) -> str:
    """The key of a case of `target` whose finding has signature `ident` (or, without a
    finding, whose `Case.digest()` is `ident`)."""
    return hashlib.sha256(f"{ident}|{target}".encode()).hexdigest()[:16]


# writing ------------------------------------------------------------------------------------


def case_to_json(saved: SavedCase) -> dict[str, Any]:
    """The `case.json` document of `saved` (JSON-native values only)."""
    c = saved.case
    tensors = {}
    for name, spec in sorted(c.tensors.items()):
        tensors[name] = {**spec.to_json(), "role": "in" if name in c.values else "out"}
    doc = {
        "schema": SCHEMA_VERSION,
        "op": c.op,
        "variant": c.variant,
        "scalars": {k: _normalize_scalar(k, v) for k, v in sorted(c.scalars.items())},
        "tensors": tensors,
        "target": saved.target,
        "device": saved.device,
        "versions": dict(saved.versions),
        "finding": saved.finding.to_json() if saved.finding is not None else None,
        "expected": saved.expected,
        "reason": saved.reason,
        "minimized": saved.minimized,
        "minimize_log": list(saved.minimize_log),
        "found_at": saved.found_at,
        "origin": saved.origin,
        "meta": dict(c.meta),
    }
    # round-trip through json so NumPy values in meta / cells become plain JSON values
    return json.loads(json.dumps(doc, default=_json_default, allow_nan=False))


def dumps_case_json(doc: Any) -> str:
    """`json.dumps(doc, indent=2, sort_keys=True)`, except that a list of plain values that fits
    on its line stays on it (`"shape": [2, 256]`), so case files stay short in review."""

    def dump(v: Any, indent: int) -> str:
        pad, inner = " " * indent, " " * (indent + 2)
        if isinstance(v, dict):
            if not v:
                return "{}"
            items = [f"{inner}{json.dumps(k)}: {dump(v[k], indent + 2)}" for k in sorted(v)]
            return "{\n" + ",\n".join(items) + "\n" + pad + "}"
        if isinstance(v, list):
            if not v:
                return "[]"
            if not any(isinstance(x, (dict, list)) for x in v):
                flat = json.dumps(v, allow_nan=False)
                if indent + len(flat) <= 88:
                    return flat
            return "[\n" + ",\n".join(inner + dump(x, indent + 2) for x in v) + "\n" + pad + "]"
        return json.dumps(v, allow_nan=False)

    return dump(doc, 0) + "\n"


def _fsync_file(f: Any) -> None:
    f.flush()
    os.fsync(f.fileno())


def write_case_dir(saved: SavedCase, directory: Path, *, fsync: bool = True) -> None:
    """Write `case.json` and `tensors.npz` of `saved` into the existing, empty `directory`.

    Not atomic by itself: `DirectoryCorpus.save` writes into a temporary directory and
    renames it into place.
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise FileNotFoundError(f"{directory} is not an existing directory")
    if any(directory.iterdir()):
        raise FileExistsError(f"{directory} is not empty")
    text = dumps_case_json(case_to_json(saved))
    with open(directory / CASE_FILE, "w", encoding="utf-8") as f:
        f.write(text)
        if fsync:
            _fsync_file(f)
    # The npz is written by hand (what np.savez does, minus its keyword clashes): uncompressed
    # .npy members, sorted, with a fixed timestamp, allow_pickle=False.
    with open(directory / TENSORS_FILE, "wb") as f:
        with zipfile.ZipFile(f, "w", compression=zipfile.ZIP_STORED) as zf:
            for name in sorted(saved.case.values):
                spec = saved.case.tensors[name]
                arr = np.ascontiguousarray(saved.case.values[name], dtype=_le(spec.dtype))
                info = zipfile.ZipInfo(f"{name}.npy", date_time=_FIXED_ZIP_TIME)
                info.compress_type = zipfile.ZIP_STORED
                with zf.open(info, "w", force_zip64=True) as member:
                    np.lib.format.write_array(member, arr, allow_pickle=False)
        if fsync:
            _fsync_file(f)


# reading ------------------------------------------------------------------------------------


class _Bad(Exception):
    """Internal: a problem in the document; turned into BadCaseFile(path, why)."""


def _expect(cond: bool, why: str) -> None:
    if not cond:
        raise _Bad(why)


def _type_name(v: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "bool", int: "int",
            float: "float", type(None): "null"}.get(type(v), type(v).__name__)


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    d: dict[str, Any] = {}
    for k, v in pairs:
        if k in d:
            raise _Bad(f"duplicate key {k!r}")
        d[k] = v
    return d


def _refuse_constant(name: str) -> Any:
    raise _Bad(f"{name} is not valid JSON")


def _check_keys(d: Mapping[str, Any], want: frozenset[str], what: str) -> None:
    missing = sorted(want - d.keys())
    extra = sorted(d.keys() - want)
    _expect(not missing, f"{what} is missing key{'s' if len(missing) > 1 else ''} {', '.join(map(repr, missing))}")
    _expect(not extra, f"{what} has unknown key{'s' if len(extra) > 1 else ''} {', '.join(map(repr, extra))}")


def _int_list(v: Any, what: str) -> tuple[int, ...]:
    _expect(isinstance(v, list) and all(_is_int(x) for x in v), f"{what} must be a list of ints, got {v!r}")
    return tuple(v)


def _check_schema(doc: Any) -> None:
    _expect(isinstance(doc, dict), f"top level must be a JSON object, got {_type_name(doc)}")
    _expect("schema" in doc, "no 'schema' version (not a kvfuzz case file?)")
    schema = doc["schema"]
    _expect(_is_int(schema), f"'schema' must be an int, got {schema!r}")
    _expect(schema <= SCHEMA_VERSION,
            f"schema {schema} is newer than this kvfuzz ({SCHEMA_VERSION}); upgrade kvfuzz to read it")
    _expect(schema >= 1, f"schema {schema} is not a known version (1..{SCHEMA_VERSION})")


def _parse_tensors(doc: Mapping[str, Any]) -> tuple[dict[str, TensorSpec], set[str]]:
    raw = doc["tensors"]
    _expect(isinstance(raw, dict), f"'tensors' must be an object, got {_type_name(raw)}")
    specs, inputs = {}, set()
    for name, d in raw.items():
        _expect(name.isidentifier(), f"tensor name {name!r} is not an identifier")
        what = f"tensor {name!r}"
        _expect(isinstance(d, dict), f"{what} must be an object, got {_type_name(d)}")
        _check_keys(d, _SPEC_KEYS, what)
        _expect(d["dtype"] in DTYPES, f"{what}: dtype must be one of {DTYPES}, got {d['dtype']!r}")
        shape = _int_list(d["shape"], f"{what}: shape")
        strides = _int_list(d["strides"], f"{what}: strides")
        for k in ("offset", "storage_size"):
            _expect(_is_int(d[k]), f"{what}: {k} must be an int, got {d[k]!r}")
        _expect(d["role"] in ("in", "out"), f"{what}: role must be 'in' or 'out', got {d['role']!r}")
        _expect(d["storage_size"] >= 0, f"{what}: storage_size must be >= 0, got {d['storage_size']}")
        try:
            specs[name] = TensorSpec(d["dtype"], shape, strides, d["offset"], d["storage_size"])
        except (ValueError, TypeError) as exc:
            raise _Bad(f"{what}: bad layout: {exc}") from None
        if d["role"] == "in":
            inputs.add(name)
    return specs, inputs


def _parse_finding(raw: Any, op: str) -> Finding | None:
    if raw is None:
        return None
    _expect(isinstance(raw, dict), f"'finding' must be an object or null, got {_type_name(raw)}")
    _check_keys(raw, _FINDING_KEYS, "finding")
    _expect(raw["kind"] in KINDS, f"unknown finding kind {raw['kind']!r} (known: {', '.join(KINDS)})")
    for k in ("kind", "op", "path", "tensor", "where", "message", "signature"):
        _expect(isinstance(raw[k], str), f"finding {k} must be a string, got {raw[k]!r}")
    cells = raw["cells"]
    _expect(isinstance(cells, list) and all(isinstance(c, dict) for c in cells),
            "finding cells must be a list of objects")
    try:
        finding = Finding.from_json(raw)
    except (ValueError, TypeError, KeyError) as exc:
        raise _Bad(f"bad finding: {exc}") from None
    _expect(finding.signature == raw["signature"],
            f"finding signature {raw['signature']!r} does not match its fields ({finding.signature!r})")
    _expect(finding.op == op, f"finding is for op {finding.op!r} but the case is {op!r}")
    return finding


def case_from_json(doc: Any, arrays: Mapping[str, np.ndarray], path: Path | str) -> SavedCase:
    """Build a SavedCase from a parsed `case.json` and the npz arrays; BadCaseFile(path, ...) if bad."""
    try:
        return _case_from_json(doc, arrays)
    except _Bad as exc:
        raise BadCaseFile(path, str(exc)) from None


def _case_from_json(doc: Any, arrays: Mapping[str, np.ndarray]) -> SavedCase:
    _check_schema(doc)
    _check_keys(doc, _TOP_KEYS, "case.json")
    for k in ("op", "variant", "target", "device", "expected", "found_at", "origin"):
        _expect(isinstance(doc[k], str), f"{k!r} must be a string, got {_type_name(doc[k])}")
    _expect(doc["reason"] is None or isinstance(doc["reason"], str),
            f"'reason' must be a string or null, got {_type_name(doc['reason'])}")
    _expect(isinstance(doc["minimized"], bool), f"'minimized' must be a bool, got {_type_name(doc['minimized'])}")
    log = doc["minimize_log"]
    _expect(isinstance(log, list) and all(isinstance(x, str) for x in log),
            "'minimize_log' must be a list of strings")
    for k in ("scalars", "versions", "meta"):
        _expect(isinstance(doc[k], dict), f"{k!r} must be an object, got {_type_name(doc[k])}")
    for k, v in doc["scalars"].items():
        _expect(v is None or isinstance(v, (bool, int, str)),
                f"scalar {k!r} must be an int, bool, null or string, got {_type_name(v)}")
    for k, v in doc["versions"].items():
        _expect(isinstance(v, str), f"version of {k!r} must be a string, got {_type_name(v)}")

    specs, inputs = _parse_tensors(doc)
    for name in sorted(inputs - arrays.keys()):
        raise _Bad(f"input tensor {name!r} has no array in {TENSORS_FILE}")
    for name in sorted(arrays.keys() - specs.keys()):
        raise _Bad(f"{TENSORS_FILE} has array {name!r} but case.json has no such tensor")
    for name in sorted(arrays.keys() - inputs):
        raise _Bad(f"{TENSORS_FILE} has array {name!r} but tensor {name!r} has role 'out'")
    values = {}
    for name in sorted(inputs):
        arr, spec = arrays[name], specs[name]
        _expect(arr.shape == spec.shape,
                f"{TENSORS_FILE}: array {name!r} has shape {arr.shape}, case.json says {spec.shape}")
        _expect(arr.dtype == _le(spec.dtype),
                f"{TENSORS_FILE}: array {name!r} has dtype {arr.dtype.str}, case.json says {spec.dtype} "
                f"({_le(spec.dtype).str})")
        values[name] = arr.astype(spec.dtype, copy=False)  # native byte order

    try:
        case = Case(doc["op"], doc["scalars"], specs, values, variant=doc["variant"], meta=doc["meta"])
    except (ValueError, TypeError) as exc:
        raise _Bad(f"bad case: {exc}") from None
    finding = _parse_finding(doc["finding"], doc["op"])
    try:
        return SavedCase(
            case=case, finding=finding, target=doc["target"], device=doc["device"],
            versions=doc["versions"], origin=doc["origin"], expected=doc["expected"],
            reason=doc["reason"], minimized=doc["minimized"], minimize_log=tuple(log),
            found_at=doc["found_at"],
        )
    except (ValueError, TypeError) as exc:
        raise _Bad(str(exc)) from None


def _read_json(path: Path) -> Any:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise BadCaseFile(path, f"missing {path.name}") from None
    except OSError as exc:
        raise BadCaseFile(path, f"cannot read: {exc.strerror or exc}") from None
    try:
        return json.loads(data.decode("utf-8"), object_pairs_hook=_no_duplicates,
                          parse_constant=_refuse_constant)
    except _Bad as exc:
        raise BadCaseFile(path, f"invalid JSON: {exc}") from None
    except UnicodeDecodeError as exc:
        raise BadCaseFile(path, f"not UTF-8 text (byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise BadCaseFile(path, f"invalid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except (ValueError, RecursionError) as exc:
        raise BadCaseFile(path, f"invalid JSON: {exc}") from None


def _read_npz(path: Path) -> dict[str, np.ndarray]:
    if not path.is_file():
        raise BadCaseFile(path, f"missing {path.name}" if not path.exists() else "not a regular file")
    try:
        with open(path, "rb") as f:
            magic = f.read(6)
        if not magic:
            raise _Bad("truncated npz: empty file")
        if not magic.startswith((b"PK\x03\x04", b"PK\x05\x06")):
            if magic.startswith(b"\x93NUMPY"):
                raise _Bad("not an npz archive (a bare .npy array)")
            if magic[:1] == b"\x80":
                raise _Bad("not an npz archive (a Python pickle); refusing pickled data")
            raise _Bad("not an npz archive (no zip header)")
        with np.load(path, allow_pickle=False) as npz:
            _expect(isinstance(npz, np.lib.npyio.NpzFile), "not an npz archive")
            names = list(npz.files)
            _expect(len(set(names)) == len(names), "duplicate array names")
            arrays = {}
            for name in names:
                try:
                    arr = npz[name]
                except ValueError as exc:
                    if "pickle" in str(exc):
                        raise _Bad(f"array {name!r} holds Python objects; refusing pickled data") from None
                    raise
                _expect(isinstance(arr, np.ndarray), f"member {name!r} is not a .npy array")
                _expect(not arr.dtype.hasobject, f"array {name!r} holds Python objects; refusing pickled data")
                arrays[name] = arr
            return arrays
    except BadCaseFile:
        raise
    except _Bad as exc:
        raise BadCaseFile(path, str(exc)) from None
    except ValueError as exc:
        if "pickle" in str(exc):  # not a zip at all and np.load would have unpickled it
            raise BadCaseFile(path, "not an npz archive; refusing pickled data") from None
        raise BadCaseFile(path, f"corrupt npz: {_first_line(exc)}") from None
    except zipfile.BadZipFile as exc:
        raise BadCaseFile(path, f"corrupt or truncated npz: {_first_line(exc)}") from None
    except EOFError as exc:
        raise BadCaseFile(path, f"truncated npz: {_first_line(exc) or 'unexpected end of file'}") from None
    except OSError as exc:
        raise BadCaseFile(path, f"cannot read npz: {exc.strerror or _first_line(exc)}") from None
    except Exception as exc:  # zlib.error, struct.error, SyntaxError from a mangled header, ...
        raise BadCaseFile(path, f"corrupt npz: {type(exc).__name__}: {_first_line(exc)}") from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else ""


def read_case_dir(directory: Path) -> SavedCase:
    """Read the case in `directory`; BadCaseFile(path, why) for anything wrong with its files."""
    directory = Path(directory)
    if not directory.is_dir():
        raise BadCaseFile(directory, "no such case directory" if not directory.exists() else "not a directory")
    doc = _read_json(directory / CASE_FILE)
    try:
        _check_schema(doc)  # before touching the npz: a newer schema may lay it out differently
    except _Bad as exc:
        raise BadCaseFile(directory / CASE_FILE, str(exc)) from None
    arrays = _read_npz(directory / TENSORS_FILE)
    return case_from_json(doc, arrays, directory / CASE_FILE)
