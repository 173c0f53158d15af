"""Every SGLang release from 0.5.13 to 0.5.23 as a target: entry points bound by parameter name
(0.5.19 dropped `strided_indices`, so 0.5.14's positional call no longer fits), the contract
variant chosen from the release (the live prefix from 0.5.17; 0.5.20's and 0.5.23's arguments
from the case, tests/test_decode_unified.py), a signature kvfuzz cannot call
refused in one line before any case runs.

The release kernel files come from the wheels on PyPI, fetched once into $KVFUZZ_CACHE (default
~/.cache/kvfuzz); a test that needs one is skipped, with the reason, when PyPI cannot be reached
and the cache does not hold it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import cases
from kvfuzz.case import TensorSpec
from kvfuzz.errors import TargetLoadError
from kvfuzz.execute import HARNESS, run_case
from kvfuzz.judge import judge
from kvfuzz.ops import CONTRACTS, record, records
from kvfuzz.targets import load_target, variant_for, variant_lacks
from kvfuzz.targets.releases import (AITER_UNIFIED, KV_INDICES, METADATA, PA_PAGE_TABLE, RELEASES, TRTLLM_GRAPH,
                                     TRTLLM_MHA, file_release, kernel_files, known_releases, op_file, parse_version,
                                     same_file_releases, select_variant, variant_for_release)

LOADABLE = tuple(v for v, r in RELEASES.items() if r.kernel_file)
# one release per distinct kernel file, as RELEASES says (0.5.13 = 0.5.14 = 0.5.15, 0.5.20 = 0.5.21 = 0.5.22)
DISTINCT = tuple(dict.fromkeys(file_release(v) for v in LOADABLE))
SHARING = tuple(v for v in LOADABLE if RELEASES[v].same_file)  # a kernel file that another release ships too
# (file, release) of each release whose copy of a kernel file is another release's, every file; of the
# extracted releases only the two the other tests fetch (0.5.6: 0.5.6 - 0.5.9's metadata.py, 0.5.10)
SHARED = tuple((name, v) for v, r in RELEASES.items() for name, f in r.files.items()
               if f.same_as and v in LOADABLE + ("0.5.6", "0.5.10"))


def kernel_file(version: str, name: str = METADATA) -> Path:
    from kvfuzz.targets.wheels import sglang_kernel_file

    try:
        return sglang_kernel_file(version, name)
    except TargetLoadError as exc:
        if "cannot fetch" in str(exc):
            pytest.skip(f"sglang=={version} is not cached and PyPI cannot be reached: {exc}")
        raise


def release_target(version: str, device: str):
    kernel_file(version)
    return load_target(f"sglang=={version}", device)


def in_contract(case, target):
    """The case as the campaign judges it against `target`: the variant the target selects."""
    return case.replace(variant=variant_for(case.op, None, target))


DECODE_CASES = {
    "ps1": cases.decode(ps=1),
    "general": cases.decode(ps=16, delta=2),
    "swa": cases.decode(ps=16, swa=True),
    "swa ps1": cases.decode(ps=1, swa=True),
    "P=0": cases.decode(ps=1, P=0),
    "int32": cases.decode(ps=4, dtype="int32"),
}


# ----------------------------------------------------------------------------- variants by release


def test_version_detection_picks_the_live_prefix_from_0_5_17():
    for v in ("0.5.13", "0.5.13.post1", "0.5.14", "0.5.15.post1", "0.5.16"):
        assert variant_for_release("decode_metadata", v) == "default", v
    assert variant_for_release("decode_metadata", "0.5.17") == "v2p"  # the live prefix, and unified memory
    assert variant_for_release("decode_metadata", "0.5.18") == "v2p_swa"  # and the unified SWA pool
    assert variant_for_release("decode_metadata", "0.5.19") == "read_table"  # and read tables
    for v in ("0.5.20", "0.5.21", "0.5.22"):  # the live prefix, and skip_page_table from the case
        assert variant_for_release("decode_metadata", v) == "skip", v
    for v in ("0.5.23", "0.5.23.post2", "0.6.0", "1.0"):  # and zero_tail, full_v2p, swa_v2p
        assert variant_for_release("decode_metadata", v) == "fused", v
    for variant in ("v2p", "read_table", "skip", "fused"):
        assert variant in CONTRACTS["decode_metadata"].variants and "live_prefix" in CONTRACTS[
            "decode_metadata"].variants[variant]
    for v in LOADABLE:  # nothing else changed its contract
        assert variant_for_release("num_kv_splits", v) == "default"
        assert variant_for_release("swa_spec_page_table", v) == "default"
    assert parse_version("0.5.15.post1") == (0, 5, 15) and parse_version("v0.6") == (0, 6, 0)
    assert parse_version("nightly") is None


def test_the_variant_docs_name_the_releases_they_cover():
    """`kvfuzz ops` prints these: what it says matches what kvfuzz picks."""
    variants = CONTRACTS["decode_metadata"].variants
    assert "0.5.10-0.5.16" in variants["default"] and "0.5.17 and later" in variants["live_prefix"]
    assert "0.5.20-0.5.22" in variants["skip"] and "0.5.23" in variants["fused"] and "builtin" in variants["strict"]
    assert "0.5.6-0.5.23" in CONTRACTS["num_kv_splits"].variants["default"]
    assert "0.5.6-0.5.23" in CONTRACTS["swa_spec_page_table"].variants["default"]


def test_the_release_table_says_which_releases_ship_one_kernel_file():
    assert DISTINCT == ("0.5.14", "0.5.16", "0.5.17", "0.5.18", "0.5.19", "0.5.20", "0.5.23")
    assert SHARING == ("0.5.13", "0.5.15", "0.5.21", "0.5.22")
    assert known_releases().index("0.5.13.post1") == known_releases().index("0.5.13") + 1
    assert same_file_releases("0.5.21") == ("0.5.20", "0.5.21", "0.5.22")
    assert same_file_releases("0.5.9") == ("0.5.6", "0.5.6.post1", "0.5.6.post2", "0.5.7", "0.5.8", "0.5.8.post1", "0.5.9")
    # per file: 0.5.22 ships 0.5.20's metadata.py and a kv_indices.py of its own
    assert same_file_releases("0.5.22", KV_INDICES) == ("0.5.22",)
    assert same_file_releases("0.5.16", KV_INDICES) == ("0.5.14", "0.5.15", "0.5.15.post1", "0.5.16")
    assert file_release("0.5.13.post1", KV_INDICES) == "0.5.13" and file_release("0.5.12.post1", KV_INDICES) == "0.5.8"
    assert same_file_releases("0.5.7", KV_INDICES) == ("0.5.6", "0.5.6.post1", "0.5.6.post2", "0.5.7")
    assert op_file("flashinfer_kv_indices") == KV_INDICES and op_file("decode_metadata") == METADATA
    assert op_file("chunked_prefix_kv_indices") == op_file("flashmla_kv_indices") == KV_INDICES
    # the TRT-LLM MHA page table from 0.5.14 on: 0.5.16 moved it and changed it, 0.5.20 re-wrapped two asserts
    assert op_file("trtllm_mha_kv_indices") == TRTLLM_MHA and TRTLLM_MHA in kernel_files()
    assert same_file_releases("0.5.15.post1", TRTLLM_MHA) == ("0.5.14", "0.5.15", "0.5.15.post1")
    assert same_file_releases("0.5.23", TRTLLM_MHA) == ("0.5.20", "0.5.21", "0.5.22", "0.5.23")
    assert [v for v in RELEASES if TRTLLM_MHA not in RELEASES[v].files] == [
        v for v in RELEASES if parse_version(v) < (0, 5, 14)]
    # the PA-SWA page table from 0.5.15 on: extracted from 0.5.15's FlashAttention backend, its own file
    # from 0.5.16, byte for byte to 0.5.23
    assert op_file("pa_page_table") == PA_PAGE_TABLE and PA_PAGE_TABLE in kernel_files()
    assert same_file_releases("0.5.15.post1", PA_PAGE_TABLE) == ("0.5.15", "0.5.15.post1")
    assert same_file_releases("0.5.23", PA_PAGE_TABLE) == tuple(f"0.5.{m}" for m in range(16, 24))
    assert RELEASES["0.5.15"].files[PA_PAGE_TABLE].backends == (
        ("sglang/srt/layers/attention/flashattention_backend.py", ("_build_pa_page_table",)),)
    assert [v for v in RELEASES if PA_PAGE_TABLE not in RELEASES[v].files] == [
        v for v in RELEASES if parse_version(v) < (0, 5, 15)]
    # the fused CUDA-graph metadata update from 0.5.15 on: 0.5.17 writes the live pages only, 0.5.19 adds
    # skip_page_table
    assert op_file("trtllm_mha_graph_metadata") == TRTLLM_GRAPH and TRTLLM_GRAPH in kernel_files()
    assert same_file_releases("0.5.16", TRTLLM_GRAPH) == ("0.5.15", "0.5.15.post1", "0.5.16")
    assert same_file_releases("0.5.18", TRTLLM_GRAPH) == ("0.5.17", "0.5.18")
    assert same_file_releases("0.5.23", TRTLLM_GRAPH) == ("0.5.19", "0.5.20", "0.5.21", "0.5.22", "0.5.23")
    assert [v for v in RELEASES if TRTLLM_GRAPH not in RELEASES[v].files] == [
        v for v in RELEASES if parse_version(v) < (0, 5, 15)]
    # the AITER page tables from 0.5.12 on: one file, the same bytes in every release (moved 0.5.16, renamed 0.5.23)
    assert op_file("aiter_ragged_page_table") == op_file("aiter_req_to_token_page_table") == AITER_UNIFIED
    assert same_file_releases("0.5.23", AITER_UNIFIED) == tuple(
        v for v in known_releases() if parse_version(v) >= (0, 5, 12))
    assert [v for v in RELEASES if AITER_UNIFIED not in RELEASES[v].files] == [
        v for v in RELEASES if parse_version(v) < (0, 5, 12)]
    for name in kernel_files():
        for v in known_releases():  # one file is judged alike, whichever release ships it (kvfuzz bisect runs it once)
            f = file_release(v, name)
            own = RELEASES[f].files.get(name)  # None: the release has no such file (it stands for itself)
            assert own is None or own.same_as is None, (name, v)
            for op in (op for op in records() if op_file(op) == name):
                assert RELEASES[f].api.get(op) == (RELEASES.get(v) or RELEASES[f]).api.get(op), (name, v, op)
                assert variant_for_release(op, v) == variant_for_release(op, f), (v, op)


# ------------------------------------------------------------------- every release's real kernel file


def generated_body(path: Path) -> bytes:
    """A cached kernel file without the header of an extracted one (where it came from)."""
    lines = path.read_bytes().split(b"\n")
    if lines[0].startswith(b"# Generated by kvfuzz"):
        lines = lines[next(i for i, line in enumerate(lines) if not line.startswith(b"#")):]
    return b"\n".join(lines)


@pytest.mark.parametrize("name, version", SHARED)
def test_a_release_said_to_ship_another_ones_kernel_file_ships_it_byte_for_byte(name, version):
    same_as = RELEASES[version].files[name].same_as
    assert generated_body(kernel_file(version, name)) == generated_body(kernel_file(same_as, name))


@pytest.mark.parametrize("name, version", [(n, v) for n in kernel_files()
                                           for v in dict.fromkeys(file_release(r, n) for r in RELEASES
                                                                  if n in RELEASES[r].files)])
def test_releases_said_to_ship_their_own_file_differ_from_the_one_before(name, version):
    """Each distinct copy differs from the previous distinct copy (the table groups no more than it may)."""
    own = [v for v in RELEASES if name in RELEASES[v].files and file_release(v, name) == v]
    i = own.index(version)
    if i:
        assert generated_body(kernel_file(version, name)) != generated_body(kernel_file(own[i - 1], name))


# one release per distinct kv_indices.py (0.5.6 - 0.5.7's and 0.5.8 - 0.5.12's extracted, 0.5.13's, ...)
KV_DISTINCT = tuple(dict.fromkeys(file_release(v, KV_INDICES) for v in ("0.5.6", "0.5.10") + LOADABLE))


@pytest.mark.parametrize("version", KV_DISTINCT)
def test_each_kv_indices_file_offers_the_ops_its_release_has(version, device):
    """The ops of kv_indices.py a release offers are those RELEASES gives an API generation, each
    bound to it from the release's kv_indices.py; the others say why (0.5.13: the chunked-prefix
    kernel is not in its kv_indices.py)."""
    kv_ops = {op for op in records() if op_file(op) == KV_INDICES}
    assert kv_ops == {"flashinfer_kv_indices", "chunked_prefix_kv_indices", "flashmla_kv_indices"}
    kernel_file(version, KV_INDICES)
    t = release_target(version, device)
    api = RELEASES[version].api
    assert {op for op in kv_ops if op in t.bindings} == kv_ops & set(api), t.missing
    for op in kv_ops & set(api):
        b = t.bindings[op]
        assert b.by_name and b.generation == api[op] and not b.defaulted, (op, b.describe())
        assert t.entries[op] is getattr(t.modules[KV_INDICES], CONTRACTS[op].entry)
    for op in kv_ops - set(api):
        assert t.missing[op] == f"not offered by sglang {version}: {RELEASES[version].not_offered[op]}"
    assert (version == "0.5.13") == (kv_ops - set(api) == {"chunked_prefix_kv_indices"})


@pytest.mark.parametrize("version", DISTINCT)
def test_each_release_binds_by_name_to_its_api_generation(version, device):
    t = release_target(version, device)
    assert set(t.bindings) == set(RELEASES[version].api), t.missing  # draft_extend from 0.5.16 on
    for op, b in t.bindings.items():
        assert b.by_name and b.generation == RELEASES[version].api[op], (op, b.describe())
        assert not b.defaulted, b.defaulted  # every parameter of every release is known
        # the version (sglang==X) and the signature (the same file loaded by path) pick the same variant,
        # but for 0.5.18's decode: its signature is 0.5.17's, so by path its unified SWA pool is not drawn;
        # and for 0.5.17-0.5.18's graph metadata: their signature is 0.5.15's, so by path its full_width
        # variant judges them (which allows their untouched tails)
        by_version = t.variants[op]
        assert by_version == variant_for_release(op, version)
        by_path = "v2p" if (version, op) == ("0.5.18", "decode_metadata") else "full_width" if (
            op == "trtllm_mha_graph_metadata" and version in ("0.5.17", "0.5.18")) else by_version
        assert select_variant(op, None, b)[0] == by_path
        # its parameters pass exactly that variant's later arguments (0.5.18-0.5.22's swa_v2p rides
        # in token_to_kv_pool, which only the release tells), so its own variant is never refused
        rides = {"swa_v2p"} if op == "decode_metadata" and version in ("0.5.19", "0.5.20", "0.5.21", "0.5.22") else set()
        assert set(b.takes) == set(CONTRACTS[op].variant_args.get(by_path, ())) - rides, b.takes
        assert variant_lacks(op, by_version, t) == ()


def test_builtin_takes_every_argument_of_strict_but_read_tables(device):
    t = load_target("builtin", device)
    assert set(t.bindings["decode_metadata"].takes) == set(CONTRACTS["decode_metadata"].variant_args["strict"])
    assert variant_lacks("decode_metadata", "read_table", t) == ("src_is_read_table", "swa_src_table")
    assert variant_lacks("decode_metadata", "fused", t) == () == variant_lacks("num_kv_splits", "sglang", t)


def test_the_same_kernel_file_loaded_by_path_selects_by_its_signature(device):
    t = load_target(str(kernel_file("0.5.17")), device)
    assert t.release is None and t.variants["decode_metadata"] == "v2p"
    assert "signature of SGLang 0.5.17" in t.variant_reasons["decode_metadata"]
    assert load_target(str(kernel_file("0.5.14")), device).variants["decode_metadata"] == "default"


def test_new_arguments_are_set_to_turn_their_paths_off(device):
    b = release_target("0.5.23", device).bindings["decode_metadata"]
    assert dict(b.neutral) == {}  # every 0.5.23 argument comes from the case (absent: its off value)
    assert {"full_to_swa_index_mapping", "skip_page_table", "full_v2p", "swa_v2p", "zero_tail"} <= set(b.supplied)
    assert "strided_indices" not in b.supplied
    case = cases.decode(ps=16)
    kwargs = b.arguments({name: name for name in case.tensors}, case.scalars)[1]
    assert (kwargs["skip_page_table"], kwargs["full_v2p"], kwargs["swa_v2p"], kwargs["zero_tail"]) == (
        False, None, None, False)
    case = cases.unified(cases.decode(ps=16, swa=True), full_v2p="identity", swa_v2p="identity", zero_tail=True,
                         variant="fused")
    kwargs = b.arguments({name: name for name in case.tensors}, case.scalars)[1]
    assert (kwargs["full_v2p"], kwargs["swa_v2p"], kwargs["zero_tail"], kwargs["full_to_swa_index_mapping"]) == (
        "full_v2p", "swa_v2p", True, None)
    splits23 = release_target("0.5.23", device).bindings["num_kv_splits"]
    assert splits23.neutral == {} and "uneven_batch_ptr" in splits23.supplied and splits23.lacks == ()
    b19 = release_target("0.5.19", device).bindings["decode_metadata"]
    assert dict(b19.neutral) == {} and {"src_is_read_table", "swa_src_table"} <= set(b19.supplied)
    case = cases.decode(ps=16, swa=True)
    args, kwargs = b19.arguments({name: name for name in case.tensors}, case.scalars)
    assert args == [] and "strided_indices" not in kwargs and kwargs["page_size"] == 16
    assert kwargs["max_seq_pages"] == case.scalars["max_seq_pages"] and kwargs["swa_page_table"] == "swa_page_table"
    assert kwargs["token_to_kv_pool"].full_to_swa_index_mapping == "full_to_swa_index_mapping"


@pytest.mark.parametrize("version", ("0.5.14", "0.5.17", "0.5.19", "0.5.20", "0.5.23"))
def test_decode_cases_run_on_each_generation_without_false_findings(version, device):
    """The false `TypeError: ... multiple values for argument 'swa_page_table'` of 0.5.19 on is
    gone, and in-contract cases judged by the release's variant give no false mismatch."""
    t = release_target(version, device)
    for name, case in DECODE_CASES.items():
        case = in_contract(case, t)
        out = run_case(t, case, device)
        assert [r.error for r in out.runs] == [None], (name, out.runs[0].error)
        v = judge(case, out)
        assert v.status == "in_contract" and v.findings == [], (name, v.signatures())


@pytest.mark.parametrize("version", ("0.5.17", "0.5.20"))
def test_the_live_prefix_releases_would_fail_the_default_contract(version, device):
    """Why the variant matters: 0.5.17 on leave the columns past the live prefix stale, which the
    0.5.14 contract calls never written (the false alarm `--variant live_prefix` used to hide)."""
    t = release_target(version, device)
    case = cases.decode(ps=16, delta=2)
    assert judge(case, run_case(t, case, device)).signatures() == \
        ["decode_metadata:general:mismatch:page_table:partial"]
    assert judge(in_contract(case, t), run_case(t, case, device)).findings == []


def test_splits_and_spec_ops_run_on_0_5_23(device):
    t = release_target("0.5.23", device)
    for case in (cases.splits([1, 50, 4000, 99], num_group=2), cases.spec(la=(255, 256, 257), R=3, WB=4)):
        v = judge(in_contract(case, t), run_case(t, case, device))
        assert v.status == "in_contract" and v.findings == [], v.signatures()


def with_uneven_batch(case):
    return case.replace(tensors={**case.tensors, "uneven_batch": TensorSpec.contiguous("int32", (1,))})


@pytest.mark.parametrize("lens", ([100, 80, 100], [100, 81, 90], [1, 50, 4000, 99], [7]))
def test_0_5_23_writes_uneven_batch_as_the_contract_says(lens, device):
    """uneven_batch_ptr: min < max after the ratio rule (80 of 100 is uneven, 81 is not)."""
    t = release_target("0.5.23", device)
    case = with_uneven_batch(cases.splits(lens, num_group=2, variant="sglang"))
    v = judge(case, out := run_case(t, case, device))
    assert v.status == "in_contract" and v.findings == [], v.signatures()
    assert out.runs[0].error is None and "uneven_batch_ptr" in t.bindings["num_kv_splits"].supplied


def test_releases_before_0_5_23_lack_uneven_batch_and_campaigns_leave_it_out(tmp_path, device):
    from kvfuzz.corpus import SavedCase, environment_versions
    from kvfuzz.engines.common import fit_target
    from kvfuzz.replay import replay

    t = release_target("0.5.22", device)
    assert t.lacks == {"num_kv_splits": ("uneven_batch",), "flashmla_kv_indices": ("v2p",)}  # v2p: 0.5.17-0.5.18's
    assert "cannot take the optional uneven_batch" in t.bindings["num_kv_splits"].describe()
    case = with_uneven_batch(cases.splits([100, 80]))
    out = run_case(t, case, device)  # the call cannot be built: kvfuzz's failure, never a finding
    assert out.runs[0].error_type == HARNESS and judge(case, out).findings == []
    fitted = fit_target(case, t.lacks)
    assert "uneven_batch" not in fitted.tensors and fit_target(case, {}) is case
    assert judge(fitted, run_case(t, fitted, device)).status == "in_contract"
    saved = SavedCase(case=case, finding=None, target="sglang==0.5.23", device=device,
                      versions=environment_versions(), origin="hand")
    with pytest.raises(TargetLoadError, match="cannot take uneven_batch"):
        replay(saved, "sglang==0.5.22", device, isolate=False)


def test_0_5_23_keeps_its_writes_to_a_noncontiguous_swa_page_table(device):
    """0.5.14-0.5.22 copy swa_page_table with .contiguous() and lose their writes; 0.5.23's rewrite
    writes through its strides."""
    case = cases.decode(ps=16, swa=True, swa_table=TensorSpec("int32", (3, 7), (1, 3)))
    lost = "decode_metadata:swa:mismatch:swa_page_table:all"
    assert lost in judge(in_contract(case, t := release_target("0.5.19", device)), run_case(t, case, device)).signatures()
    assert judge(in_contract(case, t := release_target("0.5.23", device)), run_case(t, case, device)).findings == []


# ----------------------------------------------------------------------------------- signatures


def write(tmp_path: Path, name: str, body: str) -> Path:
    f = tmp_path / name
    f.write_text(textwrap.dedent(body))
    return f


UNKNOWN_REQUIRED = """
    def normal_decode_set_metadata(cache_seqlens_int32, cu_seqlens_k, page_table, req_to_token, req_pool_indices,
                                   max_seq_pages, seq_lens, seq_len_delta, page_size, mystery_table,
                                   swa_page_table=None, token_to_kv_pool=None):
        pass

    def get_num_kv_splits_triton(num_kv_splits_ptr, seq_lens_ptr, num_seq, num_group, num_head, num_kv_head,
                                 max_kv_splits, device_core_count):
        pass
"""


def test_an_unbindable_signature_is_refused_when_the_target_loads(tmp_path, device):
    f = write(tmp_path, "unknown_required.py", UNKNOWN_REQUIRED)
    with pytest.raises(TargetLoadError, match="required parameter 'mystery_table' is unknown to kvfuzz"):
        load_target(str(f), device)
    kw_only = write(tmp_path, "kw_only.py", """
        def prepare_swa_spec_page_table_triton(page_table_dst, page_table_a, page_table_b, seq_len_a, seq_len_b,
                                               speculative_num_draft_tokens, *, block):
            pass
    """)
    with pytest.raises(TargetLoadError, match="'block'"):
        load_target(str(kw_only), device)
    no_swa = write(tmp_path, "no_swa.py", """
        def normal_decode_set_metadata(cache_seqlens_int32, cu_seqlens_k, page_table, req_to_token,
                                       req_pool_indices, max_seq_pages, seq_lens, seq_len_delta, page_size):
            pass
    """)
    with pytest.raises(TargetLoadError, match="no parameter 'swa_page_table'"):
        load_target(str(no_swa), device)


@pytest.mark.interpreter
@pytest.mark.parametrize("isolation", ([], ["--in-process"]))
def test_the_cli_refuses_it_in_one_line_before_any_case_runs(tmp_path, isolation):
    f = write(tmp_path, "unknown_required.py", UNKNOWN_REQUIRED)
    report = tmp_path / "r.json"
    r = subprocess.run([sys.executable, "-m", "kvfuzz.cli", "fuzz", "--target", str(f), "--device", "cpu",
                        "--budget", "5", "--report", str(report), *isolation],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kvfuzz: error: target ") and "mystery_table" in lines[0], r.stderr
    assert not report.exists()  # nothing ran


def test_hand_written_signatures_still_bind(tmp_path, device):
    """0.5.14's parameters under other names (`out`), `*args`, a later release's signature with
    one more defaulted parameter: called positionally in 0.5.14's order, or by name with the new
    parameter left at its default (and listed as unchecked)."""
    f = write(tmp_path, "mixed.py", """
        def get_num_kv_splits_triton(out, seq_lens, num_seq, num_group, num_head, num_kv_head, max_kv_splits,
                                     device_core_count):
            out.fill_(1)

        def prepare_swa_spec_page_table_triton(*args, **kwargs):
            pass

        def normal_decode_set_metadata(cache_seqlens_int32, cu_seqlens_k, page_table, req_to_token,
                                       req_pool_indices, max_seq_pages, seq_lens, seq_len_delta, page_size,
                                       swa_page_table=None, full_to_swa_index_mapping=None, skip_page_table=False,
                                       full_v2p=None, swa_v2p=None, zero_tail=False, sink_page=-1):
            pass
    """)
    t = load_target(str(f), device)
    splits, spec, decode = (t.bindings[op] for op in ("num_kv_splits", "swa_spec_page_table", "decode_metadata"))
    assert not splits.by_name and not spec.by_name
    assert decode.by_name and decode.generation is None and decode.closest == "0.5.23"
    assert decode.defaulted == ("sink_page",) and "sink_page" in decode.describe()
    assert t.variants == {"decode_metadata": "fused", "swa_spec_page_table": "default",
                          "num_kv_splits": "default"}
    case = cases.splits([3, 5])
    out = run_case(t, case, device)
    assert out.runs[0].error is None and judge(case, out).status == "in_contract"


def test_a_known_name_out_of_0_5_14s_order_is_not_called_positionally(tmp_path):
    def get_num_kv_splits_triton(seq_lens_ptr, num_kv_splits_ptr, num_seq, num_group, num_head, num_kv_head,
                                 max_kv_splits, device_core_count):
        pass
    b = record("num_kv_splits").bind(get_num_kv_splits_triton)
    assert b.by_name  # by name it binds fine, whatever the order

    def swapped(seq_lens, out, num_seq, num_group, num_head, num_kv_head, max_kv_splits, device_core_count, extra):
        pass
    with pytest.raises(TargetLoadError, match="'out'"):
        record("num_kv_splits").bind(swapped)


def test_an_error_while_building_a_call_is_kvfuzzs_not_the_targets(device):
    t = load_target("builtin", device)
    case = cases.decode(ps=1)
    broken = case.replace(tensors={k: v for k, v in case.tensors.items() if k != "strided_indices"},
                          values={k: v for k, v in case.values.items() if k != "strided_indices"})
    out = run_case(t, broken, device)
    assert out.runs[0].error_type == HARNESS and "strided_indices" in out.runs[0].error
    v = judge(broken, out)
    assert v.not_target and v.findings == []


# ---------------------------------------------------------------------------- installed sglang


@pytest.mark.interpreter
def test_an_installed_sglang_is_found_and_judged_by_its_version(tmp_path):
    """`--target sglang` loads the installed distribution's kernel file (without importing
    sglang); `module:sglang...` imports it; both take the version from importlib.metadata."""
    site = tmp_path / "site"
    pkg = site / "sglang" / "kernels" / "ops" / "attention"
    pkg.mkdir(parents=True)
    shutil.copy(kernel_file("0.5.19"), pkg / "metadata.py")
    for d in (site / "sglang", site / "sglang" / "kernels", site / "sglang" / "kernels" / "ops", pkg):
        (d / "__init__.py").touch()
    dist = site / "sglang-0.5.19.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.19\n")
    code = textwrap.dedent("""
        import json
        from kvfuzz.targets import load_target
        out = {}
        for spec in ("sglang", "module:sglang.kernels.ops.attention.metadata"):
            t = load_target(spec, "cpu")
            out[spec] = [t.release, t.variants["decode_metadata"], t.bindings["decode_metadata"].generation]
        print(json.dumps(out))
    """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got == {"sglang": ["0.5.19", "read_table", "0.5.19"],
                   "module:sglang.kernels.ops.attention.metadata": ["0.5.19", "read_table", "0.5.19"]}


def test_releases_before_0_5_13_have_no_kernel_file_but_backends_to_extract_from():
    from kvfuzz.targets.releases import FIRST_KERNEL_FILE, FIRST_LOADABLE

    assert all(FIRST_LOADABLE <= parse_version(v) < FIRST_KERNEL_FILE and r.backends
               for v, r in RELEASES.items() if not r.kernel_file)  # tests/test_old_releases.py
    assert all(parse_version(v) >= FIRST_KERNEL_FILE and not RELEASES[v].backends for v in LOADABLE)
    assert all(records()[op].generations for op in CONTRACTS)


# ------------------------------------------------------------------------------- campaigns, replay


@pytest.mark.slow  # campaign-sized: `pytest -m slow`
def test_a_short_campaign_on_0_5_19_has_no_false_crash(tmp_path, device):
    from kvfuzz.campaign import CampaignConfig, run_campaign

    kernel_file("0.5.19")
    r = run_campaign(CampaignConfig(ops=["decode_metadata"], target="sglang==0.5.19", device=device, budget_s=6,
                                    in_contract_only=True, minimize_budget_s=0, report=tmp_path / "r.json"))
    s = r.stats[0]
    assert s.cases > 0 and s.contract_variant == "read_table" and s.not_target == 0
    sigs = {x.found.finding.signature for x in r.saved} | {x.finding.finding.signature for x in r.flaky}
    # no TypeError from a positional call; the one crash 0.5.19 has in contract is its read tables'
    # stride assertion (tests/test_decode_unified.py)
    assert not any(":crash:" in k for k in sigs - {"decode_metadata:swa:crash:-:AssertionError"}), sigs
    # no "never written" page_table: the columns past the live prefix are not required from 0.5.17 on
    # (what 0.5.19 does still have in contract: writes lost to a non-contiguous swa_page_table)
    assert not any(k.startswith(("decode_metadata:ps1:mismatch:page_table", "decode_metadata:general:mismatch"))
                   for k in sigs), sigs
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["ops"]["decode_metadata"]["contract_variant"] == "read_table"


@pytest.mark.thorough  # seconds of processes and campaigns: CI's thorough stage
def test_replay_against_another_release_judges_by_that_releases_variant(tmp_path, device):
    from kvfuzz.corpus import SavedCase, environment_versions
    from kvfuzz.replay import replay

    kernel_file("0.5.14"), kernel_file("0.5.17")
    saved = SavedCase(case=cases.decode(ps=16, delta=2), finding=None, target="sglang==0.5.14", device=device,
                      versions=environment_versions(), origin="hand")
    own = replay(saved, None, device, isolate=False)
    assert own.saved.case.variant == "default" and not own.fails
    other = replay(saved, "sglang==0.5.17", device, isolate=False)
    assert other.saved.case.variant == "v2p" and not other.fails, other.verdict.signatures()
