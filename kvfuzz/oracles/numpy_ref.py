"""The NumPy oracle: one pure function per op, independent of torch.

Integer arithmetic is exact (Python ints or int64 with explicit range checks): a value that
would leave int32 where the kernel computes in int32 raises `OutOfContract`, never wraps.
The float32 step of `num_kv_splits` is followed exactly, and a case whose result depends on
how the device rounds that step gets the other possible answers as `alternatives`.
"""

from __future__ import annotations

import math
from decimal import Decimal, localcontext
from functools import lru_cache

import numpy as np

from ..case import Case
from ..contract import INT32_MAX, INT32_MIN, Expected, OutOfContract, fits_int32


def cdiv(a: int, b: int) -> int:
    return (a + b - 1) // b


def _check32(what: str, x: int) -> int:
    if not INT32_MIN <= x <= INT32_MAX:
        raise OutOfContract(f"{what} = {x} does not fit int32")
    return x


def cdiv32(what: str, a: int, b: int) -> int:
    """cdiv as a kernel computes it in int32: the numerator a + b - 1 must fit."""
    _check32(f"{what} numerator", a + b - 1)
    return cdiv(a, b)


def outside(values: np.ndarray, end: int, start: int = 0) -> np.ndarray:
    """Where `values` lie outside [start, end)."""
    return (values < start) | (values >= end)


def _first(mask: np.ndarray) -> int | tuple[int, ...]:
    """The first True position of `mask` (an int in 1-D, else a tuple): what a broken rule names."""
    at = tuple(int(i) for i in np.argwhere(mask)[0])
    return at[0] if len(at) == 1 else at


def _not_int32(name: str, values: np.ndarray) -> str:
    """The rule an output value past int32 breaks, naming the first such cell."""
    at = _first(outside(np.asarray(values, dtype=np.int64), INT32_MAX + 1, INT32_MIN))
    where = ", ".join(str(i) for i in (at if isinstance(at, tuple) else (at,)))
    return f"{name}[{where}] = {np.asarray(values)[at]} does not fit int32"


def _empty_out(case: Case, name: str) -> np.ndarray:
    return np.zeros(case.tensors[name].shape, dtype=np.int64)


# 1. decode_metadata -------------------------------------------------------------------


def decode_metadata(case: Case) -> Expected:
    s, v = case.scalars, case.values
    ps, delta, P = s["page_size"], s["seq_len_delta"], s["max_seq_pages"]
    seq_lens = [int(x) for x in v["seq_lens"]]
    out = {n: _empty_out(case, n) for n in ("cache_seqlens_int32", "cu_seqlens_k", "page_table")}

    acc = 0
    for i, sl in enumerate(seq_lens):
        length = _check32(f"seq_lens[{i}] + seq_len_delta", sl + delta)
        if length < 0:
            raise OutOfContract(f"seq_lens[{i}] + seq_len_delta = {length} is negative")
        out["cache_seqlens_int32"][i] = length
        out["cu_seqlens_k"][i] = acc
        acc = _check32(f"cu_seqlens_k[{i + 1}]", acc + length)
    out["cu_seqlens_k"][len(seq_lens)] = acc

    if P > 0:
        rtt = v["req_to_token"]  # gathered, then widened: only the cells read are copied
        rows = v["req_pool_indices"].astype(np.int64)
        if rows.size and (rows.min() < 0 or rows.max() >= rtt.shape[0]):
            i = _first(outside(rows, rtt.shape[0]))
            raise OutOfContract(f"req_pool_indices[{i}] = {rows[i]} outside [0, {rtt.shape[0]})")
        cols = np.arange(P, dtype=np.int64) * ps
        if cols[-1] >= rtt.shape[1]:
            raise OutOfContract(f"(max_seq_pages - 1) * page_size = {cols[-1]} >= req_to_token width {rtt.shape[1]}")
        if s.get("src_is_read_table"):  # 0.5.19: page ids, one per column, copied verbatim
            _read_tables(case, out, rtt, rows, P)
            return Expected(out)
        tokens = rtt[rows[:, None], cols[None, :]].astype(np.int64)
        pages = np.floor_divide(tokens, ps)
        if "full_v2p" in case.tensors:
            pages = _v2p(v["full_v2p"], pages, "full_v2p")
        pages = pages * s.get("kernel_page_multiplier", 1)  # 0.5.17-0.5.18: a physical page's first block
        if not fits_int32(pages):
            raise OutOfContract(_not_int32("page_table", pages))
        out["page_table"][:, :P] = pages
        if "swa_page_table" in case.tensors:
            if "swa_v2p" in case.tensors:  # unified SWA pool: the same virtual pages, its own table
                swa = _v2p(v["swa_v2p"], np.floor_divide(tokens, ps), "swa_v2p")
            else:  # static SWA pool: token slot -> SWA slot, then its page
                mapping = v["full_to_swa_index_mapping"]
                if tokens.size and (tokens.min() < 0 or tokens.max() >= mapping.shape[0]):
                    i, c = _first(outside(tokens, mapping.shape[0]))
                    raise OutOfContract(f"token id req_to_token[{rows[i]}, {c * ps}] = {tokens[i, c]} (row {i}, "
                                        f"page {c}) lies outside the SWA mapping [0, {mapping.shape[0]})")
                swa = np.floor_divide(mapping[tokens].astype(np.int64), ps)
            if not fits_int32(swa):
                raise OutOfContract(_not_int32("swa_page_table", swa))
            out["swa_page_table"] = _empty_out(case, "swa_page_table")
            out["swa_page_table"][:, :P] = swa
        if s.get("zero_tail"):  # columns past each row's live pages are written 0
            live = np.array([cdiv(sl + delta, ps) for sl in seq_lens], dtype=np.int64).reshape(-1, 1)
            dead = np.arange(P)[None, :] >= live
            for name in ("page_table", "swa_page_table"):
                if name in out:
                    out[name][:, :P][dead] = 0
    elif "swa_page_table" in case.tensors:
        out["swa_page_table"] = _empty_out(case, "swa_page_table")
    return Expected(out)


def _read_tables(case: Case, out: dict, rtt: np.ndarray, rows: np.ndarray, P: int) -> None:
    """src_is_read_table: page_table[i, c] = req_to_token[rows[i], c], swa_page_table from swa_src_table."""
    out["page_table"][:, :P] = rtt[rows[:, None], np.arange(P)[None, :]]
    if "swa_page_table" in case.tensors:
        src = case.values["swa_src_table"]
        out["swa_page_table"] = _empty_out(case, "swa_page_table")
        out["swa_page_table"][:, :P] = src[rows[:, None], np.arange(P)[None, :]]
    for name in ("page_table", "swa_page_table"):
        if name in out and not fits_int32(out[name]):
            raise OutOfContract(_not_int32(name, out[name]))


def _v2p(table: np.ndarray, pages: np.ndarray, name: str) -> np.ndarray:
    """table[page] for every virtual page, the tombstone -1 mapped to the sink page 0."""
    if pages.size and (pages.min() < 0 or pages.max() >= table.shape[0]):
        at = _first(outside(pages, table.shape[0]))
        raise OutOfContract(f"virtual page {pages[at]} (row {at[0]}, page {at[1]}) lies outside {name} "
                            f"[0, {table.shape[0]})")
    phys = table[pages].astype(np.int64)  # gathered, then widened: only the entries read are copied
    if phys.size and phys.min() < -1:
        at = _first(phys < -1)
        raise OutOfContract(f"{name}[{pages[at]}] = {phys[at]} (row {at[0]}, page {at[1]}) is below -1 "
                            "(neither a physical page nor the tombstone)")
    return np.maximum(phys, 0)


# 2. swa_spec_page_table -----------------------------------------------------------------


def swa_spec_page_table(case: Case) -> Expected:
    v, R = case.values, case.scalars["speculative_num_draft_tokens"]
    a, b = v["page_table_a"].astype(np.int64), v["page_table_b"].astype(np.int64)
    la_all, lb_all = v["seq_len_a"].astype(np.int64), v["seq_len_b"].astype(np.int64)
    dst = _empty_out(case, "page_table_dst")
    width = dst.shape[1]
    for m in range(la_all.size * R):
        la, lb = int(la_all[m // R]), int(lb_all[m])
        if not 0 <= la <= a.shape[1]:
            raise OutOfContract(f"seq_len_a[{m // R}] = {la} outside [0, {a.shape[1]}]")
        if not 0 <= lb <= b.shape[1]:
            raise OutOfContract(f"seq_len_b[{m}] = {lb} outside [0, {b.shape[1]}]")
        if la + lb > width:
            raise OutOfContract(f"row {m}: la + lb = {la + lb} > page_table_dst width {width}")
        dst[m, :la] = a[m // R, :la]
        dst[m, la : la + lb] = b[m, :lb]
    return Expected({"page_table_dst": dst})


# 3. num_kv_splits ---------------------------------------------------------------------

# How far a device's float32 log2 may stray from the correctly rounded one: PTX lg2.approx
# is documented within 2^-22.6 absolute on its reduced range; allow a few ulp more.
LOG2_ABS_TOL = 2.0**-20


def _f32(x: float) -> float:
    return float(np.float32(x))


def num_kv_splits_stats(case: Case) -> tuple[int, int]:
    """(mx, mn) as the op defines them; kvfuzz's default variant defines zero lengths:
    only rows with length >= 1 take part, and with none, mx = mn = 1."""
    lens = case.values["seq_lens"][: case.scalars["num_seq"]]
    live = lens[lens >= 1] if case.variant == "default" else lens
    if not live.size:
        return 1, 1
    return int(live.max()), int(live.min())


@lru_cache(maxsize=4096)
def log2_f32(x: float) -> np.float32:
    """log2 of a float32, correctly rounded to float32, the same on every machine.

    NumPy's float32 log2 is not: it takes a SIMD path chosen by the host's CPU features and
    may land one ulp off (12.380952 instead of 12.380951 at 5333.8125 on one x86 host), which
    moved the oracle's answer across a rounding boundary of `num_kv_splits`. Here log2 is
    computed in decimal arithmetic at 50 digits (software, deterministic) and rounded to the
    nearest float32 by comparing exact decimal distances, unless the double log2 already
    says which float32 is nearest (`_log2_f32_unambiguous`): then that one, the same."""
    x32 = np.float32(x)
    fast = _log2_f32_unambiguous(x32)
    return fast if fast is not None else log2_f32_by_decimal(x32)


def log2_f32_by_decimal(x: float) -> np.float32:
    """log2_f32's definition: the 50-digit decimal log2, rounded to the nearest float32."""
    x32 = np.float32(x)
    with localcontext() as ctx:
        ctx.prec = 50
        exact = Decimal(float(x32)).ln() / Decimal(2).ln()
    near = np.float32(float(exact))
    candidates = (np.nextafter(near, np.float32(-np.inf)), near, np.nextafter(near, np.float32(np.inf)))
    return min(candidates, key=lambda c: abs(Decimal(float(c)) - exact))


def _log2_f32_unambiguous(x32: np.float32) -> np.float32 | None:
    """The float32 nearest log2(x32) when the host's double log2 lies farther than 2^-40 of
    itself from every float32 rounding midpoint (libm's error is below 2^-52 of it, so the
    exact log2 rounds to the same float32 on every machine); None when it lies nearer (the
    decimal computation decides)."""
    d = math.log2(float(x32))
    near = np.float32(d)
    below = float(np.nextafter(near, np.float32(-np.inf)))
    above = float(np.nextafter(near, np.float32(np.inf)))
    margin = abs(d) * 2.0**-40
    # midpoints of adjacent float32s are exact in double
    if (below + float(near)) / 2 + margin < d < (float(near) + above) / 2 - margin:
        return near
    return None


def ext_core_count_range(mx: int, device_core_count: int) -> tuple[int, int, int]:
    """The float32 step: (exact, lowest possible, highest possible) over device log2 error.

    "exact" uses the correctly rounded float32 log2, so the answer and its accepted
    alternatives depend on the case only, never on the host's libm or SIMD paths."""
    x = np.float32(np.float32(mx) / np.float32(64.0))
    lg = log2_f32(float(x))
    dcc = np.float32(device_core_count)

    def step(l: float) -> int:
        return int(math.trunc(_f32(dcc * np.float32(max(_f32(l), 1.0)))))

    exact = int(math.trunc(float(dcc * np.maximum(lg, np.float32(1.0)))))
    lo = step(float(lg) - LOG2_ABS_TOL - 4 * float(np.spacing(np.float32(abs(lg)))))
    hi = step(float(lg) + LOG2_ABS_TOL + 4 * float(np.spacing(np.float32(abs(lg)))))
    return exact, min(lo, exact), max(hi, exact)


def _splits_for(case: Case, mx: int, mn: int, e: int) -> np.ndarray:
    s = case.scalars
    num_seq, num_group = s["num_seq"], s["num_group"]
    num_head, num_kv_head, mks = s["num_head"], s["num_kv_head"], s["max_kv_splits"]
    _check32("max_seq_len * 8", mx * 8)
    _check32("min_seq_len * 10", mn * 10)
    if mx * 8 < mn * 10:
        mn = mx
    s1 = min(cdiv32("cdiv(max_seq_len, min_seq_len)", mx, mn), mks)
    c1 = cdiv32("cdiv(max_seq_len, max_kv_splits_1)", mx, s1)
    g = num_head // num_kv_head
    per_seq = num_head if g == 1 else cdiv(num_head, min(16, g))
    tg = _check32("token_grid", _check32("num_seq * num_group", num_seq * num_group) * per_seq)
    s2 = min(cdiv32("cdiv(ext_device_core_count, token_grid)", e, tg), mks)
    c2 = cdiv32("cdiv(max_seq_len, max_kv_splits_2)", mx, s2)
    out = np.zeros(case.tensors["num_kv_splits"].shape, dtype=np.int64)
    sl = np.asarray(case.values["seq_lens"][:num_seq], dtype=np.int64)
    if sl.size and int(sl.max()) + max(c1, c2) - 1 > INT32_MAX:  # some row's int32 cdiv overflows:
        over = (sl + c1 - 1 > INT32_MAX) | (sl + c2 - 1 > INT32_MAX)  # the first, as a row-by-row loop names it
        i = int(np.argmax(over))
        cdiv32(f"cdiv(seq_lens[{i}], chunk_1)", int(sl[i]), c1)
        cdiv32(f"cdiv(seq_lens[{i}], chunk_2)", int(sl[i]), c2)
    val = np.maximum((sl + c1 - 1) // c1, (sl + c2 - 1) // c2)
    rows = np.repeat(val, num_group)  # each sequence's value for each of its groups
    out[: rows.size] = rows[: out[: rows.size].shape[0]]
    return out


def num_kv_splits(case: Case) -> Expected:
    s = case.scalars
    for name in ("num_group", "num_head", "num_kv_head", "max_kv_splits", "device_core_count"):
        if s[name] < 1:
            raise OutOfContract(f"{name} = {s[name]} < 1")
    if s["num_head"] // s["num_kv_head"] == 0:
        raise OutOfContract(f"num_kv_head {s['num_kv_head']} > num_head {s['num_head']}: the head-group size is 0")
    lens = case.values["seq_lens"]
    floor = 0 if case.variant == "default" else 1
    low, high = (int(lens.min()), int(lens.max())) if lens.size else (0, 0)
    if lens.size and low < floor:
        i = _first(lens < floor)
        raise OutOfContract(f"seq_lens[{i}] = {lens[i]} is below {floor}"
                            + (" (SGLang's contract: every seq_len >= 1)" if floor else ""))
    if not INT32_MIN <= low <= high <= INT32_MAX:  # fits_int32, from the same extremes
        i = _first(outside(lens.astype(np.int64), INT32_MAX + 1, INT32_MIN))
        raise OutOfContract(f"seq_lens[{i}] = {lens[i]} does not fit int32")
    if low >= 1 and lens.shape[0] <= case.scalars["num_seq"]:  # every length takes part
        mx, mn = high, low
    else:
        mx, mn = num_kv_splits_stats(case)
    exact, lo, hi = ext_core_count_range(mx, s["device_core_count"])
    main = _splits_for(case, mx, mn, exact)
    alts = []
    for e in range(lo, hi + 1):
        if e != exact:
            alt = _splits_for(case, mx, mn, e)
            if not np.array_equal(alt, main) and not any(np.array_equal(alt, x["num_kv_splits"]) for x in alts):
                alts.append({"num_kv_splits": alt})
    if "uneven_batch" in case.tensors:  # 0.5.23's flag: it does not depend on the float32 step
        flag = num_kv_splits_uneven(mx, mn)
        main = {"num_kv_splits": main, "uneven_batch": flag}
        alts = [{**a, "uneven_batch": flag} for a in alts]
    else:
        main = {"num_kv_splits": main}
    boundary = None
    if alts:
        boundary = (f"float32 step on a rounding boundary: device_core_count * max(log2(max_seq_len/64), 1) "
                    f"truncates to {lo}..{hi} within log2 error; {len(alts) + 1} results accepted")
    return Expected(main, tuple(alts), boundary)


def num_kv_splits_uneven(mx: int, mn: int) -> np.ndarray:
    """uneven_batch: min < max after the ratio rule (a min above 80% of the max becomes the max)."""
    if mx * 8 < mn * 10:
        mn = mx
    return np.array([int(mn < mx)], dtype=np.int64)


# 4. draft_extend_metadata -----------------------------------------------------------------


def _prefix_sums(what: str, lens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(int32 values, 0 then their running sum); a value or a sum leaving int32 is out of contract."""
    vals = [int(x) for x in lens]
    sums = [0]
    for i, x in enumerate(vals):
        if x < 0:
            raise OutOfContract(f"{what}[{i}] = {x} is negative")
        _check32(f"{what}[{i}]", x)
        sums.append(_check32(f"the running sum of {what} at {i + 1}", sums[-1] + x))
    return np.array(vals, dtype=np.int64), np.array(sums, dtype=np.int64)


def draft_extend_metadata(case: Case) -> Expected:
    v, ps = case.values, case.scalars["page_size"]
    seq, cu_k = _prefix_sums("seq_lens", v["seq_lens"])
    _, cu_q = _prefix_sums("extend_seq_lens", v["extend_seq_lens"])
    out = {"cache_seqlens_int32": seq, "cu_seqlens_k": cu_k, "cu_seqlens_q": cu_q,
           "page_table": _empty_out(case, "page_table")}
    W = case.tensors["page_table"].shape[1]
    for i, sl in enumerate(seq):
        cdiv32(f"cdiv(seq_lens[{i}], page_size)", int(sl), ps)
    live = np.minimum(-(-seq // ps), W)
    rtt = v["req_to_token"]  # tables gathered, then widened: only the cells read are copied
    pool = v["req_pool_indices"].astype(np.int64)
    swa = "full_to_swa_index_mapping" in case.tensors
    mapping = v["full_to_swa_index_mapping"] if swa else None
    if swa:
        out["swa_page_table"] = _empty_out(case, "swa_page_table")
    for i in range(seq.size):
        n = int(live[i])
        if n == 0:  # no pages: the pool index is never read
            continue
        if not 0 <= pool[i] < rtt.shape[0]:
            raise OutOfContract(f"req_pool_indices[{i}] = {pool[i]} outside [0, {rtt.shape[0]}) on a row with pages")
        if (n - 1) * ps >= rtt.shape[1]:
            raise OutOfContract(f"row {i}: live page {n - 1} reads token {(n - 1) * ps} >= req_to_token width "
                                f"{rtt.shape[1]}")
        tokens = rtt[pool[i], np.arange(n) * ps].astype(np.int64)
        pages = np.floor_divide(tokens, ps)
        if not fits_int32(pages):
            c = _first(outside(pages, INT32_MAX + 1, INT32_MIN))
            raise OutOfContract(f"page_table[{i}, {c}] = {pages[c]} does not fit int32")
        out["page_table"][i, :n] = pages
        if swa:
            if tokens.min() < 0 or tokens.max() >= mapping.shape[0]:
                c = _first(outside(tokens, mapping.shape[0]))
                raise OutOfContract(f"token id req_to_token[{pool[i]}, {c * ps}] = {tokens[c]} (row {i}, page {c}) "
                                    f"lies outside the SWA mapping [0, {mapping.shape[0]})")
            swa_pages = np.floor_divide(mapping[tokens].astype(np.int64), ps)
            if not fits_int32(swa_pages):
                c = _first(outside(swa_pages, INT32_MAX + 1, INT32_MIN))
                raise OutOfContract(f"swa_page_table[{i}, {c}] = {swa_pages[c]} does not fit int32")
            out["swa_page_table"][i, :n] = swa_pages
    if swa:
        locs = v["out_cache_loc"].astype(np.int64)
        if locs.size and (locs.min() < 0 or locs.max() >= mapping.shape[0]):
            k = _first(outside(locs, mapping.shape[0]))
            raise OutOfContract(f"out_cache_loc[{k}] = {locs[k]} lies outside the SWA mapping [0, {mapping.shape[0]})")
        slots = mapping[locs].astype(np.int64)
        if case.tensors["swa_out_cache_loc"].dtype == "int32" and not fits_int32(slots):
            k = _first(outside(slots, INT32_MAX + 1, INT32_MIN))
            raise OutOfContract(f"swa_out_cache_loc[{k}] = mapping[{locs[k]}] = {slots[k]} does not fit int32")
        out["swa_out_cache_loc"] = slots
    return Expected(out)


# 5. q8kv8_topk_length -------------------------------------------------------------------


def q8kv8_topk_length(case: Case) -> Expected:
    """1 + the last position holding a value >= 0, and 1 for a row without one."""
    idx = np.asarray(case.values["indices"], dtype=np.int64)
    S, K = case.tensors["indices"].shape
    ramp = np.arange(1, K + 1, dtype=np.int64)
    last = np.where(idx >= 0, ramp[None, :], 0).max(axis=1, initial=0) if S else np.zeros(0, np.int64)
    return Expected({"topk_length": np.maximum(last, 1)})
