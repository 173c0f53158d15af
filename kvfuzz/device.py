"""Which device runs the kernels, with Triton's mode to match.

CUDA runs compiled kernels; the CPU runs them under Triton's interpreter, which must be
switched on (TRITON_INTERPRET=1) before any `@triton.jit` decorator runs, because the
decorator picks compiled or interpreted at definition time. `select` sets that up once per
process, and the target loader refuses kernels that were defined in the other mode.
"""

from __future__ import annotations

import os

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
            check_interpreter()
    _selected = device
    return device


def check_interpreter() -> None:
    """Refuse a Triton interpreter that cannot run kernels here, before it yields a crash
    "finding" for every case: triton 3.6's interpreter calls int() on 1-element arrays, which
    numpy >= 2.4 rejects, so every kernel with a loop over a runtime bound fails."""
    import numpy
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
        ok = out.tolist() == [1, 2]
    except Exception as exc:  # the interpreter's own failure, whatever its type
        from .execute import one_line  # execute imports this module
        raise DeviceModeError(
            f"Triton {triton.__version__}'s interpreter fails with numpy {numpy.__version__} "
            f"({one_line(exc)}); install the versions in "
            "constraints/cpu.txt (triton 3.6 needs numpy<2.4) or run on a GPU") from None
    if not ok:
        raise DeviceModeError(f"Triton {triton.__version__}'s interpreter computed {out.tolist()} for [1, 2]: "
                              "it cannot be trusted here")


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
