"""Cases for `chunked_prefix_kv_indices` (create_chunked_prefix_cache_kv_indices).

SGLang's kernel copies in 512-wide blocks, one program per request, and takes the table's row
stride as a constexpr: a compile class fixes the table's width and layout (so its row stride
exactly), the dtypes, the 1-D layouts, whether `chunk_cu_seq_lens` has bs + 1 entries or bs
(the DCP planner's), and the batch's size class. A case is either drawn as SGLang draws a chunk
(every request starts at the chunk's start, idx * chunk_len, and takes what is left of its
prefix, at most chunk_len: zero for a request whose prefix ended) or freely: each request's
length at the block edges (0, 1, 511, 512, 513, 1024, 1025) and up to the row's end, its start,
its pool row (the pool's first and last rows among them); then a base and a tail for the flat output.

Production sizes are classes of their own, one class in sixteen (the campaign's class drawer,
`chunk_variant_class`): a table 32768 to 131585 tokens wide, a batch of one, a few, 17 to 256 or
past 256 (257-300), and one chunk as SGLang's ForwardBatch cuts it from the requests' prefixes
(one or two to the row's end or a 512-token block edge, the rest short): the chunk length the
capacity over the batch, 131072 // bs (SGLANG_MAX_KV_CHUNK_CAPACITY's default), or the longest
prefix (the single-chunk path), every request from the chunk's start; so a request copies up to
131072 tokens, the batch at most the capacity. The prefill CUDA-graph runner's padded slots are
requests of a zero-length prefix (a start past it, length 0) at pool row 0, drawn among them.
Every cell is judged. The CPU interpreter takes a second or more on one (SGLang's kernel loops over
256 blocks of 512 tokens), so a CPU campaign reaches one only in a stint of a minute or more.
"""

from __future__ import annotations

import numpy as np

from ...case import Case
from ...strategies import OpGenerator
from ...strategies.draw import CompileClass, Draw
from ...strategies.layouts import LayoutClass, layout_class, relayout
from ...strategies.values import rng
from ..kv_index_common import BLOCK, EDGES, WIDTHS, batch_size, block_length, csr_offsets, editable, flat_size, \
    free_lengths, free_starts, generic_required, laid_out, last_pool_row, length_features, pool_rows, pool_size, \
    relaid, relength, strided_rows, table_layout, token_table

OP = "chunked_prefix_kv_indices"
OUT_OF_CONTRACT = ("pool_index_out_of_range", "past_row", "negative_start", "cu_inconsistent", "negative_len",
                   "kv_indices_too_short")
ONE_D = ("req_pool_indices", "chunk_start_idx", "chunk_seq_lens", "chunk_cu_seq_lens", "chunk_kv_indices")
INDEX = ("req_pool_indices", "chunk_start_idx", "chunk_seq_lens")
CAPACITY = 131072  # SGLang's SGLANG_MAX_KV_CHUNK_CAPACITY default: the tokens of one chunk over the batch
PROD_WIDTHS = (32768, 65536, CAPACITY, CAPACITY + BLOCK + 1)  # C: the table's width (max context)


def chunk_class(d: Draw) -> CompileClass:
    table = table_layout(d)
    p = {
        "C": d.choice(WIDTHS),
        "cu": d.choice(("bs+1", "bs")),
        "bs": d.choice(("one", "few", "big")),
        **{f"dtype:{name}": d.choice(("int32", "int64")) for name in INDEX},
        "layout:req_to_token": table,
    }
    for name in ONE_D:
        role = "out" if name == "chunk_kv_indices" else "in"
        p[f"layout:{name}"] = layout_class(d, role, 1, ("contiguous", "offset"))
    return CompileClass.of(OP, p)


def chunk_variant_class(d: Draw, variant: str) -> CompileClass:
    """A class of the campaign: the base class, or one time in sixteen a production size."""
    k = chunk_class(d)
    if d.integer(0, 15):
        return k
    p = dict(k.items)
    p["size"] = "production"
    p["C"] = d.choice(PROD_WIDTHS)
    p["bs"] = d.choice(("one", "few", "few", "big", "past"))
    p["cu"] = "bs+1"  # ForwardBatch's and the graph runner's
    return CompileClass.of(OP, p)


def production_chunk(d: Draw, g, C: int, bs: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(pool rows, starts, lengths) of one chunk of production prefixes: one or two long, the
    rest short, the CUDA-graph runner's padded slots (prefix 0, pool row 0) among them."""
    prefix = g.integers(0, 41, size=bs).astype(np.int64)
    edges = [e for e in (*EDGES, 4 * BLOCK, 16 * BLOCK, CAPACITY // 2, CAPACITY) if e <= C]
    for _ in range(min(bs, d.integer(1, 2))):
        prefix[d.integer(0, bs - 1)] = d.one_of(lambda: d.choice(edges), lambda: C, lambda: d.integer(0, C))
    padded = g.random(bs) < d.choice((0.0, 0.0, 0.25))
    prefix[padded] = 0
    chunk_len = d.choice((max(1, CAPACITY // bs), max(1, int(prefix.max()))))  # chunked, or the single chunk
    chunks = max(1, -(-int(prefix.max()) // chunk_len))
    start = d.choice((0, chunks - 1, d.integer(0, chunks - 1))) * chunk_len
    lens = np.clip(np.minimum(prefix, start + chunk_len) - start, 0, None)
    rows = np.where(padded, 0, g.integers(0, 1 << 30, size=bs))
    return rows, np.full(bs, start, np.int64), lens


def _as_sglang(d: Draw, g, C: int, bs: int) -> tuple[np.ndarray, np.ndarray]:
    """(starts, lengths) of one chunk as SGLang's get_prefix_chunk_seq_lens makes them."""
    prefix = np.array([block_length(d, C) for _ in range(min(bs, 4))]
                      + [int(g.integers(0, C + 1)) for _ in range(bs - min(bs, 4))], np.int64)
    chunk_len = d.choice((1, BLOCK - 1, BLOCK, BLOCK + 1, max(1, C // 3), max(1, C)))
    num_chunks = -(-int(prefix.max()) // chunk_len) if prefix.max() > 0 else 1
    idx = d.integer(0, num_chunks - 1)
    starts = np.full(bs, idx * chunk_len, np.int64)
    lens = np.clip(np.minimum(prefix, starts + chunk_len) - starts, 0, None)
    return starts, lens


def chunk_in_class(d: Draw, k: CompileClass) -> Case:
    C = k["C"]
    production = k.get("size") == "production"
    bs = {"one": 1, "few": d.integer(2, 4), "big": d.integer(17, 256), "past": d.integer(257, 300)}[k["bs"]] \
        if production else batch_size(d, k)
    P = pool_size(d, k)
    g = rng(d.seed())
    if production:
        pool, starts, lens = production_chunk(d, g, C, bs)
    elif d.boolean():
        starts, lens = _as_sglang(d, g, C, bs)
    else:
        lens = free_lengths(d, g, C, bs)
        starts = free_starts(d, g, C, lens)
    cu, N = csr_offsets(d, lens)
    if k["cu"] == "bs":
        cu = cu[:-1]
    table = token_table(d, g, P, C)
    rows = np.array(pool_rows(d, g, P, bs), np.int64)  # the pool's ends
    if production:
        rows = pool % P  # the padded slots at pool row 0
    values = {"req_to_token": table, "req_pool_indices": rows, "chunk_start_idx": starts,
              "chunk_seq_lens": lens, "chunk_cu_seq_lens": cu}
    shapes = {"req_to_token": ("int32", (P, C)), "chunk_cu_seq_lens": ("int32", cu.shape),
              "chunk_kv_indices": ("int32", (N,)), **{name: (k[f"dtype:{name}"], (bs,)) for name in INDEX}}
    return Case(OP, {}, laid_out(k, shapes, values), values)


def chunk_violation(d: Draw, case: Case, k: CompileClass, kind: str | None = None) -> Case:
    t, v = editable(case)
    P, C = t["req_to_token"].shape
    bs = t["req_pool_indices"].shape[0]
    kind = kind or d.choice(OUT_OF_CONTRACT)
    i = d.integer(0, bs - 1)
    lens, cu, starts = v["chunk_seq_lens"], v["chunk_cu_seq_lens"], v["chunk_start_idx"]
    if kind == "pool_index_out_of_range":
        v["req_pool_indices"][i] = d.choice((P, P + 1, -1))
    elif kind == "past_row":  # start + length past the row (into the next row, or past the table)
        relength(lens, cu, i, C - int(starts[i]) + d.choice((1, 3, BLOCK)))
    elif kind == "negative_start":  # reads before the row (the previous row, or before the table)
        starts[i] = -d.choice((1, BLOCK + 1))
    elif kind == "cu_inconsistent":
        if cu.shape[0] < 2:
            cu[0] = -d.choice((1, 3))
        else:
            j = d.integer(1, cu.shape[0] - 1)
            cu[j] += d.choice((1, -1)) if cu[j] > cu[j - 1] else 1
    elif kind == "negative_len":
        lens[i] = -d.choice((1, BLOCK + 1))
    elif kind == "kv_indices_too_short":
        relength(lens, cu, i, max(int(lens[i]), 1))
    ends = cu[:bs] + np.maximum(lens, 0)
    N = flat_size(d, kind, max(int(ends.max()), 0), t["chunk_kv_indices"].shape[0])
    t["chunk_kv_indices"] = relayout(k.get("layout:chunk_kv_indices", LayoutClass()), "int32", (N,))
    relaid(k, t, v, ("req_pool_indices", "chunk_start_idx", "chunk_seq_lens", "chunk_cu_seq_lens"))
    return Case(OP, case.scalars, t, v, meta={"violation": kind})


def chunk_features(case: Case) -> set[str]:
    lens = case.values.get("chunk_seq_lens")
    if lens is None:
        return set()
    ls = np.asarray(lens).tolist()
    out = set()
    cu = case.values.get("chunk_cu_seq_lens")
    if cu is not None:
        out.add("cu_bs" if np.asarray(cu).shape[0] == len(ls) else "cu_bs_plus_1")
    out |= length_features(ls) | strided_rows(case) | last_pool_row(case)
    if cu is not None and np.asarray(cu).size and int(np.asarray(cu)[0]) > 0:
        out.add("cu_base")
    spec = case.tensors.get("chunk_kv_indices")
    if cu is not None and spec is not None and len(ls) and np.asarray(cu).shape[0] >= len(ls):
        end = int(np.asarray(cu)[len(ls) - 1]) + ls[-1]
        if spec.shape[0] > end:
            out.add("output_tail")
    table = case.tensors.get("req_to_token")
    if table is not None and len(table.shape) == 2 and table.shape[1] >= 32768:
        out.add("size:production")
    if len(ls) > 256:
        out.add("bs:past_256")
    starts = case.values.get("chunk_start_idx")
    if starts is not None:
        s = np.asarray(starts)
        if s.size and int(s.max()) > 0:
            out.add("start:nonzero")
        if s.size > 1 and int(s.min()) == int(s.max()) > 0 and 0 in ls:
            out.add("chunk:prefix_ended")  # SGLang's shape: one start for all, a request already done
        if table is not None and len(table.shape) == 2 and s.size == len(ls) and \
                any(a + n == table.shape[1] and n > 0 for a, n in zip(s.tolist(), ls)):
            out.add("row_end")
    return out


def required_features() -> set[str]:
    return ({"cu_bs", "cu_bs_plus_1", "start:nonzero", "chunk:prefix_ended", "row_end", "big_batch", "cu_base",
             "output_tail", "strided_rows", "pool:last_row", "len:three_blocks"} | {f"edge:len:{n}" for n in EDGES})


GENERIC_REQUIRED = generic_required(INDEX)


def all_required_features() -> set[str]:
    """Every feature a campaign of a few minutes must exercise for chunked_prefix_kv_indices."""
    return GENERIC_REQUIRED | required_features()


GENERATOR = OpGenerator(OP, chunk_class, chunk_in_class, chunk_violation, OUT_OF_CONTRACT, chunk_features,
                        all_required_features, variant_class=chunk_variant_class)
