"""The op record of swa_spec_page_table: its contract, generator, oracles, call bindings, release variants,
minimizer passes and presentation hooks, each in its own module beside this one."""

from ..record import OpRecord
from . import call, generate, minimize, present
from .contract import CONTRACT

RECORD = OpRecord(
    name="swa_spec_page_table",
    contract=CONTRACT,
    generator=generate.GENERATOR,
    call=call.CALL,
    generations=call.GENERATIONS,
    builtin="kvfuzz.kernels.swa_spec_page_table:prepare_swa_spec_page_table_triton",
    release_variants=call.RELEASE_VARIANTS,
    passes=minimize.PASSES,
    value_escape=minimize.value_escape,
    related_rows=present.related_rows,
    cell_sources=present.cell_sources,
    short_call=present.short_call,
    standalone=(call.__name__,),
    order=20,
)
