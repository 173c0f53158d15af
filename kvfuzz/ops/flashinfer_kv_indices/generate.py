"""Cases for `flashinfer_kv_indices` (create_flashinfer_kv_indices_triton).

SGLang's kernel copies in 512-wide blocks, one program per request, and (0.5.6-0.5.18) takes
the table's row stride as a constexpr: a compile class fixes the table's width and layout (so
its row stride exactly), whether `kv_start_idx` is given, the dtypes, the 1-D layouts and the
batch's size class (one request, a few, a big batch). A case draws each request's length at
the block edges (0, 1, 511, 512, 513, 1025) and up to the row's end, its start, its pool row,
and a base and a tail for the flat output.
"""

from __future__ import annotations

import numpy as np

from ...case import Case
from ...strategies import OpGenerator
from ...strategies.draw import CompileClass, Draw
from ...strategies.layouts import LayoutClass, apply_broadcast, class_layout, layout_class, relayout
from ...strategies.values import rng

OP = "flashinfer_kv_indices"
BLOCK = 512
WIDTHS = (1, 16, 100, 511, 512, 513, 1024, 1100, 2049)  # C: the table's width (max context)
EDGES = (0, 1, BLOCK - 1, BLOCK, BLOCK + 1, 2 * BLOCK, 2 * BLOCK + 1)
OUT_OF_CONTRACT = ("pool_index_out_of_range", "past_row", "indptr_inconsistent", "negative_len",
                   "kv_indices_too_short")
ONE_D = ("req_pool_indices", "paged_kernel_lens", "kv_indptr", "kv_start_idx", "kv_indices")


def kv_class(d: Draw) -> CompileClass:
    table = layout_class(d, "in", 2, ("contiguous", "offset", "padded", "broadcast"))
    if table.kind == "broadcast":  # one row repeated (row stride 0); a zero column stride is out of contract
        table = LayoutClass("broadcast", table.offset, table.slack, axis=0)
    p = {
        "C": d.choice(WIDTHS),
        "start": d.choice((False, True)),
        "bs": d.choice(("one", "few", "big")),
        "dtype:req_pool_indices": d.choice(("int32", "int64")),
        "dtype:paged_kernel_lens": d.choice(("int32", "int64")),
        "dtype:kv_start_idx": d.choice(("int32", "int64")),
        "layout:req_to_token": table,
    }
    for name in ONE_D:
        p[f"layout:{name}"] = layout_class(d, "out" if name == "kv_indices" else "in", 1, ("contiguous", "offset"))
    return CompileClass.of(OP, p)


def _length(d: Draw, C: int) -> int:
    edges = [e for e in EDGES if e <= C]
    return d.one_of(lambda: d.choice(edges), lambda: C, lambda: d.integer(0, C))


def kv_in_class(d: Draw, k: CompileClass) -> Case:
    C = k["C"]
    bs = {"one": 1, "few": d.integer(2, 4), "big": d.integer(17, 40)}[k["bs"]]
    P = 1 if k["layout:req_to_token"].kind == "broadcast" and d.boolean() else d.integer(1, 6)
    g = rng(d.seed())
    lens = np.array([_length(d, C) if bs <= 4 or d.integer(0, 7) == 0 else int(g.integers(0, min(C, 40) + 1))
                     for _ in range(bs)], dtype=np.int64)
    if k["start"]:
        starts = np.array([d.choice((0, C - n, int(g.integers(0, C - n + 1)))) for n in lens.tolist()], np.int64)
    else:
        starts = None
    base = d.choice((0, 0, 0, 1, 7, BLOCK))
    ptr = base + np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    N = int(ptr[-1]) + d.choice((0, 0, 1, 5, BLOCK))
    table = g.integers(-(2**31), 2**31, size=(P, C)) if d.boolean() else g.integers(0, 1 << 20, size=(P, C))
    values = {
        "req_to_token": table,
        "req_pool_indices": g.integers(0, P, size=bs),
        "paged_kernel_lens": lens,
        "kv_indptr": ptr,
    }
    shapes = {"req_to_token": ("int32", (P, C)), "req_pool_indices": (k["dtype:req_pool_indices"], (bs,)),
              "paged_kernel_lens": (k["dtype:paged_kernel_lens"], (bs,)), "kv_indptr": ("int32", (bs + 1,)),
              "kv_indices": ("int32", (N,))}
    if starts is not None:
        values["kv_start_idx"] = starts
        shapes["kv_start_idx"] = (k["dtype:kv_start_idx"], (bs,))
    tensors = {}
    for name, (dt, shape) in shapes.items():
        tensors[name], bcast = class_layout(k, name, dt, shape)
        if name in values:
            values[name] = apply_broadcast(values[name], bcast)
    return Case(OP, {}, tensors, values)


def kv_violation(d: Draw, case: Case, k: CompileClass, kind: str | None = None) -> Case:
    t, v = dict(case.tensors), {n: np.array(x, dtype=np.int64) for n, x in case.values.items()}
    P, C = t["req_to_token"].shape
    bs = t["req_pool_indices"].shape[0]
    kind = kind or d.choice(OUT_OF_CONTRACT)
    i = d.integer(0, bs - 1)
    lens, ptr = v["paged_kernel_lens"], v["kv_indptr"]

    def relens(n: int) -> None:  # request i's length n, kv_indptr kept consistent
        ptr[i + 1:] += n - lens[i]
        lens[i] = n

    if kind == "pool_index_out_of_range":
        v["req_pool_indices"][i] = d.choice((P, P + 1, -1))
    elif kind == "past_row":  # start + length past the row (into the next row, or past the table)
        start = int(v["kv_start_idx"][i]) if "kv_start_idx" in v else 0
        relens(C - start + d.choice((1, 3, BLOCK)))
    elif kind == "indptr_inconsistent":
        j = d.integer(1, bs)
        ptr[j] += d.choice((1, -1)) if ptr[j] > ptr[j - 1] else 1
    elif kind == "negative_len":
        lens[i] = -d.choice((1, BLOCK + 1))
    elif kind == "kv_indices_too_short":
        relens(max(int(lens[i]), 1))
    n_needed = int(ptr.max()) if ptr.size else 0
    N = t["kv_indices"].shape[0]
    if kind == "kv_indices_too_short":
        N = max(n_needed - d.integer(1, max(1, min(n_needed, 5))), 0)
    else:
        N = max(N, n_needed)  # one broken rule at a time: room for every write
    t["kv_indices"] = relayout(k.get("layout:kv_indices", LayoutClass()), "int32", (N,))
    for name in ("req_pool_indices", "paged_kernel_lens", "kv_indptr"):
        t[name] = relayout(k.get(f"layout:{name}", LayoutClass()), t[name].dtype, v[name].shape, v[name])
    return Case(OP, case.scalars, t, v, meta={"violation": kind})


def kv_features(case: Case) -> set[str]:
    lens = case.values.get("paged_kernel_lens")
    if lens is None:
        return set()
    out = {"start" if "kv_start_idx" in case.tensors else "no_start"}
    ls = np.asarray(lens).tolist()
    for n in ls:
        if n in EDGES:
            out.add(f"edge:len:{n}")
        if n > 2 * BLOCK:
            out.add("len:three_blocks")
    if len(ls) >= 17:
        out.add("big_batch")
    ptr = case.values.get("kv_indptr")
    if ptr is not None and np.asarray(ptr).size and int(np.asarray(ptr)[0]) > 0:
        out.add("indptr_base")
    spec = case.tensors.get("kv_indices")
    if ptr is not None and spec is not None and np.asarray(ptr).size and spec.shape[0] > int(np.asarray(ptr)[-1]):
        out.add("output_tail")
    table = case.tensors.get("req_to_token")
    if table is not None and len(table.shape) == 2 and table.shape[0] > 1 and table.strides[0] != table.shape[1]:
        out.add("strided_rows")
    if "kv_start_idx" in case.values:
        s = np.asarray(case.values["kv_start_idx"])
        if s.size and int(s.max()) > 0:
            out.add("start:nonzero")
    return out


def required_features() -> set[str]:
    return ({"start", "no_start", "start:nonzero", "big_batch", "indptr_base", "output_tail", "strided_rows",
             "len:three_blocks"} | {f"edge:len:{n}" for n in EDGES})


# Generic features (strategies.coverage.generic_features) every campaign must reach
GENERIC_REQUIRED = {"misaligned", "broadcast:req_to_token",
                    *(f"dtype:{n}:{dt}" for n in ("req_pool_indices", "paged_kernel_lens", "kv_start_idx")
                      for dt in ("int32", "int64"))}


def all_required_features() -> set[str]:
    """Every feature a campaign of a few minutes must exercise for flashinfer_kv_indices."""
    return GENERIC_REQUIRED | required_features()


GENERATOR = OpGenerator(OP, kv_class, kv_in_class, kv_violation, OUT_OF_CONTRACT, kv_features,
                        all_required_features)
