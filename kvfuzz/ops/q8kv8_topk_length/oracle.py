"""q8kv8_topk_length's two oracles: `numpy_ref` (exact, torch-free; int32 overflow is `OutOfContract`)
and `torch_ref` (the unfused torch ops the kernel replaced, on the host)."""

from __future__ import annotations

import numpy as np

from ...case import Case
from ...contract import Expected
from ...oracles.torch_ref import Inputs, input_tensor


# the NumPy oracle ------------------------------------------------------------------------


def numpy_ref(case: Case) -> Expected:
    """1 + the last position holding a value >= 0, and 1 for a row without one."""
    idx = np.asarray(case.values["indices"], dtype=np.int64)
    S, K = case.tensors["indices"].shape
    ramp = np.arange(1, K + 1, dtype=np.int64)
    last = np.where(idx >= 0, ramp[None, :], 0).max(axis=1, initial=0) if S else np.zeros(0, np.int64)
    return Expected({"topk_length": np.maximum(last, 1)})


# the torch oracle ------------------------------------------------------------------------


def torch_ref(case: Case, device, inputs: Inputs = None) -> dict[str, torch.Tensor]:
    """The unfused derivation SGLang's docstring names: ((indices >= 0) * ramp).amax, min 1."""
    import torch

    idx = input_tensor(case, "indices", device, inputs)
    S, K = idx.shape
    if K == 0:
        return {"topk_length": torch.ones(S, dtype=torch.int64, device=device)}
    ramp = torch.arange(1, K + 1, device=device)
    return {"topk_length": ((idx >= 0) * ramp).amax(dim=1).clamp(min=1).to(torch.int64)}
