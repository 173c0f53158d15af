"""Cases for `decode_metadata` (normal_decode_set_metadata).

A compile class fixes what SGLang's and kvfuzz's kernels specialise on: the page size and
`seq_len_delta` (constexprs in SGLang), SWA or not (the kernel path), every dtype, every
tensor's layout class, and the integer class of the batch size, of `max_seq_pages` and of
every row length that becomes a stride. A case then draws sizes inside those classes (block
edges, zero pages, CUDA-graph padding rows) and its values. One class in sixteen (of those
with pages) is a production class: `max_seq_pages` covers a context of 32768 to 132072 tokens,
one to three requests (two at most at page size 1, whose page table is that wide); the interpreter runs
one program per request and 128 or 256 columns, so such a case takes 1 to 15 seconds on the CPU.

The arguments later releases added (`kernel_page_multiplier`, `src_is_read_table`,
`swa_src_table`, `skip_page_table`, `zero_tail`, `full_v2p`, `swa_v2p`) are drawn only for a
contract variant that has them (`VARIANT_ARGS`): `decode_class(d, variant)`. The multiplier and
the flags are constexprs in SGLang and a table's presence is a None-ness there, so all of them
belong to the class.
"""

from __future__ import annotations

import numpy as np

from ...case import Case, TensorSpec
from ...strategies import OpGenerator
from ...strategies.draw import DIV16, ONE, PLAIN, ZERO, CompileClass, Draw, fit, int_class, narrower, width
from ...strategies.layouts import LayoutClass, apply_broadcast, class_layout, layout_class, relayout
from ...strategies.values import INDEX_PATTERNS, SWA_TOKEN_PATTERNS, TOKEN_PATTERNS, pick, rng, tokens
from .contract import VARIANT_ARGS

OP = "decode_metadata"
PAGE_SIZES = (1, 16, 2, 4, 64, 128, 1024)
BAD_PAGE_SIZES = (3, 0, -4, 6, 48, 100, 2**31 - 1)
# normal decode, then draft decode's step + 1, and verify's speculative_num_draft_tokens (0.5.23's
# graph capture passes it; EAGLE's top-k > 1 trees draft 16 to 64 tokens)
DELTAS = (0, 1, 2, 3, 4, 5, 8, 16, 64)
OUT_OF_CONTRACT = ("page_size", "page_table_rows", "cu_seqlens_len", "width", "pool_index", "swa_token",
                   "negative_len", "len_overflow")
# A case with a v2p table draws these too; a stint's `swa_token` (an index outside its table)
# becomes one of them there. Kept apart so that the streams without v2p tables stay as they were.
V2P_VIOLATIONS = ("v2p_page", "v2p_value")
INPUTS = ("req_to_token", "req_pool_indices", "strided_indices", "seq_lens", "full_to_swa_index_mapping",
          "full_v2p", "swa_v2p")
# v2p tables: identity, a permutation, tombstones (-1: an unbound page), all tombstones
V2P_PATTERNS = ("identity", "permuted", "tombstones", "unbound")
V2P_SLACK = (0, 1, 100)  # entries past the last virtual page a case reads (0: sized exactly)
OUTPUTS = ("cache_seqlens_int32", "cu_seqlens_k", "page_table", "swa_page_table")
TWO_D = ("page_table", "swa_page_table", "req_to_token")
MAX_TOKENS = 1 << 14  # tokens per request slot: a case stays small (P * page_size <= 16K)
# production classes (one in sixteen): contexts of 32K to 128K tokens and past, a few requests
PROD_TOKENS = (32768, 65536, 131072, 131072 + 1000)


def block_of(ps: int, swa: bool, v2p: bool = False) -> int:
    """The column block of the kernel path: 256 for page size 1 without SWA or v2p, else 128."""
    return 256 if ps == 1 and not swa and not v2p else 128


def edges(block: int) -> list[int]:
    return [0, 1, 2, block - 1, block, block + 1, 2 * block - 1, 2 * block, 2 * block + 1]


def decode_class(d: Draw, variant: str | None = None) -> CompileClass:
    """A compile class; the later releases' arguments only where `variant` has them."""
    allowed = VARIANT_ARGS.get(variant, ()) if variant else ()
    ps = d.choice(PAGE_SIZES)
    swa = d.boolean()
    ext = {}
    if "skip_page_table" in allowed:
        ext["skip"] = d.integer(0, 3) == 0  # one class in four: lengths only
    if "zero_tail" in allowed:
        ext["zero_tail"] = d.boolean()
    if "full_v2p" in allowed:
        ext["full_v2p"] = d.boolean()
    if "src_is_read_table" in allowed:  # a constexpr in 0.5.19
        ext["read_table"] = d.boolean()
    if "kernel_page_multiplier" in allowed:  # a constexpr in 0.5.17-0.5.18
        ext["mult"] = d.choice((1, 2, 3, 8))
    if swa and "swa_v2p" in allowed and not ext.get("read_table"):
        ext["swa_map"] = d.choice(("mapping", "v2p"))  # the static pool's token mapping or the unified pool's v2p
    P = d.choice((PLAIN, DIV16, ONE, ZERO))  # ZERO: P = 0 (Triton's class div16, kept apart for the widths)
    # rows of length 0 or 1 (stride 1, or an empty tensor) only where P leaves room for them
    widths = (PLAIN, DIV16, ONE, ZERO) if P == ZERO else (PLAIN, DIV16, ONE) if P == ONE else (PLAIN, DIV16)
    p = {
        "page_size": ps, "swa": swa, "seq_len_delta": 0 if P == ZERO else d.choice(DELTAS),
        "path": "skip" if ext.get("skip") else "swa" if swa else "ps1" if ps == 1 else "general",  # derived
        # one row or several: torch calls a one-row tensor contiguous whatever its strides,
        # so a target's .contiguous() copies it or not by the row count
        "B": d.choice((PLAIN, ONE)), "R": d.choice((PLAIN, ONE)), "P": P,
        "W": d.choice(widths), "T": d.choice(widths), "W2": d.choice(widths),
    }
    p.update(ext)
    if P in (PLAIN, DIV16) and d.integer(0, 15) == 0:
        p["size"] = "production"
    present = set(_tensor_names(p))
    # always these five, so that the classes without later arguments stay as they were
    for name in ("seq_lens", "req_pool_indices", "req_to_token", "strided_indices", "full_to_swa_index_mapping"):
        p[f"dtype:{name}"] = d.choice(("int64", "int32"))
    for name in ("full_v2p", "swa_v2p", "swa_src_table"):
        if name in present:
            p[f"dtype:{name}"] = d.choice(("int64", "int32"))
    for name in (*OUTPUTS, *INPUTS):
        if name not in present:
            continue
        allow = ("contiguous", "offset", "padded", "step") if name == "strided_indices" else None
        p[f"layout:{name}"] = layout_class(d, "in" if name in INPUTS else "out", 2 if name in TWO_D else 1, allow)
    return CompileClass.of(OP, p)


def _tensor_names(p) -> list[str]:
    """The tensors a case of class `p` has (a CompileClass or its parameters)."""
    get = p.get
    names = list(OUTPUTS[:3]) + ["req_to_token", "req_pool_indices", "strided_indices", "seq_lens"]
    if get("swa"):
        source = ("swa_src_table" if get("read_table") else "swa_v2p" if get("swa_map") == "v2p"
                  else "full_to_swa_index_mapping")
        names += ["swa_page_table", source]
    if get("full_v2p"):
        names.append("full_v2p")
    return names


def v2p_table(pattern: str, seed: int, n: int) -> np.ndarray:
    """A virtual -> physical page table of n entries (physical pages in [0, 2n))."""
    if pattern == "identity":
        return np.arange(n, dtype=np.int64)
    g = rng(seed)
    out = g.permutation(2 * n)[:n].astype(np.int64)
    if pattern == "tombstones" and n:
        out[g.random(n) < 0.3] = -1
        out[g.integers(0, n)] = -1
    elif pattern == "unbound":
        out[:] = -1
    return out


def _size(d: Draw, cls: str, plain: list[int], div16: list[int], cap: int | None = None) -> int:
    """A size of integer class `cls`: the listed edges first, capped below `cap` inside the class."""
    if cls == ONE:
        v = 1
    elif cls == ZERO:
        v = 0
    elif cls == DIV16:
        v = d.choice(div16)
    else:
        v = d.one_of(lambda: d.choice(plain), lambda: fit(d.integer(2, 40), PLAIN))
    if cap is not None and v > cap:
        v = cap
        while v > 0 and int_class(v) != cls:
            v -= 1
    return v


def _class_facts(k: CompileClass) -> tuple:
    """What decode_in_class derives from the class alone, once per class: the column block, the
    edges of max_seq_pages, its cap, and the scalars of the later releases' flags."""
    facts = k.memo.get(OP)
    if facts is None:
        ps = k["page_size"]
        block = block_of(ps, k["swa"], bool(k.get("full_v2p")))
        flags = {}
        for flag_, field_ in (("skip_page_table", "skip"), ("zero_tail", "zero_tail")):
            if k.get(field_) is not None:
                flags[flag_] = bool(k[field_])
        if k.get("mult") is not None:
            flags["kernel_page_multiplier"] = int(k["mult"])
        if k.get("read_table") is not None:
            flags["src_is_read_table"] = bool(k["read_table"])
        facts = k.memo[OP] = (
            block, [block - 1, block + 1, 2, 3, 2 * block - 1, 2 * block + 1], [block, 16, 2 * block, 32],
            MAX_TOKENS // ps if ps >= 64 else None,  # req_to_token's width is P * page_size
            flags)
    return facts


def decode_in_class(d: Draw, k: CompileClass, variant: str = "default") -> Case:
    """An in-contract case of class `k`, leaning on zero pages, block edges and odd values."""
    ps, swa, delta = k["page_size"], k["swa"], k["seq_len_delta"]
    swa_v2p, full_v2p, read_table = k.get("swa_map") == "v2p", bool(k.get("full_v2p")), bool(k.get("read_table"))
    block, plain_pages, div16_pages, cap, flags = _class_facts(k)
    B = 1 if k["B"] == ONE else d.integer(2, 6)
    pages = _size(d, k["P"], plain_pages, div16_pages, cap)
    if k.get("size") == "production":  # a long context (in pages of the class's size), one to three requests
        pages, B = fit(d.choice(PROD_TOKENS) // ps, k["P"]), min(B, 2 if ps == 1 else 3)  # B keeps its class

    # lengths as a caller makes them: P = cdiv(max(len + delta), page_size), or P wider than
    # needed; every length at least delta (seq_lens >= 0), delta itself fixed by the class
    seed = d.seed()
    if pages == 0:  # the class has delta = 0
        lens = np.zeros(B, dtype=np.int64)
    else:
        g = rng(seed)
        wider = d.boolean()
        top = max(pages * ps if wider else (pages - 1) * ps + d.integer(1, ps), delta)
        lens = g.integers(delta, top + 1, size=B)
        if not wider:
            lens[g.integers(0, B)] = top
        if d.boolean():  # CUDA-graph padding rows of length 1
            lens[B // 2:] = np.minimum(lens[B // 2:], 1 + delta) if top >= 1 + delta else lens[B // 2:]
    seq_lens = lens - delta

    cols = width(pages + d.choice((0, 1, 3, 130)), k["W"])
    T = width(max(pages * ps + d.choice((0, 1, ps)), 1), k["T"] if k["T"] != ZERO else ONE)  # T >= 1
    R = 1 if k["R"] == ONE else d.integer(2, 5)
    shapes = {
        "cache_seqlens_int32": ("int32", (B,)),
        "cu_seqlens_k": ("int32", (B + 1,)),
        "page_table": ("int32", (B, cols)),
        "req_to_token": (k["dtype:req_to_token"], (R, T)),
        "req_pool_indices": (k["dtype:req_pool_indices"], (B,)),
        "strided_indices": (k["dtype:strided_indices"], (-(-T // ps),)),
        "seq_lens": (k["dtype:seq_lens"], (B,)),
    }
    N = 0
    if swa:
        # two entries at least: a one-entry mapping is contiguous whatever its layout's stride,
        # so Triton would specialise its stride to 1 in some cases of a class and not others
        N = max(R * T + d.choice((0, 1, 1000)), 2)
        shapes["swa_page_table"] = ("int32", (B, width(pages + d.choice((0, 1, 5)), k["W2"])))
        if read_table:  # 0.5.19: the SWA read table, req_to_token's shape (and layout, below)
            shapes["swa_src_table"] = (k["dtype:swa_src_table"], (R, T))
        elif not swa_v2p:
            shapes["full_to_swa_index_mapping"] = (k["dtype:full_to_swa_index_mapping"], (N,))
    # every token id indexes a table, or its page is scaled: only in-range patterns
    ranged = swa or full_v2p or k.get("mult", 1) != 1
    high = N if swa else R * T
    n_pages = -(-high // ps)  # the virtual pages of tokens in [0, high)
    for name, on in (("full_v2p", full_v2p), ("swa_v2p", swa_v2p)):
        if on:
            # two entries at least: a one-entry table is contiguous whatever its stride, so the
            # .contiguous() of 0.5.18-0.5.22's host code would copy some tables of a class and not others
            shapes[name] = (k[f"dtype:{name}"], (max(n_pages + d.choice(V2P_SLACK), 2),))
    tensors, bcast = {}, {}
    for name, (dt, shape) in shapes.items():
        lay = "req_to_token" if name == "swa_src_table" else None  # the same strides
        tensors[name], bcast[name] = class_layout(k, name, dt, shape, lay)

    # with SWA or a v2p table every token id indexes a table, so only in-range patterns
    pattern = d.choice(SWA_TOKEN_PATTERNS if ranged else TOKEN_PATTERNS)
    values = {
        "req_to_token": tokens(pattern, d.seed(), (R, T), high if ranged else 1 << 20),
        "req_pool_indices": pick(d.seed(), B, R, d.choice(INDEX_PATTERNS)),
        "strided_indices": np.arange(0, T, ps),
        "seq_lens": seq_lens,
    }
    if full_v2p and "full_to_swa_index_mapping" not in shapes and d.integer(0, 2) == 0:
        # tombstoned token slots (-1) of the unified pool: 0.5.23 clamps their page to 0 before the gather
        rtt = np.array(values["req_to_token"], dtype=np.int64)
        rtt[rng(d.seed()).random(rtt.shape) < d.choice((0.1, 0.5, 1.0))] = -1
        values["req_to_token"] = rtt
    if read_table and swa:
        values["swa_src_table"] = tokens(d.choice(TOKEN_PATTERNS), d.seed(), (R, T), 1 << 20)
    elif swa and not swa_v2p:
        mp = d.choice(("arange", "random", "negative", "large"))
        values["full_to_swa_index_mapping"] = tokens(mp, d.seed(), (N,), 1 << 24)
    for name in ("full_v2p", "swa_v2p"):
        if name in shapes:
            values[name] = v2p_table(d.choice(V2P_PATTERNS), d.seed(), shapes[name][1][0])
    for name in values:
        if bcast[name] is not None:
            values[name] = apply_broadcast(values[name], bcast[name])
    if bcast["seq_lens"] is not None and pages > 0:  # a constant row must still reach P pages
        values["seq_lens"] = np.full(B, int(lens.max()) - delta)
    scalars = {"max_seq_pages": int(pages), "seq_len_delta": int(delta), "page_size": ps, **flags}
    return Case(OP, scalars, tensors, values, variant=variant)


def decode_violation(d: Draw, case: Case, k: CompileClass, kind: str | None = None) -> Case:
    """One violation (`kind`, else drawn) applied to an in-contract case, keeping the class's
    layouts where the violation allows. A kind that cannot apply to this case leaves it as is."""
    t, v, s = dict(case.tensors), dict(case.values), dict(case.scalars)
    B, P = t["cache_seqlens_int32"].shape[0], s["max_seq_pages"]
    v2p = [name for name in ("full_v2p", "swa_v2p") if name in t]
    kinds = [x for x in OUT_OF_CONTRACT if not (x in ("width", "swa_token") and P == 0)
             and not (x == "swa_token" and "full_to_swa_index_mapping" not in t)]
    if v2p and P > 0:
        kinds += V2P_VIOLATIONS
    if kind is None:
        kind = d.choice(kinds)
    elif kind == "swa_token" and v2p and P > 0 and ("full_to_swa_index_mapping" not in t or d.boolean()):
        kind = d.choice(V2P_VIOLATIONS)
    elif kind not in kinds:
        return case

    def relaid(name: str, shape: tuple[int, ...], dtype: str | None = None, values=None) -> TensorSpec:
        return relayout(k.get(f"layout:{name}", LayoutClass()), dtype or t[name].dtype, shape, values)

    if kind == "page_size":
        s["page_size"] = d.choice(BAD_PAGE_SIZES)
    elif kind == "page_table_rows":
        t["page_table"] = relaid("page_table", (max(B - 1, 0), t["page_table"].shape[1]))
    elif kind == "cu_seqlens_len":
        t["cu_seqlens_k"] = relaid("cu_seqlens_k", (B,))
    elif kind == "width":
        name = "swa_page_table" if "swa_page_table" in t and d.boolean() else "page_table"
        t[name] = relaid(name, (B, narrower(P - d.integer(1, P), k["W2" if name == "swa_page_table" else "W"])))
    elif kind == "pool_index":
        rows = v["req_to_token"].shape[0]
        pool = np.array(v["req_pool_indices"], dtype=np.int64)
        pool[d.integer(0, B - 1)] = d.choice((rows, -1))
        v["req_pool_indices"] = pool
        t["req_pool_indices"] = relaid("req_pool_indices", (B,), values=pool)
    elif kind == "swa_token":
        rtt = np.array(v["req_to_token"])
        row = int(v["req_pool_indices"][0])
        rtt[row, 0] = v["full_to_swa_index_mapping"].shape[0]
        v["req_to_token"] = rtt
        t["req_to_token"] = relaid("req_to_token", rtt.shape, values=rtt)
    elif kind == "v2p_page":  # a token whose virtual page lies past the v2p table (sized for another pool)
        name = d.choice(v2p)
        rtt = np.array(v["req_to_token"])
        rtt[int(v["req_pool_indices"][0]), 0] = v[name].shape[0] * s["page_size"]
        v["req_to_token"] = rtt
        t["req_to_token"] = relaid("req_to_token", rtt.shape, values=rtt)
    elif kind == "v2p_value":  # an entry below the tombstone -1, where a row reads it
        name = d.choice(v2p)
        table = np.array(v[name], dtype=np.int64)
        page = max(int(v["req_to_token"][int(v["req_pool_indices"][0]), 0]) // s["page_size"], 0)  # a tombstone reads page 0
        table[page] = -2 - d.integer(0, 5)
        v[name] = table
        t[name] = relaid(name, table.shape, values=table)
    elif kind == "negative_len":
        v["seq_lens"] = np.full(B, -1 - s["seq_len_delta"])
        t["seq_lens"] = relaid("seq_lens", (B,), values=v["seq_lens"])
    elif kind == "len_overflow":  # lengths whose int32 sum overflows (B > 1) or that overflow themselves
        v["seq_lens"] = np.full(B, 2**31 - 1 - s["seq_len_delta"] + (B == 1))
        dt = t["seq_lens"].dtype if int(v["seq_lens"].max()) < 2**31 else "int64"
        t["seq_lens"] = relaid("seq_lens", (B,), dt, v["seq_lens"])
    return Case(OP, s, t, v, variant=case.variant, meta={"violation": kind})


def decode_features(case: Case) -> set[str]:
    """What this case exercises beyond the generic layout features (see strategies.coverage)."""
    s, t = case.scalars, case.tensors
    ps = s.get("page_size")
    swa = "swa_page_table" in t
    path = "skip" if s.get("skip_page_table") else "swa" if swa else "ps1" if ps == 1 else "general"
    out = {f"path:{path}"}
    out |= {name for name in ("zero_tail",) if s.get(name)}
    if s.get("kernel_page_multiplier", 1) != 1:
        out.add("page_multiplier")
    if s.get("src_is_read_table"):
        out.add("read_table")
    for name in ("full_v2p", "swa_v2p"):
        table = case.values.get(name)
        if table is not None:
            out.add(name)
            if table.size and int(table.min()) == -1:
                out.add(f"tombstone:{name}")
            if not np.array_equal(table, np.arange(table.size)):
                out.add(f"non_identity:{name}")
    if not isinstance(ps, int) or ps <= 0 or ps & (ps - 1):
        return out | {"bad_page_size"}
    if isinstance(s.get("seq_len_delta"), int) and s["seq_len_delta"] >= 16:
        out.add("delta:verify")  # a verify's speculative_num_draft_tokens
    rtt = case.values.get("req_to_token")
    if "full_v2p" in t and rtt is not None and rtt.size and int(rtt.min()) < 0:
        out.add("tombstone:req_to_token")  # negative token ids read through a v2p table (0.5.23's clamp)
    P = s.get("max_seq_pages", 0)
    if isinstance(P, int) and P * ps >= 32768:
        out.add("size:production")
    block = block_of(ps, swa, "full_v2p" in t)
    if P == 0:
        out.add("zero_pages")
    for e in (-1, 0, 1):
        if P == block + e:
            out.add(f"edge:{path}:{block + e}")
    lens = case.values.get("seq_lens")
    if lens is not None and lens.size and int(np.int64(lens.min()) + s.get("seq_len_delta", 0)) == 0:
        out.add("zero_length")
    return out


def class_combinations(k: CompileClass) -> set[str]:
    """Each kernel path with each class of max_seq_pages: its block edges (block - 1 and
    block + 1 are plain, block itself divisible by 16) live in different classes, and only
    where the page size lets max_seq_pages reach past the block."""
    if k.get("size") == "production":  # its max_seq_pages is a long context's, never a block edge
        return set()
    if k["path"] == "skip" or k.get("full_v2p"):
        # no gather, or a v2p table (0.5.23 and builtin then gather in the general kernel's
        # 128-column blocks, whose edges the general path's classes reach): the cover draws
        # these classes for their flags, and keeps the combinations for the paths' own blocks
        return set()
    # the SWA token mapping's dtypes: a class feature of every class, but a tensor of the SWA
    # classes that draw the mapping only
    mapping = set()
    if k["swa"] and k.get("swa_map") != "v2p" and not k.get("read_table"):
        mapping = {f"swa/mapping:{k['dtype:full_to_swa_index_mapping']}"}
    block = block_of(k["page_size"], k["swa"])
    if k["page_size"] >= 64 and MAX_TOKENS // k["page_size"] <= block:
        return mapping
    return {f"{k['path']}/P={k['P']}"} | mapping


def required_features() -> set[str]:
    out = {"zero_pages", "zero_length"}
    for path, block in (("ps1", 256), ("general", 128), ("swa", 128)):
        out |= {f"path:{path}"} | {f"edge:{path}:{block + e}" for e in (-1, 0, 1)}
    return out


# Generic features (strategies.coverage.generic_features) every campaign must reach
GENERIC_REQUIRED = {"misaligned", "odd_stride", *(f"dtype:{n}:{dt}" for n in (
    "seq_lens", "req_pool_indices", "req_to_token", "strided_indices", "full_to_swa_index_mapping")
    for dt in ("int32", "int64"))}


def all_required_features() -> set[str]:
    """Every feature a campaign of a few minutes must exercise for decode_metadata."""
    return GENERIC_REQUIRED | required_features()


GENERATOR = OpGenerator(OP, decode_class, decode_in_class, decode_violation, OUT_OF_CONTRACT, decode_features,
                        all_required_features, class_combinations, decode_class, path_items=("path",))
