"""Cases for `aiter_ragged_page_table` (scatter_ragged_to_page_table_kernel).

SGLang's kernel runs one program per (request, block of 1024 pages) and takes the page size, SWA
on or off and BLOCK_SIZE as constexprs (`dest_stride` is a plain int, specialised by Triton on its
divisibility): a compile class fixes the page size (the backend's 16, 1, 64, and 32, 128 and 3, no
power of two), the page table's width W in pages (around the grid's block edges, 1023, 1024, 1025
and 2049 pages, as far as W * ps stays within 65536 tokens), SWA, the dtypes and the layouts
(swa_page_table shares page_table's). A case draws each request's tokens at the page edges (0, 1,
ps - 1, ps, ps + 1), at the block edges, in the row's last page and up to the row's W * ps tokens;
a base for kv_indptr and a tail past its last offset; spare rows of the tables (a CUDA-graph
buffer's); KV-pool slots where the kernel reads (up to int32's largest, 0 among them) and any int32
elsewhere (negative ones too); and, with SWA, a mapping of M entries (common: SGLang's ending with
-1, freed entries, the largest SWA slot, an odd first entry that only the lanes past the pages
read).

Production sizes are classes of their own, one class in sixteen (`ragged_variant_class`, the
campaign's class drawer): a context of 32768 to 163840 tokens (W = its pages, 32 to 160 blocks
of 1024 pages at page size 1) for one or a few requests, or a batch of 17 to 256 or past 256
(257-300) over 1 to 2049 pages; one or two requests to the row's end or at the grid's block
edges, the rest short. Every cell is judged; the CPU interpreter takes seconds on one.
"""

from __future__ import annotations

import numpy as np

from ...case import Case
from ...strategies import OpGenerator
from ...strategies.draw import CompileClass, Draw
from ...strategies.layouts import layout_class
from ...strategies.values import rng
from .. import aiter_page_table_common as common
from ..kv_index_common import batch_size, editable, laid_out, production_batch, relaid, strided_cells

OP = "aiter_ragged_page_table"
WIDTHS = (1, 2, 5, 64, 1023, 1024, 1025, 2049)  # W: pages per row
OUT_OF_CONTRACT = ("indptr_decreasing", "negative_indptr", "indptr_past_flat", *common.SHARED_VIOLATIONS)
ONE_D = ("kv_flat", "kv_indptr")


def ragged_class(d: Draw) -> CompileClass:
    ps = d.choice(common.PAGE_SIZES)
    widths = [w for w in WIDTHS if w * ps <= common.MAX_TOKENS] or [1]
    p = {
        "page_size": ps,
        "W": d.choice(widths),
        "bs": d.choice(("one", "few", "big")),
        "dtype:kv_flat": d.choice(("int32", "int64")),
        "dtype:kv_indptr": d.choice(("int32", "int64")),
    }
    for name in ONE_D:
        p[f"layout:{name}"] = layout_class(d, "in", 1, ("contiguous", "offset"))
    common.swa_class(d, p)
    return CompileClass.of(OP, p)


def ragged_variant_class(d: Draw, variant: str) -> CompileClass:
    """A class of the campaign: the base class, or one time in sixteen a production size (W the
    context's pages)."""
    p = dict(ragged_class(d).items)
    if common.production_class(d, p):
        p["W"] = -(-p.pop("C_tokens") // p["page_size"])
    return CompileClass.of(OP, p)


def ragged_in_class(d: Draw, k: CompileClass) -> Case:
    ps, W = k["page_size"], k["W"]
    production = k.get("size") == "production"
    bs = production_batch(d, k) if production else batch_size(d, k, big=24)
    g = rng(d.seed())
    cap = W * ps  # a request holds at most W pages
    lens = common.production_lengths(d, g, bs, cap, ps, W) if production else \
        common.class_lengths(d, g, bs, cap, ps, W)
    base = d.choice((0, 0, 0, 1, 7, 1024))
    ptr = base + np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    N = int(ptr[-1]) + d.choice((0, 0, 1, 5))
    values: dict[str, np.ndarray] = {}
    lo, top = common.slot_range(d, g, k, values)
    flat = g.integers(-(2**31), 2**31, size=N)  # what the kernel does not read: any int32
    read = strided_cells(ptr[:-1], lens, ps)
    flat[read] = common.live_slots(d, g, read.shape[0], lo, top)
    values.update({"kv_flat": flat, "kv_indptr": ptr})
    R, swa_R = common.table_rows(d, k, bs, (0, 0, 1, 3))
    shapes = {"kv_flat": (k["dtype:kv_flat"], (N,)), "kv_indptr": (k["dtype:kv_indptr"], (bs + 1,))}
    common.table_shapes(k, shapes, values, R, swa_R, W)
    return Case(OP, {"page_size": ps}, laid_out(k, shapes, values, {"swa_page_table": "page_table"}), values)


def ragged_violation(d: Draw, case: Case, k: CompileClass, kind: str | None = None) -> Case:
    t, v = editable(case)
    ps = case.scalars["page_size"]
    R, W = t["page_table"].shape
    swa_R = t["swa_page_table"].shape[0] if "swa_page_table" in t else R
    ptr = v["kv_indptr"]
    bs = ptr.shape[0] - 1
    kind = common.slot_kind(kind or d.choice(OUT_OF_CONTRACT), v)
    i = d.integer(0, bs - 1)

    def relength(n: int) -> None:
        """Request i's tokens n, the later offsets and kv_flat kept consistent (a new token holds slot 0)."""
        grow = n - int(ptr[i + 1] - ptr[i])
        ptr[i + 1:] += grow
        if grow > 0:
            v["kv_flat"] = np.insert(v["kv_flat"], int(ptr[i + 1]) - grow, np.zeros(grow, np.int64))
        elif grow < 0:
            v["kv_flat"] = np.delete(v["kv_flat"], np.arange(int(ptr[i + 1]), int(ptr[i + 1]) - grow))

    if kind == "indptr_decreasing":  # a negative length: kv_indptr[i + 1] < kv_indptr[i]
        ptr[i + 1] = ptr[i] - d.choice((1, ps + 1))
    elif kind == "negative_indptr":
        ptr[:] -= ptr[0] + d.choice((1, ps))
    elif kind == "indptr_past_flat":  # the last offsets past kv_flat: reads past it
        v["kv_flat"] = v["kv_flat"][:max(int(ptr[-1]) - d.integer(1, ps + 1), 0)]
        if int(ptr[-1]) == 0:
            ptr[-1] = 1
    elif kind == "page_table_too_narrow":  # more pages than the rows hold: written into the next row
        if int(ptr[i + 1] - ptr[i]) < 1:
            relength(1)
        lens = ptr[1:] - ptr[:-1]
        W = common.narrower(d, -(-int(lens.max()) // ps))
    elif kind == "page_table_too_few_rows":
        if d.boolean() or "swa_page_table" not in t:
            R = bs - 1
        else:
            swa_R = bs - 1
    else:  # a slot the kernel reads breaks its rule
        if int(ptr[i + 1] - ptr[i]) < 1:
            relength(1)
        n = int(ptr[i + 1] - ptr[i])
        v["kv_flat"][int(ptr[i]) + ps * d.integer(0, -(-n // ps) - 1)] = common.bad_slot(d, kind, v, ps)
    common.relaid_tables(k, t, R, swa_R, W)
    relaid(k, t, v, ("kv_flat", "kv_indptr", common.MAPPING))
    return Case(OP, case.scalars, t, v, meta={"violation": kind})


def _lens_and_slots(case: Case) -> tuple[list[int], np.ndarray | None]:
    ptr = case.values.get("kv_indptr")
    flat = case.values.get("kv_flat")
    ps = case.scalars.get("page_size")
    if ptr is None or flat is None or not isinstance(ps, int) or ps < 1:
        return [], None
    ptr = np.asarray(ptr, np.int64)
    flat = np.asarray(flat, np.int64)
    lens = (ptr[1:] - ptr[:-1]).tolist()
    read = strided_cells(ptr[:-1], np.where(ptr[:-1] >= 0, ptr[1:] - ptr[:-1], 0), ps)  # from offsets >= 0
    return lens, flat[read[read < flat.shape[0]]]


def ragged_features(case: Case) -> set[str]:
    lens, slots = _lens_and_slots(case)
    if not lens:
        return set()
    out = common.features(case, lens, slots)
    ptr = np.asarray(case.values["kv_indptr"])
    if int(ptr[0]) > 0:
        out.add("indptr_base")
    if case.tensors["kv_flat"].shape[0] > int(ptr[-1]):
        out.add("flat_tail")
    return out


def required_features() -> set[str]:
    return common.required_features() | {"indptr_base", "flat_tail"}


# Generic features (strategies.coverage.generic_features) every campaign must reach: a misaligned
# tensor, both dtypes of each index input
GENERIC_REQUIRED = {"misaligned"} | {f"dtype:{n}:{dt}" for n in ("kv_flat", "kv_indptr", common.MAPPING)
                                     for dt in ("int32", "int64")}


def all_required_features() -> set[str]:
    """Every feature a campaign of a few minutes must exercise for aiter_ragged_page_table."""
    return GENERIC_REQUIRED | required_features()


def ragged_class_features(k: CompileClass) -> set[str]:
    return common.reach_features(k["W"])


GENERATOR = OpGenerator(OP, ragged_class, ragged_in_class, ragged_violation, OUT_OF_CONTRACT, ragged_features,
                        all_required_features, ragged_class_features, variant_class=ragged_variant_class)
