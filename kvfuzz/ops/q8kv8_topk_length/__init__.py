"""The op record of q8kv8_topk_length: its contract, generator, oracles, call bindings, release variants,
minimizer passes and presentation hooks, each in its own module beside this one."""

from ..record import ROWS, OpRecord, PackSpec
from . import call, generate, minimize, present
from .contract import CONTRACT

RECORD = OpRecord(
    name="q8kv8_topk_length",
    contract=CONTRACT,
    generator=generate.GENERATOR,
    call=call.CALL,
    generations=call.GENERATIONS,
    builtin="kvfuzz.kernels.q8kv8_topk_length:q8kv8_topk_length_from_indices",
    release_variants=call.RELEASE_VARIANTS,
    passes=minimize.PASSES,
    related_rows=present.related_rows,
    short_call=present.short_call,
    standalone=(call.__name__,),
    order=50,
    # one program per row: the rows of indices and topk_length stacked
    # packed 16 a launch on a GPU by default: there its packed pass checked five times the unpacked
    # (benchmarks/raw/h100-lean-packs.json: a batch of lone cases is bound by the device's synchronisation)
    packing=PackSpec(kinds=(("indices", ROWS), ("topk_length", ROWS)), default=(("cuda", 16),)),
)
