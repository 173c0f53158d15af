"""create_flashinfer_kv_indices_triton (SGLang's FlashInfer KV-index gather) as the op
`flashinfer_kv_indices`: the builtin kernel against its contract (a short campaign and a seeded
stream), the two oracles on generated cases, seeded defects in a copy of the builtin found, and
SGLang releases: `sglang==X` loads the release's kv_indices.py beside its metadata.py (0.5.6's
extracted from the attention utils.py), in-contract cases run clean, a cache folder an older
kvfuzz wrote (metadata.py only) gets kv_indices.py with one more download, and without network
the op is missing with a one-line reason saying what to copy. The release files come from the
PyPI wheels through kvfuzz's cache, as in tests/test_releases.py."""

from __future__ import annotations

import shutil
import zipfile
from pathlib import Path

import pytest

from kvfuzz.execute import run_case
from kvfuzz.judge import judge
from kvfuzz.ops import record
from kvfuzz.strategies import random_cases
from kvfuzz.targets import load_target

from kv_index_ops import oracles_agree, release_file, \
    seeded_defect_found, short_campaign, violation, violations_leave_contract, writes_past_on_0_5_14
from sampling import sampled

OP = "flashinfer_kv_indices"


def stream_findings(op, target, device, seed=3, n=30, in_contract_only=False, variant=None) -> set[str]:
    """The signatures a seeded stream of n cases of `variant` (one in five out of contract) finds on `target`."""
    out = set()
    for case in random_cases(op, seed, n, in_contract_only, variant=variant):
        v = judge(case, run_case(target, case, device))
        assert v.not_target is None, (case.describe(), v.not_target)
        out |= set(v.signatures())
    return out


@pytest.mark.slow  # campaign-sized: CI's slow stage runs it (.ci/run)
def test_the_builtin_passes_a_short_campaign(device):
    short_campaign(OP, device, budget_s=6, min_cases=20)


@pytest.mark.slow  # campaign-sized: CI's slow stage runs it (.ci/run)
def test_the_builtin_finds_nothing_on_a_seeded_stream(builtin_target, device):
    """The builtin takes SGLang 0.5.23's parameters (by name, every mode): a stream of each variant runs clean."""
    b = builtin_target.bindings[OP]
    assert b.generation == "0.5.22" and not b.bare and not b.defaulted, b.describe()
    assert builtin_target.variants[OP] == "token_mapping"
    for variant in ("default", "entry_page", "token_blocks", "token_mapping"):
        assert stream_findings(OP, builtin_target, device, n=30, variant=variant) == set(), variant


def test_the_oracles_agree_on_generated_cases():
    seen = oracles_agree(OP, 150)
    assert {"start", "no_start", "edge:len:512", "edge:len:513"} <= seen


def test_each_violation_leaves_the_contract():
    violations_leave_contract(OP)


MUTANTS = {
    "length mask off by one": ("mask = (j < n) &", "mask = (j < n - 1) &"),
    "row stride dropped": ("row * row_stride + col", "row * C + col"),
    "wrong indptr offset": ("tl.load(indptr + req * indptr_s)", "tl.load(indptr + req * indptr_s + 1)"),
}


@pytest.mark.parametrize("name", sampled("flashinfer mutants", list(MUTANTS), share=3))
def test_seeded_defects_in_a_copy_of_the_builtin_are_found(name, tmp_path, device):
    seeded_defect_found(OP, *MUTANTS[name], tmp_path, device, name, seed=7, n=80)


# (release, the API generation of its kernel, the variant of its modes): 0.5.6's extracted from
# utils.py, 0.5.14's the seed's, 0.5.23's moved to sglang/kernels/ops/attention/
RELEASES = [("0.5.6", "0.5.14", "default"), ("0.5.14", "0.5.14", "default"), ("0.5.23", "0.5.22", "token_mapping")]


@pytest.mark.parametrize("version,generation,variant", RELEASES)
def test_a_release_target_offers_the_op_and_runs_in_contract_cases_clean(version, generation, variant, device):
    release_file(version)
    t = load_target(f"sglang=={version}", device)
    b = t.bindings[OP]
    assert b.bare and b.generation == generation and not b.defaulted, b.describe()
    assert t.variants[OP] == variant and "kv_indices.py" in t.description
    assert t.entries[OP] is t.modules["kv_indices.py"].__dict__[record(OP).contract.entry]
    assert stream_findings(OP, t, device, seed=4, n=30, in_contract_only=True, variant=variant) == set()
    assert t.modules["kv_indices.py"] is not t.module
    assert t.entries["decode_metadata" if version != "0.5.6" else "num_kv_splits"]  # metadata.py's ops too


def test_the_release_file_by_path_offers_the_kv_indices_ops_alone(device):
    t = load_target(str(release_file("0.5.14")), device)
    assert set(t.bindings) == {OP, "chunked_prefix_kv_indices", "flashmla_kv_indices"}
    assert t.bindings[OP].generation == "0.5.14" and t.modules == {}


def test_sglang_writes_past_a_too_short_kv_indices(device):
    """Out of contract: SGLang's kernel takes no size of kv_indices, so offsets past it are written
    there (what kvfuzz reports for any out-of-contract case); the builtin masks them."""
    writes_past_on_0_5_14(OP, violation(OP, "kv_indices_too_short", "too short"), device)


# ------------------------------------------------------------------ the cache: upgrade and offline

VERSION = "0.5.14"
MEMBER = "sglang/srt/layers/attention/triton_ops/kv_indices.py"
TRTLLM_MEMBER = "sglang/srt/layers/attention/triton_ops/trtllm_mha_page_table.py"
AITER_MEMBER = "sglang/srt/layers/attention/triton_ops/aiter_unified_attention.py"
OFFLINE = "ERROR: No matching distribution found for sglang==0.5.14"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty kvfuzz cache, and pip's downloads faked and counted (`calls`: the versions asked
    for): a download gives a small wheel holding 0.5.14's kv_indices.py at `member`, its
    trtllm_mha_page_table.py and aiter_unified_attention.py (as the real wheel does; no
    metadata.py), or, `online` False, fails with pip's last line OFFLINE."""
    from test_releases import kernel_file

    from kvfuzz import targets
    from kvfuzz.targets import wheels
    from kvfuzz.targets.wheels import sglang_kernel_file

    class Pip:
        calls: list = []
        online = True
        member = MEMBER
        kv = release_file(VERSION).read_bytes()
        trtllm = sglang_kernel_file(VERSION, "trtllm_mha_page_table.py").read_bytes()
        aiter = sglang_kernel_file(VERSION, "aiter_unified_attention.py").read_bytes()
        metadata = kernel_file(VERSION)  # the real cache's, read before the cache moves
        folder = tmp_path / "cache" / f"sglang-{VERSION}"

    def fake(version, into):
        Pip.calls.append(version)
        if not Pip.online:
            return OFFLINE
        whl = into / f"sglang-{version}-py3-none-any.whl"
        with zipfile.ZipFile(whl, "w") as z:
            z.writestr(Pip.member, Pip.kv)
            z.writestr(TRTLLM_MEMBER, Pip.trtllm)
            z.writestr(AITER_MEMBER, Pip.aiter)
        return whl

    monkeypatch.setenv("KVFUZZ_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(targets, "_cache", {})  # load the target again, from this cache
    monkeypatch.setattr(wheels, "_pip_download", fake)
    return Pip


def older_folder(cache, folder: Path | None = None) -> bytes:
    """A cache folder as an older kvfuzz left it: metadata.py and SOURCE only."""
    folder = folder or cache.folder
    folder.mkdir(parents=True)
    shutil.copy(cache.metadata, folder / "metadata.py")
    (folder / "SOURCE").write_text(f"sglang=={VERSION} sglang/srt/layers/attention/triton_ops/metadata.py\n")
    return (folder / "metadata.py").read_bytes()


def test_an_older_cache_folder_gets_the_files_it_lacks_with_one_download(cache, device):
    from kvfuzz.targets.wheels import sglang_kernel_file

    metadata = older_folder(cache)
    t = load_target(f"sglang=={VERSION}", device)
    assert cache.calls == [VERSION] and OP in t.bindings and "decode_metadata" in t.bindings
    assert (cache.folder / "kv_indices.py").read_bytes() == release_file(VERSION).read_bytes()
    assert (cache.folder / "metadata.py").read_bytes() == metadata  # kept as it was
    source = (cache.folder / "SOURCE").read_text().splitlines()
    assert source[0].endswith("metadata.py") and f"kv_indices.py: sglang=={VERSION} {MEMBER}" in source[1:]
    assert sglang_kernel_file(VERSION, "kv_indices.py") == cache.folder / "kv_indices.py"
    assert cache.calls == [VERSION]  # cached now: no second download


def test_offline_an_older_folder_offers_the_metadata_ops_and_says_what_to_copy(cache, device):
    from kvfuzz.errors import TargetLoadError
    from kvfuzz.targets.wheels import sglang_kernel_file

    older_folder(cache)
    cache.online = False
    with pytest.raises(TargetLoadError) as err:
        sglang_kernel_file(VERSION, "kv_indices.py")
    line = str(err.value)
    assert "\n" not in line and OFFLINE in line and "cannot fetch" in line
    assert f"copy sglang-{VERSION}/kv_indices.py there" in line and str(cache.folder) in line
    t = load_target(f"sglang=={VERSION}", device)
    assert "decode_metadata" in t.bindings and OP not in t.bindings and t.missing[OP] == line
    assert not (cache.folder / "kv_indices.py").exists()


def test_offline_without_a_cache_folder_says_to_copy_the_folder(cache, device):
    from kvfuzz.errors import TargetLoadError

    cache.online = False
    with pytest.raises(TargetLoadError) as err:
        load_target(f"sglang=={VERSION}", device)
    line = str(err.value)
    assert "\n" not in line and "cannot fetch" in line and f"copy the folder sglang-{VERSION}/ into" in line


def test_a_wheel_without_the_file_leaves_the_op_missing(cache, device):
    """A release kvfuzz does not know, whose wheel has no kv_indices.py at any place kvfuzz knows."""
    from kvfuzz.errors import TargetLoadError
    from kvfuzz.targets.wheels import sglang_kernel_file

    older_folder(cache, cache.folder.parent / "sglang-9.9.9")
    cache.member = "sglang/elsewhere/kv_indices.py"
    with pytest.raises(TargetLoadError, match=r"sglang==9\.9\.9: no kv_indices\.py in the wheel \(looked for "):
        sglang_kernel_file("9.9.9", "kv_indices.py")
    t = load_target("sglang==9.9.9", device)
    assert "decode_metadata" in t.bindings and "no kv_indices.py in the wheel" in t.missing[OP]


def test_a_short_repro_imports_the_releases_kv_indices_module():
    from kvfuzz.short_repro import _sglang_module

    where = {v: _sglang_module(f"sglang=={v}", "kv_indices.py") for v in ("0.5.6", "0.5.13", "0.5.16", "0.5.23")}
    assert where == {"0.5.6": "sglang.srt.layers.attention.utils",
                     "0.5.13": "sglang.srt.layers.attention.triton_ops.kv_indices",
                     "0.5.16": "sglang.kernels.ops.kvcache.kv_indices",
                     "0.5.23": "sglang.kernels.ops.attention.kv_indices"}
    assert _sglang_module("builtin", "kv_indices.py") == where["0.5.23"]
    assert _sglang_module("sglang==0.5.14") == "sglang.srt.layers.attention.triton_ops.metadata"
