"""The corpus: saved cases on disk (a versioned, pickle-free format) and the stores that hold them.

`format` defines `SavedCase` and the `case.json` + `tensors.npz` directory format
(docs/case-format.md); `store` defines the `CorpusStore` ABC, `DirectoryCorpus`, and the
whole-corpus operations behind `kvfuzz corpus ls/merge/prune`.
"""

from .format import (
    CASE_FILE,
    EXPECTED,
    ORIGINS,
    SCHEMA_VERSION,
    TENSORS_FILE,
    SavedCase,
    case_from_json,
    case_to_json,
    dumps_case_json,
    environment_versions,
    now_iso,
    read_case_dir,
    write_case_dir,
)
from .store import (
    CaseRow,
    CorpusStore,
    DirectoryCorpus,
    SaveResult,
    iter_cases,
    list_cases,
    merge,
    prune,
    set_meta,
)

__all__ = [
    "CASE_FILE",
    "EXPECTED",
    "ORIGINS",
    "SCHEMA_VERSION",
    "TENSORS_FILE",
    "CaseRow",
    "CorpusStore",
    "DirectoryCorpus",
    "SaveResult",
    "SavedCase",
    "case_from_json",
    "case_to_json",
    "dumps_case_json",
    "environment_versions",
    "iter_cases",
    "list_cases",
    "merge",
    "now_iso",
    "prune",
    "read_case_dir",
    "set_meta",
    "write_case_dir",
]
