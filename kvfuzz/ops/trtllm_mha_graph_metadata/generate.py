"""Cases for `trtllm_mha_graph_metadata` (update_trtllm_mha_graph_metadata).

A compile class fixes what SGLang's kernel specialises on: the constexprs PAGE_SIZE, Q_MODE,
HAS_SWA, HAS_SWA_OUT, SKIP_PAGE_TABLE (0.5.19 on: drawn only for a variant that has it) and
BS_BLOCK = next_power_of_2(bs) (the class's `bs_block`, up to 64; the batches of 1023-1025 come
one case in 128 in any class), every dtype and layout, and the
integer class of bs, max_seq_pages, seqlen_offset, q_stride, the tables' widths (their row
strides) and swa_out_cache_loc's length. The backend's paths (decode and draft decode: Q_MODE
0; target verify: Q_MODE 0 with the draft tokens as seqlen_offset; draft extend v2: Q_MODE 2
with its tokens per request as q_stride; with or without the SWA pool, whose model passes the
mapping, swa_page_table and swa_out_cache_loc together) are drawn most, the launcher's others
(Q_MODE 1, one SWA output alone) too.

A case then draws, inside its class, the requests' lengths at the edges that matter: a row's
live pages (and max_seq_pages) around the kernel's 512-column PAGE_BLOCK, a length in the first
or last token of its last page, past the static width (the live pages clamp), the CUDA-graph
padding rows (length 1 or 0), one length near int32's largest; batches at the BS_BLOCK edges
1023, 1024, 1025; swa_out_cache_loc around 512 cells per program, out_cache_loc shorter, longer
or absent, with the -1 sentinel. req_to_token holds valid slots at every page column (the
backend's stale tails are old slots), or, for the variants that write only the live pages,
wild values past every row's live pages (`stale: wild`), which such a kernel must not read.

Production sizes are classes of their own, one class in sixteen (`graph_variant_class`, the
campaign's class drawer): `wide`, max_seq_pages for a context of 32768 to 131072 tokens and more
(the backend's `max_num_pages`, 256 to 8197 pages at its page sizes, 1 to 17 of the kernel's
512-page blocks) over a batch of 1 to 4; or `batch`, BS_BLOCK 256 or 512 (129 to 512 requests,
past 256 among them) over at most 16 pages. Every cell is judged.
"""

from __future__ import annotations

import numpy as np

from ...case import Case
from ...strategies import OpGenerator
from ...strategies.draw import DIV16, ONE, PLAIN, ZERO, CompileClass, Draw, int_class, width
from ...strategies.layouts import LayoutClass, layout_class, relayout
from ...strategies.values import rng
from ..kv_index_common import editable, laid_out, pool_size, relaid, table_layout, token_table
from .contract import VARIANT_ARGS

OP = "trtllm_mha_graph_metadata"
PAGE_BLOCK = 512
PAGE_SIZES = (64, 16, 32, 128, 1, 8, 3)  # the backend's (16, 32, 64; 128 from 0.5.23); edges
PRODUCTION = (16, 32, 64, 128)
BS_BLOCKS = (1, 4, 2, 8, 16, 32, 64)
BS_EDGES = (1023, 1024, 1025)  # BS_BLOCK's edges: one case in BIG_ONE_IN, whatever its class
BIG_ONE_IN = 128
P_EDGES = (PAGE_BLOCK - 1, PAGE_BLOCK, PAGE_BLOCK + 1, 2 * PAGE_BLOCK, 2 * PAGE_BLOCK + 1)
MAX_TOKENS = 1 << 14  # a pool row's page columns: max_seq_pages <= MAX_TOKENS // page_size
BIG_P = 16  # max_seq_pages at most, with a batch of 1024 or more (the interpreter's time)
PROD_TOKENS = (32768, 65536, 131072, 131072 + 64)  # a production class's context: max_seq_pages = its pages
INT32_MAX = 2**31 - 1
OUT_OF_CONTRACT = ("pool_index", "negative_len", "len_overflow", "table_too_narrow", "row_too_short",
                   "negative_slot", "slot_past_mapping", "loc_past_mapping", "q_overflow", "cu_seqlens_short")
ONE_D_IN = ("req_pool_indices", "seq_lens", "swa_mapping", "out_cache_loc", "qlens")
ONE_D_OUT = ("cache_seqlens", "cu_seqlens_k", "cu_seqlens_q", "swa_out_cache_loc")


def graph_class(d: Draw, variant: str | None = None) -> CompileClass:
    """A compile class; skip_page_table only where `variant` has it, wild stale tails only where the
    variant writes the live pages alone."""
    allowed = VARIANT_ARGS.get(variant, ()) if variant else ()
    skip = "skip_page_table" in allowed and d.integer(0, 3) == 0
    q_mode = d.choice((0, 2, 1))
    if skip:
        swa, tables = d.choice(("none", "out")), d.choice(("absent", "present"))
    else:
        swa, tables = d.choice(("none", "both", "table", "out")), "present"
    ps = d.choice(PAGE_SIZES)
    bs_block = d.choice(BS_BLOCKS)
    P = d.choice((PLAIN, DIV16, ONE, ZERO))
    widths = (PLAIN, DIV16, ONE, ZERO) if P == ZERO else (PLAIN, DIV16, ONE) if P == ONE else (PLAIN, DIV16)
    p = {
        "page_size": ps, "q_mode": q_mode, "swa": swa, "tables": tables,
        "bs_block": bs_block, "bs": d.choice((PLAIN, DIV16)) if bs_block >= 16 else ONE if bs_block == 1 else PLAIN,
        "P": P, "W": d.choice(widths), "W2": d.choice(widths), "C": d.choice((PLAIN, DIV16)),
        "delta": d.choice((DIV16, ONE, PLAIN)),
        "q_stride": d.choice((ONE, PLAIN, DIV16)) if q_mode == 2 else DIV16,
        "stale": "valid" if variant == "full_width" else d.choice(("valid", "wild")),
        "loc": d.choice(("equal", "short", "long", "none")),
        "L": d.choice((PLAIN, DIV16, ONE, ZERO)) if swa in ("both", "out") else ZERO,
        "layout:req_to_token": table_layout(d),
    }
    if "skip_page_table" in allowed:
        p["skip"] = skip
    for name in ("req_pool_indices", "seq_lens", "swa_mapping", "out_cache_loc", "qlens"):
        p[f"dtype:{name}"] = d.choice(("int64", "int32"))
    for name in (*ONE_D_IN, *ONE_D_OUT):
        p[f"layout:{name}"] = layout_class(d, "in" if name in ONE_D_IN else "out", 1, ("contiguous", "offset"))
    for name in ("page_table", "swa_page_table"):
        p[f"layout:{name}"] = layout_class(d, "out", 2, ("contiguous", "offset", "padded"))
    return CompileClass.of(OP, p)


def graph_variant_class(d: Draw, variant: str | None = None) -> CompileClass:
    """graph_class, or one time in sixteen a production size: a long context over a small batch
    (`wide`), or a batch of 129 to 512 requests over a few pages (`batch`)."""
    k = graph_class(d, variant)
    if d.integer(0, 15):
        return k
    p = dict(k.items)
    p["size"] = d.choice(("wide", "batch"))
    if p["size"] == "wide":
        p["page_size"] = d.choice(PRODUCTION)
        p["bs_block"] = d.choice((1, 2, 4))
        p["bs"] = ONE if p["bs_block"] == 1 else PLAIN
        p["P"] = d.choice((PLAIN, DIV16))
    else:
        p["bs_block"] = d.choice((256, 512))
        p["bs"] = d.choice((PLAIN, DIV16))
    p["W"] = p["W2"] = d.choice((PLAIN, DIV16)) if p["P"] in (PLAIN, DIV16) else p["W"]
    return CompileClass.of(OP, p)


def _in_class(v: int, cls: str) -> int:
    """The largest value <= v of integer class `cls` (ZERO: 0, ONE: 1)."""
    if cls == ZERO:
        return 0
    if cls == ONE:
        return 1
    while v > 1 and (int_class(v) != cls or v == 1):
        v -= 1
    if int_class(v) != cls:  # nothing of the class below v: the smallest above
        v = 16 if cls == DIV16 else 2
    return v


def _batch(d: Draw, k: CompileClass) -> int:
    """bs in the class's BS_BLOCK bucket; one case in BIG_ONE_IN a batch at the edges of BS_BLOCK 1024
    (a class of its own for SGLang's kernel, BS_BLOCK being a constexpr, so at most two more
    compiled variants a campaign; a whole class of them would cost the interpreter minutes a stint)."""
    b, cls = k["bs_block"], k["bs"]
    if d.integer(0, BIG_ONE_IN - 1) == 0:
        return d.choice(BS_EDGES)
    if b == 1:
        return 1
    if b == 2:
        return 2
    pick = d.integer(b // 2 + 1, b)
    v = _in_class(pick, cls)
    return v if b // 2 < v <= b else (b if cls == DIV16 else b - 1)


def _max_pages(d: Draw, k: CompileClass, bs: int) -> int:
    cls, ps = k["P"], k["page_size"]
    if cls in (ZERO, ONE):
        return 0 if cls == ZERO else 1
    if k.get("size") == "wide":  # the backend's max_num_pages for a production context
        v = -(-d.choice(PROD_TOKENS) // ps) + d.choice((0, 1))
        return v if int_class(v) == cls else _in_class(v, cls)
    cap = MAX_TOKENS // ps if bs < 1000 and k.get("size") != "batch" else BIG_P
    if cls == DIV16:
        v = d.choice((16, 32, PAGE_BLOCK, 2 * PAGE_BLOCK))
    else:
        v = d.one_of(lambda: d.choice((2, 3, 7, *(e for e in P_EDGES if e % 16))), lambda: d.integer(2, 40))
    v = min(v, cap)
    return v if int_class(v) == cls else _in_class(v, cls)


def _small(cls: str, d: Draw, plain: tuple, div16: tuple) -> int:
    return 1 if cls == ONE else d.choice(div16) if cls == DIV16 else d.choice(plain)


def _length(d: Draw, g, ps: int, P: int, offset: int, drawn: bool) -> int:
    """A cache seqlen s >= offset: its pages at the edges (0, 1, P, past P, the 512-column block's),
    in the first or last token of its last page; a padding row (seq_len 1 or 0)."""
    if not drawn:
        n = int(g.integers(0, min(P, 3) + 1))
        return offset + (0 if n == 0 else (n - 1) * ps + int(g.integers(1, ps + 1)))
    edges = [e for e in (0, 1, 2, P - 1, P, P + 1, *P_EDGES) if 0 <= e <= P + 1]
    n = d.one_of(lambda: d.choice(edges), lambda: d.integer(0, max(P, 0)), lambda: -1)
    if n == -1:  # CUDA-graph padding: seq_lens 1 (the backend's fill value) or 0
        return offset + d.choice((1, 0))
    if n == 0:
        return offset
    s = (n - 1) * ps + d.choice((1, ps, d.integer(1, ps)))
    return max(s, offset)


def graph_in_class(d: Draw, k: CompileClass) -> Case:
    ps, q_mode, swa, skip = k["page_size"], k["q_mode"], k["swa"], bool(k.get("skip"))
    bs = _batch(d, k)
    P = _max_pages(d, k, bs)
    W = width(P + d.choice((0, 1, 3)), k["W"])
    W2 = W if k["W2"] == k["W"] and d.boolean() else width(P + d.choice((0, 1, 3)), k["W2"])  # the backend's: W
    C = width(max((P - 1) * ps + d.integer(1, ps) + d.choice((4, 0, 7)), 1), k["C"])
    offset = _small(k["delta"], d, (2, 3, 4, 5, 7), (0, 16, 64))
    q_stride = _small(k["q_stride"], d, (2, 3, 4, 5, 7), (16, 32)) if q_mode == 2 else 0
    R = pool_size(d, k)
    g = rng(d.seed())
    drawn_rows = min(bs, 4)
    cache = [_length(d, g, ps, P, offset, i < drawn_rows) for i in range(bs)]
    if bs == 1 and d.integer(0, 7) == 0:  # the largest cache seqlen whose pages Triton's cdiv counts in int32
        cache[0] = INT32_MAX - ps + 1
    lens = np.array(cache, np.int64) - offset
    rows = np.array([d.choice((0, R - 1, int(g.integers(0, R)))) for _ in range(drawn_rows)]
                    + g.integers(0, R, size=bs - drawn_rows).tolist(), np.int64)
    values: dict[str, np.ndarray] = {"req_pool_indices": rows, "seq_lens": lens}
    shapes = {"req_pool_indices": (k["dtype:req_pool_indices"], (bs,)), "seq_lens": (k["dtype:seq_lens"], (bs,)),
              "req_to_token": ("int32", (R, C)), "cache_seqlens": ("int32", (bs,)),
              "cu_seqlens_k": ("int32", (bs + 1,))}
    has_map = swa != "none"
    M = d.choice((64, 1000, 4097, 65)) if has_map else 0
    if has_map:
        top = d.choice((1 << 16, 2**31))
        mapping = g.integers(0, top, size=M)
        mapping[g.random(M) < 0.25] = 0  # freed entries
        if d.boolean():
            mapping[int(g.integers(0, M))] = top - 1  # the largest SWA slot
        if d.boolean():
            mapping[-1] = -1  # SGLang's sentinel
        values["swa_mapping"] = mapping
        shapes["swa_mapping"] = (k["dtype:swa_mapping"], (M,))
    slot_top = M if swa in ("both", "table") else d.choice((1 << 20, 2**31))
    table = token_table(d, g, R, C, slot_top)
    cols = np.arange(0, C, ps)
    table[:, cols] = g.integers(0, slot_top, size=(R, cols.size))  # every page column a valid slot
    ends = d.choice(("none", "first", "last"))
    if ends != "none" and cols.size:
        table[:, cols[0 if ends == "first" else -1]] = 0 if ends == "first" else slot_top - 1
    if k["stale"] == "wild" and not skip:  # past every row's live pages: values no live kernel reads
        live = np.zeros(R, np.int64)
        for r, s in zip(rows.tolist(), cache):
            live[r] = max(live[r], min(-(-s // ps), P))
        if k["layout:req_to_token"].kind == "broadcast":
            live[:] = live.max()
        wild = (-1, -(2**31), slot_top, slot_top + 1000) if swa in ("both", "table") else (-1, -(2**31))
        for r in range(R):
            tail = cols[live[r]:]
            if tail.size:
                table[r, tail] = np.array(wild)[g.integers(0, len(wild), size=tail.size)]
    values["req_to_token"] = table
    if q_mode == 1:
        values["qlens"] = g.integers(0, d.choice((1, 8, 1 << 12)) + 1, size=bs)
        shapes["qlens"] = (k["dtype:qlens"], (bs,))
    if q_mode:
        shapes["cu_seqlens_q"] = ("int32", (bs + 1,))
    if k["tables"] == "present":
        shapes["page_table"] = ("int32", (bs, W))
        if swa in ("both", "table") or (skip and d.boolean()):
            shapes["swa_page_table"] = ("int32", (bs, W2))
    L = 0
    if swa in ("both", "out"):
        per_req = max(q_stride, 1) if q_mode == 2 else d.choice((1, 2, 4))
        L = d.choice((bs * per_req, PAGE_BLOCK - 1, PAGE_BLOCK, PAGE_BLOCK + 1, d.integer(1, 2 * PAGE_BLOCK + 1)))
        L = _in_class(L, k["L"]) if k["L"] in (ZERO, ONE) or int_class(L) != k["L"] else L
        shapes["swa_out_cache_loc"] = ("int64", (L,))
    if k["loc"] != "none":
        # at least one location where there are SWA write locations (an empty out_cache_loc is `none`'s)
        N = {"equal": L, "short": max(L - d.integer(1, 3), 1), "long": L + d.choice((1, 7, bs))}[k["loc"]] \
            if L else d.choice((bs, 0, 3 * bs))
        if has_map and swa in ("both", "out"):
            locs = g.integers(0, M, size=N)
            if N and d.boolean():
                locs[g.random(N) < 0.2] = -1  # the skip sentinel
        else:  # never read: any value
            locs = g.integers(-(2**31), 2**31, size=N)
        values["out_cache_loc"] = locs
        shapes["out_cache_loc"] = (k["dtype:out_cache_loc"], (N,))
    scalars = {"page_size": ps, "seqlen_offset": offset, "max_seq_pages": P, "q_mode": q_mode, "q_stride": q_stride}
    if k.get("skip") is not None:
        scalars["skip_page_table"] = skip
    return Case(OP, scalars, laid_out(k, shapes, values), values)


def graph_violation(d: Draw, case: Case, k: CompileClass, kind: str | None = None) -> Case:
    """One rule broken (`kind`, else drawn); a kind that cannot apply to the case breaks the lengths'."""
    t, v = editable(case)
    s = dict(case.scalars)
    bs = t["req_pool_indices"].shape[0]
    P, ps = s["max_seq_pages"], s["page_size"]
    skip = bool(s.get("skip_page_table"))
    kind = kind or d.choice(OUT_OF_CONTRACT)
    i = d.integer(0, bs - 1)
    lens, table = v["seq_lens"], v["req_to_token"]
    R, C = table.shape
    live_read = not skip and P > 0
    if kind in ("pool_index", "table_too_narrow", "row_too_short", "negative_slot") and skip:
        kind = "negative_len"
    if kind == "slot_past_mapping" and (skip or "swa_page_table" not in t or P == 0):
        kind = "negative_slot" if live_read else "negative_len"
    if kind == "negative_slot" and not live_read:
        kind = "negative_len"
    if kind == "loc_past_mapping" and not (v.get("out_cache_loc") is not None and "swa_out_cache_loc" in t
                                           and min(t["swa_out_cache_loc"].shape[0], v["out_cache_loc"].shape[0])):
        kind = "len_overflow"
    if kind == "q_overflow" and s["q_mode"] == 0:
        kind = "len_overflow"

    def read_column() -> int:
        """A page column request i reads, its length made to reach it."""
        lens[i] = max(int(lens[i]), 1)
        return ps * d.integer(0, min(-(-(int(lens[i]) + s["seqlen_offset"]) // ps), P) - 1)

    if kind == "pool_index":
        v["req_pool_indices"][i] = d.choice((R, R + 1, -1))
    elif kind == "negative_len":
        lens[i] = -d.choice((1, ps + 1)) - s["seqlen_offset"]
    elif kind == "len_overflow":
        lens[:] = INT32_MAX - s["seqlen_offset"] + (bs == 1)
    elif kind == "table_too_narrow":  # max_seq_pages past the tables' width
        s["max_seq_pages"] = max(t["page_table"].shape[1] if "page_table" in t else 0,
                                 t["swa_page_table"].shape[1] if "swa_page_table" in t else 0) + d.integer(1, 3)
        need = (s["max_seq_pages"] - 1) * ps + 1
        if need > C:  # the row stays long enough: one rule at a time
            table = np.concatenate([table, np.zeros((R, need - C), np.int64)], axis=1)
    elif kind == "row_too_short":  # max_seq_pages past req_to_token's row
        s["max_seq_pages"] = max(P, -(-C // ps) + 1)
        for name in ("page_table", "swa_page_table"):
            if name in t and t[name].shape[1] < s["max_seq_pages"]:
                t[name] = relayout(k.get(f"layout:{name}", LayoutClass()), "int32", (bs, s["max_seq_pages"]))
    elif kind == "negative_slot":
        table[:, read_column()] = -d.choice((1, ps + 1, 2**31))
    elif kind == "slot_past_mapping":
        table[:, read_column()] = v["swa_mapping"].shape[0] + d.choice((0, 1, 1000))
    elif kind == "loc_past_mapping":
        n = min(t["swa_out_cache_loc"].shape[0], v["out_cache_loc"].shape[0])
        v["out_cache_loc"][d.integer(0, n - 1)] = v["swa_mapping"].shape[0] + d.choice((0, 1, 1000))
    elif kind == "q_overflow":
        if s["q_mode"] == 2:
            s["q_stride"] = INT32_MAX // bs + 1
        else:
            v["qlens"][:] = INT32_MAX // max(bs - 1, 1) + 1 if bs > 1 else INT32_MAX + 1
    elif kind == "cu_seqlens_short":
        t["cu_seqlens_k"] = relayout(k.get("layout:cu_seqlens_k", LayoutClass()), "int32", (bs,))
    if k["layout:req_to_token"].kind == "broadcast":
        table[:] = table[0]
    v["seq_lens"], v["req_to_token"] = lens, table
    for name in ("seq_lens", "qlens"):
        if name in v and t[name].dtype == "int32" and int(np.abs(v[name]).max(initial=0)) > INT32_MAX:
            t[name] = relayout(k.get(f"layout:{name}", LayoutClass()), "int64", v[name].shape, v[name])
    relaid(k, t, v, ("req_pool_indices", "seq_lens", "req_to_token", "out_cache_loc", "qlens"))
    return Case(OP, s, t, v, variant=case.variant, meta={"violation": kind})


def graph_features(case: Case) -> set[str]:
    from .contract import kernel_path, row_pages

    s, t, v = case.scalars, case.tensors, case.values
    if "req_pool_indices" not in t or type(s.get("page_size")) is not int or s["page_size"] < 1:
        return set()
    bs = t["req_pool_indices"].shape[0]
    P, ps = s.get("max_seq_pages"), s["page_size"]
    out = {f"path:{kernel_path(case)}", f"page_size:{ps}"}
    if not s.get("skip_page_table") and ("swa_page_table" in t) != ("swa_out_cache_loc" in t):
        out.add("swa:table_only" if "swa_page_table" in t else "swa:out_only")
    if bs in (1, 2, 3, *BS_EDGES):  # BS_BLOCK 1, 2, 4 (3 of 4), 1024, 2048
        out.add(f"bs:{bs}")
    if bs > 256:
        out.add("bs:past_256")
    if isinstance(P, int) and P * ps >= 32768:
        out.add("size:production")
    if isinstance(P, int):
        if P == 0:
            out.add("P:zero")
        if P in P_EDGES:
            out.add(f"P:{P}")
    if s.get("seqlen_offset"):
        out.add("offset:nonzero")
    lens = v.get("seq_lens")
    if lens is None or not isinstance(P, int) or P < 0:
        return out
    seq = np.asarray(lens, np.int64) + int(s.get("seqlen_offset", 0))
    live = -(-np.maximum(seq, 0) // ps)
    seen = set(live.tolist())  # the distinct page counts, not a loop over every request
    for n in P_EDGES:
        if n in seen and n <= P:
            out.add(f"live:{n}")
    if seq.size and int(seq.min()) == 0:
        out.add("len:zero")
    if (live > P).any():
        out.add("len:past_width")
    if (live == P).any() and P > 0:
        out.add("len:full_width")
    if seq.size and int(seq.max()) == INT32_MAX - ps + 1:
        out.add("len:int32_edge")
    if (np.asarray(lens) == 1).any() and seq.size > 1:
        out.add("len:padding")
    if "swa_out_cache_loc" in t:
        L = t["swa_out_cache_loc"].shape[0]
        N = t["out_cache_loc"].shape[0] if "out_cache_loc" in t else None
        out.add("out:none" if N is None else "out:equal" if N == L else "out:short" if N < L else "out:long")
        for e in (PAGE_BLOCK - 1, PAGE_BLOCK, PAGE_BLOCK + 1):
            if L == e:
                out.add(f"L:{e}")
        locs = v.get("out_cache_loc")
        if locs is not None and N and (np.asarray(locs)[:min(L, N)] < 0).any():
            out.add("loc:sentinel")
    mapping = v.get("swa_mapping")
    if mapping is not None and "swa_page_table" in t and not s.get("skip_page_table"):
        m = np.asarray(mapping)
        if m.size and int(m.min()) < 0:
            out.add("swa:negative_entry")
    table = v.get("req_to_token")
    if table is not None and t["req_to_token"].shape[0] > 1 and t["req_to_token"].strides[0] != \
            t["req_to_token"].shape[1]:
        out.add("strided_rows")
    if table is not None and case.variant in ("default", "live_prefix") and not s.get("skip_page_table"):
        try:
            pages = row_pages(case)  # >= 0
            rows = np.asarray(v["req_pool_indices"], np.int64)
            tab = np.asarray(table)
            m = min(rows.shape[0], pages.shape[0])
            rows, pages = rows[:m], pages[:m]
            # each row's first column past its pages, where it is in the table: one gather, not a loop
            cols = pages * ps
            ok = (rows >= 0) & (rows < tab.shape[0]) & (pages < P) & (cols < tab.shape[1])
            if (tab[rows[ok], cols[ok]] < 0).any():
                out.add("stale:wild")
        except (KeyError, ValueError, TypeError):
            pass
    return out


def class_combinations(k: CompileClass) -> set[str]:
    """Each Q_MODE with each SWA combination the backend passes (no SWA, or both outputs); the
    launcher's one-output combinations, and each length of
    out_cache_loc against the SWA write locations once each."""
    if k.get("skip"):
        return set()
    out = {f"q{k['q_mode']}/{k['swa']}" if k["swa"] in ("none", "both") else f"swa:{k['swa']}"}
    if k["swa"] in ("both", "out") and k["L"] not in (ZERO, ONE):
        out.add(f"out:{k['loc']}")
    return out


def required_features() -> set[str]:
    paths = {f"path:q{q}/{a}/{b}" for q in (0, 1, 2) for a, b in (("no_swa", "no_swa_out"), ("swa", "swa_out"))}
    return (paths | {"swa:table_only", "swa:out_only"}
            | {f"bs:{b}" for b in (1, 2, 3, *BS_EDGES)} | {f"P:{e}" for e in P_EDGES[:3]}
            | {f"live:{e}" for e in P_EDGES[:3]} | {f"L:{e}" for e in (PAGE_BLOCK - 1, PAGE_BLOCK, PAGE_BLOCK + 1)}
            | {f"page_size:{ps}" for ps in PRODUCTION}
            | {"P:zero", "offset:nonzero", "len:zero", "len:past_width", "len:full_width", "len:padding",
               "out:none", "out:equal", "out:short", "out:long", "loc:sentinel", "swa:negative_entry",
               "strided_rows", "stale:wild"})


GENERIC_REQUIRED = {"misaligned", "broadcast:req_to_token",
                    *(f"dtype:{n}:{dt}" for n in ("req_pool_indices", "seq_lens", "swa_mapping", "out_cache_loc")
                      for dt in ("int32", "int64"))}


def all_required_features() -> set[str]:
    """Every feature a campaign of a few minutes must exercise for trtllm_mha_graph_metadata."""
    return GENERIC_REQUIRED | required_features()


GENERATOR = OpGenerator(OP, graph_class, graph_in_class, graph_violation, OUT_OF_CONTRACT, graph_features,
                        all_required_features, class_combinations, graph_variant_class)
