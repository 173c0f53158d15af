"""flashinfer_kv_indices's launch modes (SGLang 0.5.19-0.5.23's ENTRY_PAGE_SIZE,
TOKEN_BLOCK_PARALLEL on a (bs, blocks) grid, token_mapping; every release's int64 kv_indices) and
its production sizes: hand cases per mode, where the builtin kernel, SGLang 0.5.23's and the two
oracles agree; each release judged by the variant of the modes its kernel takes; seeded one-line
defects in each new mode, in copies of SGLang 0.5.23's kernel and of the builtin, found by a
short campaign."""

from __future__ import annotations

import numpy as np
import pytest

from kvfuzz.case import Case, TensorSpec
from kvfuzz.execute import run_case
from kvfuzz.judge import judge
from kvfuzz.ops import record
from kvfuzz.ops.flashinfer_kv_indices.generate import spec_kv_index_token_blocks
from kvfuzz.targets import load_target

from kv_index_ops import KERNELS, mutant_copy, release_file

OP = "flashinfer_kv_indices"
C = TensorSpec.contiguous


def gather(table, rows, lens, starts=None, variant="token_mapping", out="int32", ps=None, blocks=None, mapping=None,
           tail=3) -> Case:
    """A case of requests (pool row, length, start) over `table`, kv_indptr from 0, a tail of `tail` cells."""
    table = np.asarray(table)
    lens = np.asarray(lens)
    bs = len(rows)
    ptr = np.concatenate([[0], np.cumsum(lens)])
    tensors = {"req_to_token": C("int32", table.shape), "req_pool_indices": C("int64", (bs,)),
               "paged_kernel_lens": C("int32", (bs,)), "kv_indptr": C("int32", (bs + 1,)),
               "kv_indices": C(out, (int(ptr[-1]) + tail,))}
    values = {"req_to_token": table, "req_pool_indices": np.asarray(rows), "paged_kernel_lens": lens, "kv_indptr": ptr}
    if starts is not None:
        tensors["kv_start_idx"] = C("int64", (bs,))
        values["kv_start_idx"] = np.asarray(starts)
    if mapping is not None:
        tensors["token_mapping"] = C("int64", (len(mapping),))
        values["token_mapping"] = np.asarray(mapping)
    scalars = {}
    if ps is not None:
        scalars["entry_page_size"] = ps
    if blocks is not None:
        scalars["num_token_blocks"] = blocks
    return Case(OP, scalars, tensors, values, variant=variant)


def expected(case: Case) -> np.ndarray:
    rec = record(OP)
    status, reasons, exp = rec.contract.assess(case)
    assert status == "in_contract", reasons
    got = rec.torch_ref(case, "cpu")["kv_indices"].numpy()
    req = rec.contract.cells(case)["kv_indices"].required
    assert np.array_equal(got[req], exp.values["kv_indices"][req])
    return exp.values["kv_indices"]


def runs_clean(case: Case, device) -> None:
    """The builtin and SGLang 0.5.23's kernel both meet the contract on `case`."""
    release_file("0.5.23")
    for spec in ("builtin", "sglang==0.5.23"):
        v = judge(case, run_case(load_target(spec, device), case, device))
        assert v.not_target is None and v.signatures() == [], (spec, v.signatures())


RNG = np.random.default_rng(5)
TOKENS = RNG.permutation(1 << 16)[:2 * 3000].reshape(2, 3000)


@pytest.mark.parametrize("blocks", [None, 1, 2, 3])
def test_the_block_grid_copies_rows_ending_inside_and_at_the_end_of_blocks(blocks, device):
    # 1025: 3 copy blocks, the last of one token; 512: exactly one; 1536: exactly three; 0: none
    case = gather(TOKENS, [1, 0, 1, 0], [1025, 512, 1536, 0], starts=[0, 5, 1464, 7], blocks=blocks, out="int64")
    out = expected(case)
    assert np.array_equal(out[:1025], TOKENS[1, :1025]) and np.array_equal(out[1025:1537], TOKENS[0, 5:517])
    assert np.array_equal(out[1537:3073], TOKENS[1, 1464:3000])
    runs_clean(case, device)


@pytest.mark.parametrize("ps", [16, 3])
def test_a_page_granular_table_gives_entry_times_ps_plus_the_offset_from_unaligned_starts(ps, device):
    pages = RNG.integers(0, 5000, size=(2, 12))
    n = 2 * ps + 5  # from inside the first page to inside the fourth
    case = gather(pages, [1, 0], [n, 12 * ps - 7], starts=[3, 7], ps=ps, variant="entry_page")
    out = expected(case)
    pos = np.arange(3, 3 + n)
    assert np.array_equal(out[:n], pages[1, pos // ps] * ps + pos % ps)
    runs_clean(case, device)


def test_token_mapping_keeps_minus_one_from_the_table_and_from_the_mapping(device):
    table = np.array([[0, 1, -1, 3, 4, 5], [5, -1, 2, 1, 0, 0]])
    mapping = np.array([10, -1, 12, 13, -1, 15])
    case = gather(table, [0, 1], [4, 3], starts=[1, 2], mapping=mapping, out="int64", blocks=2)
    assert expected(case)[:7].tolist() == [-1, -1, 13, -1, 12, -1, 10]
    runs_clean(case, device)


def test_an_id_outside_the_mapping_is_out_of_contract():
    case = gather([[0, 6]], [0], [2], mapping=np.arange(6))
    assert record(OP).contract.classify(case)[0] == "out_of_contract"


def test_a_production_table_past_the_multi_block_threshold(device):
    W = 32768
    table = RNG.integers(0, 1 << 30, size=(2, W))
    lens = [W, 9000]
    blocks = spec_kv_index_token_blocks(W, sum(lens), len(lens))
    assert blocks == 4 and spec_kv_index_token_blocks(W, 8192, 2) == 1 and spec_kv_index_token_blocks(W, None, 257) == 1
    case = gather(table, [1, 0], lens, starts=[0, 100], blocks=blocks, out="int64")
    out = expected(case)
    assert np.array_equal(out[W:W + 9000], table[0, 100:9100])
    runs_clean(case, device)


@pytest.mark.parametrize("version,variant", [("0.5.14", "default"), ("0.5.19", "entry_page"),
                                             ("0.5.20", "token_blocks"), ("0.5.23", "token_mapping")])
def test_each_release_is_judged_by_the_modes_its_kernel_takes(version, variant, device):
    release_file(version)
    t = load_target(f"sglang=={version}", device)
    assert t.variants[OP] == variant
    assert set(t.takes[OP]) == set(record(OP).contract.variant_args[variant])


def test_a_release_without_a_mode_gets_none_of_its_cases():
    from kvfuzz.strategies import random_cases

    for case in random_cases(OP, 2, 60, variant="default"):
        assert not case.scalars and "token_mapping" not in case.tensors
    modes = [c for c in random_cases(OP, 2, 60, variant="token_blocks")]
    assert any(c.scalars.get("num_token_blocks", 1) > 1 for c in modes)
    assert not any("token_mapping" in c.tensors for c in modes)


# seeded defects: (file, the one-line change) -> found by a short in-contract campaign of the mode's variant
SGLANG_MUTANTS = {
    "blocks: a block's stride one too many": ("num_blk = tl.num_programs(axis=1)",
                                              "num_blk = tl.num_programs(axis=1) + 1"),
    "blocks: the last block exits early": ("if blk >= num_loop:", "if blk + 1 >= num_loop:"),
    "paged: pos % ps dropped": ("data = entry.to(tl.int64) * ENTRY_PAGE_SIZE + pos % ENTRY_PAGE_SIZE",
                                "data = entry.to(tl.int64) * ENTRY_PAGE_SIZE"),
    "mapped: -1 not kept": ("mask=mask & (data >= 0), other=-1)", "mask=mask & (data >= 0), other=0)"),
    "length mask <=": ("mask = offset < kv_end - kv_start", "mask = offset <= kv_end - kv_start"),
}
BUILTIN_MUTANTS = {
    "tile mask <=": ("mask = (j < n) &", "mask = (j <= n) &"),
    "paged: pos % PS dropped": ("ids = ids * PS + pos % PS", "ids = ids * PS"),
    "mapped: -1 not kept": ("mask=hit, other=-1)", "mask=hit, other=0)"),
}


def campaign_finds(path, device, seconds=20, **cfg) -> list:
    from kvfuzz.campaign import CampaignConfig, run_campaign

    res = run_campaign(CampaignConfig(ops=[OP], ops_named=True, target=str(path), device=device, budget_s=seconds,
                                      isolate=False, seed=3, minimize_budget_s=0, in_contract_only=True, **cfg))
    return res.saved


@pytest.mark.slow  # 45-135 s each on a loaded 2-core CPU (a 20 s campaign, then confirming and saving)
@pytest.mark.parametrize("name", list(SGLANG_MUTANTS))
def test_seeded_defects_in_sglang_0_5_23s_modes_are_found(name, tmp_path, device):
    old, new = SGLANG_MUTANTS[name]
    assert campaign_finds(mutant_copy(release_file("0.5.23"), old, new, tmp_path / "kv_indices.py"), device)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(BUILTIN_MUTANTS))
def test_seeded_defects_in_the_builtins_modes_are_found(name, tmp_path, device):
    old, new = BUILTIN_MUTANTS[name]
    assert campaign_finds(mutant_copy(KERNELS / f"{OP}.py", old, new, tmp_path / "mutant.py"), device)


@pytest.mark.thorough  # seconds of processes and campaigns: CI's thorough stage
@pytest.mark.interpreter  # the script runs under Triton's interpreter, in another process
def test_a_short_repro_launches_the_cases_mode(tmp_path):
    """The short script launches SGLang 0.5.23's kernel as the case's call site does: grid (bs,
    blocks), TOKEN_BLOCK_PARALLEL, token_mapping; it runs clean on the release's file."""
    import os
    import subprocess
    import sys

    from kvfuzz.corpus import SavedCase
    from kvfuzz.short_repro import write_short_repro

    table = np.array([[0, 1, -1, 3, 4, 5], [5, -1, 2, 1, 0, 0]])
    case = gather(table, [0, 1], [4, 3], starts=[1, 2], mapping=np.array([10, -1, 12, 13, -1, 15]), out="int64",
                  blocks=2)
    saved = SavedCase(case=case, finding=None, target="sglang==0.5.23", device="cpu", versions={}, origin="hand",
                      expected="pass")
    script = tmp_path / "mode.py"
    write_short_repro(saved, script)
    src = script.read_text()
    assert "[(req_pool_indices.shape[0], 2)]" in src and "TOKEN_BLOCK_PARALLEL=True" in src
    assert "token_mapping=token_mapping" in src
    env = dict(os.environ, TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES="")

    def run(kernel_file):
        return subprocess.run([sys.executable, str(script), str(kernel_file)], capture_output=True, text=True,
                              timeout=300, env=env)
    assert run(release_file("0.5.23")).returncode == 0
    old, new = SGLANG_MUTANTS["mapped: -1 not kept"]
    mutant = tmp_path / "kv_indices.py"
    mutant.write_text(release_file("0.5.23").read_text().replace(old, new))
    assert run(mutant).returncode == 1


# A GPU campaign of 20 s reaches about two classes of the pool (a Triton compile per new class, 8
# campaigns compiling at once): each seeded defect must show there. On the CPU: a GPU's batches
# and re-runs, and two CPU stints of cases, whatever the host's speed.
PAGED_MUTANTS = {"sglang 0.5.23": ("0.5.23", *SGLANG_MUTANTS["paged: pos % ps dropped"]),
                 "builtin": (None, *BUILTIN_MUTANTS["paged: pos % PS dropped"])}


@pytest.mark.slow  # 60-150 s each on a loaded 2-core CPU (128 cases, then confirming and saving)
@pytest.mark.parametrize("name", list(PAGED_MUTANTS))
def test_a_paged_defect_is_found_in_the_first_two_classes_as_on_a_gpu(name, tmp_path, device):
    from kvfuzz.engines.batch_engine import STINT

    version, old, new = PAGED_MUTANTS[name]
    src = release_file(version) if version else KERNELS / f"{OP}.py"
    path = mutant_copy(src, old, new, tmp_path / ("kv_indices.py" if version else "mutant.py"))
    stint = STINT["cuda" if device == "cuda" else "cpu"]
    assert campaign_finds(path, device, seconds=600, batch=64, rerun_every=1, max_cases=2 * stint)


MODES_OF = {"default": {"int64"}, "entry_page": {"paged", "int64"},
            "token_blocks": {"paged", "blocks_one", "blocks_many", "int64"},
            "token_mapping": {"paged", "blocks_one", "blocks_many", "mapped", "int64"}}


@pytest.mark.parametrize("variant", list(MODES_OF))
def test_the_first_two_classes_of_any_pool_cover_every_launch_mode_of_the_variant(variant):
    from kvfuzz.engines.batch_engine import POOL
    from kvfuzz.ops.flashinfer_kv_indices.generate import launch_modes
    from kvfuzz.strategies import GENERATORS

    gen = GENERATORS[OP]
    for seed in range(40 if variant == "token_mapping" else 12):
        pool = gen.pool(seed, POOL, variant)
        first = set().union(*(launch_modes(k) for k in pool[:2]))
        assert first == MODES_OF[variant], (seed, first)
        assert set().union(*(launch_modes(k) for k in pool)) == MODES_OF[variant]  # no mode beyond the variant's


def test_a_gpus_stream_draws_a_case_off_a_page_boundary_in_its_first_two_stints():
    """Dropping `pos % ps` shows on a paged case reading a token off a page's first: within the
    first two stints of a GPU's stream (128 cases each), for any seed."""
    from kvfuzz.engines.batch_engine import STINT, case_stream

    def off_page(case):
        ps = case.scalars.get("entry_page_size", 1)
        lens = np.asarray(case.values["paged_kernel_lens"])
        starts = np.asarray(case.values.get("kv_start_idx", np.zeros_like(lens)))
        return ps > 1 and bool(((lens >= 2) | ((lens == 1) & (starts % ps != 0))).any())

    n = 2 * STINT["cuda"]
    for seed in range(8):
        stream = case_stream(OP, seed, n, device="cuda", in_contract_only=True, variant="token_mapping")
        assert any(off_page(case) for _, case in stream), seed
