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
from ...strategies.layouts import LayoutClass, layout_class, relayout
from ...strategies.values import rng
from ..kv_index_common import BLOCK, EDGES, WIDTHS, batch_size, csr_offsets, editable, flat_size, free_lengths, \
    free_starts, generic_required, laid_out, length_features, pool_size, relaid, relength, start_path, \
    strided_rows, table_layout, token_table

OP = "flashinfer_kv_indices"
OUT_OF_CONTRACT = ("pool_index_out_of_range", "past_row", "indptr_inconsistent", "negative_len",
                   "kv_indices_too_short")
ONE_D = ("req_pool_indices", "paged_kernel_lens", "kv_indptr", "kv_start_idx", "kv_indices")
INDEX = ("req_pool_indices", "paged_kernel_lens", "kv_start_idx")


def kv_class(d: Draw) -> CompileClass:
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
    return CompileClass.of(OP, p)


def kv_in_class(d: Draw, k: CompileClass) -> Case:
    C = k["C"]
    bs = batch_size(d, k)
    P = pool_size(d, k)
    g = rng(d.seed())
    lens = free_lengths(d, g, C, bs)
    starts = free_starts(d, g, C, lens) if k["start"] else None
    ptr, N = csr_offsets(d, lens)
    table = token_table(d, g, P, C)
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
    return Case(OP, {}, laid_out(k, shapes, values), values)


def kv_violation(d: Draw, case: Case, k: CompileClass, kind: str | None = None) -> Case:
    t, v = editable(case)
    P, C = t["req_to_token"].shape
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
    t["kv_indices"] = relayout(k.get("layout:kv_indices", LayoutClass()), "int32", (N,))
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
    if "kv_start_idx" in case.values:
        s = np.asarray(case.values["kv_start_idx"])
        if s.size and int(s.max()) > 0:
            out.add("start:nonzero")
    return out


def required_features() -> set[str]:
    return ({"start", "no_start", "start:nonzero", "big_batch", "indptr_base", "output_tail", "strided_rows",
             "len:three_blocks"} | {f"edge:len:{n}" for n in EDGES})


GENERIC_REQUIRED = generic_required(INDEX)


def all_required_features() -> set[str]:
    """Every feature a campaign of a few minutes must exercise for flashinfer_kv_indices."""
    return GENERIC_REQUIRED | required_features()


GENERATOR = OpGenerator(OP, kv_class, kv_in_class, kv_violation, OUT_OF_CONTRACT, kv_features,
                        all_required_features)
