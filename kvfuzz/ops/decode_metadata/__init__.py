"""The op record of decode_metadata: its contract, generator, oracles, call bindings, release variants,
minimizer passes and presentation hooks, each in its own module beside this one."""

from ..record import POOL, ROWS, RUNNING, SHARED, OpRecord, PackSpec
from . import call, generate, minimize, present
from .contract import CONTRACT

# one program per request row (and page block); rows stacked, pool rows offset. The lengths' running
# sum is stacked too and read back less the sums of the cases before (packing.py's RUNNING); the
# page-step index table is read whole by every row, so cases pack only with equal ones (SHARED).
# Tables indexed by token ids never move: page_table holds token ids // page_size, so ids cannot
# be offset, and a mapping or v2p table they index cannot be stacked.
TOKEN_INDEXED = ("full_to_swa_index_mapping", "full_v2p", "swa_v2p")


def _refuse(case) -> str | None:
    held = [n for n in TOKEN_INDEXED if n in case.tensors]
    if held:
        return (f"{held[0]} is indexed by token ids, which page_table holds (// page_size): its rows cannot "
                "move, so it cannot stack")
    if "swa_src_table" in case.tensors:
        return "swa_src_table and req_to_token are two pools one index addresses: their blocks would have to coincide"
    return None


PACKING = PackSpec(
    kinds=(("cache_seqlens_int32", ROWS), ("cu_seqlens_k", RUNNING), ("page_table", ROWS), ("req_to_token", POOL),
           ("req_pool_indices", ROWS), ("strided_indices", SHARED), ("seq_lens", ROWS), ("swa_page_table", ROWS)),
    indexes=(("req_pool_indices", "req_to_token"),),
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
