"""Which compiled variant each Triton launch selects, by Triton's own rules, on any device.

Triton compiles a kernel once per *specialisation key* (triton.runtime.jit: `JITFunction.run`
-> binder -> `specialize_impl`): for every argument not marked `do_not_specialize`, an int
contributes its type and whether it is 1 (then a constant) or divisible by 16, a tensor its
pointer dtype and whether its address is 16-byte aligned, a constexpr its value; the launch
options (`num_warps`, `num_stages`, ...) complete the key. A fuzzer that draws offsets,
strides and sizes independently meets a new key nearly every case and spends its time
compiling (see docs/performance.md).

`launch_key(fn, args, kwargs)` computes that key with Triton's own binder and
`native_specialize_impl` (private API, pinned by tests/test_specialize.py) for a compiled
`JITFunction` and for an interpreted kernel alike, so the variants a campaign would compile
are counted on the CPU exactly as a GPU would compile them. `LaunchRecorder` records the key
of every launch in this process: an interpreted (or dry) launch through `launch_key`, a
compiled one from what Triton's own binder returned (no second binding on the launch path);
on a GPU it also reads how many variants Triton really holds in memory, which must agree.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any


def _kernel_classes() -> tuple[type, type]:
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    return JITFunction, InterpretedFunction


def _binder(fn: Any):
    """Triton's own argument binder for `fn`, built once per kernel (with the base backend:
    the rules above are the same for every backend)."""
    binder = getattr(fn, "_kvfuzz_binder", None)
    if binder is None:
        from triton.backends.compiler import BaseBackend
        from triton.runtime.jit import KernelParam, create_function_from_signature

        params = getattr(fn, "params", None)
        signature = getattr(fn, "signature", None) or inspect.signature(fn.fn)
        if params is None:  # an interpreted kernel keeps only its decorator's keyword arguments
            kw = getattr(fn, "kwargs", {}) or {}
            dns = set(kw.get("do_not_specialize") or ())
            dnsa = set(kw.get("do_not_specialize_on_alignment") or ())
            params = [KernelParam(i, p, i in dns or p.name in dns, i in dnsa or p.name in dnsa)
                      for i, p in enumerate(signature.parameters.values())]
        binder = create_function_from_signature(signature, params, BaseBackend)
        fn._kvfuzz_binder = binder
    return binder


def kernel_name(fn: Any) -> str:
    inner = getattr(fn, "fn", fn)
    return f"{getattr(inner, '__module__', '?')}.{getattr(inner, '__qualname__', repr(inner))}"


def launch_key(fn: Any, args: tuple, kwargs: dict) -> tuple:
    """(kernel, specialisation, options): one compiled variant of `fn`."""
    _, specialization, options = _binder(fn)(*args, **kwargs)
    return (kernel_name(fn), *launch_key_parts(fn, specialization, options))


def _run_defaults(fn: Any) -> dict:
    """The options `JITFunction.run` adds to every launch before binding: left out of keys,
    so that a key reads the same whether taken before `run` (launch_key) or inside it."""
    from triton import knobs

    return {"debug": getattr(fn, "debug", None) or knobs.runtime.debug,
            "instrumentation_mode": knobs.compilation.instrumentation_mode}


def launch_key_parts(fn: Any, specialization, options: dict) -> tuple[tuple, tuple]:
    """A binder's (specialisation, options) as hashable tuples, run's own defaults left out."""
    spec = tuple(tuple(_hashable(x) for x in s) if isinstance(s, (tuple, list)) else _hashable(s)
                 for s in specialization)
    defaults = _run_defaults(fn)
    return spec, tuple(sorted((k, _hashable(v)) for k, v in options.items()
                              if k not in defaults or v != defaults[k]))


def _hashable(x: Any) -> Any:
    try:
        hash(x)
        return x
    except TypeError:
        return repr(x)


@dataclass
class LaunchRecorder:
    """Records the specialisation key of every Triton launch in this process."""

    keys: dict[tuple, int] = field(default_factory=dict)  # key -> launches
    errors: int = 0  # launches whose key could not be computed (counted, never fatal)
    dry: bool = False  # record the key and return without running the kernel (counting only)
    _jit_fns: dict[int, Any] = field(default_factory=dict)  # compiled kernels seen, for `compiled`
    _saved: list = field(default_factory=list)

    def install(self) -> "LaunchRecorder":
        if self._saved:
            return self
        recorder = self
        jit_cls, interp_cls = _kernel_classes()
        for cls in (jit_cls, interp_cls):
            original = cls.run

            def run(fn, *args, grid, warmup, _original=original, _binds=cls is jit_cls, **kwargs):
                if _binds and not recorder.dry:
                    if recorder not in getattr(fn, "_kvfuzz_recorders", ()):
                        recorder._record_binder(fn)
                    return _original(fn, *args, grid=grid, warmup=warmup, **kwargs)
                try:
                    recorder._note(launch_key(fn, args, kwargs))
                except Exception:
                    recorder.errors += 1
                if recorder.dry:
                    return None
                return _original(fn, *args, grid=grid, warmup=warmup, **kwargs)
            self._saved.append((cls, original))
            cls.run = run
        return self

    def _record_binder(self, fn: Any) -> None:
        """Record each compiled launch of `fn` from what Triton's own binder (one per kernel
        and device, in `fn.device_caches`) returns: a dictionary update, where binding a
        second time (`launch_key`) would cost as much as Triton's launch path itself. The
        binders are wrapped once; the wrapper reports to every recorder installed on the
        kernel at the moment (recorders nest: a test's inside the process's)."""
        self._jit_fns[id(fn)] = fn
        fn._kvfuzz_recorders = (*getattr(fn, "_kvfuzz_recorders", ()), self)
        if getattr(fn, "_kvfuzz_wrapped", False):
            return
        name = kernel_name(fn)
        seen: dict = {}  # (specialisation, options) as Triton's cache keys them -> kvfuzz's key

        def wrap(entry: tuple) -> tuple:
            *rest, binder = entry

            def recording(*args, **kwargs):
                bound = binder(*args, **kwargs)
                recorders = fn._kvfuzz_recorders
                if recorders:
                    raw = (tuple(bound[1]), str(bound[2]))  # what compute_cache_key looks up
                    try:
                        key = seen.get(raw)
                        if key is None:
                            key = seen[raw] = (name, *launch_key_parts(fn, bound[1], bound[2]))
                    except TypeError:  # an unhashable specialisation value (a tuple argument)
                        key = (name, *launch_key_parts(fn, bound[1], bound[2]))
                    for rec in recorders:
                        rec._note(key)
                return bound
            return (*rest, recording)

        caches = fn.device_caches
        for device in list(caches):
            caches[device] = wrap(caches[device])
        factory = caches.default_factory
        caches.default_factory = lambda: wrap(factory())
        fn._kvfuzz_wrapped = True

    def _note(self, key: tuple) -> None:
        self.keys[key] = self.keys.get(key, 0) + 1

    def uninstall(self) -> None:
        for cls, original in self._saved:
            cls.run = original
        self._saved.clear()
        for fn in self._jit_fns.values():
            fn._kvfuzz_recorders = tuple(r for r in getattr(fn, "_kvfuzz_recorders", ()) if r is not self)

    def snapshot(self) -> frozenset:
        return frozenset(self.keys)

    def compiled(self) -> int:
        """Variants Triton holds compiled in this process (0 under the interpreter)."""
        total = 0
        for fn in self._jit_fns.values():
            for caches in fn.device_caches.values():
                total += len(caches[0])
        return total


_recorder: LaunchRecorder | None = None


def recorder() -> LaunchRecorder:
    """This process's recorder, installed on first use (one per process: the wrappers of
    Triton's `run` methods must not nest)."""
    global _recorder
    if _recorder is None:
        _recorder = LaunchRecorder().install()
    return _recorder
