#!/usr/bin/env python3
"""The standalone repro script that `kvfuzz replay CASE --emit-repro FILE.py` writes.

This module is the script's own part: `kvfuzz.repro` writes FILE.py as a description of the
case (this docstring's place), then the source of each kvfuzz module it imports from
(`kvfuzz.repro.standalone_modules(op)`: the finding signatures, which exceptions are CUDA
faults, the two fills, where a byte lies and whom it is charged to, the output, re-run and
cross-check rules, which checks judge a case and in which order, the SGLang stand-ins, the call
bindings), each under a header naming it
and with its imports of kvfuzz modules dropped, then this module's source, its line
`CASE = None` (near the end) replaced by the case's data (a `ReproCase`). So each of those
modules needs only Python 3.9+, torch and triton, as this one does: no NumPy, no kvfuzz
(tests/test_repro.py checks their imports). The rules they hold exist once: kvfuzz runs the
same code.

Imported as `kvfuzz.repro_script` it holds no case (its `main` refuses to run); callers
build a `ReproCase` (`kvfuzz.repro.repro_case(saved)`) and call `run_case`, `judge_runs`
and the checks directly.

It rebuilds the guarded arena, judges the case under the contract variant kvfuzz selects for
the kernel file it is given (`bind_entry`: as `kvfuzz replay --target FILE` does), calls the
entry point as kvfuzz binds it (`bind`, twice, on fresh arenas, as `kvfuzz replay` does), reads the arena back and applies the rules of
`kvfuzz.judge`: must-refuse cases must raise; in-contract cases must not raise, must match
the oracle on their required cells and leave their untouched cells alone; no case may change
a byte outside every tensor's elements or an input element (a stray byte is charged to the
output whose store overran: `charge_writes`); runs must agree, the second starting from the
alternate image (every byte that is no element's holding a position-encoding fill instead of
the canary): a difference the fill explains is an out-of-bounds read of the input read past;
on CUDA, a CUDA error (an illegal memory access, a device-side assert) is a crash
(`cuda_fault`), in contract or not, never a refusal. Exit status: 0 clean, 1 defect, 2 it
cannot run this file (one line on stderr: a usage error, a kernel file that cannot be loaded or
called, an entry point without an argument the case passes). `--json FILE` also writes the verdict as
JSON: the exit status, and each defect's signature with its cells in the fields kvfuzz's finding
lists them (tests/test_repro_agrees.py compares the two cell for cell).

A `backend_divergence` case (kvfuzz's `--cross-check`: the compiled kernel and Triton's
interpreter disagree) carries the backend it was compared with (`ReproCase.cross_check`). The
script then runs it on both, each in a process of its own as kvfuzz's cross-check does: the
primary device (cuda), judged as any case, and the backend (the interpreter, with
KVFUZZ_CROSS_CHECK_WORKER=1 in its environment, as kvfuzz's cross-check worker has), called once;
each hands its first run's arena back in a file, and this process compares the two as
`kvfuzz.judge` does. Without a device other than the backend it refuses in one line (exit 2).
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
from .faults import is_device_fault, one_line
from .fills import CANARY_BYTE, alt_source, alt_words
from .findings import Finding
from .judge_flow import judge_steps
from .places import band_range, band_words, charge_writes, read_place, region_of_byte
from .rules import after_error_rule, divergence_rules, output_rules, racy_only, rerun_rules
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
        self.judgments = list(judgments)  # per judgment: status, reasons, refuse_where, cells
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
        self.refuse_where = j["refuse_where"]  # the `where` of an invalid_accepted defect
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


# ---------------------------------------------------------------------------- memory


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


def elements(case, arena_host, name):
    """A tensor's logical values (int64 copy) read from a host arena."""
    import torch

    return views_of(case, arena_host)[name].to(torch.int64)


class Run:
    """One call on a fresh arena: what it raised, the arena after it, or the CUDA fault that
    left the device unusable (then `after` is None)."""

    def __init__(self, error=None, error_type=None, detail=None, after=None, fault=None, alt=False, probe=None):
        self.error = error  # "TypeName: first line" of an ordinary exception the call raised
        self.error_type = error_type
        self.detail = detail  # its traceback
        self.after = after  # uint8 CPU tensor: the arena's bytes after the call
        self.fault = fault  # "TypeName: first line" of the CUDA error
        self.alt = alt  # the call started from the alternate image (alternate_image)
        self.probe = probe  # "tensor:where" ("tensor:*": all its bands): only there the alternate fill


def run_once(case, call, image, device):
    """Call the entry point once (`call`: its Binding) on a fresh device copy of `image` and
    read the arena back."""
    import torch

    run = Run()
    arena = image.clone().to(device)
    views = views_of(case, arena)
    try:
        call(views, case.scalars)
        if device == "cuda":
            torch.cuda.synchronize()
    except Exception as exc:
        if device == "cuda" and is_device_fault(exc):
            run.fault, run.detail = one_line(exc), traceback.format_exc()
            return run
        run.error, run.error_type, run.detail = one_line(exc), type(exc).__name__, traceback.format_exc()
        if device == "cuda":  # an ordinary exception after a launch that faulted: the fault decides
            try:
                torch.cuda.synchronize()
            except Exception as sync_exc:
                run.fault = one_line(sync_exc)
                return run
    if device == "cuda":
        try:
            run.after = arena.cpu()
        except Exception as exc:
            run.fault = one_line(exc)
    else:
        run.after = arena
    return run


# ---------------------------------------------------------------------------- checks


class Report:
    """The defects found, each printed as it is found with kvfuzz's signature."""

    def __init__(self, case):
        self.case = case
        self.defects = []  # signatures, in the order found
        self.cells = {}  # signature -> its cells, as kvfuzz's finding lists them (the fields --json writes)
        self.runs = []  # the runs judged (run_case)

    def defect(self, kind, tensor, where, message, lines=(), cells=()):
        signature = self.case.signature(kind, tensor, where)  # an unknown kind raises here, as in kvfuzz
        self.defects.append(signature)
        self.cells.setdefault(signature, [dict(c) for c in cells][:MAX_SHOWN])
        print(f"DEFECT {kind}: {message}  [{signature}]")
        for line in lines:
            print(f"    {line}")


def fmt_index(idx):
    return "[" + ", ".join(str(int(i)) for i in idx) + "]"


def byte_runs(positions):
    """[(first, last)] of consecutive runs in a sorted list of byte positions."""
    runs = []
    for b in positions:
        if runs and b == runs[-1][1] + 1:
            runs[-1][1] = b
        else:
            runs.append([b, b])
    return [tuple(r) for r in runs]


def hex_bytes(arena, first, last, limit=16):
    data = arena[first : min(last, first + limit - 1) + 1].tolist()
    more = " ..." if last - first + 1 > limit else ""
    return " ".join(f"{x:02x}" for x in data) + more


def check_memory(report, case, image, owner, after):
    """Bytes outside every tensor's elements, and input elements, must not change. A stray
    byte is charged to the output whose store overran, not to the neighbour it landed in
    (charge_writes, from kvfuzz/places.py)."""
    import torch

    changed = after != image
    stray = torch.nonzero(changed & (owner == 0)).flatten().tolist()  # ascending
    for (name, where), (at, landed) in sorted(charge_writes(case.regions, case.outputs, stray).items()):
        into = ", ".join(f"{n} in {band_words(v, w)}" for (v, w), n in sorted(landed.items()))
        if name == "-":
            report.defect("out_of_bounds_write", "-", "outside",
                          f"{len(at)} arena bytes outside every tensor changed",
                          [f"arena bytes {a}..{b}: canary 0x{CANARY_BYTE:02x} -> {hex_bytes(after, a, b)}"
                           for a, b in byte_runs(at)[:MAX_SHOWN]], [{"byte": b} for b in at])
            continue
        s, n = case.tensors[name]["start"], case.tensors[name]["nbytes"]
        shown = [f"bytes {a - s:+d}..{b - s:+d} from {name}'s storage start "
                 f"(its storage is {n} bytes): canary 0x{CANARY_BYTE:02x} -> {hex_bytes(after, a, b)}"
                 for a, b in byte_runs(at)[:MAX_SHOWN]]
        report.defect("out_of_bounds_write", name, where,
                      f"{len(at)} bytes {where} {name}'s elements changed (outside every tensor's elements), "
                      f"written by a store to {name}; they landed {into}", shown, [{"byte": b - s} for b in at])
    for i, (name, t) in enumerate(case.tensors.items()):
        if t["role"] != "in":
            continue
        hit = changed & (owner == i + 1)
        if bool(hit.any()):
            got, before = elements(case, after, name), elements(case, image, name)
            diff = torch.nonzero(got != before)
            shown = [f"{name}{fmt_index(ix)}: was {int(before[tuple(ix)])}, now {int(got[tuple(ix)])}"
                     for ix in diff[:MAX_SHOWN].tolist()]
            report.defect("input_modified", name, "elements",
                          f"input {name} changed ({int(hit.sum())} bytes, {len(diff)} elements)", shown)


def check_outputs(report, case, image, after):
    """In-contract case: kvfuzz's output rules (output_rules, from kvfuzz/rules.py) on every
    output, with the accepted answers kvfuzz embedded."""
    import torch

    for name, c in case.cells.items():
        got, before = elements(case, after, name), elements(case, image, name)
        shape = tuple(case.tensors[name]["shape"])
        required = host_bytes(c["required"], torch.uint8).reshape(shape).bool()
        untouched = host_bytes(c["untouched"], torch.uint8).reshape(shape).bool()
        accepted = [host_bytes(b, torch.int64).reshape(shape) for b in c["expected"]]
        want = accepted[0]
        for kind, where, message, mask in output_rules(name, required, untouched, got, before, accepted):
            shown, cells = [], []
            for ix in torch.nonzero(mask)[:MAX_SHOWN].tolist():
                cells.append({"index": ix, "got": int(got[tuple(ix)])})
                ix = tuple(ix)
                if kind != "mismatch":
                    shown.append(f"{name}{fmt_index(ix)}: must stay {int(before[ix])}, now {int(got[ix])}")
                    continue
                alts = sorted({int(a[ix]) for a in accepted[1:]} - {int(want[ix])})
                also = f" (or {', '.join(map(str, alts))})" if alts else ""
                poison = "  [never written: still poison]" if int(got[ix]) == int(before[ix]) else ""
                shown.append(f"{name}{fmt_index(ix)}: expected {int(want[ix])}{also}, got {int(got[ix])}{poison}")
            report.defect(kind, name, where, message, shown, cells)


def check_unchanged_outputs(report, case, image, after, error_type):
    """A refused must-refuse case must have raised before writing anything (after_error_rule)."""
    import torch

    for name in case.outputs:
        got, before = elements(case, after, name), elements(case, image, name)
        broken = after_error_rule(name, got, before, error_type)
        if broken is not None:
            kind, where, message, hit = broken
            at = torch.nonzero(hit)[:MAX_SHOWN].tolist()
            shown = [f"{name}{fmt_index(ix)}: was {int(before[tuple(ix)])}, now {int(got[tuple(ix)])}" for ix in at]
            report.defect(kind, name, where, message, shown, [{"index": ix, "got": int(got[tuple(ix)])} for ix in at])


# ---------------------------------------------------------------------------- the alternate fill
# Every second run starts from the alternate image: the same elements, every other byte the
# alternate fill, a word pattern that encodes its own position (alt_words, from kvfuzz/fills.py).
# An output that differs between the fills was computed from bytes outside every tensor: an
# out-of-bounds read, named after the input read past.

MAX_DECODED = 64  # differing elements read back per tensor when telling where a read came from


def alternate_image(case, image, owner):
    """`image` with every byte that is no tensor's element holding the alternate fill."""
    import torch

    w = alt_words(torch.arange((image.numel() + 3) // 4, dtype=torch.int64))
    fill = torch.stack([(w >> (8 * k)) & 0xFF for k in range(4)], dim=1).flatten()[: image.numel()].to(torch.uint8)
    return torch.where(owner == 0, fill, image)


def as_canary(image, alt_image, after):
    """A run from the alternate image with every word still holding the fill put back."""
    import torch

    out = after.clone()
    words, alt = out.view(torch.int32), alt_image.view(torch.int32)
    kept = words == alt  # by whole words: a stored value can share a byte with the fill, not a word
    words[kept] = image.view(torch.int32)[kept]
    return out


def band(case, name, where):
    """The byte range of `name`'s guard band before it, its storage (gap) or its guard band after it."""
    return band_range(types.SimpleNamespace(**case.tensors[name]), where)


def bands(case, owner, name):
    """`name`'s guard bands, and "gap" where its storage holds bytes that are no element's."""
    k = list(case.tensors).index(name) + 1
    lo, hi = band(case, name, "gap")
    return ("before", "gap", "after") if bool((owner[lo:hi] != k).any()) else ("before", "after")


def probe_image(case, image, alt_image, owner, name, where):
    """`image` with the alternate fill in the bands `where` of `name` alone."""
    out = image.clone()
    for one in where:
        lo, hi = band(case, name, one)
        free = owner[lo:hi] == 0
        out[lo:hi] = alt_image[lo:hi].where(free, out[lo:hi])
    return out


def decoded_reads(case, owner, first, seen):
    """{(input, where): [(line, cell)]} for the differing values that were read from the fill
    (each cell as kvfuzz's finding lists it: where the value landed, and read_at, the byte offset
    read from the input's storage start)."""
    import torch

    found = {}
    inputs = case.inputs or tuple(case.tensors)

    def note(src, line, cell):
        if src is not None and 0 <= src[0] < owner.numel() and int(owner[src[0]]) == 0:
            place = read_place(case.regions, inputs, src[0])[0]
            cell["read_at"] = src[0] - case.tensors[place[0]]["start"] if place[0] in case.tensors else src[0]
            found.setdefault(place, []).append((line, cell))

    for name, t in case.tensors.items():
        mine, theirs = elements(case, first, name), elements(case, seen, name)
        bits = 32 if t["dtype"] == "int32" else 64
        for ix in torch.nonzero(mine != theirs)[:MAX_DECODED].tolist():
            a, b = int(mine[tuple(ix)]), int(theirs[tuple(ix)])
            note(alt_source(a, b, bits), f"{name}{fmt_index(ix)}: {a} under the canary, {b} under the alternate fill",
                 {"tensor": name, "index": ix})
    stray = torch.nonzero((first != seen) & (owner == 0)).flatten()
    for w in torch.unique(stray // 4)[:MAX_DECODED].tolist():
        a = int(first[4 * w : 4 * w + 4].view(torch.int32)[0])
        b = int(seen[4 * w : 4 * w + 4].view(torch.int32)[0])
        note(alt_source(a, b, 32), f"arena word at byte {4 * w}: {a} under the canary, {b} under the alternate fill",
             {"tensor": "-", "byte": 4 * w})
    return found


def owners_of(case, owner, diff):
    """Sorted names of the tensors whose elements hold the bytes in `diff` ("-" for bytes
    that are no tensor's element), as kvfuzz's judge names them."""
    import torch

    names = list(case.tensors)
    return sorted({names[o - 1] if o else "-" for o in torch.unique(owner[diff]).tolist()})


def judge_runs(report, case, runs, image, owner):
    """kvfuzz.judge's rules over the runs of one case (the first judged in full, the later
    ones compared with it)."""
    faults = [r.fault for r in runs if r.fault is not None]
    if faults:  # a CUDA error: the context is unusable, the arena unreadable; nothing else is judged
        report.defect("crash", "-", "cuda_fault", f"a CUDA error on the device: {faults[0]}")
        return
    first = runs[0]
    # the order and choice of checks: judge_steps, from kvfuzz/judge_flow.py (kvfuzz's judge runs it
    # too); a lost run is a crash said before (a fault above, a dead or hung child by supervise)
    steps = judge_steps(case.status, first.error is not None, False, first.after is not None)
    if "invalid_accepted" in steps:
        report.defect("invalid_accepted", "-", case.refuse_where, f"ran a case it must refuse: {case.reasons[0]}")
    if "raised" in steps:
        report.defect("crash", "-", first.error_type or "Exception", f"raised on an in-contract case: {first.error}")
    if "memory" not in steps:
        return
    check_memory(report, case, image, owner, first.after)
    if "outputs" in steps:
        check_outputs(report, case, image, first.after)
    if "unchanged_outputs" in steps:
        check_unchanged_outputs(report, case, image, first.after, first.error_type)
    judge_reruns(report, case, runs, image, owner)


def judge_reruns(report, case, runs, image, owner):
    """The runs after the first, by kvfuzz's rerun rules (rerun_rules, from kvfuzz/rules.py):
    one from the image that differs is nondeterministic; one from the alternate image that
    differs is an out-of-bounds read where a differing value decodes as a read of the fill, or
    where the fill in one input's band alone (a probe run) changes each run of it alike, no run
    from the image differs and no image's runs disagree; else nondeterministic."""
    import torch

    first = runs[0]
    alt_image = alternate_image(case, image, owner)
    said = set()

    def seen_of(run):
        return as_canary(image, alt_image, run.after) if run.alt else run.after

    def differs(run):
        return run.error != first.error or not torch.equal(seen_of(run), first.after)

    def same(a, b):
        return a.error == b.error and torch.equal(seen_of(a), seen_of(b))

    def decoded(run):
        return decoded_reads(case, owner, first.after, seen_of(run))

    # "name:*": all of an input's bands at once (the schedule's first probe); its bands, one by one, tell where
    banded = [r for r in runs[1:] if r.probe is None or not r.probe.endswith(":*")]
    racy = {name: host_bytes(m, torch.uint8).reshape(tuple(case.tensors[name]["shape"])).bool()
            for name, m in case.racy.items()}

    def only_racy(run):
        """Whether `run` differs from the first only in racy cells (racy_only, from kvfuzz/rules.py)."""
        seen = seen_of(run)
        diff = seen != first.after
        if run.error != first.error or not bool(diff.any()):
            return False
        return racy_only(set(owners_of(case, owner, diff)), racy, lambda name, cells: bool(
            ((elements(case, first.after, name) != elements(case, seen, name)) & ~cells).any()))

    def changed_by(probe):
        """What a probe run changed, as kvfuzz's judge names it."""
        names = owners_of(case, owner, seen_of(probe) != first.after)
        return sorted(n if n != "-" else "bytes outside the tensors" for n in names) or ["the error raised"]

    for kind, run, places in rerun_rules(banded, first.error, differs, decoded, same):
        i = runs.index(run) + 1
        if kind == "nondeterministic" and only_racy(run):
            continue
        if kind == "nondeterministic":
            diff = seen_of(run) != first.after
            owners = owners_of(case, owner, diff)
            tensor = owners[0] if owners else "-"
            if case.signature(kind, tensor, "rerun") not in said:
                said.add(case.signature(kind, tensor, "rerun"))
                fill = " from the alternate image, not explained by the fill" if run.alt else ""
                report.defect(kind, tensor, "rerun",
                              f"run {i} differs from run 1{fill} ({int(diff.sum())} bytes in "
                              f"{', '.join(owners) or 'the error'}; errors: {first.error!r} vs {run.error!r})")
            continue
        how = ("the value stored decodes as a read of the alternate fill there" if kind == "read_decoded"
               else "the alternate fill there alone changes the run")
        if kind != "read_decoded":  # {"input:where": its first probe run}: the cells say whose elements changed
            places = {tuple(band.split(":")): [(None, {"changed": o}) for o in changed_by(probe)]
                      for band, probe in places.items()}
        for (tensor, where), shown in sorted(places.items()):
            lines = [line for line, _ in shown if line is not None]
            signature = case.signature("out_of_bounds_read", tensor, where)
            if signature not in said:
                said.add(signature)
                report.defect("out_of_bounds_read", tensor, where,
                              f"run {i} (from the alternate image) differs from run 1: the kernel reads {where} "
                              f"{tensor}'s elements ({how})", lines[:MAX_SHOWN], [cell for _, cell in shown])


def run_case(case, call, device, runs=DEFAULT_RUNS):
    """Call the entry point (`call`: its Binding) on fresh arenas as kvfuzz does (`runs` runs,
    then the probe runs where the fill matters: run_schedule, from kvfuzz/rerun_schedule.py;
    stopping at a CUDA fault) and judge them; the Report (defects printed as found)."""
    import torch

    image = host_bytes(case.arena_image, torch.uint8)
    owner = host_bytes(case.owner, torch.uint8)
    assert image.numel() == case.arena_bytes and owner.numel() == case.arena_bytes, "corrupt embedded data"
    alt_image = alternate_image(case, image, owner)
    done = []

    def make(alt, probe, where):
        """One run (kvfuzz's rerun_schedule, from kvfuzz/rerun_schedule.py, decides which)."""
        start = probe_image(case, image, alt_image, owner, probe.split(":")[0], where) if probe else \
            alt_image if alt else image
        run = run_once(case, call, start, device)
        run.alt, run.probe = alt, probe
        done.append(run)
        if len(done) == 1 and run.error is not None:
            print(f"raised: {run.error}")
            if case.status == "in_contract":
                sys.stderr.write(run.detail or "")
        if run.fault is not None:
            sys.stderr.write(run.detail or "")
        return run, run.fault is None

    def fill_matters(first, run):
        return first.after is not None and run.after is not None and (
            run.error != first.error or not torch.equal(as_canary(image, alt_image, run.after), first.after))

    run_schedule(runs, case.inputs, lambda name: bands(case, owner, name), make, fill_matters)
    report = Report(case)
    report.runs = done
    judge_runs(report, case, done, image, owner)
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


def save_run(path, run, defects, variant):
    """A side's first run and the variant it was judged by, for the parent that compares the two
    (cross_check)."""
    import torch

    after = None if run.after is None else run.after.cpu()
    torch.save({"error": run.error, "error_type": run.error_type, "fault": run.fault, "after": after,
                "defects": list(defects), "variant": variant}, path)


def load_run(path):
    import torch

    d = torch.load(path, weights_only=True)
    run = Run(error=d["error"], error_type=d["error_type"], after=d["after"], fault=d["fault"])
    return run, list(d["defects"]), d["variant"]


def cross_check(args, case):
    """Run the case on the primary device (judged as any case, in its own process) and on the
    backend (once, in another process), then compare the two first runs (judge_divergence)."""
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
            sides[side] = load_run(out) if status == 0 else (None, why, None)
    mine, report.defects, variant = sides["primary"]  # the primary's defects, printed by its process
    case.judge_as(variant)  # the variant the primary's process judged the kernel file by
    theirs, lost, _ = sides["backend"]
    import torch

    judge_divergence(report, case, host_bytes(case.owner, torch.uint8), mine, theirs, backend,
                     lost if theirs is None else None)
    return conclude(report, args.json)


def judge_divergence(report, case, owner, mine, theirs, backend, lost=None):
    """kvfuzz.judge's cross-check rules: the primary's first run (`mine`) against the
    backend's (`theirs`; None with `lost` saying why when its process died or hung)."""
    import torch

    kind = "backend_divergence"
    if mine.fault is not None or mine.after is None:
        return  # the primary faulted: a crash already, nothing to compare
    if theirs is None:
        report.defect(kind, "-", "lost", f"ran on the primary device, but the run on {backend} was lost: {lost}")
        return
    if (mine.error is None) != (theirs.error is None):
        who, error = ("the primary device", mine.error) if mine.error else (backend, theirs.error)
        report.defect(kind, "-", "raised", f"raised on {who} only: {error}")
        return
    if mine.error is not None or theirs.after is None:
        return  # both raised: already a crash on an in-contract case
    changed = mine.after != theirs.after
    if not bool(changed.any()):
        return
    regions, by_place = case.regions, {}
    for b in torch.nonzero(changed & (owner == 0)).flatten().tolist():
        by_place.setdefault(region_of_byte(regions, b), []).append(b)
    for (name, where), at in sorted(by_place.items()):
        report.defect(kind, name, where, f"{len(at)} bytes {where} {name}'s elements differ between the primary "
                      f"device and {backend}",
                      [f"arena bytes {a}..{b}: primary {hex_bytes(mine.after, a, b)}, "
                       f"{backend} {hex_bytes(theirs.after, a, b)}" for a, b in byte_runs(at)[:MAX_SHOWN]])
    for i, (name, t) in enumerate(case.tensors.items()):
        if not bool((changed & (owner == i + 1)).any()):
            continue
        got, other = elements(case, mine.after, name), elements(case, theirs.after, name)
        hit = got != other

        def shown(mask):
            return [f"{name}{fmt_index(ix)}: primary {int(got[tuple(ix)])}, {backend} {int(other[tuple(ix)])}"
                    for ix in torch.nonzero(mask)[:MAX_SHOWN].tolist()]

        if t["role"] != "out":
            report.defect(kind, name, "input", f"input {name}: {int(hit.sum())} elements differ between the "
                          f"primary device and {backend}", shown(hit))
            continue
        c, shape = case.cells[name], tuple(t["shape"])  # an in-contract case: every output has its cells
        required = host_bytes(c["required"], torch.uint8).reshape(shape).bool()
        untouched = host_bytes(c["untouched"], torch.uint8).reshape(shape).bool()
        accepted = [host_bytes(b, torch.int64).reshape(shape) for b in c["expected"]]
        may_write = ~(required | untouched)  # the contract's may-write cells: neither required nor untouched
        for where, message, bad in divergence_rules(name, backend, required, may_write, untouched, got, other,
                                                    accepted):
            report.defect(kind, name, where, message, shown(bad))


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
        save_run(args.arena_out, report.runs[0], report.defects, case.variant)
        return 0
    return conclude(report, args.json)


def conclude(report, json_out=None):
    """The last line (FAIL or OK) and the exit status: 1 with defects, else 0 (and, with
    `json_out`, the verdict written there)."""
    rc = _conclude(report)
    if json_out is not None:
        with open(json_out, "w", encoding="utf-8") as f:
            json.dump({"exit": rc, "findings": [{"signature": s, "cells": report.cells.get(s, [])}
                                                for s in report.defects]}, f, indent=1)
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
