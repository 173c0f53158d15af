"""Cases for `num_kv_splits` (get_num_kv_splits_triton): every comparison, min, max and
rounding step of its arithmetic approached from both sides.

A bare kernel: every scalar is a kernel argument, so a compile class fixes each of them (and
with them their integer classes), `MAX_NUM_SEQ` (a constexpr SGLang derives from `num_seq`)
with the integer class of `num_seq`, the dtype and both pointers' alignment. Cases draw
`num_seq` inside its class and the lengths. Batches reach past 1024 rows (MAX_NUM_SEQ 1024,
2048 and 4096), as the triton backend's eager decode launches them.

One class in sixteen is a production class (`size: production`): a decode batch of 256 to 1024
sequences (MAX_NUM_SEQ 256, 512 and 1024, the CUDA-graph batch sizes past 256) whose longest
length is a long context's, 32768 to 163840 tokens, at its edges or where `dcc * log2(mx / 64)`
crosses an integer there (the float step of the split rule). The base classes draw lengths up to
2^20 too, for any batch; a case of 256 sequences or more whose longest length lies in that range
counts as production-size wherever it comes from. One program, so a production case costs what
any other does.
"""

from __future__ import annotations

import numpy as np

from ...case import Case
from ...strategies import OpGenerator
from ...strategies.draw import CompileClass, Draw, PLAIN, fit
from ...strategies.layouts import class_layout, layout_class
from ...strategies.values import rng

OP = "num_kv_splits"
CORE_COUNTS = (132, 1, 78, 108, 16, 114)
OUT_OF_CONTRACT = ("negative_len", "len_overflow", "kv_heads_exceed_heads", "zero_max_splits")
# num_seq classes: (MAX_NUM_SEQ, Triton's integer class of num_seq), and their edges
NUM_SEQ = {"small": (1,), "plain": (2, 3, 255), "div16": (256, 16, 32, 64), "over": (257,),
           # batches SGLang's triton backend decodes past 512 rows: MAX_NUM_SEQ 1024, 2048 and 4096
           "at1024": (1024, 528, 1008), "past1024": (1025, 2047), "at4096": (4096, 2064),
           # production classes' batches: MAX_NUM_SEQ 256 (div16) and 512 (div16; "over" is its plain class)
           "at256": (256,), "at512": (512, 272, 496)}
# the longest length of a production batch: a long context's edges (log2(mx / 64) is 9 to 11.3)
PROD_LENS = (32768, 32769, 65535, 65536, 65537, 131072, 131072 + 1000, 163840)
PROD_RANGE = (32768, 163840)


def splits_class(d: Draw) -> CompileClass:
    num_head = d.choice((32, 1, 8, 16, 17, 28, 64, 128))
    p = {
        "num_seq": d.choice(("plain", "small", "div16", "over", "at1024", "past1024", "at4096")),
        "num_group": d.choice((1, 2, 4)),
        "num_head": num_head,
        "num_kv_head": d.choice([h for h in (1, 2, 4, 8, 16, 32, 64, 128) if h <= num_head]),
        "max_kv_splits": d.choice((8, 1, 2, 4, 16, 64)),
        "device_core_count": d.choice(CORE_COUNTS),
        "dtype:seq_lens": d.choice(("int32", "int64")),
        "layout:seq_lens": layout_class(d, "in", 1, ("contiguous", "offset")),
        "layout:num_kv_splits": layout_class(d, "out", 1, ("contiguous", "offset")),
        # SGLang 0.5.23's optional flag output: None or a tensor is a constexpr choice
        "uneven_batch": d.boolean(),
    }
    if p["uneven_batch"]:
        p["layout:uneven_batch"] = layout_class(d, "out", 1, ("contiguous", "offset"))
    return CompileClass.of(OP, p)


def splits_campaign_class(d: Draw) -> CompileClass:
    """A class of the campaign: the base class, or one time in sixteen a production batch."""
    k = splits_class(d)
    if d.integer(0, 15):
        return k
    p = dict(k.items)
    p["size"] = "production"
    p["num_seq"] = d.choice(("at256", "over", "at512", "at1024"))
    return CompileClass.of(OP, p)


def _num_seq(d: Draw, cls: str) -> int:
    if cls == "plain":
        return d.one_of(lambda: d.choice(NUM_SEQ["plain"]), lambda: fit(d.integer(2, 64), PLAIN))
    if cls == "over":
        return d.one_of(lambda: 257, lambda: fit(d.integer(258, 300), PLAIN))
    if cls == "past1024":  # MAX_NUM_SEQ 2048
        return d.one_of(lambda: d.choice(NUM_SEQ["past1024"]), lambda: fit(d.integer(1026, 2040), PLAIN))
    return d.choice(NUM_SEQ[cls])


def _max_len(d: Draw, dcc: int) -> int:
    """max(seq_lens) on the edges of the arithmetic."""
    kind = d.choice(("small", "log2_one", "float_step", "any"))
    if kind == "small":
        return d.integer(1, 16)
    if kind == "log2_one":  # log2(mx / 64) crosses 1.0 at mx = 128
        return 128 + d.integer(-2, 2)
    if kind == "float_step":  # dcc * log2(mx / 64) crosses an integer
        n = d.integer(dcc, 12 * dcc)
        return max(1, int(round(64 * 2 ** (n / dcc))) + d.integer(-1, 1))
    return d.integer(1, 1 << 20)


def _prod_max_len(d: Draw, dcc: int) -> int:
    """max(seq_lens) of a production batch: a long context's edges, or a float step among them."""
    if d.boolean():
        return d.choice(PROD_LENS)
    lo, hi = PROD_RANGE
    n = d.integer(9 * dcc, int(dcc * np.log2(hi / 64)))  # 64 * 2^(n / dcc) from 32768 to hi
    return min(max(lo, int(round(64 * 2 ** (n / dcc))) + d.integer(-1, 1)), hi)


def splits_in_class(d: Draw, k: CompileClass, variant: str = "default") -> Case:
    num_seq = _num_seq(d, k["num_seq"])
    dcc = k["device_core_count"]
    mx = _prod_max_len(d, dcc) if k.get("size") == "production" else _max_len(d, dcc)
    seed = d.seed()
    kind = d.choice(("equal", "ratio_edge", "spread", "zeros"))
    g = rng(seed) if kind != "equal" else None
    if kind == "equal":
        lens = np.full(num_seq, mx)
    elif kind == "ratio_edge":  # mx * 8 < mn * 10, from both sides
        mn = max(1, (mx * 8) // 10 + d.integer(-1, 1))
        lens = g.integers(mn, mx + 1, size=num_seq)
        lens[0], lens[-1] = mn, mx
    elif kind == "spread":
        lens = g.integers(1, mx + 1, size=num_seq)
        lens[g.integers(0, num_seq)] = mx
    else:  # zero lengths: defined by kvfuzz's default variant, out of contract for SGLang's
        lens = g.integers(0, mx + 1, size=num_seq)
        lens[g.integers(0, num_seq, size=max(1, num_seq // 3))] = 0
    fixed = k.memo.get(OP)  # the scalars the class fixes, once per class
    if fixed is None:
        fixed = k.memo[OP] = {name: k[name] for name in ("num_group", "num_head", "num_kv_head", "max_kv_splits",
                                                         "device_core_count")}
    scalars = {**fixed, "num_seq": num_seq}
    seq_spec, _ = class_layout(k, "seq_lens", k["dtype:seq_lens"], (num_seq,))
    out_spec, _ = class_layout(k, "num_kv_splits", "int32", (num_seq * k["num_group"],))
    tensors = {"num_kv_splits": out_spec, "seq_lens": seq_spec}
    if k["uneven_batch"]:
        tensors["uneven_batch"], _ = class_layout(k, "uneven_batch", "int32", (1,))
    return Case(OP, scalars, tensors, {"seq_lens": lens}, variant=variant)


def splits_violation(d: Draw, case: Case, k: CompileClass, kind: str | None = None) -> Case:
    kind = kind or d.choice(OUT_OF_CONTRACT)
    s, lens = dict(case.scalars), np.array(case.values["seq_lens"], dtype=np.int64)
    if kind == "negative_len":
        lens[0] = -d.choice((1, 1000))
    elif kind == "len_overflow":
        lens[0] = 2**31 - 1 - d.integer(0, 10)
    elif kind == "kv_heads_exceed_heads":
        s["num_kv_head"] = s["num_head"] + d.choice((1, 7))
    elif kind == "zero_max_splits":
        s["max_kv_splits"] = 0
    # every violating length fits int32: the tensor keeps its class's dtype and layout
    return Case(OP, s, case.tensors, {"seq_lens": lens}, variant=case.variant, meta={"violation": kind})


def splits_features(case: Case) -> set[str]:
    out: set[str] = set()
    n = case.scalars.get("num_seq")
    if n in (255, 256, 257, 1024, 1025):
        out.add(f"edge:num_seq:{n}")
    if isinstance(n, int) and n > 512:
        out.add(f"max_num_seq:{1 << (n - 1).bit_length()}")  # SGLang's MAX_NUM_SEQ past 512
    lens = case.values.get("seq_lens")
    if lens is None or not lens.size:
        return out
    if isinstance(n, int) and n >= 256 and PROD_RANGE[0] <= int(lens.max()) <= PROD_RANGE[1]:
        out.add("size:production")
        if n > 256:
            out.add("bs:past_256")
    shortest = int(lens.min())
    if shortest == 0:
        out.add("zero_length")
    if "uneven_batch" in case.tensors:  # the longest and shortest of the lengths >= 1 (1, 1 if none)
        hi = int(lens.max())
        hi, lo = (1, 1) if hi < 1 else (hi, shortest if shortest >= 1 else int(lens[lens >= 1].min()))
        out.add("uneven_batch:" + ("uneven" if hi * 8 >= lo * 10 else "even"))
    return out


def required_features() -> set[str]:
    return {"zero_length", "edge:num_seq:255", "edge:num_seq:256", "edge:num_seq:257", "edge:num_seq:1024",
            "edge:num_seq:1025",
            "uneven_batch:even", "uneven_batch:uneven"}


# Generic features (strategies.coverage.generic_features) every campaign must reach (the kernel takes no strides:
# its contract wants unit strides, so an odd stride is only an out-of-contract case)
GENERIC_REQUIRED = {"misaligned", "dtype:seq_lens:int32", "dtype:seq_lens:int64"}


def all_required_features() -> set[str]:
    """Every feature a campaign of a few minutes must exercise for num_kv_splits."""
    return GENERIC_REQUIRED | required_features()


GENERATOR = OpGenerator(OP, splits_campaign_class, splits_in_class, splits_violation, OUT_OF_CONTRACT, splits_features,
                        all_required_features)
