"""Cases for `flashinfer_kv_indices` (create_flashinfer_kv_indices_triton).

SGLang's kernel copies in 512-wide blocks, one program per request (or `num_token_blocks`
programs per request striding over the blocks, `TOKEN_BLOCK_PARALLEL`), and (0.5.6-0.5.18)
takes the table's row stride as a constexpr: a compile class fixes the table's width and layout
(so its row stride exactly), whether `kv_start_idx` is given, the dtypes (kv_indices int32 or
int64), the 1-D layouts and the batch's size class (one request, a few, a big batch), and, as
the contract variant allows (the release's kernel takes them), ENTRY_PAGE_SIZE, whether the grid
has a block axis and TOKEN_BLOCK_PARALLEL is on, and whether a token_mapping is passed. A case
draws each request's length at the block edges (0, 1, 511, 512, 513, 1025) and up to the row's
end, its start (unaligned to pages too), its pool row, a base and a tail for the flat output,
its block count and its mapping (-1 entries, read by -1 table entries too).

The pool's first two classes hold every launch mode the variant has (paged, one block, many
blocks, mapped, int64 kv_indices), the next ones the modes' other combinations
(`kv_class_features`): a GPU campaign pays a compile per new class and reaches only the first
few in 20 s. Production sizes are classes of their own, one class in sixteen of a variant's
candidates, in the pool after those (the cover takes a few among the next ones, their widths
being new). The CPU interpreter takes about half
a second for a production case, so a CPU campaign spends up to half a minute on each production
stint it reaches: a table 32768 to 131585 tokens wide, a batch of
one, a few, 17 to 256 or past 256 (257-300), one or two requests to the row's end or at the
multi-block edges (8192-token block thresholds), the rest short, so a case copies at most a few
rows' worth of tokens; their block count is the one SGLang computes (EAGLE's
`spec_kv_index_token_blocks`, AITER's `_kv_index_blocks`).
"""

from __future__ import annotations

import numpy as np

from ...case import Case
from ...strategies import OpGenerator
from ...strategies.draw import CompileClass, Draw
from ...strategies.layouts import LayoutClass, layout_class, relayout
from ...strategies.values import rng
from ..kv_index_common import BLOCK, EDGES, WIDTHS, batch_size, csr_offsets, editable, flat_size, free_lengths, \
    free_starts, generic_required, laid_out, length_features, pool_size, relaid, relength, start_path, \
    strided_rows, token_table, table_layout
from .contract import VARIANT_ARGS

OP = "flashinfer_kv_indices"
OUT_OF_CONTRACT = ("pool_index_out_of_range", "past_row", "indptr_inconsistent", "negative_len",
                   "kv_indices_too_short")
ONE_D = ("req_pool_indices", "paged_kernel_lens", "kv_indptr", "kv_start_idx", "kv_indices")
INDEX = ("req_pool_indices", "paged_kernel_lens", "kv_start_idx")

PAGE_SIZES = (1, 1, 16, 32, 64, 3)  # ENTRY_PAGE_SIZE: the unified pool's page sizes, and an odd one
PROD_WIDTHS = (32768, 40960, 65536, 131072, 131072 + BLOCK + 1)  # tokens: past every multi-block threshold
LONG_WIDTHS = tuple(w for w in WIDTHS if w > 2 * BLOCK)  # a short table whose rows span 3 or more blocks
MIN_TOKENS_PER_BLOCK = 8192  # SGLang's _MIN_TOKENS_PER_BLOCK
PROD_EDGES = (MIN_TOKENS_PER_BLOCK - 1, MIN_TOKENS_PER_BLOCK, MIN_TOKENS_PER_BLOCK + 1, 32768, 65536, 131072)


def kv_params(d: Draw) -> dict:
    table = table_layout(d)
    p = {
        "C": d.choice(WIDTHS),
        "start": d.choice((False, True)),
        "bs": d.choice(("one", "few", "big")),
        # literal keys (interned, one object each): a pickled class pool holds each key once
        "dtype:req_pool_indices": d.choice(("int32", "int64")),
        "dtype:paged_kernel_lens": d.choice(("int32", "int64")),
        "dtype:kv_start_idx": d.choice(("int32", "int64")),
        "layout:req_to_token": table,
    }
    for name in ONE_D:
        p[f"layout:{name}"] = layout_class(d, "out" if name == "kv_indices" else "in", 1, ("contiguous", "offset"))
    return p


def kv_class(d: Draw) -> CompileClass:
    return CompileClass.of(OP, kv_params(d))


def kv_variant_class(d: Draw, variant: str) -> CompileClass:
    """A class of `variant`: the base class, kv_indices' dtype, the size class, and the modes the
    variant's kernels take (ENTRY_PAGE_SIZE, the grid's block axis, token_mapping)."""
    p = kv_params(d)
    args = VARIANT_ARGS.get(variant, ())
    p["dtype:kv_indices"] = d.choice(("int32", "int64"))
    if d.integer(0, 15) == 0:
        p["size"] = "production"
        p["C"] = d.choice(PROD_WIDTHS)
        p["bs"] = d.choice(("one", "few", "few", "big", "past"))
    mapped = "token_mapping" in args and d.integer(0, 2) == 0
    if mapped:
        p["token_mapping"] = True
        p["dtype:token_mapping"] = d.choice(("int32", "int64"))
        p["layout:token_mapping"] = layout_class(d, "in", 1, ("contiguous", "offset"))
    if "entry_page_size" in args:
        p["ps"] = 1 if mapped else d.choice(PAGE_SIZES)  # pack_read_stream: a mapping reads a token table
    if "num_token_blocks" in args:
        # no block axis (grid (bs,)), (bs, 1) with the flag off, or (bs, blocks > 1) with it on
        p["blocks"] = d.choice(("none", "one", "many", "many"))
        if p["blocks"] == "many" and p.get("size") != "production":
            p["C"] = d.choice(LONG_WIDTHS)  # rows of several copy blocks (short ones are drawn in them too)
    return CompileClass.of(OP, p)


def spec_kv_index_token_blocks(width: int, lens_sum: int | None, bs: int) -> int:
    """SGLang 0.5.23's block count (kv_indices.py): 1 below a 32768-wide table, else one block per
    8192 tokens of min(sum of lengths, width), at most 512 // bs programs' worth (AITER's
    _kv_index_blocks passes no sum: the width alone)."""
    if width < 32768 or bs <= 0:
        return 1
    span = width if lens_sum is None else min(lens_sum, width)
    cap = (span + MIN_TOKENS_PER_BLOCK - 1) // MIN_TOKENS_PER_BLOCK
    return max(1, min(cap, 512 // max(1, bs)))


def production_lengths(d: Draw, g, C: int, bs: int) -> np.ndarray:
    """One or two requests long (the row's end, a multi-block edge, any), the rest short."""
    lens = g.integers(0, 41, size=bs).astype(np.int64)
    edges = [e for e in PROD_EDGES + EDGES if e <= C]
    for _ in range(min(bs, d.integer(1, 2))):
        lens[d.integer(0, bs - 1)] = d.one_of(lambda: d.choice(edges), lambda: C, lambda: d.integer(0, C))
    return lens


def block_count(d: Draw, k: CompileClass, C: int, lens: np.ndarray) -> int | None:
    """The case's num_token_blocks (None: no block axis): 1, or more than 1 (SGLang's count on a
    production table, else 2 to 4, fewer than the longest row's 512-token copy blocks where it
    has 3 or more, so a block strides over the row)."""
    mode = k.get("blocks")
    if mode in (None, "none"):
        return None
    if mode == "one":
        return 1
    if k.get("size") == "production":
        sglang = spec_kv_index_token_blocks(C, d.choice((int(lens.sum()), None)), len(lens))
        return max(2, sglang)
    chunks = -(-int(lens.max(initial=0)) // BLOCK)
    return d.integer(2, max(2, min(4, chunks - 1)))


def mapped_table(d: Draw, g, k: CompileClass, P: int, W: int) -> tuple[np.ndarray, np.ndarray]:
    """(a token table of ids in [-1, M), token_mapping of M ids with -1 entries, within kv_indices' dtype)."""
    M = d.choice((1, 7, 4096, int(g.integers(1, 1 << 16))))
    table = g.integers(0, M, size=(P, W))
    table[g.random((P, W)) < d.choice((0.0, 0.1, 0.5))] = -1  # padded entries
    wide = k["dtype:kv_indices"] == "int64" and k["dtype:token_mapping"] == "int64"
    mapping = g.integers(0, 1 << 40 if wide else 2**31, size=M)
    mapping[g.random(M) < d.choice((0.0, 0.25, 1.0))] = -1  # evicted SWA slots
    return table, mapping


def kv_in_class(d: Draw, k: CompileClass) -> Case:
    ps = k.get("ps", 1)
    W = -(-k["C"] // ps)  # the table's entries per row
    C = W * ps  # its tokens per row
    production = k.get("size") == "production"
    bs = {"one": 1, "few": d.integer(2, 4), "big": d.integer(17, 256), "past": d.integer(257, 300)}[k["bs"]] \
        if production else batch_size(d, k)
    P = pool_size(d, k)
    g = rng(d.seed())
    lens = production_lengths(d, g, C, bs) if production else free_lengths(d, g, C, bs)
    starts = free_starts(d, g, C, lens) if k["start"] else None
    ptr, N = csr_offsets(d, lens)
    mapping = None
    if k.get("token_mapping"):
        table, mapping = mapped_table(d, g, k, P, W)
    elif ps > 1:  # page ids whose tokens fit kv_indices' dtype
        table = g.integers(0, 2**31 // ps, size=(P, W)) if k["dtype:kv_indices"] == "int32" else \
            token_table(d, g, P, W)
    else:
        table = token_table(d, g, P, W)
    values = {
        "req_to_token": table,
        "req_pool_indices": g.integers(0, P, size=bs),
        "paged_kernel_lens": lens,
        "kv_indptr": ptr,
    }
    out_dtype = k.get("dtype:kv_indices", "int32")
    shapes = {"req_to_token": ("int32", (P, W)), "req_pool_indices": (k["dtype:req_pool_indices"], (bs,)),
              "paged_kernel_lens": (k["dtype:paged_kernel_lens"], (bs,)), "kv_indptr": ("int32", (bs + 1,)),
              "kv_indices": (out_dtype, (N,))}
    if starts is not None:
        values["kv_start_idx"] = starts
        shapes["kv_start_idx"] = (k["dtype:kv_start_idx"], (bs,))
    if mapping is not None:
        values["token_mapping"] = mapping
        shapes["token_mapping"] = (k["dtype:token_mapping"], (mapping.shape[0],))
    scalars = {}
    if "ps" in dict(k.items):
        scalars["entry_page_size"] = ps
    blocks = block_count(d, k, C, lens)
    if blocks is not None:
        scalars["num_token_blocks"] = blocks
    return Case(OP, scalars, laid_out(k, shapes, values), values)


def kv_violation(d: Draw, case: Case, k: CompileClass, kind: str | None = None) -> Case:
    t, v = editable(case)
    P, W = t["req_to_token"].shape
    C = W * case.scalars.get("entry_page_size", 1)  # the row's tokens
    bs = t["req_pool_indices"].shape[0]
    kind = kind or d.choice(OUT_OF_CONTRACT)
    i = d.integer(0, bs - 1)
    lens, ptr = v["paged_kernel_lens"], v["kv_indptr"]
    if kind == "pool_index_out_of_range":
        v["req_pool_indices"][i] = d.choice((P, P + 1, -1))
    elif kind == "past_row":  # start + length past the row (into the next row, or past the table)
        start = int(v["kv_start_idx"][i]) if "kv_start_idx" in v else 0
        relength(lens, ptr, i, C - start + d.choice((1, 3, BLOCK)))
    elif kind == "indptr_inconsistent":
        j = d.integer(1, bs)
        ptr[j] += d.choice((1, -1)) if ptr[j] > ptr[j - 1] else 1
    elif kind == "negative_len":
        lens[i] = -d.choice((1, BLOCK + 1))
    elif kind == "kv_indices_too_short":
        relength(lens, ptr, i, max(int(lens[i]), 1))
    N = flat_size(d, kind, int(ptr.max()) if ptr.size else 0, t["kv_indices"].shape[0])
    t["kv_indices"] = relayout(k.get("layout:kv_indices", LayoutClass()), t["kv_indices"].dtype, (N,))
    relaid(k, t, v, ("req_pool_indices", "paged_kernel_lens", "kv_indptr"))
    return Case(OP, case.scalars, t, v, meta={"violation": kind})


def kv_features(case: Case) -> set[str]:
    lens = case.values.get("paged_kernel_lens")
    if lens is None:
        return set()
    out = {start_path(case)} | length_features(np.asarray(lens).tolist()) | strided_rows(case)
    ptr = case.values.get("kv_indptr")
    if ptr is not None and np.asarray(ptr).size and int(np.asarray(ptr)[0]) > 0:
        out.add("indptr_base")
    spec = case.tensors.get("kv_indices")
    if ptr is not None and spec is not None and np.asarray(ptr).size and spec.shape[0] > int(np.asarray(ptr)[-1]):
        out.add("output_tail")
    ps = case.scalars.get("entry_page_size", 1)
    if "kv_start_idx" in case.values:
        s = np.asarray(case.values["kv_start_idx"])
        if s.size and int(s.max()) > 0:
            out.add("start:nonzero")
        if ps > 1 and s.size and bool((s % ps != 0).any()):
            out.add("start:unaligned")
    return out | mode_features(case, np.asarray(lens).tolist())


def mode_features(case: Case, ls: list[int]) -> set[str]:
    """The launch modes: kv_indices' dtype, a page-granular table, the block axis (a row
    ending inside a later block than the first, a row with more blocks than programs), the
    mapping's -1 paths, a production-size table, a batch past 256."""
    out = set()
    spec = case.tensors.get("kv_indices")
    if spec is not None:
        out.add(f"out:{spec.dtype}")
    if case.scalars.get("entry_page_size", 1) > 1:
        out.add("mode:paged")
    blocks = case.scalars.get("num_token_blocks")
    if blocks is not None:
        out.add("mode:blocks_many" if blocks > 1 else "mode:blocks_one")
        chunks = [-(-n // BLOCK) for n in ls if n > 0]
        if blocks > 1 and any(1 < c <= blocks for c in chunks):
            out.add("blocks:row_ends_in_a_later_block")
        if blocks > 1 and any(c > blocks for c in chunks):
            out.add("blocks:strided")
    if "token_mapping" in case.values:
        out.add("mode:mapped")
        if bool((np.asarray(case.values["token_mapping"]) == -1).any()):
            out.add("mapped:evicted")
        if bool((np.asarray(case.values["req_to_token"]) == -1).any()):
            out.add("mapped:padded_entry")
    table = case.tensors.get("req_to_token")
    if table is not None and len(table.shape) == 2 and table.shape[1] * case.scalars.get("entry_page_size", 1) >= 32768:
        out.add("size:production")
    if len(ls) > 256:
        out.add("bs:past_256")
    return out


def required_features() -> set[str]:
    return ({"start", "no_start", "start:nonzero", "big_batch", "indptr_base", "output_tail", "strided_rows",
             "len:three_blocks"} | {f"edge:len:{n}" for n in EDGES})


GENERIC_REQUIRED = generic_required(INDEX)


def all_required_features() -> set[str]:
    """Every feature a campaign of a few minutes must exercise for flashinfer_kv_indices."""
    return GENERIC_REQUIRED | required_features()


LAUNCH_MODES = ("paged", "blocks_one", "blocks_many", "mapped", "int64")  # each a kernel path of its own


def launch_modes(k: CompileClass) -> set[str]:
    """The launch modes class `k` runs in (of LAUNCH_MODES)."""
    blocks = k.get("blocks")
    out = {"paged"} if k.get("ps", 1) > 1 else set()
    out |= {f"blocks_{blocks}"} if blocks in ("one", "many") else set()
    out |= {"mapped"} if k.get("token_mapping") else set()
    return out | ({"int64"} if k.get("dtype:kv_indices") == "int64" else set())


def kv_class_features(k: CompileClass) -> set[str]:
    """What a pool covers first (class_pool weighs these above every other feature), each by a
    class of a short table: every launch mode on its own, then the launch-mode combinations.
    A mode counts as much as a combination and a class holds one combination, so the first
    classes are those of the most modes not yet covered: every mode the variant has is in the
    first two classes (mapped excludes paged), the first a campaign on a GPU reaches when each
    new class costs a compile (a paged defect sat in the third class, past a 20 s campaign)."""
    if k.get("size") == "production":
        return set()
    return {f"launch:{m}" for m in launch_modes(k)} | \
        {f"mode:ps{'>1' if k.get('ps', 1) > 1 else '1'}/blocks:{k.get('blocks', 'absent')}/"
         f"map:{bool(k.get('token_mapping'))}"}


GENERATOR = OpGenerator(OP, kv_class, kv_in_class, kv_violation, OUT_OF_CONTRACT, kv_features,
                        all_required_features, kv_class_features, variant_class=kv_variant_class)
