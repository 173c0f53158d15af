"""num_kv_splits's two oracles: `numpy_ref` (exact, torch-free; int32 overflow is `OutOfContract`)
and `torch_ref` (the unfused torch ops the kernel replaced, on the host)."""

from __future__ import annotations

import math
from decimal import Decimal, localcontext
from functools import lru_cache

import numpy as np

from ...case import Case
from ...contract import INT32_MAX, INT32_MIN, Expected, OutOfContract
from ...oracles.numpy_ref import cdiv, cdiv32, check32, first_at, outside
from ...oracles.torch_ref import Inputs, as_int64, input_tensor


# the NumPy oracle ------------------------------------------------------------------------


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
    check32("max_seq_len * 8", mx * 8)
    check32("min_seq_len * 10", mn * 10)
    if mx * 8 < mn * 10:
        mn = mx
    s1 = min(cdiv32("cdiv(max_seq_len, min_seq_len)", mx, mn), mks)
    c1 = cdiv32("cdiv(max_seq_len, max_kv_splits_1)", mx, s1)
    g = num_head // num_kv_head
    per_seq = num_head if g == 1 else cdiv(num_head, min(16, g))
    tg = check32("token_grid", check32("num_seq * num_group", num_seq * num_group) * per_seq)
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


def numpy_ref(case: Case) -> Expected:
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
        i = first_at(lens < floor)
        raise OutOfContract(f"seq_lens[{i}] = {lens[i]} is below {floor}"
                            + (" (SGLang's contract: every seq_len >= 1)" if floor else ""))
    if not INT32_MIN <= low <= high <= INT32_MAX:  # fits_int32, from the same extremes
        i = first_at(outside(lens.astype(np.int64), INT32_MAX + 1, INT32_MIN))
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


# the torch oracle ------------------------------------------------------------------------


def torch_ref(case: Case, device, inputs: Inputs = None) -> dict[str, torch.Tensor]:
    import torch

    s = case.scalars
    num_seq, num_group = s["num_seq"], s["num_group"]
    lens = input_tensor(case, "seq_lens", device, inputs).long()[:num_seq]
    live = lens >= 1 if case.variant == "default" else torch.ones_like(lens, dtype=torch.bool)
    one = torch.ones((), dtype=torch.long, device=device)
    # no host round trip (a batch synchronises once): with no live row, mx = mn = 1
    if lens.numel():
        any_live = live.any()
        mx = torch.where(any_live, torch.where(live, lens, torch.zeros_like(lens)).max(), one)
        mn = torch.where(any_live, torch.where(live, lens, torch.full_like(lens, torch.iinfo(torch.int64).max)).min(),
                         one)
    else:
        mx = mn = one
    mn = torch.where(mx * 8 < mn * 10, mx, mn)

    def cdiv(a, b):
        return (a + b - 1) // b

    s1 = torch.clamp(cdiv(mx, mn), max=s["max_kv_splits"])
    c1 = cdiv(mx, s1)
    ext = torch.log2(mx.to(torch.float32) / 64.0).clamp(min=1.0)
    e = (torch.full((), s["device_core_count"], dtype=torch.float32, device=device) * ext).to(torch.int32).long()
    g = s["num_head"] // s["num_kv_head"]
    per_seq = s["num_head"] if g == 1 else -(-s["num_head"] // min(16, g))
    tg = num_seq * num_group * per_seq
    s2 = torch.clamp(cdiv(e, tg), max=s["max_kv_splits"])
    c2 = cdiv(mx, s2)
    per_row = torch.maximum(cdiv(lens, c1), cdiv(lens, c2))
    out = torch.zeros(case.tensors["num_kv_splits"].shape, dtype=torch.int64, device=device)
    out[: num_seq * num_group] = per_row[:, None].expand(-1, num_group).reshape(-1)  # expand: no sync
    result = {"num_kv_splits": as_int64(out)}
    if "uneven_batch" in case.tensors:  # SGLang 0.5.23: min < max after the ratio rule (mn above)
        result["uneven_batch"] = (mn < mx).to(torch.int64).reshape(1)
    return result
