"""update_trtllm_mha_graph_metadata (SGLang's TRT-LLM MHA fused CUDA-graph metadata update, 0.5.15 on)
as the op `trtllm_mha_graph_metadata`: the two oracles on generated cases, every violation out of
contract, the builtin on every kernel path (Q_MODE x HAS_SWA x HAS_SWA_OUT x SKIP_PAGE_TABLE),
seeded defects in a copy of the builtin found, and SGLang releases: `sglang==X` loads the launcher
from the release's trtllm_mha_graph_metadata.py, called by name with the backend's keywords, and the
backend's paths run clean under the release's variant (0.5.15's full-width rows, 0.5.17's live
prefix, 0.5.19's skip_page_table); releases before 0.5.15 do not offer the op and say why, without
a download. The release files come from the PyPI wheels through kvfuzz's cache, as in
tests/test_releases.py."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kvfuzz.case import Case, TensorSpec
from kvfuzz.execute import run_case
from kvfuzz.judge import judge
from kvfuzz.ops import record
from kvfuzz.strategies import random_cases
from kvfuzz.strategies.draw import RandomDraw
from kvfuzz.targets import load_target
from kvfuzz.targets.releases import RELEASES, TRTLLM_GRAPH

OP = "trtllm_mha_graph_metadata"
KERNEL = Path(__file__).resolve().parents[1] / "kvfuzz" / "kernels" / "trtllm_mha_graph_metadata.py"
# what TRTLLMHAAttnBackend._apply_cuda_graph_metadata passes (every wheel 0.5.15-0.5.23; skip_page_table 0.5.19 on)
BACKEND_KEYWORDS = {"req_pool_indices", "seq_lens", "req_to_token", "cache_seqlens", "cu_seqlens_k", "page_table", "bs",
                    "seqlen_offset", "max_seq_pages", "page_size", "swa_mapping", "swa_page_table", "out_cache_loc",
                    "swa_out_cache_loc", "cu_seqlens_q", "qlens", "q_stride", "q_mode"}


def hand(q_mode=0, swa=False, swa_out=False, skip=None, ps=16, P=4, offset=0, lens=(5, 33, 0), W=None, q_stride=0,
         n_out=None, L=None, pad=0, variant="default") -> Case:
    """A small contiguous case: bs = len(lens) requests over a 3-row pool of valid slots."""
    C = lambda dt, shape: TensorSpec.contiguous(dt, shape)  # noqa: E731
    bs, W = len(lens), W if W is not None else P
    cols = P * ps + 4
    g = np.random.default_rng(bs * 31 + ps)
    M = 300
    values = {"req_pool_indices": np.arange(bs) % 3, "seq_lens": np.array(lens),
              "req_to_token": g.integers(0, M, size=(3, cols))}
    tensors = {"req_pool_indices": C("int64", (bs,)), "seq_lens": C("int64", (bs,)),
               "req_to_token": C("int32", (3, cols)), "cache_seqlens": C("int32", (bs,)), "cu_seqlens_k": C("int32", (bs + 1,))}
    if not skip:
        tensors["page_table"] = TensorSpec("int32", (bs, W), (W + pad, 1))
    if q_mode:
        tensors["cu_seqlens_q"] = C("int32", (bs + 1,))
    if q_mode == 1:
        values["qlens"], tensors["qlens"] = np.array([3, 0, 7, 1][:bs] + [2] * max(bs - 4, 0)), C("int64", (bs,))
    if swa or swa_out:
        mapping = g.integers(0, 10_000, size=M)
        mapping[[0, -1]] = [0, -1]  # a freed entry, SGLang's sentinel
        values["swa_mapping"], tensors["swa_mapping"] = mapping, C("int64", (M,))
    if swa:
        tensors["swa_page_table"] = C("int32", (bs, W))
    L = L if L is not None else bs * max(q_stride, 1)
    if swa_out:
        tensors["swa_out_cache_loc"] = C("int64", (L,))
    n = n_out if n_out is not None else L
    locs = g.integers(0, M, size=n)
    if n:
        locs[0] = -1  # the skip sentinel
    values["out_cache_loc"], tensors["out_cache_loc"] = locs, C("int64", (n,))
    scalars = {"page_size": ps, "seqlen_offset": offset, "max_seq_pages": P, "q_mode": q_mode, "q_stride": q_stride}
    if skip is not None:
        scalars["skip_page_table"] = skip
    return Case(OP, scalars, tensors, values, variant=variant)


# the backend's paths: decode, draft decode (offset step + 1), target verify (offset = draft tokens),
# draft extend v2 (STRIDED), each without and with the SWA pool
BACKEND = {
    "decode": dict(), "decode swa": dict(swa=True, swa_out=True),
    "draft decode": dict(offset=2, lens=(14, 15, 1)), "target verify swa": dict(offset=4, swa=True, swa_out=True),
    "draft extend": dict(q_mode=2, q_stride=3), "draft extend swa": dict(q_mode=2, q_stride=3, swa=True, swa_out=True),
}
# the launcher's other paths: CUMSUM, one SWA output alone, out_cache_loc short, long and absent, a padded
# page table, the 512-column block's edges, skip_page_table (with the SWA write locations, and the tables given)
OTHERS = {
    "cumsum": dict(q_mode=1), "swa table only": dict(swa=True), "swa out only": dict(swa_out=True, n_out=1),
    "out long": dict(swa=True, swa_out=True, n_out=9), "out absent": dict(swa_out=True, n_out=0),
    "padded": dict(pad=5, swa=True, swa_out=True), "blocks": dict(ps=1, P=513, lens=(511, 512, 513), L=1025),
    "skip": dict(skip=True, q_mode=2, q_stride=2), "skip swa out": dict(skip=True, swa_out=True),
}
SKIP_OFF = {name: kw for name, kw in {**BACKEND, **OTHERS}.items() if not kw.get("skip")}


def signatures(target, case) -> list[str]:
    v = judge(case, run_case(target, case, "cpu"))
    assert v.not_target is None, (case.describe(), v.not_target)
    return v.signatures()


@pytest.fixture(scope="module")
def builtin():
    return load_target("builtin", "cpu")


def test_the_oracles_agree_on_generated_cases_of_every_variant():
    rec = record(OP)
    for variant in ("default", "live_prefix", "full_width"):
        for case in random_cases(OP, 11, 25, in_contract_only=True, variant=variant):
            status, reasons, expected = rec.contract.assess(case)
            assert status == "in_contract", reasons
            got = rec.torch_ref(case, "cpu")
            for name, cells in rec.contract.cells(case).items():
                req = cells.required
                assert np.array_equal(got[name].numpy()[req], expected.values[name][req]), (name, case.describe())


def test_the_cells_and_values_by_hand():
    """Prefix sums from index 1 (index 0 is the backend's preset), the live pages only (0.5.17 on)
    or every row to max_seq_pages (0.5.15), the mapping's -1 and the write locations' padding."""
    rec = record(OP)
    case = hand(q_mode=2, q_stride=3, swa=True, swa_out=True, offset=1, lens=(5, 33, 0), L=5, n_out=3)
    e = rec.contract.numpy_ref(case).values
    assert e["cache_seqlens"].tolist() == [6, 34, 1] and e["cu_seqlens_k"].tolist() == [0, 6, 40, 41]
    assert e["cu_seqlens_q"].tolist() == [0, 3, 6, 9]
    cells = rec.contract.cells(case)
    assert not cells["cu_seqlens_k"].required[0] and cells["cu_seqlens_k"].required[1:].all()
    assert cells["page_table"].required.sum(axis=1).tolist() == [1, 3, 1]  # cdiv(6|34|1, 16)
    assert cells["page_table"].untouched.sum() == 12 - 5
    mapping, locs = case.values["swa_mapping"], case.values["out_cache_loc"]
    assert e["swa_out_cache_loc"].tolist() == [-1, mapping[locs[1]], mapping[locs[2]], 0, 0]
    full = rec.contract.cells(case.replace(variant="full_width"))["page_table"]
    assert (full.required == cells["page_table"].required).all() and (full.required | full.may_write).all()
    skip = hand(skip=True)
    assert rec.contract.classify(skip)[0] == "in_contract"
    assert rec.contract.classify(skip.replace(variant="live_prefix"))[0] == "out_of_contract"  # no such argument


def test_each_violation_leaves_the_contract():
    g = record(OP).generator
    contract = record(OP).contract
    for kind in g.violations:
        for i in range(4):
            for variant in ("default", "full_width"):
                d = RandomDraw(f"violation:{kind}:{i}:{variant}")
                k = g.class_for(variant)(d)
                case = g.violation(d, g.in_class(d, k), k, kind).replace(variant=variant)
                assert contract.classify(case)[0] == "out_of_contract", (kind, case.describe())


def test_rows_past_the_tables_width_race():
    """racy: max_seq_pages 4 over rows of 2 (out of contract): row 0's last pages land on row 1's."""
    case = hand(P=4, W=2, lens=(64, 64))
    assert record(OP).contract.classify(case)[0] == "out_of_contract"
    assert record(OP).contract.racy(case)["page_table"].tolist() == [[False, False], [True, True]]


@pytest.mark.parametrize("name", list(BACKEND) + list(OTHERS))
def test_the_builtin_runs_every_path_clean(name, builtin):
    b = builtin.bindings[OP]
    assert b.generation == "0.5.19" and not b.bare and not b.defaulted
    case = hand(**{"skip": False, **{**BACKEND, **OTHERS}[name]})
    assert signatures(builtin, case) == []


MUTANTS = {
    "live-page mask off by one": ("live = (p < pages) & (col < C)", "live = (p <= pages) & (col < C)"),
    "page_table row stride dropped": ("tl.where(live & (p < W), pid * pt_s + p, 0)",
                                      "tl.where(live & (p < W), pid * W + p, 0)"),
    "grid one program short": ("grid = (bs + 1 + ", "grid = (bs + "),
}


@pytest.mark.parametrize("name", list(MUTANTS))
def test_seeded_defects_in_a_copy_of_the_builtin_are_found(name, tmp_path):
    old, new = MUTANTS[name]
    src = KERNEL.read_text()
    assert src.count(old) == 1, old
    src = src.replace(old, new).replace("from ._args import", "from kvfuzz.kernels._args import")
    path = tmp_path / f"mutant_{name.replace(' ', '_')}.py"
    path.write_text(src)
    target = load_target(str(path), "cpu")
    found = set()
    for kw in SKIP_OFF.values():
        found |= set(signatures(target, hand(**kw)))
        if found:
            break
    assert any(s.startswith(f"{OP}:") for s in found), found


def release_file(version: str) -> Path:
    """SGLang `version`'s trtllm_mha_graph_metadata.py from kvfuzz's cache (fetched once), or skip."""
    from test_releases import kernel_file

    return kernel_file(version, TRTLLM_GRAPH)


# (release, the API generation of its launcher, its variant): 0.5.15's rows rewritten to the static width,
# 0.5.17's live prefix, 0.5.23's (0.5.19's text) with skip_page_table
RELEASE_CASES = [("0.5.15", "0.5.15", "full_width"), ("0.5.17", "0.5.15", "live_prefix"),
                 ("0.5.23", "0.5.19", "default")]


@pytest.fixture(scope="module", params=RELEASE_CASES, ids=[r[0] for r in RELEASE_CASES])
def release(request):
    version, generation, variant = request.param
    release_file(version)
    return load_target(f"sglang=={version}", "cpu"), generation, variant


def test_a_release_is_called_with_the_backends_keywords_and_runs_its_paths_clean(release):
    t, generation, variant = release
    b = t.bindings[OP]
    assert not b.bare and b.by_name and b.generation == generation and not b.defaulted, b.describe()
    assert set(b.supplied) == BACKEND_KEYWORDS | ({"skip_page_table"} if generation == "0.5.19" else set())
    assert t.variants[OP] == variant and TRTLLM_GRAPH in t.description
    for name, kw in BACKEND.items():
        assert signatures(t, hand(**kw, variant=variant)) == [], name
    if generation == "0.5.19":  # the unified pool: no page table, the seqlen metadata only
        assert signatures(t, hand(skip=True, q_mode=2, q_stride=2)) == []


def test_the_full_width_rows_of_0_5_15_are_what_its_variant_allows_and_what_later_ones_forbid(release):
    """A row of one live page in a table of 4 columns: 0.5.15-0.5.16 rewrite all 4 from the stale
    slots (their variant allows it; the live-prefix variants find the tail written); 0.5.17 on leave
    3 stale, which both variants allow."""
    t, _, variant = release
    case = hand(lens=(5, 5))
    assert signatures(t, case.replace(variant="full_width")) == []
    live = signatures(t, case.replace(variant="live_prefix"))
    if variant == "full_width":
        assert any(":untouched_write:page_table" in s for s in live), live
    else:
        assert live == []


def test_releases_before_0_5_15_do_not_offer_the_op_and_fetch_nothing_for_it(monkeypatch):
    """0.5.14's backend rebuilds its graph metadata with torch ops: the op is missing with the reason,
    the release's other ops load, and no wheel is downloaded to look for the file."""
    from test_releases import kernel_file

    from kvfuzz.errors import TargetLoadError
    from kvfuzz.targets import wheels

    kernel_file("0.5.14", "trtllm_mha_page_table.py")
    monkeypatch.setattr(wheels, "_pip_download", lambda version, into: pytest.fail(f"downloaded {version}"))
    with pytest.raises(TargetLoadError, match=r"sglang==0\.5\.14 has no trtllm_mha_graph_metadata\.py"):
        wheels.sglang_kernel_file("0.5.14", TRTLLM_GRAPH)
    t = load_target("sglang==0.5.14", "cpu")
    assert OP not in t.bindings and "trtllm_mha_kv_indices" in t.bindings
    why = t.missing[OP]
    assert why.startswith("not offered by sglang 0.5.14: ") and "torch ops" in why and "\n" not in why
    assert all(OP in RELEASES[v].not_offered for v in ("0.5.6", "0.5.10", "0.5.13", "0.5.14"))


def test_a_short_repro_imports_the_releases_module():
    from kvfuzz.short_repro import _sglang_module

    where = {v: _sglang_module(f"sglang=={v}", TRTLLM_GRAPH) for v in ("0.5.15", "0.5.16", "0.5.23")}
    assert where == {"0.5.15": "sglang.srt.layers.attention.triton_ops.trtllm_mha_graph_metadata",
                     "0.5.16": "sglang.kernels.ops.kvcache.trtllm_mha_graph_metadata",
                     "0.5.23": "sglang.kernels.ops.attention.trtllm_mha_graph_metadata"}


@pytest.mark.slow
def test_the_builtin_passes_a_short_campaign_and_a_release_a_seeded_in_contract_stream():
    from kvfuzz.campaign import CampaignConfig, run_campaign

    res = run_campaign(CampaignConfig(ops=[OP], ops_named=True, device="cpu", budget_s=3, isolate=False, seed=5,
                                      minimize_budget_s=0))
    (stats,) = res.stats
    assert stats.cases > 5 and res.saved == [], (stats, res.saved)
    release_file("0.5.23")
    t = load_target("sglang==0.5.23", "cpu")
    for case in random_cases(OP, 4, 8, in_contract_only=True, variant="default"):
        assert signatures(t, case) == [], case.describe()
