"""The op record of draft_extend_metadata: its contract, generator, oracles, call bindings, release variants,
minimizer passes and presentation hooks, each in its own module beside this one."""

from ..record import OpRecord
from ..decode_metadata import minimize as decode_minimize, present as decode_present
from . import call, generate, minimize, present
from .contract import CONTRACT

RECORD = OpRecord(
    name="draft_extend_metadata",
    contract=CONTRACT,
    generator=generate.GENERATOR,
    call=call.CALL,
    generations=call.GENERATIONS,
    builtin="kvfuzz.kernels.draft_extend_metadata:draft_extend_set_metadata",
    release_variants=call.RELEASE_VARIANTS,
    passes=minimize.PASSES,
    value_bound=decode_minimize.value_bound,  # the same index-valued inputs as decode's
    related_rows=decode_present.related_rows,  # reads its inputs as decode does
    cell_sources=decode_present.cell_sources,
    short_call=present.short_call,
    standalone=(call.__name__,),
    order=40,
)
