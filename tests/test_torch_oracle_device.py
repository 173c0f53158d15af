"""The torch oracle of a large launch on the GPU (`execute.DEVICE_ORACLE_BYTES`, off by default;
set to 0 here): for every op, on small and production-size cases, its answer is the host's
answer cell for cell, and it reads the inputs as the case drew them even where the target
writes its inputs.

On a GPU only (the interpreter's launches run the host's oracle): run by hand on the H200."""

from __future__ import annotations

import numpy as np
import pytest

from kvfuzz import execute
from kvfuzz.engines.batch_engine import case_stream
from kvfuzz.execute import prepare, torch_ref_alone
from kvfuzz.ops import records
from kvfuzz.worker import InProcessExecutor

OPS = sorted(records())


@pytest.fixture()
def gpu(device, monkeypatch):
    if device == "cpu":
        pytest.skip("the torch oracle runs on the device only on a GPU")
    monkeypatch.setattr(execute, "DEVICE_ORACLE_BYTES", 0)  # every launch's, whatever its size
    return device


def in_contract(op: str, n: int, sizes: str) -> list:
    out = [prepare(c, i) for i, (_, c) in enumerate(case_stream(op, 4, n, "cuda", in_contract_only=True, stint=4,
                                                               sizes=sizes))]
    return [p for p in out if p.status == "in_contract"]


def device_refs(executor, prepared: list):
    image, batch = execute.launches(prepared, [False] * len(prepared))
    result = executor.run_batch(image, batch)
    assert result.lost is None
    return result


@pytest.mark.parametrize("op", OPS)
def test_the_device_oracle_answers_as_the_hosts(op, gpu):
    executor = InProcessExecutor("builtin", gpu)
    prepared = in_contract(op, 24, "small") + in_contract(op, 4, "production")
    assert prepared
    result = device_refs(executor, prepared)
    for i, p in enumerate(prepared):
        want, error = torch_ref_alone(p.case)
        assert (result.torch_errors[i], error) == (None, None), p.case.describe()
        assert set(result.torch_refs[i]) == set(want)
        for name, v in want.items():
            assert np.array_equal(result.torch_refs[i][name], v), (name, p.case.describe())


def test_the_device_oracle_reads_the_inputs_as_drawn_when_the_target_writes_them(gpu):
    op = "flashinfer_kv_indices"
    executor = InProcessExecutor("builtin", gpu)
    invoke = executor.target.invoke

    def and_clobber(op_, views, *a, **k):  # a target that also writes every input after its launch
        out = invoke(op_, views, *a, **k)
        for name, v in views.items():
            if name != "kv_indices":
                v.fill_(1)
        return out

    executor.target.invoke = and_clobber
    prepared = in_contract(op, 12, "small")
    result = device_refs(executor, prepared)
    for i, p in enumerate(prepared):
        want, _ = torch_ref_alone(p.case)
        assert np.array_equal(result.torch_refs[i]["kv_indices"], want["kv_indices"])
