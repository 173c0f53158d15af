"""An op defined outside kvfuzz, loaded through `KVFUZZ_OPS`, gets everything an op in
`kvfuzz/ops/` gets: a fuzz campaign that finds a wrong kernel's defect, minimization (with the
record's own pass), confirmation in a fresh process, `kvfuzz replay` of the saved case (on the
wrong kernel and on the record's builtin kernel), and the saved corpus under pytest. The op's
files are written into tmp_path; no file of kvfuzz is touched."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import kvfuzz
from conftest import DEVICE
from test_repro import without_kvfuzz

OP_MODULE = '''
"""ext_clamp: out[i] = min(lens[i], cap), for any cap >= 0 (a negative cap must be refused)."""

import numpy as np

from kvfuzz.case import Case, TensorSpec
from kvfuzz.contract import Arg, Cells, Contract, Expected, Scalar, dtype_and_layout_reasons
from kvfuzz.minimize import GENERIC
from kvfuzz.ops import OpRecord
from kvfuzz.strategies import OpGenerator
from kvfuzz.strategies.draw import CompileClass
from ext_clamp_call import CALL, GENERATIONS

OP = "ext_clamp"


def structural_reasons(case):
    reasons = dtype_and_layout_reasons(CONTRACT, case)
    if reasons:
        return reasons
    lens, out = case.tensors["lens"], case.tensors["out"]
    if len(lens.shape) != 1 or out.shape != lens.shape:
        reasons.append(f"lens and out must be 1-D of one length, got {lens.shape} and {out.shape}")
    if not (lens.is_contiguous and out.is_contiguous):
        reasons.append("lens and out must be contiguous")
    return reasons


def must_refuse(case):
    return [f"cap = {case.scalars['cap']} is negative"] if case.scalars["cap"] < 0 else []


def cells(case):
    shape = case.tensors["out"].shape
    return {"out": Cells(np.ones(shape, bool), np.zeros(shape, bool))}


def numpy_ref(case):
    return Expected({"out": np.minimum(np.asarray(case.values["lens"], np.int64), case.scalars["cap"])})


def torch_ref(case, device, inputs=None):
    import torch

    lens = inputs["lens"] if inputs is not None else torch.from_numpy(np.array(case.values["lens"])).to(device)
    return {"out": lens.to(torch.int64).clamp(max=case.scalars["cap"])}


CONTRACT = Contract(
    name=OP, entry="clamp_lengths", doc=__doc__,
    args=(Arg("lens", "in", ("int32",), "N"), Arg("out", "out", ("int32",), "N", doc="min(lens, cap)")),
    scalars=(Scalar("cap", "an int >= 0"),),
    variants={"default": "out[i] = min(lens[i], cap)"}, paths={"loop": "one program, 16-wide blocks"},
    kernel_path=lambda case: "loop", structural_reasons=structural_reasons, must_refuse=must_refuse,
    cells=cells, numpy_ref=numpy_ref, torch_ref=torch_ref,
)


def compile_class(d):
    return CompileClass.of(OP, {"size": d.choice(("small", "large"))})


def in_class(d, k, variant="default"):
    n = d.choice((1, 2, 3, 5, 8) if k["size"] == "small" else (16, 17, 40))
    lens = np.array([d.integer(0, 100) for _ in range(n)], np.int64)
    specs = {"lens": TensorSpec.contiguous("int32", (n,)), "out": TensorSpec.contiguous("int32", (n,))}
    return Case(OP, {"cap": d.integer(0, 100)}, specs, {"lens": lens}, variant=variant)


def violation(d, case, k, kind=None):
    return Case(OP, {"cap": -1}, case.tensors, case.values, variant=case.variant, meta={"violation": "negative_cap"})


def features(case):
    return {"clamped" if (np.asarray(case.values["lens"]) > case.scalars["cap"]).any() else "unclamped"}


def drop_pass(case):
    """The op's own minimizer pass: drop one element of lens (and of out) at a time."""
    n = case.tensors["lens"].shape[0]
    for i in range(n if n > 1 else 0):
        def build(i=i):
            spec = TensorSpec.contiguous("int32", (n - 1,))
            lens = np.delete(np.asarray(case.values["lens"]), i)
            return Case(OP, case.scalars, {"lens": spec, "out": spec}, {"lens": lens}, variant=case.variant,
                        meta=case.meta)
        yield f"drop element {i}", build


RECORD = OpRecord(
    name=OP, contract=CONTRACT,
    generator=OpGenerator(OP, compile_class, in_class, violation, ("negative_cap",), features,
                          lambda: {"clamped", "unclamped"}),
    call=CALL, generations=GENERATIONS,
    builtin="ext_clamp_kernels:clamp_lengths",
    passes=(drop_pass, *GENERIC),
    standalone=("ext_clamp_call",),  # the full repro script embeds it
)
'''

CALL_MODULE = '''
"""How ext_clamp's entry point is called. Standalone: the full repro script embeds it."""

from kvfuzz.targets.calls import Generation, OpCall, scalar, tensor

CALL = OpCall(supplied={"lens": tensor("lens"), "out": tensor("out"), "cap": scalar("cap")},
              required=(("lens",), ("out",), ("cap",)), neutral={}, legacy=("lens", "out", "cap"))
GENERATIONS = (Generation("1.0", "1.0", ("lens", "out", "cap"), "the only signature"),)
'''

KERNEL = '''
import triton
import triton.language as tl


@triton.jit
def _clamp(lens_ptr, out_ptr, n, cap, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    for start in range(0, n, BLOCK):
        m = start + offs < n
        x = tl.load(lens_ptr + start + offs, mask=m)
        tl.store(out_ptr + start + offs, tl.minimum(x, {bound}), mask=m)


def clamp_lengths(lens, out, cap):
    if cap < 0:
        raise ValueError(f"cap must be >= 0, got {{cap}}")
    _clamp[(1,)](lens, out, lens.shape[0], cap, BLOCK=16)
'''


@pytest.fixture
def ext(tmp_path):
    """(the folder holding the op, the environment that loads it)."""
    (tmp_path / "ext_clamp.py").write_text(OP_MODULE)
    (tmp_path / "ext_clamp_call.py").write_text(CALL_MODULE)
    (tmp_path / "ext_clamp_kernels.py").write_text(KERNEL.format(bound="cap"))  # the record's builtin
    (tmp_path / "wrong_clamp.py").write_text(KERNEL.format(bound="cap + 1"))  # off by one past cap
    root = str(Path(kvfuzz.__file__).resolve().parents[1])
    path = [str(tmp_path), root] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return tmp_path, dict(os.environ, PYTHONPATH=os.pathsep.join(path), KVFUZZ_OPS="ext_clamp")


def run(env, *args, module="kvfuzz.cli"):
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, timeout=600,
                          env=env)


def test_an_external_op_is_listed_beside_the_package_ones(ext):
    _, env = ext
    p = run(env, "ops")
    assert p.returncode == 0, p.stderr
    assert "ext_clamp" in p.stdout and "clamp_lengths" in p.stdout and "decode_metadata" in p.stdout


@pytest.mark.parametrize("entry, message", [
    ("no_such_module", "KVFUZZ_OPS: cannot import 'no_such_module'"),
    ("json", "KVFUZZ_OPS: module 'json' defines no RECORD"),
    ("ext_clamp,ext_clamp", "KVFUZZ_OPS: op 'ext_clamp' is defined twice"),
])
def test_a_bad_kvfuzz_ops_entry_is_one_line_and_exit_2(ext, entry, message):
    _, env = ext
    p = run(dict(env, KVFUZZ_OPS=entry), "fuzz", "--op", "ext_clamp", "--budget", "1")
    assert p.returncode == 2 and message in p.stderr, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr


def test_the_records_own_minimizer_pass_shrinks_its_cases(ext, monkeypatch):
    """The record's `passes` are the ones kvfuzz's minimizer runs for the op (here in process,
    the record put into the registry by hand): its own pass drops the elements one at a time."""
    import importlib

    import numpy as np

    from kvfuzz.case import Case, TensorSpec
    from kvfuzz.minimize import minimize
    from kvfuzz.ops import records

    tmp, _ = ext
    monkeypatch.syspath_prepend(str(tmp))
    module = importlib.import_module("ext_clamp")
    monkeypatch.setitem(records(), "ext_clamp", module.RECORD)
    spec = TensorSpec.contiguous("int32", (6,))
    case = Case("ext_clamp", {"cap": 10}, {"lens": spec, "out": spec}, {"lens": np.array([1, 2, 50, 3, 4, 60])})
    m = minimize(case, lambda c: bool((np.asarray(c.values["lens"]) > c.scalars["cap"]).any()), budget_s=30,
                 method="passes")
    assert m.complete and m.case.tensors["lens"].shape == (1,)
    assert m.accepted.get("drop_pass", 0) >= 5 and any(line.startswith("drop element") for line in m.log), m.log


@pytest.mark.slow
def test_an_external_op_is_fuzzed_minimized_confirmed_replayed_and_run_by_pytest(ext):
    tmp, env = ext
    corpus, report = tmp / "corpus", tmp / "r.json"
    p = run(env, "fuzz", "--target", str(tmp / "wrong_clamp.py"), "--op", "ext_clamp", "--device", DEVICE,
            "--budget", "6", "--minimize-budget", "6", "--corpus", str(corpus), "--report", str(report))
    assert p.returncode == 1, p.stderr[-2000:]
    findings = json.loads(report.read_text())["findings"]
    assert findings and {f["kind"] for f in findings} == {"mismatch"}, findings
    from kvfuzz.corpus import read_case_dir

    for f in findings:
        saved = read_case_dir(f["case"])  # saved only once a fresh worker confirmed it
        assert saved.case.op == "ext_clamp" and saved.minimized and f"-> {f['case']} (new)" in p.stderr
        # the generic reducer (on the recorded choices) or the record's own pass shrank it: one wrong
        # element is enough (two for a partial mismatch)
        assert saved.minimize_log, saved.minimize_log
        assert saved.case.tensors["lens"].shape[0] <= (1 if f["signature"].endswith(":all") else 2)
    case = findings[0]["case"]
    r1 = run(env, "replay", case)
    assert r1.returncode == 1 and "FAIL" in r1.stdout, r1.stdout + r1.stderr
    r0 = run(env, "replay", case, "--target", "builtin")  # the record's builtin kernel
    assert r0.returncode == 0 and "PASS" in r0.stdout, r0.stdout + r0.stderr
    # the full repro script embeds the record's call module: it fails on the wrong kernel, passes on the right one
    script = tmp / "repro.py"
    r3 = run(env, "replay", case, "--emit-repro", str(script))
    assert r3.returncode == 1 and script.exists(), r3.stdout + r3.stderr
    assert "# ext_clamp_call (ext_clamp_call.py): embedded from the op's record" in script.read_text()
    bare = {k: v for k, v in without_kvfuzz().items() if k != "KVFUZZ_OPS"}  # where import kvfuzz fails
    for kernel, code in (("wrong_clamp.py", 1), ("ext_clamp_kernels.py", 0)):
        r = subprocess.run([sys.executable, str(script), str(tmp / kernel), "--device", DEVICE], capture_output=True,
                           text=True, timeout=300, env=bare, cwd=tmp.parent)
        assert r.returncode == code, (kernel, r.stdout + r.stderr)
    t = run(env, "-q", "-p", "no:cacheprovider", str(corpus), module="pytest")
    assert f"{len(findings)} xfailed" in t.stdout, t.stdout[-2000:]
    # without KVFUZZ_OPS the op is unknown: one line that says how to load it
    r2 = run({k: v for k, v in env.items() if k != "KVFUZZ_OPS"}, "replay", case, "--target", "builtin")
    assert r2.returncode == 2 and "unknown op 'ext_clamp'" in r2.stderr and "KVFUZZ_OPS" in r2.stderr, r2.stderr
    assert "Traceback" not in r2.stderr
