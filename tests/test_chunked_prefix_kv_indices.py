"""create_chunked_prefix_cache_kv_indices (SGLang's MLA chunked-prefix KV-index gather) as the op
`chunked_prefix_kv_indices`: the builtin kernel against its contract (a short campaign and a
seeded stream), the two oracles on generated cases, seeded defects in a copy of the builtin
found, and SGLang 0.5.14's and 0.5.23's kv_indices.py (by path) run without findings, and
sglang==X loads the op from the release's kv_indices.py."""

from __future__ import annotations

import subprocess
import sys
import zipfile
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
RELEASE_FILES = {"0.5.14": "sglang/srt/layers/attention/triton_ops/kv_indices.py",
                 "0.5.23": "sglang/kernels/ops/attention/kv_indices.py"}


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


@pytest.fixture(scope="module")
def release_files(tmp_path_factory):
    """version -> SGLang's kv_indices.py from its wheel (pip download), or why it cannot be fetched."""
    out = {}
    for version, inside in RELEASE_FILES.items():
        where = tmp_path_factory.mktemp(f"sglang_{version.replace('.', '_')}")
        proc = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                               "--quiet", "--dest", str(where), f"sglang=={version}"], capture_output=True, text=True)
        wheels = list(where.glob("sglang-*.whl"))
        if proc.returncode or not wheels:
            out[version] = f"sglang=={version} cannot be fetched: {proc.stderr.strip()[-200:]}"
            continue
        path = where / "kv_indices.py"
        with zipfile.ZipFile(wheels[0]) as wheel:
            path.write_bytes(wheel.read(inside))
        out[version] = path
    return out


@pytest.mark.parametrize("version", list(RELEASE_FILES))
def test_the_release_file_runs_without_findings(version, release_files, device):
    path = release_files[version]
    if isinstance(path, str):
        pytest.skip(path)
    t = load_target(str(path), device)
    b = t.bindings[OP]
    assert b.bare and b.generation == "0.5.14" and not b.defaulted, b.describe()
    assert t.variants[OP] == "default"
    assert stream_findings(t, device, seed=4, n=40, in_contract_only=True) == set()


def test_sglang_writes_past_a_too_short_output(release_files, device):
    """Out of contract: SGLang's kernel takes no size of chunk_kv_indices, so offsets past it are
    written there (what kvfuzz reports for any out-of-contract case); the builtin masks them."""
    from kvfuzz.strategies.draw import RandomDraw

    if isinstance(release_files["0.5.14"], str):
        pytest.skip(release_files["0.5.14"])
    g = record(OP).generator
    d = RandomDraw("too short")
    k = g.compile_class(d)
    case = g.violation(d, g.in_class(d, k), k, "kv_indices_too_short")
    t = load_target(str(release_files["0.5.14"]), device)
    sigs = judge(case, run_case(t, case, device)).signatures()
    assert any(s.endswith("out_of_bounds_write:chunk_kv_indices:after") for s in sigs), sigs
    assert judge(case, run_case(load_target("builtin", device), case, device)).signatures() == []


def test_sglang_releases_load_the_op_from_kv_indices(device):
    """sglang==0.5.14 loads the op from its kv_indices.py; 0.5.13's kv_indices.py lacks the kernel
    (still in forward_batch_deepseek_mha_mixin.py): not offered, with the reason."""
    from kvfuzz.errors import TargetLoadError
    from kvfuzz.targets.wheels import sglang_kernel_file

    try:
        for version in ("0.5.13", "0.5.14"):
            sglang_kernel_file(version, "kv_indices.py")
    except TargetLoadError as exc:
        pytest.skip(str(exc))
    b = load_target("sglang==0.5.14", device).bindings[OP]
    assert b.bare and b.generation == "0.5.14" and not b.defaulted, b.describe()
    t = load_target("sglang==0.5.13", device)
    assert OP not in t.bindings and t.missing[OP].startswith("not offered by sglang 0.5.13: "), t.missing


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
