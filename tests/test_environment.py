"""kvfuzz.environment: the interpreter self-check refuses a broken interpreter in one line, and
classify_error tells Triton's machinery failing from the target's own errors, on real exceptions
raised by small real kernels (docs/environment.md has the experiments behind the rule)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
import warnings

import numpy
import pytest
import torch
import triton
import triton.language as tl

from kvfuzz import environment
from kvfuzz.environment import Probe, check_interpreter, classify_error
from kvfuzz.errors import DeviceModeError

from conftest import DEVICE

cpu_only = pytest.mark.skipif(DEVICE != "cpu", reason="Triton's interpreter runs on the CPU only")


# --------------------------------------------------------------------------- the self-check


@cpu_only
def test_probes_pass_here_and_fast():
    t0 = time.perf_counter()
    check_interpreter()
    assert time.perf_counter() - t0 < 1.0  # runs once in every process, workers included
    for probe in environment.PROBES:
        got, expected = probe.run()
        assert got == expected, probe.name


def _assert_one_line_refusal(exc_info, *parts):
    msg = str(exc_info.value)
    assert "\n" not in msg
    for part in (f"triton {triton.__version__}", f"numpy {numpy.__version__}", "constraints/cpu.txt",
                 "constraints/newest.txt", *parts):
        assert part in msg, (part, msg)


@cpu_only
def test_a_probe_computing_wrong_values_is_refused(monkeypatch):
    good = {p.name: p for p in environment.PROBES}["store_i32"]

    def off_by_one():
        got, expected = good.run()
        return [got[0] + 1, *got[1:]], expected

    monkeypatch.setattr(environment, "PROBES", (Probe("store_i32", good.what, off_by_one),))
    with pytest.raises(DeviceModeError) as info:
        check_interpreter()
    _assert_one_line_refusal(info, "probe 'store_i32'", "wrong values", "[6, -1, ")


@cpu_only
def test_a_probe_whose_kernel_raises_is_refused_with_the_root_error():
    @triton.jit
    def bad(out):
        tl.store(out, tl.full([], 3, tl.int32) + undefined_name)  # noqa: F821

    def run():
        bad[(1,)](torch.zeros(1, dtype=torch.int32))
        return [], []

    with pytest.raises(DeviceModeError) as info:
        check_interpreter(probes=[Probe("broken", "what it checks", run)])
    # the root error, not Triton's InterpreterError wrapping of it
    _assert_one_line_refusal(info, "probe 'broken' (what it checks)", "NameError: name 'undefined_name'")


@cpu_only
def test_cli_refuses_a_broken_interpreter_with_one_line_and_exit_2(tmp_path):
    """What a user sees: `kvfuzz: error: ...`, exit code 2, before any case runs."""
    script = textwrap.dedent("""
        import sys
        from kvfuzz import environment
        from kvfuzz.cli import main
        environment.PROBES = (environment.Probe("runtime_loop", "a loop over a runtime bound",
                                                lambda: ([1, 2], [1, 3])),)
        sys.exit(main(["fuzz", "--device", "cpu", "--budget", "5", "--report", sys.argv[1]]))
    """)
    report = tmp_path / "r.json"
    p = subprocess.run([sys.executable, "-c", script, str(report)], capture_output=True, text=True,
                       timeout=120, env=dict(os.environ))
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kvfuzz: error: "), p.stderr
    assert "probe 'runtime_loop'" in lines[0] and "[1, 2] where [1, 3] is right" in lines[0]
    assert not report.exists()


def test_interpreter_must_be_on(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(DeviceModeError, match="TRITON_INTERPRET"):
        check_interpreter()


# --------------------------------------------------------------------------- classify_error


def _raised(fn):
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 (the exception is the data)
        return exc
    return None


def _i32(*shape):
    return torch.zeros(*shape, dtype=torch.int32)


@triton.jit
def _k_undefined_name(out):
    tl.store(out, undefined_thing + 1)  # noqa: F821


@triton.jit
def _k_type_error(out):
    x = tl.load(out)
    tl.store(out + 1.5, x)  # pointer + float


@triton.jit
def _k_arange_not_power_of_two(out):
    tl.store(out + tl.arange(0, 3), 1)


@triton.jit
def _k_int_mask(out):
    cols = tl.arange(0, 4)
    tl.store(out + cols, 1, mask=cols)  # an integer mask: the target's mistake


@triton.jit
def _k_static_assert(out, n: tl.constexpr):
    tl.static_assert(n > 5, "n must be > 5")
    tl.store(out, n)


@triton.jit
def _k_two_args(out, n, m):
    tl.store(out, n + m)


@triton.jit
def _k_int32_sum(x_ptr, out):
    x = tl.load(x_ptr + tl.arange(0, 4))
    tl.store(out, tl.sum(x, axis=0))  # int32: wraps on a GPU, NumPy rejects it in triton <= 3.8


@triton.jit
def _k_inline_asm(out):
    x = tl.inline_asm_elementwise("mov.u32 $0, 1;", "=r", [], dtype=tl.int32, is_pure=True, pack=1)
    tl.store(out, x)


@triton.jit
def _k_runtime_loop(out, n):
    for i in range(n):
        tl.store(out + i, i + 1)


def _host_refusal():
    page_size = 48
    if page_size & (page_size - 1):
        raise ValueError(f"page_size must be a power of two, got {page_size}")


def _host_assert():
    page_size = 48
    assert page_size in (1, 16, 64), "unsupported page size"


TARGET_ERRORS = {
    "undefined name in a kernel": lambda: _k_undefined_name[(1,)](_i32(4)),
    "type error in a kernel": lambda: _k_type_error[(1,)](_i32(4)),
    "non-power-of-two arange": lambda: _k_arange_not_power_of_two[(1,)](_i32(4)),
    "integer mask": lambda: _k_int_mask[(1,)](_i32(4)),
    "static_assert": lambda: _k_static_assert[(1,)](_i32(4), 3),
    "missing launch argument": lambda: _k_two_args[(1,)](_i32(4), 3),
    "host ValueError": _host_refusal,
    "host AssertionError": _host_assert,
    "torch error in host code": lambda: torch.zeros(3) + torch.zeros(4),
}


@cpu_only
@pytest.mark.parametrize("name", list(TARGET_ERRORS))
def test_target_errors_are_the_targets(name):
    exc = _raised(TARGET_ERRORS[name])
    assert exc is not None
    assert classify_error(exc) == "target", (name, repr(exc))


@cpu_only
def test_device_assert_is_the_targets(monkeypatch):
    """The interpreter runs tl.device_assert only in debug mode; its AssertionError is raised
    inside the interpreter's create_assert, and is still the kernel's own."""
    from triton.runtime import interpreter

    if not hasattr(interpreter, "interpreter_builder"):
        pytest.skip("this triton's interpreter keeps its builder elsewhere")
    builder = interpreter.interpreter_builder
    monkeypatch.setattr(builder, "options", interpreter.InterpreterOptions(debug=True))

    @triton.jit
    def k(out, n):
        tl.device_assert(n < 2, "n too big")
        tl.store(out, n)

    exc = _raised(lambda: k[(1,)](_i32(1), 3))
    assert exc is not None and "n too big" in repr(exc)
    assert classify_error(exc) == "target"


@cpu_only
def test_interpreter_failing_on_an_int32_reduction_is_the_environment():
    """triton 3.6-3.8: NumPy rejects the int32 sum's Python-int result; a GPU wraps it."""
    exc = _raised(lambda: _k_int32_sum[(1,)](torch.full((4,), 2**30, dtype=torch.int32), _i32(1)))
    if exc is None:
        pytest.skip(f"triton {triton.__version__}'s interpreter wraps int32 sums")
    assert "OverflowError" in repr(exc)
    assert classify_error(exc) == "environment"


@cpu_only
def test_interpreter_limitation_is_the_environment():
    """inline_asm compiles for a GPU; the interpreter cannot run it."""
    exc = _raised(lambda: _k_inline_asm[(1,)](_i32(1)))
    assert exc is not None and "not supported in interpreter mode" in repr(exc)
    assert classify_error(exc) == "environment"


@cpu_only
def test_interpreter_failing_on_a_runtime_loop_is_the_environment():
    """triton 3.6's interpreter calls int() on a one-element array: NumPy 2.4 raises TypeError,
    older NumPy a DeprecationWarning, raised here as an error: the same frame, the same rule."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        exc = _raised(lambda: _k_runtime_loop[(1,)](_i32(3), 3))
    if exc is None:
        pytest.skip(f"triton {triton.__version__}'s interpreter indexes one-element arrays properly")
    assert classify_error(exc) == "environment"


def test_unraised_and_foreign_exceptions_are_the_targets():
    assert classify_error(ValueError("never raised")) == "target"
    assert classify_error(_raised(lambda: int("x"))) == "target"


def test_triton_imported_before_the_interpreter_was_switched_on_is_refused():
    """Triton's own helpers (tl.zeros, ...) are then compiled kernels: every version fails."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    script = "import triton.language\nfrom kvfuzz import device\ndevice.select('cpu')\n"
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode != 0 and "DeviceModeError: triton was imported before TRITON_INTERPRET=1" in p.stderr


# --------------------------------------------------------------------------- an untested triton


@pytest.mark.parametrize("version", ["3.6.0", "3.7.1", "3.8.0", "3.8.1+gitabc"])
def test_a_tested_triton_gets_no_note(version):
    assert environment.untested_triton(version) is None


@pytest.mark.parametrize("version", ["3.9.0", "4.0.0", "3.5.1"])
def test_an_untested_triton_is_named_with_the_tested_range(version):
    note = environment.untested_triton(version)
    assert note is not None and f"triton {version}" in note and "(3.6-3.8)" in note


def test_a_run_with_an_untested_triton_says_so_once_and_runs(tmp_path, monkeypatch, capsys):
    # the install accepts any triton; a run on one outside the tested range goes on, and says so
    # once on stderr and in the report
    from kvfuzz.cli import main

    monkeypatch.setattr(environment, "untested_triton", lambda version=None: "triton 9.9.9 is outside the range")
    report = tmp_path / "r.json"
    rc = main(["fuzz", "--target", "builtin", "--op", "num_kv_splits", "--max-cases", "40", "--in-process",
               "--seed", "1", "--report", str(report), "--corpus", str(tmp_path / "corpus")])
    err = capsys.readouterr().err
    doc = json.loads(report.read_text())
    assert rc == 0 and doc["cases"] >= 40
    assert err.count("kvfuzz: note: triton 9.9.9 is outside the range") == 1
    assert doc["notes"] == ["triton 9.9.9 is outside the range"]
