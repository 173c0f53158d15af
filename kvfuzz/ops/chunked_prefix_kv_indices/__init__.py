"""The op record of chunked_prefix_kv_indices: its contract, generator, oracles, call bindings,
release variants, minimizer passes and presentation hooks, each in its own module beside this one
(what the three kv_indices ops share: kvfuzz/ops/kv_index_common.py)."""

from ..kv_index_common import kv_index_record
from ..record import POOL, PREFIX, ROWS, PackSpec
from . import call, generate, minimize, present
from .contract import CONTRACT

# one program per request: rows stacked, pool rows and chunk_kv_indices' spans offset
PACKING = PackSpec(
    kinds=(("req_to_token", POOL), ("req_pool_indices", ROWS), ("chunk_start_idx", ROWS), ("chunk_seq_lens", ROWS),
           ("chunk_cu_seq_lens", PREFIX), ("chunk_kv_indices", POOL)),
    indexes=(("req_pool_indices", "req_to_token"), ("chunk_cu_seq_lens", "chunk_kv_indices")),
)

RECORD = kv_index_record(CONTRACT, call, generate, minimize, present, order=61, packing=PACKING)
