"""`scripts/compile_rate.py`: kernels a cold campaign compiles per 1,000 cases, counted by Triton's
specialisation rules over the stream at the GPU's stint: the counts grow with the classes
visited, never shrink, and each figure is its count over its cases."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "compile_rate.py"


def test_the_compile_rate_counts_a_kernel_per_class_visited(tmp_path):
    out = tmp_path / "rate.json"
    # the first case, the first class's whole stint of 128, then the second class's first case
    done = subprocess.run([sys.executable, str(SCRIPT), "--ops", "num_kv_splits", "--at", "1", "128", "129",
                           "--json", str(out)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    rate = json.loads(out.read_text())
    assert rate["stint"] == 128 and rate["target"] == "builtin"
    at = rate["ops"]["num_kv_splits"]
    one, first, second = at["1"]["kernels"], at["128"]["kernels"], at["129"]["kernels"]
    # a class compiles its kernels on its first case and none after; the next class's first case does
    assert one >= 1 and first == one and second > first
    assert at["129"]["per_1000"] == round(1000 * second / 129, 2)
    assert "num_kv_splits" in done.stdout


def test_with_pack_the_stream_launches_in_packs_and_their_kernels_count(tmp_path):
    """`--pack K` launches the stream's batches as a packing campaign does: cases go into packs
    (none without it), and the kernels counted are the launches' own, packs' included."""
    rates = {}
    for k in (1, 16):
        out = tmp_path / f"rate-{k}.json"
        done = subprocess.run([sys.executable, str(SCRIPT), "--ops", "trtllm_mha_kv_indices", "--at", "256",
                               "--pack", str(k), "--json", str(out)], capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr
        rates[k] = json.loads(out.read_text())
    alone, packed = (rates[k]["ops"]["trtllm_mha_kv_indices"]["256"] for k in (1, 16))
    assert rates[16]["pack"] == 16 and alone["packed_cases"] == 0
    assert packed["packed_cases"] >= 2  # seed 0's third stint packs
    assert alone["kernels"] >= 2 and packed["kernels"] >= 1
