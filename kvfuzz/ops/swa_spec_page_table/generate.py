"""Cases for `swa_spec_page_table` (prepare_swa_spec_page_table_triton).

SGLang's kernel takes the widths of the A and B tables (`LEN_A`, `LEN_B`) and the repeat
step `R` as constexprs: a compile class fixes them exactly, with the dtypes, the layout
classes and the integer class of the destination's row length. Cases draw the A lengths at
every position class around the 256-column block edges, the B lengths, and the values.

`R` is SGLang's `speculative_num_draft_tokens`: 1 to 4, and the larger draft trees EAGLE's
top-k > 1 verify passes (5, 8, 16, 64). `LEN_A` is the width of the batch's page table: the
block edges up to 520, and wider tables (768 to 4097). Production sizes are classes of their
own, one class in sixteen: `LEN_A` 32768 to 131329 columns (a 128K context in pages of one
token, and past it), one request or two to three, `R` 1 to 4, the A lengths at the table's end,
the block edges and the 8192-column multiples; or a batch of 256 to 1024 requests (SGLang's
verify batches past 256, `bs * R` expanded rows: the grid's first axis) over a table of at most
257 columns. The interpreter launches one program per expanded row and 256-column block, so a
production case takes a few seconds on the CPU.
"""

from __future__ import annotations

import functools

import numpy as np

from ...case import Case, TensorSpec
from ...strategies import OpGenerator
from ...strategies.draw import DIV16, ONE, PLAIN, ZERO, CompileClass, Draw, narrower, width
from ...strategies.layouts import LayoutClass, apply_broadcast, class_layout, layout_class, relayout
from ...strategies.values import rng

OP = "swa_spec_page_table"
BLOCK = 256
A_WIDTHS = (8, 1, 0, 255, 256, 257, 300, 513, 520, 768, 1024, 1025, 4097)  # LEN_A: below, at and past the block edges
REPEATS = (1, 2, 3, 4, 5, 8, 16, 64)  # speculative_num_draft_tokens: chains, then top-k > 1 draft trees
PROD_A_WIDTHS = (32768, 65536, 131072, 131072 + BLOCK + 1)  # LEN_A of a production context (pages of one token)
PROD_EDGES = (8191, 8192, 8193, 32768, 65536, 131072)
PROD_BATCHES = (256, 257, 512, 1024)  # requests of a production batch
BATCH_A_WIDTHS = (8, 1, 0, 255, 256, 257)  # LEN_A of a production batch: one or two blocks a row
OUT_OF_CONTRACT = ("dst_too_narrow", "la_past_a", "lb_past_b", "negative_len", "seq_len_b_count", "dst_rows")
NAMES = ("page_table_dst", "page_table_a", "page_table_b", "seq_len_a", "seq_len_b")


def boundary_values(block: int = BLOCK) -> list[int]:
    """A-part lengths at every position class relative to a block edge."""
    return [0, 1, block - 1, block, block + 1, 2 * block - 1, 2 * block, 2 * block + 1]


def spec_class(d: Draw) -> CompileClass:
    production = d.integer(0, 15) == 0
    R = d.integer(1, 4) if production else d.choice(REPEATS)
    p = {
        "R": R, "WA": d.choice(PROD_A_WIDTHS if production else A_WIDTHS),
        "WB": d.choice((R, R + 1, 1, BLOCK, BLOCK + 1)),
        "bs": d.choice((PLAIN, ONE)),  # one request or several (see decode_class on row counts)
        "W": d.choice((PLAIN, DIV16, ONE, ZERO)),  # ONE, ZERO: a destination of 1 or 0 columns
        "dtype:seq_len_a": d.choice(("int32", "int64")), "dtype:seq_len_b": d.choice(("int32", "int64")),
    }
    for name in NAMES:
        p[f"layout:{name}"] = layout_class(d, "out" if name == "page_table_dst" else "in",
                                           2 if name.startswith("page_table") else 1)
    if production:
        p["size"] = "production"
        if d.integer(0, 2) == 0:  # a batch past 256 over a short table
            p["bs"], p["WA"] = "past", d.choice(BATCH_A_WIDTHS)
    return CompileClass.of(OP, p)


@functools.cache
def _edges_upto(WA: int) -> tuple[int, ...]:
    edges = boundary_values() + (list(PROD_EDGES) if WA in PROD_A_WIDTHS else [])
    return tuple(x for x in edges if x <= WA) or (0,)


def _la(d: Draw, WA: int) -> int:
    return d.one_of(lambda: d.choice(_edges_upto(WA)), lambda: WA, lambda: d.integer(0, WA))


def spec_in_class(d: Draw, k: CompileClass) -> Case:
    R, WA, WB = k["R"], k["WA"], k["WB"]
    bs = 1 if k["bs"] == ONE else d.choice(PROD_BATCHES) if k["bs"] == "past" else d.integer(2, 3)
    M = bs * R
    g = rng(d.seed())
    la = np.array([_la(d, WA) for _ in range(bs)], dtype=np.int64)
    # lb: 0, full, or anything in between; the A/B boundary lands where la puts it
    lb_mode = d.choice(("full", "zero", "random", "edge"))
    if lb_mode == "full":
        lb = np.full(M, WB)
    elif lb_mode == "zero":
        lb = np.zeros(M, dtype=np.int64)
    elif lb_mode == "random":
        lb = g.integers(0, WB + 1, size=M)
    else:  # la + lb exactly on a block edge
        la_row = la.tolist()
        lb = np.array([min(max(BLOCK - la_row[m // R] % BLOCK, 0), WB) for m in range(M)], dtype=np.int64)
    if k["W"] in (ONE, ZERO):  # a destination of one column or none: at most that to write
        la[:] = 0
        lb = np.minimum(lb, 1 if k["W"] == ONE else 0)
    la_row, lb_row = la.tolist(), lb.tolist()
    total = max(la_row[m // R] + lb_row[m] for m in range(M))  # la repeated R times, plus lb
    W = width(total + d.choice((0, 0, 1, 5, BLOCK)), k["W"])
    shapes = {
        "page_table_dst": ("int32", (M, W)),
        "page_table_a": ("int32", (bs, WA)),
        "page_table_b": ("int32", (M, WB)),
        "seq_len_a": (k["dtype:seq_len_a"], (bs,)),
        "seq_len_b": (k["dtype:seq_len_b"], (M,)),
    }
    tensors, bcast = {}, {}
    for name, (dt, shape) in shapes.items():
        tensors[name], bcast[name] = class_layout(k, name, dt, shape)
    big = d.choice((1 << 16, 1 << 31))
    values = {
        "page_table_a": g.integers(0, big, size=(bs, WA)) if WA else np.zeros((bs, 0), dtype=np.int64),
        "page_table_b": -1 - g.integers(0, big, size=(M, WB)),  # negative: B cells tell apart from A
        "seq_len_a": la,
        "seq_len_b": lb,
    }
    for name in values:
        if bcast[name] is not None:
            values[name] = apply_broadcast(values[name], bcast[name])
    # a stride-0 length vector holds one value: stay in contract by widening dst in its class
    if bcast["seq_len_a"] is not None or bcast["seq_len_b"] is not None:  # else W >= total already
        la_row, lb_row = values["seq_len_a"].tolist(), values["seq_len_b"].tolist()
        total = max([0, *(la_row[m // R] + lb_row[m] for m in range(M))])
        if total > W:
            tensors["page_table_dst"] = class_layout(k, "page_table_dst", "int32", (M, width(total, k["W"])))[0]
    return Case(OP, {"speculative_num_draft_tokens": R}, tensors, values)


def spec_violation(d: Draw, case: Case, k: CompileClass, kind: str | None = None) -> Case:
    t, v = dict(case.tensors), dict(case.values)
    bs, M = t["seq_len_a"].shape[0], t["seq_len_b"].shape[0]
    la, lb = np.array(v["seq_len_a"], dtype=np.int64), np.array(v["seq_len_b"], dtype=np.int64)
    kind = kind or d.choice(OUT_OF_CONTRACT)

    def relaid(name: str, shape: tuple[int, ...], values=None) -> TensorSpec:
        return relayout(k.get(f"layout:{name}", LayoutClass()), t[name].dtype, shape, values)

    if kind == "dst_too_narrow":
        # the overflowing row is the last one, so a write past its end leaves the tensor
        la[-1] = max(la[-1], 1)
        total = int(la[-1] + lb[-1])
        t["page_table_dst"] = relaid("page_table_dst", (M, narrower(total - d.integer(1, total), k["W"])))
    elif kind == "la_past_a":
        la[d.integer(0, bs - 1)] = t["page_table_a"].shape[1] + d.choice((1, 300))
    elif kind == "lb_past_b":
        lb[d.integer(0, M - 1)] = t["page_table_b"].shape[1] + d.choice((1, 300))
    elif kind == "negative_len":
        la[0] = -d.choice((1, 257))
    elif kind == "seq_len_b_count":
        lb = lb[:-1] if M > 1 else np.concatenate([lb, lb])
    elif kind == "dst_rows":  # fewer rows than bs * R
        t["page_table_dst"] = relaid("page_table_dst", (M - 1, t["page_table_dst"].shape[1]))
    t["seq_len_a"] = relaid("seq_len_a", la.shape, la)
    t["seq_len_b"] = relaid("seq_len_b", lb.shape, lb)
    v["seq_len_a"], v["seq_len_b"] = la, lb
    return Case(OP, case.scalars, t, v, meta={"violation": kind})


def spec_features(case: Case) -> set[str]:
    """Block paths taken and edges hit, per expanded row (the seed's three code paths)."""
    R = case.scalars.get("speculative_num_draft_tokens")
    la_all, lb_all = case.values.get("seq_len_a"), case.values.get("seq_len_b")
    out: set[str] = set()
    if not isinstance(R, int) or R < 1 or la_all is None or lb_all is None:
        return out
    if R > 4:
        out.add("repeat:draft_tree")  # REPEAT_STEP past 4: EAGLE's top-k > 1 draft trees
    a = case.tensors.get("page_table_a")
    if a is not None and len(a.shape) == 2 and a.shape[1] > 520:
        out.add("size:production" if a.shape[1] >= 32768 else "len_a:wide")
    if la_all.size >= 256:
        out.add("size:production")
    if la_all.size > 256:
        out.add("bs:past_256")
    la_row, lb_row = la_all.tolist(), lb_all.tolist()
    for m in range(min(lb_all.size, la_all.size * R)):
        la, lb = la_row[m // R], lb_row[m]
        if la < 0 or lb < 0:
            continue
        if la == 0:
            out.add("zero_a")
        if lb == 0:
            out.add("zero_b")
        if la in _EDGES:
            out.add(f"edge:la:{la}")
        if la + lb in _EDGES:
            out.add(f"edge:total:{la + lb}")
        # the row's blocks [start, start + BLOCK) for start < la + lb: before la, across it, past it
        if la > BLOCK:
            out.add("block:all_a")
        if la > 0:
            out.add("block:mixed")
        if lb > 0 and -(-la // BLOCK) * BLOCK < la + lb:
            out.add("block:all_b")
    return out


_EDGES = (BLOCK - 1, BLOCK, BLOCK + 1)


def required_features() -> set[str]:
    out = {"zero_a", "zero_b", "block:all_a", "block:all_b", "block:mixed"}
    return out | {f"edge:{w}:{BLOCK + e}" for w in ("la", "total") for e in (-1, 0, 1)}


# Generic features (strategies.coverage.generic_features) every campaign must reach
GENERIC_REQUIRED = {"misaligned", "odd_stride", *(f"dtype:{n}:{dt}" for n in ("seq_len_a", "seq_len_b")
                                                       for dt in ("int32", "int64"))}


def all_required_features() -> set[str]:
    """Every feature a campaign of a few minutes must exercise for swa_spec_page_table."""
    return GENERIC_REQUIRED | required_features()


GENERATOR = OpGenerator(OP, spec_class, spec_in_class, spec_violation, OUT_OF_CONTRACT, spec_features,
                        all_required_features)
