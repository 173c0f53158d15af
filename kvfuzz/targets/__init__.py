"""Targets: the implementation under test, found from a spec string.

Spec forms:
  builtin                 kvfuzz's own kernels (kvfuzz.kernels)
  PATH.py                 a Python file, loaded under a private module name
  module:NAME / NAME      an importable module (e.g. an installed sglang's metadata module)
  sglang==X.Y.Z           the kernel files inside that SGLang wheel from PyPI (metadata.py,
                          kv_indices.py, 0.5.14 on trtllm_mha_page_table.py, 0.5.12 on
                          aiter_unified_attention.py, downloaded once into the cache, each loaded
                          as a module without importing sglang/__init__.py)
  sglang                  the kernel files of the installed sglang distribution (loaded the same way)
  git:REV:PATH            the file PATH as it is at revision REV of the git repository holding it
                          (split at the first ':' after 'git:'; PATH relative to the working
                          directory or absolute, and may be gone from the work tree; REV anything
                          `git rev-parse` resolves to a commit). The blob is cached by content in
                          cache_dir()/git/ and loaded as a file (gitrev.py)

The loader finds each op's entry point by SGLang's name; a missing one is reported for its op
only. A release (`sglang==X`, `sglang`) is a set of kernel files, one module each
(`Target.modules`): an op's entry point is looked up in the file its record names
(`OpRecord.source_file`), and a file the release lacks, or that cannot be fetched, leaves that
file's ops missing with the reason. Every other target is one module, where every op is looked up. Kernels defined in the wrong Triton mode for the selected device are refused.
Each entry point is bound by parameter name when the target loads (`calls.bind`): a signature
kvfuzz cannot call is refused then, in one line, before any case runs. The target also
selects, per op, the contract variant it is judged by (`Target.variants`, see `releases.py`);
`variant_for` is what a campaign or replay asks.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Mapping

from .. import device as devmod
from ..errors import BadInput, TargetLoadError
from ..ops import CONTRACTS, OpRecord, record, records
from .calls import Binding
from .gitrev import git_kernel_file
from .releases import METADATA, module_release, release_entry, select_variant
from .sglang_shim import ensure_swa_pool_type
from .wheels import installed_kernel_file, sglang_kernel_file


@dataclass
class Target:
    spec: str
    description: str
    module: ModuleType  # a release's metadata.py; the one module of any other target
    entries: dict[str, Any] = field(default_factory=dict)  # op -> entry point object
    missing: dict[str, str] = field(default_factory=dict)  # op -> why it cannot be run
    release: str | None = None  # the SGLang version, when the spec tells it (sglang==X, installed sglang)
    bindings: dict[str, Binding] = field(default_factory=dict)  # op -> how its entry point is called
    variants: dict[str, str] = field(default_factory=dict)  # op -> the contract variant it is judged by
    variant_reasons: dict[str, str] = field(default_factory=dict)  # op -> why that variant
    # a release's kernel files: name (metadata.py, kv_indices.py) -> its module; empty for a target
    # of one module
    modules: dict[str, ModuleType] = field(default_factory=dict)

    @property
    def all_modules(self) -> list[ModuleType]:
        """Every module the target's entry points come from (`module` first)."""
        return list({id(m): m for m in (self.module, *self.modules.values())}.values())

    @property
    def lacks(self) -> dict[str, tuple[str, ...]]:
        """op -> the contract's optional tensors its entry point cannot take."""
        return {op: b.lacks for op, b in self.bindings.items() if b.lacks}

    @property
    def takes(self) -> dict[str, tuple[str, ...]]:
        """op -> the later releases' optional arguments its entry point takes: those its
        parameters pass, and those of the variant its release selects (0.5.18's unified SWA pool
        comes in `token_to_kv_pool`, a parameter every release has)."""
        return {op: tuple(dict.fromkeys(b.takes + tuple(CONTRACTS[op].variant_args.get(self.variants[op], ()))))
                for op, b in self.bindings.items()}

    def supports(self, op: str) -> bool:
        return op in self.entries

    def invoke(self, op: str, tensors: Mapping[str, Any], scalars: Mapping[str, Any],
               as_called: Mapping[str, Any] | None = None) -> None:
        """Call `op`'s entry point on a case's tensors and scalars: bound by name, or, with
        `as_called` (a call site, `Case.meta["as_called"]`), with that site's own argument list
        (kvfuzz/callsites/launch.py)."""
        if op not in self.bindings:
            raise TargetLoadError(f"target {self.spec} has no {op}: {self.missing.get(op, 'unknown op')}")
        if as_called is None:
            self.bindings[op](tensors, scalars)
            return
        from ..callsites.launch import launch_as_called

        launch_as_called(self.bindings[op], as_called, tensors, scalars)

    def describe_ops(self) -> list[str]:
        """One line per op: how it is called and which contract variant judges it."""
        out = []
        for op in CONTRACTS:
            if op in self.bindings:
                out.append(f"{op}: variant {self.variants[op]} ({self.variant_reasons[op]}); "
                           f"called {self.bindings[op].describe()}")
            else:
                out.append(f"{op}: not provided ({self.missing.get(op)})")
        return out


def variant_for(op: str, requested: str | None, executor: Any) -> str:
    """The contract variant that judges `op`'s cases: the user's (`--variant`) if given, else
    the one the target selects (a `Target`, or an executor carrying its `variants`), else the
    op's first variant."""
    if requested:
        return requested
    chosen = (getattr(executor, "variants", None) or {}).get(op)
    return chosen or next(iter(record(op).contract.variants))


def variant_lacks(op: str, variant: str, executor: Any) -> tuple[str, ...]:
    """The arguments `variant`'s cases may carry that the target (a `Target`, or an executor
    carrying its `takes`) cannot take: its entry point would drop them, and every case using
    one would be a false finding or a false pass. A variant that only changes the judging rule
    (`live_prefix`) lacks nothing."""
    takes = (getattr(executor, "takes", None) or {}).get(op, ())
    return tuple(a for a in CONTRACTS[op].variant_args.get(variant, ()) if a not in takes)


def check_variant(op: str, variant: str, executor: Any, spec: str, forced_by: str, hint: str = "") -> None:
    """BadInput (one line: `forced_by`, what the target lacks, `hint`) when `variant`, forced on
    `spec`, has arguments the target cannot take."""
    lacked = variant_lacks(op, variant, executor)
    if lacked:
        own = (getattr(executor, "variants", None) or {}).get(op)
        raise BadInput(f"{forced_by}: target {spec} does not take {op}'s {', '.join(lacked)}, which variant "
                       f"{variant} passes (its own variant is {own}{'; ' + hint if hint else ''})")


_cache: dict[tuple[str, str], Target] = {}


def load_target(spec: str, device: str) -> Target:
    """Load (once per process) the target named by `spec` for `device` ("cpu" or "cuda")."""
    device = devmod.select(device)
    key = (spec, device)
    if key not in _cache:
        loaded = _load_module(spec)
        for module in {id(m): m for m in loaded.modules.values()}.values():
            _check_triton_mode(module, device, spec)
        release = loaded.release
        target = Target(spec, loaded.description, loaded.modules[loaded.primary], release=release,
                        modules=dict(loaded.modules) if loaded.primary else {})
        for op, rec in records().items():
            contract = rec.contract
            if spec == "builtin":
                entry = _builtin_entry(rec, device, spec)
            else:
                module = loaded.modules.get(rec.source_file if loaded.primary else "")
                entry = getattr(module, contract.entry, None) if module is not None else None
            if entry is None:
                why = getattr(release_entry(release or ""), "not_offered", {}).get(op)  # an old release's reason
                unfetched = loaded.unavailable.get(rec.source_file) if loaded.primary else None
                target.missing[op] = (f"not offered by sglang {release}: {why}" if why else unfetched or
                                      f"{loaded.description} has no {contract.entry}")
                continue
            # or TargetLoadError
            target.bindings[op] = binding = rec.bind(entry, where=f"target {spec}")
            target.entries[op] = entry
            target.variants[op], target.variant_reasons[op] = select_variant(op, release, binding, spec == "builtin")
        if not target.entries:
            raise TargetLoadError(f"{loaded.description} provides none of "
                                  f"{', '.join(c.entry for c in CONTRACTS.values())}")
        _cache[key] = target
    return _cache[key]


def _builtin_entry(rec: OpRecord, device: str, spec: str) -> Any:
    """kvfuzz's own kernel for the op, as its record names it (imported after the device is chosen)."""
    try:
        entry = rec.builtin_kernel()
    except Exception as exc:
        raise TargetLoadError(f"{rec.name}: cannot import its builtin kernel {rec.builtin}: "
                              f"{type(exc).__name__}: {exc}") from None
    _check_triton_mode(sys.modules[rec.builtin.partition(":")[0]], device, spec)
    return entry


@dataclass
class _Loaded:
    """What a spec names: its modules, a description, the SGLang version if the spec tells it."""

    modules: dict[str, ModuleType]  # kernel file name -> module; {"": module} for a target of one module
    description: str
    release: str | None = None
    primary: str = ""  # the release's metadata.py; "" for a target of one module
    unavailable: dict[str, str] = field(default_factory=dict)  # a release's file -> why it is not loaded


def _release_files() -> tuple[str, ...]:
    """The kernel files a release target loads: metadata.py and each op's file."""
    return tuple(dict.fromkeys([METADATA] + [rec.source_file for rec in records().values()]))


def _load_release(spec: str, version: str | None, fetch) -> tuple[_Loaded, dict[str, Path]]:
    """A release's kernel files (`fetch(name)`: (path, version)) and their paths: metadata.py must
    load; another file that cannot be had leaves its ops missing, with the one-line reason."""
    modules, unavailable, paths = {}, {}, {}
    for name in _release_files():
        try:
            path, version = fetch(name)
        except TargetLoadError as exc:
            if name == METADATA:
                raise
            unavailable[name] = str(exc)
            continue
        paths[name] = path
        modules[name] = _load_file(path, spec)
    return _Loaded(modules, "", version, METADATA, unavailable), paths


def _load_module(spec: str) -> _Loaded:
    ensure_swa_pool_type()  # before the target's code runs: its SWA path imports the type
    if spec == "builtin":
        return _Loaded({"": importlib.import_module("kvfuzz.kernels")}, "kvfuzz builtin kernels")
    if spec.startswith("sglang=="):
        version = spec.split("==", 1)[1]
        loaded, paths = _load_release(spec, version, lambda name: (sglang_kernel_file(version, name), version))
        old = release_entry(version) is not None and release_entry(version).backends
        how = "extracted from the PyPI wheel's modules" if old else "from the PyPI wheel"
        loaded.description = f"{spec} ({', '.join(paths)} {how})"
        return loaded
    if spec.startswith("git:"):
        path, description = git_kernel_file(spec)
        return _Loaded({"": _load_file(path, spec)}, description)
    if spec == "sglang":
        loaded, paths = _load_release(spec, None, installed_kernel_file)
        loaded.description = f"installed sglang {loaded.release} ({', '.join(str(p) for p in paths.values())})"
        return loaded
    if spec.startswith("module:") or (not spec.endswith(".py") and "/" not in spec and os.sep not in spec):
        name = spec.removeprefix("module:")
        try:
            module = importlib.import_module(name)
        except Exception as exc:
            raise TargetLoadError(f"cannot import target module {name!r}: {type(exc).__name__}: {exc}") from None
        release = module_release(module)
        return _Loaded({"": module}, f"module {name}" + (f" (sglang {release})" if release else ""), release)
    path = Path(spec.removeprefix("file:")).expanduser()
    if not path.is_file():
        raise TargetLoadError(f"target file {str(path)!r} does not exist")
    return _Loaded({"": _load_file(path, spec)}, f"file {path}")


def _load_file(path: Path, spec: str) -> ModuleType:
    """The kernel file as a module. A file with an `__init__.py` beside it is loaded as a member
    of that folder's package (under a name of kvfuzz's own, the package's `__init__` not run), so
    its relative imports (`from ._args import ...`) find its siblings."""
    path = path.resolve()
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:12]
    package = None
    if (path.parent / "__init__.py").is_file():
        package = f"kvfuzz_target_pkg_{hashlib.sha256(str(path.parent).encode()).hexdigest()[:12]}"
        if package not in sys.modules:
            holder = ModuleType(package)
            holder.__path__ = [str(path.parent)]
            holder.__package__ = package
            sys.modules[package] = holder
    name = f"{package}.{path.stem}_{digest}" if package else f"kvfuzz_target_{digest}"
    if name in sys.modules:
        return sys.modules[name]
    loader_spec = importlib.util.spec_from_file_location(name, path)
    if loader_spec is None or loader_spec.loader is None:
        raise TargetLoadError(f"target {spec}: cannot load {path} as a Python module")
    module = importlib.util.module_from_spec(loader_spec)
    sys.modules[name] = module
    try:
        loader_spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[name]
        raise TargetLoadError(f"target {spec}: loading the kernel file failed: {type(exc).__name__}: {exc}") from None
    return module


def _check_triton_mode(module: ModuleType, device: str, spec: str) -> None:
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    for name, obj in vars(module).items():
        if device == "cpu" and isinstance(obj, JITFunction):
            bad = "compiled (TRITON_INTERPRET was not set when it was imported)"
        elif device == "cuda" and isinstance(obj, InterpretedFunction):
            bad = "interpreted (TRITON_INTERPRET was set when it was imported)"
        else:
            continue
        raise TargetLoadError(
            f"target {spec}: kernel {name} was defined {bad}; kvfuzz must select the device "
            f"before the target is imported — load it through kvfuzz, in a fresh process")
