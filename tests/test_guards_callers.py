"""The padding SGLang's callers produce, as hand cases (docs/guards.md, "Callers of every release"):
each is in contract, and every release that can be passed it, and the builtin, run it clean.
Where a caller's guard changed what it passes, scripts/diff_guards.py finds the line in the
release that added it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from kvfuzz.case import Case, TensorSpec
from kvfuzz.execute import run_case
from kvfuzz.judge import judge
from kvfuzz.ops import record
from kvfuzz.targets import load_target

from test_releases import kernel_file

C = TensorSpec.contiguous
ROOT = Path(__file__).resolve().parent.parent


def clean_on(spec: str, case: Case, device, kernel: str) -> list[str]:
    if spec.startswith("sglang=="):
        kernel_file(spec.split("==")[1], kernel)
    t = load_target(spec, device)
    v = judge(case.replace(variant=t.variants[case.op]), run_case(t, case, device))
    assert v.not_target is None, v.not_target
    return v.signatures()


def in_contract(case: Case) -> None:
    status, reasons, _ = record(case.op).contract.assess(case)
    assert status == "in_contract", reasons


def prefill_graph_chunk(chunk_idx: int, chunk_len: int, prefixes: list[int], live: int, W: int) -> Case:
    """One chunk as the prefill CUDA-graph runner launches it (0.5.17 on,
    `_populate_chunked_prefix_buffers`): every request slot, the chunk's start for all,
    `(prefix - start).clamp(0, chunk_len)` tokens, the padded slots (past `live`) a zero-length
    prefix at pool row 0, into the zeroed chunk buffer of bs * chunk_len cells."""
    bs = len(prefixes)
    rng = np.random.default_rng(chunk_idx)
    rtt = rng.permutation(1 << 20)[: (bs + 1) * W].reshape(bs + 1, W).astype(np.int32)
    pool = np.array([1 + i if i < live else 0 for i in range(bs)])
    start = np.full(bs, chunk_idx * chunk_len)
    lens = np.clip(np.asarray(prefixes) - start, 0, chunk_len)
    cu = np.concatenate([[0], np.cumsum(lens)])
    t = {"req_to_token": C("int32", rtt.shape), "req_pool_indices": C("int64", (bs,)),
         "chunk_start_idx": C("int32", (bs,)), "chunk_seq_lens": C("int32", (bs,)),
         "chunk_cu_seq_lens": C("int32", (bs + 1,)), "chunk_kv_indices": C("int32", (bs * chunk_len,))}
    v = {"req_to_token": rtt, "req_pool_indices": pool, "chunk_start_idx": start, "chunk_seq_lens": lens,
         "chunk_cu_seq_lens": cu}
    return Case("chunked_prefix_kv_indices", {}, t, v)


@pytest.mark.parametrize("spec", ["sglang==0.5.17", "sglang==0.5.23", "sglang==0.5.6", "builtin"])
def test_the_prefill_graph_runners_padded_slots(spec, device):
    """Slots past the live requests: length 0 at the chunk's start (past their prefix of 0), pool
    row 0; a live request whose prefix ends inside the chunk; an output tail. The kernel is one
    text in every release, so 0.5.6 (whose callers never pad) runs it clean too."""
    case = prefill_graph_chunk(1, 256, [700, 300, 0, 0], live=2, W=1024)
    assert case.values["chunk_seq_lens"].tolist() == [256, 44, 0, 0]
    in_contract(case)
    assert clean_on(spec, case, device, "kv_indices.py") == []


def replay_padded_decode(live_lens: list[int], padded: int, pad_row: int, ps: int = 1) -> Case:
    """decode_metadata as CUDA-graph replay pads a batch: `padded` rows of seq_lens 1 (the fill
    value) at pool row `pad_row` (0 from 0.5.13, the registry's ZERO policy, a row of zeros since
    0.5.11's reserved padding row; a stale request's row before), max_seq_pages over the padded
    batch."""
    lens = live_lens + [1] * padded
    B, T = len(lens), 512
    rng = np.random.default_rng(len(lens))
    rtt = rng.permutation(1 << 16)[: 4 * T].reshape(4, T)
    if pad_row == 0:
        rtt[0] = 0  # 0.5.11 on: pool row 0 is the padding row, never a request's, all zeros
    P = max(-(-n // ps) for n in lens)
    t = {"cache_seqlens_int32": C("int32", (B,)), "cu_seqlens_k": C("int32", (B + 1,)),
         "page_table": C("int32", (B, P + 2)), "req_to_token": C("int64", rtt.shape),
         "req_pool_indices": C("int64", (B,)), "strided_indices": C("int64", (-(-T // ps),)),
         "seq_lens": C("int64", (B,))}
    pool = [1 + i for i in range(len(live_lens))] + [pad_row] * padded
    v = {"req_to_token": rtt, "req_pool_indices": np.asarray(pool), "strided_indices": np.arange(0, T, ps),
         "seq_lens": np.asarray(lens)}
    return Case("decode_metadata", {"max_seq_pages": P, "seq_len_delta": 0, "page_size": ps}, t, v)


@pytest.mark.parametrize("spec, pad_row", [("sglang==0.5.10", 2), ("sglang==0.5.14", 0), ("sglang==0.5.17", 0),
                                          ("sglang==0.5.23", 0), ("builtin", 0)])
@pytest.mark.parametrize("ps", [1, 16])
def test_decode_replay_padding(spec, pad_row, ps, device):
    case = replay_padded_decode([300, 17], padded=2, pad_row=pad_row, ps=ps)
    in_contract(case)
    assert clean_on(spec, case, device, "metadata.py") == []


def _diff_guards():
    spec = importlib.util.spec_from_file_location("diff_guards", ROOT / "scripts" / "diff_guards.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["diff_guards"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_diff_guards_finds_the_runners_clamp_where_0_5_17_added_it():
    from kvfuzz.targets.wheels import cache_dir

    if not all(list((cache_dir() / "wheels").glob(f"sglang-{v}-*.whl")) for v in ("0.5.16", "0.5.17")):
        pytest.skip("the 0.5.16 and 0.5.17 wheels are not cached (scripts/gen_callsites.py fetches them)")
    dg = _diff_guards()
    old, new = (dg.release_regions(v) for v in ("0.5.16", "0.5.17"))
    pick = {k: r for k, r in new.items() if "chunked_prefix_kv_indices" in r.ops}
    got = [c for c in dg.diff("0.5.16", old, "0.5.17", pick) if c.sign == "+"]
    clamp = [c for c in got if ".clamp(" in c.text]
    assert [(c.file.rsplit("/", 1)[-1], c.line) for c in clamp] == [("prefill_cuda_graph_runner.py", 914)]
    assert any(c.text == "buffers.kv_indices[:captured_n].zero_()" for c in got)
