"""What every op's torch oracle (`kvfuzz/ops/<op>/oracle.py`, `torch_ref`) is built from: the
unfused torch operations each fused kernel replaced.

kvfuzz runs it on the host (CPU torch), whatever device runs the kernel under test: it is a
second, independent implementation of each contract beside the NumPy oracle, and on a GPU its
dozen tiny kernels per case would take more device time than the kernel under test itself.
Where `execute.DEVICE_ORACLE_BYTES` (or `KVFUZZ_DEVICE_ORACLE_BYTES`) is set (off by default), a launch of that many bytes or
more (production tables) is the exception: on a GPU its oracle runs there, from a copy of the
launch's bytes taken before any launch, where the host's would cost milliseconds.
Returns int64 tensors shaped like the outputs (only the contract's required cells are
meaningful).

Each function takes `inputs`, the input tensors as views (a batch passes views of its host
image), or reads the case's values. The functions are device-agnostic torch: `device` says
where to build their tensors. torch is imported where it is used: the campaign's own process
loads the contracts but runs no torch oracle, and importing torch there (1.5 s) would delay
its start.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from ..case import Case

Inputs = Mapping[str, "torch.Tensor"] | None


def input_tensor(case: Case, name: str, device, inputs: Inputs = None) -> torch.Tensor:
    if inputs is not None:
        return inputs[name]
    import torch

    return torch.from_numpy(np.array(case.values[name])).to(device)


def as_int64(t: torch.Tensor) -> torch.Tensor:
    import torch

    return t.to(torch.int64)
