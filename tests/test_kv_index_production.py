"""Production sizes of the KV-index ops (chunked prefix, FlashMLA, the TRT-LLM MHA page table and
graph metadata, the two AITER page tables): the campaign's class drawer reaches tables past 32K
tokens and batches past 256; a hand case per op at a production size, where the builtin kernel,
SGLang 0.5.23's and the two oracles agree; and a seeded defect that only a production size shows
(a context capped at 32768 tokens), in a copy of each builtin, found by a stream of the op's
production cases."""

from __future__ import annotations

import numpy as np
import pytest

from kvfuzz.case import Case, TensorSpec
from kvfuzz.execute import run_case
from kvfuzz.judge import judge
from kvfuzz.ops import record
from kvfuzz.strategies import random_cases
from kvfuzz.targets import load_target

from kv_index_ops import KERNELS, mutant_copy, release_file

C = TensorSpec.contiguous
RNG = np.random.default_rng(7)
OPS = ("chunked_prefix_kv_indices", "flashmla_kv_indices", "trtllm_mha_kv_indices", "trtllm_mha_graph_metadata",
       "aiter_ragged_page_table", "aiter_req_to_token_page_table")


@pytest.mark.nokernel
@pytest.mark.parametrize("op", OPS)
def test_the_campaigns_class_drawer_reaches_production_tables_and_batches_past_256(op):
    variant = next(iter(record(op).contract.variants))
    seen = set()
    for seed in range(6):
        for case in random_cases(op, seed, 120, in_contract_only=True, variant=variant):
            seen |= record(op).generator.features(case)
        if {"size:production", "bs:past_256"} <= seen:
            break
    assert {"size:production", "bs:past_256"} <= seen, sorted(f for f in seen if ":" in f)[:20]


def agree(case: Case) -> dict:
    """The two oracles agree on the required cells of an in-contract case; the NumPy oracle's values."""
    rec = record(case.op)
    status, reasons, exp = rec.contract.assess(case)
    assert status == "in_contract", reasons
    got = rec.torch_ref(case, "cpu")
    for name, cells in rec.contract.cells(case).items():
        assert np.array_equal(got[name].numpy()[cells.required], exp.values[name][cells.required]), name
    return exp.values


def runs_clean(case: Case, device) -> None:
    release_file("0.5.23")
    for spec in ("builtin", "sglang==0.5.23"):
        v = judge(case, run_case(load_target(spec, device), case, device))
        assert v.not_target is None and v.signatures() == [], (spec, v.signatures())


def chunk_case() -> Case:
    """The second chunk (131072 // 2 = 65536 tokens a request) of two prefixes of 98304 and 65539
    tokens: 32768 and 3 tokens from 65536, into an output of the whole capacity (the graph runner's)."""
    table = RNG.integers(0, 1 << 30, size=(3, 131072 + 513))
    starts, lens = [65536, 65536], [32768, 3]
    cu = np.array([0, 32768, 32771])
    tensors = {"req_to_token": C("int32", table.shape), "req_pool_indices": C("int64", (2,)),
               "chunk_start_idx": C("int32", (2,)), "chunk_seq_lens": C("int32", (2,)),
               "chunk_cu_seq_lens": C("int32", (3,)), "chunk_kv_indices": C("int32", (131072,))}
    values = {"req_to_token": table, "req_pool_indices": np.array([2, 0]), "chunk_start_idx": np.array(starts),
              "chunk_seq_lens": np.array(lens), "chunk_cu_seq_lens": cu}
    return Case("chunked_prefix_kv_indices", {}, tensors, values)


def test_a_chunk_from_a_start_past_64k_into_the_capacity(device):
    case = chunk_case()
    out = agree(case)["chunk_kv_indices"]
    table = case.values["req_to_token"]
    assert np.array_equal(out[:32768], table[2, 65536:98304]) and np.array_equal(out[32768:32771], table[0, 65536:65539])
    runs_clean(case, device)


def page_case(op: str, W: int, ps: int, lens: list[int], C_extra: int = 0) -> Case:
    bs = len(lens)
    Ctok = W * ps + C_extra
    table = RNG.integers(0, 1 << 30, size=(2, Ctok))
    rows = np.arange(bs) % 2
    if op == "aiter_ragged_page_table":
        flat = np.concatenate([table[r, :n] for r, n in zip(rows, lens)])
        ptr = np.concatenate([[0], np.cumsum(lens)])
        return Case(op, {"page_size": ps}, {"kv_flat": C("int32", flat.shape), "kv_indptr": C("int32", (bs + 1,)),
                                            "page_table": C("int32", (bs, W))},
                    {"kv_flat": flat, "kv_indptr": ptr})
    tensors = {"req_to_token": C("int32", table.shape), "req_pool_indices": C("int64", (bs,)),
               "page_table": C("int32", (bs, W))}
    values = {"req_to_token": table, "req_pool_indices": rows}
    if op == "flashmla_kv_indices":
        tensors["paged_kernel_lens"] = C("int32", (bs,))
        values["paged_kernel_lens"] = np.array(lens)
        tensors["kv_indices"] = tensors.pop("page_table")
        return Case(op, {"page_size": ps}, tensors, values)
    tensors["seq_lens"] = C("int32", (bs,))
    values["seq_lens"] = np.array(lens)
    if op == "aiter_req_to_token_page_table":
        return Case(op, {"page_size": ps, "draft_num": 0}, tensors, values)
    return Case(op, {"page_size": ps}, tensors, values)


@pytest.mark.parametrize("op,W,ps,lens", [
    ("flashmla_kv_indices", 36864, 1, [36864, 4097]),  # AITER's page size 1: 9 blocks of 4096
    ("trtllm_mha_kv_indices", 8192, 16, [131072, 4097]),  # 32 blocks of 256 pages
    ("aiter_ragged_page_table", 34817, 1, [34817, 33]),  # 35 blocks of 1024 pages, one page in the last
    ("aiter_req_to_token_page_table", 2560, 64, [163840, 1]),  # 3 blocks of 1024 pages
])
def test_a_production_page_table_past_the_grids_last_block(op, W, ps, lens, device):
    case = page_case(op, W, ps, lens, C_extra=4 if op != "aiter_ragged_page_table" else 0)
    out = agree(case)
    name = "kv_indices" if op == "flashmla_kv_indices" else "page_table"
    pages = -(-lens[0] // ps)
    if op != "aiter_ragged_page_table":
        assert np.array_equal(out[name][0, :pages], case.values["req_to_token"][0, :lens[0]:ps] // ps)
    runs_clean(case, device)


# a context capped at 32768 tokens: one line of each builtin, wrong only past 32K
CAP = {
    "chunked_prefix_kv_indices": ("mask = (j < n) &", "mask = (j < n) & (col < 32768) &"),
    "flashmla_kv_indices": ("mask = (p < pages) &", "mask = (p < pages) & (p * PS < 32768) &"),
    "trtllm_mha_kv_indices": ("mask = (p < pages) &", "mask = (p < pages) & (p * PS < 32768) &"),
    "trtllm_mha_graph_metadata": ("live = (p < pages) & (col < C)", "live = (p < pages) & (col < C) & (col < 32768)"),
    "aiter_ragged_page_table": ("mask = (p < pages) &", "mask = (p < pages) & (p * PS < 32768) &"),
    "aiter_req_to_token_page_table": ("mask = (p < pages) &", "mask = (p < pages) & (p * PS < 32768) &"),
}


@pytest.mark.slow  # production cases under the interpreter: seconds each
@pytest.mark.parametrize("op", list(CAP))
def test_a_context_capped_at_32k_in_a_copy_of_the_builtin_is_found_by_production_cases(op, tmp_path, device):
    old, new = CAP[op]
    target = load_target(str(mutant_copy(KERNELS / f"{op}.py", old, new, tmp_path / "mutant.py")), device)
    variant = target.variants[op]
    tried = 0
    for case in random_cases(op, 3, 600, in_contract_only=True, variant=variant):
        if "size:production" not in record(op).generator.features(case):
            continue
        tried += 1
        if judge(case, run_case(target, case, device)).signatures():
            return
        assert tried < 12, "no production case found the cap"
    pytest.fail("no production case drawn")
