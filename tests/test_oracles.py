"""Both oracles agree with each other, with hand-computed values, and with the builtin
kernels, on hand-chosen in-contract cases for every op and kernel path."""

from __future__ import annotations

import numpy as np
import pytest

from kvfuzz.case import Case, TensorSpec
from kvfuzz.contract import OutOfContract
from kvfuzz.device import torch_device
from kvfuzz.execute import run_case
from kvfuzz.judge import classify, judge
from kvfuzz.ops import CONTRACTS
from kvfuzz.ops.num_kv_splits import oracle as splits_oracle

import cases

HAND = {
    "decode ps1": cases.decode(ps=1),
    "decode ps1 P=0": cases.decode(ps=1, P=0),
    "decode general ps16": cases.decode(ps=16, delta=3),
    "decode general int32 inputs": cases.decode(ps=4, dtype="int32"),
    "decode swa": cases.decode(ps=16, swa=True),
    "decode swa ps1 P=0": cases.decode(ps=1, swa=True, P=0),
    "decode ps1 one block+1": cases.decode(ps=1, B=1, P=257),
    "decode strided page_table": cases.decode(ps=1, page_table=TensorSpec("int32", (3, 19), (1, 5), 2)),
    "decode strided swa_page_table": cases.decode(ps=2, swa=True, swa_table=TensorSpec("int32", (3, 20), (48, 2), 1)),
    "decode live_prefix": cases.decode(ps=4, variant="live_prefix"),
    "spec mixed block": cases.spec(la=(3, 300)),
    "spec block edges": cases.spec(la=(255, 256, 257), R=3, WB=4),
    "spec empty A": cases.spec(la=(0, 0), R=1, WB=3),
    "spec strided dst": cases.spec(la=(2, 5), dst=TensorSpec("int32", (4, 8), (1, 4))),
    "splits equal": cases.splits([1000] * 4),
    "splits spread int64": cases.splits([1, 50, 4000, 99], num_group=2, dtype="int64"),
    "splits mha": cases.splits([300, 301, 5], num_head=16, num_kv_head=16),
    "splits zero length (kvfuzz-defined)": cases.splits([0, 5, 9]),
    "splits all zero": cases.splits([0, 0]),
    "draft_extend ps1": cases.draft_extend(ps=1),
    "draft_extend general, a row longer than the table": cases.draft_extend(ps=4, W=3, dtype="int32"),
    "draft_extend swa": cases.draft_extend(ps=16, swa=True),
    "draft_extend swa ps1 zero width": cases.draft_extend(ps=1, swa=True, W=0),
    "draft_extend block edges": cases.draft_extend(ps=1, lens=(255, 256, 257, 0)),
    "topk block128 unaligned": cases.topk([[0, -1, 5], [-1, -1], [7] * 200, [-2] * 150 + [3]], K=300),
    "topk block512, last at the scanned block's edges": cases.topk([[1] * 1536, [1] * 1535, [1] * 1537, []], K=2048),
    "topk width 0": cases.topk([[], []], K=0),
    "topk padded rows": cases.topk([[4, 4], [-1, 0]], K=256, spec=TensorSpec("int32", (2, 256), (263, 1), 3, 600)),
    "draft_extend transposed tables": cases.draft_extend(ps=2, swa=True,
                                                         page_table=TensorSpec("int32", (4, 12), (1, 4))),
}


@pytest.mark.parametrize("name", list(HAND))
def test_hand_cases_are_in_contract(name):
    assert classify(HAND[name]) == ("in_contract", [])


@pytest.mark.parametrize("name", list(HAND))
def test_numpy_and_torch_oracles_agree(name, device):
    case = HAND[name]
    c = CONTRACTS[case.op]
    want = c.numpy_ref(case)
    got = {k: v.cpu().numpy() for k, v in c.torch_ref(case, torch_device(device)).items()}
    for out, cells in c.cells(case).items():
        accepted = [np.asarray(a[out])[cells.required] for a in want.accepted()]
        assert any(np.array_equal(np.asarray(got[out])[cells.required], a) for a in accepted), out


@pytest.mark.parametrize("name", list(HAND))
def test_builtin_kernels_agree_with_both_oracles(name, builtin_target, device):
    case = HAND[name]
    verdict = judge(case, run_case(builtin_target, case, device, repeats=2))
    assert verdict.status == "in_contract"
    assert verdict.findings == [], [f.message for f in verdict.findings]


def test_decode_values_by_hand():
    case = cases.decode(ps=4, B=2, delta=1)
    v = case.values
    exp = CONTRACTS["decode_metadata"].numpy_ref(case).values
    lens = v["seq_lens"] + 1
    assert exp["cache_seqlens_int32"].tolist() == lens.tolist()
    assert exp["cu_seqlens_k"].tolist() == [0, lens[0], lens[0] + lens[1]]
    row = v["req_pool_indices"][1]
    assert exp["page_table"][1, 2] == v["req_to_token"][row, 8] // 4


def test_negative_token_ids_floor_divide():
    case = cases.decode(ps=16, B=1)
    rtt = np.array(case.values["req_to_token"])
    rtt[:, 0] = -17
    case = case.replace(values={**case.values, "req_to_token": rtt})
    assert CONTRACTS["decode_metadata"].numpy_ref(case).values["page_table"][0, 0] == -2  # floor, not truncation


def test_spec_values_by_hand():
    case = cases.spec(la=(3, 1), R=2, WB=2)
    exp = CONTRACTS["swa_spec_page_table"].numpy_ref(case).values["page_table_dst"]
    a, b = case.values["page_table_a"], case.values["page_table_b"]
    # row 3: request 1 (la = 1), lb = 3 % 3 = 0 -> only the A part
    assert exp[3, 0] == a[1, 0]
    # row 1: request 0 (la = 3), lb = 1 -> A[0, :3] then B[1, 0]
    assert exp[1, :4].tolist() == [*a[0, :3].tolist(), b[1, 0]]


def test_splits_values_by_hand():
    # mx = mn = 1000: s1 = 1, c1 = 1000; e = int(132 * log2(1000 / 64)) = 523;
    # tg = 4 * 1 * cdiv(32, min(16, 4)) = 32; s2 = min(cdiv(523, 32), 8) = 8; c2 = 125 -> 8 splits
    exp = CONTRACTS["num_kv_splits"].numpy_ref(cases.splits([1000] * 4)).values["num_kv_splits"]
    assert exp.tolist() == [8, 8, 8, 8]
    # zero lengths take no part in max/min and get 0 splits
    assert CONTRACTS["num_kv_splits"].numpy_ref(cases.splits([0, 5, 9])).values["num_kv_splits"][0] == 0


def draft_by_hand(swa: bool):
    C = TensorSpec.contiguous
    t = {"cache_seqlens_int32": C("int32", (2,)), "cu_seqlens_k": C("int32", (3,)), "cu_seqlens_q": C("int32", (3,)),
         "page_table": C("int32", (2, 3)), "req_to_token": C("int64", (1, 6)), "req_pool_indices": C("int64", (2,)),
         "seq_lens": C("int64", (2,)), "extend_seq_lens": C("int64", (2,))}
    v = {"req_to_token": np.array([[10, 11, 4 if swa else -3, 13, 14, 15]]), "req_pool_indices": np.array([0, 7]),
         "seq_lens": np.array([3, 0]), "extend_seq_lens": np.array([2, 5])}
    if swa:
        t |= {"full_to_swa_index_mapping": C("int64", (16,)), "swa_page_table": C("int32", (2, 3)),
              "out_cache_loc": C("int64", (4,)), "swa_out_cache_loc": C("int64", (4,))}
        v |= {"full_to_swa_index_mapping": np.arange(16) * 3 - 1, "out_cache_loc": np.array([1, 0, 15, 2])}
    return Case("draft_extend_metadata", {"page_size": 2}, t, v)


@pytest.mark.parametrize("swa", [False, True])
def test_draft_extend_values_by_hand(swa, device):
    """Row 0: 3 tokens at page size 2 -> 2 live pages (tokens 10 and rtt[0, 2]); row 1 is padding
    (length 0, pool index 7 past the table: never read). Columns past the live pages may be written."""
    case = draft_by_hand(swa)
    exp = CONTRACTS["draft_extend_metadata"].numpy_ref(case).values
    assert exp["cache_seqlens_int32"].tolist() == [3, 0]
    assert exp["cu_seqlens_k"].tolist() == [0, 3, 3] and exp["cu_seqlens_q"].tolist() == [0, 2, 7]
    cells = CONTRACTS["draft_extend_metadata"].cells(case)
    assert cells["page_table"].required.tolist() == [[True, True, False], [False, False, False]]
    assert not cells["page_table"].untouched.any()
    assert exp["page_table"][0, :2].tolist() == ([5, 2] if swa else [5, -2])  # -3 // 2: floor
    if swa:  # mapping[t] = 3t - 1
        assert exp["swa_page_table"][0, :2].tolist() == [29 // 2, 11 // 2]
        assert exp["swa_out_cache_loc"].tolist() == [2, -1, 44, 5]
    got = CONTRACTS["draft_extend_metadata"].torch_ref(case, torch_device(device))
    for name, c in cells.items():
        assert np.array_equal(got[name].cpu().numpy()[c.required], np.asarray(exp[name])[c.required]), name


def test_draft_extend_out_of_contract_reasons():
    case = draft_by_hand(True)
    v = case.values
    assert classify(case.replace(values={**v, "req_pool_indices": np.array([1, 7])}))[1] == [
        "req_pool_indices[0] = 1 outside [0, 1) on a row with pages"]
    far = case.replace(values={**v, "out_cache_loc": np.array([1, 0, 16, 2])})
    assert "outside the SWA mapping" in classify(far)[1][0]
    uneven = case.replace(tensors={**case.tensors, "out_cache_loc": TensorSpec.contiguous("int64", (3,)),
                                   "swa_out_cache_loc": TensorSpec.contiguous("int64", (3,))},
                          values={**v, "out_cache_loc": np.array([1, 0, 2])})
    assert any("not a positive multiple of B = 2" in r for r in classify(uneven)[1])
    other = case.replace(tensors={**case.tensors, "swa_page_table": TensorSpec("int32", (2, 3), (1, 2))})
    assert classify(other)[1] == ["swa_page_table must have page_table's strides (SGLang asserts it)"]
    assert classify(case.with_scalars(page_size=3))[0] == "must_refuse"
    big = case.replace(values={**v, "seq_lens": np.array([3, 2**31 - 3])})
    assert classify(big)[0] == "out_of_contract"


def test_topk_length_values_by_hand():
    case = cases.topk([[0, -1, 5, -1], [-1] * 4, [3, 3, 3, 3], [-(2**31), 9, -2, -1]])
    assert CONTRACTS["q8kv8_topk_length"].numpy_ref(case).values["topk_length"].tolist() == [3, 1, 4, 2]
    assert CONTRACTS["q8kv8_topk_length"].numpy_ref(cases.topk([[], []], K=0)).values["topk_length"].tolist() == [1, 1]
    assert CONTRACTS["q8kv8_topk_length"].kernel_path(cases.topk([[1]], K=768)) == "block256"
    transposed = case.replace(tensors={**case.tensors, "indices": TensorSpec("int32", (4, 4), (1, 4))})
    assert classify(transposed)[1] == ["indices must have unit column stride, got strides (1, 4) (SGLang asserts it)"]


def test_int32_overflow_is_out_of_contract_not_wrapped():
    case = cases.decode(ps=1, B=2)
    big = case.replace(values={**case.values, "seq_lens": np.array([2**31 - 10, 100])})
    with pytest.raises(OutOfContract, match="does not fit int32"):
        CONTRACTS["decode_metadata"].numpy_ref(big)
    assert classify(big)[0] == "out_of_contract"


def test_rounding_boundary_is_recognised():
    # dcc = 1, mx = 1024: e = trunc(log2(1024 / 64)) = trunc(4.0) = 4 exactly; a device log2 one
    # ulp low gives 3, so s2 = 4 or 3 and the answer is cdiv(1024, 256) = 4 or cdiv(1024, 342) = 3
    exp = CONTRACTS["num_kv_splits"].numpy_ref(cases.splits([1024], num_head=1, num_kv_head=1, dcc=1))
    assert exp.values["num_kv_splits"].tolist() == [4]
    assert [a["num_kv_splits"].tolist() for a in exp.alternatives] == [[3]]
    assert "rounding boundary" in exp.boundary
    # away from a boundary there is one answer
    exp = CONTRACTS["num_kv_splits"].numpy_ref(cases.splits([1000], num_head=1, num_kv_head=1, dcc=1))
    assert exp.alternatives == ()


@pytest.mark.parametrize("written, kinds", [(4, []), (3, []), (5, ["mismatch"])])
def test_boundary_alternatives_are_not_mismatches(written, kinds, tmp_path, device):
    # a target that writes a fixed value: 4 (exact) and 3 (the other side of the float32
    # step) are both right; 5 is a logic error
    fake = tmp_path / f"splits_{written}.py"
    fake.write_text(f"def get_num_kv_splits_triton(out, seq_lens, *args):\n    out.fill_({written})\n")
    from kvfuzz.targets import load_target

    case = cases.splits([1024], num_head=1, num_kv_head=1, dcc=1)
    verdict = judge(case, run_case(load_target(str(fake), device), case, device))
    assert [f.kind for f in verdict.findings] == kinds


# At 341364 / 64 = 5333.8125 the correctly rounded float32 log2 is 12.380951, one ulp below
# 12.380952, which NumPy's and torch's float32 log2 give on some hosts; with 21 cores the
# truncated product falls on either side of 260, so the answer is 7 (correctly rounded) or 8.
# The NumPy oracle computes log2 exactly (splits_oracle.log2_f32), so its answer is 7 on every
# host and 8 is an accepted alternative. corpora/ keeps this case.
ROUNDING_DISAGREEMENT = dict(lens=[341364], num_head=37, num_kv_head=37, mks=8, dcc=21)


def test_the_oracles_float32_log2_is_correctly_rounded_on_every_host():
    assert splits_oracle.log2_f32(5333.8125) == np.float32(12.380951)
    assert splits_oracle.log2_f32(1024 / 64) == np.float32(4.0)
    # the correctly rounded float32 values, written out (no host log2 involved)
    for x, want in ((1.5, 0.5849624872207642), (3.0, 1.5849624872207642), (100.25, 6.647458553314209),
                    (16384.0, 14.0), (0.015625, -6.0)):
        assert splits_oracle.log2_f32(x) == np.float32(want)


def test_oracles_may_disagree_on_a_rounding_boundary_only_where_the_numpy_oracle_says_so(device):
    case = cases.splits(**ROUNDING_DISAGREEMENT)
    exp = CONTRACTS["num_kv_splits"].numpy_ref(case)
    assert exp.values["num_kv_splits"].tolist() == [7]
    assert [a["num_kv_splits"].tolist() for a in exp.alternatives] == [[8]] and exp.boundary
    builtin = __import__("kvfuzz.targets", fromlist=["load_target"]).load_target("builtin", device)
    outcome = run_case(builtin, case, device)
    assert outcome.torch_ref["num_kv_splits"].tolist() in ([8], [7])
    assert judge(case, outcome).findings == []
    # the detector itself: a torch answer on neither side of the boundary is a disagreement
    outcome.torch_ref = {"num_kv_splits": np.array([6])}
    assert [f.signature for f in judge(case, outcome).findings] == [
        "num_kv_splits:splits:oracle_disagreement:num_kv_splits:all"]
