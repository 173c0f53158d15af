"""Targets: the implementation under test, found from a spec string.

Spec forms:
  builtin                 kvfuzz's own kernels (kvfuzz.kernels)
  PATH.py                 a Python file, loaded under a private module name
  module:NAME / NAME      an importable module (e.g. an installed sglang's metadata module)
  sglang==X.Y.Z           the kernel file inside that SGLang wheel from PyPI (downloaded once
                          into the cache, loaded without importing sglang/__init__.py)

The loader finds the three entry points by SGLang's names; a missing one is reported for
its op only. Kernels defined in the wrong Triton mode for the selected device are refused.
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
from ..errors import TargetLoadError
from ..ops import CONTRACTS
from .calls import CALLS
from .sglang_shim import ensure_swa_pool_type
from .wheels import sglang_kernel_file


@dataclass
class Target:
    spec: str
    description: str
    module: ModuleType
    entries: dict[str, Any] = field(default_factory=dict)  # op -> entry point object
    missing: dict[str, str] = field(default_factory=dict)  # op -> why it cannot be run

    def supports(self, op: str) -> bool:
        return op in self.entries

    def invoke(self, op: str, tensors: Mapping[str, Any], scalars: Mapping[str, Any]) -> None:
        if op not in self.entries:
            raise TargetLoadError(f"target {self.spec} has no {op}: {self.missing.get(op, 'unknown op')}")
        CALLS[op](self.entries[op], tensors, scalars)


_cache: dict[tuple[str, str], Target] = {}


def load_target(spec: str, device: str) -> Target:
    """Load (once per process) the target named by `spec` for `device` ("cpu" or "cuda")."""
    device = devmod.select(device)
    key = (spec, device)
    if key not in _cache:
        module, description = _load_module(spec)
        _check_triton_mode(module, device, spec)
        target = Target(spec, description, module)
        for op, contract in CONTRACTS.items():
            entry = getattr(module, contract.entry, None)
            if entry is None:
                target.missing[op] = f"{description} has no {contract.entry}"
            else:
                target.entries[op] = entry
        if not target.entries:
            raise TargetLoadError(f"{description} provides none of "
                                  f"{', '.join(c.entry for c in CONTRACTS.values())}")
        _cache[key] = target
    return _cache[key]


def _load_module(spec: str) -> tuple[ModuleType, str]:
    ensure_swa_pool_type()  # before the target's code runs: its SWA path imports the type
    if spec == "builtin":
        return importlib.import_module("kvfuzz.kernels"), "kvfuzz builtin kernels"
    if spec.startswith("sglang=="):
        path = sglang_kernel_file(spec.split("==", 1)[1])
        return _load_file(path, spec), f"{spec} ({path.name} from the PyPI wheel)"
    if spec.startswith("module:") or (not spec.endswith(".py") and "/" not in spec and os.sep not in spec):
        name = spec.removeprefix("module:")
        try:
            return importlib.import_module(name), f"module {name}"
        except Exception as exc:
            raise TargetLoadError(f"cannot import target module {name!r}: {type(exc).__name__}: {exc}") from None
    path = Path(spec.removeprefix("file:")).expanduser()
    if not path.is_file():
        raise TargetLoadError(f"target file {str(path)!r} does not exist")
    return _load_file(path, spec), f"file {path}"


def _load_file(path: Path, spec: str) -> ModuleType:
    path = path.resolve()
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:12]
    name = f"kvfuzz_target_{digest}"
    if name in sys.modules:
        return sys.modules[name]
    loader_spec = importlib.util.spec_from_file_location(name, path)
    if loader_spec is None or loader_spec.loader is None:
        raise TargetLoadError(f"cannot load {path} as a Python module")
    module = importlib.util.module_from_spec(loader_spec)
    sys.modules[name] = module
    try:
        loader_spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[name]
        raise TargetLoadError(f"loading {path} failed: {type(exc).__name__}: {exc}") from None
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
