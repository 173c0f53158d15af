"""The op record of trtllm_mha_kv_indices: its contract, generator, oracles, call bindings, release
variants, minimizer passes and presentation hooks, each in its own module beside this one."""

from ..record import POOL, ROWS, OpRecord, PackSpec
from . import call, generate, minimize, present
from .contract import CONTRACT

# programs per request row and page block: rows stacked, pool rows offset; a full_to_swa mapping
# is shared by every row (not packed)
PACKING = PackSpec(
    kinds=(("req_to_token", POOL), ("req_pool_indices", ROWS), ("seq_lens", ROWS), ("page_table", ROWS),
           ("swa_page_table", ROWS)),
    indexes=(("req_pool_indices", "req_to_token"),),
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
