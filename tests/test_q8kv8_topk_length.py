"""q8kv8_topk_length_from_indices (SGLang 0.5.23) as the op `q8kv8_topk_length`: an entry point
that returns its output (kvfuzz copies it into the case's tensor), the builtin kernel against
its contract, 0.5.23 under the interpreter, the releases before it refused or skipped, and the
op through the repro script and the corpus. Oracles by hand: tests/test_oracles.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

import cases
from kvfuzz.errors import TargetLoadError
from kvfuzz.execute import run_case
from kvfuzz.judge import judge
from kvfuzz.strategies import random_cases
from kvfuzz.targets import load_target

OP = "q8kv8_topk_length"
HAND = [cases.topk([[0, -1, 5], [-1, -1], [7] * 200, [-2] * 150 + [3]], K=300),
        cases.topk([[1] * 1536, [1] * 1535, [1] * 1537, []], K=2048), cases.topk([[], []], K=0),
        cases.topk([[4] * 256, [-1] * 255 + [0]], K=256)]


def release_0_5_23(device):
    from kvfuzz.targets.wheels import sglang_kernel_file

    try:
        sglang_kernel_file("0.5.23")
    except TargetLoadError as exc:
        pytest.skip(f"sglang==0.5.23 is not cached and PyPI cannot be reached: {exc}")
    return load_target("sglang==0.5.23", device)


@pytest.mark.slow  # 30-60 s each on 2 cores: CI runs it in its slow stage
@pytest.mark.parametrize("spec", ["builtin", "0.5.23"])
def test_hand_cases_and_a_seeded_stream_find_nothing(spec, builtin_target, device):
    t = builtin_target if spec == "builtin" else release_0_5_23(device)
    assert t.bindings[OP].returns == "topk_length" and t.bindings[OP].generation == "0.5.23"
    for case in HAND + random_cases(OP, 4, 80):
        v = judge(case, run_case(t, case, device))
        assert v.findings == [] and v.not_target is None, (case.describe(), v.signatures(), v.not_target)


def test_builtin_launcher_on_unaligned_widths_int64_and_bad_rank(device):
    """Widths 128 does not divide, int64 indices (outside SGLang's contract, accepted here), and a
    1-D tensor refused with ValueError."""
    from kvfuzz.kernels import q8kv8_topk_length_from_indices

    x = torch.full((3, 100), -1, dtype=torch.int32, device=device)
    x[1, 99], x[2, 0] = 5, 0
    assert q8kv8_topk_length_from_indices(x).cpu().tolist() == [1, 100, 1]
    assert q8kv8_topk_length_from_indices(x.to(torch.int64)[:, :50]).cpu().tolist() == [1, 1, 1]
    with pytest.raises(ValueError, match="indices must be 2-D"):
        q8kv8_topk_length_from_indices(x[0])


def test_a_target_returning_the_wrong_tensor_crashes(tmp_path, device):
    fake = tmp_path / "wrong.py"
    fake.write_text("import torch\n\ndef q8kv8_topk_length_from_indices(indices):\n"
                    "    return torch.ones(indices.shape[0], dtype=torch.int64)\n")
    case = HAND[0]
    v = judge(case, run_case(load_target(str(fake), device), case, device))
    assert v.signatures() == ["q8kv8_topk_length:block128:crash:-:WrongResult"]
    assert "returned int64[4], expected int32[4]" in v.findings[0].message


def test_releases_before_0_5_23_do_not_offer_it(device):
    from kvfuzz.campaign import CampaignConfig, run_campaign
    from kvfuzz.targets.wheels import sglang_kernel_file

    try:
        sglang_kernel_file("0.5.22")
    except TargetLoadError as exc:
        pytest.skip(str(exc))
    assert OP in load_target("sglang==0.5.22", device).missing
    cfg = dict(target="sglang==0.5.22", device=device, budget_s=1, isolate=False)
    with pytest.raises(TargetLoadError, match="target sglang==0.5.22 has no q8kv8_topk_length"):
        run_campaign(CampaignConfig(ops=[OP], ops_named=True, **cfg))  # --op names it
    assert run_campaign(CampaignConfig(ops=[OP], **cfg)).stats[0].skipped  # a campaign over every op


@pytest.mark.thorough  # seconds of processes and campaigns: CI's thorough stage
def test_the_repro_script_runs_the_op(tmp_path, device):
    from kvfuzz.corpus import SavedCase, environment_versions
    from kvfuzz.repro import write_repro
    from kvfuzz.targets.wheels import sglang_kernel_file

    release_0_5_23(device)
    saved = SavedCase(case=HAND[0], finding=None, target="builtin", device=device,
                      versions=environment_versions(), origin="hand")
    script = tmp_path / "repro.py"
    write_repro(saved, script, device=device)
    kernels = (sglang_kernel_file("0.5.23"), Path(cases.__file__).parent.parent / "kvfuzz" / "kernels")
    procs = [subprocess.Popen([sys.executable, str(script), str(k), "--device", device], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, cwd=tmp_path) for k in kernels]
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0 and "OK:" in out, out + err


def test_a_case_round_trips_through_the_corpus(tmp_path, device):
    from kvfuzz.corpus import DirectoryCorpus, SavedCase, environment_versions

    store = DirectoryCorpus(tmp_path / "corpus")
    store.save(SavedCase(case=HAND[3], finding=None, target="builtin", device=device,
                         versions=environment_versions(), origin="hand"))
    (key,) = list(store.keys())
    assert store.load(key).case == HAND[3]


def test_production_rows_are_each_of_their_kinds():
    """A production batch's rows, made for all rows at once: each row holds valid indices in
    [0, 2**31) and one pad value; across a few batches there are full rows, all-pad rows,
    trailing pads, and pads scattered before the last valid slot, including in a row whose last
    slot is valid. The same seed gives the same batch."""
    import numpy as np

    from kvfuzz.ops.q8kv8_topk_length.generate import PADS, PROD_ROW_KINDS, _rows
    from kvfuzz.strategies.draw import RandomDraw
    from kvfuzz.strategies.values import LazyRng

    seen = set()
    for seed in range(4):
        rows = _rows(RandomDraw(seed), LazyRng(seed), 257, 2048, 512, PROD_ROW_KINDS)
        again = _rows(RandomDraw(seed), LazyRng(seed), 257, 2048, 512, PROD_ROW_KINDS)
        assert rows.shape == (257, 2048) and np.array_equal(rows, again)
        assert not np.array_equal(rows, _rows(RandomDraw(seed + 9), LazyRng(seed + 9), 257, 2048, 512,
                                              PROD_ROW_KINDS))
        assert rows.max() < 2**31
        for row in rows:
            pads = np.unique(row[row < 0])
            assert len(pads) <= 1 and set(pads.tolist()) <= set(PADS)
            valid = np.flatnonzero(row >= 0)
            if valid.size == 0:
                seen.add("all_pad")
            elif valid.size == 2048:
                seen.add("full")
            elif valid.size == valid[-1] + 1:
                seen.add("trailing")
            else:
                seen.add("scattered_last" if valid[-1] == 2047 else "scattered")
    assert seen == {"all_pad", "full", "trailing", "scattered", "scattered_last"}
