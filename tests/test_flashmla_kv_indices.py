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

import numpy as np
import pytest

from kvfuzz.ops import record
from kvfuzz.strategies import random_cases
from kvfuzz.targets import load_target

from kv_index_ops import builtin_finds_nothing, oracles_agree, release_file, release_target_runs_clean, \
    seeded_defect_found, short_campaign, violation, violations_leave_contract, writes_past_on_0_5_14

OP = "flashmla_kv_indices"


@pytest.mark.thorough  # seconds of processes and campaigns: CI's thorough stage
def test_the_builtin_passes_a_short_campaign(device):
    short_campaign(OP, device, budget_s=2, min_cases=10)


def test_the_builtin_finds_nothing_on_a_seeded_stream(builtin_target, device):
    builtin_finds_nothing(OP, builtin_target, device, generation="0.5.17")  # v2p_ptr, PAGE_MULT


def test_the_oracles_agree_on_generated_cases():
    seen = oracles_agree(OP, 80)
    assert {"start", "no_start", "page_size:64", "page_size:1", "edge:len:page+1", "width:full"} <= seen


def test_each_violation_leaves_the_contract():
    violations_leave_contract(OP)


MUTANTS = {
    "page mask off by one": ("mask = (p < pages) &", "mask = (p <= pages) &"),
    "kv_indices row stride dropped": ("req * out_row_s + p", "req * W + p"),
    "page count rounded down": ("pages = (tl.maximum(n, 0) + PS - 1) // PS", "pages = tl.maximum(n, 0) // PS"),
}


@pytest.mark.parametrize("name", list(MUTANTS))
def test_seeded_defects_in_a_copy_of_the_builtin_are_found(name, tmp_path, device):
    seeded_defect_found(OP, *MUTANTS[name], tmp_path, device, name, seed=7, n=40, in_contract_only=True, first=True)


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
    release_target_runs_clean(OP, version, generation, device)


def test_0_5_13_and_0_5_17_offer_the_op_by_their_generations(device):
    """0.5.13's kv_indices.py lacks the chunked-prefix kernel, not this one; 0.5.17 added v2p_ptr
    and PAGE_MULT (passed from the case: tests/test_flashmla_kv_indices_modes.py)."""
    for version, generation in (("0.5.13", "0.5.14"), ("0.5.17", "0.5.17")):
        release_file(version)
        b = load_target(f"sglang=={version}", device).bindings[OP]
        assert b.generation == generation and not b.defaulted, (version, b.describe())


def test_sglang_writes_past_a_kv_indices_with_too_few_rows(device):
    """Out of contract: SGLang's kernel takes no row count of kv_indices, so request bs - 1 writes
    past it (what kvfuzz reports for any out-of-contract case); the builtin masks it."""
    for i in range(20):  # the first such case whose last request has a page to write
        case = violation(OP, "kv_indices_too_few_rows", f"too few rows {i}")
        if case.tensors["kv_indices"].shape[1] and int(case.values["paged_kernel_lens"][-1]) > 0:
            break
    writes_past_on_0_5_14(OP, case, device)
