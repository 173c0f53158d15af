"""Cases for `draft_extend_metadata` (draft_extend_set_metadata, SGLang 0.5.16 on).

A compile class fixes what SGLang's and kvfuzz's kernels specialise on: the page size
(`PAGE_SIZE_ONE`, `SHIFT`), SWA or not (`HAS_SWA`, None pointers), the write locations per
request (`tokens_per_req` and SGLang's `OUT_BLOCK = next_power_of_2` of it), every dtype, every
tensor's layout class (`swa_page_table` shares `page_table`'s: SGLang asserts equal strides),
and the integer class of the batch size, of the table width `W` (SGLang's `max_seq_pages`) and
of every row length that becomes a stride. A case then draws sizes inside those classes (the
256-column block's edges, padding rows of length 0, rows longer than the table) and values.

One class in sixteen is a production class (`size: production`): a table of 32768 to 132072
tokens (W = tokens / page size: 32768 to 132072 columns at page size 1, SGLang's `max_seq_pages`
for a 128K context) for one to three requests, or a CUDA-graph batch of 257 to 1025 requests
(SGLang's `cuda_graph_max_bs` past 256; the single prefix-sum program then runs past its first
blocks) over a table of at most 513 columns. The interpreter runs one program per request and
block of columns, so such a case takes seconds on the CPU.
"""

from __future__ import annotations

import numpy as np

from ...case import Case, TensorSpec
from ...strategies import OpGenerator
from ...strategies.draw import DIV16, ONE, PLAIN, ZERO, CompileClass, Draw, fit, int_class, width
from ...strategies.layouts import LayoutClass, apply_broadcast, class_layout, layout_class, relayout
from ...strategies.values import INDEX_PATTERNS, SWA_TOKEN_PATTERNS, TOKEN_PATTERNS, pick, rng, tokens

OP = "draft_extend_metadata"
BLOCK = 256  # SGLang's BLOCK_COLS
PAGE_SIZES = (1, 16, 2, 4, 64, 128)
BAD_PAGE_SIZES = (3, 0, -4, 6, 48)
# write locations per request: SGLang compiles OUT_BLOCK = next_power_of_2(tokens_per_req), and
# Triton the integer class of tokens_per_req: one class per (OUT_BLOCK, class) pair
TOKENS_PER_REQ = {"1": (1,), "2": (2,), "4": (3, 4), "8": (5, 6, 7, 8), "16": (16,), "32": (17, 23, 31)}
OUT_OF_CONTRACT = ("page_size", "page_table_rows", "cu_seqlens_q_len", "pool_index", "swa_token", "out_loc",
                   "negative_len", "len_overflow", "swa_strides", "out_tokens")
INPUTS = ("req_to_token", "req_pool_indices", "seq_lens", "extend_seq_lens", "full_to_swa_index_mapping",
          "out_cache_loc")
OUTPUTS = ("cache_seqlens_int32", "cu_seqlens_k", "cu_seqlens_q", "page_table", "swa_out_cache_loc")
SWA_ONLY = ("full_to_swa_index_mapping", "out_cache_loc", "swa_out_cache_loc")
TWO_D = ("page_table", "req_to_token")
MAX_TOKENS = 1 << 14  # tokens per request slot: a case stays small
# production classes (one in sixteen): a long context for a few requests, or a batch past 256
PROD_TOKENS = (32768, 65536, 131072, 131072 + 1000)
PROD_BATCHES = {PLAIN: (257, 300, 1025), DIV16: (512, 1024, 272)}  # B by its integer class
BATCH_WIDTH = 2 * BLOCK + 1  # a production batch's widest table


def draft_extend_class(d: Draw) -> CompileClass:
    ps = d.choice(PAGE_SIZES)
    swa = d.boolean()
    W = d.choice((PLAIN, DIV16, ONE, ZERO))
    p = {
        "page_size": ps, "swa": swa, "path": "swa" if swa else "ps1" if ps == 1 else "general",
        "B": d.choice((PLAIN, ONE)), "R": d.choice((PLAIN, ONE)), "W": W,
        # a one-column req_to_token only where no row reads past its first page
        "T": d.choice((PLAIN, DIV16, ONE) if W in (ONE, ZERO) else (PLAIN, DIV16)),
        "tokens_per_req": d.choice(tuple(TOKENS_PER_REQ)) if swa else "0",
    }
    for name in ("seq_lens", "extend_seq_lens", "req_pool_indices", "req_to_token", *SWA_ONLY):
        if swa or name not in SWA_ONLY:
            p[f"dtype:{name}"] = d.choice(("int64", "int32"))
    for name in (*OUTPUTS, *INPUTS):
        if swa or name not in SWA_ONLY:
            p[f"layout:{name}"] = layout_class(d, "in" if name in INPUTS else "out", 2 if name in TWO_D else 1)
    return CompileClass.of(OP, p)


def draft_extend_campaign_class(d: Draw) -> CompileClass:
    """A class of the campaign: the base class, or one time in sixteen a production size (a
    long table for one to three requests, or a batch past 256 over a short one)."""
    k = draft_extend_class(d)
    if d.integer(0, 15):
        return k
    p = dict(k.items)
    p["size"] = "production"
    p["shape"] = d.choice(("wide", "wide", "batch"))
    if p["shape"] == "wide":  # W and T in a class that holds a long context
        p["W"] = d.choice((PLAIN, DIV16)) if p["W"] in (ONE, ZERO) else p["W"]
        p["T"] = d.choice((PLAIN, DIV16)) if p["T"] == ONE else p["T"]
    else:
        p["B"] = d.choice((PLAIN, DIV16))
    return CompileClass.of(OP, p)


def _width(d: Draw, cls: str, cap: int) -> int:
    """The table width W, on the block's edges, inside its integer class and below `cap`."""
    if cls in (ONE, ZERO):
        return 1 if cls == ONE else 0
    v = d.choice((BLOCK, 16, 2 * BLOCK, 32)) if cls == DIV16 else d.one_of(
        lambda: d.choice((BLOCK - 1, BLOCK + 1, 2, 3, 2 * BLOCK + 1)), lambda: fit(d.integer(2, 40), PLAIN))
    if v > cap:
        v = cap
        while v > 0 and int_class(v) != cls:
            v -= 1
    return v


def draft_extend_in_class(d: Draw, k: CompileClass, variant: str = "default") -> Case:
    ps, swa = k["page_size"], k["swa"]
    prod = k.get("shape") if k.get("size") == "production" else None  # "wide", "batch" or None
    if prod == "batch":
        B, W = d.choice(PROD_BATCHES[k["B"]]), _width(d, k["W"], BATCH_WIDTH)
    else:
        B = 1 if k["B"] == ONE else d.integer(2, 6 if prod is None else 3)
        W = _width(d, k["W"], MAX_TOKENS // ps) if prod is None else fit(d.choice(PROD_TOKENS) // ps, k["W"])
    g = rng(d.seed())
    # each row's live pages: the whole width (or the block edge), a few, none (CUDA-graph padding)
    live_top = d.choice((W, W - 1, min(W, BLOCK - 1), min(W, BLOCK + 1), min(W, 3))) if W else 0
    live_top = max(live_top, 0)
    live = g.integers(0, live_top + 1, size=B)
    live[g.integers(0, B)] = live_top
    if d.boolean():
        live[B // 2:] = 0  # padding rows
    lens = np.where(live > 0, (live - 1) * ps + g.integers(1, ps + 1, size=B), 0)
    if W and d.boolean():  # a row longer than the table: its pages stop at W
        lens[g.integers(0, B)] = W * ps + d.choice((1, ps, 1000))
    need = int(min(max(-(-int(lens.max()) // ps), 1), max(W, 1)))  # columns read at most
    T = width(max((need - 1) * ps + 1 + d.choice((0, 1, ps)), 1), k["T"])
    R = 1 if k["R"] == ONE else d.integer(2, 5)
    tpr = d.choice(TOKENS_PER_REQ[k["tokens_per_req"]]) if swa else 0
    shapes = {
        "cache_seqlens_int32": ("int32", (B,)), "cu_seqlens_k": ("int32", (B + 1,)),
        "cu_seqlens_q": ("int32", (B + 1,)), "page_table": ("int32", (B, W)),
        "req_to_token": (k["dtype:req_to_token"], (R, T)), "req_pool_indices": (k["dtype:req_pool_indices"], (B,)),
        "seq_lens": (k["dtype:seq_lens"], (B,)), "extend_seq_lens": (k["dtype:extend_seq_lens"], (B,)),
    }
    N = 0
    if swa:
        N = max(R * T + d.choice((0, 1, 1000)), 2)  # a one-entry mapping's stride would leave the class
        shapes["full_to_swa_index_mapping"] = (k["dtype:full_to_swa_index_mapping"], (N,))
        shapes["out_cache_loc"] = (k["dtype:out_cache_loc"], (B * tpr,))
        shapes["swa_out_cache_loc"] = (k["dtype:swa_out_cache_loc"], (B * tpr,))
    tensors, bcast = {}, {}
    for name, (dt, shape) in shapes.items():
        tensors[name], bcast[name] = class_layout(k, name, dt, shape)
    if swa:  # SGLang asserts equal shapes and strides: the same layout class on the same shape
        tensors["swa_page_table"], _ = class_layout(k, "swa_page_table", "int32", (B, W), "page_table")

    pattern = d.choice(SWA_TOKEN_PATTERNS if swa else TOKEN_PATTERNS)
    values = {
        "req_to_token": tokens(pattern, d.seed(), (R, T), N if swa else 1 << 20),
        "req_pool_indices": pick(d.seed(), B, R, d.choice(INDEX_PATTERNS)),
        "seq_lens": lens,
        "extend_seq_lens": g.integers(0, d.choice((1, 9, 1 << 16)) + 1, size=B),
    }
    padding_pool = d.boolean()  # padding rows may carry any pool index: they have no pages to read
    if swa:
        mp = d.choice(("arange", "random", "negative", "large"))
        mapping = tokens(mp, d.seed(), (N,), 1 << 24)
        if k["dtype:swa_out_cache_loc"] == "int32":  # every slot it receives fits it
            mapping = np.clip(mapping, -(2**31), 2**31 - 1)
        values["full_to_swa_index_mapping"] = mapping
        values["out_cache_loc"] = tokens(d.choice(SWA_TOKEN_PATTERNS), d.seed(), (B * tpr,), N)
    for name in values:
        if bcast[name] is not None:
            values[name] = apply_broadcast(values[name], bcast[name])
    if bcast["seq_lens"] is not None:  # a constant column: every row the longest
        values["seq_lens"] = np.full(B, int(lens.max()))
    if padding_pool and bcast["req_pool_indices"] is None and tensors["req_pool_indices"].strides != (0,):
        bad = -1 if k["dtype:req_pool_indices"] == "int32" else d.choice((-1, R, 2**40))
        live_now = (values["seq_lens"] > 0) & (W > 0)  # cdiv(len, ps), at most W, is positive
        values["req_pool_indices"] = np.where(live_now, values["req_pool_indices"], bad)
    return Case(OP, {"page_size": ps}, tensors, values, variant=variant)


def draft_extend_violation(d: Draw, case: Case, k: CompileClass, kind: str | None = None) -> Case:
    """One violation (`kind`, else drawn) applied to an in-contract case; a kind that cannot
    apply to this case leaves it as is."""
    t, v, s = dict(case.tensors), dict(case.values), dict(case.scalars)
    B, W = t["cache_seqlens_int32"].shape[0], t["page_table"].shape[1]
    swa = "full_to_swa_index_mapping" in t
    live = np.clip(-(-np.asarray(v["seq_lens"], dtype=np.int64) // s["page_size"]), 0, W)
    kinds = [x for x in OUT_OF_CONTRACT
             if not (x in ("swa_token", "out_loc", "swa_strides", "out_tokens") and not swa)
             and not (x in ("pool_index", "swa_token") and not live.any())
             and not (x == "swa_strides" and (B < 2 or W < 2))]
    if kind is None:
        kind = d.choice(kinds)
    elif kind not in kinds:
        return case

    def relaid(name: str, shape: tuple[int, ...], dtype: str | None = None, values=None) -> TensorSpec:
        lc = k.get(f"layout:{name}", k.get("layout:page_table") if name == "swa_page_table" else LayoutClass())
        return relayout(lc, dtype or t[name].dtype, shape, values)

    row = int(np.flatnonzero(live)[0]) if live.any() else 0
    if kind == "page_size":
        s["page_size"] = d.choice(BAD_PAGE_SIZES)
    elif kind == "page_table_rows":
        t["page_table"] = relaid("page_table", (max(B - 1, 0), W))
        if swa:
            t["swa_page_table"] = relaid("swa_page_table", (max(B - 1, 0), W))
    elif kind == "cu_seqlens_q_len":
        t["cu_seqlens_q"] = relaid("cu_seqlens_q", (B,))
    elif kind == "pool_index":
        pool = np.array(v["req_pool_indices"], dtype=np.int64)
        bad = d.choice((v["req_to_token"].shape[0], -1))
        if t["req_pool_indices"].strides == (0,):  # broadcast: every row shares one index
            pool[:] = bad
        else:
            pool[row] = bad
        v["req_pool_indices"] = pool
    elif kind == "swa_token":
        rtt = np.array(v["req_to_token"])
        pool = int(v["req_pool_indices"][row])
        bad = v["full_to_swa_index_mapping"].shape[0]
        rtt[pool, 0] = bad
        v["req_to_token"] = rtt
        t["req_to_token"] = relaid("req_to_token", rtt.shape, values=rtt)
    elif kind == "out_loc":
        locs = np.array(v["out_cache_loc"], dtype=np.int64)
        locs[:] = v["full_to_swa_index_mapping"].shape[0] + d.choice((0, 1000))
        v["out_cache_loc"] = locs
    elif kind == "negative_len":
        v["seq_lens"] = np.full(B, -1)
    elif kind == "len_overflow":  # lengths whose int32 sum overflows (B > 1), or that overflow themselves
        v["seq_lens"] = np.full(B, 2**31 - 1 + (B == 1))
        dt = t["seq_lens"].dtype if int(v["seq_lens"].max()) < 2**31 else "int64"
        t["seq_lens"] = relaid("seq_lens", (B,), dt, v["seq_lens"])
    elif kind == "swa_strides":  # the SWA table in another layout than page_table's
        pt = t["page_table"]
        t["swa_page_table"] = TensorSpec("int32", (B, W), (1, B) if pt.strides != (1, B) else (W, 1), 0, B * W)
    elif kind == "out_tokens":  # not a multiple of B (or none at all)
        K = t["out_cache_loc"].shape[0]
        K2 = K + 1 if B > 1 else 0
        locs = np.resize(np.asarray(v["out_cache_loc"], dtype=np.int64), K2) if K2 else np.zeros(0, np.int64)
        v["out_cache_loc"] = locs % max(v["full_to_swa_index_mapping"].shape[0], 1)
        t["out_cache_loc"] = relaid("out_cache_loc", (K2,), values=v["out_cache_loc"])
        t["swa_out_cache_loc"] = relaid("swa_out_cache_loc", (K2,))
    return Case(OP, s, t, v, variant=case.variant, meta={"violation": kind})


def draft_extend_features(case: Case) -> set[str]:
    s = case.scalars
    ps = s.get("page_size")
    swa = "full_to_swa_index_mapping" in case.tensors
    path = "swa" if swa else "ps1" if ps == 1 else "general"
    out = {f"path:{path}"}
    if not isinstance(ps, int) or ps <= 0 or ps & (ps - 1):
        return out | {"bad_page_size"}
    W = case.tensors["page_table"].shape[1] if len(case.tensors["page_table"].shape) == 2 else 0
    B = case.tensors["cache_seqlens_int32"].shape[0]
    if W == 0:
        out.add("zero_pages")
    lens = case.values.get("seq_lens")
    if lens is not None and lens.size:
        shortest, longest = int(lens.min()), int(lens.max())
        live = min(max(-(-longest // ps), 0), W)  # the most live pages of a row
        for e in (-1, 0, 1):
            if live == BLOCK + e:
                out.add(f"edge:{path}:{BLOCK + e}")
        if shortest == 0:
            out.add("zero_length")
        if W and longest > W * ps:
            out.add("longer_than_table")
    if W * ps >= 32768 or B > 256:
        out.add("size:production")
    if B > 256:
        out.add("bs:past_256")
    return out


def class_combinations(k: CompileClass) -> set[str]:
    """Each kernel path with each class of the width W (the block's edges 255 and 257 are plain,
    256 divisible by 16), where the page size lets W reach past the block."""
    if k.get("size") == "production":  # its W is a long context's or a batch's, not the base classes' edges
        return set()
    if MAX_TOKENS // k["page_size"] <= BLOCK:
        return set()
    return {f"{k['path']}/W={k['W']}"}


def required_features() -> set[str]:
    out = {"zero_pages", "zero_length", "longer_than_table"}
    for path in ("ps1", "general", "swa"):
        out |= {f"path:{path}"} | {f"edge:{path}:{BLOCK + e}" for e in (-1, 0, 1)}
    return out


# Generic features (strategies.coverage.generic_features) every campaign must reach
GENERIC_REQUIRED = {"misaligned", "odd_stride", *(f"dtype:{n}:{dt}" for n in (
    "seq_lens", "extend_seq_lens", "req_pool_indices", "req_to_token", "full_to_swa_index_mapping",
    "out_cache_loc", "swa_out_cache_loc") for dt in ("int32", "int64"))}


def all_required_features() -> set[str]:
    """Every feature a campaign of a few minutes must exercise for draft_extend_metadata."""
    return GENERIC_REQUIRED | required_features()


GENERATOR = OpGenerator(OP, draft_extend_campaign_class, draft_extend_in_class, draft_extend_violation, OUT_OF_CONTRACT,
                        draft_extend_features, all_required_features, class_combinations, path_items=("path",))
