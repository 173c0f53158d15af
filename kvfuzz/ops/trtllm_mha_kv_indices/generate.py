"""Cases for `trtllm_mha_kv_indices` (create_trtllm_mha_kv_indices_triton).

SGLang's kernel runs one program per (request, block of 4096 tokens = 4096 // ps pages) and takes
the page size, SWA on or off, and the row strides of `req_to_token` and `page_table` as
constexprs: a compile class fixes the page size (the backend's 64, 16, 32, 128, and 1 and 4096 as
edges), SWA, the table's width and layout, page_table's width W (as the backend sizes it,
ceil(context_len / ps) for a table a few columns wider than the context; the row's pages; fewer
pages than the row holds; more, past the grid's next block) and layout (swa_page_table shares
it), the dtypes, the 1-D layouts and the batch's size class. A case draws each request's length
at the page edges (0, 1, ps - 1, ps, ps + 1), the block edges (4095, 4096, 4097, 8193), the last
page page_table holds and the row's end; its pool row (the first and last rows of the pool among
them); KV-pool slots where the kernel reads (up to int32's largest, 0 among them; negative ones
only in cells it does not read); and, with SWA, a mapping of M entries, either SGLang's (its
last entry -1, never read) or one whose last entry is read, with SWA slots up to int32's
largest and freed (0) entries.

Production sizes are classes of their own, one class in sixteen (`trt_variant_class`, the
campaign's class drawer): a context of 32768 to 135172 tokens (8 to 33 programs of 4096 tokens
per request; page_table as the backend sizes it or the row's pages) for one or a few requests,
or a batch of 17 to 256 or past 256 (257-300) over a table of up to 8193 tokens; one or two
requests to the row's end or at a block edge, the rest short. Every cell is judged; the CPU
interpreter runs a program in milliseconds, so a production case takes up to seconds there.
"""

from __future__ import annotations

import numpy as np

from ...case import Case
from ...strategies import OpGenerator
from ...strategies.draw import CompileClass, Draw
from ...strategies.layouts import LayoutClass, layout_class, relayout
from ...strategies.values import rng
from ..kv_index_common import PAGE_BLOCK, PAGE_BLOCK_EDGES, batch_size, editable, generic_required, laid_out, \
    last_pool_row, page_length, page_length_features, pages, pool_rows, pool_size, production_batch, relaid, \
    strided_rows, table_layout, token_table

OP = "trtllm_mha_kv_indices"
BLOCK = PAGE_BLOCK  # tokens per program
PAGE_SIZES = (64, 16, 32, 128, 1, 4096)  # the backend's (16, 32, 64; 128 from 0.5.23); edges
PRODUCTION = (16, 32, 64, 128)
WIDTHS = (1, 15, 64, 65, 200, 4095, 4096, 4097, 4100, 8193)  # C: the table's width (max context + headroom)
BLOCK_EDGES = PAGE_BLOCK_EDGES
OUT_OF_CONTRACT = ("pool_index_out_of_range", "past_row", "page_table_too_narrow", "negative_len", "negative_slot",
                   "slot_past_mapping", "negative_swa_slot")
ONE_D = ("req_pool_indices", "seq_lens")
SENTINEL = -1  # SGLang's last mapping entry
PROD_WIDTHS = (32768 + 4, 65536 + 7, 131072 + 4, 131072 + BLOCK + 1)  # C: a context + the table's headroom
BATCH_WIDTHS = (64, 4095, 4100, 8193)  # C of a production batch (17-300 requests): 1 to 3 blocks per request


def _width(mode: str, C: int, ps: int, extra: int) -> int:
    """page_table's width W, as the backend sizes it for a table of width C."""
    row = pages(C, ps)
    if mode == "backend":  # max_num_pages = ceil(context_len / ps), req_to_token = context_len + extra columns
        return max(pages(max(C - extra, 1), ps), 1)
    if mode == "short":  # fewer pages than the row holds: lengths stop at W * ps
        return max(1, row // 2)
    if mode == "wide":  # more than the row's pages, into the grid's next block
        return row + max(BLOCK // ps, 1)
    return max(row, 1)  # "row"


def trt_class(d: Draw) -> CompileClass:
    table = table_layout(d)
    ps, C = d.choice(PAGE_SIZES), d.choice(WIDTHS)
    swa = d.boolean()
    p = {
        "page_size": ps,
        "C": C,
        "W": _width(d.choice(("backend", "row", "short", "wide")), C, ps, d.choice((4, 0, 7))),
        "swa": swa,
        "bs": d.choice(("one", "few", "big")),
        "dtype:req_pool_indices": d.choice(("int64", "int32")),
        "dtype:seq_lens": d.choice(("int32", "int64")),
        "layout:req_to_token": table,
        "layout:page_table": layout_class(d, "out", 2, ("contiguous", "offset", "padded")),
    }
    for name in ONE_D:
        p[f"layout:{name}"] = layout_class(d, "in", 1, ("contiguous", "offset"))
    if swa:
        p["dtype:full_to_swa"] = d.choice(("int64", "int32"))
        p["layout:full_to_swa"] = layout_class(d, "in", 1, ("contiguous", "offset"))
    return CompileClass.of(OP, p)


def trt_variant_class(d: Draw, variant: str) -> CompileClass:
    """A class of the campaign: the base class, or one time in sixteen a production size."""
    p = dict(trt_class(d).items)
    if d.integer(0, 15) == 0:
        p["size"] = "production"
        p["bs"] = d.choice(("one", "few", "few", "big", "past"))
        if p["bs"] in ("one", "few"):
            p["page_size"] = d.choice(PRODUCTION)
            p["C"] = d.choice(PROD_WIDTHS)
        else:
            p["C"] = d.choice(BATCH_WIDTHS)
        p["W"] = _width(d.choice(("backend", "row")), p["C"], p["page_size"], 4)
    return CompileClass.of(OP, p)


def _read_cells(lens: list[int], ps: int) -> slice:
    """The columns the kernel reads: every ps-th token of each request's length. Every request
    starts at column 0, so their union is the longest one's pages: a slice, not a set over
    every page."""
    most = max(lens, default=0)
    return slice(0, pages(max(most, 0), ps) * ps, ps)


def trt_in_class(d: Draw, k: CompileClass) -> Case:
    ps, C, W = k["page_size"], k["C"], k["W"]
    production = k.get("size") == "production"
    bs = production_batch(d, k) if production else batch_size(d, k, big=24)
    P = pool_size(d, k)
    g = rng(d.seed())
    cap = min(C, W * ps)  # a request holds at most W pages and C tokens
    lens, short = [], []
    for i in range(bs):
        long = i < 2 and (i == 0 or d.boolean()) if production else bs <= 4 or d.integer(0, 7) == 0
        if long:
            lens.append(page_length(d, cap, ps, W))
        else:
            short.append(i)
            lens.append(0)
    if short:  # the short lengths in one draw from `g`: the same values as one scalar draw each
        for i, n in zip(short, g.integers(0, min(cap, 3 * ps) + 1, size=len(short)).tolist()):
            lens[i] = n
    rows = pool_rows(d, g, P, bs)
    read = _read_cells(lens, ps)
    n_read = len(range(read.start, read.stop, read.step))
    values: dict[str, np.ndarray] = {}
    if k["swa"]:  # the full pool's slots index the mapping: M entries, SGLang's ends with -1 (never read)
        M = d.choice((1, 2, 64, 65, 1000, 4097))
        sglang_end = M > 1 and d.boolean()
        top = M - 1 if sglang_end else M
        swa_top = d.choice((1 << 16, 2**31))
        mapping = g.integers(0, swa_top, size=M)
        mapping[g.random(M) < 0.25] = 0  # freed entries
        if d.boolean():
            mapping[int(g.integers(0, M))] = swa_top - 1  # the largest SWA slot
        if sglang_end:
            mapping[-1] = SENTINEL
        values["full_to_swa"] = mapping
    else:
        top = d.choice((1 << 20, 2**31))  # slots up to int32's largest
    table = token_table(d, g, P, C, top)
    if n_read:  # the cells the kernel reads hold KV-pool slots (>= 0), in every row (a repeated row too)
        table[:, read] = g.integers(0, top, size=(P, n_read))
        ends = d.choice(("none", "first", "last", "both"))
        if ends in ("first", "both"):
            table[:, 0] = 0  # the pool's first slot
        if ends in ("last", "both"):
            table[:, (n_read - 1) * ps] = top - 1  # the pool's last slot (int32's largest without SWA, at top 2**31)
    values.update({
        "req_to_token": table,
        "req_pool_indices": np.array(rows, np.int64),
        "seq_lens": np.array(lens, np.int64),
    })
    shapes = {"req_to_token": ("int32", (P, C)), "req_pool_indices": (k["dtype:req_pool_indices"], (bs,)),
              "seq_lens": (k["dtype:seq_lens"], (bs,)), "page_table": ("int32", (bs, W))}
    if k["swa"]:
        shapes["full_to_swa"] = (k["dtype:full_to_swa"], (values["full_to_swa"].shape[0],))
        shapes["swa_page_table"] = ("int32", (bs, W))
    # one row stride for both tables
    return Case(OP, {"page_size": ps}, laid_out(k, shapes, values, {"swa_page_table": "page_table"}), values)


def trt_violation(d: Draw, case: Case, k: CompileClass, kind: str | None = None) -> Case:
    t, v = editable(case)
    ps = case.scalars["page_size"]
    P, C = t["req_to_token"].shape
    bs, W = t["page_table"].shape
    kind = kind or d.choice(OUT_OF_CONTRACT)
    if kind in ("slot_past_mapping", "negative_swa_slot") and "full_to_swa" not in v:
        kind = "negative_slot"  # SWA is the class's: a case without it breaks the slot rule of the full pool
    i = d.integer(0, bs - 1)
    lens, rows, table = v["seq_lens"], v["req_pool_indices"], v["req_to_token"]
    broadcast = k["layout:req_to_token"].kind == "broadcast"

    def read_slot() -> int:
        """A column request i reads (its length made at least 1)."""
        lens[i] = max(int(lens[i]), 1)
        return ps * d.integer(0, pages(int(lens[i]), ps) - 1)

    if kind == "pool_index_out_of_range":
        rows[i] = d.choice((P, P + 1, -1))
    elif kind == "past_row":  # a length past the row (into the next row, or past the table)
        lens[i] = C + d.choice((1, ps, BLOCK))
        W = max(W, pages(int(lens[i]), ps))  # one broken rule at a time: room for every page
    elif kind == "page_table_too_narrow":  # more pages than page_table's rows hold: written into the next row
        if C > ps:
            lens[i] = max(int(lens[i]), d.integer(ps + 1, C))
        else:
            lens[i] = max(int(lens[i]), 1)
        most = pages(int(lens.max()), ps)
        W = most - d.integer(1, max(1, min(most, 3)))
    elif kind == "negative_len":
        lens[i] = -d.choice((1, ps + 1))
    elif kind == "negative_slot":
        table[:, read_slot()] = -d.choice((1, ps + 1, 2**31))
    elif kind == "slot_past_mapping":  # a slot at or past the mapping's end
        table[:, read_slot()] = v["full_to_swa"].shape[0] + d.choice((0, 1, 1000))
    elif kind == "negative_swa_slot":  # the slot's mapping entry is negative (SGLang's -1 sentinel)
        slot = d.integer(0, v["full_to_swa"].shape[0] - 1)
        table[:, read_slot()] = slot
        v["full_to_swa"][slot] = -d.choice((1, ps + 1))
    if broadcast:
        table[:] = table[0]
    W = max(W, 0)
    for name in ("page_table", "swa_page_table"):
        if name in t:
            t[name] = relayout(k.get("layout:page_table", LayoutClass()), "int32", (bs, W))
    relaid(k, t, v, ("req_pool_indices", "seq_lens", "req_to_token", "full_to_swa"))
    return Case(OP, case.scalars, t, v, meta={"violation": kind})


def trt_features(case: Case) -> set[str]:
    lens = case.values.get("seq_lens")
    ps = case.scalars.get("page_size")
    out_spec = case.tensors.get("page_table")
    if lens is None or not isinstance(ps, int) or ps < 1 or out_spec is None or len(out_spec.shape) != 2:
        return set()
    R, W = out_spec.shape
    arr = np.asarray(lens)
    ls = arr.tolist()
    out = {"swa" if "full_to_swa" in case.tensors else "no_swa", f"page_size:{ps}"} | strided_rows(case) | \
        last_pool_row(case) | page_length_features(ls, ps, W)
    if W > max(BLOCK // ps, 1):
        out.add("grid:two_blocks")  # the grid's second axis has more than one block
    if len(ls) >= 17:
        out.add("big_batch")
    if R > 1 and out_spec.strides[0] != W:
        out.add("page_table:padded_rows")
    table = case.tensors.get("req_to_token")
    if table is not None and len(table.shape) == 2:
        P, C = table.shape
        if C > 0 and C in ls:
            out.add("row_end")
        vals = case.values.get("req_to_token")
        # the lengths within the row read columns below C only (p * ps < n <= C)
        read = _read_cells(arr[arr <= C].tolist(), ps)
        if vals is not None and read.stop > 0 and P:
            slots = np.asarray(vals)[:, read]
            if slots.size and int(slots.max()) == 2**31 - 1:
                out.add("slot:int32_max")
            if slots.size and int(slots.min()) == 0:
                out.add("slot:zero")
            mapping = case.values.get("full_to_swa")
            if mapping is not None and slots.size:
                m = np.asarray(mapping)
                if int(m[-1]) == SENTINEL:
                    out.add("swa:sentinel")
                if int(slots.max()) == m.shape[0] - 1 and int(m[-1]) >= 0:
                    out.add("swa:last_slot")  # the mapping's last entry read
                live = slots[(slots >= 0) & (slots < m.shape[0])]
                if live.size and int(m[live].max()) == 2**31 - 1:
                    out.add("swa:int32_max")
                if live.size and int(m[live].min()) == 0:
                    out.add("swa:freed")
        if C >= 32768:
            out.add("size:production")
    if len(ls) > 256:
        out.add("bs:past_256")
    return out


def required_features() -> set[str]:
    return ({"swa", "no_swa", "len:zero", "len:two_blocks", "width:full", "width:spare", "grid:two_blocks",
             "big_batch", "page_table:padded_rows", "strided_rows", "pool:last_row", "row_end", "slot:int32_max",
             "slot:zero", "swa:sentinel", "swa:last_slot", "swa:int32_max", "swa:freed"}
            | {f"page_size:{ps}" for ps in PRODUCTION}
            | {f"edge:len:{e}" for e in ("page-1", "page", "page+1", *BLOCK_EDGES)})


# Generic features (strategies.coverage.generic_features) every campaign must reach
GENERIC_REQUIRED = generic_required(("req_pool_indices", "seq_lens", "full_to_swa"))


def all_required_features() -> set[str]:
    """Every feature a campaign of a few minutes must exercise for trtllm_mha_kv_indices."""
    return GENERIC_REQUIRED | required_features()


GENERATOR = OpGenerator(OP, trt_class, trt_in_class, trt_violation, OUT_OF_CONTRACT, trt_features,
                        all_required_features, variant_class=trt_variant_class)
