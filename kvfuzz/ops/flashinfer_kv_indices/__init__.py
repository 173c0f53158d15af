"""The op record of flashinfer_kv_indices: its contract, generator, oracles, call bindings, release
variants, minimizer passes and presentation hooks, each in its own module beside this one
(what the three kv_indices ops share: kvfuzz/ops/kv_index_common.py)."""

from ..kv_index_common import kv_index_record
from ..record import POOL, PREFIX, ROWS, PackSpec
from . import call, generate, minimize, present
from .contract import CONTRACT

# one program per request (and block): rows stacked, pool rows and kv_indices' spans offset. With
# a token_mapping the kernel writes the mapping's values, so the table's ids index it as a pool:
# each case's mapping a block of its own, ids offset to it (a page-granular table's page ids in
# pages), -1 (written -1) kept. Without one the ids are what is written: they stay as drawn.
PACKING = PackSpec(
    kinds=(("req_to_token", POOL), ("req_pool_indices", ROWS), ("paged_kernel_lens", ROWS), ("kv_indptr", PREFIX),
           ("kv_start_idx", ROWS), ("kv_indices", POOL), ("token_mapping", POOL)),
    indexes=(("req_pool_indices", "req_to_token"), ("kv_indptr", "kv_indices"), ("req_to_token", "token_mapping")),
    keep_negative=("req_to_token",),
    units=(("req_to_token", "entry_page_size"),),
)

RECORD = kv_index_record(CONTRACT, call, generate, minimize, present, order=60, packing=PACKING)
