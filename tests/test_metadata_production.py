"""Production sizes of the metadata ops (draft_extend_metadata, pa_page_table, num_kv_splits,
q8kv8_topk_length) and swa_spec_page_table's batches past 256: the campaign's class drawer reaches
them; a hand case per op at a production size, where the builtin kernel, SGLang 0.5.23's and the
two oracles agree; and seeded one-line defects that only a production size shows (a page count
or a column index wrapping at 32768, a float16 of the longest length, a prefix sum losing its
carry past 128 rows, a grid capped at 256 rows), in a copy of each builtin, found by a stream of
the op's production cases."""

from __future__ import annotations

import numpy as np
import pytest

from kvfuzz.case import Case, TensorSpec
from kvfuzz.execute import run_case
from kvfuzz.judge import judge
from kvfuzz.ops import record
from kvfuzz.ops.pa_page_table.contract import kv_lens
from kvfuzz.strategies import random_cases
from kvfuzz.targets import load_target

from kv_index_ops import KERNELS, mutant_copy
from test_kv_index_production import agree, runs_clean
from sampling import sampled

C = TensorSpec.contiguous
RNG = np.random.default_rng(11)


def _longest(case: Case) -> int:
    """The production size a case reaches: its longest row, table or length."""
    op, t, v = case.op, case.tensors, case.values
    if op == "draft_extend_metadata":
        return t["page_table"].shape[1] * case.scalars["page_size"]
    if op == "pa_page_table":
        return int(kv_lens(case).max()) if t["dst_kv_lens"].shape[0] else 0
    if op == "num_kv_splits":
        return int(v["seq_lens"].max())
    if op == "q8kv8_topk_length":
        return t["indices"].shape[1]
    return t["page_table_a"].shape[1]


# the longest row each op's production classes reach (tokens, or top-k width)
REACH = {"draft_extend_metadata": 131072, "pa_page_table": 131072, "num_kv_splits": 131072,
         "q8kv8_topk_length": 2048, "swa_spec_page_table": 131072}


@pytest.mark.nokernel
@pytest.mark.parametrize("op", list(REACH))
def test_the_campaigns_class_drawer_reaches_production_sizes_and_batches_past_256(op):
    variant = next(iter(record(op).contract.variants))
    seen, longest = set(), 0
    for seed in range(8):
        for case in random_cases(op, seed, 200, in_contract_only=True, variant=variant):
            f = record(op).generator.features(case)
            seen |= f
            if "size:production" in f:
                longest = max(longest, _longest(case))
        if {"size:production", "bs:past_256"} <= seen and longest >= REACH[op]:
            break
    assert {"size:production", "bs:past_256"} <= seen, sorted(f for f in seen if ":" in f)[:20]
    assert longest >= REACH[op], longest


def draft_extend_case(B: int, W: int, lens: list[int]) -> Case:
    """No SWA, page size 1: B requests over a table W pages wide, pool rows 0 and 1 alternating."""
    table = RNG.integers(0, 1 << 30, size=(2, max(W, 1) + 3))
    tensors = {"cache_seqlens_int32": C("int32", (B,)), "cu_seqlens_k": C("int32", (B + 1,)),
               "cu_seqlens_q": C("int32", (B + 1,)), "page_table": C("int32", (B, W)),
               "req_to_token": C("int32", table.shape), "req_pool_indices": C("int64", (B,)),
               "seq_lens": C("int64", (B,)), "extend_seq_lens": C("int64", (B,))}
    values = {"req_to_token": table, "req_pool_indices": np.arange(B) % 2, "seq_lens": np.array(lens),
              "extend_seq_lens": RNG.integers(0, 9, size=B)}
    return Case("draft_extend_metadata", {"page_size": 1}, tensors, values)


def pa_case(C_: int, W: int, window: int, reqs: list[tuple[int, int]], extra_rows: int = 1) -> Case:
    """Requests (prefill, length) in pool rows 0.. of a table C_ wide, into a (bs, W) graph table."""
    bs = len(reqs)
    P = bs + extra_rows
    table = RNG.integers(0, 1 << 30, size=(P, C_))
    pf = np.zeros(P, np.int64)
    pf[:bs] = [f for f, _ in reqs]
    tensors = {"req_to_token": C("int32", (P, C_)), "req_pool_indices": C("int64", (bs,)),
               "seq_lens": C("int64", (bs,)), "prefill_lens": C("int32", (P,)),
               "dst_page_table": C("int32", (bs, W)), "dst_kv_lens": C("int32", (bs,))}
    values = {"req_to_token": table, "req_pool_indices": np.arange(bs), "seq_lens": np.array([n for _, n in reqs]),
              "prefill_lens": pf}
    case = Case("pa_page_table", {"window_size": window, "pa_max_len": 0}, tensors, values)
    return case.with_scalars(pa_max_len=max(int(kv_lens(case).max()), 1))


def spec_case(bs: int, R: int, WA: int, WB: int) -> Case:
    la = RNG.integers(0, WA + 1, size=bs)
    lb = RNG.integers(0, WB + 1, size=bs * R)
    la[-1], lb[-1] = WA, WB
    W = WA + WB
    tensors = {"page_table_dst": C("int32", (bs * R, W)), "page_table_a": C("int32", (bs, WA)),
               "page_table_b": C("int32", (bs * R, WB)), "seq_len_a": C("int32", (bs,)),
               "seq_len_b": C("int32", (bs * R,))}
    values = {"page_table_a": RNG.integers(0, 1 << 30, size=(bs, WA)),
              "page_table_b": -1 - RNG.integers(0, 1 << 30, size=(bs * R, WB)), "seq_len_a": la, "seq_len_b": lb}
    return Case("swa_spec_page_table", {"speculative_num_draft_tokens": R}, tensors, values)


def splits_case(lens: np.ndarray) -> Case:
    n = lens.size
    scalars = {"num_seq": n, "num_group": 1, "num_head": 128, "num_kv_head": 1, "max_kv_splits": 64,
               "device_core_count": 132}
    return Case("num_kv_splits", scalars, {"num_kv_splits": C("int32", (n,)), "seq_lens": C("int64", (n,))},
                {"seq_lens": lens})


def topk_case(S: int, K: int = 2048) -> Case:
    idx = RNG.integers(0, 1 << 31, size=(S, K))
    last = RNG.integers(-1, K, size=S)  # each row's last valid position (-1: all pads)
    idx[np.arange(K)[None, :] > last[:, None]] = -1
    return Case("q8kv8_topk_length", {}, {"indices": C("int32", (S, K)), "topk_length": C("int32", (S,))},
                {"indices": idx})


def _spread(n: int, longest: int) -> np.ndarray:
    lens = RNG.integers(1, 4096, size=n)
    lens[[0, n // 2]] = longest
    return lens


HAND = {
    # a 128K context past the grid's 512th column block, beside a shorter one
    "draft_extend_wide": lambda: draft_extend_case(2, 131073, [131073, 40000]),
    # a CUDA-graph batch of 1025: the prefix sums run past their 128th and 256th row
    "draft_extend_batch": lambda: draft_extend_case(1025, 16, list(RNG.integers(0, 17, size=1025))),
    # a 64K prefill kept whole, the 4096-token window after it; a pure window at the row's end
    "pa_wide": lambda: pa_case(131329, 131329 - 7, 4096, [(65536, 131329), (0, 131072), (32768, 32769)]),
    # a decode batch of 1024 requests past 256
    "pa_batch": lambda: pa_case(300, 300, 128, [(int(f), int(f) + int(g)) for f, g in
                                                zip(RNG.integers(0, 150, 1024), RNG.integers(0, 150, 1024))]),
    # a verify batch of 257 requests, 4 draft tokens each: 1028 expanded rows
    "swa_spec_batch": lambda: spec_case(257, 4, 257, 5),
    # 1024 sequences, the longest 131072 (and 65537, past float16's largest)
    "num_kv_splits": lambda: splits_case(_spread(1024, 131072)),
    "num_kv_splits_65537": lambda: splits_case(_spread(300, 65537)),
    # DSA's top-k over 1024 query rows
    "q8kv8": lambda: topk_case(1024),
}


# the two largest hand cases take 25-50 s on 2 cores: slow (CI runs them in its slow stage)
SLOW_HAND = {"q8kv8", "swa_spec_batch"}


@pytest.mark.parametrize("name", sampled("production hand", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW_HAND
                                                            else n for n in HAND], share=4))
def test_a_hand_case_at_a_production_size_where_builtin_release_and_oracles_agree(name, device):
    case = HAND[name]()
    out = agree(case)
    if case.op == "draft_extend_metadata":
        lens = case.values["seq_lens"]
        assert np.array_equal(out["cu_seqlens_k"], np.concatenate([[0], np.cumsum(lens)]))
        if lens[0] > 100000:
            assert np.array_equal(out["page_table"][0, :lens[0]], case.values["req_to_token"][0, :lens[0]])
    if name == "pa_wide":  # the prefill, then the window's 4096 tokens
        row = case.values["req_to_token"][0]
        assert out["dst_kv_lens"][0] == 65536 + 4096
        assert np.array_equal(out["dst_page_table"][0, :69632], np.concatenate([row[:65536], row[-4096:]]))
    runs_clean(case, device)


# seeded one-line defects of each builtin that only a production size shows: (op, old, new, the
# feature its cases need)
DEFECTS = {
    "draft_extend: a row's live page count in int16 (wraps at 32768 pages)": (
        "draft_extend_metadata", "live = tl.minimum(tl.maximum((seq_len + (1 << SHIFT) - 1) >> SHIFT, 0), n_cols)",
        "live = tl.minimum(tl.maximum((seq_len + (1 << SHIFT) - 1) >> SHIFT, 0), n_cols).to(tl.int16)",
        "size:production"),
    "draft_extend: the prefix sums drop their carry past the first 128 rows": (
        "draft_extend_metadata", "running += tl.sum(v, axis=0)", "running = tl.sum(v, axis=0)", "bs:past_256"),
    "pa_page_table: a column index in int16 (wraps at 32768 tokens)": (
        "pa_page_table", "j = tile * TILE + tl.arange(0, TILE).to(tl.int64)",
        "j = (tile * TILE + tl.arange(0, TILE)).to(tl.int16).to(tl.int64)", "size:production"),
    "pa_page_table: a grid capped at 256 requests": (
        "pa_page_table", "grid = (bs, max(triton.cdiv(W, tile), 1))",
        "grid = (min(bs, 256), max(triton.cdiv(W, tile), 1))", "bs:past_256"),
    "swa_spec_page_table: a grid capped at 256 expanded rows": (
        "swa_spec_page_table", "grid = (rows, -(-width // BLOCK_N))", "grid = (min(rows, 256), -(-width // BLOCK_N))",
        "bs:past_256"),
    "num_kv_splits: the longest length in float16 (infinite past 65504)": (
        "num_kv_splits", "ext_len = mx.to(tl.float32) * 0.015625", "ext_len = mx.to(tl.float16) * 0.015625",
        "size:production"),
    "q8kv8_topk_length: a grid capped at 256 rows": (
        "q8kv8_topk_length", "_topk_length_kernel[(s_q,)]", "_topk_length_kernel[(min(s_q, 256),)]", "bs:past_256"),
}


@pytest.mark.parametrize("name", sampled("production defect", list(DEFECTS), share=4))
def test_a_seeded_production_defect_fails_its_hand_case(name, tmp_path, device):
    """The hand cases catch each seeded defect (and pass on the builtin: the test above)."""
    op, old, new, _ = DEFECTS[name]
    target = load_target(str(mutant_copy(KERNELS / f"{op}.py", old, new, tmp_path / "mutant.py")), device)
    hands = [h for h in HAND.values() if h().op == op]
    assert any(judge(case, run_case(target, case, device)).signatures() for case in (h() for h in hands)), name


@pytest.mark.slow  # production cases under the interpreter: seconds each
@pytest.mark.parametrize("name", list(DEFECTS))
def test_a_seeded_production_defect_is_found_by_a_stream_of_production_cases(name, tmp_path, device):
    op, old, new, feature = DEFECTS[name]
    target = load_target(str(mutant_copy(KERNELS / f"{op}.py", old, new, tmp_path / "mutant.py")), device)
    variant = target.variants[op]
    tried = 0
    for seed in range(4):
        for case in random_cases(op, seed, 400, in_contract_only=True, variant=variant):
            if feature not in record(op).generator.features(case):
                continue
            tried += 1
            if judge(case, run_case(target, case, device)).signatures():
                return
            assert tried < 12, f"no production case found: {name}"
    pytest.fail(f"{tried} production cases drawn, none found: {name}")
