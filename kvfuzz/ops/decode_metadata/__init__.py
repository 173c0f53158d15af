"""The op record of decode_metadata: its contract, generator, oracles, call bindings, release variants,
minimizer passes and presentation hooks, each in its own module beside this one."""

from ..record import NoPacking, OpRecord
from . import call, generate, minimize, present
from .contract import CONTRACT

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
    packing=NoPacking("cu_seqlens_k is a running sum over the batch: each row's entry depends on every row "
                      "before it, so a packed case's entries would hold its neighbours' lengths"),
)
