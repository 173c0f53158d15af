"""_build_pa_page_table (SGLang's prefill-aware SWA page table, the FlashAttention backend's
host wrapper) as the op `pa_page_table`: the contract's worked rows, the builtin kernel against
its contract (a short campaign and a seeded stream), the two oracles on generated cases, every
violation kind out of contract, seeded defects in a copy of the builtin found, and SGLang
releases: `sglang==X` loads the wrapper from the release's pa_page_table.py (0.5.15's extracted
from flashattention_backend.py, 0.5.23's own file) and a short in-contract stream runs clean;
kvfuzz's call reaches SGLang's launch (grid (bs,), BLOCK_SIZE 256, the window as a constexpr,
kvfuzz's output tensors); releases before 0.5.15 do not offer the op and say why, without a
download. The release files come from the PyPI wheels through kvfuzz's cache, as in
tests/test_releases.py."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kvfuzz.case import Case, TensorSpec
from kvfuzz.execute import run_case
from kvfuzz.judge import judge
from kvfuzz.ops import record
from kvfuzz.strategies import random_cases
from kvfuzz.targets import load_target
from kvfuzz.targets.releases import PA_PAGE_TABLE, RELEASES, parse_version

from kv_index_ops import short_campaign, stream_findings, violations_leave_contract
from sampling import sampled

OP = "pa_page_table"
KERNEL = Path(__file__).resolve().parents[1] / "kvfuzz" / "kernels" / "pa_page_table.py"
C = TensorSpec.contiguous


def pa_case(rows, lens, prefill, w, cap, P=3, width=16, W=None) -> Case:
    """Requests reading rows `rows` of a (P, width) table holding 100 + its element index."""
    bs = len(rows)
    return Case(OP, {"window_size": w, "pa_max_len": cap},
                {"req_to_token": C("int32", (P, width)), "req_pool_indices": C("int64", (bs,)),
                 "seq_lens": C("int64", (bs,)), "prefill_lens": C("int32", (len(prefill),)),
                 "dst_page_table": C("int32", (bs, cap if W is None else W)), "dst_kv_lens": C("int32", (bs,))},
                {"req_to_token": np.arange(P * width).reshape(P, width) + 100, "req_pool_indices": np.array(rows),
                 "seq_lens": np.array(lens), "prefill_lens": np.array(prefill)})


def test_the_contract_keeps_the_prefill_and_the_window():
    """Row 1 (prefill 3, length 12, window 4): slots 0-2, then 8-11; row 2 (prefill 2, length 5,
    the window reaching back into the prefill): its first 5 slots; the rest of each row untouched."""
    rec = record(OP)
    case = pa_case([1, 2], [12, 5], [0, 3, 2], w=4, cap=8)
    status, _, expected = rec.contract.assess(case)
    assert status == "in_contract"
    assert expected.values["dst_kv_lens"].tolist() == [7, 5]
    assert expected.values["dst_page_table"][0, :7].tolist() == [116, 117, 118, 124, 125, 126, 127]
    assert expected.values["dst_page_table"][1, :5].tolist() == [132, 133, 134, 135, 136]
    cells = rec.contract.cells(case)
    assert cells["dst_page_table"].required.sum(axis=1).tolist() == [7, 5] and cells["dst_kv_lens"].required.all()
    # window 0: the prefill alone; a window past the length: the whole row
    for w, kv in ((0, [3, 2]), (12, [12, 5])):
        assert rec.contract.assess(pa_case([1, 2], [12, 5], [0, 3, 2], w=w, cap=12))[2].values[
            "dst_kv_lens"].tolist() == kv
    # out of contract: no window (-1), a prefill past the length, a kv_len past pa_max_len, pa_max_len 0
    for bad, rule in ((pa_case([1], [12], [0, 3], w=-1, cap=8), "window_size -1"),
                      (pa_case([1], [2], [0, 3], w=4, cap=8), "prefill_lens[1] = 3 > seq_lens[0] = 2"),
                      (pa_case([1], [12], [0, 3], w=4, cap=6, W=8), "kv_len = min(12, 3 + 4) = 7 > pa_max_len 6"),
                      (pa_case([1], [12], [0, 3], w=4, cap=0, W=8), "pa_max_len 0 < 1")):
        assert rule in rec.contract.broken_rule(bad), rec.contract.broken_rule(bad)
    assert rec.contract.classify(pa_case([], [], [0, 3], w=4, cap=0))[0] == "in_contract"  # an idle batch


def test_the_builtin_passes_a_short_campaign(device):
    short_campaign(OP, device, budget_s=2, min_cases=10)


def test_the_builtin_finds_nothing_on_a_seeded_stream(builtin_target, device):
    b = builtin_target.bindings[OP]
    assert b.generation == "0.5.15" and not b.bare and not b.defaulted, b.describe()
    assert stream_findings(OP, builtin_target, device, n=30) == set()


def test_the_oracles_agree_on_generated_cases():
    rec = record(OP)
    seen = set()
    for case in random_cases(OP, 11, 80, in_contract_only=True):
        status, reasons, expected = rec.contract.assess(case)
        assert status == "in_contract", reasons
        got = rec.torch_ref(case, "cpu")
        for name, cells in rec.contract.cells(case).items():
            req = cells.required
            assert np.array_equal(got[name].numpy()[req], expected.values[name][req]), (name, case.describe())
        seen |= rec.generator.features(case)
    assert {"gap:positive", "gap:zero", "fresh", "swa:pure", "pool:shared_row", "padding", "edge:kv:256",
            "width:full", "pa_max_len:tight"} <= seen, seen


def test_each_violation_leaves_the_contract():
    violations_leave_contract(OP)


def test_a_row_past_the_table_races_with_the_next_one():
    """racy: request 0 keeps 7 cells of a 5-wide table (out of contract), its last two landing on
    row 1's first two, which request 1 writes too."""
    case = pa_case([1, 2], [12, 5], [0, 3, 2], w=4, cap=5)
    assert record(OP).contract.classify(case)[0] == "out_of_contract"
    assert record(OP).contract.racy(case)["dst_page_table"].astype(int).tolist() == [[0] * 5, [1, 1, 0, 0, 0]]


MUTANTS = {
    "kv_len mask off by one": ("(j < kv) &", "(j <= kv) &"),
    "prefill seam off by one": ("pos = tl.where(j < f, j, j + gap)", "pos = tl.where(j <= f, j, j + gap)"),
    "row stride dropped": ("req * out_row_s + j * out_col_s", "req * W + j * out_col_s"),
    "grid one request short": ("grid = (bs, max(", "grid = (bs - 1, max("),
    "window one too wide": ("kv = tl.minimum(n, f + window)", "kv = tl.minimum(n, f + window + 1)"),
}


@pytest.mark.parametrize("name", list(MUTANTS))
def test_seeded_defects_in_a_copy_of_the_builtin_are_found(name, tmp_path, device):
    old, new = MUTANTS[name]
    src = KERNEL.read_text()
    assert src.count(old) == 1, old
    src = src.replace(old, new).replace("from ._args import", "from kvfuzz.kernels._args import")
    path = tmp_path / f"mutant_{name.replace(' ', '_')}.py"
    path.write_text(src)
    found = stream_findings(OP, load_target(str(path), device), device, seed=7, n=40, in_contract_only=True,
                            first=True)
    assert any(s.startswith(f"{OP}:") for s in found), found


def release_file(version: str) -> Path:
    """SGLang `version`'s pa_page_table.py from kvfuzz's cache (fetched once), or skip."""
    from test_releases import kernel_file

    return kernel_file(version, PA_PAGE_TABLE)


# (release, where its wrapper is): 0.5.15's inside flashattention_backend.py (extracted); 0.5.23's
# in sglang/kernels/ops/attention/pa_page_table.py (0.5.16's file, byte for byte)
@pytest.mark.parametrize("version", sampled("pa release", ["0.5.15", "0.5.23"], share=2))
def test_a_release_target_offers_the_op_and_runs_in_contract_cases_clean(version, device):
    release_file(version)
    t = load_target(f"sglang=={version}", device)
    b = t.bindings[OP]
    assert not b.bare and b.generation == "0.5.15" and not b.defaulted, b.describe()
    assert t.variants[OP] == "default" and PA_PAGE_TABLE in t.description
    assert t.entries[OP] is t.modules[PA_PAGE_TABLE].__dict__["_build_pa_page_table"]
    assert stream_findings(OP, t, device, seed=4, n=20, in_contract_only=True) == set()


def test_kvfuzz_calls_the_wrapper_as_graph_replay_does(device, monkeypatch):
    """kvfuzz's call reaches SGLang's launch as the backend's: grid (bs,), BLOCK_SIZE 256, the
    window as a constexpr, both row strides, and the case's own output tensors (the wrapper
    allocates nothing); with pa_max_len 0 and no request it launches nothing."""
    import torch

    release_file("0.5.16")
    t = load_target("sglang==0.5.16", device)
    module = t.modules[PA_PAGE_TABLE]
    launches = []

    class Recorder:
        def __getitem__(self, grid):
            return lambda *args, **kwargs: launches.append((grid, args, kwargs))

    monkeypatch.setattr(module, "_build_pa_page_table_kernel", Recorder())
    case = pa_case([1, 2], [12, 5], [0, 3, 2], w=4, cap=8, W=10)
    tensors = {n: torch.zeros(s.shape, dtype=getattr(torch, s.dtype)) for n, s in case.tensors.items()}
    t.bindings[OP](tensors, case.scalars)
    (grid, args, kwargs), = launches
    assert grid == (2,) and kwargs == {"BLOCK_SIZE": 256}
    assert args[4] is tensors["dst_page_table"] and args[5] is tensors["dst_kv_lens"] and args[3] is \
        tensors["prefill_lens"]
    assert args[6:] == (4, 16, 10)  # window_size, req_to_token's and dst_page_table's row strides
    idle = pa_case([], [], [0, 3], w=4, cap=0)
    t.bindings[OP]({n: torch.zeros(s.shape, dtype=getattr(torch, s.dtype)) for n, s in idle.tensors.items()},
                   idle.scalars)
    assert len(launches) == 1


def test_releases_before_0_5_15_do_not_offer_the_op_and_fetch_nothing_for_it(device, monkeypatch):
    """0.5.14's FlashAttention backend has no prefill-aware SWA: the op is missing with the
    reason, the release's other ops load, and no wheel is downloaded to look for the file."""
    from test_releases import kernel_file

    from kvfuzz.errors import TargetLoadError
    from kvfuzz.targets import wheels

    for name in ("kv_indices.py", "trtllm_mha_page_table.py"):
        kernel_file("0.5.14", name)
    monkeypatch.setattr(wheels, "_pip_download", lambda version, into: pytest.fail(f"downloaded {version}"))
    with pytest.raises(TargetLoadError, match=r"sglang==0\.5\.14 has no pa_page_table\.py"):
        wheels.sglang_kernel_file("0.5.14", PA_PAGE_TABLE)
    t = load_target("sglang==0.5.14", device)
    assert OP not in t.bindings and "trtllm_mha_kv_indices" in t.bindings and "decode_metadata" in t.bindings
    why = t.missing[OP]
    assert why.startswith("not offered by sglang 0.5.14: ") and "prefill-aware" in why and "\n" not in why
    assert [v for v in RELEASES if OP in RELEASES[v].not_offered] == [
        v for v in RELEASES if parse_version(v) < (0, 5, 15)]


def test_sglang_writes_past_a_too_narrow_table_and_reads_past_a_short_prefill_lens(device):
    """Out of contract: SGLang's kernel takes no width of the table, so a kv_len past it is
    written past the table; and a pool row past prefill_lens (0.5.15 - 0.5.17 sized it one short
    of the pool) is read past it, the kv_len then coming from whatever lies there. The builtin
    masks both."""
    release_file("0.5.16")
    sglang, builtin = load_target("sglang==0.5.16", device), load_target("builtin", device)
    narrow = pa_case([1, 2], [10, 12], [0, 3, 2], w=4, cap=5)  # the last row keeps 6 cells of 5
    assert "pa_page_table:pa:out_of_bounds_write:dst_page_table:after" in judge(
        narrow, run_case(sglang, narrow, device)).signatures()
    short = pa_case([1, 2], [10, 12], [0, 3], w=4, cap=7)
    assert record(OP).contract.broken_rule(short) == "req_pool_indices[1] = 2 past prefill_lens's 2 entries"
    assert judge(short, run_case(sglang, short, device, repeats=2)).signatures() == [
        "pa_page_table:pa:out_of_bounds_read:prefill_lens:after"]
    for case in (narrow, short):
        assert judge(case, run_case(builtin, case, device, repeats=2)).signatures() == []


def test_a_short_repro_imports_the_releases_module():
    from kvfuzz.short_repro import _sglang_module

    where = {v: _sglang_module(f"sglang=={v}", PA_PAGE_TABLE) for v in ("0.5.15", "0.5.16", "0.5.23")}
    assert where == {"0.5.15": "sglang.srt.layers.attention.flashattention_backend",
                     "0.5.16": "sglang.kernels.ops.attention.pa_page_table",
                     "0.5.23": "sglang.kernels.ops.attention.pa_page_table"}
