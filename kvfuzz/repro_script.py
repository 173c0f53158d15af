#!/usr/bin/env python3
"""The standalone repro script that `kvfuzz replay CASE --emit-repro FILE.py` writes.

This module is the script's own part: `kvfuzz.repro` writes FILE.py as a description of the
case (this docstring's place), then the source of each kvfuzz module it imports from
(`kvfuzz.repro.standalone_modules(op)`: the judge itself, kvfuzz/judge_flow.py, and what it
stands on: the finding signatures, which exceptions are CUDA faults, the two fills, where a
byte lies and whom it is charged to, the output, re-run and cross-check rules; the re-run
schedule, the contract variant a kernel file selects, the SGLang stand-ins, the call
bindings), each under a header naming it and with its imports of kvfuzz modules dropped, then
this module's source, its line `CASE = None` (near the end) replaced by the case's data (a
`ReproCase`). So each of those modules needs only Python 3.9+, torch and triton, as this one
does: no NumPy, no kvfuzz (tests/test_repro.py checks their imports). They exist once: kvfuzz
runs the same code, its judge on NumPy arenas, the script on torch ones (`TorchArena`).

Imported as `kvfuzz.repro_script` it holds no case (its `main` refuses to run); callers
build a `ReproCase` (`kvfuzz.repro.repro_case(saved)`) and call `run_case`, or `judge_runs`
on a `TorchArena` directly.

This part rebuilds the guarded arena in torch, judges the case under the contract variant
kvfuzz selects for the kernel file it is given (`bind_entry`: as `kvfuzz replay --target FILE`
does), calls the entry point as kvfuzz binds it (`bind`) on fresh arenas in kvfuzz's schedule
(twice, the second from the alternate image, then the probe runs where the fill matters, as
`kvfuzz replay` does), reads each arena back and hands the runs to kvfuzz's judge
(`judge_runs`): must-refuse cases must raise; in-contract cases must not raise, must match the
oracle on their required cells and leave their untouched cells alone; no case may change a
byte outside every tensor's elements or an input element; runs must agree, a difference the
fill explains being an out-of-bounds read of the input read past. On CUDA, a CUDA error is
recorded as kvfuzz's executor records it (`CUDA_FAULT`): a crash (`cuda_fault`), in contract
or not, never a refusal. It prints each defect as kvfuzz's finding says it, with its cells.
Exit status: 0 clean, 1 defect, 2 it cannot run this file (one line on stderr: a usage error,
a kernel file that cannot be loaded or called, an entry point without an argument the case
passes). `--json FILE` also writes the verdict as JSON: the exit status, and each defect's
signature with its cells as kvfuzz's finding lists them (tests/test_repro_agrees.py compares
the two cell for cell).

A `backend_divergence` case (kvfuzz's `--cross-check`: the compiled kernel and Triton's
interpreter disagree) carries the backend it was compared with (`ReproCase.cross_check`). The
script then runs it on both, each in a process of its own as kvfuzz's cross-check does: the
primary device (cuda), judged as any case, and the backend (the interpreter, with
KVFUZZ_CROSS_CHECK_WORKER=1 in its environment, as kvfuzz's cross-check worker has), called once;
each hands its first run's arena back in a file, and this process compares the two with
kvfuzz's `divergence_findings`. Without a device other than the backend it refuses in one line (exit 2).
"""

from __future__ import annotations

import argparse
import base64
import faulthandler
import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
import traceback
import types
import zlib

# kvfuzz modules the script embeds (kvfuzz.repro.standalone_modules): in a written script these
# lines are dropped, and the names are the embedded modules' own
from .errors import TargetLoadError
from .faults import CUDA_FAULT, is_device_fault, one_line
from .fills import CANARY_BYTE, alt_words
from .findings import Finding
from .judge_flow import NOBODY, OutputCells, divergence_findings, judge_runs
from .places import band_range
from .targets.calls import bind
from .targets.sglang_shim import ensure_swa_pool_type
from .rerun_schedule import run_schedule
from .variant_choice import binding_variant

MAX_SHOWN = 8  # differing cells / bytes printed per defect
DEFAULT_RUNS = 2  # calls on fresh arenas, as `kvfuzz replay` makes
DEFAULT_TIMEOUT = 600.0  # seconds the child process calling the kernel may take
STATUS_FD_ENV = "KVFUZZ_REPRO_STATUS_FD"  # the supervising parent's pipe for the child's verdict
CROSS_CHECK_MARK = "KVFUZZ_CROSS_CHECK_WORKER"  # set in the backend's process, as kvfuzz's cross.WORKER_MARK


# ---------------------------------------------------------------------------- the case


class ReproCase:
    """Everything kvfuzz knows about one case, computed at emit time (kvfuzz.repro).

    `tensors`: per tensor (in the arena's order), its role ("in" or "out"), dtype, shape,
    strides and offset (elements, as torch's as_strided takes them), and where its storage
    lies in the arena: `start` byte, `nbytes`, and `guard` canary bytes before it (and after
    it, past alignment slack). `arena_image` (the arena before the call: canaries, input
    values, output poison) and `owner` (per arena byte: 0 = no tensor's element, k = an element
    of the k-th tensor) are zlib-compressed, base64-encoded bytes. `cells`, for an in-contract
    case, per output: masks of the required and the must-stay-untouched cells (uint8, the
    output's logical shape, row-major) and the accepted values (int64 blobs, the oracle's
    answer first). `cross_check`, for a backend_divergence case: the backend ("cpu": Triton's
    interpreter) that the device it was found on (`found_on`) is compared with."""

    def __init__(self, op, entry, kernel_path, variant, digest, saved_signature, scalars, tensors, arena_bytes,
                 arena_image, owner, judgments, by_variant, default_variant, release_variants=(),
                 cross_check=None, found_on=None, call=None, generations=()):
        self.op = op  # kvfuzz's op name
        self.entry = entry  # the function (or @triton.jit kernel) the kernel file must define
        self.kernel_path = kernel_path  # which kernel behind the entry point this case takes
        self.saved_variant = variant  # the contract variant kvfuzz saved the case under
        self.digest = digest
        self.saved_signature = saved_signature  # the finding kvfuzz recorded, if any
        self.call = call  # the op's OpCall (its call.py, embedded in the script)
        self.generations = tuple(generations)  # its SGLang API generations, oldest first
        self.default_variant = default_variant  # the variant before the first of release_variants
        self.release_variants = tuple(release_variants)  # (first release, variant), oldest first
        self.scalars = dict(scalars)
        self.tensors = dict(tensors)
        self.arena_bytes = arena_bytes
        self.arena_image = arena_image
        self.owner = owner
        self.judgments = list(judgments)  # per judgment: status, reasons, cells, racy
        self.by_variant = dict(by_variant)  # contract variant -> its judgment's index
        self.cross_check = cross_check
        self.found_on = found_on
        self.judge_as(variant)

    def judge_as(self, variant):
        """Judge the case under contract `variant` (one this script holds)."""
        j = self.judgments[self.by_variant[variant]]
        self.variant = variant  # the contract variant that judges it
        self.status = j["status"]  # in_contract | out_of_contract | must_refuse
        self.reasons = list(j["reasons"])  # why the case is out of contract / must be refused
        self.cells = dict(j["cells"])
        self.racy = dict(j["racy"])  # output -> cells two programs write (uint8 blob, its logical shape)

    @property
    def regions(self):
        """The tensors' places in the arena, in its order, as kvfuzz's places rules take them."""
        return [types.SimpleNamespace(name=name, **t) for name, t in self.tensors.items()]

    @property
    def outputs(self):
        return tuple(name for name, t in self.tensors.items() if t["role"] == "out")

    @property
    def inputs(self):
        return tuple(name for name, t in self.tensors.items() if t["role"] == "in")

    def signature(self, kind, tensor, where):
        """kvfuzz's finding signature (op:path:kind:tensor:where)."""
        return Finding(kind, self.op, self.kernel_path, tensor, where, "").signature


# ---------------------------------------------------------------------------- arguments


class UsageError(Exception):
    """Exit status 2, one line on stderr."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(message)


def parse_args(argv, case):
    ap = _Parser(description=f"Reproduce kvfuzz case {case.digest} ({case.op}) against a kernel file.")
    ap.add_argument("kernels", help=f"the Python file (or package directory) that defines {case.entry}")
    ap.add_argument("--device", choices=("cpu", "cuda"), default=None,
                    help="cuda (compiled) or cpu (Triton interpreter); default: cuda if available")
    ap.add_argument("--runs", type=int, default=DEFAULT_RUNS,
                    help=f"calls on fresh arenas; more than one also checks that runs agree (default {DEFAULT_RUNS}, "
                         "as kvfuzz replay)")
    ap.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT,
                    help=f"seconds the child process may take before it counts as hung (default {DEFAULT_TIMEOUT:g})")
    ap.add_argument("--in-process", action="store_true",
                    help="call the kernel in this process (for a debugger); by default a child process "
                         "calls it, so that a kernel that kills its process is reported too")
    ap.add_argument("--json", metavar="FILE",
                    help="also write the verdict to FILE as JSON: the exit status, and each defect's signature "
                         "with its cells as kvfuzz's finding lists them")
    # a cross-checked case's sides (see cross_check): write the first run to FILE instead of
    # concluding; --unjudged: call once and judge nothing (the backend's side)
    ap.add_argument("--arena-out", metavar="FILE", help=argparse.SUPPRESS)
    ap.add_argument("--unjudged", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.runs < 1:
        raise UsageError("--runs must be >= 1")
    return args


def supervise(argv, timeout, case, json_out=None):
    """Run this script again with --in-process and pass its verdict on. The child hands its
    exit status over a pipe when it finishes; a child that dies without one (killed by a
    signal, as a wild memory access under Triton's interpreter is, or exiting from inside the
    kernel) or that hangs is a crash defect, as a dead kvfuzz worker is."""
    status, why, where = run_child(argv, timeout)
    if status is not None:
        return status
    report = Report(case)
    report.defect("crash", "-", where, f"the process calling the kernel died: {why}")
    return conclude(report, json_out)


def run_child(argv, timeout, env_changes=None):
    """This script again with --in-process (`env_changes`: variables set, or removed where
    None): (its exit status, None, None), or (None, why, where) when it died or hung."""
    sys.stdout.flush()
    read_end, write_end = os.pipe()
    env = dict(os.environ)
    for key, value in (env_changes or {}).items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    env[STATUS_FD_ENV] = str(write_end)
    cmd = [sys.executable, os.path.abspath(__file__), *argv, "--in-process"]
    try:
        child = subprocess.Popen(cmd, env=env, pass_fds=(write_end,))
    finally:
        os.close(write_end)
    try:
        try:
            rc = child.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
            why, where = f"no result after {timeout:g} s (child killed)", "timeout"
        except KeyboardInterrupt:
            child.kill()
            raise
        else:
            status = _read_status(read_end)
            if status is not None:
                return status, None, None
            if rc < 0:
                try:
                    where = signal.Signals(-rc).name
                except ValueError:
                    where = str(-rc)
                why = f"killed by {where} (under Triton's interpreter a stray access touches host memory directly)"
            else:
                where = str(rc)
                why = f"exited with status {rc} before giving a verdict"
    finally:
        os.close(read_end)
    return None, why, where


def _read_status(fd):
    """The exit status the child wrote to the pipe (it has exited), or None."""
    os.set_blocking(fd, False)
    try:
        data = os.read(fd, 64)
    except BlockingIOError:
        return None
    text = data.decode("ascii", "replace").strip()
    return int(text) if text in ("0", "1", "2") else None


def _hand_status(rc):
    """In the supervised child: give the parent our exit status (see supervise)."""
    fd = os.environ.pop(STATUS_FD_ENV, None)
    if fd is None:
        return
    try:
        os.write(int(fd), str(rc).encode("ascii"))
        os.close(int(fd))
    except (OSError, ValueError):
        pass


def _truthy(value):
    return (value or "0").strip().lower() not in ("", "0", "false", "off", "no")


def select_device(requested):
    """cpu or cuda, with Triton's mode to match: the interpreter must be switched on before
    triton is imported and before any @triton.jit decorator runs."""
    if requested == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"
    import torch

    if requested is None:
        requested = "cpu" if _truthy(os.environ.get("TRITON_INTERPRET")) or not torch.cuda.is_available() else "cuda"
    if requested == "cuda":
        if not torch.cuda.is_available():
            raise UsageError("--device cuda: torch sees no CUDA device; use --device cpu")
        if _truthy(os.environ.get("TRITON_INTERPRET")):
            raise UsageError("--device cuda, but TRITON_INTERPRET is set: unset it to run compiled kernels")
    else:
        os.environ["TRITON_INTERPRET"] = "1"
        check_interpreter()
    return requested


def check_interpreter():
    """Refuse an interpreter that cannot run kernels here (triton 3.6 with numpy >= 2.4 fails
    every loop over a runtime bound) instead of reporting a crash defect (as kvfuzz.device does)."""
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def _probe(out_ptr, n):
        for i in range(n):
            tl.store(out_ptr + i, i + 1)

    out = torch.zeros(2, dtype=torch.int32)
    try:
        _probe[(1,)](out, 2)
    except Exception as exc:
        numpy = sys.modules.get("numpy")
        raise UsageError(f"Triton {triton.__version__}'s interpreter fails with numpy "
                         f"{getattr(numpy, '__version__', '?')} ({one_line(exc)}); "
                         "use numpy<2.4 with triton 3.6, or --device cuda") from None
    if out.tolist() != [1, 2]:
        raise UsageError(f"Triton {triton.__version__}'s interpreter computed {out.tolist()} for [1, 2]: "
                         "it cannot be trusted here")


# ---------------------------------------------------------------------------- loading
# SGLang's SWAKVPool is stubbed where sglang cannot be imported (ensure_swa_pool_type, from
# kvfuzz/targets/sglang_shim.py), before the kernel file runs: its SWA path imports the type.


def check_kernel_file(path):
    if not os.path.exists(path):
        raise UsageError(f"kernel file {path!r} does not exist")
    if os.path.isdir(path):
        if not os.path.isfile(os.path.join(path, "__init__.py")):
            raise UsageError(f"{path!r} is a directory but not a Python package (no __init__.py)")
    elif not os.path.isfile(path):
        raise UsageError(f"kernel file {path!r} is not a file")


def load_kernels(path, entry_name):
    """The entry point from a kernel file, imported by path as a member of a stand-in package
    for its directory (so `from .sibling import x` works), or from a package directory (its
    __init__.py, e.g. kvfuzz/kernels for kvfuzz's `builtin` target); UsageError if it cannot
    be loaded."""
    check_kernel_file(path)
    path = os.path.abspath(path)
    package = "_kvfuzz_repro_kernels"
    if os.path.isdir(path):
        name, directory = package, path
        spec = importlib.util.spec_from_file_location(name, os.path.join(path, "__init__.py"),
                                                      submodule_search_locations=[path])
    else:
        directory, filename = os.path.split(path)
        pkg = types.ModuleType(package)
        pkg.__path__ = [directory]
        sys.modules[package] = pkg
        name = f"{package}.{os.path.splitext(filename)[0]}"
        spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise UsageError(f"cannot load {path!r} as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        raise UsageError(f"loading {path!r} failed: {one_line(exc)}") from None
    entry = getattr(module, entry_name, None)
    if entry is None:
        raise UsageError(f"{path!r} defines no {entry_name}")
    return entry


# ---------------------------------------------------------------------------- the call
# The entry point is bound by parameter name as kvfuzz binds it (bind, from kvfuzz/targets/calls.py).


def bind_entry(case, entry, path):
    """The Binding that calls `entry` the way SGLang does, with the case judged under the
    contract variant kvfuzz selects for this kernel file (`kvfuzz replay --target FILE`: by the
    SGLang API generation of the entry point's signature, binding_variant from
    kvfuzz/variant_choice.py); UsageError when kvfuzz cannot call it, or when the case holds an
    optional tensor the entry point has no parameter for (0.5.22's get_num_kv_splits_triton and
    uneven_batch): that file cannot run this case."""
    try:
        binding = bind(case.op, entry, case.call, case.generations, path)
    except TargetLoadError as exc:
        raise UsageError(str(exc)) from None
    for name in binding.lacks:
        if name in case.tensors:
            params = " or ".join(case.call.optional[name])
            raise UsageError(f"{case.entry} takes no {params}, which this case passes "
                             f"(a later SGLang release added it)")
    variant = binding_variant(case.release_variants, case.default_variant, binding)
    if variant not in case.by_variant:  # pragma: no cover - the script holds every variant kvfuzz selects
        raise UsageError(f"kvfuzz judges {path} by contract variant {variant}, which this script does not hold")
    case.judge_as(variant)
    return binding


# ---------------------------------------------------------------------------- the arena


def unpack(blob):
    return zlib.decompress(base64.b64decode(blob))


def host_bytes(blob, dtype):
    """A CPU tensor from an embedded little-endian blob."""
    import torch

    data = bytearray(unpack(blob))
    if not data:
        return torch.empty(0, dtype=dtype)
    return torch.frombuffer(data, dtype=dtype)


def views_of(case, arena):
    """A strided view per tensor into `arena` (any device), as kvfuzz materialises them."""
    import torch

    views = {}
    for name, t in case.tensors.items():
        base = arena[t["start"] : t["start"] + t["nbytes"]].view(getattr(torch, t["dtype"]))
        views[name] = base.as_strided(t["shape"], t["strides"], base.storage_offset() + t["offset"])
    return views


class TorchArena:
    """The case's arena on the host in torch, as kvfuzz's judge (judge_runs, from
    kvfuzz/judge_flow.py, whose docstring lists what an arena offers) reads one: the image,
    the alternate image, and per byte whose element holds it (the embedded owner map)."""

    def __init__(self, case):
        import torch

        self.case = case
        self.names, self.outputs, self.regions = tuple(case.tensors), case.outputs, case.regions
        self.image = host_bytes(case.arena_image, torch.uint8)
        owner = host_bytes(case.owner, torch.uint8)
        assert self.image.numel() == case.arena_bytes and owner.numel() == case.arena_bytes, "corrupt embedded data"
        self.owner = owner.to(torch.int64) - 1  # the index into names, or NOBODY (-1)
        w = alt_words(torch.arange((self.image.numel() + 3) // 4, dtype=torch.int64))
        fill = torch.stack([(w >> (8 * k)) & 0xFF for k in range(4)], dim=1).flatten()[: self.image.numel()]
        self.alt_image = torch.where(owner == 0, fill.to(torch.uint8), self.image)  # the fill where no element is
        self.nowhere = torch.zeros(0, dtype=torch.int64)

    def elements(self, name, arena):
        import torch

        return views_of(self.case, arena)[name].to(torch.int64)

    def itemsize(self, name):
        import torch

        return torch.empty(0, dtype=getattr(torch, self.case.tensors[name]["dtype"])).element_size()

    def owner_of(self, positions):
        return self.owner[positions]

    def owner_at(self, b):
        return int(self.owner[b]) if 0 <= b < self.owner.numel() else NOBODY

    def as_canary(self, after):
        """A run from the alternate image with every word still holding the fill put back."""
        import torch

        out = after.clone()
        words, alt = out.view(torch.int32), self.alt_image.view(torch.int32)
        kept = words == alt  # by whole words: a stored value can share a byte with the fill, not a word
        words[kept] = self.image.view(torch.int32)[kept]
        return out

    @staticmethod
    def differ(x, y):
        import torch

        return torch.nonzero(x != y).flatten()

    @staticmethod
    def where(mask, limit):
        import torch

        return [tuple(ix) for ix in torch.nonzero(mask)[:limit].tolist()]

    @staticmethod
    def unique(values):
        import torch

        return torch.unique(values).tolist()

    @staticmethod
    def same(x, y):
        import torch

        return torch.equal(x, y)

    @staticmethod
    def word(arena, w):
        import torch

        return int(arena[4 * w : 4 * w + 4].view(torch.int32)[0])

    def band(self, name, where):
        """The byte range of `name`'s guard band before it, its storage (gap) or its guard band after it."""
        return band_range(types.SimpleNamespace(**self.case.tensors[name]), where)

    def bands(self, name):
        """`name`'s guard bands, and "gap" where its storage holds bytes that are no element's."""
        lo, hi = self.band(name, "gap")
        return ("before", "gap", "after") if bool((self.owner[lo:hi] != self.names.index(name)).any()) \
            else ("before", "after")

    def probe_image(self, name, where):
        """The image with the alternate fill in the bands `where` of `name` alone."""
        out = self.image.clone()
        for one in where:
            lo, hi = self.band(name, one)
            out[lo:hi] = self.alt_image[lo:hi].where(self.owner[lo:hi] == NOBODY, out[lo:hi])
        return out


def output_cells(case):
    """{output: OutputCells (from kvfuzz/judge_flow.py)} of an in-contract case: its required,
    may-write and untouched cells and the accepted answers, as kvfuzz embedded them."""
    import torch

    out = {}
    for name, c in case.cells.items():
        shape = tuple(case.tensors[name]["shape"])
        required = host_bytes(c["required"], torch.uint8).reshape(shape).bool()
        untouched = host_bytes(c["untouched"], torch.uint8).reshape(shape).bool()
        out[name] = OutputCells(required, ~(required | untouched), untouched,  # may-write: neither of the two
                                [host_bytes(b, torch.int64).reshape(shape) for b in c["expected"]])
    return out


def racy_cells(case):
    """{output: its cells two programs write} of an out-of-contract case, as kvfuzz embedded them."""
    import torch

    return {name: host_bytes(m, torch.uint8).reshape(tuple(case.tensors[name]["shape"])).bool()
            for name, m in case.racy.items()}


class Run:
    """One call on a fresh arena: what it raised (a CUDA fault as kvfuzz records one: error type
    CUDA_FAULT, from kvfuzz/faults.py; the device is unusable and `after` None), and the arena
    after it."""

    def __init__(self, error=None, error_type=None, detail=None, after=None, alt=False, probe=None):
        self.error = error  # "TypeName: first line" of the exception the call raised
        self.error_type = error_type
        self.detail = detail  # its traceback
        self.after = after  # uint8 CPU tensor: the arena's bytes after the call
        self.alt = alt  # the call started from the alternate image (TorchArena.alt_image)
        self.probe = probe  # "tensor:where" ("tensor:*": all its bands): only there the alternate fill


def run_once(case, call, image, device):
    """Call the entry point once (`call`: its Binding) on a fresh device copy of `image` and
    read the arena back."""
    import torch

    run = Run()

    def faulted(exc):
        run.error, run.error_type, run.detail = f"{CUDA_FAULT}: {one_line(exc)}", CUDA_FAULT, traceback.format_exc()
        return run

    arena = image.clone().to(device)
    try:
        call(views_of(case, arena), case.scalars)
        if device == "cuda":
            torch.cuda.synchronize()
    except Exception as exc:
        if device == "cuda" and is_device_fault(exc):
            return faulted(exc)
        run.error, run.error_type, run.detail = one_line(exc), type(exc).__name__, traceback.format_exc()
        if device == "cuda":  # an ordinary exception after a launch that faulted: the fault decides
            try:
                torch.cuda.synchronize()
            except Exception as sync_exc:
                return faulted(sync_exc)
    if device == "cuda":
        try:
            run.after = arena.cpu()
        except Exception as exc:
            return faulted(exc)
    else:
        run.after = arena
    return run


# ---------------------------------------------------------------------------- the verdict


class Report:
    """The defects found, each printed with kvfuzz's signature and its cells."""

    def __init__(self, case):
        self.case = case
        self.findings = []  # Findings (from kvfuzz/findings.py), in the order found
        self.runs = []  # the runs judged (run_case)

    @property
    def defects(self):
        """The findings' signatures, in the order found."""
        return [f.signature for f in self.findings]

    def add(self, findings, arena=None, after=None):
        """Print and keep `findings`; with the `arena` and the first run's arena `after`, a stray
        write's bytes and a changed input's elements are shown too."""
        for f in findings:
            self.findings.append(f)
            print(f"DEFECT {f.kind}: {f.message}  [{f.signature}]")
            for line in detail_lines(f, arena, after)[:MAX_SHOWN]:
                print(f"    {line}")

    def defect(self, kind, tensor, where, message):
        """A defect the script itself tells (its child process died)."""
        self.add([Finding(kind, self.case.op, self.case.kernel_path, tensor, where, message)])


def fmt_index(idx):
    return "[" + ", ".join(str(int(i)) for i in idx) + "]"


CELL_WORDS = {"numpy": "expected", "before": "was", "read_at": "read at byte"}


def detail_lines(f, arena, after):
    """What a kernel author reads under a defect: its cells (an element and its values, or a
    stray byte's run with what it holds now), or a changed input's elements."""
    if f.kind == "input_modified" and arena is not None:
        got, was = arena.elements(f.tensor, after), arena.elements(f.tensor, arena.image)
        return [f"{f.tensor}{fmt_index(ix)}: was {int(was[ix])}, now {int(got[ix])}"
                for ix in arena.where(got != was, MAX_SHOWN)]
    lines, stray = [], []
    for cell in f.cells:
        rest = dict(cell)
        tensor = rest.pop("tensor", f.tensor)
        if "byte" in rest and f.kind == "out_of_bounds_write":
            stray.append(rest.pop("byte"))
            continue
        head = f"{tensor}{fmt_index(rest.pop('index'))}" if "index" in rest else \
            f"byte {rest.pop('byte')}" if "byte" in rest else ""
        values = ", ".join(f"{CELL_WORDS.get(k, k)} {v}" for k, v in rest.items())
        lines.append(f"{head}: {values}" if head and values else head or values)
    t = arena.case.tensors.get(f.tensor) if arena is not None else None
    base, of = (t["start"], f"{f.tensor}'s storage start") if t else (0, "the arena's start")
    for lo, hi in byte_runs(stray):  # the cells' offsets: from the output's storage start
        held = after[base + lo : base + min(hi, lo + 15) + 1].tolist() if arena is not None else []
        now = f": canary 0x{CANARY_BYTE:02x} -> " + " ".join(f"{x:02x}" for x in held) if held else ""
        lines.append(f"bytes {lo:+d}..{hi:+d} from {of}{now}" + (" ..." if hi - lo >= 16 and held else ""))
    return lines


def byte_runs(positions):
    """[(first, last)] of consecutive runs in a sorted list of byte positions."""
    runs = []
    for b in positions:
        if runs and b == runs[-1][1] + 1:
            runs[-1][1] = b
        else:
            runs.append([b, b])
    return [tuple(r) for r in runs]


def run_case(case, call, device, runs=DEFAULT_RUNS):
    """Call the entry point (`call`: its Binding) on fresh arenas as kvfuzz does (`runs` runs,
    then the probe runs where the fill matters: run_schedule, from kvfuzz/rerun_schedule.py;
    stopping at a CUDA fault) and judge them as kvfuzz does (judge_runs, from
    kvfuzz/judge_flow.py); the Report (its defects printed)."""
    import torch

    arena = TorchArena(case)
    done = []

    def make(alt, probe, where):
        """One run (kvfuzz's rerun_schedule, from kvfuzz/rerun_schedule.py, decides which)."""
        start = arena.probe_image(probe.split(":")[0], where) if probe else arena.alt_image if alt else arena.image
        run = run_once(case, call, start, device)
        run.alt, run.probe = alt, probe
        done.append(run)
        if len(done) == 1 and run.error is not None:
            print(f"raised: {run.error}")
            if case.status == "in_contract":
                sys.stderr.write(run.detail or "")
        elif run.error_type == CUDA_FAULT:
            sys.stderr.write(run.detail or "")
        return run, run.error_type != CUDA_FAULT

    def fill_matters(first, run):
        return first.after is not None and run.after is not None and (
            run.error != first.error or not torch.equal(arena.as_canary(run.after), first.after))

    run_schedule(runs, case.inputs, arena.bands, make, fill_matters)
    report = Report(case)
    report.runs = done
    _, found = judge_runs(arena, case.op, case.kernel_path, case.status, case.reasons, done,
                          output_cells(case) if case.status == "in_contract" else {}, racy_cells(case))
    report.add(found, arena, done[0].after)
    return report


# ---------------------------------------------------------------------------- cross-check


def cross_devices(requested, case):
    """(primary device, backend) of a cross-checked case: the backend is the case's, the
    primary --device, else cuda. UsageError where they would be one, or torch sees no CUDA."""
    import torch

    backend, found_on = case.cross_check, case.found_on or "cuda"
    primary = requested or "cuda"
    what = f"the case is a divergence between {found_on} and {backend}, so it runs on both"
    if primary == backend:
        raise UsageError(f"{what}: give a device other than {backend} (--device cuda, on a machine with CUDA)")
    if primary == "cuda" and not torch.cuda.is_available():
        raise UsageError(f"{what}, and torch sees no CUDA device here: run it on a machine with CUDA")
    return primary, backend


FINDING_FIELDS = ("kind", "op", "path", "tensor", "where", "message", "cells")


def save_run(path, run, findings, variant):
    """A side's first run, its findings and the variant it was judged by, for the parent that
    compares the two (cross_check)."""
    import torch

    after = None if run.after is None else run.after.cpu()
    torch.save({"error": run.error, "error_type": run.error_type, "after": after, "variant": variant,
                "findings": [{k: getattr(f, k) if k != "cells" else [dict(c) for c in f.cells] for k in FINDING_FIELDS}
                             for f in findings]}, path)


def load_run(path):
    import torch

    d = torch.load(path, weights_only=True)
    findings = [Finding(**{**f, "cells": tuple(f["cells"])}) for f in d["findings"]]
    return Run(error=d["error"], error_type=d["error_type"], after=d["after"]), findings, d["variant"]


def cross_check(args, case):
    """Run the case on the primary device (judged as any case, in its own process) and on the
    backend (once, in another process), then compare the two first runs as kvfuzz does
    (divergence_findings, from kvfuzz/judge_flow.py)."""
    primary, backend = cross_devices(args.device, case)
    print(f"repro: {case.op} case {case.digest} is a divergence between {case.found_on or primary} and {backend}: "
          f"it runs on {primary} and on {backend}, each in a process of its own, and the two arenas are compared")
    report = Report(case)
    with tempfile.TemporaryDirectory(prefix="kvfuzz-repro-") as tmp:
        sides = {}
        for side, device, env in (("primary", primary, {CROSS_CHECK_MARK: None}),
                                  ("backend", backend, {CROSS_CHECK_MARK: "1", "TRITON_INTERPRET": "1"})):
            out = os.path.join(tmp, f"{side}.pt")
            argv = [args.kernels, "--device", device, "--arena-out", out, "--runs",
                    str(args.runs if side == "primary" else 1)] + (["--unjudged"] if side == "backend" else [])
            status, why, where = run_child(argv, args.timeout, env)
            if status is not None and status != 0:
                return status  # a usage error on that side, said in its own line
            if status is None and side == "primary":  # a crash; nothing to compare (as kvfuzz's judge)
                report.defect("crash", "-", where, f"the process calling the kernel died: {why}")
                return conclude(report, args.json)
            # a backend that died or hung: lost, as a dead kvfuzz worker is
            sides[side] = load_run(out) if status == 0 else (Run(error=f"WorkerDied: {why}", error_type="WorkerDied"),
                                                             [], None)
    mine, report.findings, variant = sides["primary"]  # the primary's defects, printed by its process
    case.judge_as(variant)  # the variant the primary's process judged the kernel file by
    report.add(divergence_findings(TorchArena(case), case.op, case.kernel_path, mine, sides["backend"][0], backend,
                                   output_cells(case)))
    return conclude(report, args.json)


# ---------------------------------------------------------------------------- main


def main(argv, case=None):
    """The script's command line; `case` defaults to the one this file holds. Only a case this
    file holds can run supervised (the child is this file again); any other runs in-process."""
    if case is None:
        case = CASE
    if case is None:
        print("repro: error: this is kvfuzz's repro template and holds no case; write a script with "
              "`kvfuzz replay CASE --emit-repro FILE.py`", file=sys.stderr)
        return 2
    try:
        args = parse_args(argv, case)
        check_kernel_file(args.kernels)  # before importing torch: a typo answers at once
        if case.cross_check and args.arena_out is None:  # two sides, two processes
            if args.in_process or case is not CASE:
                raise UsageError(f"the case is a divergence between {case.found_on} and {case.cross_check}: it "
                                 "runs in two processes, one per side (drop --in-process)")
            return cross_check(args, case)
        if not args.in_process and case is CASE:
            return supervise(argv, args.timeout, case, args.json)
    except UsageError as exc:
        print(f"repro: error: {exc}", file=sys.stderr)
        rc = 2
    else:
        rc = _main_in_process(args, case)
    sys.stdout.flush()
    _hand_status(rc)  # in a supervised child, every verdict (usage errors too) goes to the parent
    return rc


def _main_in_process(args, case):
    try:
        faulthandler.enable()  # a segfault prints where it happened
        device = select_device(args.device)
        ensure_swa_pool_type()  # before the kernel file runs: its SWA path imports the type
        call = bind_entry(case, load_kernels(args.kernels, case.entry), args.kernels)
    except UsageError as exc:
        print(f"repro: error: {exc}", file=sys.stderr)
        return 2

    saved = "" if case.variant == case.saved_variant else f", saved under {case.saved_variant}"
    print(f"repro: {case.op} case {case.digest} [{case.variant}{saved}] ({case.status.replace('_', ' ')}) -> "
          f"{case.entry} from {args.kernels} on {device}" + (" (triton interpreter)" if device == "cpu" else ""))
    if args.unjudged:  # the cross-check backend's side: the parent judges it against the primary's
        import torch

        run = run_once(case, call, host_bytes(case.arena_image, torch.uint8), device)
        if run.error is not None:
            print(f"raised: {run.error}")
        save_run(args.arena_out, run, [], case.variant)
        return 0
    report = run_case(case, call, device, args.runs)
    if args.arena_out is not None:  # the cross-check primary's side: the parent concludes
        save_run(args.arena_out, report.runs[0], report.findings, case.variant)
        return 0
    return conclude(report, args.json)


def conclude(report, json_out=None):
    """The last line (FAIL or OK) and the exit status: 1 with defects, else 0 (and, with
    `json_out`, the verdict written there)."""
    rc = _conclude(report)
    if json_out is not None:
        with open(json_out, "w", encoding="utf-8") as f:
            json.dump({"exit": rc, "findings": [{"signature": f.signature, "cells": [dict(c) for c in f.cells]}
                                                for f in report.findings]}, f, indent=1)
    return rc


def _conclude(report):
    case = report.case
    if report.defects:
        again = ""
        if case.saved_signature is not None:
            again = (" The saved finding reproduces." if case.saved_signature in report.defects
                     else f" (kvfuzz saved {case.saved_signature}.)")
        print(f"FAIL: {len(report.defects)} defect(s).{again}")
        return 1
    checked = {"in_contract": "required cells match the oracle, untouched cells kept",
               "must_refuse": "refused as it must",
               "out_of_contract": "no write outside the tensors"}[case.status]
    print(f"OK: {case.op} case {case.digest}: {checked}; no byte outside the tensors' elements and no input changed.")
    return 0


# ---------------------------------------------------------------------------- data
# In a script written by `kvfuzz replay --emit-repro`, the next line holds the case.

CASE = None


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
