"""create_chunked_prefix_cache_kv_indices (SGLang's MLA chunked-prefix KV-index gather) as the op
`chunked_prefix_kv_indices`: the builtin kernel against its contract (a short campaign and a
seeded stream), the two oracles on generated cases, seeded defects in a copy of the builtin
found, and SGLang releases: `sglang==X` loads the kernel from the release's kv_indices.py (0.5.10's
extracted from ForwardBatch's DeepSeek MHA mixin, 0.5.14's and 0.5.23's the wheel's file) and a
short in-contract stream runs clean; 0.5.13, whose kv_indices.py lacks it, does not offer the op
and says why. The release files come from the PyPI wheels through kvfuzz's cache, as in
tests/test_releases.py."""

from __future__ import annotations

import pytest

from kvfuzz.ops import record
from kvfuzz.targets import load_target

from kv_index_ops import builtin_finds_nothing, oracles_agree, release_file, release_target_runs_clean, \
    seeded_defect_found, short_campaign, violation, violations_leave_contract, writes_past_on_0_5_14

OP = "chunked_prefix_kv_indices"


@pytest.mark.thorough  # seconds of processes and campaigns: CI's thorough stage
def test_the_builtin_passes_a_short_campaign(device):
    short_campaign(OP, device, budget_s=2, min_cases=10)


def test_the_builtin_finds_nothing_on_a_seeded_stream(builtin_target, device):
    builtin_finds_nothing(OP, builtin_target, device)


def test_the_oracles_agree_on_generated_cases():
    seen = oracles_agree(OP, 80)
    assert {"cu_bs", "cu_bs_plus_1", "chunk:prefix_ended", "edge:len:512", "edge:len:513"} <= seen


def test_each_violation_leaves_the_contract():
    violations_leave_contract(OP)


MUTANTS = {
    "length mask off by one": ("mask = (j < n) &", "mask = (j < n - 1) &"),
    "row stride dropped": ("row * row_stride + col", "row * C + col"),
    "tile count off by one": ("grid = (bs, triton.cdiv(C, TILE))", "grid = (bs, triton.cdiv(C - 1, TILE))"),
}


@pytest.mark.parametrize("name", list(MUTANTS))
def test_seeded_defects_in_a_copy_of_the_builtin_are_found(name, tmp_path, device):
    seeded_defect_found(OP, *MUTANTS[name], tmp_path, device, name, seed=7, n=40, in_contract_only=True, first=True)


# 0.5.10: extracted (0.5.8 - 0.5.12's file, the kernel from forward_batch_deepseek_mha_mixin.py);
# 0.5.14: the kernel's first kv_indices.py; 0.5.23: moved to sglang/kernels/ops/attention/
@pytest.mark.parametrize("version", ["0.5.10", "0.5.14", "0.5.23"])
def test_a_release_target_offers_the_op_and_runs_in_contract_cases_clean(version, device):
    release_target_runs_clean(OP, version, "0.5.14", device)


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
    writes_past_on_0_5_14(OP, violation(OP, "kv_indices_too_short", "too short"), device)


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
