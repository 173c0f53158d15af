"""create_chunked_prefix_cache_kv_indices (SGLang's MLA chunked-prefix KV-index gather) as the op
`chunked_prefix_kv_indices`: the builtin kernel against its contract (a short campaign and a
seeded stream), the two oracles on generated cases, seeded defects in a copy of the builtin
found, and SGLang releases: `sglang==X` loads the kernel from the release's kv_indices.py (0.5.10's
extracted from ForwardBatch's DeepSeek MHA mixin, 0.5.14's and 0.5.23's the wheel's file) and a
short in-contract stream runs clean; 0.5.13, whose kv_indices.py lacks it, does not offer the op
and says why. The release files come from the PyPI wheels through kvfuzz's cache, as in
tests/test_releases.py."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kvfuzz.execute import run_case
from kvfuzz.judge import judge
from kvfuzz.ops import record
from kvfuzz.strategies import random_cases
from kvfuzz.targets import load_target

OP = "chunked_prefix_kv_indices"
KERNEL = Path(__file__).resolve().parents[1] / "kvfuzz" / "kernels" / "chunked_prefix_kv_indices.py"


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
        req = rec.contract.cells(case)["chunk_kv_indices"].required
        got = rec.torch_ref(case, "cpu")["chunk_kv_indices"].numpy()
        assert np.array_equal(got[req], expected.values["chunk_kv_indices"][req]), case.describe()
        seen |= rec.generator.features(case)
    assert {"cu_bs", "cu_bs_plus_1", "chunk:prefix_ended", "edge:len:512", "edge:len:513"} <= seen


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
    "length mask off by one": ("mask = (j < n) &", "mask = (j < n - 1) &"),
    "row stride dropped": ("row * row_stride + col", "row * C + col"),
    "tile count off by one": ("grid = (bs, triton.cdiv(C, TILE))", "grid = (bs, triton.cdiv(C - 1, TILE))"),
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


# 0.5.10: extracted (0.5.8 - 0.5.12's file, the kernel from forward_batch_deepseek_mha_mixin.py);
# 0.5.14: the kernel's first kv_indices.py; 0.5.23: moved to sglang/kernels/ops/attention/
@pytest.mark.parametrize("version", ["0.5.10", "0.5.14", "0.5.23"])
def test_a_release_target_offers_the_op_and_runs_in_contract_cases_clean(version, device):
    release_file(version)
    t = load_target(f"sglang=={version}", device)
    b = t.bindings[OP]
    assert b.bare and b.generation == "0.5.14" and not b.defaulted, b.describe()
    assert t.variants[OP] == "default" and "kv_indices.py" in t.description
    assert t.entries[OP] is t.modules["kv_indices.py"].__dict__["create_chunked_prefix_cache_kv_indices"]
    assert stream_findings(t, device, seed=4, n=20, in_contract_only=True) == set()


def test_0_5_13_does_not_offer_the_op_and_says_why(device):
    """0.5.13's kv_indices.py predates the kernel's move into it (it is still in the MHA mixin):
    the op is missing, not broken, and the file's other ops load."""
    release_file("0.5.13")
    t = load_target("sglang==0.5.13", device)
    assert OP not in t.bindings and "flashmla_kv_indices" in t.bindings and "flashinfer_kv_indices" in t.bindings
    why = t.missing[OP]
    assert why.startswith("not offered by sglang 0.5.13: ") and "forward_batch_deepseek_mha_mixin.py" in why, why
    assert "\n" not in why


def test_the_release_file_by_path_offers_the_op(device):
    t = load_target(str(release_file("0.5.14")), device)
    assert t.bindings[OP].generation == "0.5.14" and t.modules == {}
    assert set(t.bindings) == {"flashinfer_kv_indices", "chunked_prefix_kv_indices", "flashmla_kv_indices"}


def test_sglang_writes_past_a_too_short_output(device):
    """Out of contract: SGLang's kernel takes no size of chunk_kv_indices, so offsets past it are
    written there (what kvfuzz reports for any out-of-contract case); the builtin masks them."""
    from kvfuzz.strategies.draw import RandomDraw

    g = record(OP).generator
    d = RandomDraw("too short")
    k = g.compile_class(d)
    case = g.violation(d, g.in_class(d, k), k, "kv_indices_too_short")
    release_file("0.5.14")
    t = load_target("sglang==0.5.14", device)
    sigs = judge(case, run_case(t, case, device)).signatures()
    assert any(s.endswith("out_of_bounds_write:chunk_kv_indices:after") for s in sigs), sigs
    assert judge(case, run_case(load_target("builtin", device), case, device)).signatures() == []


def test_a_short_repro_imports_the_kernel_from_where_the_release_keeps_it():
    from kvfuzz.short_repro import _sglang_module

    entry = record(OP).contract.entry
    where = {v: _sglang_module(f"sglang=={v}", "kv_indices.py", entry) for v in ("0.5.6", "0.5.8", "0.5.14", "0.5.23")}
    assert where == {"0.5.6": "sglang.srt.model_executor.forward_batch_info",
                     "0.5.8": "sglang.srt.model_executor.forward_batch_deepseek_mha_mixin",
                     "0.5.14": "sglang.srt.layers.attention.triton_ops.kv_indices",
                     "0.5.23": "sglang.kernels.ops.attention.kv_indices"}
    assert _sglang_module("sglang==0.5.6", "kv_indices.py", "create_flashmla_kv_indices_triton") == \
        "sglang.srt.layers.attention.utils"
