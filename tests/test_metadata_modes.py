"""The metadata family's production launch modes: num_kv_splits past 1024 rows (MAX_NUM_SEQ
1024-4096), swa_spec_page_table's draft trees (REPEAT_STEP > 4) and wide tables (LEN_A past 520,
production widths), decode_metadata's verify-sized seq_len_delta, tombstoned token slots with
a v2p table (0.5.23's guard) and the unified SWA pool of 0.5.19-0.5.22, pa_page_table's eager
call. Hand cases where the builtin kernel,
the releases that take the mode and the two oracles agree; seeded one-line defects in each mode
found by a short stream of the mode's cases."""

from __future__ import annotations

import numpy as np
import pytest

from kvfuzz.case import Case, TensorSpec
from kvfuzz.execute import run_case
from kvfuzz.judge import judge
from kvfuzz.ops import record
from kvfuzz.strategies import GENERATORS
from kvfuzz.strategies.draw import RandomDraw
from kvfuzz.targets import load_target

from kv_index_ops import KERNELS, mutant_copy
from test_releases import kernel_file

C = TensorSpec.contiguous
RNG = np.random.default_rng(7)


def expected(case: Case) -> dict:
    """The NumPy oracle's outputs on an in-contract case; the torch oracle agrees on the required cells."""
    rec = record(case.op)
    status, reasons, exp = rec.contract.assess(case)
    assert status == "in_contract", reasons
    got = rec.torch_ref(case, "cpu")
    for name, cells in rec.contract.cells(case).items():
        req = cells.required
        assert np.array_equal(got[name].numpy()[req], exp.values[name][req]), name
    return exp.values


def signatures(spec: str, case: Case, device, variant: str | None = None) -> list[str]:
    if spec.startswith("sglang=="):
        kernel_file(spec.split("==")[1], "pa_page_table.py" if case.op == "pa_page_table" else "metadata.py")
    t = load_target(spec, device)
    case = case.replace(variant=variant or t.variants[case.op])
    v = judge(case, run_case(t, case, device))
    assert v.not_target is None, v.not_target
    return v.signatures()


def mode_cases(op: str, want, n: int, variant: str = "default") -> list[Case]:
    """n in-contract cases of `op` from classes `want(class)` accepts."""
    g, out = GENERATORS[op], []
    draw_class = g.class_for(variant)
    for i in range(5000):
        d = RandomDraw(f"modes:{op}:{i}")
        k = draw_class(d)
        if want(k):
            out.append(g.draw_case(d, k, True).replace(variant=variant))
            if len(out) == n:
                return out
    raise AssertionError(f"fewer than {n} classes of {op} in the mode")


def mutant(tmp_path, src: str, old: str, new: str, name: str):
    return mutant_copy(src, old, new, tmp_path / name)


def stream_finds(path, cases, device) -> bool:
    t = load_target(str(path), device)
    for case in cases:
        v = judge(case.replace(variant=t.variants[case.op]), run_case(t, case, device))
        if v.signatures():
            return True
    return False


# num_kv_splits: batches past 1024 rows -----------------------------------------------------------


def splits(lens, group=2) -> Case:
    n = len(lens)
    return Case("num_kv_splits", dict(num_seq=n, num_group=group, num_head=32, num_kv_head=8, max_kv_splits=16,
                                      device_core_count=132),
                {"seq_lens": C("int64", (n,)), "num_kv_splits": C("int32", (n * group,))},
                {"seq_lens": np.asarray(lens)})


@pytest.mark.parametrize("n", [1024, 1025, 2047, 4096])
def test_num_kv_splits_past_1024_rows(n, device):
    from kvfuzz.ops.num_kv_splits.call import sglang_max_num_seq

    lens = RNG.integers(1, 200000, size=n)
    lens[-1] = 7  # the last row decides the minimum: a kernel that stops short of it gets the splits wrong
    case = splits(lens)
    out = expected(case)["num_kv_splits"]
    assert sglang_max_num_seq(n) >= n and out.shape == (2 * n,)
    for spec in ("builtin", "sglang==0.5.14", "sglang==0.5.23"):
        assert signatures(spec, case, device) == [], spec


def test_num_kv_splits_classes_reach_past_1024():
    from kvfuzz.strategies import random_cases

    sizes = {c.scalars["num_seq"] for c in random_cases("num_kv_splits", 3, 200)}
    assert max(sizes) > 1024 and 1024 in sizes | {s for s in sizes if 512 < s <= 1024}


def test_a_builtin_that_reads_1024_rows_only_is_found_past_them(tmp_path, device):
    src = (KERNELS / "num_kv_splits.py").read_text()
    old = "offs = tl.arange(0, CHUNK)\n    inb = offs < num_seq\n"  # rows past 1024 read as padding
    path = mutant(tmp_path, src, old, old.replace("offs < num_seq", "offs < tl.minimum(num_seq, 1024)"),
                  "mutant_chunk.py")
    cases = mode_cases("num_kv_splits", lambda k: k["num_seq"] in ("past1024", "at4096"), 12)
    assert stream_finds(path, cases, device)


# swa_spec_page_table: REPEAT_STEP > 4, LEN_A past 520 and production widths ----------------------------


def spec(la, lb, R, WA, WB) -> Case:
    bs, M = len(la), len(lb)
    W = max(la[m // R] + lb[m] for m in range(M)) + 3
    a = RNG.integers(0, 1 << 30, size=(bs, WA))
    b = -1 - RNG.integers(0, 1 << 30, size=(M, WB))
    return Case("swa_spec_page_table", {"speculative_num_draft_tokens": R},
                {"page_table_dst": C("int32", (M, W)), "page_table_a": C("int32", (bs, WA)),
                 "page_table_b": C("int32", (M, WB)), "seq_len_a": C("int32", (bs,)), "seq_len_b": C("int32", (M,))},
                {"page_table_a": a, "page_table_b": b, "seq_len_a": np.asarray(la), "seq_len_b": np.asarray(lb)})


@pytest.mark.parametrize("R", [5, 16, pytest.param(64, marks=pytest.mark.thorough)])  # 64: seconds
def test_swa_spec_draft_trees_repeat_each_request_R_times(R, device):
    lb = RNG.integers(0, R + 1, size=2 * R)
    case = spec([1025, 256], lb, R, 1025, R)
    out = expected(case)["page_table_dst"]
    a = case.values["page_table_a"]
    assert all(np.array_equal(out[m, :1025], a[0, :1025]) for m in range(R))
    assert all(np.array_equal(out[m, :256], a[1, :256]) for m in range(R, 2 * R))
    for target in ("builtin", "sglang==0.5.14", "sglang==0.5.23"):
        assert signatures(target, case, device) == [], target


def test_swa_spec_on_a_production_table(device):
    WA = 32768
    case = spec([WA, 8193], [2, 0, 1, 2], 2, WA, 2)
    out = expected(case)["page_table_dst"]
    assert np.array_equal(out[1, WA - 5:WA], case.values["page_table_a"][0, WA - 5:])
    for target in ("builtin", "sglang==0.5.23"):
        assert signatures(target, case, device) == [], target


def test_swa_spec_classes_draw_the_production_modes():
    g = GENERATORS["swa_spec_page_table"]
    ks = [g.compile_class(RandomDraw(f"k{i}")) for i in range(400)]
    assert any(k["R"] > 4 for k in ks) and any(k["WA"] > 520 for k in ks)
    assert any(k.get("size") == "production" and k["WA"] >= 32768 for k in ks)


def test_a_seeded_repeat_defect_is_found_by_draft_tree_cases(tmp_path, device):
    """The row's request taken as m // 4 (a kernel tested with REPEAT_STEP <= 4 only)."""
    src = (KERNELS / "swa_spec_page_table.py").read_text()
    path = mutant(tmp_path, src, "ra64 = (m // R).to(tl.int64)", "ra64 = (m // (R if R <= 4 else 4)).to(tl.int64)",
                  "mutant_repeat.py")
    cases = mode_cases("swa_spec_page_table", lambda k: k["R"] > 4 and k["W"] not in ("one", "zero"), 6)
    assert stream_finds(path, cases, device)


# decode_metadata: seq_len_delta of a verify; tombstoned token slots with a v2p table ---------------------


def decode(rtt, lens, ps=1, delta=0, v2p=None, swa_v2p=None) -> Case:
    rtt = np.asarray(rtt)
    B, T = len(lens), rtt.shape[1]
    P = max(-(-(n + delta) // ps) for n in lens)
    t = {"cache_seqlens_int32": C("int32", (B,)), "cu_seqlens_k": C("int32", (B + 1,)),
         "page_table": C("int32", (B, P + 2)), "req_to_token": C("int64", rtt.shape),
         "req_pool_indices": C("int64", (B,)), "strided_indices": C("int64", (-(-T // ps),)),
         "seq_lens": C("int64", (B,))}
    v = {"req_to_token": rtt, "req_pool_indices": np.arange(B) % rtt.shape[0], "strided_indices": np.arange(0, T, ps),
         "seq_lens": np.asarray(lens)}
    if v2p is not None:
        t["full_v2p"], v["full_v2p"] = C("int64", (len(v2p),)), np.asarray(v2p)
    if swa_v2p is not None:
        t["swa_page_table"] = C("int32", (B, P + 2))
        t["swa_v2p"], v["swa_v2p"] = C("int64", (len(swa_v2p),)), np.asarray(swa_v2p)
    return Case("decode_metadata", {"max_seq_pages": P, "seq_len_delta": delta, "page_size": ps}, t, v)


@pytest.mark.parametrize("delta", [16, 64])
def test_decode_with_a_verify_sized_delta(delta, device):
    rtt = RNG.permutation(1 << 12)[:2 * 600].reshape(2, 600)
    case = decode(rtt, [300, 0], delta=delta)
    out = expected(case.replace(variant="fused"))
    assert out["cache_seqlens_int32"].tolist() == [300 + delta, delta]
    for target, variant in (("builtin", "strict"), ("sglang==0.5.14", None), ("sglang==0.5.20", None),
                            ("sglang==0.5.23", None)):
        assert signatures(target, case, device, variant) == [], target


def test_decode_classes_draw_verify_deltas():
    g = GENERATORS["decode_metadata"]
    assert {16, 64} <= {g.compile_class(RandomDraw(f"d{i}"))["seq_len_delta"] for i in range(300)}


def test_a_tombstoned_token_slot_reads_v2p_page_0(device):
    """0.5.23 clamps a negative page to 0 before the v2p gather (`tl.maximum(page_ids, 0)`);
    0.5.17 and 0.5.18 read before the table there: in contract, so it is their finding."""
    case = decode([[3, -1, 0, -1]], [4], v2p=[5, 6, 7, 8], swa_v2p=[9, -1, 11, 12])
    out = expected(case.replace(variant="fused"))
    assert out["page_table"][0, :4].tolist() == [8, 5, 5, 5]
    assert out["swa_page_table"][0, :4].tolist() == [12, 9, 9, 9]
    assert signatures("builtin", case, device, "strict") == []
    assert signatures("sglang==0.5.23", case, device) == []
    assert signatures("sglang==0.5.18", case, device) != []
    full_only = decode([[3, -1, 0, -1]], [4], v2p=[5, 6, 7, 8])
    assert signatures("sglang==0.5.17", full_only, device) != []


@pytest.mark.parametrize("version", ["0.5.19", "0.5.20", "0.5.22"])
def test_the_unified_swa_pool_path_of_0_5_19_to_0_5_22(version, device):
    """0.5.19-0.5.22 take swa_v2p through a UnifiedSWAKVPool (variants read_table, skip); their
    kernel reads it with stride 0 (0.5.18's SWA_MAPPING_IS_V2P branch gone), so every SWA page
    is swa_v2p[0]: an in-contract finding, where 0.5.18 and the builtin are clean."""
    kernel_file(version)
    assert "swa_v2p" in load_target(f"sglang=={version}", device).takes["decode_metadata"]
    case = decode([[0, 1, 2, 3]], [4], swa_v2p=[9, 10, 11, 12])
    assert expected(case.replace(variant="skip"))["swa_page_table"][0, :4].tolist() == [9, 10, 11, 12]
    assert signatures(f"sglang=={version}", case, device) == ["decode_metadata:swa:mismatch:swa_page_table:partial"]
    assert signatures("sglang==0.5.18", case, device) == []
    assert signatures("builtin", case, device, "strict") == []


def test_a_negative_token_with_the_static_mapping_stays_out_of_contract():
    case = decode([[3, -1]], [2])
    t = dict(case.tensors, swa_page_table=C("int32", (1, 4)), full_to_swa_index_mapping=C("int64", (4,)))
    v = dict(case.values, full_to_swa_index_mapping=np.arange(4))
    case = Case(case.op, case.scalars, t, v, variant="fused")
    assert record("decode_metadata").contract.classify(case)[0] == "out_of_contract"


def test_a_builtin_without_the_clamp_is_found_by_tombstone_cases(tmp_path, device):
    src = (KERNELS / "decode_metadata.py").read_text()
    path = mutant(tmp_path, src, "vpage = tl.maximum(page, 0)", "vpage = page", "mutant_clamp.py")
    cases = mode_cases("decode_metadata", lambda k: bool(k.get("full_v2p")) and not k.get("skip")
                       and k["P"] != "zero" and k.get("swa_map") != "mapping" and not (k["swa"] and not k.get("swa_map")),
                       120, variant="strict")
    def reads_a_tombstone(c: Case) -> bool:  # a live page's token is negative, and v2p[0] > 0 tells it apart
        s, v = c.scalars, c.values
        live = -(-(v["seq_lens"].astype(np.int64) + s["seq_len_delta"]) // s["page_size"])
        cols = np.arange(s["max_seq_pages"])
        tokens = v["req_to_token"][v["req_pool_indices"][:, None], cols[None, :] * s["page_size"]]
        return bool(((tokens < 0) & (cols[None, :] < live[:, None])).any()) and int(v["full_v2p"][0]) > 0 \
            and c.tensors["full_v2p"].strides != (0,)

    cases = [c for c in cases if reads_a_tombstone(c)]
    assert cases and stream_finds(path, cases, device)


# pa_page_table: the eager call ------------------------------------------------------------------------


def pa(eager: bool) -> Case:
    table = RNG.integers(0, 1 << 30, size=(3, 600))
    rows, lens, pf, w = [2, 0], [600, 5], np.array([0, 0, 100]), 256
    cap = 356  # min(600, 100 + 256)
    return Case("pa_page_table", {"window_size": w, "pa_max_len": cap, **({"eager": True} if eager else {})},
                {"req_to_token": C("int32", (3, 600)), "req_pool_indices": C("int64", (2,)),
                 "seq_lens": C("int64", (2,)), "prefill_lens": C("int32", (3,)),
                 "dst_page_table": C("int32", (2, cap)), "dst_kv_lens": C("int32", (2,))},
                {"req_to_token": table, "req_pool_indices": np.array(rows), "seq_lens": np.array(lens),
                 "prefill_lens": pf})


def test_pa_eager_call_requires_the_wrappers_zeros(device):
    case = pa(True)
    out = expected(case)
    assert out["dst_kv_lens"].tolist() == [356, 5] and not out["dst_page_table"][1, 5:].any()
    cells = record("pa_page_table").contract.cells(case)["dst_page_table"]
    assert cells.required.all() and not record("pa_page_table").contract.cells(pa(False))["dst_page_table"].required.all()
    for target in ("builtin", "sglang==0.5.16", "sglang==0.5.23"):
        assert signatures(target, case, device) == [], target


def test_pa_eager_table_must_be_pa_max_len_wide():
    case = pa(True)
    case = case.with_scalars(pa_max_len=300)
    assert record("pa_page_table").contract.classify(case)[0] == "out_of_contract"


def test_a_wrapper_that_allocates_without_zeroing_is_found_by_eager_cases(tmp_path, device):
    src = kernel_file("0.5.23", "pa_page_table.py").read_text()
    path = mutant(tmp_path, src, "dst_page_table = torch.zeros(bs, pa_max_len",
                  "dst_page_table = torch.full((bs, pa_max_len), 7", "pa_page_table.py")
    cases = mode_cases("pa_page_table", lambda k: bool(k.get("eager_call")), 20)
    assert stream_finds(path, cases, device)
    assert not stream_finds(kernel_file("0.5.23", "pa_page_table.py"), cases, device)


@pytest.mark.slow  # four scripts of a few seconds each on an idle CPU, over two minutes on a loaded one
@pytest.mark.interpreter  # the scripts run under Triton's interpreter, in other processes
def test_the_repro_scripts_make_the_eager_call(tmp_path):
    """The standalone repro script and the short one call the wrapper as eager decode does (no
    outputs, the returned tensors copied in): clean on 0.5.23's file, a finding on the mutant."""
    import os
    import subprocess
    import sys

    from kvfuzz.corpus import SavedCase
    from kvfuzz.repro import write_repro
    from kvfuzz.short_repro import write_short_repro

    release = kernel_file("0.5.23", "pa_page_table.py")
    bad = mutant(tmp_path, release.read_text(), "dst_page_table = torch.zeros(bs, pa_max_len",
                 "dst_page_table = torch.full((bs, pa_max_len), 7", "pa_page_table.py")
    saved = SavedCase(case=pa(True), finding=None, target="sglang==0.5.23", device="cpu", versions={}, origin="hand",
                      expected="pass")
    full, short = tmp_path / "full.py", tmp_path / "short.py"
    write_repro(saved, full, device="cpu")
    write_short_repro(saved, short)
    assert "dst_page_table.copy_(page_table)" in short.read_text()
    env = dict(os.environ, TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES="")
    for script in (full, short):
        def run(kernel_file_):
            return subprocess.run([sys.executable, str(script), str(kernel_file_)], capture_output=True, text=True,
                                  timeout=300, env=env)
        ok, found = run(release), run(bad)
        assert ok.returncode == 0, (script.name, ok.stdout[-2000:], ok.stderr[-2000:])
        assert found.returncode == 1, (script.name, found.stdout[-2000:], found.stderr[-2000:])
