"""The SGLang 0.5.14 seed, loaded from a path: agrees on contiguous in-contract cases,
loses its writes to a non-contiguous swa_page_table. Builtin refuses invalid page sizes."""

from __future__ import annotations

import pytest
import torch

from kvfuzz.case import TensorSpec
from kvfuzz.execute import run_case
from kvfuzz.judge import judge

import cases

CONTIGUOUS = [cases.decode(ps=1), cases.decode(ps=16, delta=2), cases.decode(ps=16, swa=True),
              cases.decode(ps=1, P=0), cases.decode(ps=4, dtype="int32"), cases.spec(la=(3, 300)),
              cases.spec(la=(255, 256, 257), R=3, WB=4), cases.splits([1, 50, 4000, 99], num_group=2)]


@pytest.mark.parametrize("case", CONTIGUOUS, ids=lambda c: c.describe()[:40])
def test_seed_agrees_on_contiguous_in_contract_cases(case, seed_target, device):
    verdict = judge(case, run_case(seed_target, case, device))
    assert verdict.status == "in_contract" and verdict.findings == []


def test_seed_loses_writes_to_noncontiguous_swa_page_table(seed_target, device):
    case = cases.decode(ps=16, swa=True, swa_table=TensorSpec("int32", (3, 7), (1, 3)))
    verdict = judge(case, run_case(seed_target, case, device))
    assert verdict.signatures() == ["decode_metadata:swa:mismatch:swa_page_table:all"]
    # the same case is fine on kvfuzz's own kernels
    from kvfuzz.targets import load_target

    assert judge(case, run_case(load_target("builtin", device), case, device)).findings == []


@pytest.mark.parametrize("ps", [3, 48, 100, 0, -4])
def test_builtin_refuses_invalid_page_sizes(ps, device):
    from kvfuzz.kernels import normal_decode_set_metadata

    d = "cuda" if device == "cuda" else "cpu"
    i32 = dict(dtype=torch.int32, device=d)
    with pytest.raises(ValueError, match="page_size"):
        normal_decode_set_metadata(torch.zeros(2, **i32), torch.zeros(3, **i32), torch.zeros(2, 4, **i32),
                                   torch.zeros(2, 64, **i32), torch.zeros(2, **i32), torch.arange(4, device=d),
                                   2, torch.ones(2, **i32), 0, ps)


def test_must_refuse_case_accepted_is_invalid_accepted(device, tmp_path):
    # a target that ignores page_size validation: kvfuzz must call it invalid_accepted
    lax = tmp_path / "lax.py"
    lax.write_text("def normal_decode_set_metadata(*args, **kwargs):\n    pass\n")
    from kvfuzz.targets import load_target

    case = cases.decode(ps=4).with_scalars(page_size=48)
    verdict = judge(case, run_case(load_target(str(lax), device), case, device))
    assert verdict.status == "must_refuse"
    assert [f.kind for f in verdict.findings] == ["invalid_accepted"]
