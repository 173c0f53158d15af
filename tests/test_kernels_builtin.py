"""Hardening tests for kvfuzz's own kernels (``kvfuzz.kernels``, the ``builtin`` target).

Runs compiled on CUDA when a GPU is present, else on the CPU under Triton's interpreter
(``TRITON_INTERPRET`` must be set before the kernels are defined, hence before the import).
Every tensor a kernel sees lives in the middle of a larger buffer filled with a canary, so a
stray read-modify-write or an out-of-bounds store shows up as a changed canary. Expected
values come from small pure-Python references written here from the ops' contracts (``kvfuzz/ops/<op>/contract.py``).
"""

import inspect
import os

import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from kvfuzz.kernels import (  # noqa: E402
    get_num_kv_splits,
    get_num_kv_splits_triton,
    normal_decode_set_metadata,
    prepare_swa_spec_page_table_triton,
    sglang_max_num_seq,
)
from kvfuzz.kernels import decode_metadata as decode_module  # noqa: E402
from kvfuzz.kernels import num_kv_splits as splits_module  # noqa: E402
from kvfuzz.kernels import swa_spec_page_table as spec_module  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
if DEVICE == "cpu" and "Interpreted" not in type(decode_module._decode_metadata_ps1_kernel).__name__:
    pytest.skip("kvfuzz.kernels was imported before TRITON_INTERPRET=1 was set; run this file "
                "on its own or set TRITON_INTERPRET=1 in the environment", allow_module_level=True)
# The interpreter's own scalar handling warns; nothing to do with the kernels.
pytestmark = pytest.mark.filterwarnings("ignore:Conversion of an array with ndim > 0:DeprecationWarning")
CANARY = -777
GUARD = 37  # canary cells on each side of every view


# --------------------------------------------------------------------------- placement


def place(values, layout="contig"):
    """Copy ``values`` into a view of ``layout`` in the middle of a canary-filled buffer.

    layouts: contig; transposed (2-D: column-major); step (every other / third element);
    zero (stride 0 on dim 0: ``values`` must be equal along it).
    """
    values = torch.as_tensor(values)
    shape = tuple(values.shape)
    if layout == "contig":
        strides = torch.empty(shape).stride()
    elif layout == "transposed":
        assert len(shape) == 2
        strides = (1, shape[0])
    elif layout == "step":
        strides = (3,) if len(shape) == 1 else (2 * shape[1] + 5, 2)
    elif layout == "zero":
        assert bool((values == values[:1]).all())
        strides = (0,) + torch.empty(shape[1:]).stride()
    else:
        raise AssertionError(layout)
    extent = 1 + sum((n - 1) * s for n, s in zip(shape, strides)) if all(shape) else 0
    backing = torch.full((2 * GUARD + extent,), CANARY, dtype=values.dtype, device=DEVICE)
    view = backing.as_strided(shape, strides, GUARD)
    if layout == "zero":
        backing.as_strided(shape[1:], strides[1:], GUARD).copy_(values[0])
    else:
        view.copy_(values)
    return view, backing


def outside(view, backing):
    """The cells of ``backing`` that ``view`` does not cover."""
    idx = torch.arange(backing.numel(), device=backing.device)
    covered = torch.zeros(backing.numel(), dtype=torch.bool, device=backing.device)
    covered[idx.as_strided(view.shape, view.stride(), view.storage_offset()).flatten()] = True
    return backing[~covered]


def assert_canaries(**placed):
    for name, (view, backing) in placed.items():
        out = outside(view, backing)
        assert bool((out == CANARY).all()), f"{name}: a cell outside the view changed"


# --------------------------------------------------------------------------- references


def floordiv_i32(x, d):
    """Python floor division, wrapped to int32 like a store into an int32 tensor."""
    return int(np.array(x // d, dtype=np.int64).astype(np.int32))


def ref_decode(cs, cu, pt, rtt, rpi, P, seq_lens, delta, ps, swa=None, mapping=None):
    """Expected outputs (CPU tensors); cells outside the contract keep their old values."""
    cs, cu, pt = cs.cpu().clone(), cu.cpu().clone(), pt.cpu().clone()
    swa = None if swa is None else swa.cpu().clone()
    vals = (seq_lens.cpu().long() + delta).to(torch.int32)
    cs[:] = vals
    cu[0] = 0
    cu[1:] = torch.cumsum(vals.long(), 0).to(torch.int32)  # int64 -> int32 keeps the low bits
    table = rtt.cpu().tolist()
    maps = None if mapping is None else mapping.cpu().tolist()
    for i, r in enumerate(rpi.cpu().tolist()):
        if not 0 <= r < len(table):
            continue
        for c in range(P):
            if c * ps >= rtt.shape[1]:
                break
            tok = table[r][c * ps]
            pt[i, c] = floordiv_i32(tok, ps)
            if swa is not None and 0 <= tok < len(maps):
                swa[i, c] = floordiv_i32(maps[tok], ps)
    return cs, cu, pt, swa


def ref_spec(dst, a, b, la, lb, R):
    dst = dst.cpu().clone()
    A, Bt = a.cpu().tolist(), b.cpu().tolist()
    la, lb = la.cpu().tolist(), lb.cpu().tolist()
    for m in range(len(lb)):
        x, y = la[m // R], lb[m]
        for c in range(min(max(x + y, 0), dst.shape[1])):
            if c < x:
                if c < a.shape[1]:
                    dst[m, c] = A[m // R][c]
            elif 0 <= c - x < b.shape[1]:
                dst[m, c] = Bt[m][c - x]
    return dst


def cdiv(a, b):
    return -(-a // b)


def c_cdiv(a, b):
    """(a + b - 1) / b with C's truncating division, as the kernel computes it (b > 0)."""
    n = a + b - 1
    return n // b if n >= 0 else -(-n // b)


def ref_splits(seq_lens, num_group, num_head, num_kv_head, max_kv_splits, cores, row_cdiv=cdiv, e=None):
    live = [x for x in seq_lens if x >= 1]
    mx, mn = (max(live), min(live)) if live else (1, 1)
    if mx * 8 < mn * 10:
        mn = mx
    c1 = cdiv(mx, min(cdiv(mx, mn), max_kv_splits))
    if e is None:
        ext = np.float32(mx) / np.float32(64.0)
        e = int(np.float32(cores) * max(np.log2(ext), np.float32(1.0)))
    g = num_head // num_kv_head
    tg = len(seq_lens) * num_group * (num_head if g == 1 else cdiv(num_head, min(16, g)))
    c2 = cdiv(mx, min(cdiv(e, tg), max_kv_splits))
    return [max(row_cdiv(x, c1), row_cdiv(x, c2)) for x in seq_lens for _ in range(num_group)]


def ref_splits_accepted(seq_lens, num_group, num_head, num_kv_head, max_kv_splits, cores, row_cdiv=cdiv):
    """Every right answer: a GPU's log2 is not correctly rounded, so where the float32 step
    sits on an integer boundary both sides are right (the bounds come from kvfuzz's oracle)."""
    from kvfuzz.ops.num_kv_splits.oracle import ext_core_count_range

    live = [x for x in seq_lens if x >= 1]
    _, lo, hi = ext_core_count_range(max(live) if live else 1, cores)
    return [ref_splits(seq_lens, num_group, num_head, num_kv_head, max_kv_splits, cores, row_cdiv, e)
            for e in range(lo, hi + 1)]


# --------------------------------------------------------------------------- decode fixtures


class Pool:
    """Duck-typed stand-in for SGLang's SWAKVPool."""

    def __init__(self, mapping):
        self.full_to_swa_index_mapping = mapping


def decode_inputs(B=3, W=300, rows=5, L=700, ps=16, P=None, idx_dtype=torch.int64,
                  rtt_dtype=torch.int32, seed=0, n_map=5000):
    g = torch.Generator().manual_seed(seed)
    seq_lens = torch.randint(1, L, (B,), generator=g).to(idx_dtype)
    rpi = torch.randperm(rows, generator=g)[:B].to(idx_dtype)
    rtt = torch.randint(0, n_map, (rows, L), generator=g).to(rtt_dtype)
    mapping = torch.randint(0, 100000, (n_map,), generator=g)
    if P is None:
        P = min(W, cdiv(int(seq_lens.max()) + 1, ps))
    return dict(seq_lens=seq_lens, rpi=rpi, rtt=rtt, mapping=mapping, P=P, W=W, B=B)


def run_decode(inp, ps, swa, delta=1, layouts=None):
    """Place everything (with ``layouts[name]``), run the kernel, return placed tensors."""
    layouts = layouts or {}
    B, W = inp["B"], inp["W"]
    t = {
        "cs": place(torch.full((B,), -5, dtype=torch.int32), layouts.get("cs", "contig")),
        "cu": place(torch.full((B + 1,), -5, dtype=torch.int32), layouts.get("cu", "contig")),
        "pt": place(torch.full((B, W), -5, dtype=torch.int32), layouts.get("pt", "contig")),
        "swa": place(torch.full((B, W), -6, dtype=torch.int32), layouts.get("swa", "contig")),
        "rtt": place(inp["rtt"], layouts.get("rtt", "contig")),
        "rpi": place(inp["rpi"], layouts.get("rpi", "contig")),
        "seq_lens": place(inp["seq_lens"], layouts.get("seq_lens", "contig")),
        "mapping": place(inp["mapping"], layouts.get("mapping", "contig")),
    }
    before = {k: v[0].cpu().clone() for k, v in t.items()}
    normal_decode_set_metadata(
        t["cs"][0], t["cu"][0], t["pt"][0], t["rtt"][0], t["rpi"][0], None, inp["P"],
        t["seq_lens"][0], delta, ps,
        t["swa"][0] if swa else None, Pool(t["mapping"][0]) if swa else None)
    return t, before


def check_decode(t, before, inp, ps, swa, delta=1):
    cs, cu, pt, swa_exp = ref_decode(before["cs"], before["cu"], before["pt"], before["rtt"],
                                     before["rpi"], inp["P"], before["seq_lens"], delta, ps,
                                     before["swa"] if swa else None, before["mapping"])
    assert torch.equal(t["cs"][0].cpu(), cs)
    assert torch.equal(t["cu"][0].cpu(), cu)
    assert torch.equal(t["pt"][0].cpu(), pt)
    if swa:
        assert torch.equal(t["swa"][0].cpu(), swa_exp)
    else:
        assert torch.equal(t["swa"][0].cpu(), before["swa"])
    for name in ("rtt", "rpi", "seq_lens", "mapping"):  # inputs are never written
        assert torch.equal(t[name][0].cpu(), before[name]), name
    assert_canaries(**t)


# --------------------------------------------------------------------------- decode: values


@pytest.mark.parametrize("ps, swa", [(1, False), (1, True), (2, False), (16, False), (16, True), (64, True)])
def test_decode_matches_reference(ps, swa):
    inp = decode_inputs(ps=ps, seed=ps)
    t, before = run_decode(inp, ps, swa)
    check_decode(t, before, inp, ps, swa)


@pytest.mark.parametrize("idx_dtype, rtt_dtype", [(torch.int32, torch.int32), (torch.int64, torch.int64),
                                                  (torch.int32, torch.int64)])
@pytest.mark.parametrize("ps, swa", [(1, False), (16, True)])
def test_decode_int_dtypes(idx_dtype, rtt_dtype, ps, swa):
    inp = decode_inputs(ps=ps, idx_dtype=idx_dtype, rtt_dtype=rtt_dtype, seed=7)
    if rtt_dtype == torch.int64:  # token ids past int32: page ids are floor(tok / ps), wrapped
        inp["rtt"][0, :64] = 2**33 + 37
    inp["rpi"][0] = 0
    t, before = run_decode(inp, ps, swa, delta=3)
    check_decode(t, before, inp, ps, swa, delta=3)


@pytest.mark.parametrize("delta", [0, 1, 2, -1, 2**31 + 5])
def test_decode_seq_len_delta(delta):
    inp = decode_inputs(B=4, ps=1, P=3, idx_dtype=torch.int32)
    t, before = run_decode(inp, 1, False, delta=delta)
    expect = (inp["seq_lens"].long() + delta).to(torch.int32)
    assert torch.equal(t["cs"][0].cpu(), expect)
    check_decode(t, before, inp, 1, False, delta=delta)


def test_decode_negative_tokens_floor():
    inp = decode_inputs(B=2, ps=16, P=4, W=6)
    inp["rtt"][:, :] = -17  # floor(-17 / 16) = -2; no SWA mapping entry: swa cells untouched
    t, before = run_decode(inp, 16, True)
    assert t["pt"][0][:, :4].cpu().eq(-2).all()
    assert t["swa"][0].cpu().eq(-6).all()
    check_decode(t, before, inp, 16, True)


# --------------------------------------------------------------------------- decode: edges


@pytest.mark.parametrize("ps, swa", [(1, False), (16, True)])
def test_decode_p0_writes_only_the_sums(ps, swa):
    inp = decode_inputs(B=3, ps=ps, P=0)
    inp["rpi"][:] = torch.tensor([-1, 99, 2**40])  # would be out of range, must not matter
    t, before = run_decode(inp, ps, swa)
    assert torch.equal(t["pt"][0].cpu(), before["pt"])
    assert torch.equal(t["swa"][0].cpu(), before["swa"])
    assert t["cu"][0].cpu().tolist() == [0] + torch.cumsum(inp["seq_lens"] + 1, 0).tolist()
    check_decode(t, before, inp, ps, swa)


def test_decode_empty_batch():
    inp = decode_inputs(B=0, ps=1, P=5)
    t, before = run_decode(inp, 1, False)
    assert t["cu"][0].cpu().tolist() == [0]
    check_decode(t, before, inp, 1, False)


@pytest.mark.parametrize("ps", [1, 16])
def test_decode_prefix_sum_longer_than_one_block(ps):
    B = 2 * decode_module.PS1_SUM_BLOCK + 77  # 3 (ps1) or 5 (general) steps of the prefix sum
    g = torch.Generator().manual_seed(3)
    inp = dict(seq_lens=torch.randint(0, 5000, (B,), generator=g), rpi=torch.zeros(B, dtype=torch.int64),
               rtt=torch.zeros(1, 4, dtype=torch.int32), mapping=torch.zeros(1, dtype=torch.int64),
               P=0, W=1, B=B)
    t, before = run_decode(inp, ps, False)
    assert t["cu"][0].cpu().tolist() == [0] + torch.cumsum(inp["seq_lens"] + 1, 0).tolist()
    check_decode(t, before, inp, ps, False)


def test_decode_int32_sum_wraps():
    inp = decode_inputs(B=3, ps=1, P=1)
    inp["seq_lens"][:] = torch.tensor([2**31 - 10, 100, 2**31 - 1])
    t, before = run_decode(inp, 1, False, delta=0)
    check_decode(t, before, inp, 1, False, delta=0)  # reference wraps mod 2**32


@pytest.mark.parametrize("ps, swa", [(1, False), (16, False), (16, True)])
def test_decode_out_of_range_values_stay_inside(ps, swa):
    # rows: pool index -1, past the pool, 2**40, and one valid; P runs past req_to_token's width
    inp = decode_inputs(B=4, W=80, rows=3, L=50 * ps + 3, ps=ps, P=80, n_map=64)
    inp["rpi"] = torch.tensor([-1, 3, 2**40, 1])
    inp["rtt"][1, ::ps][:8] = torch.tensor([-1, 64, 63, 0, 2**31 - 1, -2**31, 5, 64 * 7])
    t, before = run_decode(inp, ps, swa)
    pt = t["pt"][0].cpu()
    assert pt[:3].eq(-5).all(), "rows with an out-of-range pool index must be untouched"
    n_cols = cdiv(inp["rtt"].shape[1], ps)
    assert pt[3, n_cols:].eq(-5).all() and not pt[3, :n_cols].eq(-5).any()
    if swa:
        s = t["swa"][0].cpu()
        # token ids -1, 64, 2**31-1, -2**31 and 448 are outside the 64-entry mapping
        assert s[3, [0, 1, 4, 5, 7]].eq(-6).all()
        assert s[3, [2, 3, 6]].tolist() == [floordiv_i32(int(inp["mapping"][k]), ps) for k in (63, 0, 5)]
    check_decode(t, before, inp, ps, swa)


@pytest.mark.parametrize("ps, swa", [(1, False), (4, True)])
@pytest.mark.parametrize("which", ["transposed", "step"])
def test_decode_strided_outputs(ps, swa, which):
    inp = decode_inputs(B=3, W=40, ps=ps, P=33, seed=11)
    ref, ref_before = run_decode(inp, ps, swa)
    layouts = {"pt": which, "swa": "step" if which == "transposed" else "transposed",
               "cs": "step", "cu": "step"}
    t, before = run_decode(inp, ps, swa, layouts=layouts)
    for name in ("cs", "cu", "pt", "swa"):  # same cells as the contiguous run
        assert torch.equal(t[name][0].cpu(), ref[name][0].cpu()), name
    check_decode(t, before, inp, ps, swa)


@pytest.mark.parametrize("ps, swa", [(1, False), (16, True)])
def test_decode_strided_inputs(ps, swa):
    inp = decode_inputs(B=3, W=40, rows=4, L=30 * ps, ps=ps, P=30, seed=5)
    layouts = {"rtt": "transposed", "seq_lens": "step", "rpi": "step", "mapping": "step"}
    t, before = run_decode(inp, ps, swa, layouts=layouts)
    check_decode(t, before, inp, ps, swa)


def test_decode_zero_stride_pool_indices():
    inp = decode_inputs(B=3, W=20, ps=1, P=20)
    inp["rpi"][:] = 2  # every row reads pool row 2 through a stride-0 view
    t, before = run_decode(inp, 1, False, layouts={"rpi": "zero"})
    assert t["rpi"][0].stride() == (0,)
    check_decode(t, before, inp, 1, False)


def test_decode_deterministic():
    inp = decode_inputs(B=3, ps=16, seed=9)
    first, _ = run_decode(inp, 16, True)
    second, _ = run_decode(inp, 16, True)
    for name in ("cs", "cu", "pt", "swa"):
        assert torch.equal(first[name][1].cpu(), second[name][1].cpu())


def test_decode_swa_needs_both_arguments():
    inp = decode_inputs(B=2, ps=1, P=5)
    t, before = run_decode(inp, 1, False)
    pool = Pool(torch.zeros(10, dtype=torch.int64, device=DEVICE))
    normal_decode_set_metadata(t["cs"][0], t["cu"][0], t["pt"][0], t["rtt"][0], t["rpi"][0], None,
                               5, t["seq_lens"][0], 1, 1, None, pool)  # pool without a table: no SWA
    check_decode(t, before, inp, 1, False)


# --------------------------------------------------------------------------- decode: refusals


def decode_args(**over):
    """Valid arguments (B=2, W=8) on DEVICE, with overrides."""
    i32 = dict(dtype=torch.int32, device=DEVICE)
    args = dict(
        cache_seqlens_int32=torch.zeros(2, **i32), cu_seqlens_k=torch.zeros(3, **i32),
        page_table=torch.zeros(2, 8, **i32), req_to_token=torch.zeros(4, 64, **i32),
        req_pool_indices=torch.zeros(2, dtype=torch.int64, device=DEVICE), strided_indices=None,
        max_seq_pages=4, seq_lens=torch.ones(2, dtype=torch.int64, device=DEVICE), seq_len_delta=0,
        page_size=1, swa_page_table=torch.zeros(2, 8, **i32),
        token_to_kv_pool=Pool(torch.zeros(64, dtype=torch.int64, device=DEVICE)))
    args.update(over)
    return args


@pytest.mark.parametrize("page_size", [0, -4, 3, 48, 100])
def test_decode_rejects_page_size(page_size):
    with pytest.raises(ValueError, match=f"page_size must be a power of two, got {page_size}"):
        normal_decode_set_metadata(**decode_args(page_size=page_size))


I32, I64 = dict(dtype=torch.int32), dict(dtype=torch.int64)
META = dict(dtype=torch.int64, device="meta")

DECODE_REFUSALS = [
    (dict(page_size=16.0), r"page_size must be a Python int"),
    (dict(page_size=True), r"page_size must be a Python int"),
    (dict(max_seq_pages=2.5), r"max_seq_pages must be a Python int"),
    (dict(max_seq_pages=torch.tensor(4)), r"max_seq_pages must be a Python int"),
    (dict(max_seq_pages=-1), r"max_seq_pages must be >= 0"),
    (dict(max_seq_pages=9), r"max_seq_pages = 9 exceeds page_table width 8"),
    (dict(seq_len_delta=0.5), r"seq_len_delta must be a Python int"),
    (dict(cache_seqlens_int32=torch.zeros(2, **I64)), r"cache_seqlens_int32 must be int32, got int64"),
    (dict(cache_seqlens_int32=torch.zeros(2, 1, **I32)), r"cache_seqlens_int32 must be 1-D"),
    (dict(cu_seqlens_k=torch.zeros(2, **I32)), r"cu_seqlens_k must have B \+ 1 = 3 elements, got 2"),
    (dict(cu_seqlens_k=torch.zeros(3, **I64)), r"cu_seqlens_k must be int32"),
    (dict(page_table=torch.zeros(3, 8, **I32)), r"page_table must have B = 2 rows, got 3"),
    (dict(page_table=torch.zeros(2, 8, **I64)), r"page_table must be int32"),
    (dict(page_table=torch.zeros(16, **I32)), r"page_table must be 2-D"),
    (dict(req_to_token=torch.zeros(4, 64)), r"req_to_token must be int32 or int64, got float32"),
    (dict(req_to_token=torch.zeros(64, **I32)), r"req_to_token must be 2-D"),
    (dict(req_pool_indices=torch.zeros(3, **I64)), r"req_pool_indices must have B = 2 elements, got 3"),
    (dict(req_pool_indices=torch.zeros(2, dtype=torch.int16)), r"req_pool_indices must be int32 or int64"),
    (dict(seq_lens=torch.zeros(1, **I64)), r"seq_lens must have B = 2 elements, got 1"),
    (dict(seq_lens=torch.zeros(2)), r"seq_lens must be int32 or int64, got float32"),
    (dict(seq_lens=[1, 2]), r"seq_lens must be a torch.Tensor"),
    (dict(swa_page_table=torch.zeros(2, 8, **I64)), r"swa_page_table must be int32"),
    (dict(swa_page_table=torch.zeros(1, 8, **I32)), r"swa_page_table must have B = 2 rows, got 1"),
    (dict(swa_page_table=torch.zeros(2, 3, **I32)), r"max_seq_pages = 4 exceeds swa_page_table width 3"),
    (dict(token_to_kv_pool=object()), r"token_to_kv_pool must have a full_to_swa_index_mapping"),
    (dict(token_to_kv_pool=Pool(torch.zeros(8))), r"full_to_swa_index_mapping must be int32 or int64"),
    (dict(token_to_kv_pool=Pool(torch.zeros(2, 8, **I64))), r"full_to_swa_index_mapping must be 1-D"),
    (dict(seq_lens=torch.zeros(2, **META)), r"seq_lens is on meta"),
    (dict(req_to_token=torch.zeros(4, 64, **META)), r"req_to_token is on meta"),
    (dict(token_to_kv_pool=Pool(torch.zeros(8, **META))), r"full_to_swa_index_mapping is on meta"),
]


@pytest.mark.parametrize("over, match", DECODE_REFUSALS, ids=[m for _, m in DECODE_REFUSALS])
def test_decode_rejects(over, match):
    over = {k: v.to(DEVICE) if isinstance(v, torch.Tensor) and v.device.type == "cpu" and k != "max_seq_pages"
            else v for k, v in over.items()}
    args = decode_args(**over)
    before = args["page_table"].clone()
    with pytest.raises(ValueError, match=match):
        normal_decode_set_metadata(**args)
    assert torch.equal(args["page_table"], before)
    # the fast check (common arguments) declines everything the full check refuses
    assert decode_module._decode_fast_check(
        args["cache_seqlens_int32"], args["cu_seqlens_k"], args["page_table"], args["req_to_token"],
        args["req_pool_indices"], args["max_seq_pages"], args["seq_lens"], args["seq_len_delta"],
        args["page_size"], args["swa_page_table"],
        getattr(args["token_to_kv_pool"], "full_to_swa_index_mapping", None)) is None


@pytest.mark.parametrize("ps, swa", [(1, False), (16, True)])
def test_decode_fast_and_full_checks_agree(ps, swa):
    args = decode_args(page_size=ps)
    if not swa:
        args["swa_page_table"] = args["token_to_kv_pool"] = None
    names = ["cache_seqlens_int32", "cu_seqlens_k", "page_table", "req_to_token", "req_pool_indices",
             "max_seq_pages", "seq_lens", "seq_len_delta", "page_size", "swa_page_table"]
    mapping = args["token_to_kv_pool"].full_to_swa_index_mapping if swa else None
    fast = decode_module._decode_fast_check(*[args[n] for n in names], mapping)
    full = decode_module._decode_full_check(*[args[n] for n in names], mapping)
    assert fast is not None and full == ((4, 0, ps), fast)


@pytest.mark.parametrize("ps, swa", [(1, False), (16, True)])
def test_decode_int_like_scalars(ps, swa):
    """Scalars with __index__ (NumPy integers) take the full check: same results as ints."""
    inp = decode_inputs(B=3, W=40, ps=ps, P=30, seed=13)
    inp["P"] = np.int64(inp["P"])
    t, before = run_decode(inp, np.int64(ps), swa, delta=np.int32(2))
    check_decode(t, before, inp, ps, swa, delta=2)


def test_decode_tensor_subclass():
    """A torch.Tensor subclass takes the full check: same results as a plain tensor."""
    inp = decode_inputs(B=3, W=40, ps=16, P=30, seed=17)
    ref, _ = run_decode(inp, 16, True)
    t, before = run_decode(inp, 16, True)
    for name in ("cs", "cu", "pt", "swa"):  # back to the state before the call
        t[name][0].copy_(before[name])
    params = {k: torch.nn.Parameter(t[k][0], requires_grad=False) for k in ("cs", "pt", "rtt")}
    assert type(params["pt"]) is not torch.Tensor
    normal_decode_set_metadata(params["cs"], t["cu"][0], params["pt"], params["rtt"], t["rpi"][0], None,
                               inp["P"], t["seq_lens"][0], 1, 16, t["swa"][0], Pool(t["mapping"][0]))
    for name in ("cs", "cu", "pt", "swa"):
        assert torch.equal(t[name][0].cpu(), ref[name][0].cpu()), name


class LaunchRecorder:
    """Stands in for a jitted kernel: records launches, ``kernel[grid](...)`` or (what that
    calls) ``kernel.run(..., grid=grid, warmup=False)``."""

    def __init__(self):
        self.launches = []

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.launches.append((grid, args, kwargs))

    def run(self, *args, grid, warmup, **kwargs):
        assert warmup is False
        self.launches.append((grid, args, kwargs))


DECODE_KERNELS = ["_decode_metadata_ps1_kernel", "_decode_metadata_ps1_strided_kernel",
                  "_decode_metadata_general_kernel", "_decode_metadata_general_strided_kernel"]


def test_decode_host_side_reads_no_values(monkeypatch):
    """Validation and launch read metadata only (meta tensors have no values to read), and
    each call is exactly one launch: CUDA-graph capturable. Unit row strides take the
    kernel form without stride arguments, any other stride the strided form."""
    rec = {name: LaunchRecorder() for name in DECODE_KERNELS}
    for name, recorder in rec.items():
        monkeypatch.setattr(decode_module, name, recorder)
    ps1, ps1_strided, general, general_strided = rec.values()
    meta32 = dict(dtype=torch.int32, device="meta")
    args = dict(cache_seqlens_int32=torch.empty(5, **meta32), cu_seqlens_k=torch.empty(6, **meta32),
                page_table=torch.empty(5, 600, **meta32), req_to_token=torch.empty(9, 9000, **meta32),
                req_pool_indices=torch.empty(5, **META), strided_indices=None, max_seq_pages=600,
                seq_lens=torch.empty(5, **META), seq_len_delta=2)
    normal_decode_set_metadata(**args, page_size=1)
    assert [grid for grid, _, _ in ps1.launches] == [(6, 3)]
    pool = Pool(torch.empty(100, **META))
    normal_decode_set_metadata(**args, page_size=16, swa_page_table=torch.empty(5, 600, **meta32),
                               token_to_kv_pool=pool)
    assert [grid for grid, _, _ in general.launches] == [(6, 5)]  # cdiv(9000, 16) = 563 -> 5 blocks
    normal_decode_set_metadata(**dict(args, max_seq_pages=0), page_size=16)
    assert general.launches[-1][0] == (1, 1)
    assert len(ps1.launches) == 1 and len(general.launches) == 2
    assert not ps1_strided.launches and not general_strided.launches

    # the same calls with one strided tensor each: the strided forms, same grids
    transposed = torch.empty(600, 5, **meta32).t()
    normal_decode_set_metadata(**dict(args, page_table=transposed), page_size=1)
    normal_decode_set_metadata(**dict(args, seq_lens=torch.empty(10, **META)[::2]), page_size=1)
    assert [grid for grid, _, _ in ps1_strided.launches] == [(6, 3), (6, 3)]
    normal_decode_set_metadata(**args, page_size=16, swa_page_table=transposed, token_to_kv_pool=pool)
    normal_decode_set_metadata(**args, page_size=16, swa_page_table=torch.empty(5, 600, **meta32),
                               token_to_kv_pool=Pool(torch.empty(200, **META)[::2]))
    normal_decode_set_metadata(**dict(args, max_seq_pages=0, cu_seqlens_k=torch.empty(12, **meta32)[::2]),
                               page_size=16)
    assert [grid for grid, _, _ in general_strided.launches] == [(6, 5), (6, 5), (1, 1)]
    assert len(ps1.launches) == 1 and len(general.launches) == 2


def test_decode_seq_len_delta_is_a_runtime_scalar():
    """Not a constexpr and not specialised (1 would otherwise compile as a constant)."""
    for kernel in (getattr(decode_module, name) for name in DECODE_KERNELS):
        param = inspect.signature(kernel.fn).parameters["seq_len_delta"]
        assert param.annotation is inspect.Parameter.empty
        # JITFunction keeps do_not_specialize as an attribute, the interpreter in its kwargs
        dns = getattr(kernel, "do_not_specialize", None) or kernel.kwargs["do_not_specialize"]
        assert "seq_len_delta" in dns


# --------------------------------------------------------------------------- swa spec page table


def spec_inputs(bs, R, width_a=600, width_b=None, seed=0):
    g = torch.Generator().manual_seed(seed)
    width_b = R if width_b is None else width_b
    a = torch.randint(0, 10**6, (bs, width_a), generator=g, dtype=torch.int32)
    b = torch.randint(10**6, 2 * 10**6, (bs * R, width_b), generator=g, dtype=torch.int32)
    return a, b


def run_spec(a, b, la, lb, R, width, layouts=None, extra_rows=1):
    layouts = layouts or {}
    rows = lb.numel() + extra_rows
    t = {
        "dst": place(torch.full((rows, width), -5, dtype=torch.int32), layouts.get("dst", "contig")),
        "a": place(a, layouts.get("a", "contig")),
        "b": place(b, layouts.get("b", "contig")),
        "la": place(la, layouts.get("la", "contig")),
        "lb": place(lb, layouts.get("lb", "contig")),
    }
    before = {k: v[0].cpu().clone() for k, v in t.items()}
    prepare_swa_spec_page_table_triton(t["dst"][0], t["a"][0], t["b"][0], t["la"][0], t["lb"][0], R)
    expect = ref_spec(before["dst"], a, b, la, lb, R)
    assert torch.equal(t["dst"][0].cpu(), expect)
    for name in ("a", "b", "la", "lb"):
        assert torch.equal(t[name][0].cpu(), before[name]), name
    assert_canaries(**t)
    return t


@pytest.mark.parametrize("R", [1, 3])
@pytest.mark.parametrize("la_values", [[0, 1, 255], [256, 257, 511], [512, 254, 600]])
def test_spec_block_edges(R, la_values):
    bs = len(la_values)
    a, b = spec_inputs(bs, R, seed=R)
    la = torch.tensor(la_values, dtype=torch.int32)
    lb = torch.tensor([(m % (R + 1)) for m in range(bs * R)], dtype=torch.int32)  # 0..R, empty B too
    t = run_spec(a, b, la, lb, R, width=600 + R)
    assert t["dst"][0][-1].cpu().eq(-5).all()  # rows >= bs * R untouched


def test_spec_exact_values():
    a = torch.arange(10, dtype=torch.int32).reshape(2, 5)
    b = torch.arange(100, 108, dtype=torch.int32).reshape(4, 2)
    la, lb = torch.tensor([3, 1]), torch.tensor([2, 0, 1, 2])
    t = run_spec(a, b, la, lb, 2, width=6)
    assert t["dst"][0].cpu().tolist() == [
        [0, 1, 2, 100, 101, -5], [0, 1, 2, -5, -5, -5], [5, 104, -5, -5, -5, -5],
        [5, 106, 107, -5, -5, -5], [-5] * 6]


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_spec_out_of_range_lengths_stay_inside(dtype):
    bs, R = 5, 2
    a, b = spec_inputs(bs, R, width_a=300, width_b=3)
    # la per request: negative, past A's width, A + B past dst's width, huge, normal
    la = torch.tensor([-7, 310, 298, 2**31 - 1, 100], dtype=dtype)
    lb = torch.tensor([5, 2, -3, 9, 1, 3, 3, 3, -1, 4], dtype=dtype)  # row m uses la[m // 2]
    if dtype == torch.int64:
        la[3] = 2**62
    t = run_spec(a, b, la, lb, R, width=300, extra_rows=2)
    dst, a, b = t["dst"][0].cpu(), a.tolist(), b.tolist()
    assert dst[0:2].eq(-5).all()  # la + lb <= 0: nothing to write
    assert dst[2].tolist() == a[1] and dst[3].tolist() == a[1]  # A clipped to its own width
    assert dst[4, 298] == b[4][0] and dst[4, 299] == -5  # la + lb = 299
    assert dst[5, 298:].tolist() == b[5][:2]  # la + lb = 301: B clipped at dst's width
    assert dst[6].tolist() == a[3] and dst[7].tolist() == a[3]
    assert dst[8, :99].tolist() == a[4][:99] and dst[8, 99:].eq(-5).all()  # lb = -1
    assert dst[9, 100:103].tolist() == b[9] and dst[9, 103:].eq(-5).all()  # lb = 4 > B's width 3
    assert dst[10:].eq(-5).all()


@pytest.mark.parametrize("layout", ["contig", "step"])
def test_spec_lengths_past_every_width(layout):
    """A narrower than dst, la past both: whole-A blocks past A's width, B past dst's width."""
    a, b = spec_inputs(2, 1, width_a=100, width_b=8)
    la, lb = torch.tensor([550, 597]), torch.tensor([2, 8])  # row 1: la + lb = 605 > 600
    t = run_spec(a, b, la, lb, 1, width=600, layouts={"dst": layout}, extra_rows=0)
    dst, a, b = t["dst"][0].cpu(), a.tolist(), b.tolist()
    assert dst[0, :100].tolist() == a[0] and dst[0, 100:550].eq(-5).all()
    assert dst[0, 550:552].tolist() == b[0][:2] and dst[0, 552:].eq(-5).all()
    assert dst[1, :100].tolist() == a[1] and dst[1, 100:597].eq(-5).all()
    assert dst[1, 597:].tolist() == b[1][:3]  # the last row: a store past 600 would hit canaries


@pytest.mark.parametrize("layouts", [
    {"dst": "transposed"}, {"dst": "step", "a": "transposed", "b": "step"},
    {"la": "step", "lb": "step", "a": "step", "b": "transposed"}])
def test_spec_strided(layouts):
    bs, R = 2, 3
    a, b = spec_inputs(bs, R, width_a=300)
    la, lb = torch.tensor([255, 260]), torch.tensor([0, 1, 3, 2, 3, 1])
    ref = run_spec(a, b, la, lb, R, width=310)
    t = run_spec(a, b, la, lb, R, width=310, layouts=layouts)
    assert torch.equal(t["dst"][0].cpu(), ref["dst"][0].cpu())


def test_spec_zero_stride_seq_len_a():
    a, b = spec_inputs(3, 2, width_a=20)
    t = run_spec(a, b, torch.tensor([7, 7, 7]), torch.tensor([1, 2, 0, 1, 2, 2]), 2, width=22,
                 layouts={"la": "zero"})
    assert t["la"][0].stride() == (0,)


SPEC_REFUSALS = [
    (dict(R=0), r"speculative_num_draft_tokens must be >= 1, got 0"),
    (dict(R=1.0), r"speculative_num_draft_tokens must be a Python int"),
    (dict(dst=torch.zeros(4, 8, **I64)), r"page_table_dst must be int32"),
    (dict(a=torch.zeros(2, 8, **I64)), r"page_table_a must be int32"),
    (dict(b=torch.zeros(4, 2)), r"page_table_b must be int32"),
    (dict(dst=torch.zeros(8, **I32)), r"page_table_dst must be 2-D"),
    (dict(la=torch.zeros(2, 1, **I32)), r"seq_len_a must be 1-D"),
    (dict(la=torch.zeros(2)), r"seq_len_a must be int32 or int64, got float32"),
    (dict(lb=torch.zeros(4, dtype=torch.int16)), r"seq_len_b must be int32 or int64"),
    (dict(lb=torch.zeros(5, **I32)), r"seq_len_b must have .* = 4 elements, got 5"),
    (dict(dst=torch.zeros(3, 8, **I32)), r"page_table_dst must have at least 4 rows, got 3"),
    (dict(a=torch.zeros(1, 8, **I32)), r"page_table_a must have at least 2 rows, got 1"),
    (dict(b=torch.zeros(3, 2, **I32)), r"page_table_b must have at least 4 rows, got 3"),
    (dict(lb=torch.zeros(4, **META)), r"seq_len_b is on meta"),
]


@pytest.mark.parametrize("over, match", SPEC_REFUSALS, ids=[m for _, m in SPEC_REFUSALS])
def test_spec_rejects(over, match):
    args = dict(dst=torch.zeros(4, 8, **I32), a=torch.zeros(2, 8, **I32), b=torch.zeros(4, 2, **I32),
                la=torch.ones(2, **I32), lb=torch.ones(4, **I32), R=2)
    args.update(over)
    args = {k: v.to(DEVICE) if isinstance(v, torch.Tensor) and v.device.type == "cpu" else v
            for k, v in args.items()}
    with pytest.raises(ValueError, match=match):
        prepare_swa_spec_page_table_triton(*args.values())
    assert spec_module._spec_fast_check(*args.values()) is None  # declined by the fast check too


def test_spec_fast_and_full_checks_agree():
    args = [torch.zeros(5, 8, **I32), torch.zeros(2, 9, **I32), torch.zeros(4, 2, **I32),
            torch.ones(2, **I64), torch.ones(4, **I32), 2]
    args = [v.to(DEVICE) if isinstance(v, torch.Tensor) else v for v in args]
    fast = spec_module._spec_fast_check(*args)
    assert fast == (2, 8, 9, 2) and spec_module._spec_full_check(*args) == (2, fast)


def test_spec_int_like_draft_tokens():
    a, b = spec_inputs(2, 3, width_a=300)
    la, lb = torch.tensor([255, 260]), torch.tensor([0, 1, 3, 2, 3, 1])
    ref = run_spec(a, b, la, lb, 3, width=310)
    t = run_spec(a, b, la, lb, np.int64(3), width=310)
    assert torch.equal(t["dst"][0].cpu(), ref["dst"][0].cpu())


# --------------------------------------------------------------------------- num_kv_splits


def run_splits(seq_lens, num_group=1, num_head=32, num_kv_head=8, max_kv_splits=8, cores=132,
               layouts=("contig", "contig"), bare_max_num_seq=None, dtype=torch.int64):
    n = len(seq_lens)
    out = place(torch.full((n * num_group + 3,), -5, dtype=torch.int32), layouts[0])
    sl = place(torch.tensor(seq_lens, dtype=dtype), layouts[1])
    if bare_max_num_seq is None:
        get_num_kv_splits(out[0], sl[0], n, num_group, num_head, num_kv_head, max_kv_splits, cores)
    else:
        get_num_kv_splits_triton[(1,)](out[0], sl[0], n, num_group, num_head, num_kv_head, max_kv_splits,
                                       cores, MAX_NUM_SEQ=bare_max_num_seq)
    got = out[0].cpu().tolist()
    assert got[n * num_group:] == [-5] * 3, "cells past num_seq * num_group must be untouched"
    assert_canaries(out=out, seq_lens=sl)
    return got[: n * num_group]


HAND_CASES = [
    # seq_lens [0, 5]: stats over [5] -> mx = mn = 5; c1 = 5; e = 132; g = 4, tg = 2*8 = 16,
    # s2 = min(cdiv(132, 16), 8) = 8, c2 = cdiv(5, 8) = 1 -> [max(0, 0), max(1, 5)]
    (dict(seq_lens=[0, 5]), [0, 5]),
    # all zero: mx = mn = 1, c1 = c2 = 1 -> every cell cdiv(0, 1) = 0
    (dict(seq_lens=[0, 0, 0], num_group=2), [0] * 6),
    # [4096, 0, 100], g = 1: mx 4096, mn 100; s1 = min(41, 8) = 8, c1 = 512;
    # e = 132 * log2(64) = 792; tg = 3 * 8 = 24; s2 = min(33, 8) = 8, c2 = 512 -> [8, 0, 1]
    (dict(seq_lens=[4096, 0, 100], num_head=8, num_kv_head=8), [8, 0, 1]),
    # [1000, 300]: s1 = min(4, 8) = 4, c1 = 250; e = int(132 * log2(15.625)) = 523; tg = 16,
    # s2 = 8, c2 = 125 -> [max(4, 8), max(2, 3)]
    (dict(seq_lens=[1000, 300]), [8, 3]),
    # [0, 1000, 100], g = 1: mx 1000, mn 100; s1 = min(10, 8) = 8, c1 = 125; e = 523; tg = 3 * 32 = 96,
    # s2 = min(cdiv(523, 96), 8) = 6, c2 = 167 -> [0, max(8, 6), max(1, 1)]: here c1 decides
    (dict(seq_lens=[0, 1000, 100], num_head=32, num_kv_head=32), [0, 8, 1]),
    # [100, 90]: 800 < 900 so mn = mx = 100, s1 = 1, c1 = 100; e = 132 (log2(1.5625) < 1);
    # tg = 2 * 128 = 256, s2 = 1, c2 = 100 -> [1, 1] (without the mn = mx rule c1 = 50: [2, 2])
    (dict(seq_lens=[100, 90], num_head=128, num_kv_head=128), [1, 1]),
    # num_group 3 repeats each row's value at i * 3 + j
    (dict(seq_lens=[1000, 300], num_group=3), [8, 8, 8, 3, 3, 3]),
]


@pytest.mark.parametrize("case, expect", HAND_CASES)
def test_splits_hand_cases(case, expect):
    assert run_splits(**case) == expect
    assert ref_splits(case["seq_lens"], case.get("num_group", 1), case.get("num_head", 32),
                      case.get("num_kv_head", 8), 8, 132) == expect
    assert run_splits(**case, bare_max_num_seq=256) == expect


# SGLang 0.5.23's uneven_batch_ptr: min < max after the ratio rule (min above 80% of max -> even);
# the statistics over lengths >= 1, as for the splits
UNEVEN = [([100, 80], 1), ([100, 81], 0), ([100, 90], 0), ([1000, 300], 1), ([7], 0), ([0, 5], 0),
          ([0, 0, 0], 0), ([2**31 - 1, 7, 0], 1), ([2**30 - 1, 2**30 - 2], 0)]


@pytest.mark.parametrize("seq_lens, flag", UNEVEN)
@pytest.mark.parametrize("bare", [None, 256])
def test_splits_uneven_batch_flag(seq_lens, flag, bare):
    n = len(seq_lens)
    out = place(torch.full((2 * n,), -5, dtype=torch.int32))
    sl = place(torch.tensor(seq_lens, dtype=torch.int64))
    uneven = place(torch.full((1,), -5, dtype=torch.int32))
    if bare is None:
        get_num_kv_splits(out[0], sl[0], n, 2, 32, 8, 8, 132, uneven_batch=uneven[0])
    else:
        get_num_kv_splits_triton[(1,)](out[0], sl[0], n, 2, 32, 8, 8, 132, MAX_NUM_SEQ=bare,
                                       uneven_batch_ptr=uneven[0])
    assert uneven[0].cpu().tolist() == [flag]
    assert out[0].cpu().tolist() in ref_splits_accepted(seq_lens, 2, 32, 8, 8, 132)  # unchanged by the flag
    assert_canaries(out=out, seq_lens=sl, uneven=uneven)


def test_splits_uneven_batch_with_no_sequences_is_even():
    uneven = torch.full((1,), -5, dtype=torch.int32, device=DEVICE)
    on = dict(device=DEVICE)  # all on one device: on CUDA, CPU tensors beside it are refused first
    get_num_kv_splits(torch.zeros(0, **I32, **on), torch.zeros(0, **I64, **on), 0, 1, 8, 8, uneven_batch=uneven)
    assert uneven.cpu().tolist() == [0]
    with pytest.raises(ValueError, match="uneven_batch must have one element"):
        get_num_kv_splits(torch.zeros(2, **I32, **on), torch.ones(2, **I64, **on), 2, 1, 8, 8,
                          uneven_batch=torch.zeros(2, **I32, **on))


@pytest.mark.parametrize("heads", [(32, 8), (64, 2), (8, 8), (128, 1), (40, 8)])
@pytest.mark.parametrize("max_kv_splits, cores", [(8, 132), (64, 132), (16, 1)])
def test_splits_random_against_reference(heads, max_kv_splits, cores):
    g = torch.Generator().manual_seed(heads[0] * 1000 + max_kv_splits + cores)
    n = int(torch.randint(1, 40, (1,), generator=g))
    hi = int(torch.randint(2, 200000, (1,), generator=g))
    seq_lens = torch.randint(0, hi, (n,), generator=g).tolist()
    got = run_splits(seq_lens, 2, heads[0], heads[1], max_kv_splits, cores)
    assert got in ref_splits_accepted(seq_lens, 2, heads[0], heads[1], max_kv_splits, cores)


@pytest.mark.parametrize("n, bare", [(2500, None), (700, 256)])
def test_splits_more_sequences_than_max_num_seq(n, bare):
    g = torch.Generator().manual_seed(n)
    seq_lens = torch.randint(0, 20000, (n,), generator=g).tolist()
    seq_lens[-1] = 30000  # the max sits in the last chunk
    seq_lens[-2] = 1  # and so does the min
    got = run_splits(seq_lens, num_group=2, bare_max_num_seq=bare, dtype=torch.int32)
    assert got in ref_splits_accepted(seq_lens, 2, 32, 8, 8, 132)


@pytest.mark.parametrize("seq_lens, dtype", [
    ([2**31 - 1, 7, 0], torch.int32),  # past 2**30: the int64 path
    ([2**40, 5000, 1], torch.int64),
    ([-(2**40), 100, 0, 5000], torch.int64),  # a negative length: int64 path
    ([-3, 100, 0, 5000], torch.int32),  # small negative: int32 path
])
def test_splits_large_and_negative_values(seq_lens, dtype):
    """Negative lengths are outside the contract and left out of the statistics; their own
    cells get the formula with C division (pinned so compiled and interpreted runs agree)."""
    got = run_splits(seq_lens, num_group=2, dtype=dtype)
    assert got in ref_splits_accepted(seq_lens, 2, 32, 8, 8, 132, row_cdiv=c_cdiv)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("top", [2**30 - 1, 2**30])  # one chunk: the 32-bit path, then the general one
@pytest.mark.parametrize("bare", [None, 256])
def test_splits_one_chunk_value_range(dtype, top, bare):
    seq_lens = [top, 0, 1, 2**29, 77, top - 5]
    got = run_splits(seq_lens, num_group=2, bare_max_num_seq=bare, dtype=dtype)
    assert got in ref_splits_accepted(seq_lens, 2, 32, 8, 8, 132)


@pytest.mark.parametrize("n", [255, 256, 257])
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_splits_chunk_edge(n, dtype):
    g = torch.Generator().manual_seed(n)
    seq_lens = torch.randint(0, 9000, (n,), generator=g).tolist()
    for bare in (None, 256):
        assert run_splits(seq_lens, bare_max_num_seq=bare, dtype=dtype) in ref_splits_accepted(seq_lens, 1, 32, 8, 8, 132)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("bare", [None, 256])
def test_splits_huge_core_count(dtype, bare):
    """ext_cores near 2**31 plus a token grid of 160 must not wrap in 32-bit arithmetic."""
    seq_lens = [1000] * 20
    got = run_splits(seq_lens, num_head=64, num_kv_head=8, cores=2**31 - 1, bare_max_num_seq=bare, dtype=dtype)
    assert got == ref_splits(seq_lens, 1, 64, 8, 8, 2**31 - 1) == [8] * 20


@pytest.mark.parametrize("layouts", [("step", "step"), ("contig", "zero")])
def test_splits_launcher_strided(layouts):
    seq_lens = [777] * 5 if layouts[1] == "zero" else [10, 0, 5000, 64, 3]
    got = run_splits(seq_lens, num_group=2, num_head=16, num_kv_head=16, layouts=layouts)
    assert got in ref_splits_accepted(seq_lens, 2, 16, 16, 8, 132)


def test_splits_default_core_count():
    out = torch.zeros(2, dtype=torch.int32, device=DEVICE)
    get_num_kv_splits(out, torch.tensor([100000, 50000], device=DEVICE), 2, 1, 8, 8)
    cores = torch.cuda.get_device_properties(0).multi_processor_count if DEVICE == "cuda" else 132
    assert out.cpu().tolist() in ref_splits_accepted([100000, 50000], 1, 8, 8, 8, cores)


def test_sglang_max_num_seq():
    assert [sglang_max_num_seq(n) for n in (1, 255, 256, 257, 1024, 1025)] == [256, 256, 256, 512, 1024, 2048]
    import triton

    assert all(sglang_max_num_seq(n) == max(256, triton.next_power_of_2(n)) for n in range(1, 5000))


SPLITS_REFUSALS = [
    (dict(out=torch.zeros(4, **I64)), r"num_kv_splits must be int32"),
    (dict(out=torch.zeros(3, **I32)), r"num_kv_splits has 3 elements, fewer than num_seq \* num_group = 4"),
    (dict(seq_lens=torch.ones(1, **I64)), r"seq_lens has 1 elements, fewer than num_seq = 2"),
    (dict(seq_lens=torch.ones(2)), r"seq_lens must be int32 or int64"),
    (dict(seq_lens=torch.ones(2, **META)), r"seq_lens is on meta"),
    (dict(num_seq=-1), r"num_seq must be >= 0"),
    (dict(num_group=0), r"num_group must be >= 1"),
    (dict(max_kv_splits=0), r"max_kv_splits must be >= 1"),
    (dict(num_kv_head=0), r"num_kv_head must be >= 1"),
    (dict(num_head=4, num_kv_head=8), r"num_head \(4\) must be >= num_kv_head \(8\)"),
    (dict(device_core_count=0), r"device_core_count must be >= 1"),
    (dict(num_seq=2.0), r"num_seq must be a Python int"),
]


@pytest.mark.parametrize("over, match", SPLITS_REFUSALS, ids=[m for _, m in SPLITS_REFUSALS])
def test_splits_rejects(over, match):
    args = dict(out=torch.zeros(4, **I32), seq_lens=torch.ones(2, **I64), num_seq=2, num_group=2,
                num_head=32, num_kv_head=8, max_kv_splits=8, device_core_count=132)
    args.update(over)
    args = {k: v.to(DEVICE) if isinstance(v, torch.Tensor) and v.device.type == "cpu" else v
            for k, v in args.items()}
    out = args.pop("out")
    with pytest.raises(ValueError, match=match):
        get_num_kv_splits(out, *args.values())
    assert splits_module._splits_fast_check(out, *args.values()) is None  # declined by the fast check too


def test_other_launchers_read_no_values(monkeypatch):
    spec, spec_strided, splits = LaunchRecorder(), LaunchRecorder(), LaunchRecorder()
    monkeypatch.setattr(spec_module, "_swa_spec_page_table_kernel", spec)
    monkeypatch.setattr(spec_module, "_swa_spec_page_table_strided_kernel", spec_strided)
    monkeypatch.setattr(splits_module, "_get_num_kv_splits_strided", splits)
    m32 = dict(dtype=torch.int32, device="meta")
    spec_args = [torch.empty(8, 600, **m32), torch.empty(2, 600, **m32), torch.empty(8, 4, **m32),
                 torch.empty(2, **m32), torch.empty(8, **m32), 4]
    prepare_swa_spec_page_table_triton(*spec_args)
    assert [grid for grid, _, _ in spec.launches] == [(8, 3)] and not spec_strided.launches
    # any stride other than 1 along a row: the strided form, same grid
    for i, strided in [(0, torch.empty(600, 8, **m32).t()), (2, torch.empty(8, 8, **m32)[:, ::2]),
                       (4, torch.empty(16, **m32)[::2])]:
        prepare_swa_spec_page_table_triton(*spec_args[:i], strided, *spec_args[i + 1:])
    assert [grid for grid, _, _ in spec_strided.launches] == [(8, 3)] * 3 and len(spec.launches) == 1
    get_num_kv_splits(torch.empty(3000, **m32), torch.empty(3000, **META), 3000, 1, 32, 8)
    assert len(splits.launches) == 1 and splits.launches[0][2]["CHUNK"] == splits_module.MAX_CHUNK


# --------------------------------------------------------------------------- CUDA graphs (GPU only)


@pytest.mark.skipif(DEVICE != "cuda", reason="CUDA graphs need a GPU")
def test_decode_cuda_graph_replay():
    inp = decode_inputs(B=4, W=64, ps=16, P=40, seed=21)
    t, _ = run_decode(inp, 16, True)  # warm-up compile
    pool = Pool(t["mapping"][0])
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        normal_decode_set_metadata(t["cs"][0], t["cu"][0], t["pt"][0], t["rtt"][0], t["rpi"][0], None,
                                   inp["P"], t["seq_lens"][0], 1, 16, t["swa"][0], pool)
    t["rpi"][0].copy_(t["rpi"][0].flip(0))
    t["seq_lens"][0].add_(5)
    before = {k: v[0].cpu().clone() for k, v in t.items()}
    graph.replay()
    torch.cuda.synchronize()
    check_decode(t, before, inp, 16, True)
