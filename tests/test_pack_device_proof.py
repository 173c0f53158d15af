"""Packed launches proved clean on the device (`Pack.proof`, `execute.keep_checks`,
`execute.output_checks`, `device_clean_launches`), as lone launches are: a pack's launch carries
its output blocks' byte ranges and the bytes a correct run of every member leaves there, in the
batch image's tail, and a pack the device proves clean sends no bytes back.

* the two checks together say of a pack's first run exactly what the host's fast path
  (`judge.quick_pack`: every byte as `Pack.clean_after` wants it, free bytes aside) says, for a
  clean run and for runs with one damaged byte anywhere in the pack;
* a clean packed batch: every pack proved clean, its members judged clean with no byte read;
* a wrong output in one member: that pack is not proved clean, its bytes come back, and the
  member's finding is found;
* a pack proved clean whose one torch oracle disagrees: its members run again alone, judged in
  full.

The checks run where the worker runs them (a GPU); here they are turned on for the session's
device, as tests/test_output_checks.py does for lone launches."""

from __future__ import annotations

import dataclasses
import random

import numpy as np
import pytest
import torch

from kvfuzz import execute, packing
from kvfuzz.check import Checker
from kvfuzz.engines.batch_engine import fuzz_op
from kvfuzz.execute import keep_checks, output_checks, run_batch
from kvfuzz.ops import records
from kvfuzz.worker import InProcessExecutor

from sampling import sampled
from test_pack_launch import PACKED, op_of, stream


def packed(prepared, repeat=True, k=4):
    image, batch, packs = packing.launches(prepared, [repeat] * len(prepared), [False] * len(prepared), k)
    assert packs is not None and packs.packed() >= len(prepared) // 2, "too few cases packed to test"
    return image, batch, packs


def _host_says(pack, after: np.ndarray) -> bool:
    """The host fast path's answer on a pack's first run: every byte as a correct run leaves it."""
    want, free = pack.clean_after()
    return bool(((after == want) | (free if free is not None else False)).all())


@pytest.mark.parametrize("name", sampled("pack device proof", PACKED, share=3))
def test_the_device_proof_of_a_pack_says_what_the_hosts_fast_path_says(name, device):
    target = InProcessExecutor("builtin", device).target
    image, batch, packs = packed(stream(name, 12), repeat=False)
    picked = [(pk, li) for pk, li in zip(packs.packs, packs.launch_of) if batch[li].expect is not None]
    assert picked, "no pack carries its device proof"
    ends = [b.base + b.size for b in batch if b.size]
    assert min(w for _, li in picked for _, w, _, _ in batch[li].expect) >= max(ends), "the proof overlaps a case"
    result = run_batch(target, image, batch, device)
    after = torch.from_numpy(np.array(result.afters[0])).to(device)
    before = torch.from_numpy(image).to(device)
    rng = random.Random(name)
    refused = 0
    for trial in range(48):
        a = after.clone()
        pk, li = rng.choice(picked)
        b = batch[li]
        if trial:  # one byte of a pack: an output block's most of the time, else anywhere in it
            lo, hi = rng.choice(b.changes) if trial % 3 else (0, b.size)
            a[b.base + rng.randrange(lo, hi)] ^= 1 << rng.randrange(8)
        keep, out = keep_checks(before, a, batch), output_checks(before, a, batch)
        keep, out = dict(zip(keep[0], keep[1].tolist())), dict(zip(out[0], out[1].tolist()))
        host = a.cpu().numpy()
        for pk2, li2 in picked:
            b2 = batch[li2]
            says = keep[li2] and out[li2]
            assert says == _host_says(pk2, host[b2.base : b2.base + b2.size]), (trial, li2)
            assert trial or says, "a clean pack was not proved clean"
        refused += not (keep[li] and out[li])
    assert refused, "no damaged byte was refused: the check was not tried"


def test_a_clean_packed_batch_is_proved_clean_and_brings_no_bytes_back(device, monkeypatch):
    monkeypatch.setattr(execute, "FILL_ON_DEVICE", {"cpu", "cuda"})
    name = "flashinfer_kv_indices"
    executor = InProcessExecutor("builtin", device)
    prepared = stream(name, 8)
    image, batch, packs = packed(prepared)
    result = run_batch(executor.target, image, batch, device)
    assert set(packs.launch_of) <= result.device_clean
    clean = packs.clean(batch, result)
    assert set(clean) == set(packs.member_of) and not packs.rerun
    assert all(r.device_clean and r.after is None for o in clean.values() for r in o.runs)
    verdicts = list(Checker(executor, op_of(name)).verdicts(prepared, batch, result, packs))
    assert len(verdicts) == len(prepared) and not any(v.findings for _, _, v in verdicts)
    # not asked to prove: the packs' bytes come back and the host's fast path judges them
    image, batch, packs = packing.launches(prepared, [True] * len(prepared), [False] * len(prepared), 4,
                                           prove_on_device=False)
    result = run_batch(executor.target, image, batch, device)
    assert not set(packs.launch_of) & result.device_clean
    assert set(packs.clean(batch, result)) == set(packs.member_of)


def test_a_wrong_output_in_a_pack_is_not_proved_clean_and_is_found(device, monkeypatch):
    """The target writes one wrong cell in one packed launch's output: that pack alone is not
    proved clean, its bytes come back, and its member's mismatch is found."""
    monkeypatch.setattr(execute, "FILL_ON_DEVICE", {"cpu", "cuda"})
    name = "flashinfer_kv_indices"
    executor = InProcessExecutor("builtin", device)
    target = executor.target
    prepared = stream(name, 8)
    image, batch, packs = packed(prepared, repeat=False)
    victim = packs.launch_of[0]
    calls, invoke = [], target.invoke
    runs = [i for i, b in enumerate(batch) if b.run]

    def damaging(op_, views, scalars, as_called=None):
        out = invoke(op_, views, scalars, as_called)
        if runs[len(calls)] == victim:  # the first pack's launch: its first output cell off by one
            views["kv_indices"].view(-1)[0] += 1
        calls.append(1)
        return out

    monkeypatch.setattr(target, "invoke", damaging)
    result = run_batch(target, image, batch, device)
    assert victim not in result.device_clean and set(packs.launch_of[1:]) <= result.device_clean
    verdicts = {i: v for i, (_, _, v) in enumerate(Checker(executor, op_of(name)).verdicts(prepared, batch, result, packs))}
    first = [i for i, (k, _) in packs.member_of.items() if k == 0]
    found = {(f.kind, f.tensor) for i in first for f in verdicts[i].findings}
    assert ("mismatch", "kv_indices") in found, found
    assert not any(verdicts[i].findings for i in verdicts if i not in first)


def test_a_pack_proved_clean_whose_torch_oracle_disagrees_has_its_members_run_alone(device, monkeypatch):
    """The pack's bytes are proved clean on the device, but its one torch oracle disagrees with a
    member's NumPy oracle: the bytes are not at hand, so its members (and they alone) run again
    alone, judged in full; the other packs stay clean."""
    monkeypatch.setattr(execute, "FILL_ON_DEVICE", {"cpu", "cuda"})
    name = "flashinfer_kv_indices"
    executor = InProcessExecutor("builtin", device)
    prepared = stream(name, 8)
    image, batch, packs = packed(prepared)
    pack, li = packs.packs[0], packs.launch_of[0]
    record = records()[name]
    out = record.contract.outputs[0]
    last = len(pack.members) - 1
    wrong_at = pack.rows_of(out, last).stop - 1  # the first pack's last member's last row
    assert pack.member_refs({out: np.zeros(wrong_at + 1)}, last)[out].size

    def wrong(case, dev, views=None, _ref=record.contract.torch_ref):
        got = dict(_ref(case, dev) if views is None else _ref(case, dev, views))
        if case.tensors[out].shape == batch[li].case.tensors[out].shape:  # the pack's launch alone
            got[out] = got[out].clone()
            got[out].view(-1)[wrong_at] += 1
        return got

    monkeypatch.setitem(records(), name, dataclasses.replace(
        record, contract=dataclasses.replace(record.contract, torch_ref=wrong)))
    result = run_batch(executor.target, image, batch, device)
    assert set(packs.launch_of) <= result.device_clean
    clean = packs.clean(batch, result)
    members = {i for i, (k, _) in packs.member_of.items() if k == 0}
    assert packs.rerun == members and not set(clean) & members
    alone, run = [], executor.run

    def counted(case, *a, **k):
        alone.append(case)
        return run(case, *a, **k)

    monkeypatch.setattr(executor, "run", counted)
    verdicts = {i: v for i, (_, _, v) in enumerate(Checker(executor, name).verdicts(prepared, batch, result, packs))}
    assert sorted(id(c) for c in alone) == sorted(id(prepared[i].case) for i in members)
    assert not any(v.findings for v in verdicts.values())  # alone, the torch oracle agrees
