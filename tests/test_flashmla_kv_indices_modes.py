"""flashmla_kv_indices's unified-memory mode (SGLang 0.5.17-0.5.18's `v2p_ptr` and `PAGE_MULT`,
passed by TRT-LLM MLA; its production sizes: tests/test_kv_index_production.py): hand cases where the builtin kernel, SGLang
0.5.17's and the two oracles agree; each release judged by the variant of the modes its kernel
takes; seeded one-line defects in the mode, in copies of SGLang 0.5.17's kernel and of the
builtin, found by a short campaign."""

from __future__ import annotations

import numpy as np
import pytest

from kvfuzz.case import Case, TensorSpec
from kvfuzz.execute import run_case
from kvfuzz.judge import judge
from kvfuzz.ops import record
from kvfuzz.targets import load_target

from kv_index_ops import KERNELS, mutant_copy, release_file

OP = "flashmla_kv_indices"
C = TensorSpec.contiguous


def pages_case(table, rows, lens, ps, W, v2p=None, mult=None, spare=1, variant="v2p", v2p_dtype="int64") -> Case:
    table = np.asarray(table)
    bs = len(rows)
    tensors = {"req_to_token": C("int32", table.shape), "req_pool_indices": C("int64", (bs,)),
               "paged_kernel_lens": C("int32", (bs,)), "kv_indices": C("int32", (bs + spare, W))}
    values = {"req_to_token": table, "req_pool_indices": np.asarray(rows), "paged_kernel_lens": np.asarray(lens)}
    scalars = {"page_size": ps}
    if v2p is not None:
        tensors["v2p"] = C(v2p_dtype, (len(v2p),))
        values["v2p"] = np.asarray(v2p)
    if mult is not None:
        scalars["page_mult"] = mult
    return Case(OP, scalars, tensors, values, variant=variant)


def expected(case: Case) -> np.ndarray:
    rec = record(OP)
    status, reasons, exp = rec.contract.assess(case)
    assert status == "in_contract", reasons
    got = rec.torch_ref(case, "cpu")["kv_indices"].numpy()
    req = rec.contract.cells(case)["kv_indices"].required
    assert np.array_equal(got[req], exp.values["kv_indices"][req])
    return exp.values["kv_indices"]


def runs_clean(case: Case, device, specs=("builtin", "sglang==0.5.17")) -> None:
    release_file("0.5.17")
    for spec in specs:
        v = judge(case, run_case(load_target(spec, device), case, device))
        assert v.not_target is None and v.signatures() == [], (spec, v.signatures())


@pytest.mark.parametrize("v2p_dtype", ["int64", "int32"])
def test_pages_go_through_v2p_times_page_mult_and_unmapped_pages_give_minus_mult(v2p_dtype, device):
    ps = 16
    # row 0: the padding row (pool row 0, page 0, SGLang's anchor); row 1: pages 0, 2, 3, 1, 5, 1
    table = np.array([[0] * 96, [0] * 16 + [40] * 16 + [50] * 16 + [20] * 16 + [81] * 16 + [16] * 16])
    v2p = [7, 9, 100, -1, 4, 1000, -1]
    case = pages_case(table, [1, 0], [96, 1], ps, W=8, v2p=v2p, mult=61, v2p_dtype=v2p_dtype)
    out = expected(case)
    assert out[0, :6].tolist() == [7 * 61, 100 * 61, -61, 9 * 61, 1000 * 61, 9 * 61]
    assert out[1, :1].tolist() == [7 * 61]
    runs_clean(case, device)


def test_a_page_past_v2p_is_out_of_contract_and_a_product_past_int32_too():
    table = np.array([[0, 16, 32]])
    assert record(OP).contract.classify(pages_case(table, [0], [3], 1, 3, v2p=[1] * 32))[0] == "out_of_contract"
    big = pages_case(table[:, :1], [0], [1], 1, 1, v2p=[2**30], mult=2)
    assert record(OP).contract.classify(big)[0] == "out_of_contract"


def test_page_mult_without_v2p_scales_the_page(device):
    case = pages_case(np.arange(0, 4096 * 3, 32).reshape(1, -1), [0], [200], 64, W=4, mult=3)
    assert expected(case)[0, :4].tolist() == [0, 96, 192, 288]  # column 64p holds 2048p: page 32p
    runs_clean(case, device)


def test_v2p_and_page_mult_are_no_arguments_of_the_default_variant():
    case = pages_case([[0, 1]], [0], [2], 1, 2, v2p=[0, 1], mult=2, variant="default")
    status, reasons, _ = record(OP).contract.assess(case)
    assert status == "out_of_contract" and any("v2p" in r for r in reasons), reasons


@pytest.mark.parametrize("version,variant", [("0.5.16", "default"), ("0.5.17", "v2p"), ("0.5.18", "v2p"),
                                             ("0.5.19", "default")])
def test_each_release_is_judged_by_the_modes_its_kernel_takes(version, variant, device):
    release_file(version)
    t = load_target(f"sglang=={version}", device)
    assert t.variants[OP] == variant
    assert set(t.takes[OP]) == set(record(OP).contract.variant_args[variant])


def test_a_release_without_the_mode_gets_none_of_its_cases():
    from kvfuzz.strategies import random_cases

    for case in random_cases(OP, 2, 80, variant="default"):
        assert "v2p" not in case.tensors and "page_mult" not in case.scalars
    modes = list(random_cases(OP, 2, 80, variant="v2p"))
    assert any("v2p" in c.tensors and c.scalars["page_mult"] > 1 for c in modes)
    assert any("v2p" not in c.tensors for c in modes)


SGLANG_MUTANTS = {
    "v2p: one entry off": ("page = tl.load(v2p_ptr + page, mask=mask_out, other=0)",
                           "page = tl.load(v2p_ptr + page + 1, mask=mask_out, other=0)"),
    "v2p: PAGE_MULT dropped": ("            page * PAGE_MULT,", "            page,"),
}
BUILTIN_MUTANTS = {
    "v2p: the table skipped": ("page = tl.load(v2p + tl.where(mask, page * v2p_s, 0), mask=mask).to(tl.int64)",
                               "page = page"),
    "v2p: unmapped pages clamped to 0": (
        "page = tl.load(v2p + tl.where(mask, page * v2p_s, 0), mask=mask).to(tl.int64)",
        "page = tl.maximum(tl.load(v2p + tl.where(mask, page * v2p_s, 0), mask=mask).to(tl.int64), 0)"),
}


def campaign_finds(path, device, seconds=20) -> list:
    from kvfuzz.campaign import CampaignConfig, run_campaign

    res = run_campaign(CampaignConfig(ops=[OP], ops_named=True, target=str(path), device=device, budget_s=seconds,
                                      isolate=False, seed=3, minimize_budget_s=0, in_contract_only=True,
                                      variant="v2p"))
    return res.saved


@pytest.mark.slow
@pytest.mark.parametrize("name", list(SGLANG_MUTANTS))
def test_seeded_defects_in_sglang_0_5_17s_mode_are_found(name, tmp_path, device):
    old, new = SGLANG_MUTANTS[name]
    assert campaign_finds(mutant_copy(release_file("0.5.17"), old, new, tmp_path / "kv_indices.py"), device)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(BUILTIN_MUTANTS))
def test_seeded_defects_in_the_builtins_mode_are_found(name, tmp_path, device):
    old, new = BUILTIN_MUTANTS[name]
    assert campaign_finds(mutant_copy(KERNELS / f"{OP}.py", old, new, tmp_path / "mutant.py"), device)


@pytest.mark.thorough  # seconds of processes and campaigns: CI's thorough stage
@pytest.mark.interpreter  # the script runs under Triton's interpreter, in another process
def test_a_short_repro_launches_the_unified_pools_remap(tmp_path):
    """The short script passes v2p_ptr and PAGE_MULT as TRT-LLM MLA does; it runs clean on
    0.5.17's kernel and exits 1 on a copy with a seeded defect in the remap."""
    import os
    import subprocess
    import sys

    from kvfuzz.corpus import SavedCase
    from kvfuzz.short_repro import write_short_repro

    table = np.array([[0, 16, 32, 48, 20, 36]])
    case = pages_case(table, [0], [6], 1, W=6, v2p=list(range(100, 150)), mult=3)
    saved = SavedCase(case=case, finding=None, target="sglang==0.5.17", device="cpu", versions={}, origin="hand",
                      expected="pass")
    script = tmp_path / "v2p.py"
    write_short_repro(saved, script)
    src = script.read_text()
    assert "v2p_ptr=v2p" in src and "PAGE_MULT=3" in src
    env = dict(os.environ, TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES="")

    def run(kernel_file):
        return subprocess.run([sys.executable, str(script), str(kernel_file)], capture_output=True, text=True,
                              timeout=300, env=env)
    assert run(release_file("0.5.17")).returncode == 0
    old, new = SGLANG_MUTANTS["v2p: one entry off"]
    mutant = tmp_path / "kv_indices.py"
    mutant.write_text(release_file("0.5.17").read_text().replace(old, new))
    assert run(mutant).returncode == 1
