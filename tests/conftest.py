"""Shared fixtures. The device is chosen here, before any test module imports a kernel:
Triton picks compiled or interpreted mode when a kernel is defined."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kvfuzz import device as devmod

DEVICE = devmod.select(os.environ.get("KVFUZZ_DEVICE", "auto"))
REPO = Path(__file__).resolve().parent.parent


def seed_kernel_path() -> Path:
    """SGLang 0.5.14's metadata kernels: $KVFUZZ_SEED_PATH, the shared seed beside the
    checkout, or the file inside the sglang==0.5.14 wheel from PyPI."""
    env = os.environ.get("KVFUZZ_SEED_PATH")
    if env:
        return Path(env)
    shared = REPO.parent / "shared" / "seed" / "metadata_kernels.py"
    if shared.is_file():
        return shared
    from kvfuzz.targets.wheels import sglang_kernel_file

    return sglang_kernel_file("0.5.14")


@pytest.fixture(scope="session")
def device() -> str:
    return DEVICE


@pytest.fixture(scope="session")
def seed_path() -> Path:
    return seed_kernel_path()


@pytest.fixture(scope="session")
def seed_target(seed_path, device):
    from kvfuzz.targets import load_target

    return load_target(str(seed_path), device)


@pytest.fixture(scope="session")
def builtin_target(device):
    from kvfuzz.targets import load_target

    return load_target("builtin", device)
