"""The op record of decode_metadata: its contract, generator, oracles, call bindings, release variants,
minimizer passes and presentation hooks, each in its own module beside this one."""

import numpy as np

from ..record import POOL, ROWS, RUNNING, SHARED, OpRecord, PackSpec
from . import call, generate, minimize, present
from .contract import CONTRACT, flag, live_pages

# one program per request row (and page block); rows stacked, pool rows offset. The lengths' running
# sum is stacked too and read back less the sums of the cases before (packing.py's RUNNING); the
# page-step index table is read whole by every row, so cases pack only with equal ones (SHARED).
# The static SWA pool's token mapping is indexed by token ids: each case's mapping is a block
# starting at a whole page, its ids moved to it, and page_table (ids // page_size) read back less
# the pages moved (`moved`). v2p tables are indexed by page ids, and swa_src_table shares
# req_to_token's index: they do not pack.
UNPACKED = ("full_v2p", "swa_v2p", "swa_src_table")


def _refuse(case) -> str | None:
    held = [n for n in UNPACKED if n in case.tensors]
    if held and held[0] == "swa_src_table":
        return "swa_src_table and req_to_token are two pools one index addresses: their blocks would have to coincide"
    if held:
        return f"{held[0]} is indexed by page ids (token // page_size), which page_table holds: no pack rule moves them"
    return None


def _moved_cells(case, name: str):
    """page_table's cells that hold a token id // page_size (the ones that move with the ids):
    columns below max_seq_pages, but a zeroed tail (`zero_tail`), and none when the tables are
    skipped."""
    rows, width = case.tensors[name].shape
    col = np.arange(width)[None, :]
    cells = np.broadcast_to(col < case.scalars["max_seq_pages"], (rows, width)).copy()
    if flag(case, "skip_page_table"):
        cells[:] = False
    if flag(case, "zero_tail"):
        cells &= col < live_pages(case)[:, None]
    return cells


PACKING = PackSpec(
    kinds=(("cache_seqlens_int32", ROWS), ("cu_seqlens_k", RUNNING), ("page_table", ROWS), ("req_to_token", POOL),
           ("req_pool_indices", ROWS), ("strided_indices", SHARED), ("seq_lens", ROWS), ("swa_page_table", ROWS),
           ("full_to_swa_index_mapping", POOL)),
    indexes=(("req_pool_indices", "req_to_token"), ("req_to_token", "full_to_swa_index_mapping")),
    aligned=(("full_to_swa_index_mapping", "page_size"),),
    moved=(("page_table", "req_to_token", "page_size"),),
    moved_cells=_moved_cells,
    refuse=_refuse,
)

RECORD = OpRecord(
    name="decode_metadata",
    contract=CONTRACT,
    generator=generate.GENERATOR,
    call=call.CALL,
    generations=call.GENERATIONS,
    builtin="kvfuzz.kernels.decode_metadata:normal_decode_set_metadata",
    release_variants=call.RELEASE_VARIANTS,
    builtin_variant=call.BUILTIN_VARIANT,
    passes=minimize.PASSES,
    value_bound=minimize.value_bound,
    related_rows=present.related_rows,
    cell_sources=present.cell_sources,
    short_call=present.short_call,
    short_refuses=present.short_refuses,
    standalone=(call.__name__,),
    order=10,
    packing=PACKING,
)
