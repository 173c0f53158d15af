"""kvfuzz's own kernels compile for a GPU, checked on a machine without one.

The Triton interpreter accepts programs compiled Triton rejects (a plain global read inside a
kernel ran under the interpreter and failed to compile on the H200). `gpu_compile_check.py`
compiles, for sm_90, every variant the builtin kernels launch over a short stream of each op's
compile classes, with Triton's real NVIDIA backend and a stand-in driver."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kvfuzz.environment import classify_error

HERE = Path(__file__).resolve().parent


@pytest.mark.slow
def test_every_builtin_kernel_variant_compiles_for_sm90(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"} | {"TRITON_CACHE_DIR": str(tmp_path)}
    r = subprocess.run([sys.executable, str(HERE / "gpu_compile_check.py"), "1"], capture_output=True, text=True,
                       timeout=900, env=env)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert "kernel variants compiled for sm_90" in r.stdout
    compiled = int(r.stdout.split(" kernel variants compiled")[0].split()[-1])
    assert compiled >= 30, r.stdout  # every op's kernels, several classes each


def test_a_compile_error_is_the_targets_not_the_environments():
    from triton.compiler.errors import CompilationError

    try:
        try:
            raise NameError("Cannot access global variable SWA_NONE from within @jit'ed function")
        except NameError as inner:
            raise CompilationError("def k(): ...", None, repr(inner)) from inner
    except CompilationError as exc:
        assert classify_error(exc) == "target"
