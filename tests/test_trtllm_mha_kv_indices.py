"""create_trtllm_mha_kv_indices_triton (SGLang's TRT-LLM MHA page-table builder, with its SWA
table) as the op `trtllm_mha_kv_indices`: the builtin kernel against its contract (a short campaign
and a seeded stream), the two oracles on generated cases, the launch grid as SGLang's
get_num_mha_kv_index_blocks gives it, seeded defects in a copy of the builtin found, and SGLang
releases: `sglang==X` loads the kernel from the release's trtllm_mha_page_table.py (0.5.14's and
0.5.23's, one API generation each) and a short in-contract stream runs clean; releases before
0.5.14 do not offer the op and say why, without a download; a cache folder an older kvfuzz wrote
gets the file with one more download. The release files come from the PyPI wheels through
kvfuzz's cache, as in tests/test_releases.py."""

from __future__ import annotations

import importlib.util
import shutil
import zipfile
from pathlib import Path

import numpy as np
import pytest

from kvfuzz.case import Case, TensorSpec
from kvfuzz.execute import run_case
from kvfuzz.judge import judge
from kvfuzz.ops import record
from kvfuzz.strategies import random_cases
from kvfuzz.targets import load_target
from kvfuzz.targets.releases import RELEASES, TRTLLM_MHA

OP = "trtllm_mha_kv_indices"
KERNEL = Path(__file__).resolve().parents[1] / "kvfuzz" / "kernels" / "trtllm_mha_kv_indices.py"


def stream_findings(target, device, seed=3, n=30, in_contract_only=False, first=False):
    """The signatures a seeded stream of n cases (one in five out of contract) finds (first:
    those of the first case that finds any)."""
    out = set()
    for case in random_cases(OP, seed, n, in_contract_only):
        v = judge(case, run_case(target, case, device))
        assert v.not_target is None, (case.describe(), v.not_target)
        out |= set(v.signatures())
        if first and out:
            break
    return out


@pytest.mark.thorough  # seconds of processes and campaigns: CI's thorough stage
def test_the_builtin_passes_a_short_campaign(device):
    from kvfuzz.campaign import CampaignConfig, run_campaign

    res = run_campaign(CampaignConfig(ops=[OP], ops_named=True, device=device, budget_s=2, isolate=False, seed=5,
                                      minimize_budget_s=0))
    (stats,) = res.stats
    assert stats.cases > 10 and res.saved == [], (stats, res.saved)


def test_the_builtin_finds_nothing_on_a_seeded_stream(builtin_target, device):
    b = builtin_target.bindings[OP]
    assert b.generation == "0.5.16" and not b.bare
    assert stream_findings(builtin_target, device) == set()


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
    assert {"swa", "no_swa", "page_size:64", "page_size:16", "edge:len:page+1", "width:full", "swa:sentinel"} <= seen


def test_each_violation_leaves_the_contract():
    rec = record(OP)
    from kvfuzz.strategies.draw import RandomDraw

    for kind in rec.generator.violations:
        for i in range(6):
            d = RandomDraw(f"violation:{kind}:{i}")
            k = rec.generator.compile_class(d)
            case = rec.generator.violation(d, rec.generator.in_class(d, k), k, kind)
            assert rec.contract.classify(case)[0] == "out_of_contract", (kind, case.describe())


def test_a_request_past_its_row_races_with_the_next_one():
    """racy: request 0's third page (out of contract: the rows hold two) lands on row 1's first
    cell, which request 1 writes too; row 1's own overflow runs past the table."""
    C = TensorSpec.contiguous
    case = Case(OP, {"page_size": 16}, {"req_to_token": C("int32", (2, 64)), "req_pool_indices": C("int64", (2,)),
                                        "seq_lens": C("int32", (2,)), "page_table": C("int32", (2, 2))},
                {"req_to_token": np.arange(128).reshape(2, 64), "req_pool_indices": np.array([0, 1]),
                 "seq_lens": np.array([40, 40])})
    rec = record(OP)
    assert rec.contract.classify(case)[0] == "out_of_contract"
    assert rec.contract.racy(case)["page_table"].tolist() == [[False, False], [True, False]]


MUTANTS = {
    "page mask off by one": ("mask = (p < pages) &", "mask = (p <= pages) &"),
    "page_table row stride dropped": ("req * out_row_s + p * out_col_s", "req * W + p * out_col_s"),
    "page count rounded down": ("pages = (tl.maximum(n, 0) + PS - 1) // PS", "pages = tl.maximum(n, 0) // PS"),
}


@pytest.mark.parametrize("name", list(MUTANTS))
def test_seeded_defects_in_a_copy_of_the_builtin_are_found(name, tmp_path, device):
    old, new = MUTANTS[name]
    src = KERNEL.read_text()
    assert src.count(old) == 1, old
    src = src.replace(old, new).replace("from ._args import", "from kvfuzz.kernels._args import")
    path = tmp_path / f"mutant_{name.replace(' ', '_')}.py"
    path.write_text(src)
    found = stream_findings(load_target(str(path), device), device, seed=7, n=40, in_contract_only=True, first=True)
    assert any(s.startswith(f"{OP}:") for s in found), found


def release_file(version: str) -> Path:
    """SGLang `version`'s trtllm_mha_page_table.py from kvfuzz's cache (fetched once), or skip."""
    from test_releases import kernel_file

    return kernel_file(version, TRTLLM_MHA)


@pytest.mark.parametrize("version", ["0.5.14", "0.5.23"])
def test_the_grid_is_sglangs(version):
    """kvfuzz's grid is (bs, get_num_mha_kv_index_blocks(W, page_size)), SGLang's builder's."""
    spec = importlib.util.spec_from_file_location(f"trtllm_mha_page_table_{version.replace('.', '_')}",
                                                  release_file(version))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    grid = record(OP).call.grid
    for case in random_cases(OP, 2, 40, in_contract_only=True):
        (bs, W), ps = case.tensors["page_table"].shape, case.scalars["page_size"]
        assert grid({"page_table": np.empty((bs, W))}, case.scalars) == (bs, module.get_num_mha_kv_index_blocks(W, ps))


# (release, the API generation of its kernel): 0.5.14's the first file; 0.5.23's moved to
# sglang/kernels/ops/attention/, with 0.5.16's full_to_swa_numel
@pytest.mark.parametrize("version,generation", [("0.5.14", "0.5.14"), ("0.5.23", "0.5.16")])
def test_a_release_target_offers_the_op_and_runs_in_contract_cases_clean(version, generation, device):
    release_file(version)
    t = load_target(f"sglang=={version}", device)
    b = t.bindings[OP]
    assert b.bare and b.generation == generation and not b.defaulted, b.describe()
    assert t.variants[OP] == "default" and TRTLLM_MHA in t.description
    assert t.entries[OP] is t.modules[TRTLLM_MHA].__dict__["create_trtllm_mha_kv_indices_triton"]
    assert stream_findings(t, device, seed=4, n=20, in_contract_only=True) == set()


def test_releases_before_0_5_14_do_not_offer_the_op_and_fetch_nothing_for_it(device, monkeypatch):
    """0.5.13's backend builds its page table with torch ops: the op is missing with the reason,
    the release's other ops load, and no wheel is downloaded to look for the file."""
    from test_releases import kernel_file

    from kvfuzz.errors import TargetLoadError
    from kvfuzz.targets import wheels

    kernel_file("0.5.13", "kv_indices.py")
    monkeypatch.setattr(wheels, "_pip_download", lambda version, into: pytest.fail(f"downloaded {version}"))
    with pytest.raises(TargetLoadError, match=r"sglang==0\.5\.13 has no trtllm_mha_page_table\.py"):
        wheels.sglang_kernel_file("0.5.13", TRTLLM_MHA)
    t = load_target("sglang==0.5.13", device)
    assert OP not in t.bindings and "flashmla_kv_indices" in t.bindings and "decode_metadata" in t.bindings
    why = t.missing[OP]
    assert why.startswith("not offered by sglang 0.5.13: ") and "torch indexing" in why and "\n" not in why
    assert all(OP in RELEASES[v].not_offered for v in ("0.5.6", "0.5.10", "0.5.12", "0.5.13"))


def test_sglang_writes_past_a_too_narrow_page_table(device):
    """Out of contract: SGLang's kernel takes no width of page_table, so the last request's pages
    past its row are written past the table (what kvfuzz reports for any out-of-contract case); the
    builtin masks them."""
    C = TensorSpec.contiguous
    case = Case(OP, {"page_size": 16}, {"req_to_token": C("int32", (2, 64)), "req_pool_indices": C("int64", (2,)),
                                        "seq_lens": C("int32", (2,)), "page_table": C("int32", (2, 2))},
                {"req_to_token": np.arange(128).reshape(2, 64), "req_pool_indices": np.array([0, 1]),
                 "seq_lens": np.array([20, 40])})
    release_file("0.5.14")
    sigs = judge(case, run_case(load_target("sglang==0.5.14", device), case, device)).signatures()
    assert any(s.endswith("out_of_bounds_write:page_table:after") for s in sigs), sigs
    assert judge(case, run_case(load_target("builtin", device), case, device)).signatures() == []


# ------------------------------------------------------------------ the cache: an older folder

def test_an_older_cache_folder_gets_the_file_with_one_download(tmp_path, monkeypatch, device):
    """A cache folder an older kvfuzz wrote (metadata.py and kv_indices.py, no
    trtllm_mha_page_table.py) gets the file from one more download (a small stand-in wheel
    holding 0.5.14's file and, as the real one, its aiter_unified_attention.py), the others kept
    as they were."""
    from test_releases import kernel_file

    from kvfuzz import targets
    from kvfuzz.targets import wheels

    version, member = "0.5.14", "sglang/srt/layers/attention/triton_ops/trtllm_mha_page_table.py"
    data = release_file(version).read_bytes()
    aiter_member = "sglang/srt/layers/attention/triton_ops/aiter_unified_attention.py"
    aiter = kernel_file(version, "aiter_unified_attention.py").read_bytes()
    folder = tmp_path / "cache" / f"sglang-{version}"
    folder.mkdir(parents=True)
    for name in ("metadata.py", "kv_indices.py"):
        shutil.copy(kernel_file(version, name), folder / name)
    (folder / "SOURCE").write_text(f"sglang=={version} sglang/srt/layers/attention/triton_ops/metadata.py\n")
    calls = []

    def fake(v, into):
        calls.append(v)
        whl = into / f"sglang-{v}-py3-none-any.whl"
        with zipfile.ZipFile(whl, "w") as z:
            z.writestr(member, data)
            z.writestr(aiter_member, aiter)
        return whl

    monkeypatch.setenv("KVFUZZ_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(targets, "_cache", {})
    monkeypatch.setattr(wheels, "_pip_download", fake)
    kept = {name: (folder / name).read_bytes() for name in ("metadata.py", "kv_indices.py")}
    t = load_target(f"sglang=={version}", device)
    assert calls == [version] and OP in t.bindings and "flashmla_kv_indices" in t.bindings
    assert (folder / TRTLLM_MHA).read_bytes() == data
    assert {name: (folder / name).read_bytes() for name in kept} == kept
    assert f"{TRTLLM_MHA}: sglang=={version} {member}" in (folder / "SOURCE").read_text().splitlines()
    assert wheels.sglang_kernel_file(version, TRTLLM_MHA) == folder / TRTLLM_MHA and calls == [version]


def test_a_short_repro_imports_the_releases_module():
    from kvfuzz.short_repro import _sglang_module

    where = {v: _sglang_module(f"sglang=={v}", TRTLLM_MHA) for v in ("0.5.14", "0.5.16", "0.5.23")}
    assert where == {"0.5.14": "sglang.srt.layers.attention.triton_ops.trtllm_mha_page_table",
                     "0.5.16": "sglang.kernels.ops.kvcache.trtllm_mha_page_table",
                     "0.5.23": "sglang.kernels.ops.attention.trtllm_mha_page_table"}
