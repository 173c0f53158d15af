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
    idx = np.asarray(case.values["indices"])
    S, K = case.tensors["indices"].shape
    if S == 0 or K == 0:
        return Expected({"topk_length": np.ones(S, np.int64)})
    valid = idx >= 0
    back = valid[:, ::-1].argmax(axis=1)  # from the row's end, the first valid slot (0 where none is)
    has = valid[np.arange(S), K - 1 - back]
    return Expected({"topk_length": np.where(has, K - back, 1).astype(np.int64)})


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
