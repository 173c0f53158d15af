"""The op record of num_kv_splits: its contract, generator, oracles, call bindings, release variants,
minimizer passes and presentation hooks, each in its own module beside this one."""

from ..record import NoPacking, OpRecord
from . import call, generate, minimize, present
from .contract import CONTRACT

RECORD = OpRecord(
    name="num_kv_splits",
    contract=CONTRACT,
    generator=generate.GENERATOR,
    call=call.CALL,
    generations=call.GENERATIONS,
    builtin="kvfuzz.kernels.num_kv_splits:get_num_kv_splits_triton",
    release_variants=call.RELEASE_VARIANTS,
    passes=minimize.PASSES,
    related_rows=present.related_rows,
    short_call=present.short_call,
    standalone=(call.__name__,),
    order=30,
    packing=NoPacking("one program reads the whole batch: each row's split count depends on the batch's "
                      "longest and shortest lengths"),
)
