"""kvfuzz's own ``get_num_kv_splits_triton``: how many KV splits each decode sequence gets.

``get_num_kv_splits_triton`` has SGLang 0.5.23's parameter list (the seed's plus the optional
``uneven_batch_ptr``), so SGLang can launch it unchanged as
``get_num_kv_splits_triton[(1,)](..., MAX_NUM_SEQ=...)``; ``get_num_kv_splits``
is the validating launcher (and handles strided tensors). The formula is the one in
``kvfuzz/ops/num_kv_splits/contract.py`` (and its oracle, ``oracle.py``), with two definitions where the seed has none:

* the statistics ``mx`` and ``mn`` are taken over rows with ``seq_len >= 1`` only, and are
  both 1 when no row has ``seq_len >= 1``; the formula is then applied unchanged to every
  row (a zero-length row gets ``cdiv(0, chunk) = 0``);
* any ``num_seq`` is correct, also ``num_seq > MAX_NUM_SEQ``: the single program walks the
  rows in chunks of ``MAX_NUM_SEQ`` (one pass for the statistics, one for the stores) and
  never loads past ``num_seq``.

The one floating-point step is float32, as in the contract:
``e = int32(float32(device_core_count) * max(log2(float32(mx) / 64.0), 1.0))``.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from ._args import _I32, _INDEX, _INT32, _Tensor, _int_arg, _tensor_arg

__all__ = ["get_num_kv_splits", "get_num_kv_splits_triton", "sglang_max_num_seq"]

# Largest chunk the launcher uses; longer batches loop inside the one program.
MAX_CHUNK = 1024
# SM count assumed when the tensors are not on a CUDA device (an H200 has 132).
CPU_CORE_COUNT = 132

_SCALARS = ["num_seq", "num_group", "num_head", "num_kv_head", "max_kv_splits", "device_core_count"]


@triton.jit
def _cdiv(a, b):
    # Triton's integer // truncates toward zero (compiled and interpreted alike), so for a
    # negative `a` (outside the contract) this is not the mathematical ceiling.
    return (a + b - 1) // b


@triton.jit
def _chunk_sizes(mx, mn, max_splits, ext_cores, token_grid):
    """c1 and c2 of the formula, in the integer type of mx and mn (both >= 1)."""
    s1 = tl.maximum(tl.minimum(_cdiv(mx, mn), max_splits), 1).to(mx.dtype)
    # in mx's type: the caller picks int32 when every operand fits (int64 division is slow)
    s2 = tl.maximum(tl.minimum(_cdiv(ext_cores.to(mx.dtype), token_grid.to(mx.dtype)), max_splits), 1).to(mx.dtype)
    return _cdiv(mx, s1), _cdiv(mx, s2)


@triton.jit
def _store_splits(out, out_s, seq_lens, seq_lens_s, num_seq, num_group, chunk_1, chunk_2,
                  CHUNK: tl.constexpr):
    """out[i * num_group + j] = max(cdiv(seq_lens[i], chunk_1), cdiv(seq_lens[i], chunk_2)),
    computed in the integer type of the chunk sizes."""
    for start in range(0, num_seq, CHUNK):
        offs = (start + tl.arange(0, CHUNK)).to(tl.int64)
        inb = offs < num_seq
        x = tl.load(seq_lens + offs * seq_lens_s, mask=inb, other=0).to(chunk_1.dtype)
        splits = tl.maximum(_cdiv(x, chunk_1), _cdiv(x, chunk_2)).to(tl.int32)
        first = offs * num_group
        for j in range(0, num_group):
            tl.store(out + (first + j) * out_s, splits, mask=inb)


@triton.jit
def _scalars(mx, num_seq, num_group, num_head, num_kv_head, max_kv_splits, device_core_count):
    """max_splits, ext_cores (int32) and token_grid (int64) of the formula; mx >= 1."""
    # Clamps keep divisors >= 1; they change nothing inside the contract.
    max_splits = tl.maximum(max_kv_splits, 1)
    # float32(mx) / 64.0, exactly: a power-of-two multiply is exact, where the compiler's fast
    # float division (div.full.f32) only promises 2 ulp.
    ext_len = mx.to(tl.float32) * 0.015625
    ext_cores = device_core_count.to(tl.float32) * tl.maximum(tl.log2(ext_len), 1.0)
    # Truncating cast to int32; the clamp (largest float32 below 2**31) only matters outside
    # the contract, where an out-of-range cast would differ between GPU and interpreter.
    ext_cores = tl.minimum(ext_cores, 2147483520.0).to(tl.int32)
    group = num_head // tl.maximum(num_kv_head, 1)
    heads = tl.where(group == 1, num_head, _cdiv(num_head, tl.maximum(tl.minimum(group, 16), 1)))
    token_grid = tl.maximum(num_seq.to(tl.int64) * num_group * heads, 1)
    return max_splits, ext_cores, token_grid


@triton.jit
def _one_chunk(out, out_s, seq_lens, seq_lens_s,
               num_seq, num_group, num_head, num_kv_head, max_kv_splits, device_core_count, uneven,
               CHUNK: tl.constexpr):
    """The common case, num_seq <= CHUNK, when every length is in [0, 2**30) and the other
    operands are small too: one load, values kept in registers, everything in 32 bits.
    Returns whether it wrote the output (else nothing was written)."""
    offs = tl.arange(0, CHUNK)
    inb = offs < num_seq
    x = tl.load(seq_lens + offs.to(tl.int64) * seq_lens_s, mask=inb, other=0)
    # w: the length as uint32 when it is in [0, 2**30), else some w >= 2**30 (a negative
    # int32 reinterpreted as uint32 is >= 2**31; wider types are clamped first).
    if x.dtype == tl.int32:
        w = x.to(tl.uint32, bitcast=True)
    else:
        w = tl.minimum(x.to(tl.int64).to(tl.uint64, bitcast=True), 2**30).to(tl.uint32)
    hi = tl.max(w, axis=0)
    # min over the rows with w >= 1: w - 1 wraps a zero row (and a masked one) to 2**32 - 1.
    mn_less_1 = tl.min(w - 1, axis=0)
    none_live = hi == 0
    mx = tl.where(none_live, 1, hi)
    max_splits, ext_cores, token_grid = _scalars(mx, num_seq, num_group, num_head, num_kv_head,
                                                 max_kv_splits, device_core_count)
    # In 32 bits every step below is exact: no |value| + divisor reaches 2**31.
    fast = (hi < 2**30) & (token_grid < 2**30) & (ext_cores < 2**30)
    if fast:
        mn = tl.where(none_live, 0, mn_less_1) + 1
        mn = tl.where(mx.to(tl.int64) * 8 < mn.to(tl.int64) * 10, mx, mn)
        if uneven is not None:
            tl.store(uneven, (mn < mx).to(tl.int32))
        s1 = tl.maximum(tl.minimum(_cdiv(mx, mn).to(tl.int32), max_splits), 1)
        s2 = tl.maximum(tl.minimum(_cdiv(ext_cores, token_grid.to(tl.int32)), max_splits), 1)
        # For a length x >= 0, cdiv(x, c) does not increase with c, so
        # max(cdiv(x, c1), cdiv(x, c2)) = cdiv(x, min(c1, c2)): one division per row.
        chunk = tl.minimum(_cdiv(mx, s1.to(tl.uint32)), _cdiv(mx, s2.to(tl.uint32)))
        splits = _cdiv(w, chunk).to(tl.int32)
        if num_group == 1:
            # contiguous stores (in the bare kernel) keep the load's layout: no shuffle through
            # shared memory before the store
            tl.store(out + offs.to(tl.int64) * out_s, splits, mask=inb)
        else:
            first = offs.to(tl.int64) * num_group
            for j in range(0, num_group):
                tl.store(out + (first + j) * out_s, splits, mask=inb)
    return fast


@triton.jit
def _num_kv_splits_body(
    out, out_s, seq_lens, seq_lens_s,
    num_seq, num_group, num_head, num_kv_head, max_kv_splits, device_core_count, uneven,
    CHUNK: tl.constexpr,
):
    # One chunk (always so with SGLang's MAX_NUM_SEQ): a single load and 32-bit arithmetic when
    # the values allow it. Otherwise (longer batches, lengths outside [0, 2**30), huge
    # scalars) the general two-pass code; both give the same results.
    done = num_seq < 0  # False
    if num_seq <= CHUNK:
        done = _one_chunk(out, out_s, seq_lens, seq_lens_s, num_seq, num_group, num_head, num_kv_head,
                          max_kv_splits, device_core_count, uneven, CHUNK)
    if done == 0:
        _general(out, out_s, seq_lens, seq_lens_s, num_seq, num_group, num_head, num_kv_head,
                 max_kv_splits, device_core_count, uneven, CHUNK)


@triton.jit
def _general(
    out, out_s, seq_lens, seq_lens_s,
    num_seq, num_group, num_head, num_kv_head, max_kv_splits, device_core_count, uneven,
    CHUNK: tl.constexpr,
):
    """Any num_seq and any values: one pass over the rows for the statistics, one for the stores."""
    # Pass 1: max and min over the rows with seq_len >= 1, and the least value of all.
    mx = tl.zeros([], tl.int64)
    mn = tl.full([], 2**62, tl.int64)
    lo = tl.zeros([], tl.int64)
    for start in range(0, num_seq, CHUNK):
        offs = (start + tl.arange(0, CHUNK)).to(tl.int64)
        inb = offs < num_seq
        x = tl.load(seq_lens + offs * seq_lens_s, mask=inb, other=0).to(tl.int64)
        live = inb & (x >= 1)
        mx = tl.maximum(mx, tl.max(tl.where(live, x, 0), axis=0))
        mn = tl.minimum(mn, tl.min(tl.where(live, x, 2**62), axis=0))
        lo = tl.minimum(lo, tl.min(x, axis=0))
    none_live = mx == 0
    mx = tl.where(none_live, 1, mx)
    mn = tl.where(none_live, 1, mn)
    mn = tl.where(mx * 8 < mn * 10, mx, mn)
    if uneven is not None:
        tl.store(uneven, (mn < mx).to(tl.int32))
    max_splits, ext_cores, token_grid = _scalars(mx, num_seq, num_group, num_head, num_kv_head,
                                                 max_kv_splits, device_core_count)

    # Pass 2. int32 division is several times cheaper than int64 on the GPU; it is exact while
    # no |value| + divisor reaches 2**31 (ext_cores + token_grid included).
    # (Distinct names per branch: the compiler merges same-named variables across branches.)
    if (mx < 2**30) & (lo > -(2**30)) & (token_grid < 2**30) & (ext_cores < 2**30):
        c1_32, c2_32 = _chunk_sizes(mx.to(tl.int32), mn.to(tl.int32), max_splits, ext_cores, token_grid)
        _store_splits(out, out_s, seq_lens, seq_lens_s, num_seq, num_group, c1_32, c2_32, CHUNK)
    else:
        c1_64, c2_64 = _chunk_sizes(mx, mn, max_splits.to(tl.int64), ext_cores, token_grid)
        _store_splits(out, out_s, seq_lens, seq_lens_s, num_seq, num_group, c1_64, c2_64, CHUNK)


@triton.jit(do_not_specialize=_SCALARS)
def get_num_kv_splits_triton(
    num_kv_splits_ptr,
    seq_lens_ptr,
    num_seq,
    num_group,
    num_head,
    num_kv_head,
    max_kv_splits,
    device_core_count,
    MAX_NUM_SEQ: tl.constexpr,
    uneven_batch_ptr=None,
):
    """SGLang 0.5.23's kernel interface (contiguous tensors, grid ``(1,)``), any ``num_seq``;
    ``uneven_batch_ptr``, when given, receives ``min < max`` of the statistics as int32."""
    _num_kv_splits_body(num_kv_splits_ptr, 1, seq_lens_ptr, 1,
                        num_seq, num_group, num_head, num_kv_head, max_kv_splits, device_core_count,
                        uneven_batch_ptr, MAX_NUM_SEQ)


@triton.jit(do_not_specialize=_SCALARS)
def _get_num_kv_splits_strided(
    num_kv_splits_ptr, num_kv_splits_s,
    seq_lens_ptr, seq_lens_s,
    num_seq, num_group, num_head, num_kv_head, max_kv_splits, device_core_count, uneven_batch_ptr,
    CHUNK: tl.constexpr,
):
    _num_kv_splits_body(num_kv_splits_ptr, num_kv_splits_s, seq_lens_ptr, seq_lens_s,
                        num_seq, num_group, num_head, num_kv_head, max_kv_splits, device_core_count,
                        uneven_batch_ptr, CHUNK)


def sglang_max_num_seq(num_seq: int) -> int:
    """The ``MAX_NUM_SEQ`` SGLang passes: 256 below 256 sequences, else the next power of two
    (``triton.next_power_of_2``, computed here: Triton's is a constexpr function, ~2 µs a call)."""
    return 256 if num_seq < 256 else 1 << (num_seq - 1).bit_length()


@functools.lru_cache(maxsize=None)
def _device_core_count(device: torch.device) -> int:
    if device.type != "cuda":
        return CPU_CORE_COUNT
    return torch.cuda.get_device_properties(device).multi_processor_count


def _splits_fast_check(out, seq_lens, num_seq, num_group, num_head, num_kv_head, max_kv_splits,
                       device_core_count):
    """The device when every argument passes ``_splits_full_check`` on a fast path, else None
    (``_splits_full_check`` then decides, and names the argument). Accepts a subset of what the
    full check accepts: exact ``int`` and ``torch.Tensor`` types only."""
    if not (type(num_seq) is int and type(num_group) is int and type(num_head) is int
            and type(num_kv_head) is int and type(max_kv_splits) is int
            and num_seq >= 0 and num_group >= 1 and num_kv_head >= 1 and num_head >= num_kv_head
            and max_kv_splits >= 1
            and (device_core_count is None or (type(device_core_count) is int and device_core_count >= 1))
            and type(out) is _Tensor and type(seq_lens) is _Tensor
            and out.dtype is _I32 and seq_lens.dtype in _INDEX):
        return None
    dev = out.device
    out_shape, sl_shape = out.shape, seq_lens.shape
    if (seq_lens.device != dev or len(out_shape) != 1 or len(sl_shape) != 1
            or out_shape[0] < num_seq * num_group or sl_shape[0] < num_seq):
        return None
    return dev


def _splits_full_check(num_kv_splits, seq_lens, num_seq, num_group, num_head, num_kv_head, max_kv_splits,
                       device_core_count):
    """Every check, one argument at a time: ``ValueError`` naming the first argument outside the
    contract, else the scalars as ints and the tensors' device."""
    num_seq = _int_arg("num_seq", num_seq)
    num_group = _int_arg("num_group", num_group)
    num_head = _int_arg("num_head", num_head)
    num_kv_head = _int_arg("num_kv_head", num_kv_head)
    max_kv_splits = _int_arg("max_kv_splits", max_kv_splits)
    if num_seq < 0:
        raise ValueError(f"num_seq must be >= 0, got {num_seq}")
    for name, value in (("num_group", num_group), ("num_head", num_head),
                        ("num_kv_head", num_kv_head), ("max_kv_splits", max_kv_splits)):
        if value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")
    if num_head < num_kv_head:
        raise ValueError(f"num_head ({num_head}) must be >= num_kv_head ({num_kv_head})")
    device = num_kv_splits.device if isinstance(num_kv_splits, torch.Tensor) else None
    if _tensor_arg("num_kv_splits", num_kv_splits, 1, _INT32, device)[0] < num_seq * num_group:
        raise ValueError(f"num_kv_splits has {num_kv_splits.shape[0]} elements, fewer than "
                         f"num_seq * num_group = {num_seq * num_group}")
    if _tensor_arg("seq_lens", seq_lens, 1, _INDEX, device)[0] < num_seq:
        raise ValueError(f"seq_lens has {seq_lens.shape[0]} elements, fewer than num_seq = {num_seq}")
    if device_core_count is not None:
        device_core_count = _int_arg("device_core_count", device_core_count)
        if device_core_count < 1:
            raise ValueError(f"device_core_count must be >= 1, got {device_core_count}")
    return (num_seq, num_group, num_head, num_kv_head, max_kv_splits, device_core_count), device


def get_num_kv_splits(
    num_kv_splits,
    seq_lens,
    num_seq,
    num_group,
    num_head,
    num_kv_head,
    max_kv_splits=8,
    device_core_count=None,
    uneven_batch=None,
):
    """Validate, then fill ``num_kv_splits[i * num_group + j]`` for ``i < num_seq``,
    ``j < num_group``. Any strides; cells past ``num_seq * num_group`` are untouched.

    ``device_core_count=None`` means the SM count of the tensors' CUDA device (132 on CPU).
    ``uneven_batch``, a one-element int32 tensor, receives 1 when the lengths' min (after the
    ratio rule) is below their max, else 0 (SGLang 0.5.23's ``uneven_batch_ptr``).
    Raises ``ValueError`` on arguments outside the contract.
    """
    device = _splits_fast_check(num_kv_splits, seq_lens, num_seq, num_group, num_head, num_kv_head,
                                max_kv_splits, device_core_count)
    if device is None:
        (num_seq, num_group, num_head, num_kv_head, max_kv_splits, device_core_count), device = (
            _splits_full_check(num_kv_splits, seq_lens, num_seq, num_group, num_head, num_kv_head,
                               max_kv_splits, device_core_count))
    if uneven_batch is not None and (_tensor_arg("uneven_batch", uneven_batch, 1, _INT32, device)[0] != 1):
        raise ValueError(f"uneven_batch must have one element, got shape {tuple(uneven_batch.shape)}")
    if device_core_count is None:
        device_core_count = _device_core_count(device)
    if num_seq == 0:
        if uneven_batch is not None:
            uneven_batch.zero_()  # no lengths: not uneven
        return
    # .run: what kernel[grid](...) calls, without the extra call
    _get_num_kv_splits_strided.run(
        num_kv_splits, *num_kv_splits.stride(), seq_lens, *seq_lens.stride(),
        num_seq, num_group, num_head, num_kv_head, max_kv_splits, device_core_count, uneven_batch,
        CHUNK=min(sglang_max_num_seq(num_seq), MAX_CHUNK), grid=(1,), warmup=False,
    )
