"""Which device runs the kernels, with Triton's mode to match.

CUDA runs compiled kernels; the CPU runs them under Triton's interpreter, which must be
switched on (TRITON_INTERPRET=1) before any `@triton.jit` decorator runs, because the
decorator picks compiled or interpreted at definition time. `select` sets that up once per
process, and the target loader refuses kernels that were defined in the other mode.
"""

from __future__ import annotations

import os
from pathlib import Path

from . import environment
from .errors import DeviceModeError

CHOICES = ("auto", "cpu", "cuda")
_selected: str | None = None


def interpreter_requested() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0").strip().lower() not in ("", "0", "false", "off", "no")


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def select(requested: str = "auto") -> str:
    """Resolve `auto|cpu|cuda` to `cpu` or `cuda` and put Triton in the matching mode.

    Idempotent for the same answer; a process cannot switch (its kernels are already defined)."""
    global _selected
    if requested not in CHOICES:
        raise DeviceModeError(f"--device must be one of {', '.join(CHOICES)}, got {requested!r}")
    if requested == "auto":
        device = "cpu" if interpreter_requested() or not cuda_available() else "cuda"
    else:
        device = requested
    if device == "cuda":
        if not cuda_available():
            raise DeviceModeError("--device cuda: no CUDA device is visible to torch; use --device cpu")
        if interpreter_requested():
            raise DeviceModeError("--device cuda, but TRITON_INTERPRET is set: unset it to run compiled kernels")
    if _selected is not None and _selected != device:
        raise DeviceModeError(
            f"this process already runs kernels on {_selected}; Triton's mode is fixed per process, "
            f"so run {device} in a separate process")
    if device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"
        if _selected is None:
            environment.check_interpreter()  # refuses, with one line, an interpreter that fails its probes
    _selected = device
    return device


def selected() -> str | None:
    return _selected


def torch_device(device: str):
    import torch

    return torch.device("cuda", torch.cuda.current_device()) if device == "cuda" else torch.device("cpu")


def describe(device: str) -> str:
    """What ran the kernels, for reports and saved cases."""
    if device == "cuda":
        import torch

        return torch.cuda.get_device_name()
    return "cpu (triton interpreter)"


def gpu_name(device: str) -> str | None:
    """The GPU's name, None on the CPU (what `corpus.environment_versions` records)."""
    return describe(device) if device == "cuda" else None


def identity(device: str) -> str:
    """Which physical device this process runs on (the GPU's UUID), so a report can show that
    two workers were pinned to two different GPUs."""
    if device != "cuda":
        return "cpu"
    import torch

    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return f"GPU-{props.uuid}" if getattr(props, "uuid", None) is not None else f"cuda:{torch.cuda.current_device()}"


def triton_cache_dir(target: str, device: str) -> Path:
    """Where compiled kernels of `target` on `device` persist between campaigns (warm start)."""
    import hashlib

    from .targets.wheels import cache_dir

    tag = hashlib.sha256(target.encode()).hexdigest()[:12]
    where = "cpu" if device == "cpu" else describe(device).replace(" ", "_")
    return cache_dir() / "triton" / f"{tag}-{where}"
