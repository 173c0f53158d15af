"""kvfuzz's own ``normal_decode_set_metadata``: the decode metadata op, hardened.

Same call signature as SGLang's fused kernel (``metadata_kernels.py``), written from the
contract in ``kvfuzz/ops/decode_metadata/contract.py``. With ``B = cache_seqlens_int32.shape[0]`` and
``P = max_seq_pages`` it writes, in place and nothing else:

* ``cache_seqlens_int32[i] = int32(seq_lens[i] + seq_len_delta)``
* ``cu_seqlens_k = [0, running int32 sum of cache_seqlens_int32]``
* ``page_table[i, c] = req_to_token[req_pool_indices[i], c * page_size] // page_size``, ``c < P``
* ``swa_page_table[i, c] = mapping[req_to_token[req_pool_indices[i], c * page_size]] // page_size``
  for ``c < P``, when ``swa_page_table`` and the mapping (``full_to_swa_index_mapping``, or
  ``token_to_kv_pool``'s) are given.

SGLang 0.5.23's arguments (kvfuzz's ``decode_metadata`` contract, variant ``strict``):

* ``full_v2p``: ``page_table[i, c] = sink(full_v2p[max(token // page_size, 0)])`` where
  ``sink(-1) = 0`` (an unbound page maps to the sink page; a tombstoned token slot, -1, reads
  page 0, as 0.5.23 clamps it); ``swa_v2p`` (the unified SWA pool, in place of the mapping):
  ``swa_page_table[i, c] = sink(swa_v2p[max(token // page_size, 0)])``;
* ``zero_tail``: columns ``cdiv(seq_lens[i] + seq_len_delta, page_size) <= c < P`` are written 0;
* ``skip_page_table``: only ``cache_seqlens_int32`` and ``cu_seqlens_k`` are written;

and 0.5.17's ``kernel_page_multiplier``, which scales ``page_table``'s values (after ``full_v2p``).

Differences from the seed, all on purpose:

* bad arguments raise ``ValueError`` naming the argument (shapes, dtypes, devices, a
  ``page_size`` that is not a power of two); the checks read metadata only, never tensor
  values, so the call stays CUDA-graph capturable;
* every tensor is used through its strides (no ``.contiguous()``: on an output it would
  write into a temporary copy, on an input it would hide a copy);
* every load and store is masked on the device so that no value can move an access outside
  its tensor: a pool index outside ``req_to_token``'s rows skips that row's page cells, a
  column past ``req_to_token``'s width is skipped, a token id outside the SWA mapping (a page
  outside a v2p table) skips that cell;
* ``seq_len_delta`` is a runtime scalar (one compiled kernel for every draft step);
* the prefix sum is vectorised (``tl.cumsum`` over blocks, carrying the running total);
* the host side costs less than the seed's: one fast check covers common arguments (the full,
  per-argument check runs only when it declines), and with unit strides along every row (what
  SGLang passes) the launch binds 15 arguments (23 for the general kernel) to the seed's 18 (26).
  ``scripts/host_overhead.py`` measures it.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._args import _I32, _INDEX, _INT32, _Tensor, _int_arg, _tensor_arg

__all__ = ["normal_decode_set_metadata"]

# Launch configuration: the seed's blocks and warps, which SGLang tuned on H100/H200: one
# column per thread. The prefix sum steps through seq_lens one row per thread as well (registers
# are allocated per kernel, so a wider step would lower the occupancy of every gather program; at
# one row per thread both kernels stay at 32 registers, full occupancy on sm_90). So one block
# size serves both, a constexpr parameter with a default: never passed by the launcher, and not
# a global either (Triton re-checks every global's value on every launch, about 0.7 µs each).
PS1_NUM_WARPS = 8
GENERAL_NUM_WARPS = 4
PS1_BLOCK_COLS = PS1_SUM_BLOCK = 32 * PS1_NUM_WARPS
GENERAL_BLOCK_COLS = GENERAL_SUM_BLOCK = 32 * GENERAL_NUM_WARPS

# The dtypes of (cache_seqlens_int32, cu_seqlens_k, page_table, req_to_token, req_pool_indices,
# seq_lens) that the checks accept, for the fast path's single set lookup.
_DECODE_DTYPES = frozenset((_I32, _I32, _I32, r, p, s) for r in _INDEX for p in _INDEX for s in _INDEX)

# Scalars that change from call to call: compiled as runtime values, never as constants.
_RUNTIME_SCALARS = ["B", "n_cols", "seq_len_delta", "n_pool_rows", "n_map", "n_full_v2p", "page_mult"]

# SWA_MODE: no SWA table, SWA through the static pool's token mapping, or the unified pool's v2p table.
SWA_NONE, SWA_MAPPING, SWA_V2P = 0, 1, 2


# --------------------------------------------------------------------------- device code


@triton.jit
def _seqlens_and_cumsum(
    seq_lens, seq_lens_s,
    cache_seqlens, cache_seqlens_s,
    cu_seqlens, cu_seqlens_s,
    B, seq_len_delta,
    BLOCK: tl.constexpr,
):
    """cache_seqlens[i] = int32(seq_lens[i] + delta); cu_seqlens = [0, cumsum]. One program."""
    tl.store(cu_seqlens, tl.zeros([], tl.int32))
    # Summed in int64 and stored as int32: the low 32 bits are the wrapping int32 sum, and
    # no intermediate overflows (the interpreter rejects int32 overflow in reductions).
    running = tl.zeros([], tl.int64)
    for start in range(0, B, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        inb = offs < B
        offs64 = offs.to(tl.int64)
        x = tl.load(seq_lens + offs64 * seq_lens_s, mask=inb, other=0)
        v = tl.where(inb, (x + seq_len_delta).to(tl.int32), 0)
        tl.store(cache_seqlens + offs64 * cache_seqlens_s, v, mask=inb)
        v64 = v.to(tl.int64)
        tl.store(cu_seqlens + (offs64 + 1) * cu_seqlens_s,
                 (running + tl.cumsum(v64, axis=0)).to(tl.int32), mask=inb)
        running += tl.sum(v64, axis=0)


@triton.jit
def _decode_metadata_body(
    seq_lens, seq_lens_s,
    req_pool_indices, req_pool_indices_s,
    req_to_token, req_to_token_s0, req_to_token_s1, n_pool_rows,
    cache_seqlens, cache_seqlens_s,
    cu_seqlens, cu_seqlens_s,
    page_table, page_table_s0, page_table_s1,
    swa_page_table, swa_page_table_s0, swa_page_table_s1,
    swa_map, swa_map_s, n_map,
    full_v2p, full_v2p_s, n_full_v2p,
    B, n_cols, seq_len_delta, page_mult,
    SHIFT: tl.constexpr, SWA_MODE: tl.constexpr, ZERO_TAIL: tl.constexpr, BLOCK: tl.constexpr,
):
    """The whole op, for page size ``1 << SHIFT``, SWA by SWA_MODE, the full pool's v2p table
    when ``full_v2p`` is not None, the tail zeroed when ZERO_TAIL. Grid (1 + B, column blocks),
    or (1, 1) when there is nothing to gather: program (0, 0) writes the two sums, beside the
    gathers rather than before one of them; program (1 + i, j) gathers row i's columns
    [j * BLOCK, (j + 1) * BLOCK)."""
    pid_b = tl.program_id(0)
    pid_c = tl.program_id(1)
    if pid_b == 0:
        if pid_c == 0:
            _seqlens_and_cumsum(seq_lens, seq_lens_s, cache_seqlens, cache_seqlens_s,
                                cu_seqlens, cu_seqlens_s, B, seq_len_delta, BLOCK)
    else:
        i = (pid_b - 1).to(tl.int64)  # the batch row this program gathers
        row = tl.load(req_pool_indices + i * req_pool_indices_s)
        row_ok = (row >= 0) & (row < n_pool_rows)
        row64 = tl.where(row_ok, row, 0).to(tl.int64)
        cols = pid_c * BLOCK + tl.arange(0, BLOCK)
        # The row check folded into the column bound (a bad row has no columns), the same mask as
        # `(cols < n_cols) & row_ok` (cols >= 0), which triton 3.9's interpreter rejects ("mask
        # has unsupported dtype": it splats a scalar comparison as an integer). Compiled, one
        # scalar select replaces a per-column `and`.
        m = cols < tl.where(row_ok, n_cols, 0)
        cols64 = cols.to(tl.int64)
        if ZERO_TAIL:  # columns past the row's live pages are written 0, and their tokens never read
            length = tl.load(seq_lens + i * seq_lens_s).to(tl.int64) + seq_len_delta
            live = m & (cols64 < ((length + (1 << SHIFT) - 1) >> SHIFT))
        else:
            live = m
        tok = tl.load(req_to_token + (row64 * req_to_token_s0 + (cols64 << SHIFT) * req_to_token_s1),
                      mask=live, other=0, cache_modifier=".cg")
        # >> on a signed integer is an arithmetic shift: floor division by the page size.
        page = tok >> SHIFT
        pt_ptr = page_table + (i * page_table_s0 + cols64 * page_table_s1)
        if full_v2p is not None:
            # virtual -> physical page; a tombstone (-1) is the sink page 0; a page outside the
            # table is skipped (a dead column's 0 written all the same)
            vpage = tl.maximum(page, 0)  # a tombstoned token slot (-1) reads page 0, as 0.5.23 clamps it
            v_ok = live & (vpage < n_full_v2p)
            phys = tl.load(full_v2p + tl.where(v_ok, vpage, 0).to(tl.int64) * full_v2p_s, mask=v_ok, other=0,
                           cache_modifier=".cg")
            tl.store(pt_ptr, (tl.maximum(phys, 0) * page_mult).to(tl.int32), mask=v_ok | (m & ~live),
                     cache_modifier=".cg")
        else:
            tl.store(pt_ptr, (page * page_mult).to(tl.int32), mask=m, cache_modifier=".cg")
        if SWA_MODE != 0:
            if SWA_MODE == 1:  # the static pool: token slot -> SWA slot -> its page
                idx = tok
            else:  # the unified pool: the same virtual page -> its SWA physical page (page 0 for a tombstone)
                idx = tl.maximum(page, 0)
            s_ok = live & (idx >= 0) & (idx < n_map)
            slot = tl.load(swa_map + tl.where(s_ok, idx, 0).to(tl.int64) * swa_map_s, mask=s_ok, other=0,
                           cache_modifier=".cg")
            val = (slot >> SHIFT) if SWA_MODE == 1 else tl.maximum(slot, 0)
            tl.store(swa_page_table + (i * swa_page_table_s0 + cols64 * swa_page_table_s1),
                     val.to(tl.int32), mask=s_ok | (m & ~live), cache_modifier=".cg")


# The launched kernels: page_size == 1 without SWA (the seed's fast path), and the general
# one; each in two forms with the same device code. The default form takes unit strides
# along every row, which is what SGLang passes: it binds 6 (9) arguments fewer per launch
# than the strided form, which takes any strides. (Triton compiles a stride of 1 as a
# constant anyway, so the two forms compile to the same code for the same tensors.)


@triton.jit(do_not_specialize=_RUNTIME_SCALARS)
def _decode_metadata_ps1_kernel(
    seq_lens, req_pool_indices,
    req_to_token, req_to_token_s0, n_pool_rows,
    cache_seqlens, cu_seqlens,
    page_table, page_table_s0,
    B, n_cols, seq_len_delta, page_mult,
    ZERO_TAIL: tl.constexpr,
    BLOCK: tl.constexpr = PS1_BLOCK_COLS,
):
    """page_size == 1, no SWA, no v2p; unit strides along every row."""
    _decode_metadata_body(seq_lens, 1, req_pool_indices, 1, req_to_token, req_to_token_s0, 1, n_pool_rows,
                          cache_seqlens, 1, cu_seqlens, 1, page_table, page_table_s0, 1,
                          None, None, None, None, None, None,  # no SWA
                          None, None, None,  # no v2p
                          B, n_cols, seq_len_delta, page_mult, 0, 0, ZERO_TAIL, BLOCK)  # SHIFT 0, SWA_NONE (a
                          # literal: compiled Triton reads no plain global inside a kernel)


@triton.jit(do_not_specialize=_RUNTIME_SCALARS)
def _decode_metadata_ps1_strided_kernel(
    seq_lens, seq_lens_s,
    req_pool_indices, req_pool_indices_s,
    req_to_token, req_to_token_s0, req_to_token_s1, n_pool_rows,
    cache_seqlens, cache_seqlens_s,
    cu_seqlens, cu_seqlens_s,
    page_table, page_table_s0, page_table_s1,
    B, n_cols, seq_len_delta, page_mult,
    ZERO_TAIL: tl.constexpr,
    BLOCK: tl.constexpr = PS1_BLOCK_COLS,
):
    """page_size == 1, no SWA, no v2p; any strides."""
    _decode_metadata_body(seq_lens, seq_lens_s, req_pool_indices, req_pool_indices_s,
                          req_to_token, req_to_token_s0, req_to_token_s1, n_pool_rows,
                          cache_seqlens, cache_seqlens_s, cu_seqlens, cu_seqlens_s,
                          page_table, page_table_s0, page_table_s1,
                          None, None, None, None, None, None,  # no SWA
                          None, None, None,  # no v2p
                          B, n_cols, seq_len_delta, page_mult, 0, 0, ZERO_TAIL, BLOCK)  # SHIFT 0, SWA_NONE (a
                          # literal: compiled Triton reads no plain global inside a kernel)


@triton.jit(do_not_specialize=_RUNTIME_SCALARS)
def _decode_metadata_general_kernel(
    seq_lens, req_pool_indices,
    req_to_token, req_to_token_s0, n_pool_rows,
    cache_seqlens, cu_seqlens,
    page_table, page_table_s0,
    swa_page_table, swa_page_table_s0,
    swa_map, n_map,
    full_v2p, n_full_v2p,
    B, n_cols, seq_len_delta, page_mult,
    SHIFT: tl.constexpr,
    SWA_MODE: tl.constexpr,
    ZERO_TAIL: tl.constexpr,
    BLOCK: tl.constexpr = GENERAL_BLOCK_COLS,
):
    """Any power-of-two page size (``1 << SHIFT``), optional SWA and v2p; unit strides along every row."""
    _decode_metadata_body(seq_lens, 1, req_pool_indices, 1, req_to_token, req_to_token_s0, 1, n_pool_rows,
                          cache_seqlens, 1, cu_seqlens, 1, page_table, page_table_s0, 1,
                          swa_page_table, swa_page_table_s0, 1, swa_map, 1, n_map,
                          full_v2p, 1, n_full_v2p,
                          B, n_cols, seq_len_delta, page_mult, SHIFT, SWA_MODE, ZERO_TAIL, BLOCK)


@triton.jit(do_not_specialize=_RUNTIME_SCALARS)
def _decode_metadata_general_strided_kernel(
    seq_lens, seq_lens_s,
    req_pool_indices, req_pool_indices_s,
    req_to_token, req_to_token_s0, req_to_token_s1, n_pool_rows,
    cache_seqlens, cache_seqlens_s,
    cu_seqlens, cu_seqlens_s,
    page_table, page_table_s0, page_table_s1,
    swa_page_table, swa_page_table_s0, swa_page_table_s1,
    swa_map, swa_map_s, n_map,
    full_v2p, full_v2p_s, n_full_v2p,
    B, n_cols, seq_len_delta, page_mult,
    SHIFT: tl.constexpr,
    SWA_MODE: tl.constexpr,
    ZERO_TAIL: tl.constexpr,
    BLOCK: tl.constexpr = GENERAL_BLOCK_COLS,
):
    """Any power-of-two page size (``1 << SHIFT``), optional SWA and v2p; any strides."""
    _decode_metadata_body(seq_lens, seq_lens_s, req_pool_indices, req_pool_indices_s,
                          req_to_token, req_to_token_s0, req_to_token_s1, n_pool_rows,
                          cache_seqlens, cache_seqlens_s, cu_seqlens, cu_seqlens_s,
                          page_table, page_table_s0, page_table_s1,
                          swa_page_table, swa_page_table_s0, swa_page_table_s1, swa_map, swa_map_s, n_map,
                          full_v2p, full_v2p_s, n_full_v2p,
                          B, n_cols, seq_len_delta, page_mult, SHIFT, SWA_MODE, ZERO_TAIL, BLOCK)


# --------------------------------------------------------------------------- host code


def _decode_fast_check(cs, cu, pt, rtt, rpi, P, seq_lens, seq_len_delta, page_size, swa_pt, swa_map):
    """``(B, pool_rows, pool_width, n_map)`` when every argument passes ``_decode_full_check``
    on a fast path, else None (``_decode_full_check`` then decides, and names the argument).

    Accepts a subset of what ``_decode_full_check`` accepts: exact ``int`` and ``torch.Tensor``
    types only (a subclass or an ``__index__`` type takes the full check), with the same
    conditions on values, ranks, dtypes, sizes and devices. ``swa_pt`` is None without SWA.
    Metadata only, like the full check: no tensor values are read.
    """
    if not (type(P) is int and type(seq_len_delta) is int and type(page_size) is int
            and P >= 0 and page_size > 0 and not page_size & (page_size - 1)):
        return None
    T = _Tensor
    if not (type(cs) is T and type(cu) is T and type(pt) is T and type(rtt) is T and type(rpi) is T
            and type(seq_lens) is T):
        return None
    if (cs.dtype, cu.dtype, pt.dtype, rtt.dtype, rpi.dtype, seq_lens.dtype) not in _DECODE_DTYPES:
        return None
    dev = cs.device
    if cu.device != dev or pt.device != dev or rtt.device != dev or rpi.device != dev or seq_lens.device != dev:
        return None
    cs_shape, pt_shape, rtt_shape = cs.shape, pt.shape, rtt.shape
    if len(cs_shape) != 1 or len(pt_shape) != 2 or len(rtt_shape) != 2:
        return None
    B = cs_shape[0]
    if cu.shape != (B + 1,) or rpi.shape != (B,) or seq_lens.shape != (B,) or pt_shape[0] != B or P > pt_shape[1]:
        return None
    if swa_pt is None:
        return B, rtt_shape[0], rtt_shape[1], 0
    if not (type(swa_pt) is T and type(swa_map) is T and swa_pt.dtype is _I32 and swa_map.dtype in _INDEX
            and swa_pt.device == dev and swa_map.device == dev):
        return None
    swa_shape, map_shape = swa_pt.shape, swa_map.shape
    if len(swa_shape) != 2 or swa_shape[0] != B or P > swa_shape[1] or len(map_shape) != 1:
        return None
    return B, rtt_shape[0], rtt_shape[1], map_shape[0]


def _decode_full_check(cache_seqlens_int32, cu_seqlens_k, page_table, req_to_token, req_pool_indices,
                       max_seq_pages, seq_lens, seq_len_delta, page_size, swa_page_table, swa_map,
                       map_name="full_to_swa_index_mapping"):
    """Every check, one argument at a time: ``ValueError`` naming the first argument outside the
    contract, else ``(P, seq_len_delta, page_size)`` as ints and ``(B, pool_rows, pool_width,
    n_map)``. ``swa_page_table`` is None without SWA."""
    page_size = _int_arg("page_size", page_size)
    if page_size <= 0 or page_size & (page_size - 1):
        raise ValueError(f"page_size must be a power of two, got {page_size}")
    P = _int_arg("max_seq_pages", max_seq_pages)
    if P < 0:
        raise ValueError(f"max_seq_pages must be >= 0, got {P}")
    seq_len_delta = _int_arg("seq_len_delta", seq_len_delta)

    device = cache_seqlens_int32.device if isinstance(cache_seqlens_int32, torch.Tensor) else None
    B = _tensor_arg("cache_seqlens_int32", cache_seqlens_int32, 1, _INT32, device)[0]
    if _tensor_arg("cu_seqlens_k", cu_seqlens_k, 1, _INT32, device)[0] != B + 1:
        raise ValueError(f"cu_seqlens_k must have B + 1 = {B + 1} elements, got {cu_seqlens_k.shape[0]}")
    pt_rows, pt_width = _tensor_arg("page_table", page_table, 2, _INT32, device)
    if pt_rows != B:
        raise ValueError(f"page_table must have B = {B} rows, got {pt_rows}")
    if P > pt_width:
        raise ValueError(f"max_seq_pages = {P} exceeds page_table width {pt_width}")
    pool_rows, pool_width = _tensor_arg("req_to_token", req_to_token, 2, _INDEX, device)
    if _tensor_arg("req_pool_indices", req_pool_indices, 1, _INDEX, device)[0] != B:
        raise ValueError(f"req_pool_indices must have B = {B} elements, got {req_pool_indices.shape[0]}")
    if _tensor_arg("seq_lens", seq_lens, 1, _INDEX, device)[0] != B:
        raise ValueError(f"seq_lens must have B = {B} elements, got {seq_lens.shape[0]}")

    n_map = 0
    if swa_page_table is not None:
        swa_rows, swa_width = _tensor_arg("swa_page_table", swa_page_table, 2, _INT32, device)
        if swa_rows != B:
            raise ValueError(f"swa_page_table must have B = {B} rows, got {swa_rows}")
        if P > swa_width:
            raise ValueError(f"max_seq_pages = {P} exceeds swa_page_table width {swa_width}")
        if swa_map is None:
            raise ValueError("token_to_kv_pool must have a full_to_swa_index_mapping tensor")
        n_map = _tensor_arg(map_name, swa_map, 1, _INDEX, device)[0]
    return (P, seq_len_delta, page_size), (B, pool_rows, pool_width, n_map)


def _bool_arg(name, value):
    if type(value) is not bool:
        raise ValueError(f"{name} must be a bool, got {type(value).__name__}")
    return value


def normal_decode_set_metadata(
    cache_seqlens_int32,
    cu_seqlens_k,
    page_table,
    req_to_token,
    req_pool_indices,
    strided_indices,
    max_seq_pages,
    seq_lens,
    seq_len_delta,
    page_size,
    swa_page_table=None,
    token_to_kv_pool=None,
    full_to_swa_index_mapping=None,
    skip_page_table=False,
    full_v2p=None,
    swa_v2p=None,
    zero_tail=False,
    kernel_page_multiplier=1,
):
    """Fill the decode metadata in place (see the module docstring). One kernel launch.

    0.5.14's positional call, plus SGLang 0.5.23's keyword arguments and 0.5.17's
    ``kernel_page_multiplier`` (an int >= 1). ``strided_indices`` is
    accepted for SGLang compatibility and ignored. The SWA mapping is ``full_to_swa_index_mapping``
    (0.5.23) or, without it, ``token_to_kv_pool.full_to_swa_index_mapping`` (any object with
    that tensor); ``swa_v2p`` replaces it for the unified SWA pool (giving both raises). SWA is
    used only when ``swa_page_table`` and one of them are given. Raises ``ValueError`` on
    arguments outside the contract that can be seen without reading tensor values.
    """
    # Host cost matters here (SGLang calls this once per decode step, and the launch is most
    # of it): common arguments take one fast check, anything else the full one; unit row
    # strides take the kernel form with fewer arguments; the kernels are launched with .run
    # (what kernel[grid](...) calls, without the extra call).
    if type(skip_page_table) is not bool or type(zero_tail) is not bool:
        _bool_arg("skip_page_table", skip_page_table), _bool_arg("zero_tail", zero_tail)
    page_mult = kernel_page_multiplier
    if type(page_mult) is not int:
        page_mult = _int_arg("kernel_page_multiplier", page_mult)
    if page_mult < 1:
        raise ValueError(f"kernel_page_multiplier must be >= 1, got {page_mult}")
    swa_map, swa_mode, map_name = None, SWA_NONE, "full_to_swa_index_mapping"
    if swa_page_table is None:
        pass
    elif swa_v2p is not None:  # a pool may come along without a mapping (0.5.18's unified pool)
        if full_to_swa_index_mapping is not None or getattr(token_to_kv_pool, "full_to_swa_index_mapping",
                                                            None) is not None:
            raise ValueError("swa_page_table takes exactly one SWA mapping: full_to_swa_index_mapping "
                             "(or token_to_kv_pool) or swa_v2p")
        swa_map, swa_mode, map_name = swa_v2p, SWA_V2P, "swa_v2p"
    elif full_to_swa_index_mapping is not None:
        swa_map, swa_mode = full_to_swa_index_mapping, SWA_MAPPING
    elif token_to_kv_pool is not None:  # the full check names a pool without the mapping
        swa_map, swa_mode = getattr(token_to_kv_pool, "full_to_swa_index_mapping", None), SWA_MAPPING
        map_name = "token_to_kv_pool.full_to_swa_index_mapping"
    if swa_mode == SWA_NONE:
        swa_page_table = None
    P = max_seq_pages
    checked = _decode_fast_check(cache_seqlens_int32, cu_seqlens_k, page_table, req_to_token, req_pool_indices,
                                 P, seq_lens, seq_len_delta, page_size, swa_page_table, swa_map)
    if checked is None:
        (P, seq_len_delta, page_size), checked = _decode_full_check(
            cache_seqlens_int32, cu_seqlens_k, page_table, req_to_token, req_pool_indices,
            P, seq_lens, seq_len_delta, page_size, swa_page_table, swa_map, map_name)
    B, pool_rows, pool_width, n_map = checked
    n_full_v2p = None
    if full_v2p is not None:
        n_full_v2p = _tensor_arg("full_v2p", full_v2p, 1, _INDEX, cache_seqlens_int32.device)[0]

    # Columns whose token c * page_size lies inside req_to_token; the rest are never touched.
    # With nothing to gather (or skip_page_table) the grid is the one program that writes the sums.
    if skip_page_table or not B:
        n_cols = 0
    elif page_size == 1:
        n_cols = P if P < pool_width else pool_width
    else:
        n_cols = min(P, -(-pool_width // page_size))
    (sl_s,), (rpi_s,), (rtt_s0, rtt_s1) = seq_lens.stride(), req_pool_indices.stride(), req_to_token.stride()
    (cs_s,), (cu_s,), (pt_s0, pt_s1) = (cache_seqlens_int32.stride(), cu_seqlens_k.stride(),
                                        page_table.stride())
    unit = sl_s == 1 and rpi_s == 1 and rtt_s1 == 1 and cs_s == 1 and cu_s == 1 and pt_s1 == 1

    if page_size == 1 and swa_page_table is None and full_v2p is None:
        grid = (1 + B, -(-n_cols // PS1_BLOCK_COLS)) if n_cols else (1, 1)
        if unit:
            _decode_metadata_ps1_kernel.run(
                seq_lens, req_pool_indices, req_to_token, rtt_s0, pool_rows,
                cache_seqlens_int32, cu_seqlens_k, page_table, pt_s0,
                B, n_cols, seq_len_delta, page_mult, zero_tail,
                grid=grid, warmup=False, num_warps=PS1_NUM_WARPS)
        else:
            _decode_metadata_ps1_strided_kernel.run(
                seq_lens, sl_s, req_pool_indices, rpi_s, req_to_token, rtt_s0, rtt_s1, pool_rows,
                cache_seqlens_int32, cs_s, cu_seqlens_k, cu_s, page_table, pt_s0, pt_s1,
                B, n_cols, seq_len_delta, page_mult, zero_tail,
                grid=grid, warmup=False, num_warps=PS1_NUM_WARPS)
        return

    if swa_mode != SWA_NONE:
        (swa_s0, swa_s1), (map_s,) = swa_page_table.stride(), swa_map.stride()
        unit = unit and swa_s1 == 1 and map_s == 1
    else:  # unused (SWA_MODE is a compile-time 0); None binds as a constant, no pointer to pass
        swa_s0 = swa_s1 = map_s = n_map = None
    v2p_s = None
    if full_v2p is not None:
        (v2p_s,) = full_v2p.stride()
        unit = unit and v2p_s == 1
    grid = (1 + B, -(-n_cols // GENERAL_BLOCK_COLS)) if n_cols else (1, 1)
    shift = page_size.bit_length() - 1
    if unit:
        _decode_metadata_general_kernel.run(
            seq_lens, req_pool_indices, req_to_token, rtt_s0, pool_rows,
            cache_seqlens_int32, cu_seqlens_k, page_table, pt_s0,
            swa_page_table, swa_s0, swa_map, n_map, full_v2p, n_full_v2p,
            B, n_cols, seq_len_delta, page_mult, shift, swa_mode, zero_tail,
            grid=grid, warmup=False, num_warps=GENERAL_NUM_WARPS)
    else:
        _decode_metadata_general_strided_kernel.run(
            seq_lens, sl_s, req_pool_indices, rpi_s, req_to_token, rtt_s0, rtt_s1, pool_rows,
            cache_seqlens_int32, cs_s, cu_seqlens_k, cu_s, page_table, pt_s0, pt_s1,
            swa_page_table, swa_s0, swa_s1, swa_map, map_s, n_map, full_v2p, v2p_s, n_full_v2p,
            B, n_cols, seq_len_delta, page_mult, shift, swa_mode, zero_tail,
            grid=grid, warmup=False, num_warps=GENERAL_NUM_WARPS)
