"""The op record of trtllm_mha_graph_metadata: its contract, generator, oracles, call bindings, release
variants, minimizer passes and presentation hooks, each in its own module beside this one."""

from ..record import OpRecord
from . import call, generate, minimize, present
from .contract import CONTRACT

RECORD = OpRecord(
    name="trtllm_mha_graph_metadata",
    contract=CONTRACT,
    generator=generate.GENERATOR,
    call=call.CALL,
    generations=call.GENERATIONS,
    builtin="kvfuzz.kernels.trtllm_mha_graph_metadata:update_trtllm_mha_graph_metadata",
    source_file="trtllm_mha_graph_metadata.py",
    release_variants=call.RELEASE_VARIANTS,
    passes=minimize.PASSES,
    value_bound=minimize.value_bound,
    related_rows=present.related_rows,
    short_call=present.short_call,
    standalone=(call.__name__,),
    order=64,
)
