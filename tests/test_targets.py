"""Loading targets: entry points by SGLang's names, per-op absence, Triton mode safety."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from kvfuzz.ops import CONTRACTS
from kvfuzz.errors import TargetLoadError
from kvfuzz.targets import load_target
from kvfuzz.targets.sglang_shim import ensure_swa_pool_type, make_swa_pool
from sampling import sampled


def test_missing_entry_point_is_reported_for_that_op_only(tmp_path, device):
    f = tmp_path / "only_splits.py"
    f.write_text("def get_num_kv_splits_triton(out, *args):\n    out.fill_(1)\n")
    t = load_target(str(f), device)
    assert t.supports("num_kv_splits")
    assert not t.supports("decode_metadata") and "normal_decode_set_metadata" in t.missing["decode_metadata"]
    assert not t.supports("swa_spec_page_table")


def test_campaign_skips_an_op_the_target_lacks(tmp_path, device):
    from kvfuzz.campaign import CampaignConfig, run_campaign

    f = tmp_path / "only_splits_ok.py"
    f.write_text("def get_num_kv_splits_triton(out, *args):\n    pass\n")
    r = run_campaign(CampaignConfig(ops=["decode_metadata"], target=str(f), device=device, budget_s=5))
    assert r.stats[0].skipped and r.stats[0].cases == 0


def test_target_without_any_entry_point_is_refused(tmp_path, device):
    f = tmp_path / "nothing.py"
    f.write_text("x = 1\n")
    with pytest.raises(TargetLoadError, match="provides none of"):
        load_target(str(f), device)


def test_builtin_and_module_specs(device):
    assert set(load_target("builtin", device).entries) == set(CONTRACTS)  # every op, the newest included
    with pytest.raises(TargetLoadError, match="cannot import"):
        load_target("module:no_such_module_kvfuzz", device)


def test_swa_pool_stand_in_satisfies_isinstance():
    cls = ensure_swa_pool_type()
    from sglang.srt.mem_cache.swa_memory_pool import SWAKVPool  # what the seed imports

    pool = make_swa_pool("mapping")
    assert cls is SWAKVPool and isinstance(pool, SWAKVPool) and pool.full_to_swa_index_mapping == "mapping"


def test_kernels_defined_in_the_wrong_mode_are_refused(tmp_path):
    # a kernel module imported before kvfuzz chose the CPU is compiled-mode: refuse it, clearly
    kern = tmp_path / "kern_mod.py"
    kern.write_text("import triton\n@triton.jit\ndef get_num_kv_splits_triton(x):\n    pass\n")
    code = textwrap.dedent(f"""
        import os, sys
        os.environ.pop("TRITON_INTERPRET", None)
        sys.path.insert(0, {str(tmp_path)!r})
        import kern_mod  # defined compiled
        from kvfuzz.targets import load_target
        try:
            load_target("module:kern_mod", "cpu")
        except Exception as e:
            print(type(e).__name__, e)
    """)
    env = {k: v for k, v in __import__("os").environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    if out.stdout.startswith("DeviceModeError") and "interpreter fails" in out.stdout:
        pytest.skip(f"no working Triton interpreter on this machine: {out.stdout.strip()}")
    # the environment check sees it first (triton itself was imported in compiled mode); the
    # target loader would refuse the kernel if it got that far
    early = out.stdout.startswith("DeviceModeError") and "imported before TRITON_INTERPRET" in out.stdout
    late = "TargetLoadError" in out.stdout and "defined compiled" in out.stdout
    assert early or late, out.stdout + out.stderr


def _run_cli_with_broken_interpreter(tmp_path, break_with: str):
    """`kvfuzz fuzz --device cpu` in a process whose Triton interpreter is broken the way
    triton 3.6 + numpy >= 2.4 is (or computes a wrong answer): one line, exit 2."""
    code = textwrap.dedent(f"""
        import sys, triton.runtime.interpreter as interp
        real = interp.GridExecutor.__call__
        def broken(self, *args, **kwargs):
            if {break_with!r} == "raise":
                raise interp.InterpreterError("TypeError('only 0-dimensional arrays can be converted to Python scalars')")
            return None  # stores nothing: the probe reads back zeros
        interp.GridExecutor.__call__ = broken
        from kvfuzz.cli import main
        sys.exit(main(["fuzz", "--device", "cpu", "--budget", "5", "--report", {str(tmp_path / "r.json")!r}]))
    """)
    env = dict(__import__("os").environ, TRITON_INTERPRET="1")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)


@pytest.mark.parametrize("break_with, needle", sampled("broken interpreter", [
    pytest.param("raise", "only 0-dimensional arrays"),
    pytest.param("wrong", "computes wrong values"),
], share=2))
def test_a_broken_triton_interpreter_is_refused_before_fuzzing(tmp_path, break_with, needle):
    r = _run_cli_with_broken_interpreter(tmp_path, break_with)
    assert r.returncode == 2, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and "interpreter" in lines[0], r.stderr
    assert not (tmp_path / "r.json").exists()  # nothing ran, nothing claimed


def test_entry_points_are_bound_by_name_when_the_target_loads(device):
    t = load_target("builtin", device)
    assert set(t.bindings) == set(t.entries)
    # the builtin kernels implement the newest API they check
    newest = {"num_kv_splits": "0.5.23", "draft_extend_metadata": "0.5.16", "q8kv8_topk_length": "0.5.23",
              "trtllm_mha_kv_indices": "0.5.16", "pa_page_table": "0.5.15", "trtllm_mha_graph_metadata": "0.5.19",
              "aiter_ragged_page_table": "0.5.12", "aiter_req_to_token_page_table": "0.5.12",
              "flashinfer_kv_indices": "0.5.22", "flashmla_kv_indices": "0.5.17"}
    for op, b in t.bindings.items():
        assert b.by_name and not b.defaulted, (op, b.describe())
        # decode takes 0.5.14's call and 0.5.23's arguments: no single release's signature
        assert (b.generation, b.closest) == (None, "0.5.23") if op == "decode_metadata" else \
            b.generation == newest.get(op, "0.5.14")
    # kvfuzz's own kernels write every column below max_seq_pages (the 0.5.14 contract), and decode
    # takes 0.5.23's arguments: its `strict` variant
    assert t.variants == {"decode_metadata": "strict", "swa_spec_page_table": "default", "num_kv_splits": "default",
                          "draft_extend_metadata": "default", "q8kv8_topk_length": "default",
                          "flashinfer_kv_indices": "token_mapping", "chunked_prefix_kv_indices": "default",
                          "flashmla_kv_indices": "v2p", "trtllm_mha_kv_indices": "default",
                          "pa_page_table": "default", "trtllm_mha_graph_metadata": "default",
                          "aiter_ragged_page_table": "default", "aiter_req_to_token_page_table": "default"}


def test_ops_with_a_target_says_how_it_is_called_and_judged(capsys, device):
    from kvfuzz.cli import main

    assert main(["ops", "--target", "builtin", "--device", device]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("target builtin: kvfuzz builtin kernels")
    assert any(line.strip().startswith("decode_metadata: variant strict (kvfuzz's builtin kernel); called by name")
               for line in out), out


def test_variant_for_prefers_the_users_then_the_targets(device):
    from kvfuzz.targets import variant_for

    t = load_target("builtin", device)
    assert variant_for("decode_metadata", None, t) == "strict"
    assert variant_for("decode_metadata", "live_prefix", t) == "live_prefix"
    assert variant_for("num_kv_splits", None, object()) == "default"  # an executor that names none
