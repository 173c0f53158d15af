"""SGLang's AITER unified-attention page-table kernels as two ops, `aiter_ragged_page_table`
(scatter_ragged_to_page_table_kernel) and `aiter_req_to_token_page_table`
(scatter_req_to_token_to_page_table_kernel): the builtin kernels against their contracts (a short
campaign and a seeded stream), the two oracles on generated cases, every violation out of
contract, the launch grid as the AITER backend computes it, seeded defects in copies of the
builtins found, and SGLang releases: `sglang==X` loads both kernels from the release's
aiter_unified_attention.py (0.5.12's, 0.5.16's and 0.5.23's aiter_unified_page_table.py, one file
text) and short in-contract streams run clean; releases before 0.5.12 do not offer the ops and
say why, without a download. The release files come from the PyPI wheels through kvfuzz's cache,
as in tests/test_releases.py."""

from __future__ import annotations

import numpy as np
import pytest
from kv_index_ops import seeded_defect_found, short_campaign, stream_findings, violations_leave_contract

from kvfuzz.case import Case, TensorSpec
from kvfuzz.execute import run_case
from kvfuzz.judge import judge
from kvfuzz.ops import record
from kvfuzz.strategies import random_cases
from kvfuzz.targets import load_target
from kvfuzz.targets.releases import AITER_UNIFIED, RELEASES

RAGGED, R2T = "aiter_ragged_page_table", "aiter_req_to_token_page_table"
OPS = (RAGGED, R2T)
C = TensorSpec.contiguous


def release_file(version: str):
    """SGLang `version`'s aiter_unified_attention.py from kvfuzz's cache (fetched once), or skip."""
    from test_releases import kernel_file

    return kernel_file(version, AITER_UNIFIED)


@pytest.mark.parametrize("op", OPS)
def test_the_builtin_passes_a_short_campaign(op, device):
    short_campaign(op, device, budget_s=2, min_cases=10)


@pytest.mark.parametrize("op", OPS)
def test_the_builtin_finds_nothing_on_a_seeded_stream(op, builtin_target, device):
    b = builtin_target.bindings[op]
    assert b.generation == "0.5.12" and not b.bare and not b.defaulted, b.describe()
    assert stream_findings(op, builtin_target, device) == set()


@pytest.mark.parametrize("op", OPS)
def test_the_oracles_agree_on_generated_cases(op):
    rec = record(op)
    seen = set()
    for case in random_cases(op, 11, 80, in_contract_only=True):
        status, reasons, expected = rec.contract.assess(case)
        assert status == "in_contract", reasons
        got = rec.torch_ref(case, "cpu")
        for name, cells in rec.contract.cells(case).items():
            req = cells.required
            assert np.array_equal(got[name].numpy()[req], expected.values[name][req]), (name, case.describe())
        seen |= rec.generator.features(case)
    assert {"swa", "no_swa", "page_size:16", "page_size:1", "edge:len:page+1", "width:full", "len:zero"} <= seen


@pytest.mark.parametrize("op", OPS)
def test_each_violation_leaves_the_contract(op):
    violations_leave_contract(op)


def ragged_case(lens, W, ps=16, R=None, swa=None, slots=None) -> Case:
    ptr = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    flat = np.arange(int(ptr[-1]), dtype=np.int64) if slots is None else np.asarray(slots, np.int64)
    R = R or len(lens)
    tensors = {"kv_flat": C("int32", (flat.shape[0],)), "kv_indptr": C("int32", (len(lens) + 1,)),
               "page_table": C("int32", (R, W))}
    values = {"kv_flat": flat, "kv_indptr": ptr}
    if swa is not None:
        tensors["swa_slot_mapping"] = C("int64", (len(swa),))
        tensors["swa_page_table"] = C("int32", (R, W))
        values["swa_slot_mapping"] = np.asarray(swa, np.int64)
    return Case(RAGGED, {"page_size": ps}, tensors, values)


def r2t_case(seq_lens, W, D=4, ps=16, swa=None) -> Case:
    bs = len(seq_lens)
    tensors = {"req_to_token": C("int32", (bs, 64)), "req_pool_indices": C("int64", (bs,)),
               "seq_lens": C("int64", (bs,)), "page_table": C("int32", (bs, W))}
    values = {"req_to_token": np.arange(bs * 64).reshape(bs, 64), "req_pool_indices": np.arange(bs),
              "seq_lens": np.asarray(seq_lens)}
    if swa is not None:
        tensors["swa_slot_mapping"] = C("int64", (len(swa),))
        tensors["swa_page_table"] = C("int32", (bs, W))
        values["swa_slot_mapping"] = np.asarray(swa, np.int64)
    return Case(R2T, {"page_size": ps, "draft_num": D}, tensors, values)


def test_the_contracts_read_as_the_kernels_compute():
    """Request i's pages: ragged from kv_flat[kv_indptr[i] + p * ps], req_to_token over seq_lens +
    DRAFT_NUM tokens; with SWA the mapping's entry; the columns past the pages and the spare rows
    are not written."""
    case = ragged_case([33, 0, 16], W=4, R=4, swa=np.arange(100) * 3)
    expected = record(RAGGED).contract.assess(case)[2].values
    assert expected["page_table"][:3].tolist() == [[0, 1, 2, 0], [0, 0, 0, 0], [2, 0, 0, 0]]
    assert expected["swa_page_table"][0, :3].tolist() == [0, 3, 6]  # 3 * {0, 16, 32} // 16
    cells = record(RAGGED).contract.cells(case)["page_table"].required
    assert cells.sum(1).tolist() == [3, 0, 1, 0]
    case = r2t_case([12, 13], W=2, D=4)  # 16 tokens: one page; 17: two
    expected = record(R2T).contract.assess(case)[2].values["page_table"]
    assert expected.tolist() == [[0, 0], [4, 5]] and record(R2T).contract.cells(case)["page_table"].required.sum() == 3


def test_a_request_past_its_row_races_with_the_next_one():
    """racy: request 0's third page (out of contract: the rows hold two) lands on row 1's first
    cell, which request 1 writes too."""
    case = ragged_case([40, 40], W=2)
    rec = record(RAGGED)
    assert rec.contract.classify(case)[0] == "out_of_contract"
    assert rec.contract.racy(case)["page_table"].tolist() == [[False, False], [True, False]]


# ------------------------------------------------------------------ the builtins, seeded defects

MUTANTS = {
    RAGGED: {
        "page mask off by one": ("mask = (p < pages) &", "mask = (p <= pages) &"),
        "page count rounded down": ("pages = (tl.maximum(end - start, 0) + PS - 1) // PS",
                                    "pages = tl.maximum(end - start, 0) // PS"),
        "SWA page from the full slot": ("(swa_slot // PS).to(tl.int32)", "(slot // PS).to(tl.int32)"),
    },
    R2T: {
        "drafts dropped": ("n = tl.load(lens + req * lens_s).to(tl.int64) + DRAFT",
                           "n = tl.load(lens + req * lens_s).to(tl.int64)"),
        "page_table row stride dropped": ("req * out_row_s + p * out_col_s", "req * W + p * out_col_s"),
        "every token, not every page's first": ("col = p * PS", "col = p"),
    },
}


@pytest.mark.parametrize("op, name", [(op, name) for op in OPS for name in MUTANTS[op]])
def test_seeded_defects_in_a_copy_of_the_builtin_are_found(op, name, tmp_path, device):
    old, new = MUTANTS[op][name]
    seeded_defect_found(op, old, new, tmp_path, device, name, seed=7, n=40, in_contract_only=True, first=True)


def test_the_grid_is_the_backends():
    """kvfuzz's grid is (bs, cdiv(max(max_blocks, 1), 1024)), the AITER backend's, with max_blocks
    the tables' width (bs: kv_indptr's entries - 1, or req_pool_indices')."""
    for op, rows in ((RAGGED, lambda t: t["kv_indptr"].shape[0] - 1), (R2T, lambda t: t["req_pool_indices"].shape[0])):
        grid = record(op).call.grid
        for case in random_cases(op, 2, 40, in_contract_only=True):
            t = {name: np.empty(spec.shape) for name, spec in case.tensors.items()}
            W = case.tensors["page_table"].shape[1]
            assert grid(t, case.scalars) == (rows(t), -(-max(W, 1) // 1024))
        assert record(op).call.supplied["BLOCK_SIZE"]({}, {}) == 1024


# ------------------------------------------------------------------ SGLang's releases

# (release): 0.5.12's file, 0.5.16's moved copy, 0.5.23's renamed one (aiter_unified_page_table.py)
@pytest.mark.parametrize("version", ["0.5.12", "0.5.16", "0.5.23"])
def test_a_release_target_offers_both_ops_and_runs_in_contract_cases_clean(version, device):
    data = release_file(version).read_bytes()
    assert data == release_file("0.5.12").read_bytes()  # the same text in every release
    t = load_target(f"sglang=={version}", device)
    for op in OPS:
        b = t.bindings[op]
        assert b.bare and b.generation == "0.5.12" and not b.defaulted, b.describe()
        assert t.variants[op] == "default" and AITER_UNIFIED in t.description
        assert t.entries[op] is t.modules[AITER_UNIFIED].__dict__[record(op).contract.entry]
        assert stream_findings(op, t, device, seed=4, n=15, in_contract_only=True) == set()


def test_releases_before_0_5_12_do_not_offer_the_ops_and_fetch_nothing_for_them(device, monkeypatch):
    from test_releases import kernel_file

    from kvfuzz.errors import TargetLoadError
    from kvfuzz.targets import wheels

    kernel_file("0.5.11", "kv_indices.py")
    monkeypatch.setattr(wheels, "_pip_download", lambda version, into: pytest.fail(f"downloaded {version}"))
    with pytest.raises(TargetLoadError, match=r"sglang==0\.5\.11 has no aiter_unified_attention\.py"):
        wheels.sglang_kernel_file("0.5.11", AITER_UNIFIED)
    t = load_target("sglang==0.5.11", device)
    assert "flashmla_kv_indices" in t.bindings and "decode_metadata" in t.bindings
    for op in OPS:
        assert op not in t.bindings
        why = t.missing[op]
        assert why.startswith("not offered by sglang 0.5.11: ") and "first ship in 0.5.12" in why and "\n" not in why
    assert all(op in RELEASES[v].not_offered for v in ("0.5.6", "0.5.9", "0.5.10", "0.5.11") for op in OPS)
    assert not any(op in RELEASES["0.5.12"].not_offered for op in OPS)


def test_lanes_past_the_pages_read_the_mappings_first_entry_and_store_nothing(device):
    """In contract whatever swa_slot_mapping[0] holds: SGLang's unmasked lookup reads it for the
    lanes past a request's pages (they loaded slot 0) and stores nothing there."""
    release_file("0.5.12")
    mapping = np.arange(50) * 2
    mapping[0] = -1  # SGLang's sentinel value, never a live slot's entry here
    case = ragged_case([17, 5], W=3, R=3, swa=mapping, slots=np.arange(1, 23))
    assert record(RAGGED).contract.classify(case)[0] == "in_contract"
    for spec in ("sglang==0.5.12", "builtin"):
        assert judge(case, run_case(load_target(spec, device), case, device)).signatures() == [], spec


def test_sglang_writes_past_a_too_narrow_page_table(device):
    """Out of contract: SGLang's kernels take no width of the tables, so the last request's pages
    past its row are written past the table (what kvfuzz reports for any out-of-contract case);
    the builtins mask them."""
    release_file("0.5.12")
    for case in (ragged_case([20, 40], W=2), r2t_case([16, 36], W=2)):
        assert record(case.op).contract.classify(case)[0] == "out_of_contract"
        sigs = judge(case, run_case(load_target("sglang==0.5.12", device), case, device)).signatures()
        assert any(s.endswith("out_of_bounds_write:page_table:after") for s in sigs), sigs
        assert judge(case, run_case(load_target("builtin", device), case, device)).signatures() == []


def test_a_short_repro_imports_the_releases_module():
    from kvfuzz.short_repro import _sglang_module

    where = {v: _sglang_module(f"sglang=={v}", AITER_UNIFIED) for v in ("0.5.12", "0.5.16", "0.5.23")}
    assert where == {"0.5.12": "sglang.srt.layers.attention.triton_ops.aiter_unified_attention",
                     "0.5.16": "sglang.kernels.ops.kvcache.aiter_unified_attention",
                     "0.5.23": "sglang.kernels.ops.attention.aiter_unified_page_table"}


@pytest.mark.parametrize("op", OPS)
def test_the_short_call_launches_as_the_backend(op):
    case = next(iter(random_cases(op, 5, 1, in_contract_only=True)))
    (line,) = record(op).short_call(case, "kernel").lines
    assert "-(-max(page_table.shape[1], 1) // 1024))]" in line and "BLOCK_SIZE=1024" in line
    assert f"HAS_SWA={'swa_slot_mapping' in case.tensors}" in line
