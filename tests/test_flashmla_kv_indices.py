"""create_flashmla_kv_indices_triton (SGLang's MLA page-table builder: FlashMLA, CUTLASS MLA,
TRT-LLM MLA, AITER) as the op `flashmla_kv_indices`: the builtin kernel against its contract (a
short campaign and a seeded stream), the two oracles on generated cases, the launch grid as
SGLang's get_num_kv_index_blocks_flashmla gives it, seeded defects in a copy of the builtin
found, and SGLang releases: `sglang==X` loads the kernel from the release's kv_indices.py (0.5.10's
extracted from the attention utils.py, 0.5.13's, 0.5.14's and 0.5.23's the wheel's file) and a
short in-contract stream runs clean. The release files come from the PyPI wheels through kvfuzz's
cache, as in tests/test_releases.py."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from kvfuzz.execute import run_case
from kvfuzz.judge import judge
from kvfuzz.ops import record
from kvfuzz.strategies import random_cases
from kvfuzz.targets import load_target

OP = "flashmla_kv_indices"
KERNEL = Path(__file__).resolve().parents[1] / "kvfuzz" / "kernels" / "flashmla_kv_indices.py"


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


def test_the_builtin_passes_a_short_campaign(device):
    from kvfuzz.campaign import CampaignConfig, run_campaign

    res = run_campaign(CampaignConfig(ops=[OP], ops_named=True, device=device, budget_s=2, isolate=False, seed=5,
                                      minimize_budget_s=0))
    (stats,) = res.stats
    assert stats.cases > 10 and res.saved == [], (stats, res.saved)


def test_the_builtin_finds_nothing_on_a_seeded_stream(builtin_target, device):
    b = builtin_target.bindings[OP]
    assert b.generation == "0.5.14" and not b.bare
    assert stream_findings(builtin_target, device) == set()


def test_the_oracles_agree_on_generated_cases():
    rec = record(OP)
    seen = set()
    for case in random_cases(OP, 11, 80, in_contract_only=True):
        status, reasons, expected = rec.contract.assess(case)
        assert status == "in_contract", reasons
        req = rec.contract.cells(case)["kv_indices"].required
        got = rec.torch_ref(case, "cpu")["kv_indices"].numpy()
        assert np.array_equal(got[req], expected.values["kv_indices"][req]), case.describe()
        seen |= rec.generator.features(case)
    assert {"start", "no_start", "page_size:64", "page_size:1", "edge:len:page+1", "width:full"} <= seen


def test_each_violation_leaves_the_contract():
    rec = record(OP)
    from kvfuzz.strategies.draw import RandomDraw

    for kind in rec.generator.violations:
        for i in range(6):
            d = RandomDraw(f"violation:{kind}:{i}")
            k = rec.generator.compile_class(d)
            case = rec.generator.violation(d, rec.generator.in_class(d, k), k, kind)
            assert rec.contract.classify(case)[0] == "out_of_contract", (kind, case.describe())


MUTANTS = {
    "page mask off by one": ("mask = (p < pages) &", "mask = (p <= pages) &"),
    "kv_indices row stride dropped": ("req * out_row_s + p", "req * W + p"),
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
    """SGLang `version`'s kv_indices.py from kvfuzz's cache (fetched once), or skip."""
    from test_releases import kernel_file

    return kernel_file(version, "kv_indices.py")


@pytest.mark.parametrize("version", ["0.5.14", "0.5.23"])
def test_the_grid_is_sglangs(version):
    """kvfuzz's grid is (bs, get_num_kv_index_blocks_flashmla(W, page_size)), SGLang's helper."""
    spec = importlib.util.spec_from_file_location(f"kv_indices_{version.replace('.', '_')}",
                                                  release_file(version))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    grid = record(OP).call.grid
    for case in random_cases(OP, 2, 40, in_contract_only=True):
        W, ps = case.tensors["kv_indices"].shape[1], case.scalars["page_size"]
        t = {"kv_indices": np.empty((1, W)), "req_pool_indices": np.empty(case.tensors["req_pool_indices"].shape)}
        assert grid(t, case.scalars) == (t["req_pool_indices"].shape[0],
                                         module.get_num_kv_index_blocks_flashmla(W, ps)), (W, ps)


# (release, the API generation of its kernel): 0.5.10's extracted from utils.py (one program per
# request looping over the blocks, launched on kvfuzz's grid: the same cells), 0.5.14's the seed's,
# 0.5.23's moved to sglang/kernels/ops/attention/ (0.5.19 went back to 0.5.14's signature)
RELEASES = [("0.5.10", "0.5.14"), ("0.5.14", "0.5.14"), ("0.5.23", "0.5.14")]


@pytest.mark.parametrize("version,generation", RELEASES)
def test_a_release_target_offers_the_op_and_runs_in_contract_cases_clean(version, generation, device):
    release_file(version)
    t = load_target(f"sglang=={version}", device)
    b = t.bindings[OP]
    assert b.bare and b.generation == generation and not b.defaulted, b.describe()
    assert t.variants[OP] == "default" and "kv_indices.py" in t.description
    assert t.entries[OP] is t.modules["kv_indices.py"].__dict__["create_flashmla_kv_indices_triton"]
    assert stream_findings(t, device, seed=4, n=20, in_contract_only=True) == set()


def test_0_5_13_and_0_5_17_offer_the_op_by_their_generations(device):
    """0.5.13's kv_indices.py lacks the chunked-prefix kernel, not this one; 0.5.17 added v2p_ptr
    and PAGE_MULT (left at their defaults)."""
    for version, generation in (("0.5.13", "0.5.14"), ("0.5.17", "0.5.17")):
        release_file(version)
        b = load_target(f"sglang=={version}", device).bindings[OP]
        assert b.generation == generation and not b.defaulted, (version, b.describe())


def test_sglang_writes_past_a_kv_indices_with_too_few_rows(device):
    """Out of contract: SGLang's kernel takes no row count of kv_indices, so request bs - 1 writes
    past it (what kvfuzz reports for any out-of-contract case); the builtin masks it."""
    from kvfuzz.strategies.draw import RandomDraw

    g = record(OP).generator
    release_file("0.5.14")
    t = load_target("sglang==0.5.14", device)
    for i in range(20):  # the first such case whose last request has a page to write
        d = RandomDraw(f"too few rows {i}")
        k = g.compile_class(d)
        case = g.violation(d, g.in_class(d, k), k, "kv_indices_too_few_rows")
        if case.tensors["kv_indices"].shape[1] and int(case.values["paged_kernel_lens"][-1]) > 0:
            break
    sigs = judge(case, run_case(t, case, device)).signatures()
    assert any(s.endswith("out_of_bounds_write:kv_indices:after") for s in sigs), sigs
    assert judge(case, run_case(load_target("builtin", device), case, device)).signatures() == []
