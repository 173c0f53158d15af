"""The op record of trtllm_mha_kv_indices: its contract, generator, oracles, call bindings, release
variants, minimizer passes and presentation hooks, each in its own module beside this one."""

from ..record import POOL, ROWS, OpRecord, PackSpec
from . import call, generate, minimize, present
from .contract import CONTRACT

# programs per request row and page block: rows stacked, pool rows offset. A full_to_swa mapping is
# indexed by the slots page_table gets (slot // ps): each case's mapping is a block starting at a
# whole page, its slots moved to it, and page_table read back less the pages moved
PACKING = PackSpec(
    kinds=(("req_to_token", POOL), ("req_pool_indices", ROWS), ("seq_lens", ROWS), ("page_table", ROWS),
           ("swa_page_table", ROWS), ("full_to_swa", POOL)),
    indexes=(("req_pool_indices", "req_to_token"), ("req_to_token", "full_to_swa")),
    aligned=(("full_to_swa", "page_size"),),
    moved=(("page_table", "req_to_token", "page_size"),),
    moved_cells=lambda case, name: CONTRACT.cells(case)[name].required,  # a live page's cell: a slot's page
)

RECORD = OpRecord(
    name="trtllm_mha_kv_indices",
    contract=CONTRACT,
    generator=generate.GENERATOR,
    call=call.CALL,
    generations=call.GENERATIONS,
    builtin="kvfuzz.kernels.trtllm_mha_kv_indices:create_trtllm_mha_kv_indices_triton",
    source_file="trtllm_mha_page_table.py",
    release_variants=call.RELEASE_VARIANTS,
    passes=minimize.PASSES,
    value_bound=minimize.value_bound,
    related_rows=present.related_rows,
    short_call=present.short_call,
    standalone=(call.__name__,),
    order=63,
    packing=PACKING,
)
