"""SGLang's `SWAKVPool` and `UnifiedSWAKVPool`, for loading SGLang kernel files without SGLang.

The seed's SWA path does `from sglang.srt.mem_cache.swa_memory_pool import SWAKVPool` and
checks `isinstance(token_to_kv_pool, SWAKVPool)`, reading only `.full_to_swa_index_mapping`.
0.5.18's unified SWA pool path (taken when that mapping is None) imports `UnifiedSWAKVPool`
from `sglang.srt.mem_cache.unified_memory_pool` the same way and reads only
`._swa_allocator.virtual_to_physical`. When the real modules cannot be imported,
`ensure_swa_pool_type` installs stand-in module trees so those imports succeed, and
`make_swa_pool` / `make_unified_swa_pool` build an instance of whichever class the import
resolves to (real or stand-in) without running its constructor.

Standalone (standard library only): the repro script embeds this module
(kvfuzz.repro.standalone_modules).
"""

from __future__ import annotations

import importlib
import sys
import types

POOL_MODULE = "sglang.srt.mem_cache.swa_memory_pool"
UNIFIED_POOL_MODULE = "sglang.srt.mem_cache.unified_memory_pool"


class SWAKVPool:
    """Stand-in for sglang.srt.mem_cache.swa_memory_pool.SWAKVPool (kvfuzz shim)."""

    full_to_swa_index_mapping = None


class UnifiedSWAKVPool:
    """Stand-in for sglang.srt.mem_cache.unified_memory_pool.UnifiedSWAKVPool (kvfuzz shim)."""

    full_to_swa_index_mapping = None  # None selects 0.5.18's unified path
    _swa_allocator = None  # an object with `virtual_to_physical`, the SWA pool's v2p table


def _ensure(module: str, name: str, standin: type) -> type:
    try:
        return getattr(importlib.import_module(module), name)
    except Exception:  # not installed, or installed without its heavy dependencies
        pass
    parts = module.split(".")
    for i in range(1, len(parts) + 1):
        mod_name = ".".join(parts[:i])
        mod = sys.modules.get(mod_name)
        if mod is None or i == len(parts):
            mod = types.ModuleType(mod_name, "kvfuzz stand-in" if i < len(parts) else standin.__doc__)
            mod.__path__ = []  # a package, so submodules resolve
            mod.__kvfuzz_shim__ = True
            sys.modules[mod_name] = mod
        if i > 1:
            setattr(sys.modules[".".join(parts[: i - 1])], parts[i - 1], mod)
    setattr(sys.modules[module], name, standin)
    return standin


def ensure_swa_pool_type() -> type:
    _ensure(UNIFIED_POOL_MODULE, "UnifiedSWAKVPool", UnifiedSWAKVPool)
    return _ensure(POOL_MODULE, "SWAKVPool", SWAKVPool)


def make_swa_pool(mapping):
    cls = ensure_swa_pool_type()
    pool = cls.__new__(cls)
    pool.full_to_swa_index_mapping = mapping
    return pool


def make_unified_swa_pool(swa_v2p):
    """A UnifiedSWAKVPool whose SWA allocator's v2p table is `swa_v2p` (0.5.18's unified path)."""
    ensure_swa_pool_type()
    cls = _ensure(UNIFIED_POOL_MODULE, "UnifiedSWAKVPool", UnifiedSWAKVPool)
    pool = cls.__new__(cls)
    pool.full_to_swa_index_mapping = None
    pool._swa_allocator = types.SimpleNamespace(virtual_to_physical=swa_v2p)
    return pool
