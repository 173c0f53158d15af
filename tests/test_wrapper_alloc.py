"""The buffers a target's wrapper allocates itself are guarded (kvfuzz/wrapper_alloc.py): a
grid one program too large in q8kv8_topk_length's wrapper writes past the result it allocates
with torch.empty, and that is an `out_of_bounds_write` of the output the result became, alone
(run_case) and in a batch; a store past a scratch buffer is the call's error; the correct
wrapper is clean, and nothing outside the target module's own calls is guarded."""

from __future__ import annotations

import shutil

import pytest
import torch

import cases
from kvfuzz.execute import launches, outcomes, prepare, run_batch, run_case
from kvfuzz.judge import judge
from kvfuzz.targets import load_target
from kvfuzz.wrapper_alloc import OVERRUN, Guard

from conftest import REPO

OP = "q8kv8_topk_length"
WRITE = "q8kv8_topk_length:-:out_of_bounds_write:topk_length:after"
LAUNCH = "        _topk_length_kernel[(s_q,)](indices, *indices.stride(), out, out.stride(0), topk, BLOCK=BLOCK)\n"
CASES = [cases.topk([[0, -1, 5], [-1, -1], [7] * 200]), cases.topk([[4] * 256, [-1] * 255 + [0]], K=256)]


def _copy(tmp_path, name: str, old: str = "", new: str = ""):
    """The builtin q8kv8 kernel file with `old` replaced by `new`, loaded as a target."""
    folder = tmp_path / name
    folder.mkdir()
    (folder / "__init__.py").write_text("")
    shutil.copyfile(REPO / "kvfuzz" / "kernels" / "_args.py", folder / "_args.py")
    text = (REPO / "kvfuzz" / "kernels" / "q8kv8_topk_length.py").read_text()
    assert old in text
    (folder / "q8kv8_topk_length.py").write_text(text.replace(old, new))
    return str(folder / "q8kv8_topk_length.py")


def _signatures(target, case, device):
    return judge(case, run_case(target, case, device)).signatures()


def test_a_grid_one_too_large_writes_past_the_wrappers_result(tmp_path, device):
    mutant = load_target(_copy(tmp_path, "grid", LAUNCH, LAUNCH.replace("[(s_q,)]", "[(s_q + 1,)]")), device)
    for case in CASES:
        sigs = [s.replace(s.split(":")[1], "-", 1) for s in _signatures(mutant, case, device)]
        assert sigs == [WRITE], (case.describe(), sigs)
    # the same in a batch (the fuzzing loop's way), from the stores' own byte offsets
    prepared = [prepare(c) for c in CASES]
    image, batch = launches(prepared, [True] * len(prepared), prove_on_device=False)
    for p, outcome in zip(prepared, outcomes(batch, run_batch(mutant, image, batch, device))):
        v = judge(p.case, outcome)
        assert [f.kind for f in v.findings] == ["out_of_bounds_write"], v.signatures()
        rows = p.case.tensors["topk_length"].shape[0]
        assert f"byte offsets from its storage start: [{4 * rows}" in v.findings[0].message


def test_the_correct_wrapper_is_clean(tmp_path, device):
    original = load_target(_copy(tmp_path, "same"), device)
    for case in CASES:
        assert _signatures(original, case, device) == []


def test_a_store_past_a_scratch_buffer_is_the_calls_error(tmp_path, device):
    """The wrapper launches into a scratch buffer it does not return (of another shape than the
    output), one program too many."""
    scratch = LAUNCH.replace("[(s_q,)](indices, *indices.stride(), out,", "[(s_q + 1,)](indices, *indices.stride(), tmp,")
    scratch = ("        tmp = torch.empty_like(out[:, None])\n" + scratch.replace("out.stride(0)", "tmp.stride(0)")
               + LAUNCH)
    mutant = load_target(_copy(tmp_path, "scratch", LAUNCH, scratch), device)
    run = run_case(mutant, CASES[0], device).runs[0]
    assert run.error_type == OVERRUN and "torch.empty_like at q8kv8_topk_length.py:" in run.error, run.error


def test_only_the_target_modules_own_allocations_are_guarded(builtin_target):
    guard = Guard(builtin_target)
    namespace = builtin_target.entries[OP].__globals__
    with guard.watch(OP, {}):
        assert namespace["torch"] is not torch and namespace["torch"].int32 is torch.int32
        torch.empty(3).new_empty(2)  # kvfuzz's (this module's) calls
        assert guard.pending[0].allocations == []
    assert namespace["torch"] is torch and torch.Tensor.new_empty.__qualname__ != "guarded"
    assert guard.settle() == {}


@pytest.mark.parametrize("fn", ["empty", "zeros", "full", "empty_like"])
def test_a_guarded_allocation_is_what_torch_gives(fn, builtin_target):
    guard = Guard(builtin_target)
    namespace = builtin_target.entries[OP].__globals__
    like = torch.arange(12, dtype=torch.int64).reshape(3, 4).t()
    args = {"empty": ((3, 4),), "zeros": ((3, 4),), "full": ((3, 4), 7), "empty_like": (like,)}[fn]
    with guard.watch(OP, {}):
        got = getattr(namespace["torch"], fn)(*args, dtype=torch.int32)
    want = getattr(torch, fn)(*args, dtype=torch.int32)
    assert got.shape == want.shape and got.stride() == want.stride() and got.dtype == want.dtype
    if fn != "empty" and fn != "empty_like":
        assert torch.equal(got, want)
    assert len(guard.pending[0].allocations) == 1 and guard.settle() == {}
