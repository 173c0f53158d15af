"""The op record of aiter_ragged_page_table: its contract, generator, oracles, call bindings,
release variants, minimizer passes and presentation hooks, each in its own module beside this one
(what it shares with aiter_req_to_token_page_table: kvfuzz/ops/aiter_page_table_common.py)."""

from ..aiter_page_table_common import aiter_record
from . import call, generate, minimize, present
from .contract import CONTRACT

RECORD = aiter_record(CONTRACT, call, generate, minimize, present, order=64)
