"""kvfuzz: differential fuzzing of the Triton kernels that build KV-cache metadata.

Public names only. Importing kvfuzz imports neither torch nor triton: the device (and with
it Triton's compiled or interpreted mode) is chosen by `kvfuzz.device.select` before any
kernel is loaded. Heavier pieces load on first use.
"""

from __future__ import annotations

import importlib
import time
from typing import Any

from .case import Case, TensorSpec
from .errors import BadCaseFile, BadInput, DeviceModeError, TargetLoadError
from .findings import KINDS, Finding

__version__ = "0.1.0"
IMPORTED_AT = time.monotonic()  # a campaign's report counts its process's start-up from here

_LAZY = {
    "CONTRACTS": ("kvfuzz.ops", "CONTRACTS"),
    "load_target": ("kvfuzz.targets", "load_target"),
    "judge": ("kvfuzz.judge", "judge"),
    "run_case": ("kvfuzz.execute", "run_case"),
    "minimize": ("kvfuzz.minimize", "minimize"),
    "SavedCase": ("kvfuzz.corpus", "SavedCase"),
    "DirectoryCorpus": ("kvfuzz.corpus", "DirectoryCorpus"),
    "CampaignConfig": ("kvfuzz.campaign", "CampaignConfig"),
    "run_campaign": ("kvfuzz.campaign", "run_campaign"),
}

__all__ = ["Case", "TensorSpec", "Finding", "KINDS", "BadInput", "BadCaseFile", "DeviceModeError",
           "TargetLoadError", "__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'kvfuzz' has no attribute {name!r}")
