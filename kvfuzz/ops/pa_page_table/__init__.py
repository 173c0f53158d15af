"""The op record of pa_page_table: its contract, generator, oracles, call bindings, release
variants, minimizer passes and presentation hooks, each in its own module beside this one."""

from ..record import OpRecord
from . import call, generate, minimize, present
from .contract import CONTRACT

PA_FILE = "pa_page_table.py"  # the release's kernel file, by its name in kvfuzz's cache (targets/releases.py)

RECORD = OpRecord(
    name="pa_page_table",
    contract=CONTRACT,
    generator=generate.GENERATOR,
    call=call.CALL,
    generations=call.GENERATIONS,
    builtin="kvfuzz.kernels.pa_page_table:_build_pa_page_table",
    source_file=PA_FILE,
    release_variants=call.RELEASE_VARIANTS,
    passes=minimize.PASSES,
    value_bound=minimize.value_bound,
    related_rows=present.related_rows,
    short_call=present.short_call,
    standalone=(call.__name__,),
    order=64,
)
