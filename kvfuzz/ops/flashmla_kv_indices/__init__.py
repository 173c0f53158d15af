"""The op record of flashmla_kv_indices: its contract, generator, oracles, call bindings,
release variants, minimizer passes and presentation hooks, each in its own module beside this one
(what the three kv_indices ops share: kvfuzz/ops/kv_index_common.py)."""

from ..kv_index_common import kv_index_record
from ..record import POOL, ROWS, PackSpec
from . import call, generate, minimize, present
from .contract import CONTRACT

# programs per request row and page block: rows stacked (a kv_indices with rows past the batch,
# untouched, does not pack: its rows are not the grid's), pool rows offset; a v2p table is shared
PACKING = PackSpec(
    kinds=(("req_to_token", POOL), ("req_pool_indices", ROWS), ("paged_kernel_lens", ROWS), ("kv_start_idx", ROWS),
           ("kv_indices", ROWS)),
    indexes=(("req_pool_indices", "req_to_token"),),
)

RECORD = kv_index_record(CONTRACT, call, generate, minimize, present, order=62, packing=PACKING)
