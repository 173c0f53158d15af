"""One contract per op; `CONTRACTS` is the registry every generic test and engine walks."""

from . import decode_metadata, draft_extend_metadata, num_kv_splits, q8kv8_topk_length, swa_spec_page_table
from ..contract import Contract

CONTRACTS: dict[str, Contract] = {
    m.CONTRACT.name: m.CONTRACT for m in (decode_metadata, swa_spec_page_table, num_kv_splits,
                                          draft_extend_metadata, q8kv8_topk_length)
}


def get_contract(name: str) -> Contract:
    try:
        return CONTRACTS[name]
    except KeyError:
        from ..errors import BadInput

        raise BadInput(f"unknown op {name!r}; known ops: {', '.join(CONTRACTS)}") from None


def contract_status(case) -> str:
    """The case's contract status as every report says it: `in contract`, `out of contract:
    RULE` or `must refuse: RULE` (Contract.status_text)."""
    return get_contract(case.op).status_text(case)
