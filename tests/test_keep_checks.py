"""The first run's untouched bytes checked by the worker over the whole batch
(`execute.keep_checks`, on the device on a GPU): for every launch with a clean image it must say
exactly what the host's comparison of the clean image's spans says (`CleanImage.holds` over
its spans: every byte outside the outputs' storage as the image has it), for clean runs and
for runs with one damaged byte anywhere (a guard band, a gap, an input, an output), and the
judge must take it: a kept run is judged on its outputs alone, a refused one in full."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from kvfuzz import execute
from kvfuzz.engines.batch_engine import case_stream
from kvfuzz.execute import keep_checks, outcome_of, prepare, run_batch
from kvfuzz.judge import clean_image, judge, quick_verdict
from kvfuzz.worker import InProcessExecutor

from sampling import sampled

OPS = ["flashinfer_kv_indices", "decode_metadata", "q8kv8_topk_length", "trtllm_mha_kv_indices",
       "swa_spec_page_table", "num_kv_splits"]


def stream(op: str, n: int) -> list:
    """The first `n` cases of the op's seeded in-contract stream, a class every 4 cases."""
    return [prepare(c, i) for i, (_, c) in enumerate(case_stream(op, 3, n, "cpu", in_contract_only=True, stint=4))]


def _host_spans_hold(p, b, after: np.ndarray) -> bool:
    """The host's answer: every span of the case's clean image holds the image's bytes."""
    part, image = after[b.base : b.base + b.size], p.plan.image
    return all(np.array_equal(part[a:z], image[a:z]) for a, z in clean_image(p).spans)


def _outside(prepared, batch, after: np.ndarray, ok: list) -> str:
    """Where each refused case's changed bytes outside its outputs lie: tensor (or gap) and the
    bytes before and after, for the first few (a GPU-only failure has to be read from this)."""
    lines = []
    for p, b, good in zip(prepared, batch, ok):
        if good:
            continue
        part, image = after[b.base : b.base + b.size], p.plan.image
        at = [int(x) for a, z in clean_image(p).spans for x in np.flatnonzero(part[a:z] != image[a:z]) + a]
        where = {}
        for x in at:
            name = next((n for n, r in p.plan.regions.items() if r.start - r.guard <= x < r.start + r.nbytes + r.guard),
                        "gap")
            where.setdefault(name, []).append(x)
        lines.append(f"case {p.index} ({len(at)} bytes): " + "; ".join(
            f"{n} {p.plan.regions[n].spec if n != 'gap' else ''} at {xs[:4]} "
            f"{[hex(image[x]) for x in xs[:4]]} -> {[hex(part[x]) for x in xs[:4]]}" for n, xs in where.items()))
    return "\n".join(lines[:4])


@pytest.mark.parametrize("op", sampled("keep checks", OPS, share=3))
def test_the_batch_keep_check_says_what_the_host_spans_say_of_every_first_run(op, device):
    target = InProcessExecutor("builtin", device).target
    prepared = stream(op, 8)
    image, batch = execute.launches(prepared, [False] * len(prepared), prove_on_device=False)
    assert all(b.changes is not None for b in batch), "an in-contract case without a clean image"
    result = run_batch(target, image, batch, device)
    after = torch.from_numpy(np.array(result.afters[0])).to(device)
    before = torch.from_numpy(image).to(device)
    rng = random.Random(op)
    refused = kept_damage = 0
    for trial in range(40):
        a = after.clone()
        if trial:  # one byte damaged, anywhere in a case: in its outputs half the time
            i = rng.randrange(len(batch))
            b = batch[i]
            ranges = [r for r in b.changes if r[1] > r[0]]
            if trial % 2 and ranges:
                lo, hi = rng.choice(ranges)
                at = b.base + rng.randrange(lo, hi)
            else:
                at = b.base + rng.randrange(b.size)
            a[at] ^= 1 << rng.randrange(8)
        idx, ok = keep_checks(before, a, batch)
        assert idx == list(range(len(batch)))
        host = a.cpu().numpy()
        assert ok.tolist() == [_host_spans_hold(prepared[i], batch[i], host) for i in idx], trial
        assert trial or all(ok.tolist()), "a clean batch changed bytes outside its outputs: " + \
            _outside(prepared, batch, host, ok.tolist())
        refused += not all(ok.tolist())
        kept_damage += bool(trial) and all(ok.tolist())
    assert refused, "no damaged byte was refused: the check was not tried"
    assert kept_damage, "no damaged output byte was let through to the outputs' comparison"


def test_a_batch_checked_on_the_device_is_judged_by_that_check(device, monkeypatch):
    """With the check on the device (as on a GPU), each first run carries its answer and
    `quick_verdict` takes it: a clean batch is clean; a run the check refuses is judged in full,
    and the full judge finds the stray byte; a damaged output is still seen by the host."""
    monkeypatch.setattr(execute, "FILL_ON_DEVICE", {"cpu", "cuda"})
    op = "trtllm_mha_kv_indices"
    target = InProcessExecutor("builtin", device).target
    prepared = stream(op, 6)
    image, batch = execute.launches(prepared, [True] * len(prepared), prove_on_device=False)
    result = run_batch(target, image, batch, device)
    assert set(result.keep_ok) == set(range(len(batch))) and all(result.keep_ok.values())
    for i, p in enumerate(prepared):
        o = outcome_of(batch, result, i)
        assert o.runs[0].keep_ok is True and o.runs[1].keep_ok is None
        assert quick_verdict(p, o) is not None
        o.runs[0].keep_ok = False
        assert quick_verdict(p, o) is None
        # a kept run with a wrong output byte: the outputs' comparison on the host refuses it
        o.runs[0].keep_ok = True
        lo, hi = next(r for r in batch[i].changes if r[1] > r[0])
        o.runs[0].after[lo] ^= 0xFF
        assert quick_verdict(p, o) is None
        assert judge(p.case, o, prepared=p).findings


def test_a_stray_byte_past_an_output_is_refused_for_its_case_only_and_found_by_the_judge(device):
    """One byte written just past a case's output (its guard band): the device check refuses
    that case alone, and the full judge it is sent to finds the write."""
    op = "q8kv8_topk_length"
    target = InProcessExecutor("builtin", device).target
    prepared = stream(op, 4)
    image, batch = execute.launches(prepared, [False] * len(prepared), prove_on_device=False)
    result = run_batch(target, image, batch, device)
    victim, name = 2, execute.CONTRACTS[op].outputs[0]
    r = prepared[victim].plan.regions[name]
    at = batch[victim].base + r.start + r.nbytes  # the first byte past the output's storage
    after = np.array(result.afters[0])
    after[at] ^= 1
    idx, ok = keep_checks(torch.from_numpy(image).to(device), torch.from_numpy(after).to(device), batch)
    assert ok.tolist() == [i != victim for i in idx]
    result.afters[0], result.keep_ok = after, dict(zip(idx, ok.tolist()))
    o = outcome_of(batch, result, victim)
    assert o.runs[0].keep_ok is False and quick_verdict(prepared[victim], o) is None
    kinds = {f.kind for f in judge(prepared[victim].case, o, prepared=prepared[victim]).findings}
    assert "out_of_bounds_write" in kinds, kinds
