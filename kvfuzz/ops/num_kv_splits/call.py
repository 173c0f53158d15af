"""How num_kv_splits's entry point (`get_num_kv_splits_triton`, a bare `@triton.jit` kernel) is
called, its API generations, and the contract variant of each release. Standalone (the repro
script embeds it: the standard library and kvfuzz's standalone modules only)."""

from __future__ import annotations

from ...targets.calls import Generation, OpCall, optional_tensor, scalar, tensor


def sglang_max_num_seq(num_seq: int) -> int:
    """SGLang's MAX_NUM_SEQ: 256 below 256 sequences, else the next power of two."""
    return 256 if num_seq < 256 else 1 << (num_seq - 1).bit_length()


def _max_num_seq(t, s):
    return sglang_max_num_seq(s["num_seq"])


CALL = OpCall(
    supplied={
        "num_kv_splits_ptr": tensor("num_kv_splits"),  # SGLang's kernel names its pointers *_ptr
        "num_kv_splits": tensor("num_kv_splits"),
        "seq_lens_ptr": tensor("seq_lens"),
        "seq_lens": tensor("seq_lens"),
        **{name: scalar(name) for name in ("num_seq", "num_group", "num_head", "num_kv_head", "max_kv_splits",
                                            "device_core_count")},
        "MAX_NUM_SEQ": _max_num_seq,  # SGLang's triton backend: 256 below 256 sequences, else next power of 2
        "uneven_batch_ptr": optional_tensor("uneven_batch"),  # 0.5.23: an extra output flag (min < max length)
    },
    required=(("num_kv_splits_ptr", "num_kv_splits"), ("seq_lens_ptr", "seq_lens"), ("num_seq",), ("num_group",),
              ("num_head",), ("num_kv_head",), ("max_kv_splits",), ("device_core_count",)),
    neutral={},
    legacy=("num_kv_splits_ptr", "seq_lens_ptr", "num_seq", "num_group", "num_head", "num_kv_head",
            "max_kv_splits", "device_core_count"),
    legacy_kw_bare=("MAX_NUM_SEQ",),
    aliases={"num_kv_splits": "num_kv_splits_ptr", "seq_lens": "seq_lens_ptr"},
    optional={"uneven_batch": ("uneven_batch_ptr",)},
)

_SPLITS_0514 = CALL.legacy + ("MAX_NUM_SEQ",)
GENERATIONS = (
    Generation("0.5.14", "0.5.6-0.5.22", _SPLITS_0514, "the seed's kernel"),
    Generation("0.5.23", "0.5.23", _SPLITS_0514 + ("uneven_batch_ptr",),
               "uneven_batch_ptr (optional output flag): the case's uneven_batch tensor, or None"),
)

# (first release, variant) chosen automatically (kvfuzz/targets/releases.py). No release changed
# the zero-length behaviour (0.5.23 only added `uneven_batch_ptr`), so every release is judged by
# kvfuzz's stricter `default`, which reports SGLang's division by zero; `--variant sglang` judges
# by SGLang's own documented contract instead.
RELEASE_VARIANTS = (("0.5.6", "default"),)
