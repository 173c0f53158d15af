"""kvfuzz.specialize counts compiled variants by Triton's own rules, on any device.

The rules come from a private Triton API (`native_specialize_impl` through the kernel
binder): these tests pin what kvfuzz relies on, so a Triton upgrade that changes them fails
here, not silently in the compile counts.
"""

from __future__ import annotations

import pytest
import torch

from kvfuzz import device as devmod
from kvfuzz.specialize import LaunchRecorder, launch_key
from kvfuzz.strategies.draw import DIV16, ONE, PLAIN, fit, int_class, narrower, width, width_class


def test_triton_integer_and_pointer_rules_are_the_ones_kvfuzz_models():
    from triton.backends.compiler import BaseBackend
    from triton.runtime.jit import native_specialize_impl

    assert native_specialize_impl(BaseBackend, 16, False, True, True)[:2] == ("i32", "D")
    assert native_specialize_impl(BaseBackend, 0, False, True, True)[:2] == ("i32", "D")
    assert native_specialize_impl(BaseBackend, 1, False, True, True)[:2] == ("constexpr", 1)
    assert native_specialize_impl(BaseBackend, 17, False, True, True)[:2] == ("i32", "")
    assert native_specialize_impl(BaseBackend, 2**40, False, True, True)[0] == "i64"
    t = torch.zeros(8, dtype=torch.int32)
    assert native_specialize_impl(BaseBackend, t, False, True, True)[:2] == ("*i32", "D")
    assert native_specialize_impl(BaseBackend, t[1:], False, True, True)[:2] == ("*i32", "")
    assert native_specialize_impl(BaseBackend, t[4:], False, True, True)[:2] == ("*i32", "D")


@pytest.mark.parametrize("v", [0, 1, 2, 15, 16, 17, 31, 32, 255, 256, 257])
def test_integer_classes_follow_the_rule(v):
    cls = int_class(v)
    assert cls == (ONE if v == 1 else DIV16 if v % 16 == 0 else PLAIN)
    for c in (PLAIN, DIV16):
        assert int_class(fit(v, c)) == c and fit(v, c) >= v
    for c in (PLAIN, DIV16, ONE, "zero"):
        w = width(v, c)
        assert width_class(w) == c
        assert width_class(narrower(v, c)) in (c, "zero")


def _kernel():
    import triton
    import triton.language as tl

    @triton.jit(do_not_specialize=["m"])
    def k(out, n, m, C: tl.constexpr):
        tl.store(out + tl.arange(0, C), tl.zeros([C], tl.int32) + n + m)
    return k


def test_launch_keys_tell_variants_apart_exactly_as_triton_does(device):
    k = _kernel()
    out = torch.zeros(64, dtype=torch.int32, device=devmod.torch_device(device))

    def key(*args, **kw):
        return launch_key(k, args, kw)
    base = key(out, 3, 5, C=4)
    assert key(out, 5, 5, C=4) == base  # 3 and 5: plain ints
    assert key(out, 3, 16, C=4) == base  # m is not specialised
    assert key(out, 16, 5, C=4) != base  # divisible by 16
    assert key(out, 1, 5, C=4) != base  # 1 is a constant
    assert key(out[1:], 3, 5, C=4) != base  # misaligned pointer
    assert key(out, 3, 5, C=8) != base  # constexpr value
    assert key(out, 3, 5, C=4, num_warps=2) != base  # launch option


def test_the_recorder_counts_launches_and_can_count_without_running(device):
    k = _kernel()
    out = torch.zeros(64, dtype=torch.int32, device=devmod.torch_device(device))
    rec = LaunchRecorder().install()
    try:
        k[(1,)](out, 3, 5, C=4)
        k[(1,)](out, 7, 5, C=4)
        k[(1,)](out, 16, 5, C=4)
        assert len(rec.keys) == 2 and sum(rec.keys.values()) == 3 and rec.errors == 0
        assert out[:4].tolist() == [21] * 4
        rec.dry = True
        k[(1,)](out, 2, 0, C=4)
        assert out[:4].tolist() == [21] * 4  # recorded, not run
        assert len(rec.keys) == 2
    finally:
        rec.uninstall()
    if device == "cuda":
        assert rec.compiled() == 2  # what Triton holds compiled agrees with the keys


_COMPILED_RECORDER = r"""
import sys, torch
sys.path.insert(0, sys.argv[1])
from host_overhead import install_fake_triton_runtime
install_fake_triton_runtime()  # compiled kernels (sm_90 stand-in), launches that do nothing
import triton, triton.language as tl
from kvfuzz.specialize import LaunchRecorder, launch_key

@triton.jit(do_not_specialize=["m"])
def k(out, n, m, C: tl.constexpr):
    tl.store(out + tl.arange(0, C), tl.zeros([C], tl.int32) + n + m)

out = torch.zeros(64, dtype=torch.int32)
calls = [((out, 3, 5), {"C": 4}), ((out, 7, 5), {"C": 4}), ((out, 16, 5), {"C": 4}), ((out[1:], 3, 5), {"C": 4}),
         ((out, 3, 5), {"C": 8}), ((out, 1, 5), {"C": 4, "num_warps": 2})]
k[(1,)](out, 3, 5, C=4)  # a binder made before any recorder: it is wrapped too
first = LaunchRecorder().install()
for args, kw in calls:
    k[(1,)](*args, **kw)
first.uninstall()
k[(1,)](out, 9, 9, C=16)  # no recorder: counted by none
second = LaunchRecorder().install()
k[(1,)](out, 3, 5, C=4)
inner = LaunchRecorder().install()  # nested, as a test's recorder inside the process's
k[(1,)](out, 3, 5, C=4)
k[(1,)](out, 3, 5, C=8)
inner.uninstall()
second.uninstall()
assert list(inner.keys) == [launch_key(k, (out, 3, 5), {"C": 4}), launch_key(k, (out, 3, 5), {"C": 8})], inner.keys
assert sum(inner.keys.values()) == 2 and sum(second.keys.values()) == 3 and len(second.keys) == 2
expected = {launch_key(k, a, kw) for a, kw in calls}
assert set(first.keys) == expected, (set(first.keys) ^ expected)
assert sum(first.keys.values()) == len(calls) and len(expected) == 5
assert list(second.keys)[0] == launch_key(k, (out, 3, 5), {"C": 4}) and second.keys[list(second.keys)[0]] == 2
print("ok")
"""


def test_compiled_launches_are_recorded_from_tritons_own_binder_with_the_same_keys(tmp_path):
    """On a GPU the recorder reads the key Triton's launch path computed (binding twice would
    double the launch's host cost); the keys must be those `launch_key` computes."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    scripts = Path(__file__).resolve().parent.parent / "scripts"
    script = tmp_path / "compiled_recorder.py"  # Triton reads a kernel's source from its file
    script.write_text(_COMPILED_RECORDER)
    r = subprocess.run([sys.executable, str(script), str(scripts)], capture_output=True, text=True,
                       timeout=300, env=env)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout[-2000:] + r.stderr[-3000:]
