"""Is this Triton/NumPy installation fit to judge kernels on the CPU?

Two questions, both about Triton's own machinery rather than the kernel under test:

* `check_interpreter()`: before any case runs on the CPU, run small probe kernels through
  Triton's interpreter that use what kvfuzz's kernels and SGLang's use, and check exact
  results. A failing probe refuses the run with one line (`DeviceModeError`) naming the
  versions, the probe, and what to install. `device.select("cpu")` calls it once per process
  (every worker subprocess included).
* `classify_error(exc)`: did an exception raised during a target call come from Triton's
  machinery failing ("environment") or from the target ("target")?

The measured matrix of Triton and NumPy versions is in `docs/environment.md`.
"""

from __future__ import annotations

import os
import sys
import traceback
from dataclasses import dataclass
from typing import Callable

from .errors import DeviceModeError

# Measured on the CPU (docs/environment.md): the interpreter passes every probe and the
# builtin kernels' tests with these pairs. Used in the refusal's advice; the probes decide.
SUPPORTED = "triton 3.6 with numpy 2.0.2-2.3.x, or triton 3.7-3.8 with numpy 2.0.2-2.4.x"
ADVICE = (f"kvfuzz's CPU mode is tested with {SUPPORTED}: install with -c constraints/cpu.txt "
          "(oldest pair) or -c constraints/newest.txt (newest pair), or run on a GPU (--device cuda)")


# The triton releases kvfuzz is tested with, on the GPU and the CPU alike (docs/environment.md).
# The install accepts any triton (a CUDA torch pins its own); outside this range a GPU run goes
# on and says so once, a CPU run is still judged by the probes.
TESTED_TRITON = ((3, 6), (3, 8))


def untested_triton(version: str | None = None) -> str | None:
    """A one-line note when triton (`version`, default the installed one, read from its package
    metadata without importing it) is outside `TESTED_TRITON`, else None."""
    if version is None:
        from importlib import metadata

        try:
            version = metadata.version("triton")
        except metadata.PackageNotFoundError:
            return None
    got = _major_minor(version)
    low, high = TESTED_TRITON
    if got is None or low <= got <= high:
        return None
    return (f"triton {version} is outside the range kvfuzz is tested with "
            f"({low[0]}.{low[1]}-{high[0]}.{high[1]}); kernels run as this triton compiles them, and a "
            "finding that no tested triton shows may be Triton's")


def notes() -> list[str]:
    """What a run's log and report say about this environment once (empty when all is tested)."""
    return [n for n in (untested_triton(),) if n]


def _major_minor(version: str) -> tuple[int, int] | None:
    parts = version.split("+")[0].split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return None


# --------------------------------------------------------------------------- the probes


@dataclass(frozen=True)
class Probe:
    name: str
    what: str  # what it exercises, for the refusal
    run: Callable[[], tuple[list, list]]  # -> (got, expected)


def _kernels():
    """The probe kernels, defined on first use: Triton picks compiled or interpreted mode when
    a decorator runs, so they must be defined after `device.select` set TRITON_INTERPRET."""
    global _KERNELS
    if _KERNELS is not None:
        return _KERNELS
    import triton
    import triton.language as tl

    @triton.jit
    def runtime_loop(out, n, BLOCK: tl.constexpr):
        # loops over a runtime bound, with a loop-carried scalar (triton 3.6 with numpy >= 2.4
        # fails here: it calls int() on 1-element arrays)
        total = tl.zeros([], tl.int64)
        for start in range(0, n, BLOCK):
            offs = start + tl.arange(0, BLOCK)
            tl.store(out + offs, offs * 2 + 1, mask=offs < n)
            total += 1
        tl.store(out + n, total.to(tl.int32))

    @triton.jit
    def scalar_mask(src, src_s0, rows, n_rows, out, n_cols, BLOCK: tl.constexpr):
        # a mask that combines a block comparison with a comparison of a loaded scalar, on a
        # load (with other=) and on a store: triton 3.9's interpreter rejects it
        pid = tl.program_id(0)
        row = tl.load(rows + pid)
        row_ok = (row >= 0) & (row < n_rows)
        cols = tl.arange(0, BLOCK)
        m = (cols < n_cols) & row_ok
        row64 = tl.where(row_ok, row, 0).to(tl.int64)
        v = tl.load(src + row64 * src_s0 + cols, mask=m, other=-1)
        tl.store(out + pid * (2 * BLOCK) + cols, v)  # other= shows where m is false
        tl.store(out + pid * (2 * BLOCK) + BLOCK + cols, v * 10, mask=m)

    @triton.jit
    def offsets_64(src, src_s, out, out_s, BLOCK: tl.constexpr):
        # .to(tl.int64) pointer arithmetic through strided pointers, with an int64 offset
        # computed above 2**32 and brought back (no 32-bit wrap on the way)
        cols = tl.arange(0, BLOCK)
        cols64 = cols.to(tl.int64)
        far = cols64 * 4294967296 + 3  # > 2**32
        back = (far - 3) >> 32  # = cols
        v = tl.load(src + back * src_s)
        tl.store(out + cols64 * out_s, v + (far >> 31).to(v.dtype))

    @triton.jit
    def reductions(x_ptr, n, out, BLOCK: tl.constexpr):
        # tl.sum / tl.max / tl.min / tl.cumsum over a masked block, in int64 past 2**31
        offs = tl.arange(0, BLOCK)
        inb = offs < n
        x = tl.load(x_ptr + offs, mask=inb, other=0).to(tl.int64)
        tl.store(out + 0, tl.sum(x, axis=0))
        tl.store(out + 1, tl.max(tl.where(inb, x, -(2**40)), axis=0))
        tl.store(out + 2, tl.min(tl.where(inb, x, 2**40), axis=0))
        tl.store(out + 3 + offs, tl.cumsum(x, axis=0), mask=inb)

    @triton.jit
    def arith(x_ptr, out, d, BLOCK: tl.constexpr):
        # tl.where, arithmetic and logical shifts, tl.cdiv, integer division by a runtime value
        offs = tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offs)
        tl.store(out + offs, tl.where(x < 0, x >> 2, x << 3))
        tl.store(out + BLOCK + offs, tl.cdiv(tl.abs(x), d))
        tl.store(out + 2 * BLOCK + offs, (x.to(tl.uint64, bitcast=True) >> 60).to(tl.int64))

    @triton.jit
    def log2_f32(x_ptr, out, cores, BLOCK: tl.constexpr):
        # float32 log2 (powers of two only: exact on every CPU), the truncating cast of
        # num_kv_splits' formula
        offs = tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offs).to(tl.float32) * 0.015625
        e = cores.to(tl.float32) * tl.maximum(tl.log2(x), 1.0)
        tl.store(out + offs, e.to(tl.int32))

    @triton.jit
    def store_i32(x_ptr, out, BLOCK: tl.constexpr):
        # int64 values stored into int32 tensors: the low 32 bits, by an explicit cast and by
        # tl.store's own conversion
        offs = tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offs)
        tl.store(out + offs, x.to(tl.int32))
        tl.store(out + BLOCK + offs, x)

    _KERNELS = dict(runtime_loop=runtime_loop, scalar_mask=scalar_mask, offsets_64=offsets_64,
                    reductions=reductions, arith=arith, log2_f32=log2_f32, store_i32=store_i32)
    return _KERNELS


_KERNELS = None


def _i32(values):
    import torch

    return torch.tensor(values, dtype=torch.int32)


def _i64(values):
    import torch

    return torch.tensor(values, dtype=torch.int64)


def _probe_runtime_loop():
    out = _i32([0] * 11)
    _kernels()["runtime_loop"][(1,)](out, 10, BLOCK=4)
    return out.tolist(), [1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 3]


def _probe_scalar_mask():
    import torch

    src = torch.arange(100, 132, dtype=torch.int32).reshape(4, 8)[:, :5]  # row stride 8
    rows = _i64([2, -1, 4, 0])  # rows -1 and 4 are outside src
    out = _i32([-9] * 64)
    _kernels()["scalar_mask"][(4,)](src, src.stride(0), rows, 4, out, 3, BLOCK=8)
    a, b, c, d = ([116, 117, 118] + [-1] * 5, [-1] * 8, [-1] * 8, [100, 101, 102] + [-1] * 5)
    skip = [-9] * 5
    expected = (a + [1160, 1170, 1180] + skip + b + [-9] * 8 + c + [-9] * 8
                + d + [1000, 1010, 1020] + skip)
    return out.tolist(), expected


def _probe_offsets_64():
    import torch

    src = torch.arange(0, 48, dtype=torch.int64)[::3]  # stride 3: 0, 3, 6, ...
    out = torch.full((8,), -9, dtype=torch.int64)
    view = out[::2]  # stride 2
    _kernels()["offsets_64"][(1,)](src, src.stride(0), view, view.stride(0), BLOCK=4)
    return out.tolist(), [0, -9, 5, -9, 10, -9, 15, -9]


def _probe_reductions():
    x = _i32([2**31 - 1, 5, -7, 2**31 - 1, 11, 99])  # the last element is masked off
    out = _i64([0] * 16)
    _kernels()["reductions"][(1,)](x, 5, out, BLOCK=8)
    big = 2**31 - 1
    expected = [2 * big + 9, big, -7, big, big + 5, big - 2, 2 * big - 2, 2 * big + 9] + [0] * 8
    return out.tolist(), expected


def _probe_arith():
    x = _i64([-9, -1, 0, 7])
    out = _i64([0] * 12)
    _kernels()["arith"][(1,)](x, out, 4, BLOCK=4)
    return out.tolist(), [-3, -1, 0, 56, 3, 1, 0, 2, 15, 15, 0, 0]


def _probe_log2_f32():
    x = _i32([64, 4096, 32, 2**30])
    out = _i32([0] * 4)
    _kernels()["log2_f32"][(1,)](x, out, 132, BLOCK=4)
    return out.tolist(), [132, 792, 132, 3168]


def _probe_store_i32():
    x = _i64([2**32 + 5, -1, 2**31, -(2**31) - 1])
    out = _i32([0] * 8)
    _kernels()["store_i32"][(1,)](x, out, BLOCK=4)
    low = [5, -1, -(2**31), 2**31 - 1]
    return out.tolist(), low + low


PROBES = (
    Probe("runtime_loop", "a loop over a runtime bound", _probe_runtime_loop),
    Probe("scalar_mask", "a load/store mask combining a block comparison with a comparison of a loaded scalar",
          _probe_scalar_mask),
    Probe("offsets_64", "64-bit offsets through strided pointers", _probe_offsets_64),
    Probe("reductions", "tl.sum/max/min/cumsum in int64", _probe_reductions),
    Probe("arith", "tl.where, shifts, tl.cdiv", _probe_arith),
    Probe("log2_f32", "float32 log2 and a truncating cast to int32", _probe_log2_f32),
    Probe("store_i32", "int64 values stored into int32 tensors", _probe_store_i32),
)


def _versions() -> str:
    import numpy
    import triton

    return f"triton {triton.__version__} with numpy {numpy.__version__}"


def _root(exc: BaseException) -> BaseException:
    """The innermost exception of a `raise ... from` chain (Triton wraps the real one, often
    twice, in InterpreterError)."""
    seen = {id(exc)}
    while exc.__cause__ is not None and id(exc.__cause__) not in seen:
        exc = exc.__cause__
        seen.add(id(exc))
    return exc


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"[:200]


def _check_mode() -> None:
    """Triton's own helpers (tl.zeros, tl.cdiv, tl.sum, ...) are kernels too, defined when
    triton.language is imported: imported before TRITON_INTERPRET was set, they are compiled
    kernels that an interpreted kernel cannot call, whatever the versions."""
    if os.environ.get("TRITON_INTERPRET", "0").strip().lower() in ("", "0", "false", "off", "no"):
        raise DeviceModeError("Triton's interpreter is not switched on: set TRITON_INTERPRET=1 "
                              "(kvfuzz.device.select('cpu') does) before triton is imported")
    import triton.language as tl
    from triton.runtime.jit import JITFunction

    if isinstance(tl.zeros, JITFunction):
        raise DeviceModeError("triton was imported before TRITON_INTERPRET=1 was set, so its own helpers "
                              "(tl.zeros, tl.sum, ...) are compiled kernels the interpreter cannot call: "
                              "select the device (kvfuzz.device.select('cpu')) before importing triton, "
                              "in a fresh process")


def check_interpreter(probes=None) -> None:
    """Run every probe through Triton's interpreter; refuse with one line at the first one that
    raises or computes anything but its exact expected values.

    The probes cover what kvfuzz's kernels and SGLang's use: runtime-bound loops, masked loads
    and stores (with `other=`, and masks combining block and loaded-scalar comparisons), 64-bit
    offsets through strided pointers, reductions, tl.where, shifts, tl.cdiv, float32 log2, and
    int64 values stored into int32 tensors. Needs TRITON_INTERPRET set (`device.select("cpu")`).
    """
    _check_mode()
    for probe in PROBES if probes is None else probes:
        try:
            got, expected = probe.run()
        except Exception as exc:  # the interpreter's own failure, whatever its type
            raise DeviceModeError(
                f"{_versions()}: Triton's interpreter fails kvfuzz's probe '{probe.name}' ({probe.what}): "
                f"{_first_line(_root(exc))}; {ADVICE}") from None
        if got != expected:
            raise DeviceModeError(
                f"{_versions()}: Triton's interpreter computes wrong values in kvfuzz's probe '{probe.name}' "
                f"({probe.what}): {got} where {expected} is right; {ADVICE}")


# --------------------------------------------------------------------------- classify_error

# Inside the triton package, the code that checks the target's program or launch rather than
# executes it: a failure there is the target's (see classify_error).
_TRITON_FRONT_END = ("language/", "compiler/code_generator.py", "compiler/errors.py", "runtime/jit.py")
_INTERPRETER = "runtime/interpreter.py"
_INTERPRETER_CHECKS = frozenset({
    "__call__",  # GridExecutor / InterpretedFunction: bind the launch's arguments, check the grid
    "_implicit_cvt",  # convert a launch argument (an int that fits no integer type)
    "create_assert", "create_assume",  # the kernel's own tl.device_assert / tl.assume
    "_new_static_assert",  # the kernel's own tl.static_assert
})
# Device faults reported by the next CUDA call (maybe a launch inside Triton): the kernel's.
_DEVICE_FAULTS = ("illegal memory access", "illegal address", "misaligned address", "unspecified launch failure",
                  "device-side assert", "illegal instruction")


def _package_dir(name: str) -> str | None:
    mod = sys.modules.get(name)
    path = getattr(mod, "__file__", None)
    return os.path.dirname(os.path.abspath(path)) + os.sep if path else None


def _library_test():
    """A test for code every side calls into (Python's standard library, NumPy, torch): a frame
    there says nothing about whose failure it is, so the first frame outside them decides."""
    import sysconfig

    stdlib = tuple({os.path.abspath(sysconfig.get_paths()[k]) + os.sep for k in ("stdlib", "platstdlib")})
    packages = tuple(d for d in (_package_dir("numpy"), _package_dir("torch")) if d)

    def is_library(path: str) -> bool:
        if path.startswith(packages):
            return True
        # a venv's platstdlib holds its site-packages: those are not the standard library
        return path.startswith(stdlib) and "-packages" + os.sep not in path

    return is_library


def classify_error(exc: BaseException) -> str:
    """"environment" when an exception raised during a target call is Triton's machinery failing
    (kvfuzz cannot judge the target here), "target" when it is the target's own.

    The rule, from experiments under triton 3.6-3.9 (docs/environment.md): follow the
    exception's `__cause__` chain to its root (Triton wraps a kernel's failure in one
    InterpreterError per call level), walk the root's traceback from where it was raised
    outwards past frames of the standard library, NumPy and torch, and look at the first frame
    left:

    * in Triton's front end or launch checks — `triton/language/`, `triton/compiler/code_generator.py`,
      `triton/runtime/jit.py`, and in the interpreter the argument binding and grid check
      (`__call__`, `_implicit_cvt`) and the kernel's own assertions (`create_assert`,
      `create_assume`, `_new_static_assert`): **target**. Triton rejected the target's program
      or launch: a type error, a non-power-of-two `tl.arange`, missing arguments;
    * anywhere else in the triton package — the interpreter's implementation of the ops
      (`InterpreterBuilder`, the patched tensor methods, reductions, its AST rewriting), the
      native library, the backends, the compile pipeline after the front end: **environment**.
      Triton accepted the program and then failed to run it: triton 3.9's "mask has
      unsupported dtype", triton 3.6's int() of a one-element array under numpy >= 2.4, an
      int32 reduction that overflows in NumPy (triton <= 3.8), `inline_asm` on the CPU;
    * anywhere else — the target's host code (a ValueError or AssertionError refusing its
      arguments), a kernel body (a NameError), torch, kvfuzz: **target**.

    Exceptions to the rule by type: `triton.runtime.errors.OutOfResources` (the target asked
    for more shared memory or registers than the GPU has) is the target's, so is a
    `CompilationError` anywhere in the chain (compiled Triton rejected the kernel's source: a
    plain global read inside a kernel, which the interpreter allows), and so is a CUDA
    device fault (illegal address, device-side assert, ...) even when Triton's next launch is
    what reports it. An exception with no traceback (never raised) is the target's.
    Out-of-bounds accesses under the interpreter raise nothing (they read or write host memory,
    which kvfuzz's arena sees, or kill the worker with SIGSEGV), so they never come here.
    """
    root = _root(exc)
    if type(root).__name__ == "OutOfResources" and type(root).__module__.startswith("triton"):
        return "target"
    link: BaseException | None = exc
    while link is not None:  # compiling the target's kernel failed: Triton rejected its program
        if type(link).__name__ == "CompilationError" and type(link).__module__.startswith("triton"):
            return "target"
        link = link.__cause__ or link.__context__
    message = str(root).lower()
    if any(fault in message for fault in _DEVICE_FAULTS):
        return "target"
    triton_dir = _package_dir("triton")
    if triton_dir is None:
        return "target"
    is_library = _library_test()
    for frame in reversed(traceback.extract_tb(root.__traceback__)):
        path = os.path.abspath(frame.filename) if not frame.filename.startswith("<") else frame.filename
        if path.startswith("<") or is_library(path):
            continue
        if not path.startswith(triton_dir):
            return "target"
        rel = path[len(triton_dir):].replace(os.sep, "/")
        if rel.startswith(_TRITON_FRONT_END):
            return "target"
        if rel == _INTERPRETER and frame.name in _INTERPRETER_CHECKS:
            return "target"
        return "environment"
    return "target"
