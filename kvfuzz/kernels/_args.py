"""Argument checks shared by the builtin kernels' launchers: metadata only (types, ranks,
dtypes, devices), never tensor values, so a launch stays CUDA-graph capturable."""

from __future__ import annotations

import operator

import torch

_Tensor = torch.Tensor
_I32 = torch.int32
_INT32 = (torch.int32,)
_INDEX = (torch.int32, torch.int64)


def _int_arg(name, value):
    """``value`` as a Python int, or ValueError. Never reads a tensor (no host sync)."""
    if type(value) is int:
        return value
    if isinstance(value, (bool, torch.Tensor)):
        raise ValueError(f"{name} must be a Python int, got {type(value).__name__}")
    try:
        return operator.index(value)
    except TypeError:
        raise ValueError(f"{name} must be a Python int, got {type(value).__name__}") from None


def _tensor_arg(name, t, ndim, dtypes, device):
    """Check rank, dtype and device of ``t`` (metadata only); return its shape."""
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    shape = t.shape
    if len(shape) != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got shape {tuple(shape)}")
    if t.dtype not in dtypes:
        want = " or ".join(str(d).replace("torch.", "") for d in dtypes)
        raise ValueError(f"{name} must be {want}, got {str(t.dtype).replace('torch.', '')}")
    if device is not None and t.device != device:
        raise ValueError(f"{name} is on {t.device}, but the other tensors are on {device}")
    return shape
