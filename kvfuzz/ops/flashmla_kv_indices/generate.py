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

Where the variant's kernel takes them (`v2p`: 0.5.17-0.5.18), a class passes the unified pool's
page remap or not: a `v2p` table (int64 as SGLang's, or int32; -1 entries as its unmapped pages
and sentinel) and a PAGE_MULT (1, 2, 3, 61: a rank owning one MLA layer, a few, DeepSeek's 61),
the token ids read then pages within the table. The pool covers both first (`mla_class_features`).

Production sizes are classes of their own, one class in sixteen of a variant's candidates: a
table 32768 to 135169 tokens wide (8 to 33 programs of 4096 tokens per request) for one or a few
requests, or a batch of 17 to 256 or past 256 (257-300) over a table of 64 to 8193 tokens (1 to 3
programs per request); kv_indices as wide as a backend sizes it; one or two requests to the row's
end or at a block edge, the rest short. Every cell is judged. The CPU interpreter runs a program
in about 5-20 ms (more on a loaded machine), so a production case takes up to a few seconds there:
a CPU campaign reaches one in a stint of a minute or more (the pool covers the v2p modes first).
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
    last_pool_row, page_length, page_length_features, pages, pool_rows, pool_size, production_batch, relaid, \
    start_in_row, start_path, strided_cells, strided_rows, table_layout, token_table
from .contract import VARIANT_ARGS

OP = "flashmla_kv_indices"
BLOCK = PAGE_BLOCK  # tokens per program
PAGE_SIZES = (64, 1, 32, 128, 16, 4096)  # FlashMLA, AITER, TRT-LLM, CUTLASS; edges
PRODUCTION = (64, 1, 32, 128)
WIDTHS = (1, 63, 64, 65, 200, 4095, 4096, 4097, 8193)  # C: the table's width (max context)
BLOCK_EDGES = PAGE_BLOCK_EDGES
OUT_OF_CONTRACT = ("pool_index_out_of_range", "past_row", "kv_indices_too_narrow", "kv_indices_too_few_rows",
                   "negative_len", "negative_token_id")
V2P_OUT_OF_CONTRACT = OUT_OF_CONTRACT + ("page_past_v2p",)
ONE_D = ("req_pool_indices", "paged_kernel_lens", "kv_start_idx")
MULTS = (1, 2, 3, 61)  # PAGE_MULT: the full-attention MLA layers a rank owns (DeepSeek V3: 61)
PROD_WIDTHS = (32768, 40960, 65536, 131072, 131072 + BLOCK + 1)  # C: 8 to 33 blocks of 4096 tokens
BATCH_WIDTHS = (64, 4095, 4097, 8193)  # C of a production batch (17-300 requests): 1 to 3 blocks per request


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


def mla_variant_class(d: Draw, variant: str) -> CompileClass:
    """A class of `variant`: the base class, a production size one time in sixteen, and, where
    the variant's kernel takes them, whether v2p is passed (its dtype, PAGE_MULT)."""
    p = dict(mla_class(d).items)
    if d.integer(0, 15) == 0:
        p["size"] = "production"
        p["bs"] = d.choice(("one", "few", "few", "big", "past"))
        if p["bs"] in ("one", "few"):  # a wide table: 8 to 33 blocks per request
            p["page_size"] = d.choice(PRODUCTION)
            p["C"] = d.choice(PROD_WIDTHS)
        else:  # a big batch over a short table (a program per block per request)
            p["C"] = d.choice(BATCH_WIDTHS)
        p["W"] = _width(d.choice(("row", "graph", "trtllm")), p["C"], p["page_size"])
    if "v2p" in VARIANT_ARGS.get(variant, ()) and d.boolean():
        p["v2p"] = True
        p["dtype:v2p"] = d.choice(("int64", "int64", "int32"))
        p["layout:v2p"] = layout_class(d, "in", 1, ("contiguous", "offset"))
        p["page_mult"] = d.choice(MULTS)
    return CompileClass.of(OP, p)


def v2p_table(d: Draw, g, V: int, mult: int) -> np.ndarray:
    """The unified pool's virtual -> physical pages: values whose product with PAGE_MULT fits
    int32 (the largest among them), -1 where unmapped (and in the last, SGLang's sentinel)."""
    top = (2**31 - 1) // mult + 1
    v2p = g.integers(0, d.choice((1 << 16, top)), size=V)
    v2p[g.random(V) < d.choice((0.0, 0.1, 0.5))] = -1
    if d.boolean():
        v2p[int(g.integers(0, V))] = top - 1
    if V > 1 and d.boolean():
        v2p[-1] = -1
    return v2p


def mla_in_class(d: Draw, k: CompileClass) -> Case:
    ps, C, W = k["page_size"], k["C"], k["W"]
    production = k.get("size") == "production"
    bs = production_batch(d, k) if production else batch_size(d, k, big=24)
    R = bs + d.choice((0, 0, 1, 3))  # a CUDA-graph buffer holds rows past bs
    P = pool_size(d, k)
    g = rng(d.seed())
    cap = min(C, W * ps)  # a request holds at most W pages and C tokens
    lens, starts, short = [], [], []
    for i in range(bs):
        long = bs <= 4 or d.integer(0, 7) == 0 if not production else i < 2 and (i == 0 or d.boolean())
        if not k["start"]:  # the short lengths are drawn together below
            if long:
                lens.append(page_length(d, cap, ps, W))
            else:
                short.append(i)
                lens.append(0)
            continue
        n = page_length(d, cap, ps, W) if long else int(g.integers(0, min(cap, 3 * ps) + 1))
        lens.append(n)
        starts.append(start_in_row(d, g, C, n))
    if short:  # one draw from `g`: the same values as a scalar draw per short length
        for i, n in zip(short, g.integers(0, min(cap, 3 * ps) + 1, size=len(short)).tolist()):
            lens[i] = n
    rows = pool_rows(d, g, P, bs)
    top = d.choice((1 << 20, 2**31))  # token ids up to int32's largest
    table = token_table(d, g, P, C, top)
    if starts:  # every ps-th column of each request's range, each once
        read = np.unique(strided_cells(starts, lens, ps))
    else:  # every range starts at column 0: the longest one's columns
        read = np.arange(0, pages(max(lens, default=0), ps) * ps, ps)
    V = 0
    if k.get("v2p"):
        V = d.choice((1, 2, 65, int(g.integers(1, 1 << 16))))  # virtual pages: the read ids stay within them
        top = V * ps
    if read.size:  # the cells the kernel reads hold KV-pool slots (>= 0), in every row (a repeated row too)
        table[:, read] = g.integers(0, top, size=(P, read.size))
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
    scalars = {"page_size": ps}
    if k.get("v2p"):
        values["v2p"] = v2p_table(d, g, V, k["page_mult"])
        shapes["v2p"] = (k["dtype:v2p"], (V,))
        scalars["page_mult"] = k["page_mult"]
    return Case(OP, scalars, laid_out(k, shapes, values), values)


def mla_violation(d: Draw, case: Case, k: CompileClass, kind: str | None = None) -> Case:
    t, v = editable(case)
    ps = case.scalars["page_size"]
    P, C = t["req_to_token"].shape
    R, W = t["kv_indices"].shape
    bs = t["req_pool_indices"].shape[0]
    kind = kind or d.choice(V2P_OUT_OF_CONTRACT if "v2p" in v else OUT_OF_CONTRACT)
    if kind == "page_past_v2p" and "v2p" not in v:
        kind = "past_row"  # a case without the remap: another rule broken
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
    elif kind == "page_past_v2p":  # a token whose page has no entry in v2p (past a table SGLang sizes by pages)
        lens[i] = max(int(lens[i]), 1)
        if start + lens[i] > C:
            lens[i], start = 1, 0
            if "kv_start_idx" in v:
                v["kv_start_idx"][i] = 0
        W = max(W, pages(int(lens[i]), ps))
        V = v["v2p"].shape[0]
        v["req_to_token"][:, start + ps * d.integer(0, pages(int(lens[i]), ps) - 1)] = \
            min(2**31 - 1, (V + d.choice((0, 1, 1 << 20))) * ps)
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
        starts = np.asarray(case.values.get("kv_start_idx", np.zeros(len(ls), np.int64)), np.int64)
        m = min(starts.shape[0], len(ls))  # array tests, not a loop over every request
        n = np.asarray(lens, np.int64)[:m]
        if ((n > 0) & (starts[:m] + n == C)).any():
            out.add("row_end")
        if (starts > 0).any():
            out.add("start:nonzero")
        if (starts % ps != 0).any():
            out.add("start:unaligned")
        vals = case.values.get("req_to_token")
        if vals is not None and np.asarray(vals).size and int(np.asarray(vals).max()) == 2**31 - 1:
            out.add("id:int32_max")
        if C >= 32768:
            out.add("size:production")
    if len(ls) > 256:
        out.add("bs:past_256")
    return out | mode_features(case)


def mode_features(case: Case) -> set[str]:
    """The unified pool's remap: v2p given, its -1 entries written, PAGE_MULT > 1."""
    out = set()
    if "v2p" in case.values:
        out.add("mode:v2p")
        if bool((np.asarray(case.values["v2p"]) == -1).any()):
            out.add("v2p:unmapped")
    if case.scalars.get("page_mult", 1) > 1:
        out.add("mode:page_mult")
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


def mla_class_features(k: CompileClass) -> set[str]:
    """The launch modes a pool covers first: with and without v2p, PAGE_MULT 1 and more."""
    if k.get("size") == "production":
        return set()
    return {f"mode:v2p:{bool(k.get('v2p'))}/mult>1:{k.get('page_mult', 1) > 1}"}


GENERATOR = OpGenerator(OP, mla_class, mla_in_class, mla_violation, V2P_OUT_OF_CONTRACT, mla_features,
                        all_required_features, mla_class_features, variant_class=mla_variant_class)
