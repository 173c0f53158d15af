"""Cases for `q8kv8_topk_length` (q8kv8_topk_length_from_indices, SGLang 0.5.23).

A compile class fixes what SGLang's kernel specialises on: its scan block (512, 256 or 128, by
the width's divisibility), the integer class of the width `topk` and of the row stride (the
layout: contiguous, padded, offset, or one row repeated by stride 0), and the pointer's
alignment. A case draws the rows: all pads, full, and trailing pads ending on either side of a
block's edge, with -1 or other negative pads and 0 as a valid index.

One class in sixteen is a production class (`size: production`): DSA's top-k width 2048 (its
`index_topk`) over 256 to 1024 query rows (a decode or verify batch past 256; the kernel runs one
program per row), half the rows a full top-k (a context past 2048 tokens: the backward scan stops
in its first block), the rest short, scattered or all pads. The interpreter takes 4.6-18 s for
such a case on the CPU (256-1024 rows, 2 cores; an all-pad row scans all 16 of the builtin's
128-wide blocks).
"""

from __future__ import annotations

import numpy as np

from ...case import Case, TensorSpec
from ...strategies import OpGenerator
from ...strategies.draw import CompileClass, Draw
from ...strategies.layouts import LayoutClass, apply_broadcast, class_layout, layout_class, relayout
from ...strategies.values import LazyRng

OP = "q8kv8_topk_length"
# widths by (SGLang's block, Triton's integer class of the width)
WIDTHS = {"512": (512, 1024, 2048), "256": (256, 768, 1280), "128": (128, 384, 640), "div16": (16, 32, 48, 112, 272),
          "plain": (2, 3, 100, 127, 129, 200, 255, 257, 1000), "one": (1,), "zero": (0,)}
OUT_OF_CONTRACT = ("int64", "column_stride", "one_d")
PADS = (-1, -2, -(2**31))
PROD_WIDTH = 2048  # DSA's index_topk
PROD_ROWS = (256, 257, 512, 1024)  # s_q of a production batch


def block_of(k: int) -> int:
    return 512 if k % 512 == 0 else 256 if k % 256 == 0 else 128


def topk_class(d: Draw) -> CompileClass:
    width = d.choice(tuple(WIDTHS))
    lc = layout_class(d, "in", 2, ("contiguous", "offset", "padded", "broadcast"))
    if lc.kind == "broadcast":  # rows repeated; a zero column stride is out of contract
        lc = LayoutClass("broadcast", lc.offset, lc.slack, axis=0)
    p = {
        "width": width,
        "block": block_of(WIDTHS[width][0]),  # derived: what the cover must reach
        # no rows: an empty tensor's pointer has another alignment class than its layout's
        "rows": d.choice(("some", "some", "some", "none")),
        "layout:indices": lc,
        "layout:topk_length": layout_class(d, "out", 1, ("contiguous", "offset")),
    }
    return CompileClass.of(OP, p)


def topk_campaign_class(d: Draw) -> CompileClass:
    """A class of the campaign: the base class, or one time in sixteen a production batch."""
    k = topk_class(d)
    if d.integer(0, 15):
        return k
    p = dict(k.items)
    p.update({"size": "production", "width": "production", "block": block_of(PROD_WIDTH), "rows": "production"})
    return CompileClass.of(OP, p)


ROW_KINDS = ("trailing", "all_pad", "full", "scattered")
# a production batch's rows: mostly a full top-k (contexts past 2048 tokens dominate), some short
PROD_ROW_KINDS = ("full", "full", "full", "trailing", "scattered", "all_pad")


def _rows(d: Draw, lazy: LazyRng, S: int, K: int, block: int, kinds: tuple[str, ...] = ROW_KINDS) -> np.ndarray:
    """S rows of K int64 slots, each row's kind drawn from `kinds`.

    The Draw calls go row by row (pad, kind, then the last valid position of a partial row); the
    values are made for all rows at once, so a production batch (1024 rows of 2048) costs NumPy
    passes rather than a Python loop over its rows."""
    if S == 0 or K == 0:
        for _ in range(S):
            d.choice(PADS), d.choice(kinds)
        return np.zeros((S, K), np.int64)
    g = lazy()
    picks = g.integers(0, K, size=(2, S)).tolist()  # per row: a random last valid position, the zero's slot
    pads = np.empty(S, np.int64)
    lasts = np.empty(S, np.int64)  # each row's last valid position; -1: all pads
    scattered = np.zeros(S, bool)
    for i in range(S):
        pads[i] = d.choice(PADS)
        kind = d.choice(kinds)
        if kind == "all_pad":
            lasts[i] = -1
        elif kind == "full":
            lasts[i] = K - 1
        else:  # the last valid position, on the edges of the backward scan's blocks
            last = d.choice((0, K - 1, K - block, K - block - 1, K - block + 1, block - 1, block, K // 2,
                             picks[0][i]))
            lasts[i] = min(max(last, 0), K - 1)
            scattered[i] = kind == "scattered"
    # valid indices in [0, 2**31): each row a window of one random run, one slot of it 0
    run = g.integers(0, 2**31, size=2 * K)
    values = np.lib.stride_tricks.sliding_window_view(run, K)[g.integers(0, K + 1, size=S)]
    values[np.arange(S), picks[1]] = 0  # 0 is a valid index
    part = np.flatnonzero((lasts < K - 1) | scattered)  # rows with pads: full rows are done
    if part.size == 0:
        return values
    keep = np.arange(K) <= lasts[part, None]
    scat = np.flatnonzero(scattered[part])
    if scat.size:  # a random 30% of the slots before the last valid one, which stays
        keep[scat] &= g.random((scat.size, K)) < 0.3
        keep[scat, lasts[part[scat]]] = True
    values[part] = np.where(keep, values[part], pads[part, None])
    return values


def topk_in_class(d: Draw, k: CompileClass, variant: str = "default") -> Case:
    K = PROD_WIDTH if k["width"] == "production" else d.choice(WIDTHS[k["width"]])
    S = d.choice(PROD_ROWS) if k["rows"] == "production" else d.choice((1, 2, 3, 5, 8)) if k["rows"] == "some" else 0
    lazy = LazyRng(d.seed())
    block = block_of(K)
    spec, bcast = class_layout(k, "indices", "int32", (S, K))
    values = _rows(d, lazy, S, K, block, PROD_ROW_KINDS if k["rows"] == "production" else ROW_KINDS)
    out, _ = class_layout(k, "topk_length", "int32", (S,))
    return Case(OP, {}, {"indices": spec, "topk_length": out}, {"indices": apply_broadcast(values, bcast)},
                variant=variant)


def topk_violation(d: Draw, case: Case, k: CompileClass, kind: str | None = None) -> Case:
    t, v = dict(case.tensors), dict(case.values)
    S, K = t["indices"].shape
    kinds = [x for x in OUT_OF_CONTRACT if not (x == "column_stride" and K < 2)]
    if kind is None:
        kind = d.choice(kinds)
    elif kind not in kinds:
        return case
    if kind == "int64":
        t["indices"] = relayout(k.get("layout:indices", LayoutClass()), "int64", (S, K), v["indices"])
    elif kind == "column_stride":  # transposed: SGLang asserts a unit column stride
        t["indices"] = TensorSpec("int32", (S, K), (1, max(S, 1)), 0, max(S, 1) * K)
    elif kind == "one_d":
        flat = np.asarray(v["indices"]).reshape(-1)
        t["indices"] = TensorSpec.contiguous("int32", flat.shape)
        v["indices"] = flat
    return Case(OP, case.scalars, t, v, variant=case.variant, meta={"violation": kind})


def topk_features(case: Case) -> set[str]:
    spec = case.tensors["indices"]
    if len(spec.shape) != 2:
        return set()
    S, K = spec.shape
    block = block_of(K)
    out = {f"path:block{block}"}
    if S >= 256:
        out.add("size:production")
    if S > 256:
        out.add("bs:past_256")
    if S == 0:
        return out | {"empty"}
    if K == 0:
        return out | {"zero_width"}
    if K % 128:
        out.add("unaligned_width")
    idx = np.asarray(case.values["indices"])
    valid = idx >= 0
    lasts = (K - 1 - valid[:, ::-1].argmax(axis=1)).tolist()  # each row's last valid position
    for has_valid, last, low in zip(valid.any(axis=1).tolist(), lasts, idx.min(axis=1).tolist()):
        if not has_valid:
            out.add("all_pad_row")
            continue
        if last == K - block and K > block:
            out.add("edge:last_in_first_block_scanned")
        if last == K - block - 1:
            out.add("edge:last_in_second_block_scanned")
        if low < -1:
            out.add("negative_pad")
    return out


def class_combinations(k: CompileClass) -> set[str]:
    """Width 0 with rows (each row's length is then 1): a class the cover must pick on purpose."""
    return {"zero_width_with_rows"} if k["width"] == "zero" and k["rows"] == "some" else set()


def required_features() -> set[str]:
    return {"path:block512", "path:block256", "path:block128", "empty", "zero_width", "unaligned_width",
            "all_pad_row", "edge:last_in_first_block_scanned", "edge:last_in_second_block_scanned", "negative_pad"}


# Generic features (strategies.coverage.generic_features) every campaign must reach
GENERIC_REQUIRED = {"misaligned", "odd_stride", "broadcast:indices"}


def all_required_features() -> set[str]:
    """Every feature a campaign of a few minutes must exercise for q8kv8_topk_length."""
    return GENERIC_REQUIRED | required_features()


GENERATOR = OpGenerator(OP, topk_campaign_class, topk_in_class, topk_violation, OUT_OF_CONTRACT, topk_features,
                        all_required_features, class_combinations)
