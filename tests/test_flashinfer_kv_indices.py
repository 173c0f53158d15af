"""create_flashinfer_kv_indices_triton (SGLang's FlashInfer KV-index gather) as the op
`flashinfer_kv_indices`: the builtin kernel against its contract (a short campaign and a seeded
stream), the two oracles on generated cases, seeded defects in a copy of the builtin found, and
SGLang 0.5.14's and 0.5.23's kv_indices.py (targeted by path: sglang==X loads only metadata.py)
run without findings."""

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

OP = "flashinfer_kv_indices"
KERNEL = Path(__file__).resolve().parents[1] / "kvfuzz" / "kernels" / "flashinfer_kv_indices.py"
RELEASE_FILES = {"0.5.14": "sglang/srt/layers/attention/triton_ops/kv_indices.py",
                 "0.5.23": "sglang/kernels/ops/attention/kv_indices.py"}


def stream_findings(target, device, seed=3, n=60, in_contract_only=False):
    """The signatures a seeded stream of n cases (one in five out of contract) finds."""
    out = set()
    for case in random_cases(OP, seed, n, in_contract_only):
        v = judge(case, run_case(target, case, device))
        assert v.not_target is None, (case.describe(), v.not_target)
        out |= set(v.signatures())
    return out


def test_the_builtin_passes_a_short_campaign(device):
    from kvfuzz.campaign import CampaignConfig, run_campaign

    res = run_campaign(CampaignConfig(ops=[OP], ops_named=True, device=device, budget_s=6, isolate=False, seed=5,
                                      minimize_budget_s=0))
    (stats,) = res.stats
    assert stats.cases > 20 and res.saved == [], (stats, res.saved)


def test_the_builtin_finds_nothing_on_a_seeded_stream(builtin_target, device):
    b = builtin_target.bindings[OP]
    assert b.generation == "0.5.14" and not b.bare
    assert stream_findings(builtin_target, device) == set()


def test_the_oracles_agree_on_generated_cases():
    rec = record(OP)
    seen = set()
    for case in random_cases(OP, 11, 150, in_contract_only=True):
        status, reasons, expected = rec.contract.assess(case)
        assert status == "in_contract", reasons
        req = rec.contract.cells(case)["kv_indices"].required
        got = rec.torch_ref(case, "cpu")["kv_indices"].numpy()
        assert np.array_equal(got[req], expected.values["kv_indices"][req]), case.describe()
        seen |= rec.generator.features(case)
    assert {"start", "no_start", "edge:len:512", "edge:len:513"} <= seen


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
    "wrong indptr offset": ("tl.load(indptr + req * indptr_s)", "tl.load(indptr + req * indptr_s + 1)"),
}


@pytest.mark.parametrize("name", list(MUTANTS))
def test_seeded_defects_in_a_copy_of_the_builtin_are_found(name, tmp_path, device):
    old, new = MUTANTS[name]
    src = KERNEL.read_text()
    assert src.count(old) == 1, old
    src = src.replace(old, new).replace("from ._args import", "from kvfuzz.kernels._args import")
    path = tmp_path / f"mutant_{name.replace(' ', '_')}.py"
    path.write_text(src)
    found = stream_findings(load_target(str(path), device), device, seed=7, n=80)
    assert any(s.startswith(f"{OP}:") for s in found), found


def release_file(version: str, tmp_path: Path) -> Path:
    """SGLang `version`'s kv_indices.py, from its wheel (pip download), or skip."""
    proc = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--quiet",
                           "--dest", str(tmp_path), f"sglang=={version}"], capture_output=True, text=True)
    wheels = list(tmp_path.glob("sglang-*.whl"))
    if proc.returncode or not wheels:
        pytest.skip(f"sglang=={version} cannot be fetched: {proc.stderr.strip()[-200:]}")
    out = tmp_path / f"kv_indices_{version.replace('.', '_')}.py"
    with zipfile.ZipFile(wheels[0]) as wheel:
        out.write_bytes(wheel.read(RELEASE_FILES[version]))
    return out


@pytest.mark.parametrize("version,generation", [("0.5.14", "0.5.14"), ("0.5.23", "0.5.22")])
def test_the_release_file_runs_without_findings(version, generation, tmp_path, device):
    t = load_target(str(release_file(version, tmp_path)), device)
    b = t.bindings[OP]
    assert b.bare and b.generation == generation and not b.defaulted, b.describe()
    assert t.variants[OP] == "default"
    assert stream_findings(t, device, seed=4, n=40, in_contract_only=True) == set()


def test_sglang_writes_past_a_too_short_kv_indices(tmp_path, device):
    """Out of contract: SGLang's kernel takes no size of kv_indices, so offsets past it are written
    there (what kvfuzz reports for any out-of-contract case); the builtin masks them."""
    from kvfuzz.strategies.draw import RandomDraw

    g = record(OP).generator
    d = RandomDraw("too short")
    k = g.compile_class(d)
    case = g.violation(d, g.in_class(d, k), k, "kv_indices_too_short")
    t = load_target(str(release_file("0.5.14", tmp_path)), device)
    sigs = judge(case, run_case(t, case, device)).signatures()
    assert any(s.endswith("out_of_bounds_write:kv_indices:after") for s in sigs), sigs
    assert judge(case, run_case(load_target("builtin", device), case, device)).signatures() == []


def test_sglang_releases_show_the_op_missing_with_the_reason(device):
    from kvfuzz.errors import TargetLoadError
    from kvfuzz.targets.wheels import sglang_kernel_file

    try:
        sglang_kernel_file("0.5.14")
    except TargetLoadError as exc:
        pytest.skip(str(exc))
    t = load_target("sglang==0.5.14", device)
    assert OP not in t.bindings and "kv_indices.py" in t.missing[OP], t.missing
