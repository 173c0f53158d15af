"""The package's public surface: every name in __all__ resolves; importing kvfuzz (and its
strategies) pulls in no triton, so the device can still be chosen afterwards."""

from __future__ import annotations

import pytest

import subprocess
import sys

import kvfuzz
import kvfuzz.strategies as strategies

pytestmark = pytest.mark.nokernel  # no kernel runs here (conftest: runs where the interpreter is refused)


def test_all_names_resolve():
    for name in kvfuzz.__all__:
        assert getattr(kvfuzz, name) is not None, name
    for name in strategies.__all__:
        assert callable(getattr(strategies, name)), name


def test_import_does_not_load_triton():
    code = "import sys, kvfuzz, kvfuzz.case, kvfuzz.findings; print('triton' in sys.modules, 'torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["False", "False"], out.stdout + out.stderr
