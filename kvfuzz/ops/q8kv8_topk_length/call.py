"""How q8kv8_topk_length's entry point (`q8kv8_topk_length_from_indices`, SGLang 0.5.23) is
called (it returns its output, which kvfuzz copies into the case's tensor), its API generations,
and the contract variant of each release."""

from __future__ import annotations

from ...targets.calls import Generation, OpCall, tensor


CALL = OpCall(  # 0.5.23: returns the lengths instead of writing an output
    supplied={"indices": tensor("indices")},
    required=(("indices",),),
    neutral={},
    legacy=("indices",),
    returns="topk_length",
)

GENERATIONS = (
    Generation("0.5.23", "0.5.23", CALL.legacy, "new op; returns a new int32 tensor"),
)

# (first release, variant): the op appeared in 0.5.23
RELEASE_VARIANTS = (("0.5.23", "default"),)
