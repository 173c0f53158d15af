"""One judge, two array libraries: kvfuzz's `judge` (NumPy arenas) and the repro script's
(`repro_script.TorchArena`, the same kvfuzz/judge_flow.py code on torch tensors) give the same
findings, message and cells included, on the same runs.

No kernel runs here. For saved corpus cases of every op and kind, seeded random runs are
written by hand as kernels would leave them: required cells written right or not, stray bytes
in guard bands, gaps and input elements, a re-run from the alternate image that differs or
copies a word of the fill (a read), probe runs, a raise, a run lost to a CUDA fault."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from kvfuzz.corpus import SavedCase, iter_cases
from kvfuzz.execute import CUDA_FAULT, Outcome, RunResult, prepare
from kvfuzz.fills import CANARY_BYTE, alt_words
from kvfuzz.judge import judge
from kvfuzz.ops import CONTRACTS

torch = pytest.importorskip("torch")

CORPUS = Path(__file__).resolve().parents[1] / "corpora"
SEEDS = 12  # random run sets per case


def _one_per_op_and_kind() -> list:
    seen, out = set(), []
    for path, saved in iter_cases(CORPUS):
        if not isinstance(saved, SavedCase):
            continue
        key = (saved.case.op, saved.finding.kind if saved.finding else None)
        if key not in seen:
            seen.add(key)
            out.append(pytest.param(saved, id=f"{key[0]}:{key[1]}:{path.name}"))
    return out


def _runs(prepared, rnd: random.Random) -> list[RunResult]:
    """A first run from the image and the runs after it, as a kernel with some defects leaves them."""
    p, case = prepared.plan, prepared.case
    contract = CONTRACTS[case.op]
    base = p.image.copy()
    if prepared.status == "in_contract" and rnd.random() < 0.7:  # the required cells written right
        cells = contract.cells(case)
        for name in contract.outputs:
            if name in p.regions and name in cells:
                required = cells[name].required
                p.regions[name].view(base)[required] = np.asarray(prepared.expected.values[name])[required]
    stray = [rnd.randrange(p.size) for _ in range(rnd.choice((0, 0, 1, 3)))]  # anywhere: mostly guard bands
    owned = [rnd.choice(list(p.regions.values())) for _ in range(rnd.choice((0, 1, 2)))]  # in a tensor's storage
    for r in owned:
        if r.nbytes:
            stray.append(r.start + rnd.randrange(r.nbytes))

    def left(image: np.ndarray, alt: bool) -> np.ndarray:
        after = np.where(p.owner >= 0, base, image).astype(np.uint8)  # the elements as the kernel left them
        for b in stray:
            after[b] = (int(after[b]) + 1 + rnd.randrange(3) * alt) % 256  # an alt run may store otherwise
        return after

    first = RunResult(after=left(p.image, False))
    if rnd.random() < 0.15:
        first.error, first.error_type = "ValueError: refused", "ValueError"
    runs = [first]
    second = RunResult(after=left(p.alt_image, True), alt=True, error=first.error, error_type=first.error_type)
    outs = [p.regions[n] for n in contract.outputs if n in p.regions and p.regions[n].nbytes >= 4]
    if outs and rnd.random() < 0.5:  # an output word copied from a guard band: canary, then the fill
        r = rnd.choice(outs)
        at = r.start + 4 * rnd.randrange(r.nbytes // 4)
        if rnd.random() < 0.8:
            src = 4 * int(rnd.choice(np.flatnonzero(p.owner[: p.size - 4 : 4] < 0)))
            first.after[at : at + 4] = p.image[src : src + 4]
            second.after[at : at + 4] = p.alt_image[src : src + 4]
        else:  # the fill's word for an element's address: decodes to no read of the fill
            word = int(rnd.choice(np.flatnonzero(p.owner[: p.size - 4 : 4] >= 0)))
            first.after[at : at + 4] = CANARY_BYTE
            second.after[at : at + 4] = np.array([alt_words(word)], "<i8").astype("<u4").view(np.uint8)
    runs.append(second)
    if rnd.random() < 0.4:  # the image again, and probe runs of one input's bands
        runs.append(RunResult(after=first.after.copy(), error=first.error, error_type=first.error_type))
        inputs = [n for n in p.names if n not in contract.outputs]
        if inputs:
            name = rnd.choice(inputs)
            for where in ("*",) + p.bands(name):
                probe = RunResult(after=second.after.copy(), alt=True, probe=f"{name}:{where}",
                                  error=first.error, error_type=first.error_type)
                runs.append(probe)
    if rnd.random() < 0.1:  # the device faulted on a later run
        runs.append(RunResult(error=f"{CUDA_FAULT}: AcceleratorError: CUDA error: an illegal memory access",
                              error_type=CUDA_FAULT, detail="Traceback ...\nAcceleratorError: illegal memory access"))
    return runs


def _said(findings) -> list[tuple]:
    return [(f.signature, f.message, [dict(c) for c in f.cells]) for f in findings]


@pytest.mark.parametrize("saved", _one_per_op_and_kind())
def test_numpy_and_torch_arenas_give_the_same_findings(saved):
    from kvfuzz import repro_script as rs
    from kvfuzz.repro import repro_case

    prepared = prepare(saved.case)
    rc = repro_case(saved)
    arena = rs.TorchArena(rc)
    assert arena.image.numpy().tobytes() == prepared.plan.image.tobytes()
    assert arena.alt_image.numpy().tobytes() == prepared.plan.alt_image.tobytes()
    kinds = set()
    for seed in range(SEEDS):
        runs = _runs(prepared, random.Random(f"{saved.case.digest()}:{seed}"))
        ours = judge(saved.case, Outcome(runs=runs), prepared=prepared).findings
        torch_runs = [rs.Run(error=r.error, error_type=r.error_type, detail=r.detail, alt=r.alt, probe=r.probe,
                             after=None if r.after is None else torch.from_numpy(r.after.copy())) for r in runs]
        _, theirs = rs.judge_runs(arena, rc.op, rc.kernel_path, rc.status, rc.reasons, torch_runs,
                                  rs.output_cells(rc) if rc.status == "in_contract" else {}, rs.racy_cells(rc))
        assert _said(theirs) == _said(ours), f"seed {seed}"
        kinds |= {f.kind for f in ours}
    assert kinds, "the random runs showed no defect: the comparison says nothing"


def test_a_cuda_fault_in_a_later_run_is_a_crash():
    """kvfuzz's executor stops at a CUDA fault; where it struck a run after the first, the
    first run is judged as ever and the fault is a crash too."""
    saved = next(s for _, s in iter_cases(CORPUS) if isinstance(s, SavedCase) and s.case.op == "num_kv_splits")
    prepared = prepare(saved.case)
    lost = RunResult(error=f"{CUDA_FAULT}: AcceleratorError: CUDA error", error_type=CUDA_FAULT)
    v = judge(saved.case, Outcome(runs=[RunResult(after=prepared.plan.image.copy()), lost]), prepared=prepared)
    assert "num_kv_splits:splits:crash:-:cuda_fault" in v.signatures()
