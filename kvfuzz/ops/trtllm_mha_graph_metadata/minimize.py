"""trtllm_mha_graph_metadata's own minimizer passes (kvfuzz/minimize.py runs them; the generic ones are there)."""

from __future__ import annotations

from typing import Iterator

from ...case import Case
from ...minimize import GENERIC, Candidate, _edit, relayout
from ..kv_index_common import kept, request_drops

PER_REQUEST = ("req_pool_indices", "seq_lens", "qlens")


def requests_pass(case: Case) -> Iterator[Candidate]:
    """Drop requests: their pool index, length and query length, their rows of both page tables,
    their cells of cache_seqlens and the prefix sums."""
    t = case.tensors
    bs = t["req_pool_indices"].shape[0]
    if bs < 2 or any(t[n].shape != (bs,) for n in PER_REQUEST if n in t):
        return

    def build(keep: list[int]) -> Case:
        specs, values = kept(case, PER_REQUEST, keep)
        n = len(keep)
        for name, shape in (("cache_seqlens", (n,)), ("cu_seqlens_k", (n + 1,)), ("cu_seqlens_q", (n + 1,))):
            if name in t and len(t[name].shape) == 1:
                specs[name] = relayout(t[name], shape)
        for name in ("page_table", "swa_page_table"):
            if name in t and len(t[name].shape) == 2:
                specs[name] = relayout(t[name], (n, t[name].shape[1]))
        return _edit(case, specs, values)
    yield from request_drops(bs, build)


def swa_pass(case: Case) -> Iterator[Candidate]:
    """SWA off: the mapping, swa_page_table and swa_out_cache_loc dropped; or one SWA output alone."""
    drops = [("swa_mapping", "swa_page_table", "swa_out_cache_loc"), ("swa_page_table",), ("swa_out_cache_loc",)]
    for drop in drops:
        if not any(n in case.tensors for n in drop):
            continue

        def build(drop=drop) -> Case:
            return case.replace(tensors={n: s for n, s in case.tensors.items() if n not in drop},
                                values={n: x for n, x in case.values.items() if n not in drop})
        yield f"dropped {', '.join(n for n in drop if n in case.tensors)}", build


def value_bound(case: Case, name: str) -> int | None:
    """The exclusive bound of an index-valued input: a pool index below the table's rows; with
    the mapping, a slot or write location below its size."""
    if name == "req_pool_indices":
        return case.tensors["req_to_token"].shape[0]
    if name in ("req_to_token", "out_cache_loc") and "swa_mapping" in case.tensors:
        return case.tensors["swa_mapping"].shape[0]
    return None


PASSES = (requests_pass, swa_pass, *GENERIC)
