"""Cases for `pa_page_table` (_build_pa_page_table, the prefill-aware SWA page table).

SGLang's kernel takes `window_size` and BLOCK_SIZE (256) as constexprs and the row strides of
`req_to_token` and `dst_page_table` as integers, and its wrapper copies `seq_lens` to int32 and
`req_pool_indices` to a contiguous tensor: a compile class fixes the window (production-like
sizes, 0, 1, the block edges 255 / 256 / 257, int32's largest), the table's width C (around the
block edges too), the destination's width W as the backend sizes it (eager: exactly pa_max_len,
at a block edge or C; graph replay: max_context_len, C or a few columns under it; wider than the
row), the dtypes and layouts (an int64 `seq_lens` in any layout, the wrapper copies it; an int32
one with unit stride) and the batch's size class.

A case draws each request's kv_len = min(n, f + w) at the block edges (0, 1, 255, 256, 257, 511,
512, 513) and at the row's capacity, then a prefill f and length n that give it: without a gap
(n = kv_len: a fresh request f = n, the window just full f = n - w, a whole row under the window)
or with one (n > f + w: the window skips n - kv_len slots; f = 0 is a pure sliding window, f at a
block edge puts the prefill/window seam there). Pool rows: distinct, the pool's first and last
among them, CUDA-graph padding requests (row 0, length 1, prefill 0), repeated rows (their
prefill is one value, the least the requests sharing it drew). `prefill_lens` holds one entry per
pool row (0.5.18's sizing) or more, and garbage (any int32) in the rows no request reads; slots
are any int32 (a gather copies them), 0 and int32's largest among those read. `pa_max_len` is
W (eager), the tightest bound (the largest kv_len), or SGLang's min(max_pf + w, max_len) with a
ratcheted max_pf. Half the eager-sized classes make the eager call itself (`eager`: both
outputs None, the wrapper allocates them).

One class in sixteen is a production class (`size: production`): a `req_to_token` of 32768 to
131329 columns (SGLang's max_context_len for a 128K context) with the windows of production
models (128 to 32768, or none), one to three requests whose kv_len reaches 131072 (a long
prefill kept whole, the window after it), at the 32768 and 65536 edges too; or a batch of 257 to
1024 requests (a CUDA-graph or eager decode batch past 256) over a table of the base widths.
SGLang's kernel runs one program per request and loops over 256-token blocks, so such a case
takes about a second to a few seconds under the CPU interpreter.
"""

from __future__ import annotations

import numpy as np

from ...case import Case
from ...strategies import OpGenerator
from ...strategies.draw import CompileClass, Draw
from ...strategies.layouts import LayoutClass, layout_class, relayout
from ...strategies.values import rng
from ..kv_index_common import batch_size, editable, generic_required, laid_out, relaid, strided_rows, table_layout, \
    token_table
from .contract import BLOCK, kv_lens

OP = "pa_page_table"
INT32_MAX = 2**31 - 1
WINDOWS = (128, 1, 0, 2, BLOCK - 1, BLOCK, BLOCK + 1, 512, 1024, 4096, INT32_MAX)  # w, a constexpr
WIDTHS = (1, 16, 100, BLOCK - 1, BLOCK, BLOCK + 1, 300, 2 * BLOCK - 1, 2 * BLOCK, 2 * BLOCK + 1, 1024, 1100)  # C
EDGES = (0, 1, BLOCK - 1, BLOCK, BLOCK + 1, 2 * BLOCK - 1, 2 * BLOCK, 2 * BLOCK + 1)  # kv_len: the copy loop's edges
PREFILL_EDGES = (0, 1, BLOCK - 1, BLOCK, BLOCK + 1)  # f with a gap: the prefill/window seam at a block edge
OUT_OF_CONTRACT = ("pool_index_out_of_range", "past_prefill_lens", "past_row", "prefill_past_seq_len",
                   "negative_len", "negative_prefill", "kv_len_past_width", "kv_len_past_pa_max_len",
                   "pa_max_len_past_width", "pa_max_len_zero", "negative_window")
ONE_D = ("req_pool_indices", "seq_lens", "prefill_lens", "dst_kv_lens")
# production classes (one in sixteen): a 128K context's table, or a batch past 256
PROD_WIDTHS = (32768, 65536, 131072, 131072 + BLOCK + 1)  # C: max_context_len
PROD_WINDOWS = (128, 512, 1024, 4096, 8192, 32768, INT32_MAX)  # sliding_window_size of production models
PROD_EDGES = EDGES + (32767, 32768, 32769, 65536, 131072)  # kv_len
PROD_PREFILL_EDGES = PREFILL_EDGES + (32768, 65536)  # f with a gap: a long prefill, the window after it
PROD_BATCHES = (257, 512, 1024)


def _width(d: Draw, mode: str, C: int) -> int:
    """dst_page_table's width W for a table of width C, as the backend sizes it."""
    if mode == "eager":  # (bs, pa_max_len): the case's pa_max_len is W
        return d.choice(tuple(dict.fromkeys(min(C, e) for e in (C, BLOCK - 1, BLOCK, BLOCK + 1, 2 * BLOCK + 1, 16, 1))))
    if mode == "graph":  # (max_bs, max_context_len)[:bs]: req_to_token is a few columns wider than the context
        return max(C - d.choice((0, 4, 7)), 1)
    return C + BLOCK + 1  # "wide": past the row


def _prod_width(d: Draw, mode: str, C: int) -> int:
    """W for a production table of width C: eager pa_max_len at a long context's edges."""
    if mode == "eager":
        return d.choice(tuple(dict.fromkeys(min(C, e) for e in (C, 32768, 32769, 65536 + BLOCK))))
    return _width(d, mode, C)


def pa_class(d: Draw) -> CompileClass:
    C = d.choice(WIDTHS)
    mode = d.choice(("eager", "graph", "wide"))
    p = {
        "window_size": d.choice(WINDOWS),
        "C": C,
        "mode": mode,
        "W": _width(d, mode, C),
        "bs": d.choice(("one", "few", "big")),
        "dtype:req_pool_indices": d.choice(("int64", "int32")),
        "dtype:seq_lens": d.choice(("int64", "int32")),
        "dtype:prefill_lens": d.choice(("int32", "int64")),
        "layout:req_to_token": table_layout(d),
        "layout:dst_page_table": layout_class(d, "out", 2, ("contiguous", "offset", "padded")),
        "layout:req_pool_indices": layout_class(d, "in", 1, ("contiguous", "offset", "step", "broadcast")),
    }
    # the wrapper's int32 copy of an int64 seq_lens is contiguous; an int32 one reaches the kernel as it is
    p["layout:seq_lens"] = layout_class(d, "in", 1, ("contiguous", "offset", "step") if p["dtype:seq_lens"] == "int64"
                                        else ("contiguous", "offset"))
    for name in ("prefill_lens", "dst_kv_lens"):
        p[f"layout:{name}"] = layout_class(d, "in" if name == "prefill_lens" else "out", 1, ("contiguous", "offset"))
    if mode == "eager":  # the eager call itself (the wrapper allocates), or graph replay into an eager-sized table
        p["eager_call"] = d.boolean()
    if p["layout:req_pool_indices"].kind == "broadcast" and p["bs"] == "one":
        p["bs"] = "few"  # one row read by every request needs more than one request
    return CompileClass.of(OP, p)


def pa_campaign_class(d: Draw) -> CompileClass:
    """A class of the campaign: the base class, or one time in sixteen a production size (a 128K
    context's table for one to three requests, or a batch past 256 over a base table)."""
    k = pa_class(d)
    if d.integer(0, 15):
        return k
    p = dict(k.items)
    p["size"] = "production"
    if d.integer(0, 2):  # a long context
        p["C"] = C = d.choice(PROD_WIDTHS)
        p["W"] = _prod_width(d, p["mode"], C)
        p["window_size"] = d.choice(PROD_WINDOWS)
        p["bs"] = d.choice(("one", "few"))
    else:
        p["bs"] = "past"
    return CompileClass.of(OP, p)


def _request(d: Draw, g, w: int, C: int, K: int, edges: bool, production: bool = False) -> tuple[int, int]:
    """(f, n) of one request whose kv_len = min(n, f + w) is at most K (the row's capacity) and
    n at most C: kv_len at a block edge or K (`edges`; a production class's long-context edges
    too), else small."""
    kv_edges, prefill_edges = (PROD_EDGES, PROD_PREFILL_EDGES) if production else (EDGES, PREFILL_EDGES)
    if edges:
        k = d.one_of(lambda: d.choice([e for e in kv_edges if e <= K] or [0]), lambda: K, lambda: d.integer(0, K))
    else:
        k = int(g.integers(0, min(K, 40) + 1))
    if d.boolean() and w <= K and w < C:  # a gap: n > f + w, kv_len = f + w
        seams = [f for f in prefill_edges if f + w <= K and f + w < C]
        f = d.one_of(lambda: k - w, lambda: d.choice(seams)) if seams else k - w
        if f >= 0 and f + w < C:
            k = f + w
            n = d.one_of(lambda: k + 1, lambda: C, lambda: min(C, k + BLOCK), lambda: d.integer(k + 1, C))
            return f, n
    # no gap: n = kv_len <= f + w
    f = d.one_of(lambda: k, lambda: max(0, k - w), lambda: 0 if k <= w else k - w,
                 lambda: d.integer(max(0, k - w), k))
    return f, k


def _rows(d: Draw, g, P: int, bs: int) -> tuple[list[int], int]:
    """Each request's pool row, and how many trailing requests are CUDA-graph padding (row 0)."""
    how = d.choice(("distinct", "ends", "padding", "any"))
    rows = [int(x) for x in (g.permutation(P)[:bs] if P >= bs else g.integers(0, P, size=bs))]
    pad = 0
    if how == "ends" and bs:
        rows[d.integer(0, bs - 1)] = 0
        rows[d.integer(0, bs - 1)] = P - 1
    elif how == "padding" and bs:
        pad = d.integer(1, bs)
        rows[bs - pad:] = [0] * pad
    elif how == "any":
        rows = [int(x) for x in g.integers(0, P, size=bs)]
    return rows, pad


def pa_in_class(d: Draw, k: CompileClass) -> Case:
    w, C, W, mode = k["window_size"], k["C"], k["W"], k["mode"]
    production = k.get("size") == "production"
    bs = d.choice(PROD_BATCHES) if k["bs"] == "past" else batch_size(d, k, big=24)
    if k["bs"] == "few" and not production and d.integer(0, 15) == 0:
        bs = 0  # an idle batch: the wrapper launches nothing
    g = rng(d.seed())
    broadcast_table = k["layout:req_to_token"].kind == "broadcast"
    P = 1 if broadcast_table and d.boolean() else max(1, d.choice((bs + 1, bs, bs + d.integer(2, 9))))
    K = min(C, W)
    reqs = [_request(d, g, w, C, K, bs <= 4 or d.integer(0, 7) == 0, production) for _ in range(bs)]
    rows, pad = _rows(d, g, P, bs)
    if k["layout:req_pool_indices"].kind == "broadcast" and bs:
        rows = [rows[0]] * bs  # one row read by every request (laid_out would make it so)
    for i in range(bs - pad, bs):
        reqs[i] = (0, 1)  # padding: SGLang's seq_len fill value, row 0's prefill never recorded
    PL = d.choice((P, P, P + d.integer(1, 5)))  # one entry per pool row (0.5.18 on), or more
    pf = g.integers(-(2**31), 2**31, size=PL) if d.boolean() else g.integers(0, 2 * C + 2, size=PL)
    shared: dict[int, int] = {}
    for r, (f, n) in zip(rows, reqs):  # a row read by several requests holds one prefill: the least
        shared[r] = min(shared.get(r, f), f)
    for r, f in shared.items():
        pf[r] = f
    lens = [n for _, n in reqs]
    top = d.choice((1 << 20, 2**31))
    table = token_table(d, g, P, C, top)
    live = [i for i in range(bs) if lens[i] > 0]
    if live:  # a read slot 0 (the row's first) and int32's largest (its last), in every row (a repeated row too)
        ends = d.choice(("none", "first", "last", "both"))
        i = live[d.integer(0, len(live) - 1)]
        if ends in ("first", "both"):
            table[:, 0] = 0
        if ends in ("last", "both"):
            table[:, lens[i] - 1] = INT32_MAX
    values = {"req_to_token": table, "req_pool_indices": np.array(rows, np.int64),
              "seq_lens": np.array(lens, np.int64), "prefill_lens": pf}
    shapes = {"req_to_token": ("int32", (P, C)), "req_pool_indices": (k["dtype:req_pool_indices"], (bs,)),
              "seq_lens": (k["dtype:seq_lens"], (bs,)), "prefill_lens": (k["dtype:prefill_lens"], (PL,)),
              "dst_page_table": ("int32", (bs, W)), "dst_kv_lens": ("int32", (bs,))}
    tensors = laid_out(k, shapes, values)
    case = Case(OP, {"window_size": w, "pa_max_len": 0}, tensors, values)
    kv = kv_lens(case)
    top_kv = int(kv.max()) if bs else 0
    lo = max(1, top_kv) if bs else 0
    if mode == "eager":
        cap = W
    else:
        max_pf = max((f for f, _ in reqs), default=0) + d.choice((0, 0, d.integer(1, 300)))  # the ratchet
        sglang = min(max_pf + w, max(lens, default=0))
        cap = d.choice((lo, sglang, W))
    if k.get("eager_call"):
        return case.with_scalars(pa_max_len=W, eager=True)
    return case.with_scalars(pa_max_len=min(max(cap, lo), W))


def pa_violation(d: Draw, case: Case, k: CompileClass, kind: str | None = None) -> Case:
    t, v = editable(case)
    s = dict(case.scalars)
    P, C = t["req_to_token"].shape
    bs, W = t["dst_page_table"].shape
    kind = kind or d.choice(OUT_OF_CONTRACT)
    if bs == 0 and kind not in ("pa_max_len_past_width", "negative_window"):
        kind = "pa_max_len_past_width"  # no request: only the scalars' rules can break
    rows, lens, pf, table = v["req_pool_indices"], v["seq_lens"], v["prefill_lens"], v["req_to_token"]
    i = d.integer(0, bs - 1) if bs else 0

    def current() -> np.ndarray:  # the kv_lens of the values as edited so far (Case freezes what it holds: copies)
        return kv_lens(Case(OP, s, t, {n: x.copy() for n, x in v.items()}))

    if kind == "pool_index_out_of_range":
        rows[i] = d.choice((P, P + 1, -1))
    elif kind == "past_prefill_lens":  # 0.5.15 - 0.5.17's sizing: one entry short of the pool's rows
        rows[i] = P - 1
        v["prefill_lens"] = pf = pf[:P - 1]
    elif kind == "past_row":  # a length past the row: the window reads past it
        lens[i] = C + d.choice((1, BLOCK, BLOCK + 1))
    elif kind == "prefill_past_seq_len":
        pf[rows[i]] = int(lens[i]) + d.choice((1, BLOCK, C + 1))
    elif kind == "negative_len":
        lens[i] = -d.choice((1, BLOCK + 1))
    elif kind == "negative_prefill":
        pf[rows[i]] = -d.choice((1, BLOCK, 2**31))
    elif kind in ("kv_len_past_width", "kv_len_past_pa_max_len"):
        need = 1 if kind == "kv_len_past_width" else 2
        if int(current().max()) < need:  # a request keeping `need` cells: its whole row, f = n
            lens[i] = max(int(lens[i]), min(need, C))
            pf[rows[i]] = lens[i]
        most = int(current().max())
        under = max(most - d.integer(1, max(1, min(most, 3))), 0)
        if kind == "kv_len_past_width":  # the table narrower than a row's kv_len: written into the next row
            W = under
            s["pa_max_len"] = min(s["pa_max_len"], W)
        else:
            s["pa_max_len"] = under
    elif kind == "pa_max_len_past_width":
        s["pa_max_len"] = W + d.choice((1, BLOCK))
    elif kind == "pa_max_len_zero":
        s["pa_max_len"] = 0
    elif kind == "negative_window":  # SGLang's "no sliding window"
        s["window_size"] = -d.choice((1, 2))
    if kind == "past_row":  # one broken rule at a time: room for every cell
        most = int(current().max())
        W = max(W, most)
        s["pa_max_len"] = max(s["pa_max_len"], most)
    if k["layout:req_to_token"].kind == "broadcast":
        table[:] = table[0]
    t["dst_page_table"] = relayout(k.get("layout:dst_page_table", LayoutClass()), "int32", (bs, max(W, 0)))
    relaid(k, t, v, ("req_pool_indices", "seq_lens", "prefill_lens", "req_to_token"))
    return Case(OP, s, t, v, meta={"violation": kind})


def pa_features(case: Case) -> set[str]:
    t, v, s = case.tensors, case.values, case.scalars
    out_spec = t.get("dst_page_table")
    w, cap = s.get("window_size"), s.get("pa_max_len")
    if out_spec is None or len(out_spec.shape) != 2 or type(w) is not int or type(cap) is not int:
        return set()
    R, W = out_spec.shape
    out = set(strided_rows(case))
    if s.get("eager"):
        out.add("eager_call")  # the wrapper allocates both outputs
    if R == 0:
        out.add("bs:zero")
    if R >= 17:
        out.add("big_batch")
    if R > 256:
        out.add("bs:past_256")
    if R > 1 and out_spec.strides[0] != W:
        out.add("dst:padded_rows")
    if w == 0:
        out.add("window:zero")
    elif w == 1:
        out.add("window:one")
    elif w == INT32_MAX:
        out.add("window:int32_max")
    rows = np.asarray(v.get("req_pool_indices", ()), np.int64).tolist()
    lens = np.asarray(v.get("seq_lens", ()), np.int64).tolist()
    pf = np.asarray(v.get("prefill_lens", ()), np.int64)
    table = t.get("req_to_token")
    if table is None or len(table.shape) != 2 or len(rows) != len(lens) or len(rows) != R:
        return out
    P, C = table.shape
    if C >= 32768 or R > 256:
        out.add("size:production")
    if pf.shape[0] > P:
        out.add("prefill_lens:longer")
    if len(set(rows)) < len(rows):
        out.add("pool:shared_row")
    if 0 in rows:
        out.add("pool:first_row")
    if P > 1 and P - 1 in rows:
        out.add("pool:last_row")
    kv = kv_lens(case).tolist()
    slots = np.asarray(v.get("req_to_token")) if "req_to_token" in v else None
    for i, (r, n, k) in enumerate(zip(rows, lens, kv)):
        if not (0 <= r < min(P, pf.shape[0]) and 0 <= n <= C):
            continue
        f = int(pf[r])
        if not 0 <= f <= n:
            continue
        gap = n - k
        if k == 0:
            out.add("kv:zero")
        if k in EDGES[1:]:
            out.add(f"edge:kv:{k}")
        if k > 2 * BLOCK:
            out.add("kv:three_blocks")
        if k == W and k > 0:
            out.add("width:full")
        if gap > 0:
            out.add("gap:one" if gap == 1 else "gap:positive")
            if f == 0:
                out.add("swa:pure")  # no prefill: a plain sliding window
            if f in PREFILL_EDGES[2:]:
                out.add(f"seam:{f}")  # the prefill/window seam at a block edge
        elif k > 0:
            out.add("gap:zero")
        if f == n and n > 0:
            out.add("fresh")  # the request's prefill is its whole length
        if w >= n > f:
            out.add("window:covers")  # the window reaches back into the prefill: the whole row
        if w == 0 and f < n:
            out.add("prefill:only")
        if n == C and gap > 0:
            out.add("row_end")  # the window ends at the row's last column
        if r == 0 and n == 1 and f == 0:
            out.add("padding")
        if slots is not None and k > 0:
            read = np.concatenate([slots[r, :f], slots[r, n - (k - f):n]])
            if int(read.max()) == INT32_MAX:
                out.add("slot:int32_max")
            if int(read.min()) < 0:
                out.add("slot:negative")
    if R and kv and max(kv) < W:
        out.add("width:spare")
    if R and kv and cap == max(max(kv), 1):
        out.add("pa_max_len:tight")
    if R and cap < W:
        out.add("pa_max_len:below_width")
    return out


def required_features() -> set[str]:
    return ({"bs:zero", "big_batch", "dst:padded_rows", "strided_rows", "window:zero", "window:one",
             "window:int32_max", "prefill_lens:longer", "pool:shared_row", "pool:first_row", "pool:last_row",
             "kv:zero", "kv:three_blocks", "width:full", "width:spare", "gap:one", "gap:positive", "gap:zero",
             "swa:pure", "fresh", "window:covers", "prefill:only", "row_end", "padding", "slot:int32_max",
             "slot:negative", "pa_max_len:tight", "pa_max_len:below_width"}
            | {f"edge:kv:{e}" for e in EDGES[1:]}
            | {f"seam:{f}" for f in PREFILL_EDGES[2:]})


# Generic features (strategies.coverage.generic_features) every campaign must reach
GENERIC_REQUIRED = generic_required(("req_pool_indices", "seq_lens", "prefill_lens")) | {"broadcast:req_pool_indices"}


def all_required_features() -> set[str]:
    """Every feature a campaign of a few minutes must exercise for pa_page_table."""
    return GENERIC_REQUIRED | required_features()


GENERATOR = OpGenerator(OP, pa_campaign_class, pa_in_class, pa_violation, OUT_OF_CONTRACT, pa_features, all_required_features)
