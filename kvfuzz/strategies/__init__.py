"""Hypothesis strategies that make `Case`s, one family per op (public API).

`in_contract(op)` leans on where such kernels break: zero pages and empty parts, block
edges, independent non-contiguous layouts on every tensor, odd values. `out_of_contract(op)`
applies one violation a target must refuse, or at least survive without touching memory
outside its tensors. `cases(op)` mixes the two.
"""

from __future__ import annotations

from hypothesis import strategies as st

from .decode import decode_cases, decode_out_of_contract
from .layouts import layouts
from .spec import spec_cases, spec_out_of_contract
from .splits import splits_cases, splits_out_of_contract

__all__ = [
    "cases", "in_contract", "out_of_contract", "layouts",
    "decode_cases", "decode_out_of_contract", "spec_cases", "spec_out_of_contract",
    "splits_cases", "splits_out_of_contract",
]

_IN = {"decode_metadata": decode_cases, "swa_spec_page_table": spec_cases, "num_kv_splits": splits_cases}
_OUT = {"decode_metadata": decode_out_of_contract, "swa_spec_page_table": spec_out_of_contract,
        "num_kv_splits": splits_out_of_contract}


def in_contract(op: str) -> st.SearchStrategy:
    return _IN[op]()


def out_of_contract(op: str) -> st.SearchStrategy:
    return _OUT[op]()


def cases(op: str, in_contract_only: bool = False) -> st.SearchStrategy:
    """In-contract cases, and (unless `in_contract_only`) one case in five out of contract."""
    if in_contract_only:
        return in_contract(op)
    return st.integers(0, 4).flatmap(lambda k: out_of_contract(op) if k == 4 else in_contract(op))
