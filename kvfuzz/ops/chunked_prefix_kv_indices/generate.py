"""Cases for `chunked_prefix_kv_indices` (create_chunked_prefix_cache_kv_indices).

SGLang's kernel copies in 512-wide blocks, one program per request, and takes the table's row
stride as a constexpr: a compile class fixes the table's width and layout (so its row stride
exactly), the dtypes, the 1-D layouts, whether `chunk_cu_seq_lens` has bs + 1 entries or bs
(the DCP planner's), and the batch's size class. A case is either drawn as SGLang draws a chunk
(every request starts at the chunk's start, idx * chunk_len, and takes what is left of its
prefix, at most chunk_len: zero for a request whose prefix ended) or freely: each request's
length at the block edges (0, 1, 511, 512, 513, 1024, 1025) and up to the row's end, its start,
its pool row (the pool's first and last rows among them); then a base and a tail for the flat output.
"""

from __future__ import annotations

import numpy as np

from ...case import Case
from ...strategies import OpGenerator
from ...strategies.draw import CompileClass, Draw
from ...strategies.layouts import LayoutClass, apply_broadcast, class_layout, layout_class, relayout
from ...strategies.values import rng

OP = "chunked_prefix_kv_indices"
BLOCK = 512
WIDTHS = (1, 16, 100, 511, 512, 513, 1024, 1100, 2049)  # C: the table's width (max context)
EDGES = (0, 1, BLOCK - 1, BLOCK, BLOCK + 1, 2 * BLOCK, 2 * BLOCK + 1)
OUT_OF_CONTRACT = ("pool_index_out_of_range", "past_row", "negative_start", "cu_inconsistent", "negative_len",
                   "kv_indices_too_short")
ONE_D = ("req_pool_indices", "chunk_start_idx", "chunk_seq_lens", "chunk_cu_seq_lens", "chunk_kv_indices")
INDEX = ("req_pool_indices", "chunk_start_idx", "chunk_seq_lens")


def chunk_class(d: Draw) -> CompileClass:
    table = layout_class(d, "in", 2, ("contiguous", "offset", "padded", "broadcast"))
    if table.kind == "broadcast":  # one row repeated (row stride 0); a zero column stride is out of contract
        table = LayoutClass("broadcast", table.offset, table.slack, axis=0)
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


def _length(d: Draw, C: int) -> int:
    edges = [e for e in EDGES if e <= C]
    return d.one_of(lambda: d.choice(edges), lambda: C, lambda: d.integer(0, C))


def _as_sglang(d: Draw, g, C: int, bs: int) -> tuple[np.ndarray, np.ndarray]:
    """(starts, lengths) of one chunk as SGLang's get_prefix_chunk_seq_lens makes them."""
    prefix = np.array([_length(d, C) for _ in range(min(bs, 4))]
                      + [int(g.integers(0, C + 1)) for _ in range(bs - min(bs, 4))], np.int64)
    chunk_len = d.choice((1, BLOCK - 1, BLOCK, BLOCK + 1, max(1, C // 3), max(1, C)))
    num_chunks = -(-int(prefix.max()) // chunk_len) if prefix.max() > 0 else 1
    idx = d.integer(0, num_chunks - 1)
    starts = np.full(bs, idx * chunk_len, np.int64)
    lens = np.clip(np.minimum(prefix, starts + chunk_len) - starts, 0, None)
    return starts, lens


def chunk_in_class(d: Draw, k: CompileClass) -> Case:
    C = k["C"]
    bs = {"one": 1, "few": d.integer(2, 4), "big": d.integer(17, 40)}[k["bs"]]
    P = 1 if k["layout:req_to_token"].kind == "broadcast" and d.boolean() else d.integer(1, 6)
    g = rng(d.seed())
    if d.boolean():
        starts, lens = _as_sglang(d, g, C, bs)
    else:
        lens = np.array([_length(d, C) if bs <= 4 or d.integer(0, 7) == 0 else int(g.integers(0, min(C, 40) + 1))
                         for _ in range(bs)], dtype=np.int64)
        starts = np.array([d.choice((0, C - n, int(g.integers(0, C - n + 1)))) for n in lens.tolist()], np.int64)
    base = d.choice((0, 0, 0, 1, 7, BLOCK))
    cu = base + np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    N = int(cu[-1]) + d.choice((0, 0, 1, 5, BLOCK))
    if k["cu"] == "bs":
        cu = cu[:-1]
    table = g.integers(-(2**31), 2**31, size=(P, C)) if d.boolean() else g.integers(0, 1 << 20, size=(P, C))
    rows = np.array([d.choice((0, P - 1, int(g.integers(0, P)))) for _ in range(bs)], np.int64)  # the pool's ends
    values = {"req_to_token": table, "req_pool_indices": rows, "chunk_start_idx": starts,
              "chunk_seq_lens": lens, "chunk_cu_seq_lens": cu}
    shapes = {"req_to_token": ("int32", (P, C)), "chunk_cu_seq_lens": ("int32", cu.shape),
              "chunk_kv_indices": ("int32", (N,)), **{name: (k[f"dtype:{name}"], (bs,)) for name in INDEX}}
    tensors = {}
    for name, (dt, shape) in shapes.items():
        tensors[name], bcast = class_layout(k, name, dt, shape)
        if name in values:
            values[name] = apply_broadcast(values[name], bcast)
    return Case(OP, {}, tensors, values)


def chunk_violation(d: Draw, case: Case, k: CompileClass, kind: str | None = None) -> Case:
    t, v = dict(case.tensors), {n: np.array(x, dtype=np.int64) for n, x in case.values.items()}
    P, C = t["req_to_token"].shape
    bs = t["req_pool_indices"].shape[0]
    kind = kind or d.choice(OUT_OF_CONTRACT)
    i = d.integer(0, bs - 1)
    lens, cu, starts = v["chunk_seq_lens"], v["chunk_cu_seq_lens"], v["chunk_start_idx"]

    def relens(n: int) -> None:  # request i's length n, the later offsets kept consistent
        cu[i + 1:] += n - lens[i]
        lens[i] = n

    if kind == "pool_index_out_of_range":
        v["req_pool_indices"][i] = d.choice((P, P + 1, -1))
    elif kind == "past_row":  # start + length past the row (into the next row, or past the table)
        relens(C - int(starts[i]) + d.choice((1, 3, BLOCK)))
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
        relens(max(int(lens[i]), 1))
    ends = cu[:bs] + np.maximum(lens, 0)
    n_needed = max(int(ends.max()), 0)
    N = t["chunk_kv_indices"].shape[0]
    if kind == "kv_indices_too_short":
        N = max(n_needed - d.integer(1, max(1, min(n_needed, 5))), 0)
    else:
        N = max(N, n_needed)  # one broken rule at a time: room for every write
    t["chunk_kv_indices"] = relayout(k.get("layout:chunk_kv_indices", LayoutClass()), "int32", (N,))
    for name in ("req_pool_indices", "chunk_start_idx", "chunk_seq_lens", "chunk_cu_seq_lens"):
        t[name] = relayout(k.get(f"layout:{name}", LayoutClass()), t[name].dtype, v[name].shape, v[name])
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
    for n in ls:
        if n in EDGES:
            out.add(f"edge:len:{n}")
        if n > 2 * BLOCK:
            out.add("len:three_blocks")
    if len(ls) >= 17:
        out.add("big_batch")
    if cu is not None and np.asarray(cu).size and int(np.asarray(cu)[0]) > 0:
        out.add("cu_base")
    spec = case.tensors.get("chunk_kv_indices")
    if cu is not None and spec is not None and len(ls) and np.asarray(cu).shape[0] >= len(ls):
        end = int(np.asarray(cu)[len(ls) - 1]) + ls[-1]
        if spec.shape[0] > end:
            out.add("output_tail")
    table = case.tensors.get("req_to_token")
    if table is not None and len(table.shape) == 2 and table.shape[0] > 1 and table.strides[0] != table.shape[1]:
        out.add("strided_rows")
    rows = case.values.get("req_pool_indices")
    if table is not None and len(table.shape) == 2 and table.shape[0] > 1 and rows is not None and \
            table.shape[0] - 1 in np.asarray(rows).tolist():
        out.add("pool:last_row")
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


# Generic features (strategies.coverage.generic_features) every campaign must reach
GENERIC_REQUIRED = {"misaligned", "broadcast:req_to_token", *(f"dtype:{n}:{dt}" for n in INDEX
                                                               for dt in ("int32", "int64"))}


def all_required_features() -> set[str]:
    """Every feature a campaign of a few minutes must exercise for chunked_prefix_kv_indices."""
    return GENERIC_REQUIRED | required_features()


GENERATOR = OpGenerator(OP, chunk_class, chunk_in_class, chunk_violation, OUT_OF_CONTRACT, chunk_features,
                        all_required_features)
