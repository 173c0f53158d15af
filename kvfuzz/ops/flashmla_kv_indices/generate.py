"""Cases for `flashmla_kv_indices` (create_flashmla_kv_indices_triton).

SGLang's kernel runs one program per (request, block of 4096 tokens = 4096 // ps pages) and takes
the page size, the table's row stride and kv_indices' row stride as constexprs: a compile class
fixes the page size (the backends' 64, 1, 32, 128, and 16 and 4096 as edges), the table's width
and layout, kv_indices' width W (as the backends size it: the row's pages, SGLang's graph buffer
(C + ps) // ps, TRT-LLM's padded block count, or fewer pages than the row holds) and layout,
whether `kv_start_idx` is given, the dtypes, and the batch's size class. A case draws each
request's length at the page edges (0, 1, ps - 1, ps, ps + 1), the block edges (4095, 4096,
4097, 8193), the last page kv_indices holds and the row's end; its start; its pool row (the
first and last rows of the pool among them); kv_indices' spare rows (a graph buffer's rows past
bs); and token ids up to int32's largest, negative ones only in cells the kernel does not read.
"""

from __future__ import annotations

import math

import numpy as np

from ...case import Case
from ...strategies import OpGenerator
from ...strategies.draw import CompileClass, Draw
from ...strategies.layouts import LayoutClass, layout_class, relayout
from ...strategies.values import rng
from ..kv_index_common import PAGE_BLOCK, PAGE_BLOCK_EDGES, batch_size, editable, generic_required, laid_out, \
    last_pool_row, page_length, page_length_features, pages, pool_rows, pool_size, relaid, start_in_row, start_path, \
    strided_rows, table_layout, token_table

OP = "flashmla_kv_indices"
BLOCK = PAGE_BLOCK  # tokens per program
PAGE_SIZES = (64, 1, 32, 128, 16, 4096)  # FlashMLA, AITER, TRT-LLM, CUTLASS; edges
PRODUCTION = (64, 1, 32, 128)
WIDTHS = (1, 63, 64, 65, 200, 4095, 4096, 4097, 8193)  # C: the table's width (max context)
BLOCK_EDGES = PAGE_BLOCK_EDGES
OUT_OF_CONTRACT = ("pool_index_out_of_range", "past_row", "kv_indices_too_narrow", "kv_indices_too_few_rows",
                   "negative_len", "negative_token_id")
ONE_D = ("req_pool_indices", "paged_kernel_lens", "kv_start_idx")


def _width(mode: str, C: int, ps: int) -> int:
    """kv_indices' width W, as a backend sizes it for a table of width C."""
    row = pages(C, ps)
    if mode == "graph":  # FlashMLA's / CUTLASS's CUDA-graph buffer: (max_context_len + PAGE_SIZE) // PAGE_SIZE
        return (C + ps) // ps
    if mode == "trtllm":  # TRT-LLM's _calc_padded_blocks: a multiple of lcm(128 / ps, 4096 / ps)
        m = math.lcm(max(128 // ps, 1), BLOCK // ps)
        return -(-max(row, 1) // m) * m
    if mode == "short":  # fewer pages than the row holds: lengths stop at W * ps
        return max(1, row // 2)
    return max(row, 1)  # "row": the eager buffer of a batch whose longest request fills the row


def mla_class(d: Draw) -> CompileClass:
    table = table_layout(d)
    ps, C = d.choice(PAGE_SIZES), d.choice(WIDTHS)
    p = {
        "page_size": ps,
        "C": C,
        "W": _width(d.choice(("row", "graph", "trtllm", "short")), C, ps),
        "start": d.choice((False, True)),
        "bs": d.choice(("one", "few", "big")),
        # literal keys (interned, one object each): a pickled class pool holds each key once
        "dtype:req_pool_indices": d.choice(("int32", "int64")),
        "dtype:paged_kernel_lens": d.choice(("int32", "int64")),
        "dtype:kv_start_idx": d.choice(("int32", "int64")),
        "layout:req_to_token": table,
        "layout:kv_indices": layout_class(d, "out", 2, ("contiguous", "offset", "padded")),
    }
    for name in ONE_D:
        p[f"layout:{name}"] = layout_class(d, "in", 1, ("contiguous", "offset"))
    return CompileClass.of(OP, p)


def mla_in_class(d: Draw, k: CompileClass) -> Case:
    ps, C, W = k["page_size"], k["C"], k["W"]
    bs = batch_size(d, k, big=24)
    R = bs + d.choice((0, 0, 1, 3))  # a CUDA-graph buffer holds rows past bs
    P = pool_size(d, k)
    g = rng(d.seed())
    cap = min(C, W * ps)  # a request holds at most W pages and C tokens
    lens, starts = [], []
    for i in range(bs):
        n = page_length(d, cap, ps, W) if bs <= 4 or d.integer(0, 7) == 0 else int(g.integers(0, min(cap, 3 * ps) + 1))
        lens.append(n)
        if k["start"]:
            starts.append(start_in_row(d, g, C, n))
    rows = pool_rows(d, g, P, bs)
    top = d.choice((1 << 20, 2**31))  # token ids up to int32's largest
    table = token_table(d, g, P, C, top)
    read = sorted({s + p * ps for n, s in zip(lens, starts or [0] * bs) for p in range(pages(n, ps))})
    if read:  # the cells the kernel reads hold KV-pool slots (>= 0), in every row (a repeated row too)
        table[:, read] = g.integers(0, top, size=(P, len(read)))
        if d.boolean():
            table[:, read[-1]] = top - 1  # the largest id (int32's largest when top is 2**31)
    values = {
        "req_to_token": table,
        "req_pool_indices": np.array(rows, np.int64),
        "paged_kernel_lens": np.array(lens, np.int64),
    }
    shapes = {"req_to_token": ("int32", (P, C)), "req_pool_indices": (k["dtype:req_pool_indices"], (bs,)),
              "paged_kernel_lens": (k["dtype:paged_kernel_lens"], (bs,)), "kv_indices": ("int32", (R, W))}
    if k["start"]:
        values["kv_start_idx"] = np.array(starts, np.int64)
        shapes["kv_start_idx"] = (k["dtype:kv_start_idx"], (bs,))
    return Case(OP, {"page_size": ps}, laid_out(k, shapes, values), values)


def mla_violation(d: Draw, case: Case, k: CompileClass, kind: str | None = None) -> Case:
    t, v = editable(case)
    ps = case.scalars["page_size"]
    P, C = t["req_to_token"].shape
    R, W = t["kv_indices"].shape
    bs = t["req_pool_indices"].shape[0]
    kind = kind or d.choice(OUT_OF_CONTRACT)
    i = d.integer(0, bs - 1)
    lens, rows = v["paged_kernel_lens"], v["req_pool_indices"]
    start = int(v["kv_start_idx"][i]) if "kv_start_idx" in v else 0
    if kind == "pool_index_out_of_range":
        rows[i] = d.choice((P, P + 1, -1))
    elif kind == "past_row":  # start + length past the row (into the next row, or past the table)
        lens[i] = C - start + d.choice((1, ps, BLOCK))
        W = max(W, pages(int(lens[i]), ps))  # one broken rule at a time: room for every page
    elif kind == "kv_indices_too_narrow":  # more pages than kv_indices' rows hold: written into the next row
        lens[i] = max(int(lens[i]), 1)
        W = pages(int(lens.max()), ps) - d.integer(1, max(1, min(pages(int(lens.max()), ps), 3)))
    elif kind == "kv_indices_too_few_rows":
        R = bs - 1
    elif kind == "negative_len":
        lens[i] = -d.choice((1, ps + 1))
    elif kind == "negative_token_id":
        lens[i] = max(int(lens[i]), 1)
        if start + lens[i] > C:  # a table of one column
            lens[i], start = 1, 0
            if "kv_start_idx" in v:
                v["kv_start_idx"][i] = 0
        W = max(W, pages(int(lens[i]), ps))
        r = int(rows[i])
        table = v["req_to_token"]
        table[:, start + ps * d.integer(0, pages(int(lens[i]), ps) - 1)] = -d.choice((1, ps + 1, 2**31))
        if k["layout:req_to_token"].kind == "broadcast":
            table[:] = table[0]
        assert 0 <= r < P
    t["kv_indices"] = relayout(k.get("layout:kv_indices", LayoutClass()), "int32", (R, W))
    relaid(k, t, v, ("req_pool_indices", "paged_kernel_lens", "kv_start_idx", "req_to_token"))
    return Case(OP, case.scalars, t, v, meta={"violation": kind})


def mla_features(case: Case) -> set[str]:
    lens = case.values.get("paged_kernel_lens")
    ps = case.scalars.get("page_size")
    out_spec = case.tensors.get("kv_indices")
    if lens is None or not isinstance(ps, int) or ps < 1 or out_spec is None or len(out_spec.shape) != 2:
        return set()
    R, W = out_spec.shape
    ls = np.asarray(lens).tolist()
    out = {start_path(case), f"page_size:{ps}"} | strided_rows(case) | last_pool_row(case) | \
        page_length_features(ls, ps, W)
    if len(ls) >= 17:
        out.add("big_batch")
    if R > len(ls):
        out.add("rows:spare")
    if R > 1 and out_spec.strides[0] != W:
        out.add("kv_indices:padded_rows")
    table = case.tensors.get("req_to_token")
    if table is not None and len(table.shape) == 2:
        C = table.shape[1]
        starts = np.asarray(case.values.get("kv_start_idx", np.zeros(len(ls), np.int64))).tolist()
        if any(n > 0 and s + n == C for s, n in zip(starts, ls)):
            out.add("row_end")
        if any(s > 0 for s in starts):
            out.add("start:nonzero")
        if any(s % ps for s in starts):
            out.add("start:unaligned")
        vals = case.values.get("req_to_token")
        if vals is not None and np.asarray(vals).size and int(np.asarray(vals).max()) == 2**31 - 1:
            out.add("id:int32_max")
    return out


def required_features() -> set[str]:
    return ({"start", "no_start", "start:nonzero", "start:unaligned", "len:zero", "len:two_blocks", "width:full",
             "width:spare", "big_batch", "rows:spare", "kv_indices:padded_rows", "strided_rows", "pool:last_row",
             "row_end", "id:int32_max"}
            | {f"page_size:{ps}" for ps in PRODUCTION}
            | {f"edge:len:{e}" for e in ("page-1", "page", "page+1", *BLOCK_EDGES)})


GENERIC_REQUIRED = generic_required(ONE_D)


def all_required_features() -> set[str]:
    """Every feature a campaign of a few minutes must exercise for flashmla_kv_indices."""
    return GENERIC_REQUIRED | required_features()


GENERATOR = OpGenerator(OP, mla_class, mla_in_class, mla_violation, OUT_OF_CONTRACT, mla_features,
                        all_required_features)
