"""The op record of chunked_prefix_kv_indices: its contract, generator, oracles, call bindings,
release variants, minimizer passes and presentation hooks, each in its own module beside this one
(what the three kv_indices ops share: kvfuzz/ops/kv_index_common.py)."""

from ..kv_index_common import kv_index_record
from . import call, generate, minimize, present
from .contract import CONTRACT

RECORD = kv_index_record(CONTRACT, call, generate, minimize, present, order=61)
