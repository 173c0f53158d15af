"""Clean runs proved clean on the device (`execute.output_checks`, `device_clean_launches`): the
worker compares each launch's outputs with the bytes a correct run leaves (the clean image's,
carried in the batch image's tail), and a launch whose every check holds sends no bytes back. The check
must say exactly what the host's comparison of the outputs says (`CleanImage.holds` with its
spans kept), for clean runs and for runs with one damaged byte; a run proved clean is judged by
`quick_verdict` alone, never by the full judge; a run with a wrong output is not proved clean
and is found; and a case proved clean whose torch oracle disagrees is run again alone, judged in
full."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from kvfuzz import execute
from kvfuzz.engines.batch_engine import case_stream, fuzz_op
from kvfuzz.execute import outcome_of, output_checks, prepare, run_batch
from kvfuzz.judge import clean_image, judge, quick_verdict
from kvfuzz.ops import CONTRACTS, records
from kvfuzz.worker import InProcessExecutor

from sampling import sampled

OPS = ["flashinfer_kv_indices", "decode_metadata", "q8kv8_topk_length", "trtllm_mha_kv_indices",
       "swa_spec_page_table", "num_kv_splits"]


def stream(op: str, n: int) -> list:
    """The first `n` cases of the op's seeded in-contract stream, a class every 4 cases."""
    return [prepare(c, i) for i, (_, c) in enumerate(case_stream(op, 3, n, "cpu", in_contract_only=True, stint=4))]


def _host_outputs_hold(p, b, after: np.ndarray) -> bool:
    """The host's answer: the case's outputs hold what a correct run leaves (free bytes aside)."""
    return clean_image(p).holds(p.plan.image, after[b.base : b.base + b.size], kept=True)


@pytest.mark.parametrize("op", sampled("output checks", OPS, share=3))
def test_the_device_output_check_says_what_the_host_says_of_every_first_run(op, device):
    target = InProcessExecutor("builtin", device).target
    prepared = stream(op, 8)
    image, batch = execute.launches(prepared, [False] * len(prepared))
    assert all(b.expect is not None for b in batch), "an in-contract case without its wanted bytes"
    tail = min(w for b in batch for _, w, _, _ in b.expect)
    assert tail >= max(b.base + b.size for b in batch), "the wanted bytes overlap a case"
    result = run_batch(target, image, batch, device)
    after = torch.from_numpy(np.array(result.afters[0])).to(device)
    before = torch.from_numpy(image).to(device)
    rng = random.Random(op)
    refused = passed_damage = 0
    for trial in range(40):
        a = after.clone()
        if trial:  # one byte damaged in a case, in its outputs most of the time; or in the tail
            i = rng.randrange(len(batch))
            b = batch[i]
            ranges = [r for r in b.changes if r[1] > r[0]]
            if trial % 4 and ranges:
                lo, hi = rng.choice(ranges)
                at = b.base + rng.randrange(lo, hi)
            elif trial % 4 == 0 and trial % 8:
                at = tail + rng.randrange(image.size - tail)  # the wanted bytes are read from `before`
            else:
                at = b.base + rng.randrange(b.size)
            a[at] ^= 1 << rng.randrange(8)
        idx, ok = output_checks(before, a, batch)
        assert idx == list(range(len(batch)))
        host = a.cpu().numpy()
        assert ok.tolist() == [_host_outputs_hold(prepared[i], batch[i], host) for i in idx], trial
        assert trial or all(ok.tolist()), "a clean batch's outputs differ from the clean image's"
        refused += not all(ok.tolist())
        passed_damage += bool(trial) and all(ok.tolist())
    assert refused, "no damaged output byte was refused: the check was not tried"
    assert passed_damage, "no byte outside the outputs (or free) was let through to the other checks"


def test_a_clean_batch_is_proved_clean_and_brings_no_bytes_back(device, monkeypatch):
    """With the checks on the device (as on a GPU), every launch of a clean batch is proved clean: its
    runs carry no bytes, `quick_verdict` passes them, and the full judge refuses them."""
    monkeypatch.setattr(execute, "FILL_ON_DEVICE", {"cpu", "cuda"})
    op = "decode_metadata"
    target = InProcessExecutor("builtin", device).target
    prepared = stream(op, 6)
    image, batch = execute.launches(prepared, [True] * len(prepared))
    result = run_batch(target, image, batch, device)
    assert result.device_clean == set(range(len(batch)))
    for i, p in enumerate(prepared):
        o = outcome_of(batch, result, i)
        assert [r.device_clean for r in o.runs] == [True, True] and all(r.after is None for r in o.runs)
        v = quick_verdict(p, o)
        assert v is not None and not v.findings
        with pytest.raises(ValueError, match="proved clean on the device"):
            judge(p.case, o, prepared=p)
    # not asked to prove: the same batch brings every byte back
    image, batch = execute.launches(prepared, [True] * len(prepared), prove_on_device=False)
    result = run_batch(target, image, batch, device)
    assert not result.device_clean and all(outcome_of(batch, result, i).runs[0].after is not None
                                      for i in range(len(batch)))


def test_a_wrong_output_is_not_proved_clean_and_the_judge_finds_it(device, monkeypatch):
    """One case's output damaged by the target: that launch alone is not proved clean, its bytes
    come back, and the full judge finds the wrong cell; the others are proved clean."""
    monkeypatch.setattr(execute, "FILL_ON_DEVICE", {"cpu", "cuda"})
    op = "q8kv8_topk_length"
    target = InProcessExecutor("builtin", device).target
    prepared = stream(op, 4)
    victim = 2
    name = CONTRACTS[op].outputs[-1]
    calls = []
    invoke = target.invoke

    def damaging(op_, views, scalars, as_called=None):
        out = invoke(op_, views, scalars, as_called)
        calls.append(1)
        if len(calls) == victim + 1:  # the victim's first run
            views[name].view(-1)[0] += 1
        return out

    monkeypatch.setattr(target, "invoke", damaging)
    image, batch = execute.launches(prepared, [False] * len(prepared))
    result = run_batch(target, image, batch, device)
    assert result.device_clean == set(range(len(batch))) - {victim}
    o = outcome_of(batch, result, victim)
    assert not o.runs[0].device_clean and o.runs[0].after is not None
    assert quick_verdict(prepared[victim], o) is None
    kinds = {(f.kind, f.tensor) for f in judge(prepared[victim].case, o, prepared=prepared[victim]).findings}
    assert ("mismatch", name) in kinds, kinds


def test_a_case_proved_clean_whose_torch_oracle_disagrees_is_run_alone_and_found(device, monkeypatch):
    """The campaign loop: a clean batch is proved clean on the device; where the torch oracle then
    disagrees with the NumPy one, the case's bytes are not at hand, so it runs again alone and
    the full judge reports the disagreement."""
    monkeypatch.setattr(execute, "FILL_ON_DEVICE", {"cpu", "cuda"})
    op = "num_kv_splits"
    ex = InProcessExecutor("builtin", device)
    stats, found = fuzz_op(op, ex, seed=3, budget_s=120, max_cases=8, device=device, in_contract_only=True,
                           rerun_every=1, stint=4)
    assert stats.cases == 8 and not found
    assert stats.engine["device_clean"] == stats.engine["launches"] == 8

    record = records()[op]
    name = record.contract.outputs[0]

    def wrong(case, dev, views, _ref=record.contract.torch_ref):
        out = dict(_ref(case, dev, views))
        out[name] = out[name].clone()
        out[name].view(-1)[0] += 1
        return out

    import dataclasses

    monkeypatch.setitem(records(), op, dataclasses.replace(
        record, contract=dataclasses.replace(record.contract, torch_ref=wrong)))
    stats, found = fuzz_op(op, ex, seed=3, budget_s=120, max_cases=8, device=device, in_contract_only=True,
                           rerun_every=1, stint=4)
    kinds = {f.finding.kind for f in found.values()}
    assert kinds == {"oracle_disagreement"}, kinds
