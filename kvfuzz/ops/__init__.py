"""The op registry: one `OpRecord` per op (record.py), found by walking this package's
subpackages (`kvfuzz/ops/<op>/__init__.py` defines `RECORD`), plus the modules named in the
environment variable `KVFUZZ_OPS` (comma-separated module names, each defining `RECORD`), so a
worker subprocess, the pytest plugin and `kvfuzz fuzz` see the same ops.

The records load on first use (an op's modules import generic code that imports this one).
`CONTRACTS` is a read-only view of the records' contracts, the name every generic test and
engine walks; `record(op)` is the whole record.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import threading
from collections.abc import Mapping
from typing import Any, Callable, Iterator

from ..contract import Contract
from ..errors import BadInput
from .record import OpRecord, ShortCall

__all__ = ["CONTRACTS", "OpRecord", "RecordView", "ShortCall", "contract_label", "contract_status", "get_contract", "record",
           "records", "EXTERNAL_ENV"]

EXTERNAL_ENV = "KVFUZZ_OPS"

_records: dict[str, OpRecord] | None = None
_lock = threading.Lock()
_loading_in: int | None = None  # the thread loading the records


def _record_of(module_name: str, where: str) -> OpRecord:
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise BadInput(f"{where}: cannot import {module_name!r}: {type(exc).__name__}: {exc}") from None
    rec = getattr(module, "RECORD", None)
    if not isinstance(rec, OpRecord):
        raise BadInput(f"{where}: module {module_name!r} defines no RECORD (a kvfuzz.ops.OpRecord)")
    return rec


def _load() -> dict[str, OpRecord]:
    found = [_record_of(f"{__name__}.{m.name}", "kvfuzz.ops")
             for m in pkgutil.iter_modules(__path__) if m.ispkg]
    found.sort(key=lambda r: (r.order, r.name))
    external = [n.strip() for n in os.environ.get(EXTERNAL_ENV, "").split(",") if n.strip()]
    found += [_record_of(name, EXTERNAL_ENV) for name in external]
    out: dict[str, OpRecord] = {}
    for rec in found:
        if rec.name in out:
            raise BadInput(f"{EXTERNAL_ENV}: op {rec.name!r} is defined twice")
        out[rec.name] = rec
    return out


def records() -> dict[str, OpRecord]:
    """op name -> its record, in listing order (loaded once per process, by the first thread
    that asks; the others wait for it)."""
    global _records, _loading_in
    if _records is None:
        if _loading_in == threading.get_ident():  # an op's module asked for the registry while it loads
            raise RuntimeError("kvfuzz.ops: an op's module reads the op registry while it loads")
        with _lock:
            if _records is None:
                _loading_in = threading.get_ident()
                try:
                    _records = _load()
                finally:
                    _loading_in = None
    return _records


def record(op: str) -> OpRecord:
    """The record of `op`, or BadInput naming the known ops."""
    try:
        return records()[op]
    except KeyError:
        raise BadInput(f"unknown op {op!r}; known ops: {', '.join(records())} (an op outside kvfuzz is "
                       f"loaded through {EXTERNAL_ENV})") from None


class RecordView(Mapping):
    """A read-only mapping op name -> one field of its record, loaded on first use."""

    def __init__(self, field: Callable[[OpRecord], Any]):
        self._field = field

    def __getitem__(self, op: str) -> Any:
        return self._field(records()[op])

    def __iter__(self) -> Iterator[str]:
        return iter(records())

    def __len__(self) -> int:
        return len(records())

    def __repr__(self) -> str:
        return f"RecordView({list(self)})"


CONTRACTS: Mapping[str, Contract] = RecordView(lambda r: r.contract)


def get_contract(name: str) -> Contract:
    return record(name).contract


def contract_label(case) -> str:
    """The case's status as reports group findings: in_contract, stress, out_of_contract or
    must_refuse (Contract.label)."""
    return get_contract(case.op).label(case)


def contract_status(case) -> str:
    """The case's contract status as every report says it: `in contract`, `out of contract:
    RULE` or `must refuse: RULE` (Contract.status_text)."""
    return get_contract(case.op).status_text(case)
