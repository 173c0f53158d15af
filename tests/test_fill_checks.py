"""The re-runs' fill rule checked by the worker over the whole batch (`execute.fill_checks`, on
the device on a GPU): for every re-run launch it must say exactly what `Plan.fill_only` says
of the same bytes on the host, for clean runs and for runs with one damaged word anywhere (a
guard band, a gap, an element, the first run or the re-run), and the judge must take it."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from kvfuzz import execute
from kvfuzz.execute import fill_checks, outcome_of, prepare, run_batch
from kvfuzz.judge import quick_verdict
from kvfuzz.materialize import alt_fill
from kvfuzz.engines.batch_engine import case_stream
from kvfuzz.worker import InProcessExecutor

from sampling import sampled


def stream(op: str, n: int) -> list:
    """The first `n` cases of the op's seeded in-contract stream, a class every 4 cases."""
    return [prepare(c, i) for i, (_, c) in enumerate(case_stream(op, 3, n, "cpu", in_contract_only=True, stint=4))]

OPS = ["flashinfer_kv_indices", "decode_metadata", "q8kv8_topk_length", "trtllm_mha_kv_indices"]


def _arenas(batch, result, image):
    """The batch's two arenas as the worker holds them: the first run's, and the re-runs' at
    their bases (the bytes between them are nobody's)."""
    first = torch.from_numpy(np.array(result.afters[0]))
    second = np.zeros_like(result.afters[0])
    for i, b in enumerate(batch):
        if b.repeat:
            second[b.base : b.base + b.size] = result.afters[1][i]
    return first, torch.from_numpy(second)


def _host_rule(batch, first, second, i):
    b = batch[i]
    after = first.numpy()[b.base : b.base + b.size]
    again = second.numpy()[b.base : b.base + b.size]
    mine, theirs = after.view("<u4"), again.view("<u4")
    return bool(((mine == theirs) | (theirs == alt_fill(b.size).view("<u4"))).all())


@pytest.mark.parametrize("op", sampled("fill checks", OPS, share=2))
def test_the_batch_fill_check_says_what_the_host_rule_says_of_every_relaunch(op, device):
    target = InProcessExecutor("builtin", device).target
    prepared = stream(op, 8)
    image, batch = execute.launches(prepared, [True] * len(prepared), prove_on_device=False)
    result = run_batch(target, image, batch, device)
    first, second = _arenas(batch, result, image)
    rng = random.Random(op)
    refused = 0
    for trial in range(24):
        a, b2 = first.clone(), second.clone()
        if trial:  # one word damaged in one arena, anywhere in a case
            i = rng.randrange(len(batch))
            at = batch[i].base + rng.randrange(batch[i].size)
            (a if trial % 2 else b2)[at] ^= 1 << rng.randrange(8)
        idx, ok = fill_checks(a, b2, batch)
        assert idx == [i for i, b in enumerate(batch) if b.repeat]
        assert ok.tolist() == [_host_rule(batch, a, b2, i) for i in idx], trial
        assert trial or all(ok.tolist()), "a clean batch's re-runs break the fill rule"
        refused += not all(ok.tolist())
    assert refused, "no damaged word was refused: the check was not tried"


def test_a_batch_checked_on_the_device_is_judged_by_that_check(device, monkeypatch):
    """With the check on the device (as on a GPU), each re-run carries its answer and
    `quick_verdict` takes it: a clean batch is clean, and a re-run the device check refuses is
    judged in full."""
    monkeypatch.setattr(execute, "FILL_ON_DEVICE", {"cpu", "cuda"})
    op = "flashinfer_kv_indices"
    target = InProcessExecutor("builtin", device).target
    prepared = stream(op, 6)
    image, batch = execute.launches(prepared, [True] * len(prepared), prove_on_device=False)
    result = run_batch(target, image, batch, device)
    assert set(result.fill_ok) == set(range(len(batch))) and all(result.fill_ok.values())
    for i, p in enumerate(prepared):
        o = outcome_of(batch, result, i)
        assert o.runs[1].fill_ok is True and quick_verdict(p, o) is not None
        o.runs[1].fill_ok = False
        assert quick_verdict(p, o) is None
