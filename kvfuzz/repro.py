"""`kvfuzz replay CASE --emit-repro FILE.py`: one saved case as a standalone script.

The script needs only Python, torch and triton (no NumPy, no kvfuzz), so a kernel author
can run it against their own kernel file:

    python FILE.py PATH/TO/KERNELS.py [--device cpu|cuda]

Everything kvfuzz knows about the case is computed here, at emit time, and embedded as
data: the guarded arena's layout and whole initial image (canaries, poison and input
values; zlib + base64), which byte belongs to which tensor's elements, and, for an
in-contract case, the NumPy oracle's values of every required cell (with every accepted
alternative) plus the cells that must stay untouched. The script rebuilds the arena, calls
the entry point the way SGLang does, reads the arena back and applies the checks of
`kvfuzz.judge`: must-refuse cases must raise; in-contract cases must match on their
required cells and leave their untouched cells alone; no case may change a byte outside
every tensor's elements or an input element. Exit status: 0 clean, 1 defect, 2 usage error.
"""

from __future__ import annotations

import base64
import re
import zlib
from pathlib import Path
from typing import Mapping

import numpy as np

from .case import Case
from .corpus import SavedCase
from .materialize import ALIGN, CANARY_BYTE, NOBODY, plan as make_plan

__all__ = ["write_repro", "render_repro"]

BLOB_LINE = 96  # characters of base64 per source line
MAX_SHOWN = 8  # differing cells / bytes printed per defect


# --------------------------------------------------------------------------- emit-time data


def _blob(data: bytes) -> str:
    """zlib + base64 of `data`, as a parenthesised run of string literals (one per line)."""
    text = base64.b64encode(zlib.compress(bytes(data), 9)).decode("ascii")
    lines = [text[i : i + BLOB_LINE] for i in range(0, len(text), BLOB_LINE)] or [""]
    return "(\n" + "".join(f'    "{line}"\n' for line in lines) + ")"


def _le_bytes(arr: np.ndarray, dtype: str) -> bytes:
    return np.ascontiguousarray(np.asarray(arr), dtype=np.dtype(dtype).newbyteorder("<")).tobytes()


def _docsafe(text: str) -> str:
    """Text that can sit inside a triple-quoted docstring."""
    return text.replace("\\", "\\\\").replace('"""', '\\"\\"\\"')


def _oneline(text: str, limit: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _classify(case: Case) -> tuple[str, list[str]]:
    from .judge import classify

    return classify(case)


def _header(saved: SavedCase, status: str, reasons: list[str], kernel_path: str, entry: str,
            device: str, boundary: str | None) -> str:
    c, f = saved.case, saved.finding
    out = [f"kvfuzz repro: {c.op} case {c.digest()} (contract variant {c.variant!r})", ""]
    if f is not None:
        out += [f"Finding    {f.kind}",
                f"Signature  {f.signature}",
                f"Message    {_oneline(f.message)}"]
    else:
        out += ["Finding    none recorded (a hand-written case that must pass)"]
    v = saved.versions
    found = ", ".join(f"{k} {v[k]}" for k in ("torch", "triton") if k in v)
    ran = f"; ran on {v['gpu']}" if "gpu" in v else ""
    out += [f"Found on   target {saved.target}, device {saved.device} ({found}{ran})",
            f"           origin {saved.origin}, {saved.found_at}, corpus expects {saved.expected}"
            + (f" ({_oneline(saved.reason, 120)})" if saved.reason else ""),
            f"Emitted    by kvfuzz after a replay on {device}",
            f"Entry      {entry} (kernel path {kernel_path!r}), called the way SGLang calls it",
            ""]
    if status == "in_contract":
        out += ["Contract   in contract: every required output cell is compared with kvfuzz's NumPy",
                "           oracle; cells the contract leaves untouched must keep their poison value."]
        if boundary:
            out += [f"           {_oneline(boundary, 200)}"]
    elif status == "must_refuse":
        out += ["Contract   must refuse: the call has to raise before touching anything, because"]
        out += [f"           - {_oneline(r, 200)}" for r in reasons]
    else:
        out += ["Contract   out of contract: the kernel may raise or run, but must not write outside its",
                "           tensors' elements nor change an input. Why it is out of contract:"]
        out += [f"           - {_oneline(r, 200)}" for r in reasons[:6]]
    out += ["", "Scalars    " + (", ".join(f"{k}={val!r}" for k, val in sorted(c.scalars.items())) or "none"),
            "Tensors"]
    for name, spec in sorted(c.tensors.items()):
        role = "in " if name in c.values else "out"
        out.append(f"  {role} {name}: {spec.describe()}")
    out += [
        "",
        "Run",
        "  python THIS_FILE.py PATH/TO/KERNELS.py [--device cpu|cuda] [--in-process]",
        "",
        "A child process calls the kernel (a kernel that kills its process is a crash defect);",
        "--in-process calls it in this one, for a debugger.",
        "The kernel file is loaded by path (relative imports of sibling files work); SGLang's",
        "SWAKVPool is stubbed when sglang cannot be imported. The default device is cuda when torch",
        "sees one, else cpu under Triton's interpreter (TRITON_INTERPRET=1, set before triton is",
        "imported). Every tensor is a strided view into one uint8 arena; bytes outside every",
        "tensor's elements hold the canary 0xA5, outputs start as poison (0xDEADBEEF...).",
        "",
        "Exit status: 0 clean (prints 'OK: ...'), 1 a defect shows (prints 'DEFECT <kind>: ...'),",
        "2 usage error (bad arguments, missing or unloadable kernel file, no such entry point).",
        "Needs only Python 3.9+, torch and triton.",
    ]
    return _docsafe("\n".join(out))


def render_repro(saved: SavedCase, device: str = "cpu") -> str:
    """The standalone script's source for `saved`."""
    from .ops import CONTRACTS

    case = saved.case
    contract = CONTRACTS[case.op]
    p = make_plan(case, contract.outputs)
    status, reasons = _classify(case)
    kernel_path = contract.kernel_path(case)

    tensors = []
    for name in p.names:
        r = p.regions[name]
        s = r.spec
        role = "out" if name in contract.outputs else "in"
        tensors.append(
            f"    {name!r}: dict(role={role!r}, dtype={s.dtype!r}, shape={tuple(s.shape)!r}, "
            f"strides={tuple(s.strides)!r}, offset={s.offset}, start={r.start}, nbytes={r.nbytes}, "
            f"guard={r.guard}),")
    owner = np.where(p.owner == NOBODY, 0, p.owner.astype(np.int64) + 1)
    if len(p.names) > 254:  # pragma: no cover - ops have < 10 tensors
        raise ValueError("too many tensors for a uint8 owner map")

    cells_src, boundary = "{}", None
    if status == "in_contract":
        expected = contract.numpy_ref(case)
        boundary = expected.boundary
        cells = contract.cells(case)
        parts = []
        for name in contract.outputs:
            if name not in p.regions or name not in cells:
                continue
            c = cells[name]
            main = np.asarray(expected.values[name], dtype=np.int64)
            alts = [main] + [np.asarray(a.get(name, main), dtype=np.int64) for a in expected.alternatives]
            uniq: list[np.ndarray] = []
            for a in alts:
                if not any(np.array_equal(a[c.required], u[c.required]) for u in uniq):
                    uniq.append(a)
            parts.append(_cells_entry(name, c.required, c.untouched, uniq))
        cells_src = "{\n" + "\n".join(parts) + "\n}" if parts else "{}"

    f = saved.finding
    runs = 2 if f is not None and f.kind == "nondeterministic" else 1
    subs = {
        "@@HEADER@@": _header(saved, status, reasons, kernel_path, contract.entry, device, boundary),
        "@@OP@@": repr(case.op),
        "@@ENTRY@@": repr(contract.entry),
        "@@KERNEL_PATH@@": repr(kernel_path),
        "@@VARIANT@@": repr(case.variant),
        "@@DIGEST@@": repr(case.digest()),
        "@@STATUS@@": repr(status),
        "@@REASONS@@": _pylist([_oneline(r) for r in reasons]),
        "@@REFUSE_WHERE@@": repr(reasons[0].split()[0] if status == "must_refuse" and reasons else "-"),
        "@@SAVED_SIGNATURE@@": repr(f.signature if f is not None else None),
        "@@RUNS@@": str(runs),
        "@@SCALARS@@": repr(dict(sorted(case.scalars.items()))),
        "@@TENSORS@@": "{\n" + "\n".join(tensors) + "\n}",
        "@@ARENA_BYTES@@": str(int(p.image.size)),
        "@@CANARY@@": f"0x{CANARY_BYTE:02X}",
        "@@ALIGN@@": str(ALIGN),
        "@@MAX_SHOWN@@": str(MAX_SHOWN),
        "@@CALL@@": _CALLS[case.op].strip("\n"),
        "@@ARENA_IMAGE@@": _blob(p.image.tobytes()),
        "@@OWNER@@": _blob(owner.astype(np.uint8).tobytes()),
        "@@CELLS@@": cells_src,
    }
    # one pass, so that text substituted in (a finding's message) is never substituted again
    return re.sub(r"@@[A-Z_]+@@", lambda m: subs[m.group(0)], _TEMPLATE)


def _indent(text: str, n: int) -> str:
    return text.replace("\n", "\n" + " " * n)


def _cells_entry(name: str, required: np.ndarray, untouched: np.ndarray, accepted: list[np.ndarray]) -> str:
    """One output's entry of the script's CELLS, with the expected values spelled out in a
    comment when there are few."""
    n_req = int(required.sum())
    out = [f"    {name!r}: dict(",
           f"        # {n_req} required cells, {int(untouched.sum())} that must stay untouched"]
    if 0 < n_req <= 32:
        cells = " ".join(f"[{', '.join(str(int(i)) for i in ix)}]={int(accepted[0][tuple(ix)])}"
                         for ix in np.argwhere(required))
        out += [f"        # expected: {line}" for line in _wrap(cells, 84)]
    if len(accepted) > 1:
        out.append(f"        # {len(accepted) - 1} alternative answer(s) accepted too: a float32 rounding boundary")
    out += [f"        required={_indent(_blob(_le_bytes(required, 'uint8')), 8)},",
            f"        untouched={_indent(_blob(_le_bytes(untouched, 'uint8')), 8)},",
            "        expected=["]
    out += [f"            {_indent(_blob(_le_bytes(a, 'int64')), 12)}," for a in accepted]
    out += ["        ],", "    ),"]
    return "\n".join(out)


def _wrap(text: str, width: int) -> list[str]:
    lines, cur = [], ""
    for word in text.split(" "):
        if cur and len(cur) + 1 + len(word) > width:
            lines.append(cur)
            cur = word
        else:
            cur = f"{cur} {word}" if cur else word
    return lines + [cur] if cur else lines


def _pylist(items: list[str]) -> str:
    if not items:
        return "[]"
    return "[\n" + "".join(f"    {x!r},\n" for x in items) + "]"


def write_repro(saved: SavedCase, path: Path, device: str) -> None:
    """Write the standalone repro script for `saved` to `path` (device: where kvfuzz replayed it)."""
    path = Path(path)
    src = render_repro(saved, device)
    compile(src, str(path), "exec")  # a template bug must fail here, not in a kernel author's hands
    if path.parent and not path.parent.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(src, encoding="utf-8")
    try:
        path.chmod(0o755)
    except OSError:  # pragma: no cover - read-only or foreign filesystems
        pass


# --------------------------------------------------------------------------- the calls
# Copies of kvfuzz/targets/calls.py, one per op; only the case's op goes into a script.

_CALLS: Mapping[str, str] = {
    "decode_metadata": '''
def call(entry, t, s):
    """normal_decode_set_metadata as SGLang's flashattention backend calls it; with SWA the
    pool is an SWAKVPool built without its constructor, holding only the token mapping."""
    swa = "swa_page_table" in t and "full_to_swa_index_mapping" in t
    pool = None
    if swa:
        cls = swa_pool_type()
        pool = cls.__new__(cls)
        pool.full_to_swa_index_mapping = t["full_to_swa_index_mapping"]
    entry(
        t["cache_seqlens_int32"], t["cu_seqlens_k"], t["page_table"], t["req_to_token"],
        t["req_pool_indices"], t["strided_indices"], s["max_seq_pages"], t["seq_lens"],
        s["seq_len_delta"], s["page_size"],
        swa_page_table=t["swa_page_table"] if swa else None,
        token_to_kv_pool=pool,
    )
''',
    "swa_spec_page_table": '''
def call(entry, t, s):
    """prepare_swa_spec_page_table_triton as SGLang's speculative-verify path calls it."""
    entry(t["page_table_dst"], t["page_table_a"], t["page_table_b"], t["seq_len_a"], t["seq_len_b"],
          s["speculative_num_draft_tokens"])
''',
    "num_kv_splits": '''
def sglang_max_num_seq(num_seq):
    """SGLang's MAX_NUM_SEQ: 256 below 256 sequences, else the next power of two."""
    return 256 if num_seq < 256 else 1 << (num_seq - 1).bit_length()


def call(entry, t, s):
    """get_num_kv_splits_triton: a bare @triton.jit kernel is launched on grid (1,) as SGLang's
    triton backend does; a plain Python function is called with the same arguments."""
    from triton.runtime.jit import KernelInterface

    args = (t["num_kv_splits"], t["seq_lens"], s["num_seq"], s["num_group"], s["num_head"],
            s["num_kv_head"], s["max_kv_splits"], s["device_core_count"])
    if isinstance(entry, KernelInterface):
        entry[(1,)](*args, MAX_NUM_SEQ=sglang_max_num_seq(s["num_seq"]))
    else:
        entry(*args)
''',
}


# --------------------------------------------------------------------------- the script

_TEMPLATE = r'''#!/usr/bin/env python3
"""@@HEADER@@
"""

import argparse
import base64
import faulthandler
import importlib
import importlib.util
import os
import signal
import subprocess
import sys
import traceback
import types
import zlib

# ---------------------------------------------------------------------------- the case

OP = @@OP@@
ENTRY = @@ENTRY@@  # the function (or @triton.jit kernel) the kernel file must define
KERNEL_PATH = @@KERNEL_PATH@@  # which kernel behind the entry point this case takes (kvfuzz's name)
VARIANT = @@VARIANT@@
CASE_DIGEST = @@DIGEST@@
STATUS = @@STATUS@@  # in_contract | out_of_contract | must_refuse
REASONS = @@REASONS@@  # why the case is out of contract / must be refused
REFUSE_WHERE = @@REFUSE_WHERE@@
SAVED_SIGNATURE = @@SAVED_SIGNATURE@@  # the finding kvfuzz recorded for this case
RUNS = @@RUNS@@  # calls on fresh arenas; more than one also checks that runs agree
SCALARS = @@SCALARS@@

# Every tensor is a view into one uint8 arena: its storage starts at byte `start` and spans
# `nbytes`; `guard` canary bytes sit before it (and after it, past alignment slack). shape,
# strides and offset are in elements, as torch's as_strided takes them.
TENSORS = @@TENSORS@@
ARENA_BYTES = @@ARENA_BYTES@@
CANARY_BYTE = @@CANARY@@
ALIGN = @@ALIGN@@
MAX_SHOWN = @@MAX_SHOWN@@
SWA_POOL_MODULE = "sglang.srt.mem_cache.swa_memory_pool"


# ---------------------------------------------------------------------------- arguments


class UsageError(Exception):
    """Exit status 2, one line on stderr."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(message)


def parse_args(argv):
    ap = _Parser(description=f"Reproduce kvfuzz case {CASE_DIGEST} ({OP}) against a kernel file.")
    ap.add_argument("kernels", help=f"the Python file that defines {ENTRY}")
    ap.add_argument("--device", choices=("cpu", "cuda"), default=None,
                    help="cuda (compiled) or cpu (Triton interpreter); default: cuda if available")
    ap.add_argument("--runs", type=int, default=RUNS, help=f"calls on fresh arenas (default {RUNS})")
    ap.add_argument("--timeout", type=float, default=600.0,
                    help="seconds the child process may take before it counts as hung (default 600)")
    ap.add_argument("--in-process", action="store_true",
                    help="call the kernel in this process (for a debugger); by default a child process "
                         "calls it, so that a kernel that kills its process is reported too")
    args = ap.parse_args(argv)
    if args.runs < 1:
        raise UsageError("--runs must be >= 1")
    return args


def supervise(argv, timeout):
    """Run this script again with --in-process and pass its exit status on; a child killed by
    a signal (a wild memory access under Triton's interpreter) or hung is a crash defect."""
    sys.stdout.flush()
    cmd = [sys.executable, os.path.abspath(__file__), *argv, "--in-process"]
    child = subprocess.Popen(cmd)
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
        if rc >= 0:
            return rc
        try:
            where = signal.Signals(-rc).name
        except ValueError:
            where = f"signal{-rc}"
        why = f"killed by {where} (under Triton's interpreter a stray access touches host memory directly)"
    report = Report()
    report.defect("crash", "-", where, f"the process calling the kernel died: {why}")
    print("FAIL: 1 defect(s).")
    return 1


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
                         f"{getattr(numpy, '__version__', '?')} ({type(exc).__name__}: {_first_line(exc)}); "
                         "use numpy<2.4 with triton 3.6, or --device cuda") from None
    if out.tolist() != [1, 2]:
        raise UsageError(f"Triton {triton.__version__}'s interpreter computed {out.tolist()} for [1, 2]: "
                         "it cannot be trusted here")


# ---------------------------------------------------------------------------- loading
# (kvfuzz/targets/sglang_shim.py and targets/__init__.py do this inside kvfuzz; a repro script
# must run without kvfuzz installed, so it carries its own copy)


class SWAKVPool:
    """Stand-in for sglang.srt.mem_cache.swa_memory_pool.SWAKVPool (the kernels read only
    .full_to_swa_index_mapping and check isinstance)."""

    full_to_swa_index_mapping = None


def swa_pool_type():
    """The real SWAKVPool when sglang imports; else install a stand-in module tree so that
    `from sglang.srt.mem_cache.swa_memory_pool import SWAKVPool` finds ours."""
    try:
        return importlib.import_module(SWA_POOL_MODULE).SWAKVPool
    except Exception:  # not installed, or installed without its heavy dependencies
        pass
    parts = SWA_POOL_MODULE.split(".")
    for i in range(1, len(parts) + 1):
        name = ".".join(parts[:i])
        mod = sys.modules.get(name)
        if mod is None or i == len(parts):
            mod = types.ModuleType(name, "kvfuzz repro stand-in")
            mod.__path__ = []  # a package, so submodules resolve
            sys.modules[name] = mod
        if i > 1:
            setattr(sys.modules[".".join(parts[: i - 1])], parts[i - 1], mod)
    sys.modules[SWA_POOL_MODULE].SWAKVPool = SWAKVPool
    return SWAKVPool


def check_kernel_file(path):
    if not os.path.exists(path):
        raise UsageError(f"kernel file {path!r} does not exist")
    if not os.path.isfile(path):
        raise UsageError(f"kernel file {path!r} is not a file")


def load_kernels(path):
    """Import the kernel file by path, as a member of a stand-in package for its directory
    (so `from .sibling import x` works); UsageError if it cannot be loaded."""
    check_kernel_file(path)
    path = os.path.abspath(path)
    directory, filename = os.path.split(path)
    package = "_kvfuzz_repro_kernels"
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
        raise UsageError(f"loading {path!r} failed: {type(exc).__name__}: {_first_line(exc)}") from None
    entry = getattr(module, ENTRY, None)
    if entry is None:
        raise UsageError(f"{path!r} defines no {ENTRY}")
    return entry


def _first_line(exc):
    text = str(exc).strip()
    return text.splitlines()[0] if text else ""


# ---------------------------------------------------------------------------- the call

@@CALL@@


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


def views_of(arena):
    """A strided view per tensor into `arena` (any device), as kvfuzz materialises them."""
    import torch

    views = {}
    for name, t in TENSORS.items():
        base = arena[t["start"] : t["start"] + t["nbytes"]].view(getattr(torch, t["dtype"]))
        views[name] = base.as_strided(t["shape"], t["strides"], base.storage_offset() + t["offset"])
    return views


def elements(arena_host, name):
    """A tensor's logical values (int64 copy) read from a host arena."""
    import torch

    return views_of(arena_host)[name].to(torch.int64)


def run_once(entry, image, device):
    """(error, traceback text, arena bytes after the call or None if unreadable)."""
    import torch

    arena = image.clone().to(device)
    views = views_of(arena)
    error = detail = None
    try:
        call(entry, views, SCALARS)
        if device == "cuda":
            torch.cuda.synchronize()
    except Exception as exc:
        error = f"{type(exc).__name__}: {_first_line(exc)}"[:300]
        detail = traceback.format_exc()
        if device == "cuda":
            try:
                torch.cuda.synchronize()
            except Exception:
                pass
    try:
        after = arena.cpu()
    except Exception as exc:
        return error, detail, None, f"{type(exc).__name__}: {_first_line(exc)}"
    return error, detail, after, None


# ---------------------------------------------------------------------------- checks


class Report:
    def __init__(self):
        self.defects = []

    def defect(self, kind, tensor, where, message, lines=()):
        signature = f"{OP}:{KERNEL_PATH}:{kind}:{tensor}:{where}"
        self.defects.append(signature)
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


def check_memory(report, image, owner, after):
    """Bytes outside every tensor's elements, and input elements, must not change."""
    import torch

    changed = after != image
    stray = changed & (owner == 0)
    if bool(stray.any()):
        claimed = torch.zeros_like(stray)
        for name, t in TENSORS.items():
            s, n, g = t["start"], t["nbytes"], t["guard"]
            for where, lo, hi in (("before", s - g, s), ("gap", s, s + n), ("after", s + n, s + n + g + ALIGN)):
                lo, hi = max(lo, 0), min(hi, ARENA_BYTES)
                if lo >= hi:
                    continue
                hit = stray[lo:hi] & ~claimed[lo:hi]
                claimed[lo:hi] |= hit
                if not bool(hit.any()):
                    continue
                at = (torch.nonzero(hit).flatten() + lo).tolist()
                shown = [f"bytes {a - s:+d}..{b - s:+d} from {name}'s storage start "
                         f"(its storage is {n} bytes): canary 0x{CANARY_BYTE:02x} -> {hex_bytes(after, a, b)}"
                         for a, b in byte_runs(at)[:MAX_SHOWN]]
                report.defect("out_of_bounds_write", name, where,
                              f"{len(at)} bytes {where} {name}'s elements changed "
                              f"(outside every tensor's elements)", shown)
        rest = stray & ~claimed
        if bool(rest.any()):
            at = torch.nonzero(rest).flatten()
            report.defect("out_of_bounds_write", "-", "outside",
                          f"{len(at)} arena bytes outside every tensor changed",
                          [f"arena bytes {a}..{b}: canary 0x{CANARY_BYTE:02x} -> {hex_bytes(after, a, b)}"
                           for a, b in byte_runs(at.tolist())[:MAX_SHOWN]])
    for i, (name, t) in enumerate(TENSORS.items()):
        if t["role"] != "in":
            continue
        hit = changed & (owner == i + 1)
        if bool(hit.any()):
            got, before = elements(after, name), elements(image, name)
            diff = torch.nonzero(got != before)
            shown = [f"{name}{fmt_index(ix)}: was {int(before[tuple(ix)])}, now {int(got[tuple(ix)])}"
                     for ix in diff[:MAX_SHOWN].tolist()]
            report.defect("input_modified", name, "elements",
                          f"input {name} changed ({int(hit.sum())} bytes, {len(diff)} elements)", shown)


def check_outputs(report, image, after):
    """In-contract case: required cells equal the oracle (or an accepted alternative); the
    cells the contract leaves untouched keep their value."""
    import torch

    for name, c in CELLS.items():
        t = TENSORS[name]
        got, before = elements(after, name), elements(image, name)
        shape = tuple(t["shape"])
        required = host_bytes(c["required"], torch.uint8).reshape(shape).bool()
        untouched = host_bytes(c["untouched"], torch.uint8).reshape(shape).bool()
        accepted = [host_bytes(b, torch.int64).reshape(shape) for b in c["expected"]]
        want = accepted[0]
        if not any(torch.equal(got[required], a[required]) for a in accepted):
            bad = required & (got != want)
            lost = bad & (got == before)
            n_bad, n_req = int(bad.sum()), int(required.sum())
            note = f" ({int(lost.sum())} never written)" if bool(lost.any()) else ""
            shown = []
            for ix in torch.nonzero(bad)[:MAX_SHOWN].tolist():
                ix = tuple(ix)
                alts = sorted({int(a[ix]) for a in accepted[1:]} - {int(want[ix])})
                also = f" (or {', '.join(map(str, alts))})" if alts else ""
                poison = "  [never written: still poison]" if int(got[ix]) == int(before[ix]) else ""
                shown.append(f"{name}{fmt_index(ix)}: expected {int(want[ix])}{also}, got {int(got[ix])}{poison}")
            report.defect("mismatch", name, "all" if n_bad == n_req else "partial",
                          f"{name}: {n_bad} of {n_req} required cells differ{note}", shown)
        hit = untouched & (got != before)
        if bool(hit.any()):
            shown = [f"{name}{fmt_index(ix)}: must stay {int(before[tuple(ix)])}, now {int(got[tuple(ix)])}"
                     for ix in torch.nonzero(hit)[:MAX_SHOWN].tolist()]
            report.defect("untouched_write", name, "cells",
                          f"{name}: {int(hit.sum())} cells the contract leaves untouched changed", shown)


def check_unchanged_outputs(report, image, after, error):
    """A refused must-refuse case must have raised before writing anything."""
    import torch

    for name, t in TENSORS.items():
        if t["role"] != "out":
            continue
        got, before = elements(after, name), elements(image, name)
        hit = got != before
        if bool(hit.any()):
            shown = [f"{name}{fmt_index(ix)}: was {int(before[tuple(ix)])}, now {int(got[tuple(ix)])}"
                     for ix in torch.nonzero(hit)[:MAX_SHOWN].tolist()]
            report.defect("untouched_write", name, "after_error",
                          f"{name}: {int(hit.sum())} cells changed although the call raised {error}", shown)


# ---------------------------------------------------------------------------- main


def main(argv):
    try:
        args = parse_args(argv)
        check_kernel_file(args.kernels)  # before importing torch: a typo answers at once
        if not args.in_process:
            return supervise(argv, args.timeout)
        faulthandler.enable()  # a segfault prints where it happened
        device = select_device(args.device)
        swa_pool_type()  # before the kernel file runs: its SWA path imports the type
        entry = load_kernels(args.kernels)
    except UsageError as exc:
        print(f"repro: error: {exc}", file=sys.stderr)
        return 2

    import torch

    image = host_bytes(ARENA_IMAGE, torch.uint8)
    owner = host_bytes(OWNER, torch.uint8)
    assert image.numel() == ARENA_BYTES and owner.numel() == ARENA_BYTES, "corrupt embedded data"
    print(f"repro: {OP} case {CASE_DIGEST} [{VARIANT}] ({STATUS.replace('_', ' ')}) -> {ENTRY} "
          f"from {args.kernels} on {device}" + (" (triton interpreter)" if device == "cpu" else ""))

    report = Report()
    first = None
    for run in range(args.runs):
        error, detail, after, lost = run_once(entry, image, device)
        if run == 0:
            first = (error, after)
            if error is not None:
                print(f"raised: {error}")
            if STATUS == "must_refuse" and error is None:
                report.defect("invalid_accepted", "-", REFUSE_WHERE, f"ran a case it must refuse: {REASONS[0]}")
            if STATUS == "in_contract" and error is not None:
                report.defect("crash", "-", error.split(":")[0], f"raised on an in-contract case: {error}")
                sys.stderr.write(detail or "")
            if lost is not None:
                report.defect("crash", "-", "device", f"the arena cannot be read back after the call: {lost}")
                break
            check_memory(report, image, owner, after)
            if STATUS == "in_contract" and error is None:
                check_outputs(report, image, after)
            if STATUS == "must_refuse" and error is not None:
                check_unchanged_outputs(report, image, after, error.split(":")[0])
        elif after is not None and first[1] is not None:
            if error != first[0] or not torch.equal(after, first[1]):
                n = int((after != first[1]).sum())
                report.defect("nondeterministic", "-", "rerun",
                              f"run {run + 1} differs from run 1 ({n} bytes; errors: {first[0]!r} vs {error!r})")

    if report.defects:
        again = ""
        if SAVED_SIGNATURE is not None:
            again = (" The saved finding reproduces." if SAVED_SIGNATURE in report.defects
                     else f" (kvfuzz saved {SAVED_SIGNATURE}.)")
        print(f"FAIL: {len(report.defects)} defect(s).{again}")
        return 1
    checked = {"in_contract": "required cells match the oracle, untouched cells kept",
               "must_refuse": "refused as it must",
               "out_of_contract": "no write outside the tensors"}[STATUS]
    print(f"OK: {OP} case {CASE_DIGEST}: {checked}; no byte outside the tensors' elements and no input changed.")
    return 0


# ---------------------------------------------------------------------------- data
# zlib-compressed, base64-encoded little-endian bytes.

# The arena before the call: canaries, input values, output poison.
ARENA_IMAGE = @@ARENA_IMAGE@@

# One byte per arena byte: 0 = no tensor's element (must keep the canary); k = an element
# of the k-th tensor in TENSORS.
OWNER = @@OWNER@@

# In-contract cases only, per output: masks of the required and the must-stay-untouched cells
# (uint8, the output's logical shape, row-major) and the accepted values (int64).
CELLS = @@CELLS@@


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
'''
