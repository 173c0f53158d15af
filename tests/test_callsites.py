"""SGLang's call sites per release (kvfuzz/callsites): extraction and binding on small sources
written here, the shipped data (every op, every release it covers), `kvfuzz ops --target`, and a
slow drift check of the shipped data against the wheels (needs PyPI or the wheel cache)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kvfuzz.callsites import analyse, load
from kvfuzz.callsites.binding import arg_name, check, names_match, signature
from kvfuzz.callsites.table import DETAILED, cli_lines, markdown
from kvfuzz.ops import records

ROOT = Path(__file__).resolve().parent.parent

KERNELS = textwrap.dedent('''
    import triton
    import triton.language as tl

    @triton.jit
    def create_flashmla_kv_indices_triton(
        req_to_token_ptr, req_pool_indices_ptr, page_kernel_lens_ptr, kv_start_idx, kv_indices_ptr,
        req_to_token_ptr_stride: tl.constexpr, kv_indices_ptr_stride: tl.constexpr,
        NUM_PAGE_PER_BLOCK: tl.constexpr = 64, PAGED_SIZE: tl.constexpr = 64,
    ):
        pass

    def prepare_swa_spec_page_table_triton(page_table_dst, page_table_a, page_table_b, seq_len_a, seq_len_b,
                                           speculative_num_draft_tokens):
        pass
''')

BACKEND = textwrap.dedent('''
    import torch
    from sglang.srt.layers.attention.kv import create_flashmla_kv_indices_triton as mla_kernel
    from sglang.srt.layers.attention.kv import prepare_swa_spec_page_table_triton

    class MLABackend:
        def __init__(self):
            self.cuda_graph_kv_indices = torch.full((8, 64), 1, dtype=torch.int64)

        def init_forward_metadata(self, fb):
            block_kv_indices = torch.empty((fb.bs, 64), dtype=torch.int32, device="cuda")
            if fb.forward_mode.is_decode():
                mla_kernel[(fb.bs,)](
                    self.req_to_token, fb.req_pool_indices, fb.seq_lens, None, block_kv_indices,
                    self.req_to_token.stride(0), 64, PAGE_SIZE,
                )
            else:
                mla_kernel[(fb.bs, 2)](
                    self.req_to_token, fb.req_pool_indices, fb.seq_lens, None, self.cuda_graph_kv_indices,
                    req_to_token_ptr_stride=self.req_to_token.stride(0),
                    kv_indices_ptr_stride=self.cuda_graph_kv_indices.stride(0), PAGED_SIZE=PAGE_SIZE, num_warps=4,
                )

        def init_forward_metadata_replay_cuda_graph(self, page_table, a, b, la, lb, n):
            if self.swa_enabled:
                prepare_swa_spec_page_table_triton(page_table, a, b, la, lb, n, 7)
''')


def _sources() -> dict[str, str]:
    return {"sglang/srt/layers/attention/kv.py": KERNELS,
            "sglang/srt/layers/attention/mla_backend.py": BACKEND,
            "sglang/test/test_kv.py": BACKEND}  # SGLang's tests are no callers


def test_extraction_finds_each_launch_and_call_with_what_is_written():
    sites = analyse(_sources())
    assert [(s["file"].rsplit("/", 1)[-1], s["kind"]) for s in sites] == [
        ("mla_backend.py", "launch"), ("mla_backend.py", "launch"), ("mla_backend.py", "call")]
    decode, graph, spec = sites
    assert decode["op"] == "flashmla_kv_indices" and decode["entry"] == "create_flashmla_kv_indices_triton"
    assert decode["function"] == "MLABackend.init_forward_metadata" and decode["grid"] == "(fb.bs,)"
    assert decode["args"][-2:] == ["64", "PAGE_SIZE"] and decode["kwargs"] == {}
    assert decode["dtypes"] == {"block_kv_indices": "torch.int32"}
    assert decode["conditions"] == ["fb.forward_mode.is_decode()"]
    assert decode["options"] == {"attention_backend": "mla"}
    assert decode["signature"] == "sglang/srt/layers/attention/kv.py:6"  # the def line
    assert graph["grid"] == "(fb.bs, 2)" and graph["kwargs"]["PAGED_SIZE"] == "PAGE_SIZE"
    assert graph["conditions"] == ["not (fb.forward_mode.is_decode())"]
    assert graph["dtypes"] == {"self.cuda_graph_kv_indices": "torch.int64"}  # allocated in __init__
    assert spec["op"] == "swa_spec_page_table" and spec["kind"] == "call" and spec["grid"] is None
    assert spec["options"] == {"attention_backend": "mla", "cuda_graph": "yes", "swa": "yes"}


def test_binding_reports_a_positional_value_landing_in_an_inserted_slot():
    decode, graph, spec = analyse(_sources())
    assert [b["what"] for b in decode["binding"]] == ["misbound"]
    assert decode["binding"][0]["param"] == "NUM_PAGE_PER_BLOCK"
    assert decode["binding"][0]["means"] == "PAGED_SIZE"
    assert graph["binding"] == []  # by keyword; num_warps is the launcher's
    assert [b["what"] for b in spec["binding"]] == ["cannot_bind"]  # 7 positionals, 6 parameters
    assert "7 positional arguments, the signature takes 6" in spec["binding"][0]["message"]


def test_a_kernel_handed_on_is_followed_to_its_launch_not_to_other_kernels():
    runner = textwrap.dedent('''
        from sglang.srt.layers.attention.kv import prepare_swa_spec_page_table_triton

        def run(model, batch):
            model.plan(batch, prepare_swa_spec_page_table_triton)
    ''')
    planner = textwrap.dedent('''
        def plan(batch, prepare_swa_spec_page_table_triton_fn):
            prepare_swa_spec_page_table_triton_fn(batch.dst, batch.a, batch.b, batch.la, batch.lb, 2)

        def prepare_swa_spec_page_table_triton_kernel(x):
            pass

        def other():
            prepare_swa_spec_page_table_triton_kernel[(1,)](3)
    ''')
    sites = analyse({"sglang/srt/layers/attention/kv.py": KERNELS, "sglang/srt/runner.py": runner,
                     "sglang/srt/planner.py": planner})
    assert [(s["file"], s["line"], s["kind"], s["function"]) for s in sites] == [
        ("sglang/srt/planner.py", 3, "call", "plan"), ("sglang/srt/runner.py", 5, "passed", "run")]
    assert sites[0]["binding"] == [] and sites[1]["passed_to"] == "model.plan"
    # the helper holding the launch is followed one level up, to where it is called
    assert [(c["file"], c["line"], c["function"]) for c in sites[0]["callers"]] == [("sglang/srt/runner.py", 5, "run")]


def _sig(text: str):
    import ast

    return signature(ast.parse(textwrap.dedent(text)).body[0])


def test_binding_cannot_bind():
    sig = _sig("def f(a, b, *, c, d=1): pass")
    assert [b["message"] for b in check(["x"], {}, sig, False)] == [
        "required parameter `b` is not given", "required parameter `c` is not given"]
    assert "`a` given by position" in check(["a", "b"], {"a": "a", "c": "c"}, sig, False)[0]["message"]
    assert "keyword `num_warps` is no parameter" in check(["a", "b"], {"c": "c", "num_warps": "4"}, sig, False)[0]["message"]
    assert check(["a", "b"], {"c": "c", "num_warps": "4"}, sig, True) == []  # a launch takes it
    assert check(["*xs"], {}, sig, False) == []  # bound at run time
    assert check(["a", "b", "e"], {"c": "c"}, _sig("def f(a, b, *rest, c): pass"), False) == []


def test_names_that_match_their_parameter_are_no_finding():
    assert arg_name("self.req_to_token.stride(0)") == "req_to_token_stride"
    assert arg_name("req_pool_indices[:bs]") == "req_pool_indices"
    assert arg_name("None") is None and arg_name("a + b") is None
    assert names_match("req_to_token_stride", "req_to_token_ptr_stride")
    assert names_match("cu_seq_lens", "chunk_cu_seq_lens_ptr")
    assert names_match("page_table", "page_table_dst")
    assert not names_match("PAGE_SIZE", "NUM_PAGE_PER_BLOCK")
    sig = _sig("def k(page_table_dst, page_table_a, page_table_b): pass")
    assert check(["page_table", "a", "b"], {}, sig, True) == []


def test_shipped_data_covers_every_op_for_the_releases_it_covers():
    data = load()
    releases = data["releases"]
    assert set(DETAILED) <= set(releases)
    assert {f"0.5.{i}" for i in range(6, 24)} <= set(releases)
    # each op has a call site from its first release on (0.5.13's DCP-less chunked prefix included)
    first = {"decode_metadata": 10, "draft_extend_metadata": 16, "q8kv8_topk_length": 23,
             "trtllm_mha_kv_indices": 14, "aiter_ragged_page_table": 12, "aiter_req_to_token_page_table": 12,
             "pa_page_table": 15, "trtllm_mha_graph_metadata": 15}
    assert set(first) | {"swa_spec_page_table", "num_kv_splits", "flashinfer_kv_indices",
                         "chunked_prefix_kv_indices", "flashmla_kv_indices"} == set(records())
    for minor in range(6, 24):
        ops = {s["op"] for s in releases[f"0.5.{minor}"]["sites"]}
        assert {op for op in records() if minor >= first.get(op, 6)} <= ops, f"0.5.{minor}"
    mla = [s for s in releases["0.4.10.post1"]["sites"] if s["file"].endswith("cutlass_mla_backend.py")]
    # the known case: PAGE_SIZE, 8th by position, lands in the NUM_PAGE_PER_BLOCK slot; no other
    assert [(b["param"], b["means"]) for s in mla for b in s["binding"]] == [("NUM_PAGE_PER_BLOCK", "PAGED_SIZE")] * 3
    assert [b for v in releases if v != "0.4.10.post1" for s in releases[v]["sites"] for b in s["binding"]] == []
    searched = data["searched"]  # 0.4.0 - 0.5.5, searched for binding findings only: none
    assert {"0.4.0", "0.4.9", "0.5.5"} <= set(searched)
    assert all(s["sites"] > 0 and s["binding"] == [] for s in searched.values())


def test_docs_are_the_shipped_data_rendered():
    assert (ROOT / "docs" / "callsites.md").read_text() == markdown(load())


def test_ops_target_prints_the_release_call_sites():
    lines = cli_lines(load(), "0.5.23")
    assert lines[0].startswith("call sites in sglang 0.5.23")
    assert any("kv_index_translator.py" in line and "[(bs, num_token_blocks)]" in line for line in lines)
    assert "      via srt/speculative/eagle_info.py:121 EagleVerifyInput.generate_attn_arg_prefill (speculative)" in lines
    assert cli_lines(load(), "0.5.15.post1") == [
        "call sites: kvfuzz has no call-site data for sglang 0.5.15.post1 (docs/callsites.md)"]


def test_kvfuzz_ops_prints_the_call_sites_of_a_release_target(capsys):
    from kvfuzz.cli import main

    rc = main(["ops", "--target", "sglang==0.5.23", "--device", "cpu"])
    out, err = capsys.readouterr()
    if rc == 2 and "cannot fetch" in err:  # no PyPI and no cached kernel files
        pytest.skip(err.strip())
    assert rc == 0, err
    assert "call sites in sglang 0.5.23" in out
    assert "srt/mem_cache/kv_index_translator.py:600 KVIndexTranslator.pack_read_stream [(bs, num_token_blocks)]" in out
    assert main(["ops"]) == 0 and "call sites" not in capsys.readouterr().out


def _site(version: str, file: str, line: int) -> dict:
    return next(s for s in load()["releases"][version]["sites"] if s["file"].endswith(file) and s["line"] == line)


def test_launched_by_names_the_variant_and_modes_a_site_uses():
    from kvfuzz.callsites.launched import launched_by

    assert launched_by(_site("0.5.23", "kv_index_translator.py", 600), "0.5.23") == \
        "token_mapping (kv_start_idx, entry_page_size, num_token_blocks, token_mapping)"
    assert launched_by(_site("0.5.14", "triton_backend.py", 1619), "0.5.14") == "default (kv_start_idx, kv_indices int64)"
    assert launched_by(_site("0.5.20", "aiter_backend.py", 1612), "0.5.20") == "token_blocks (num_token_blocks)"
    assert launched_by(_site("0.5.23", "aiter_backend.py", 2074), "0.5.23") == "token_mapping"


def test_not_launched_says_why():
    from kvfuzz.callsites.launched import launched_by

    v2p = _site("0.5.17", "trtllm_mla_backend.py", 364)  # unified memory's page remap: flashmla's v2p variant
    assert launched_by(v2p, "0.5.17") == "v2p (v2p, page_mult)"
    passed = next(s for s in load()["releases"]["0.5.23"]["sites"] if s["kind"] == "passed")
    assert launched_by(passed, "0.5.23").startswith("not launched: the kernel is passed to")
    old = _site("0.4.10.post1", "cutlass_mla_backend.py", 97)
    assert launched_by(old, "0.4.10.post1") == "not launched: kvfuzz runs sglang 0.5.6-0.5.23, not 0.4.10.post1"
    plain = _site("0.5.14", "aiter_backend.py", 922)  # a flashinfer_kv_indices launch of 0.5.14 (variant default)
    paged = dict(plain, kwargs={"ENTRY_PAGE_SIZE": "4"})
    assert launched_by(paged, "0.5.14") == \
        "not launched: passes ENTRY_PAGE_SIZE; variant default draws no entry_page_size"
    assert launched_by(dict(plain, kwargs={"NEW_FLAG": "True"}), "0.5.14") == \
        "not launched: passes NEW_FLAG, which kvfuzz leaves at its default"
    wide = dict(plain, dtypes={"kv_indices": "torch.int16"})
    assert launched_by(wide, "0.5.14").startswith("not launched: kv_indices is int16; the contract takes int32")


def test_an_op_adds_its_modes_in_one_table(monkeypatch):
    from kvfuzz.callsites import launched

    site = _site("0.5.14", "aiter_backend.py", 922)
    monkeypatch.setitem(launched.MODES, "flashinfer_kv_indices",
                        lambda s, given: [f"width `{given['req_to_token_ptr_stride']}`"])
    assert launched.launched_by(site, "0.5.14") == "default (width `self.req_to_token.stride(0)`)"
    monkeypatch.setitem(launched.MODES, "flashinfer_kv_indices", lambda s, given: "a mode kvfuzz lacks")
    assert launched.launched_by(site, "0.5.14") == "not launched: a mode kvfuzz lacks"


def test_every_site_of_the_detailed_releases_is_launched_but_a_kernel_passed_on():
    from kvfuzz.callsites.launched import launched_by

    for v in DETAILED:
        for s in load()["releases"][v]["sites"]:
            assert not launched_by(s, v).startswith("not launched") or s["kind"] == "passed", (v, s["file"], s["line"])
    assert any(line.startswith("      launched by: token_mapping (") for line in cli_lines(load(), "0.5.23"))


def _gen_script():
    import importlib.util

    spec = importlib.util.spec_from_file_location("gen_callsites", ROOT / "scripts" / "gen_callsites.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_check_exits_1_on_drift_and_writes_nothing(monkeypatch, tmp_path, capsys):
    gen = _gen_script()
    data, doc = tmp_path / "callsites.json", tmp_path / "callsites.md"
    monkeypatch.setattr(gen, "DATA", data)
    monkeypatch.setattr(gen, "DOC", doc)
    monkeypatch.setattr(gen, "ROOT", tmp_path)
    wheel = {"wheel": "sglang-9.9.9.whl", "sha256": "0", "sites": analyse(_sources())}
    monkeypatch.setattr(gen, "build", lambda version: wheel)
    assert gen.main(["--release", "9.9.9"]) == 0
    assert json.loads(data.read_text())["releases"]["9.9.9"] == wheel
    assert doc.read_text() == markdown(json.loads(data.read_text()))
    assert gen.main(["--check"]) == 0
    wheel = {**wheel, "sites": wheel["sites"][1:]}  # the release's callers changed
    before = data.read_text()
    assert gen.main(["--check"]) == 1
    assert "drift: sglang 9.9.9" in capsys.readouterr().out
    assert data.read_text() == before


@pytest.mark.slow
def test_shipped_data_is_what_the_wheels_give():
    """Drift: the checked-in data of two releases against their wheels (PyPI or the wheel cache)."""
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_callsites.py"), "--check",
                           "--release", "0.4.10.post1", "--release", "0.5.23", "--search", "0.4.9"],
                          capture_output=True, text=True, cwd=ROOT)
    if proc.returncode == 2 and "cannot fetch" in proc.stderr:
        pytest.skip(proc.stderr.strip())
    assert proc.returncode == 0, proc.stdout + proc.stderr
