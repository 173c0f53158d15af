"""SGLang's `SWAKVPool`, for loading SGLang kernel files without SGLang installed.

The seed's SWA path does `from sglang.srt.mem_cache.swa_memory_pool import SWAKVPool` and
checks `isinstance(token_to_kv_pool, SWAKVPool)`, reading only `.full_to_swa_index_mapping`.
When the real module cannot be imported, `ensure_swa_pool_type` installs a stand-in module
tree so that import succeeds, and `make_swa_pool` builds an instance of whichever class the
import resolves to (real or stand-in) without running its constructor.
"""

from __future__ import annotations

import importlib
import sys
import types

POOL_MODULE = "sglang.srt.mem_cache.swa_memory_pool"


class SWAKVPool:
    """Stand-in for sglang.srt.mem_cache.swa_memory_pool.SWAKVPool (kvfuzz shim)."""

    full_to_swa_index_mapping = None


def ensure_swa_pool_type() -> type:
    try:
        return importlib.import_module(POOL_MODULE).SWAKVPool
    except Exception:  # not installed, or installed without its heavy dependencies
        pass
    parts = POOL_MODULE.split(".")
    for i in range(1, len(parts) + 1):
        name = ".".join(parts[:i])
        mod = sys.modules.get(name)
        if mod is None or i == len(parts):
            mod = types.ModuleType(name, "kvfuzz stand-in" if i < len(parts) else SWAKVPool.__doc__)
            mod.__path__ = []  # a package, so submodules resolve
            mod.__kvfuzz_shim__ = True
            sys.modules[name] = mod
        if i > 1:
            setattr(sys.modules[".".join(parts[: i - 1])], parts[i - 1], mod)
    sys.modules[POOL_MODULE].SWAKVPool = SWAKVPool
    return SWAKVPool


def make_swa_pool(mapping):
    cls = ensure_swa_pool_type()
    pool = cls.__new__(cls)
    pool.full_to_swa_index_mapping = mapping
    return pool
