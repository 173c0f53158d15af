"""Cases for `aiter_req_to_token_page_table` (scatter_req_to_token_to_page_table_kernel).

SGLang's kernel runs one program per (request, block of 1024 pages) and takes DRAFT_NUM, the page
size, SWA on or off and BLOCK_SIZE as constexprs (the two row strides are plain ints, specialised
by Triton on their divisibility): a compile class fixes the draft tokens (the verify's 4, 1, 2, 3,
8, 16 and the extend's 0), the page size (the backend's 16, 1, 64, and 32, 128 and 3, no power of
two), the table's width C (a row of 1, 2, 5, 64 pages or around the grid's block edges, 1023,
1024, 1025, 2049 pages, as far as it stays within 65536 tokens; its last page full or holding one
token; none, one or 4 + D columns more), page_table's width W (as the backend sizes it,
ceil(context_len / ps) for a table 4 + D columns wider than the context; the row's pages; fewer;
more, past the grid's next block) and layout (swa_page_table shares it), SWA, the dtypes and the
layouts. A case draws each request's tokens seq_lens[i] + D at the page edges (0, 1, ps - 1, ps,
ps + 1; at least D), the block edges, the last page page_table holds and the row's end; its pool
row (the first and last rows of the pool among them); spare rows of the tables; KV-pool slots
where the kernel reads (up to int32's largest, 0 among them; negative ones only in cells it does
not read); and, with SWA, a mapping of M entries (common to both ops).

Production sizes are classes of their own, one class in sixteen (`r2t_variant_class`, the
campaign's class drawer): a context of 32768 to 163840 tokens (C = context + 4 + D columns,
page_table as the backend sizes it or the row's pages: 32 to 160 blocks of 1024 pages at page
size 1) for one or a few requests, or a batch of 17 to 256 or past 256 (257-300) over 1 to 2049
pages; one or two requests to the row's end or at the grid's block edges, the rest short. Every cell is
judged; the CPU interpreter takes seconds on one.
"""

from __future__ import annotations

import numpy as np

from ...case import Case
from ...strategies import OpGenerator
from ...strategies.draw import CompileClass, Draw
from ...strategies.layouts import layout_class
from ...strategies.values import rng
from .. import aiter_page_table_common as common
from ..kv_index_common import batch_size, editable, generic_required, laid_out, last_pool_row, pool_rows, pool_size, \
    production_batch, relaid, strided_rows, table_layout, token_table

OP = "aiter_req_to_token_page_table"
DRAFTS = (4, 0, 1, 2, 3, 8, 16)  # DRAFT_NUM: the verify's draft tokens, the extend's 0
ROW_PAGES = (1, 2, 5, 64, 1023, 1024, 1025, 2049)  # the pages of req_to_token's row, C ~ pages * ps
OUT_OF_CONTRACT = ("pool_index_out_of_range", "past_row", "negative_len", *common.SHARED_VIOLATIONS)
ONE_D = ("req_pool_indices", "seq_lens")


def pages(n: int, ps: int) -> int:
    return -(-n // ps)


def _width(mode: str, C: int, ps: int, D: int) -> int:
    """page_table's width W, as the backend sizes it for a table of width C."""
    row = pages(C, ps)
    if mode == "backend":  # max_blocks = ceil(context_len / ps), req_to_token = context_len + 4 + D columns
        return max(pages(max(C - 4 - D, 1), ps), 1)
    if mode == "short":  # fewer pages than the row holds: lengths stop at W * ps
        return max(1, row // 2)
    if mode == "wide":  # more than the row's pages, into the grid's next block
        return row + common.BLOCK_SIZE
    return max(row, 1)  # "row": the extend's max_blocks for a request filling the row


def r2t_class(d: Draw) -> CompileClass:
    table = table_layout(d)
    D = d.choice(DRAFTS)
    ps = d.choice(common.PAGE_SIZES)
    row = d.choice([w for w in ROW_PAGES if w * ps <= common.MAX_TOKENS] or [1])
    # C: the row's pages, its last one full or holding one token, and none, one or 4 + D more
    # columns (SGLang's context + 4 + D); the drafts fit in the row
    C = max(row * ps - d.choice((0, ps - 1)) + d.choice((0, 1, 4 + D)), D, 1)
    p = {
        "draft_num": D,
        "page_size": ps,
        "C": C,
        "W": _width(d.choice(("backend", "row", "short", "wide")), C, ps, D),
        "bs": d.choice(("one", "few", "big")),
        "dtype:req_pool_indices": d.choice(("int64", "int32")),
        "dtype:seq_lens": d.choice(("int64", "int32")),
        "layout:req_to_token": table,
    }
    for name in ONE_D:
        p[f"layout:{name}"] = layout_class(d, "in", 1, ("contiguous", "offset"))
    common.swa_class(d, p)
    return CompileClass.of(OP, p)


def r2t_variant_class(d: Draw, variant: str) -> CompileClass:
    """A class of the campaign: the base class, or one time in sixteen a production size."""
    p = dict(r2t_class(d).items)
    if common.production_class(d, p):
        ps, D = p["page_size"], p["draft_num"]
        p["C"] = p.pop("C_tokens") + 4 + D
        p["W"] = _width(d.choice(("backend", "row")), p["C"], ps, D)
    return CompileClass.of(OP, p)


def _widths(k: CompileClass) -> tuple[int, int]:
    """(page_table's width W, with room for the drafts' pages; a request's tokens at most)."""
    D, ps, C = k["draft_num"], k["page_size"], k["C"]
    W = max(k["W"], pages(D, ps))
    return W, min(C, W * ps)  # a request's tokens (drafts included) fit its row and W pages


def r2t_in_class(d: Draw, k: CompileClass) -> Case:
    D, ps, C = k["draft_num"], k["page_size"], k["C"]
    W, cap = _widths(k)
    production = k.get("size") == "production"
    bs = production_batch(d, k) if production else batch_size(d, k, big=24)
    P = pool_size(d, k)
    g = rng(d.seed())
    kv = common.production_lengths(d, g, bs, cap, ps, W, D) if production else \
        common.class_lengths(d, g, bs, cap, ps, W, D)
    rows = pool_rows(d, g, P, bs)
    values: dict[str, np.ndarray] = {}
    lo, top = common.slot_range(d, g, k, values)
    table = token_table(d, g, P, C, top)
    n_read = pages(max(kv, default=0), ps)  # the columns of every page read: every ps-th up to the longest
    if n_read:  # the cells the kernel reads hold KV-pool slots, in every row (a repeated row too)
        table[:, 0:n_read * ps:ps] = common.live_rows(d, g, P, n_read, lo, top)
    values.update({
        "req_to_token": table,
        "req_pool_indices": np.array(rows, np.int64),
        "seq_lens": np.array(kv, np.int64) - D,
    })
    R, swa_R = common.table_rows(d, k, bs, (0, 0, 0, 1))
    shapes = {"req_to_token": ("int32", (P, C)), "req_pool_indices": (k["dtype:req_pool_indices"], (bs,)),
              "seq_lens": (k["dtype:seq_lens"], (bs,))}
    common.table_shapes(k, shapes, values, R, swa_R, W)
    return Case(OP, {"page_size": ps, "draft_num": D}, laid_out(k, shapes, values, {"swa_page_table": "page_table"}),
                values)


def r2t_violation(d: Draw, case: Case, k: CompileClass, kind: str | None = None) -> Case:
    t, v = editable(case)
    ps, D = case.scalars["page_size"], case.scalars["draft_num"]
    P, C = t["req_to_token"].shape
    R, W = t["page_table"].shape
    swa_R = t["swa_page_table"].shape[0] if "swa_page_table" in t else R
    bs = t["req_pool_indices"].shape[0]
    kind = common.slot_kind(kind or d.choice(OUT_OF_CONTRACT), v)
    i = d.integer(0, bs - 1)
    lens, rows, table = v["seq_lens"], v["req_pool_indices"], v["req_to_token"]

    def read_column() -> int:
        """A column request i reads (its tokens made at least 1)."""
        lens[i] = max(int(lens[i]), 1 - D, 0)
        return ps * d.integer(0, pages(int(lens[i]) + D, ps) - 1)

    if kind == "pool_index_out_of_range":
        rows[i] = d.choice((P, P + 1, -1))
    elif kind == "past_row":  # tokens and drafts past the row (into the next row, or past the table)
        lens[i] = C - D + d.choice((1, ps, common.BLOCK_SIZE * ps))
        W = max(W, pages(int(lens[i]) + D, ps))  # one broken rule at a time: room for every page
    elif kind == "negative_len":
        lens[i] = -d.choice((1, ps + 1)) - D
    elif kind == "page_table_too_narrow":  # more pages than the rows hold: written into the next row
        lens[i] = max(int(lens[i]), min(C, ps + 1) - D, 1 - D, 0)
        W = common.narrower(d, pages(int(lens.max()) + D, ps))
    elif kind == "page_table_too_few_rows":
        if d.boolean() or "swa_page_table" not in t:
            R = bs - 1
        else:
            swa_R = bs - 1
    else:  # a slot the kernel reads breaks its rule
        table[:, read_column()] = common.bad_slot(d, kind, v, ps)
    if k["layout:req_to_token"].kind == "broadcast":
        table[:] = table[0]
    common.relaid_tables(k, t, R, swa_R, max(W, 0))
    relaid(k, t, v, ("req_pool_indices", "seq_lens", "req_to_token", common.MAPPING))
    return Case(OP, case.scalars, t, v, meta={"violation": kind})


def r2t_features(case: Case) -> set[str]:
    lens = case.values.get("seq_lens")
    D = case.scalars.get("draft_num")
    ps = case.scalars.get("page_size")
    table = case.tensors.get("req_to_token")
    if lens is None or not isinstance(D, int) or not isinstance(ps, int) or ps < 1 or table is None or \
            len(table.shape) != 2:
        return set()
    kv = (np.asarray(lens, np.int64) + D).tolist()
    P, C = table.shape
    vals = np.asarray(case.values["req_to_token"])
    # every request reads from column 0: the union of their pages is the longest one's (within the row)
    most = max((n for n in kv if 0 <= n <= C), default=0)
    slots = vals[:, 0:pages(most, ps) * ps:ps].reshape(-1) if most and P else None
    out = common.features(case, kv, slots) | strided_rows(case) | last_pool_row(case) | {f"draft_num:{D}"}
    if any(n > 0 and n == C for n in kv):
        out.add("row_end")
    return out


def required_features() -> set[str]:
    return common.required_features() | {"strided_rows", "pool:last_row", "row_end", "draft_num:0", "draft_num:4"}


GENERIC_REQUIRED = generic_required(("req_pool_indices", "seq_lens", common.MAPPING))


def all_required_features() -> set[str]:
    """Every feature a campaign of a few minutes must exercise for aiter_req_to_token_page_table."""
    return GENERIC_REQUIRED | required_features()


def r2t_class_features(k: CompileClass) -> set[str]:
    return common.reach_features(pages(_widths(k)[1], k["page_size"]))


GENERATOR = OpGenerator(OP, r2t_class, r2t_in_class, r2t_violation, OUT_OF_CONTRACT, r2t_features,
                        all_required_features, r2t_class_features, variant_class=r2t_variant_class)
