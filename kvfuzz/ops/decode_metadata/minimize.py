"""decode_metadata's own minimizer passes (kvfuzz/minimize.py runs them; the generic ones are there)."""

from __future__ import annotations

from typing import Iterator

import numpy as np

from ...case import Case
from ...minimize import (Candidate, GENERIC, _block_edges, _chunks, _contract, _edit, _fmt, _narrow,
                        _take_many, _targets, relayout)


DECODE_BATCH = ("cache_seqlens_int32", "cu_seqlens_k", "page_table", "swa_page_table", "req_pool_indices", "seq_lens")


def decode_rows_pass(case: Case) -> Iterator[Candidate]:
    """Drop batch rows from every batch-indexed tensor: halves first, then single rows."""
    B = case.tensors["cache_seqlens_int32"].shape[0]
    for drop in _chunks(B):
        dropped = frozenset(drop)
        rows = {}
        for name in DECODE_BATCH:
            if name in case.tensors:
                n0 = case.tensors[name].shape[0]
                rows[name] = [i for i in range(n0) if i not in dropped]
        word = "row" if len(drop) == 1 else "rows"
        yield (f"dropped batch {word} {_fmt(drop)} (B {B} -> {B - len(drop)})",
               lambda rows=rows: _take_many(case, rows))


def decode_swa_pass(case: Case) -> Iterator[Candidate]:
    if {"swa_page_table", "full_to_swa_index_mapping", "swa_v2p", "swa_src_table"} & set(case.tensors):
        yield "dropped SWA (swa_page_table, its mapping, swa_v2p or swa_src_table)", \
            lambda: _edit(case, drop=("swa_page_table", "full_to_swa_index_mapping", "swa_v2p", "swa_src_table"))


def decode_unified_pass(case: Case) -> Iterator[Candidate]:
    """SGLang 0.5.17-0.5.23's arguments off: full_v2p dropped, the flags False, the multiplier 1."""
    if "full_v2p" in case.tensors:
        yield "dropped full_v2p", lambda: _edit(case, drop=("full_v2p",))
    for name in ("skip_page_table", "zero_tail", "src_is_read_table"):
        if case.scalars.get(name) is True:
            yield f"{name} -> False", (lambda n=name: case.with_scalars(**{n: False}))
    mult = case.scalars.get("kernel_page_multiplier")
    if isinstance(mult, int) and mult > 1:
        yield f"kernel_page_multiplier {mult} -> 1", lambda: case.with_scalars(kernel_page_multiplier=1)


def decode_pages_pass(case: Case) -> Iterator[Candidate]:
    """max_seq_pages smaller; lengths clipped to the new page count, or left alone."""
    s = case.scalars
    P, ps, delta = s["max_seq_pages"], s["page_size"], s["seq_len_delta"]
    if not isinstance(P, int) or P <= 0 or not isinstance(ps, int) or ps <= 0:
        return
    c = _contract(case.op)
    lens = case.values["seq_lens"].astype(np.int64)
    for p2 in _targets(P, 0, _block_edges(P, c.block_sizes if c else ())):
        top = max(p2 * ps - delta, 0)
        if lens.size and lens.max() > top and lens.min() >= 0:
            clipped = np.minimum(lens, top)
            yield (f"max_seq_pages {P} -> {p2} (seq_lens clipped to {top})",
                   lambda p2=p2, v=clipped: _edit(case, values={"seq_lens": v}, scalars={"max_seq_pages": p2}))
        yield f"max_seq_pages {P} -> {p2}", lambda p2=p2: _edit(case, scalars={"max_seq_pages": p2})


def decode_widths_pass(case: Case) -> Iterator[Candidate]:
    """page_table / swa_page_table down to max_seq_pages; req_to_token down to what P needs;
    strided_indices down to P."""
    s, t = case.scalars, case.tensors
    P, ps = s["max_seq_pages"], s["page_size"]
    if not isinstance(P, int) or not isinstance(ps, int) or P < 0 or ps <= 0:
        return
    for name in ("page_table", "swa_page_table"):
        if name in t and len(t[name].shape) == 2:
            W = t[name].shape[1]
            for w in _targets(W, P):
                yield f"{name} width {W} -> {w}", (lambda n=name, w=w: _narrow(case, n, w))
    rtt = t.get("req_to_token")
    if rtt is not None and len(rtt.shape) == 2:
        T = rtt.shape[1]
        need = (P - 1) * ps + 1 if P > 0 else 0
        for w in _targets(T, need, [P * ps]):

            def build(w=w):
                c2 = _narrow(case, "req_to_token", w)
                si = case.tensors["strided_indices"]
                keep = min(si.shape[0], -(-w // ps))
                return _narrow(c2, "strided_indices", keep, axis=0) if keep < si.shape[0] else c2

            yield f"req_to_token width {T} -> {w}", build
    si = t.get("strided_indices")
    if si is not None and len(si.shape) == 1:
        for w in _targets(si.shape[0], P):
            yield (f"strided_indices length {si.shape[0]} -> {w}",
                   lambda w=w: _narrow(case, "strided_indices", w, axis=0))


def _read_tokens(case: Case) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(pool rows, columns, token ids) the kernel reads, or None if any read is out of range."""
    s, v = case.scalars, case.values
    P, ps = s["max_seq_pages"], s["page_size"]
    rtt, pool = v["req_to_token"], v["req_pool_indices"].astype(np.int64)
    if P <= 0:
        return pool, np.zeros(0, np.int64), np.zeros((pool.size, 0), np.int64)
    cols = np.arange(P, dtype=np.int64) * ps
    if pool.size and (pool.min() < 0 or pool.max() >= rtt.shape[0]) or cols[-1] >= rtt.shape[1]:
        return None
    return pool, cols, rtt[pool[:, None], cols[None, :]].astype(np.int64)


def decode_tables_pass(case: Case) -> Iterator[Candidate]:
    """Unused req_to_token rows dropped (pool indices remapped); unread token cells zeroed;
    the SWA mapping shrunk to the largest token id read + 1, a v2p table to the largest page read + 1."""
    t, v = case.tensors, case.values
    if not isinstance(case.scalars.get("max_seq_pages"), int) or not isinstance(case.scalars.get("page_size"), int):
        return
    read = _read_tokens(case)
    if read is None:
        yield from _wild_pool_rows(case)
        return
    pool, cols, tokens = read
    R = t["req_to_token"].shape[0]
    used = np.unique(pool)
    if used.size and used.size < R and pool.min() >= 0 and pool.max() < R:

        def drop_rows():
            c2 = _take_many(case, {"req_to_token": [int(i) for i in used]})
            spec = case.tensors["req_pool_indices"]
            return _edit(c2, {"req_pool_indices": spec},
                         {"req_pool_indices": np.searchsorted(used, pool).astype(np.int64)})

        yield f"req_to_token rows {R} -> {used.size} (unused rows dropped, req_pool_indices remapped)", drop_rows
    rtt = v["req_to_token"]
    mask = np.zeros(rtt.shape, bool)
    if cols.size:
        mask[pool[:, None], cols[None, :]] = True
    if (rtt[~mask] != 0).any():

        def zero_unread():
            f = rtt.astype(np.int64).copy()
            f[~mask] = 0
            return _edit(case, values={"req_to_token": f})

        yield "req_to_token: cells never read -> 0", zero_unread
    for name in ("full_v2p", "swa_v2p"):
        if name in t and len(t[name].shape) == 1 and not (tokens.size and tokens.min() < 0):
            V, lo = t[name].shape[0], max(int(tokens.max()) // case.scalars["page_size"] + 1 if tokens.size else 1, 1)
            for n in _targets(V, lo):
                yield f"{name} length {V} -> {n}", (lambda n=n, name=name: _narrow(case, name, n, axis=0))
    if "full_to_swa_index_mapping" in t and len(t["full_to_swa_index_mapping"].shape) == 1:
        if tokens.size and tokens.min() < 0:
            return
        N = t["full_to_swa_index_mapping"].shape[0]
        wild = tokens >= N  # token ids past the mapping (out of contract): they move with its end
        lo = max(int(tokens[~wild].max(initial=-1)) + 1, 1)
        for n in _targets(N, lo):
            if not wild.any():
                yield (f"full_to_swa_index_mapping length {N} -> {n}",
                       lambda n=n: _narrow(case, "full_to_swa_index_mapping", n, axis=0))
                continue

            def shorter(n=n):
                rtt = v["req_to_token"].astype(np.int64)
                moved = np.where(rtt >= N, rtt - (N - n), rtt)
                return _edit(_narrow(case, "full_to_swa_index_mapping", n, axis=0), values={"req_to_token": moved})

            yield f"full_to_swa_index_mapping length {N} -> {n}, its wild token ids {N - n} lower (as far past it)", shorter


def _wild_pool_rows(case: Case) -> Iterator[Candidate]:
    """Pool indices past req_to_token's rows (out of contract): the rows no index reads are
    dropped, the indices remapped, and each wild one stays as far past the new last row."""
    R = case.tensors["req_to_token"].shape[0]
    pool = case.values["req_pool_indices"].astype(np.int64)
    inside = (pool >= 0) & (pool < R)
    used = np.unique(pool[inside])
    if inside.all() or used.size >= R:
        return

    def drop_rows():
        c2 = _take_many(case, {"req_to_token": [int(i) for i in used]})
        moved = np.where(inside, np.searchsorted(used, pool), np.where(pool >= R, pool - (R - used.size), pool))
        return _edit(c2, values={"req_pool_indices": moved})

    yield (f"req_to_token rows {R} -> {used.size} (unused rows dropped, req_pool_indices remapped, "
           "the wild ones as far past the end)"), drop_rows


def decode_page_size_pass(case: Case) -> Iterator[Candidate]:
    """page_size toward 1: req_to_token keeps the columns the kernel reads (every k-th)."""
    s = case.scalars
    ps = s["page_size"]
    if not isinstance(ps, int) or ps <= 1 or ps & (ps - 1):
        return
    for ps2 in sorted({1, ps // 2}):
        k = ps // ps2

        def build(ps2=ps2, k=k):
            rtt = case.values["req_to_token"]
            keep = list(range(0, rtt.shape[1], k))
            c2 = _take_many(case, {"req_to_token": keep}, axis=1, scalars={"page_size": ps2})
            T2 = len(keep)
            si = case.tensors["strided_indices"]
            n = -(-T2 // ps2)
            spec = relayout(si, (n,))
            return _edit(c2, {"strided_indices": spec}, {"strided_indices": np.arange(0, T2, ps2)[:n]})

        yield f"page_size {ps} -> {ps2}", build


def decode_scalars_pass(case: Case) -> Iterator[Candidate]:
    d = case.scalars.get("seq_len_delta")
    if isinstance(d, int) and d > 0:
        for d2 in _targets(d, 0):
            yield f"seq_len_delta {d} -> {d2}", (lambda d2=d2: case.with_scalars(seq_len_delta=d2))


def value_bound(case: Case, name: str) -> int | None:
    """Exclusive upper bound of an index-valued input (pool rows, token ids under the SWA
    mapping or the v2p tables), so value moves stay in range; draft_extend_metadata's too."""
    t = case.tensors
    if name == "req_pool_indices":
        return t["req_to_token"].shape[0]
    if name in ("req_to_token", "out_cache_loc") and "full_to_swa_index_mapping" in t:
        return t["full_to_swa_index_mapping"].shape[0]
    if name == "req_to_token" and ("full_v2p" in t or "swa_v2p" in t):  # tokens on the tables' pages
        ps = case.scalars.get("page_size")
        if isinstance(ps, int) and ps > 0:
            return min(t[n].shape[0] for n in ("full_v2p", "swa_v2p") if n in t) * ps
    return None


PASSES = (decode_rows_pass, decode_swa_pass, decode_unified_pass, decode_pages_pass, decode_widths_pass,
          decode_tables_pass, decode_page_size_pass, *GENERIC, decode_scalars_pass)
