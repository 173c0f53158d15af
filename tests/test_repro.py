"""`kvfuzz replay --emit-repro`: the standalone script must reproduce a defect on its own.

Each test builds a case, lets kvfuzz judge it on the seed (on the test session's device) to be
sure the case shows the defect, emits the repro script, and runs that script in a fresh
process where kvfuzz is not importable: against the seed it must exit 1 and say DEFECT,
against a correct kernel file 0. A few tiny hand-written "kernel files" (plain torch, no
Triton) exercise the script's other checks quickly.
"""

from __future__ import annotations

import ast
import dataclasses
import atexit
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import numpy as np
import pytest

import kvfuzz.device
from conftest import DEVICE as CONFTEST_DEVICE
from conftest import seed_kernel_path
from kvfuzz.errors import BadInput
from kvfuzz.ops import records

REPO = Path(__file__).resolve().parents[1]
KERNELS = REPO / "kvfuzz" / "kernels"
SCRIPT_IMPORTS = {"__future__", "argparse", "base64", "dataclasses", "faulthandler", "importlib", "importlib.util",
                  "inspect", "json", "os", "re", "signal", "subprocess", "sys", "tempfile", "traceback", "types",
                  "typing", "zlib", "torch", "triton", "triton.language", "triton.runtime.jit"}
# kvfuzz's modules that the full script embeds and kvfuzz runs itself: the judge (judge_flow) and
# the rules, fills, places, signatures and schedules it stands on
SHARED_WITH_KVFUZZ = ("kvfuzz.judge_flow", "kvfuzz.rules", "kvfuzz.places", "kvfuzz.fills", "kvfuzz.findings",
                      "kvfuzz.faults", "kvfuzz.rerun_schedule", "kvfuzz.variant_choice")

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


SEED = seed_kernel_path()
# Where the emitted scripts run their kernels: where kvfuzz judges (conftest's choice), unless
# KVFUZZ_REPRO_DEVICE says otherwise.
DEVICE = os.environ.get("KVFUZZ_REPRO_DEVICE") or CONFTEST_DEVICE
needs_seed = pytest.mark.skipif(SEED is None, reason="seed metadata_kernels.py not found (set KVFUZZ_SEED_PATH)")


# --------------------------------------------------------------------------- helpers


@pytest.fixture(scope="module")
def kv():
    """kvfuzz, judging on the device conftest selected (else the CPU under Triton's interpreter)."""
    dev = kvfuzz.device.selected() or kvfuzz.device.select("cpu")
    from kvfuzz import execute, judge, targets
    from kvfuzz.case import Case, TensorSpec
    from kvfuzz.corpus import SavedCase, environment_versions
    from kvfuzz.repro import write_repro

    class KV:
        pass

    k = KV()
    k.device = dev
    k.Case, k.TensorSpec, k.SavedCase, k.write_repro = Case, TensorSpec, SavedCase, write_repro

    def verdict(case, target=SEED):
        t = targets.load_target(str(target), dev)
        return judge.judge(case, execute.run_case(t, case, dev, torch_ref=False))

    def saved(case, finding=None):
        return SavedCase(case=case, finding=finding, target=str(SEED or "builtin"), device=dev,
                         versions=environment_versions(), origin="hand")

    k.verdict, k.saved = verdict, saved
    return k


def emit(kv, tmp_path: Path, saved, name="repro.py") -> Path:
    path = tmp_path / name
    kv.write_repro(saved, path, device=kv.device)
    return path


def without_kvfuzz() -> dict[str, str]:
    """An environment in which `import kvfuzz` fails, editable install or not: PYTHONPATH is
    only a folder whose `kvfuzz` package raises ImportError. TRITON_INTERPRET is unset."""
    global _BLOCKED
    if _BLOCKED is None:
        _BLOCKED = Path(tempfile.mkdtemp(prefix="kvfuzz-blocked-"))
        atexit.register(shutil.rmtree, _BLOCKED, True)
        (_BLOCKED / "kvfuzz").mkdir()
        (_BLOCKED / "kvfuzz" / "__init__.py").write_text(f'raise ImportError("{BLOCKED_SAYS}")\n')
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TRITON_INTERPRET")}
    return env | {"PYTHONPATH": str(_BLOCKED)}


_BLOCKED: Path | None = None
BLOCKED_SAYS = "a repro script must not import kvfuzz"


def _start(script: Path, kernels, *extra: str) -> subprocess.Popen:
    """The script in a fresh process where kvfuzz cannot be imported (without_kvfuzz; the
    working directory and sys.path[0] are the script's temporary directory)."""
    env = without_kvfuzz()
    args = [sys.executable, str(script), str(kernels), *extra]
    return subprocess.Popen(args, env=env, cwd=str(script.parent), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _finish(proc: subprocess.Popen) -> subprocess.CompletedProcess:
    try:
        out, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def run_script(script: Path, kernels, *extra: str) -> subprocess.CompletedProcess:
    return _finish(_start(script, kernels, *extra))


def run_many(*runs: tuple) -> list[subprocess.CompletedProcess]:
    """Several (script, kernels, *extra) runs at once: each pays torch's import time."""
    procs = [_start(*r) for r in runs]
    return [_finish(p) for p in procs]


def show(r: subprocess.CompletedProcess) -> str:
    return f"exit {r.returncode}\n--- stdout\n{r.stdout}\n--- stderr\n{r.stderr[-3000:]}"


def c(kv, shape, dtype="int32"):
    return kv.TensorSpec.contiguous(dtype, tuple(shape))


# --------------------------------------------------------------------------- cases


def decode_swa_transposed(kv, page_size=16, B=3, P=3, W=4):
    """The seed's known decode defect: a non-contiguous swa_page_table is written through a
    `.contiguous()` copy, so the caller's view never sees the SWA pages."""
    rng = np.random.default_rng(7)
    T, rows, N = P * page_size, B + 1, 512
    tensors = dict(
        cache_seqlens_int32=c(kv, (B,)),
        cu_seqlens_k=c(kv, (B + 1,)),
        page_table=c(kv, (B, W)),
        req_to_token=c(kv, (rows, T)),
        req_pool_indices=c(kv, (B,)),
        strided_indices=c(kv, (P,), "int64"),
        seq_lens=c(kv, (B,)),
        swa_page_table=kv.TensorSpec("int32", (B, W), (1, B), 0),  # transposed
        full_to_swa_index_mapping=c(kv, (N,)),
    )
    values = dict(
        req_to_token=rng.integers(0, N, (rows, T)),
        req_pool_indices=rng.permutation(rows)[:B],
        strided_indices=np.arange(P) * page_size,
        seq_lens=rng.integers((P - 1) * page_size + 1, P * page_size + 1, B),
        full_to_swa_index_mapping=rng.permutation(N),
    )
    scalars = dict(max_seq_pages=P, seq_len_delta=0, page_size=page_size)
    return kv.Case("decode_metadata", scalars, tensors, values)


def spec_overflow(kv, over=3):
    """swa_spec_page_table with the last row's la + lb larger than dst's width (out of contract)."""
    bs, R, W, WA, WB = 2, 2, 8, 8, 8
    M = bs * R
    la = np.array([5, 6])
    lb = np.array([1, 2, 0, W - 6 + over])  # last row: la + lb = W + over, lb <= WB
    tensors = dict(
        page_table_dst=c(kv, (M, W)),
        page_table_a=c(kv, (bs, WA)),
        page_table_b=c(kv, (M, WB)),
        seq_len_a=c(kv, (bs,)),
        seq_len_b=c(kv, (M,)),
    )
    values = dict(page_table_a=np.arange(bs * WA).reshape(bs, WA) + 100,
                  page_table_b=np.arange(M * WB).reshape(M, WB) + 200, seq_len_a=la, seq_len_b=lb)
    return kv.Case("swa_spec_page_table", dict(speculative_num_draft_tokens=R), tensors, values)


def splits_zero_length(kv, lens=(0, 1, 9), heads=32):
    """A zero length: kvfuzz's default variant takes the statistics over lengths >= 1; the
    seed divides by min(seq_lens) = 0. With many heads the per-length chunk decides."""
    n = len(lens)
    tensors = dict(num_kv_splits=c(kv, (n,)), seq_lens=c(kv, (n,)))
    scalars = dict(num_seq=n, num_group=1, num_head=heads, num_kv_head=heads, max_kv_splits=8, device_core_count=132)
    return kv.Case("num_kv_splits", scalars, tensors, dict(seq_lens=np.array(lens)))


# --------------------------------------------------------------------------- against the seed


@needs_seed
def test_decode_swa_noncontiguous(kv, tmp_path):
    case = decode_swa_transposed(kv)
    v = kv.verdict(case)
    assert v.status == "in_contract"
    assert "decode_metadata:swa:mismatch:swa_page_table:all" in v.signatures()
    script = emit(kv, tmp_path, kv.saved(case, v.findings[0]))
    src = script.read_text()
    assert "decode_metadata:swa:mismatch:swa_page_table:all" in src.split('"""')[1]  # in the header

    r, ok = run_many((script, SEED, "--device", DEVICE), (script, KERNELS / "decode_metadata.py", "--device", DEVICE))
    assert r.returncode == 1, show(r)
    assert "DEFECT mismatch" in r.stdout and "swa_page_table[" in r.stdout, show(r)
    assert "decode_metadata:swa:mismatch:swa_page_table:all" in r.stdout, show(r)
    assert "expected" in r.stdout and "got -559038737" in r.stdout, show(r)  # poison: never written

    assert ok.returncode == 0, show(ok)
    assert ok.stdout.splitlines()[-1].startswith("OK:"), show(ok)


@needs_seed
def test_spec_out_of_bounds_write(kv, tmp_path):
    case = spec_overflow(kv)
    v = kv.verdict(case)
    assert v.status == "out_of_contract" and v.reasons == ["row 3: la + lb = 11 > page_table_dst width 8"]
    assert any(s.startswith("swa_spec_page_table:spec:out_of_bounds_write:page_table_dst") for s in v.signatures())
    script = emit(kv, tmp_path, kv.saved(case, v.findings[0]))

    # kvfuzz's own kernel imports a sibling module relatively: the script loads it as a package member
    r, ok = run_many((script, SEED, "--device", DEVICE),
                     (script, KERNELS / "swa_spec_page_table.py", "--device", DEVICE))
    assert r.returncode == 1, show(r)
    assert "DEFECT out_of_bounds_write" in r.stdout and "after page_table_dst" in r.stdout, show(r)
    assert "12 bytes after page_table_dst" in r.stdout, show(r)  # 3 int32 cells past the end
    assert "bytes +128..+135 from page_table_dst's storage start" in r.stdout, show(r)  # the first 8 (MAX_CELLS)

    assert ok.returncode == 0, show(ok)
    assert "OK:" in ok.stdout, show(ok)


@needs_seed
def test_num_kv_splits_zero_length(kv, tmp_path):
    case = splits_zero_length(kv)
    v = kv.verdict(case)
    assert v.status == "in_contract"
    if kv.device == "cpu":  # a division by zero: what a GPU gives is up to the GPU
        assert v.failed, v.signatures()
    script = emit(kv, tmp_path, kv.saved(case, v.findings[0] if v.findings else None))
    assert '"MAX_NUM_SEQ": _max_num_seq' in script.read_text()  # launched with SGLang's MAX_NUM_SEQ rule

    r, ok = run_many((script, SEED, "--device", DEVICE), (script, KERNELS / "num_kv_splits.py", "--device", DEVICE))
    if DEVICE == kv.device:  # the script agrees with kvfuzz's verdict, whatever this device gives
        assert r.returncode == (1 if v.failed else 0), show(r)
    if r.returncode:
        assert "DEFECT mismatch: num_kv_splits" in r.stdout, show(r)
    assert ok.returncode == 0, show(ok)
    assert "OK:" in ok.stdout, show(ok)


def test_num_kv_splits_uneven_batch(kv, tmp_path):
    """SGLang 0.5.23's optional flag output: passed as uneven_batch_ptr; a kernel file whose
    kernel has no such parameter (the seed) cannot run the case: a usage error, not a defect."""
    tensors = dict(num_kv_splits=c(kv, (3,)), seq_lens=c(kv, (3,)), uneven_batch=c(kv, (1,)))
    scalars = dict(num_seq=3, num_group=1, num_head=32, num_kv_head=8, max_kv_splits=8, device_core_count=132)
    case = kv.Case("num_kv_splits", scalars, tensors, dict(seq_lens=np.array([100, 80, 90])))
    assert kv.verdict(case, "builtin").findings == []
    script = emit(kv, tmp_path, kv.saved(case))
    runs = [(script, KERNELS / "num_kv_splits.py", "--device", DEVICE)]
    if SEED:
        runs.append((script, SEED, "--device", DEVICE))
    ok, *old = run_many(*runs)
    assert ok.returncode == 0 and "OK:" in ok.stdout, show(ok)
    for r in old:
        assert r.returncode == 2 and "takes no uneven_batch_ptr" in r.stderr, show(r)


# --------------------------------------------------------------------------- usage errors


@pytest.mark.thorough  # seconds of processes and campaigns: CI's thorough stage
def test_a_kernel_file_is_judged_by_its_own_variant(kv, tmp_path):
    """A case of SGLang 0.5.19's read_table variant carries swa_src_table and src_is_read_table;
    kvfuzz's kernel package, given by path, is judged by the variant its signature selects
    (`kvfuzz replay --target FILE` does the same), under which the case is out of contract: the
    script says which variant judged it and passes, as replay does."""
    import cases as hand

    from kvfuzz.replay import replay

    case = hand.read_table(hand.decode(ps=1, swa=True))
    saved = kv.saved(case)
    replayed = replay(saved, str(KERNELS / "__init__.py"), DEVICE, isolate=False)
    assert replayed.saved.case.variant != "read_table" and not replayed.fails
    script = emit(kv, tmp_path, saved)
    r = run_script(script, KERNELS, "--device", DEVICE)
    assert r.returncode == 0 and "OK:" in r.stdout, show(r)
    assert f"[{replayed.saved.case.variant}, saved under read_table] (out of contract)" in r.stdout, show(r)


def test_missing_kernel_file(kv, tmp_path):
    script = emit(kv, tmp_path, kv.saved(splits_zero_length(kv)))
    r = run_script(script, tmp_path / "no_such_kernels.py", "--device", DEVICE)
    assert r.returncode == 2, show(r)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "no_such_kernels.py" in lines[0] and "does not exist" in lines[0], show(r)
    assert "DEFECT" not in r.stdout and "OK" not in r.stdout


def test_unloadable_or_incomplete_kernel_file(kv, tmp_path):
    script = emit(kv, tmp_path, kv.saved(splits_zero_length(kv)))
    broken = tmp_path / "broken.py"
    broken.write_text("def oops(:\n")
    other = tmp_path / "other.py"
    other.write_text("def something_else():\n    pass\n")
    r_broken, r_other, r_device = run_many((script, broken, "--device", DEVICE), (script, other, "--device", DEVICE),
                                           (script, other, "--device", "tpu"))
    for r in (r_broken, r_other, r_device):
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, show(r)
        assert "DEFECT" not in r.stdout and "OK:" not in r.stdout, show(r)
    assert "SyntaxError" in r_broken.stderr, show(r_broken)
    assert "defines no get_num_kv_splits_triton" in r_other.stderr, show(r_other)
    assert "--device" in r_device.stderr, show(r_device)


# --------------------------------------------------------------------------- the script's other checks
# Plain-torch "kernels" (no Triton): fast, and each breaks one rule.


def write_kernels(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / name
    path.write_text("import torch\n\n" + textwrap.dedent(body))
    return path


@pytest.mark.thorough  # seconds of processes and campaigns: CI's thorough stage
def test_must_refuse(kv, tmp_path):
    case = decode_swa_transposed(kv).with_scalars(page_size=3)  # not a power of two: must be refused
    script = emit(kv, tmp_path, kv.saved(case))
    src = script.read_text()
    assert "status='must_refuse'" in src and "page_size 3" in src

    accepts = write_kernels(tmp_path, "accepts.py", """
        def normal_decode_set_metadata(*args, **kwargs):
            pass
    """)
    refuses = write_kernels(tmp_path, "refuses.py", """
        def normal_decode_set_metadata(*args, **kwargs):
            raise ValueError("page_size must be a power of two")
    """)
    writes_then_raises = write_kernels(tmp_path, "writes_then_raises.py", """
        def normal_decode_set_metadata(cache_seqlens_int32, *args, **kwargs):
            cache_seqlens_int32.fill_(1)
            raise ValueError("too late")
    """)
    r_acc, r_ref, r_late = run_many(*((script, k, "--device", DEVICE) for k in (accepts, refuses, writes_then_raises)))
    assert r_acc.returncode == 1, show(r_acc)
    assert "DEFECT invalid_accepted: ran a case it must refuse: page_size 3" in r_acc.stdout, show(r_acc)
    assert r_ref.returncode == 0 and "raised: ValueError" in r_ref.stdout and "OK:" in r_ref.stdout, show(r_ref)
    assert r_late.returncode == 1, show(r_late)
    assert "DEFECT untouched_write: cache_seqlens_int32: 3 cells changed although the call raised ValueError" \
        in r_late.stdout, show(r_late)


@pytest.mark.thorough  # seconds of processes and campaigns: CI's thorough stage
def test_checks_with_plain_function(kv, tmp_path):
    """num_kv_splits as a plain function (called, not launched): the right answer passes; a
    wrong cell, an input write and a guard-band write are each reported; a raise is a crash,
    and so is a kernel that kills its process."""
    case = splits_zero_length(kv, (4, 5, 9, 1))
    from kvfuzz.ops import CONTRACTS

    want = CONTRACTS["num_kv_splits"].numpy_ref(case).values["num_kv_splits"].tolist()
    script = emit(kv, tmp_path, kv.saved(case))
    template = """
        WANT = {want}
        def get_num_kv_splits_triton(out, seq_lens, num_seq, num_group, num_head, num_kv_head,
                                     max_kv_splits, device_core_count):
            out.copy_(torch.tensor(WANT, dtype=out.dtype))
            {extra}
    """
    bad = "out[2] += 1; seq_lens[0] = 77; out.as_strided((1,), (1,), out.storage_offset() + 4).fill_(0)"
    dies = "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"  # as a wild access under the interpreter
    kernels = [write_kernels(tmp_path, f"k_{name}.py", template.replace("{want}", repr(want)).replace("{extra}", extra))
               for name, extra in (("right", "pass"), ("bad", bad), ("crash", "raise RuntimeError('boom')"),
                                   ("dies", dies))]
    r_right, r_bad, r_crash, r_dies = run_many(*((script, k, "--device", DEVICE) for k in kernels))
    assert r_right.returncode == 0 and "OK:" in r_right.stdout, show(r_right)
    assert r_bad.returncode == 1, show(r_bad)
    for needle in ("DEFECT mismatch: num_kv_splits: 1 of 4 required cells differ",
                   f"num_kv_splits[2]: expected {want[2]}, got {want[2] + 1}",
                   "DEFECT input_modified: input seq_lens changed (1 bytes)",
                   "seq_lens[0]: was 4, now 77",
                   "DEFECT out_of_bounds_write: 4 bytes after num_kv_splits's elements changed",
                   "bytes +16..+19 from num_kv_splits's storage start: canary 0xa5 -> 00 00 00 00"):
        assert needle in r_bad.stdout, f"{needle!r} not in\n{show(r_bad)}"
    assert r_crash.returncode == 1, show(r_crash)
    assert "DEFECT crash: raised on an in-contract case: RuntimeError: boom" in r_crash.stdout, show(r_crash)
    assert r_dies.returncode == 1, show(r_dies)
    assert "DEFECT crash: the process calling the kernel died: killed by SIGSEGV" in r_dies.stdout, show(r_dies)
    assert "[num_kv_splits:splits:crash:-:SIGSEGV]" in r_dies.stdout, show(r_dies)  # kvfuzz's signature


def test_scripts_run_where_kvfuzz_cannot_be_imported(tmp_path):
    """The environment every script here runs in: `import kvfuzz` fails there, so a script
    that passes or finds a defect did it with the modules it embeds."""
    r = subprocess.run([sys.executable, "-c", "import kvfuzz"], env=without_kvfuzz(), cwd=str(tmp_path),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and BLOCKED_SAYS in r.stderr, show(r)


def test_script_is_standalone(kv, tmp_path):
    """Only stdlib, torch and triton are imported; the blobs decode; it compiles."""
    for case in (decode_swa_transposed(kv, page_size=1), spec_overflow(kv), splits_zero_length(kv)):
        script = emit(kv, tmp_path, kv.saved(case), name=f"{case.op}.py")
        tree = ast.parse(script.read_text())
        names = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                names.add(node.module)
        assert names <= SCRIPT_IMPORTS, names - SCRIPT_IMPORTS
        assert ast.get_docstring(tree).startswith(f"kvfuzz repro: {case.op} case {case.digest()}")


def test_a_broken_triton_interpreter_is_a_usage_error_not_a_defect(kv, tmp_path):
    """triton 3.6's interpreter with numpy >= 2.4 fails every kernel with a loop: the script
    must say so (exit 2), not report the kernel as crashing."""
    script = emit(kv, tmp_path, kv.saved(splits_zero_length(kv)))
    inject = tmp_path / "inject"
    inject.mkdir()
    (inject / "sitecustomize.py").write_text(textwrap.dedent("""
        import triton.runtime.interpreter as interp
        def broken(self, *args, **kwargs):
            raise interp.InterpreterError("TypeError('only 0-dimensional arrays can be converted to Python scalars')")
        interp.GridExecutor.__call__ = broken
    """))
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"} | {"PYTHONPATH": str(inject)}
    r = subprocess.run([sys.executable, str(script), str(KERNELS / "num_kv_splits.py"), "--device", "cpu"],
                       env=env, cwd=str(tmp_path), capture_output=True, text=True, timeout=300)
    assert r.returncode == 2, show(r)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "interpreter fails with numpy" in lines[0], show(r)
    assert "DEFECT" not in r.stdout, show(r)


# --------------------------------------------------------------------------- the template module
# kvfuzz/repro_script.py is the script: a module like any other, linted here with the standard
# library (compile, ast, symtable), and every emitted script is a copy of it plus its case.


def lint(source: str, filename: str) -> list[str]:
    """pyflakes' main checks, with the standard library: every name read must be bound (in its
    function, an enclosing one, the module or builtins); every import and every local variable
    must be used. Unused locals are found on the syntax tree: symtable misses names read only
    inside a comprehension on Python 3.12 (PEP 709 inlines comprehensions)."""
    import builtins
    import symtable

    compile(source, filename, "exec")
    top = symtable.symtable(source, filename, "exec")
    bound = {s.get_name() for s in top.get_symbols() if s.is_assigned() or s.is_imported()}
    bound |= {"__file__", "__name__", "__doc__", "__spec__", "__package__", "__loader__"}  # every module has them
    problems, used = [], set()

    def walk(table):
        where = f"{filename}:{table.get_lineno()} {table.get_name()}"
        for sym in table.get_symbols():
            name = sym.get_name()
            if sym.is_referenced():
                used.add(name)
                if sym.is_global() and name not in bound and not hasattr(builtins, name):
                    problems.append(f"{where}: undefined name {name!r}")
        for child in table.get_children():
            walk(child)

    walk(top)
    functions = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
    tree = ast.parse(source)
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        read = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        declared = {n for node in ast.walk(fn) if isinstance(node, (ast.Global, ast.Nonlocal)) for n in node.names}
        own, todo = [], list(ast.iter_child_nodes(fn))
        while todo:  # this function's own statements, not those of functions inside it
            node = todo.pop()
            if isinstance(node, functions):
                continue
            own.append(node)
            todo.extend(ast.iter_child_nodes(node))
        stored = {n.id for n in own if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        imported = {(a.asname or a.name).split(".")[0] for n in own if isinstance(n, (ast.Import, ast.ImportFrom))
                    for a in n.names}
        for name in sorted((stored | imported) - read - declared):
            if not name.startswith("_"):
                kind = "imported" if name in imported else "assigned"
                problems.append(f"{filename}:{fn.lineno} {fn.name}: {name!r} is {kind} but never used")
    # names read only in annotations count as used (pyflakes' rule; symtable misses them under
    # `from __future__ import annotations`)
    notes = [a.annotation for f in ast.walk(tree) if isinstance(f, ast.arguments)
             for a in f.posonlyargs + f.args + f.kwonlyargs + [f.vararg, f.kwarg] if a is not None and a.annotation]
    notes += [n.returns for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.returns]
    notes += [n.annotation for n in ast.walk(tree) if isinstance(n, ast.AnnAssign)]
    used |= {n.id for note in notes for n in ast.walk(note) if isinstance(n, ast.Name)}
    future = {a.name for n in tree.body if isinstance(n, ast.ImportFrom) and n.module == "__future__" for a in n.names}
    problems += [f"{filename}: {s.get_name()!r} imported but never used"
                 for s in top.get_symbols() if s.is_imported() and s.get_name() not in used | future]
    return problems


def script_imports(source: str) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            names.add(node.module)
    return names


def test_lint_catches_what_it_should():
    bad = ("import os\nimport sys\n\ndef f(a):\n    b = 1\n    d = 2\n\n    def g():\n        return d\n\n"
           "    return a + c + sys.argv + g()\n")
    problems = lint(bad, "bad.py")
    assert any("undefined name 'c'" in p for p in problems), problems
    assert any("'b' is assigned but never used" in p for p in problems), problems
    assert any("'os' imported but never used" in p for p in problems), problems
    assert not any("'sys'" in p or "'a'" in p or "'d'" in p for p in problems), problems


@pytest.mark.thorough  # seconds of processes and campaigns: CI's thorough stage
def test_template_module_is_clean_and_standalone():
    """repro_script.py and every module an emitted script embeds compile, pass the lint and
    import only stdlib, torch, triton and each other; the script's part holds the line the
    emitter replaces exactly once, and imported as a module holds no case."""
    from kvfuzz import repro, repro_script
    from kvfuzz.ops import CONTRACTS

    source = repro.script_source()
    assert Path(repro_script.__file__).read_text(encoding="utf-8") == source
    assert source.split("\n").count(repro.CASE_LINE) == 1
    assert repro_script.CASE is None
    modules = {m for op in CONTRACTS for m in repro.standalone_modules(op)} | {"kvfuzz.repro_script"}
    assert {"kvfuzz.findings", "kvfuzz.fills", "kvfuzz.places", "kvfuzz.rules", "kvfuzz.targets.calls",
            "kvfuzz.targets.sglang_shim", "kvfuzz.rerun_schedule", "kvfuzz.variant_choice",
            "kvfuzz.judge_flow"} <= modules
    scripts = {op: repro.assemble(op) for op in CONTRACTS if records()[op].standalone}
    for name in SHARED_WITH_KVFUZZ:  # kvfuzz's own copy, verbatim but for its imports of kvfuzz modules
        own = Path(importlib.util.find_spec(name).origin).read_text(encoding="utf-8")
        imports = {line for line in own.splitlines() if line.startswith(("from .", "from __future__"))}
        assert [line for line in repro.embedded_source(name).splitlines() if line.strip()] == \
            [line for line in own.splitlines() if line.strip() and line not in imports], name
        for op, script in scripts.items():
            assert repro.embedded_source(name) in script, (name, op)
    # the judge kvfuzz runs is the one the script embeds
    from kvfuzz import judge, judge_flow

    assert judge.judge_runs is judge_flow.judge_runs and repro_script.judge_runs is judge_flow.judge_runs
    assert judge.divergence_findings is judge_flow.divergence_findings is repro_script.divergence_findings
    for name in sorted(modules):
        text = Path(importlib.util.find_spec(name).origin).read_text(encoding="utf-8")
        assert lint(text, name) == [], name
        ast.parse(text, feature_version=(3, 9))  # the script promises Python 3.9+
        tree = ast.parse(text)
        absolute = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and not n.level} | {
            a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        assert absolute <= SCRIPT_IMPORTS, (name, absolute - SCRIPT_IMPORTS)


def test_a_module_that_is_not_standalone_is_refused(monkeypatch, tmp_path):
    """A module the script would embed that imports NumPy, or that binds a name another
    embedded module binds (an emitted script holds them in one namespace), stops the assembly
    with the reason."""
    from kvfuzz import repro

    real = repro._module_file
    places = real("kvfuzz.places").read_text(encoding="utf-8")
    variants = {"numpy": places.replace('ALIGN = 256', 'import numpy as np\n\nALIGN = int(np.int64(256))'),
                "clash": places + "\n\ndef bind():\n    pass\n"}
    for what, text in variants.items():
        path = tmp_path / f"places_{what}.py"
        path.write_text(text)
        monkeypatch.setattr(repro, "_module_file",
                            lambda name, path=path: path if name == "kvfuzz.places" else real(name))
        with pytest.raises(AssertionError) as err:
            repro.assemble("num_kv_splits")
        assert str(err.value) == {
            "numpy": "kvfuzz.places:13 imports numpy: a module the repro script embeds may import only the "
                     "standard library, torch and triton",
            "clash": "kvfuzz.targets.calls and kvfuzz.places both bind 'bind': an emitted script holds them in "
                     "one namespace; rename one"}[what]


def test_an_op_record_adds_its_own_standalone_modules(monkeypatch, tmp_path):
    """The modules embedded are computed per op: those repro_script.py needs, and those the
    op's record names in `standalone` (its call binding, its rules), before the script's part."""
    from kvfuzz import repro

    (tmp_path / "op_rules_under_test.py").write_text('"""An op\'s own rule."""\n\n\ndef op_rule():\n'
                                                    '    return "checked"\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    plain = repro.standalone_modules("num_kv_splits")
    assert plain[-1] == "kvfuzz.ops.num_kv_splits.call"  # the op's own call binding
    rec = records()["num_kv_splits"]
    monkeypatch.setitem(records(), "num_kv_splits",
                        dataclasses.replace(rec, standalone=rec.standalone + ("op_rules_under_test",)))
    assert repro.standalone_modules("num_kv_splits") == plain + ("op_rules_under_test",)
    assert "op_rules_under_test" not in repro.standalone_modules("decode_metadata")  # another op's record
    script = repro.assemble("num_kv_splits")
    header = "# op_rules_under_test (op_rules_under_test.py): embedded from the op's record"
    assert header in script and 'def op_rule():\n    return "checked"' in script
    assert script.index(header) < script.index("# kvfuzz.repro_script (kvfuzz/repro_script.py)")
    monkeypatch.setitem(records(), "num_kv_splits", dataclasses.replace(rec, standalone=()))
    with pytest.raises(BadInput, match="num_kv_splits has no full repro script"):  # exit 2, one line
        repro.standalone_modules("num_kv_splits")


def test_template_without_a_case_is_a_usage_error(capsys):
    from kvfuzz import repro_script

    assert repro_script.main([str(SEED or "kernels.py")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "holds no case" in err[0] and "--emit-repro" in err[0]


@pytest.mark.thorough  # seconds of processes and campaigns: CI's thorough stage
def test_emitted_script_is_kvfuzz_modules_plus_its_case(kv, tmp_path):
    """An emitted script holds, verbatim, every function and class of each module it embeds
    (kvfuzz runs the same code: a change in one of its rules changes the script) and of
    repro_script.py, each module under a header naming it; it passes the same lint, and its
    CASE is the ReproCase that repro.repro_case builds."""
    from kvfuzz import repro

    for case in (decode_swa_transposed(kv), spec_overflow(kv), splits_zero_length(kv)):
        saved = kv.saved(case)
        script = emit(kv, tmp_path, saved, name=f"{case.op}.py")
        source = script.read_text()
        assert lint(source, script.name) == []
        modules = repro.standalone_modules(case.op) + ("kvfuzz.repro_script",)
        at = []
        for name in modules:
            path = Path(importlib.util.find_spec(name).origin)
            header = f"# {name} ({path.relative_to(REPO).as_posix()}): "
            assert source.count(header) == 1, header
            at.append(source.index(header))
            text = path.read_text(encoding="utf-8")
            for node in ast.parse(text).body:
                if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                    assert ast.get_source_segment(text, node) in source, f"{name}.{node.name} not in the script"
            for part in repro.embedded_source(name).split(repro.CASE_LINE):  # the case's data in its place
                assert part in source, name
        assert at == sorted(at)  # in the order standalone_modules gives: each after what it imports
        tree = ast.parse(source)
        assert not [n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level], "a relative import left"

        spec = importlib.util.spec_from_file_location(f"emitted_{case.op}", script)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # as any imported module (its dataclasses look themselves up there)
        try:
            spec.loader.exec_module(module)  # not __main__: defines everything, runs nothing
        finally:
            del sys.modules[spec.name]
        own = {k: v for k, v in vars(module.CASE).items() if k not in ("call", "generations")}
        assert own == {k: v for k, v in vars(repro.repro_case(saved)).items() if k not in ("call", "generations")}
        # the call binding is the op's call.py, embedded: the script calls the kernel as kvfuzz does
        assert module.CASE.call is module.CALL and module.CASE.generations == module.GENERATIONS
        assert [g.params for g in module.GENERATIONS] == [g.params for g in records()[case.op].generations]


# --------------------------------------------------------------------------- CUDA faults
# On CUDA a CUDA error in the call, the synchronisation after it or the read-back is one
# `crash` defect where "cuda_fault", in contract or not, never a refusal (kvfuzz's judge gains
# the same rule). The verdict logic is checked here on the CPU; the real fault on a GPU below.


def test_cuda_errors_are_told_from_ordinary_exceptions():
    import torch

    from kvfuzz.faults import is_device_fault  # kvfuzz's executor and the script (it embeds kvfuzz/faults.py)

    faults = [RuntimeError("CUDA error: an illegal memory access was encountered\nCUDA kernel errors might be "
                           "asynchronously reported"),
              RuntimeError("CUDA error: device-side assert triggered"),
              RuntimeError("Triton Error [CUDA]: an illegal memory access was encountered"),
              RuntimeError("Triton Error [CUDA]: unspecified launch failure"),  # kvfuzz's executor missed it
              RuntimeError("an illegal memory access was encountered")]  # the script's own rule missed it
    if hasattr(torch, "AcceleratorError"):
        faults.append(torch.AcceleratorError("CUDA error: an illegal memory access was encountered"))
        faults.append(torch.AcceleratorError("something the driver said"))
    ordinary = [ValueError("page_size must be a power of two"), AssertionError("Torch not compiled with CUDA enabled"),
                TypeError("CUDA error in the message of a TypeError"), RuntimeError("shape '[2]' is invalid")]
    assert [is_device_fault(e) for e in faults] == [True] * len(faults)
    assert [is_device_fault(e) for e in ordinary] == [False] * len(ordinary)


def test_a_cuda_fault_is_one_crash_in_contract_or_not(kv, capsys):
    import torch

    from kvfuzz import repro_script as rs
    from kvfuzz.repro import repro_case

    fault = "CudaFault: AcceleratorError: CUDA error: an illegal memory access was encountered"
    cases = {"in_contract": decode_swa_transposed(kv), "out_of_contract": spec_overflow(kv),
             "must_refuse": decode_swa_transposed(kv).with_scalars(page_size=3)}
    for status, case in cases.items():
        rc = repro_case(kv.saved(case))
        assert rc.status == status
        arena = rs.TorchArena(rc)
        crash = rc.signature("crash", "-", "cuda_fault")
        clean = rs.Run(after=arena.image.clone())

        def defects(runs):
            report = rs.Report(rc)
            report.add(rs.judge_runs(arena, rc.op, rc.kernel_path, rc.status, rc.reasons, runs,
                                     rs.output_cells(rc) if status == "in_contract" else {})[1])
            return report.defects

        lost = rs.Run(error=fault, error_type=rs.CUDA_FAULT)
        assert defects([lost]) == [crash], status
        # a fault in a later run: a crash too, beside what the first run shows
        assert crash in defects([clean, lost]), status
        # an ordinary exception stays what it was: a refusal, or a crash only in contract
        raised = rs.Run(error="ValueError: bad", error_type="ValueError", after=arena.image.clone())
        assert defects([raised] * 2) == ([rc.signature("crash", "-", "ValueError")] if status == "in_contract" else [])
    assert "DEFECT crash: the run was lost: " + fault in capsys.readouterr().out


@pytest.mark.gpu
@pytest.mark.skipif(DEVICE != "cuda", reason="needs CUDA (the scripts run on the test session's device)")
def test_real_cuda_faults_are_crashes(kv, tmp_path):
    """An illegal memory access in a Triton kernel, and a device-side assert in torch."""
    case = splits_zero_length(kv, (4, 5, 9, 1))
    script = emit(kv, tmp_path, kv.saved(case))
    wild = write_kernels(tmp_path, "wild.py", """
        import triton
        import triton.language as tl

        @triton.jit
        def _wild(out_ptr):
            tl.store(out_ptr + (1 << 40), 1)

        def get_num_kv_splits_triton(out, *args):
            _wild[(1,)](out)
    """)
    assertion = write_kernels(tmp_path, "assertion.py", """
        def get_num_kv_splits_triton(out, seq_lens, *args):
            out.copy_(seq_lens[torch.full_like(seq_lens, 1 << 20).long()].to(out.dtype))
    """)
    for r in run_many((script, wild, "--device", "cuda"), (script, assertion, "--device", "cuda")):
        assert r.returncode == 1, show(r)
        assert "[num_kv_splits:splits:crash:-:cuda_fault]" in r.stdout, show(r)
        assert r.stdout.count("DEFECT") == 1, show(r)
