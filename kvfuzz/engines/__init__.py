"""The engines `--engine` names, each an `engines.base.Engine`. A module is imported only when
its engine is asked for (Hypothesis' import alone takes a while)."""

from __future__ import annotations

import importlib

ENGINES = {
    "batch": ("kvfuzz.engines.batch_engine", "BatchEngine"),
    "hypothesis": ("kvfuzz.engines.hypothesis_engine", "HypothesisEngine"),
    "atheris": ("kvfuzz.engines.atheris_engine", "AtherisEngine"),
}


def engine_class(name: str):
    """The `Engine` subclass `--engine name` runs (KeyError for a name that is none)."""
    module, cls = ENGINES[name]
    return getattr(importlib.import_module(module), cls)
