"""decode_metadata's later-release arguments as checked contract: SGLang 0.5.20's
`skip_page_table` and 0.5.23's `zero_tail`, `full_v2p`, `swa_v2p` (unified memory, -1
tombstones mapping to the sink page 0). The contract and both oracles, the generator (which
draws them only for variants that have them), kvfuzz's builtin kernel (variant `strict`) and
the release kernels that take them (0.5.20: `skip`, 0.5.23: `fused`), under the interpreter
on the CPU or compiled on a GPU.
"""

from __future__ import annotations

import collections
import textwrap

import numpy as np
import pytest

import cases
from kvfuzz.corpus.format import SavedCase, case_from_json, case_to_json, environment_versions
from kvfuzz.execute import run_case
from kvfuzz.judge import judge
from kvfuzz.ops import CONTRACTS
from kvfuzz.strategies import GENERATORS, random_cases
from kvfuzz.targets import load_target

from test_releases import kernel_file

DECODE = CONTRACTS["decode_metadata"]


def page_table_of(case, name="page_table"):
    exp = DECODE.numpy_ref(case)
    return np.asarray(exp.values[name])[:, : case.scalars["max_seq_pages"]]


def torch_agrees(case):
    exp, got = DECODE.numpy_ref(case), DECODE.torch_ref(case, "cpu")
    for name, cells in DECODE.cells(case).items():
        assert np.array_equal(np.asarray(exp.values[name])[cells.required], got[name].numpy()[cells.required]), name


# ------------------------------------------------------------------------------------ the contract


def test_v2p_maps_each_virtual_page_and_a_tombstone_to_the_sink():
    base = cases.decode(ps=4, swa=True)
    case = cases.unified(base, full_v2p="tombstones", swa_v2p="permuted")
    v, P = case.values, case.scalars["max_seq_pages"]
    tokens = v["req_to_token"][v["req_pool_indices"][:, None], np.arange(P)[None, :] * 4]
    assert np.array_equal(page_table_of(case), np.maximum(v["full_v2p"][tokens // 4], 0))
    assert np.array_equal(page_table_of(case, "swa_page_table"), v["swa_v2p"][tokens // 4])  # no tombstone there
    assert (v["full_v2p"][tokens // 4] == -1).any() and (page_table_of(case) == 0).any()
    torch_agrees(case)
    # the static pool's mapping still maps token slots, beside a full v2p table
    mixed = cases.unified(base, full_v2p="identity")
    assert np.array_equal(page_table_of(mixed, "swa_page_table"), page_table_of(base, "swa_page_table"))
    torch_agrees(mixed)


@pytest.mark.parametrize("variant", ["fused", "strict"])
def test_zero_tail_requires_every_column_and_zeroes_the_dead_ones(variant):
    case = cases.unified(cases.decode(ps=16, delta=2, B=3), full_v2p="identity", zero_tail=True, variant=variant)
    P, cells = case.scalars["max_seq_pages"], DECODE.cells(case)["page_table"]
    assert cells.required[:, :P].all() and not cells.required[:, P:].any() and not cells.may_write.any()
    live = -(-(case.values["seq_lens"] + 2) // 16)
    pt = page_table_of(case)
    assert all((pt[i, live[i]:] == 0).all() and (pt[i, :live[i]] == page_table_of(case.replace(
        scalars={**case.scalars, "zero_tail": False}))[i, :live[i]]).all() for i in range(3))
    assert (live < P).any()  # some row has a tail
    torch_agrees(case)


def test_skip_page_table_writes_only_the_lengths():
    case = cases.unified(cases.decode(ps=1, swa=True), skip=True, variant="fused")
    cells = DECODE.cells(case)
    for name in ("page_table", "swa_page_table"):
        assert not cells[name].required.any() and not cells[name].may_write.any()
    assert cells["cu_seqlens_k"].required.all() and DECODE.kernel_path(case) == "skip"


@pytest.mark.parametrize("variant, allowed", [("default", ()), ("live_prefix", ()), ("skip", ("skip",)),
                                              ("fused", ("skip", "v2p")), ("strict", ("skip", "v2p"))])
def test_a_variant_has_only_the_arguments_its_releases_take(variant, allowed):
    base = cases.decode(ps=16, swa=True)
    with_v2p = cases.unified(base, full_v2p="identity", variant=variant)
    skipping = cases.unified(base, skip=True, variant=variant)
    assert (DECODE.classify(with_v2p)[0] == "in_contract") == ("v2p" in allowed), DECODE.classify(with_v2p)
    assert (DECODE.classify(skipping)[0] == "in_contract") == ("skip" in allowed), DECODE.classify(skipping)
    if "v2p" not in allowed:
        assert any("full_v2p is not an argument of variant" in r for r in DECODE.classify(with_v2p)[1])


@pytest.mark.parametrize("edit, reason", [
    (lambda t, v, n: v.__setitem__("full_v2p", v["full_v2p"][: n - 1]), "outside full_v2p"),  # sized for a smaller pool
    (lambda t, v, n: v["full_v2p"].__setitem__(slice(None), -2), "below -1"),
    (lambda t, v, n: (t.__setitem__("full_to_swa_index_mapping", cases.C("int64", (n * 16,))),
                      v.__setitem__("full_to_swa_index_mapping", np.zeros(n * 16, np.int64))), "exactly one of"),
])
def test_v2p_inputs_outside_the_contract(edit, reason):
    case = cases.unified(cases.decode(ps=16, swa=True), full_v2p="identity", swa_v2p="identity")
    t, v = dict(case.tensors), {k: np.array(x) for k, x in case.values.items()}
    edit(t, v, case.values["full_v2p"].shape[0])
    t["full_v2p"] = cases.C("int64", v["full_v2p"].shape)
    status, reasons = DECODE.classify(case.replace(tensors=t, values=v))
    assert status == "out_of_contract" and any(reason in r for r in reasons), reasons


def test_a_case_with_the_new_arguments_survives_the_corpus_format(tmp_path):
    case = cases.unified(cases.decode(ps=4, swa=True), full_v2p="tombstones", swa_v2p="permuted", zero_tail=True,
                         skip=False)
    saved = SavedCase(case=case, finding=None, target="builtin", device="cpu", versions=environment_versions(),
                      origin="hand")
    doc = case_to_json(saved)
    back = case_from_json(doc, {k: np.asarray(x) for k, x in case.values.items()}, tmp_path)
    assert back.case == case and back.case.scalars["zero_tail"] is True and doc["schema"] == 3


# ----------------------------------------------------------------------------------- the generator


def test_only_a_variant_with_the_arguments_draws_them():
    for variant in (None, "default", "live_prefix"):
        drawn = random_cases("decode_metadata", 2, 150, variant=variant)
        assert not any({"full_v2p", "swa_v2p"} & set(c.tensors) or c.scalars.get("skip_page_table")
                       or "zero_tail" in c.scalars for c in drawn), variant
    skip = random_cases("decode_metadata", 2, 150, variant="skip")
    assert any(c.scalars.get("skip_page_table") for c in skip) and not any("full_v2p" in c.tensors for c in skip)


@pytest.mark.parametrize("variant", ["fused", "strict"])
def test_the_0_5_23_arguments_are_drawn_in_contract_with_every_feature(variant):
    g = GENERATORS["decode_metadata"]
    seen = collections.Counter()
    for case in random_cases("decode_metadata", 3, 300, in_contract_only=True, variant=variant):
        assert DECODE.classify(case)[0] == "in_contract", DECODE.classify(case)
        seen.update(g.all_features(case))
    for feature in ("full_v2p", "swa_v2p", "zero_tail", "path:skip", "tombstone:full_v2p", "tombstone:swa_v2p",
                    "non_identity:full_v2p", "path:swa", "path:ps1", "path:general"):
        assert seen[feature] >= 5, (feature, seen[feature])


# ------------------------------------------------------------------------------------- the kernels


def unified_cases(variant):
    """Hand cases for each new path, judged by `variant`."""
    out = {}
    for ps in (1, 16):
        for kind in ("identity", "permuted", "tombstones", "unbound"):
            out[f"full_v2p {kind} ps{ps}"] = cases.unified(cases.decode(ps=ps), full_v2p=kind, variant=variant)
        out[f"swa_v2p ps{ps}"] = cases.unified(cases.decode(ps=ps, swa=True), full_v2p="permuted",
                                               swa_v2p="tombstones", variant=variant)
        out[f"mapping + full_v2p ps{ps}"] = cases.unified(cases.decode(ps=ps, swa=True), full_v2p="tombstones",
                                                          variant=variant)
        out[f"zero_tail ps{ps}"] = cases.unified(cases.decode(ps=ps, swa=True, delta=1, P=40), zero_tail=True,
                                                 variant=variant)
        out[f"zero_tail v2p ps{ps}"] = cases.unified(cases.decode(ps=ps, swa=True, delta=1, P=40), zero_tail=True,
                                                     full_v2p="permuted", swa_v2p="permuted", variant=variant)
        out[f"skip ps{ps}"] = cases.unified(cases.decode(ps=ps, swa=True), skip=True, full_v2p="identity",
                                            variant=variant)
    return out


def assert_clean(target, case, device):
    v = judge(case, run_case(target, case, device))
    assert v.status == "in_contract" and v.findings == [], (case.describe(), v.signatures())


@pytest.mark.parametrize("spec, variant", [("builtin", "strict"), ("sglang==0.5.23", "fused")])
def test_the_kernels_taking_0_5_23s_arguments_pass_every_new_path(spec, variant, device):
    if spec != "builtin":
        kernel_file(spec.split("==")[1])
    target = load_target(spec, device)
    assert target.variants["decode_metadata"] == variant
    for name, case in unified_cases(variant).items():
        assert DECODE.classify(case)[0] == "in_contract", name
        assert_clean(target, case, device)


def test_0_5_20_skips_the_page_tables(device):
    kernel_file("0.5.20")
    target = load_target("sglang==0.5.20", device)
    assert target.variants["decode_metadata"] == "skip"
    for ps in (1, 16):
        assert_clean(target, cases.unified(cases.decode(ps=ps, swa=True), skip=True, variant="skip"), device)


@pytest.mark.thorough  # seconds of processes and campaigns: CI's thorough stage
def test_builtin_passes_a_seeded_stream_of_the_new_arguments(device):
    """In and out of contract (v2p pages past the table, entries below -1 among the violations)."""
    target = load_target("builtin", device)
    statuses = collections.Counter()
    for case in random_cases("decode_metadata", 8, 120, variant="strict"):
        v = judge(case, run_case(target, case, device))
        statuses[v.status] += 1
        assert v.findings == [] and v.not_target is None, (case.describe(), v.signatures())
    assert statuses["in_contract"] > 60 and statuses["out_of_contract"] > 5, statuses


def test_builtin_refuses_two_swa_mappings(device):
    import torch

    case = cases.unified(cases.decode(ps=16, swa=True), swa_v2p="identity")
    views = {k: torch.as_tensor(np.array(x)).to(device) for k, x in case.values.items()}
    views |= {k: torch.zeros(s.shape, dtype=torch.int32, device=device) for k, s in case.tensors.items()
              if k not in views}
    from kvfuzz.kernels import normal_decode_set_metadata

    with pytest.raises(ValueError, match="exactly one SWA mapping"):
        normal_decode_set_metadata(views["cache_seqlens_int32"], views["cu_seqlens_k"], views["page_table"],
                                   views["req_to_token"], views["req_pool_indices"], None,
                                   case.scalars["max_seq_pages"], views["seq_lens"], 0, 16,
                                   swa_page_table=views["swa_page_table"], swa_v2p=views["swa_v2p"],
                                   full_to_swa_index_mapping=views["swa_v2p"])


def test_a_kernel_copying_tombstones_into_the_page_table_is_caught(tmp_path, device):
    """The detector itself: a 0.5.23-signature target that copies v2p entries verbatim (a -1
    tombstone becomes page -1) fails exactly on the tombstoned cells."""
    f = tmp_path / "copies_tombstones.py"
    f.write_text(textwrap.dedent("""
        import torch

        def normal_decode_set_metadata(cache_seqlens_int32, cu_seqlens_k, page_table, req_to_token,
                                       req_pool_indices, max_seq_pages, seq_lens, seq_len_delta, page_size,
                                       swa_page_table=None, full_to_swa_index_mapping=None,
                                       skip_page_table=False, full_v2p=None, swa_v2p=None, zero_tail=False):
            lens = (seq_lens + seq_len_delta).to(torch.int32)
            cache_seqlens_int32.copy_(lens)
            cu_seqlens_k[0] = 0
            cu_seqlens_k[1:].copy_(torch.cumsum(lens, 0, dtype=torch.int32))
            P = max_seq_pages
            cols = torch.arange(P, device=seq_lens.device) * page_size
            tok = req_to_token[req_pool_indices.long()[:, None], cols[None, :]].long()
            pages = torch.div(tok, page_size, rounding_mode="floor")
            page_table[:, :P] = (full_v2p.long()[pages] if full_v2p is not None else pages).to(torch.int32)
    """))
    target = load_target(str(f), device)
    assert target.variants["decode_metadata"] == "fused"
    clean = cases.unified(cases.decode(ps=4), full_v2p="permuted", variant="fused")
    assert_clean(target, clean, device)
    bad = cases.unified(cases.decode(ps=4), full_v2p="tombstones", variant="fused")
    v = judge(bad, run_case(target, bad, device))
    assert v.signatures() == ["decode_metadata:general:mismatch:page_table:partial"], v.signatures()


# ------------------------------------------------------------------- 0.5.17-0.5.18: v2p_page_table


def v2p_cases(variant, kind="permuted"):
    """0.5.17-0.5.18's unified memory: the full table (passed as v2p_page_table) and a multiplier;
    with `v2p_swa`, the unified SWA pool too."""
    out = {}
    for ps in (1, 16):
        for mult in (1, 3):
            base = cases.decode(ps=ps, swa=True)
            out[f"ps{ps} x{mult}"] = cases.unified(cases.decode(ps=ps), full_v2p=kind, variant=variant)
            out[f"ps{ps} x{mult} static swa"] = cases.unified(base, full_v2p=kind, variant=variant)
            if variant != "v2p":
                out[f"ps{ps} x{mult} unified swa"] = cases.unified(base, full_v2p=kind, swa_v2p=kind, variant=variant)
            for name in [n for n in out if n.startswith(f"ps{ps} x{mult}")]:
                out[name] = out[name].with_scalars(kernel_page_multiplier=mult)
    return out


@pytest.mark.parametrize("spec, variant", [("sglang==0.5.17", "v2p"), ("sglang==0.5.18", "v2p_swa"),
                                           ("builtin", "strict")])
def test_the_kernels_taking_0_5_17s_arguments_translate_bound_pages(spec, variant, device):
    if spec != "builtin":
        kernel_file(spec.split("==")[1])
    target = load_target(spec, device)
    assert target.variants["decode_metadata"] == variant
    for name, case in v2p_cases(variant).items():
        assert DECODE.classify(case)[0] == "in_contract", name
        assert_clean(target, case, device)


def test_the_multiplier_scales_the_full_table_only():
    case = cases.unified(cases.decode(ps=16, swa=True), full_v2p="tombstones", swa_v2p="permuted", variant="v2p_swa")
    scaled = case.with_scalars(kernel_page_multiplier=3)
    assert np.array_equal(page_table_of(scaled), 3 * page_table_of(case))
    assert np.array_equal(page_table_of(scaled, "swa_page_table"), page_table_of(case, "swa_page_table"))
    torch_agrees(scaled)
    assert DECODE.classify(scaled.replace(variant="fused"))[0] == "out_of_contract"  # 0.5.23 has no multiplier


@pytest.mark.parametrize("version, variant", [("0.5.17", "v2p"), ("0.5.18", "v2p_swa")])
def test_0_5_17_and_0_5_18_copy_tombstones_into_the_page_table(version, variant, device):
    """A real defect of 0.5.17-0.5.18 (0.5.23 clamps): an unbound page's -1 is written into
    page_table (times the multiplier), not the sink page 0; 0.5.18's unified SWA table too."""
    kernel_file(version)
    target = load_target(f"sglang=={version}", device)
    case = cases.unified(cases.decode(ps=16), full_v2p="tombstones", variant=variant)
    v = judge(case, run_case(target, case, device))
    assert v.signatures() == ["decode_metadata:general:mismatch:page_table:partial"], v.signatures()
    got = next(f for f in v.findings).cells
    assert all(c["got"] == -1 and c["numpy"] == 0 for c in got), got
    if variant == "v2p_swa":
        swa = cases.unified(cases.decode(ps=16, swa=True), swa_v2p="tombstones", variant=variant)
        assert judge(swa, run_case(target, swa, device)).signatures() == [
            "decode_metadata:swa:mismatch:swa_page_table:partial"]


def test_0_5_17_reads_v2p_page_table_without_its_stride(device):
    """A real defect of 0.5.17-0.5.18: `v2p_ptr + page` ignores the table's stride (0.5.23 passes it)."""
    from kvfuzz.case import TensorSpec

    kernel_file("0.5.17")
    target = load_target("sglang==0.5.17", device)
    case = cases.unified(cases.decode(ps=16), full_v2p="permuted", variant="v2p")
    n = case.tensors["full_v2p"].shape[0]
    strided = case.replace(tensors={**case.tensors, "full_v2p": TensorSpec("int64", (n,), (2,))})
    assert_clean(target, case, device)
    assert judge(strided, run_case(target, strided, device)).signatures() == [
        "decode_metadata:general:mismatch:page_table:all"]
    kernel_file("0.5.23")
    assert_clean(load_target("sglang==0.5.23", device), strided.replace(variant="fused"), device)


# ------------------------------------------------------------------------- 0.5.19: read tables


def test_a_read_table_is_copied_verbatim_column_by_column():
    case = cases.read_table(cases.decode(ps=16, swa=True))
    v, P = case.values, case.scalars["max_seq_pages"]
    rows = v["req_pool_indices"]
    assert np.array_equal(page_table_of(case), v["req_to_token"][rows][:, :P])  # no division, column c not c * 16
    assert np.array_equal(page_table_of(case, "swa_page_table"), v["swa_src_table"][rows][:, :P])
    torch_agrees(case)
    assert DECODE.classify(case)[0] == "in_contract"
    for variant in ("live_prefix", "fused", "strict"):  # only 0.5.19 takes read tables
        assert DECODE.classify(case.replace(variant=variant))[0] == "out_of_contract", variant


@pytest.mark.parametrize("edit, reason", [
    (lambda c: c.with_scalars(src_is_read_table=False), "swa_src_table comes with src_is_read_table"),
    (lambda c: c.replace(tensors={**c.tensors, "swa_src_table": cases.TensorSpec(
        "int64", c.tensors["req_to_token"].shape, (1, c.tensors["req_to_token"].shape[0]))}), "shape and strides"),
])
def test_read_table_inputs_outside_the_contract(edit, reason):
    status, reasons = DECODE.classify(edit(cases.read_table(cases.decode(ps=4, swa=True))))
    assert status == "out_of_contract" and any(reason in r for r in reasons), reasons


def test_0_5_19_copies_read_tables(device):
    kernel_file("0.5.19")
    target = load_target("sglang==0.5.19", device)
    assert target.variants["decode_metadata"] == "read_table"
    for ps in (1, 16):
        for swa in (False, True):
            assert_clean(target, cases.read_table(cases.decode(ps=ps, swa=swa, delta=1)), device)


def test_0_5_19_refuses_a_non_contiguous_pair_of_read_tables(device):
    """A real defect of 0.5.19: it makes req_to_token contiguous before checking that swa_src_table
    shares its strides, so two read tables with the same non-contiguous strides (views into wider
    buffers, as the docstring allows: "same shape and strides") always fail that assertion."""
    from kvfuzz.case import TensorSpec

    kernel_file("0.5.19")
    target = load_target("sglang==0.5.19", device)
    case = cases.read_table(cases.decode(ps=16, swa=True))
    R, T = case.tensors["req_to_token"].shape
    padded = TensorSpec("int64", (R, T), (T + 3, 1))
    case = case.replace(tensors={**case.tensors, "req_to_token": padded, "swa_src_table": padded})
    assert DECODE.classify(case)[0] == "in_contract"
    v = judge(case, run_case(target, case, device))
    assert v.signatures() == ["decode_metadata:swa:crash:-:AssertionError"], v.signatures()
