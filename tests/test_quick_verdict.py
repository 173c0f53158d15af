"""The judge's fast path (`quick_verdict`) may only ever say "clean" where the full judge finds
nothing, and must say it for clean runs (else it saves no time).

Runs are made without a kernel: the arena a correct target leaves is written from the NumPy
oracle's answer (required cells; may-write cells get arbitrary values), then damaged in the
ways a wrong kernel damages it: one byte anywhere in the case's arena (guards, gaps, inputs,
outputs), a torch-oracle value, a second run that differs, an error."""

from __future__ import annotations

import random

import numpy as np
import pytest

from kvfuzz.engines.batch_engine import case_stream
from kvfuzz.execute import Outcome, RunResult, prepare
from kvfuzz.judge import clean_image, judge, quick_verdict
from kvfuzz.ops import CONTRACTS
from sampling import sampled

pytestmark = pytest.mark.nokernel  # no kernel runs here (conftest: runs where the interpreter is refused)

OPS = sorted(CONTRACTS)


def correct_run(p, rnd: random.Random) -> tuple[np.ndarray, dict]:
    """(the arena bytes of a correct run, the torch oracle's answer as the NumPy one's)."""
    contract = CONTRACTS[p.case.op]
    after = p.plan.image.copy()
    cells = contract.cells(p.case)
    ref = {}
    for name in contract.outputs:
        if name not in p.plan.regions:
            continue
        r = p.plan.regions[name]
        vals = np.asarray(p.expected.values[name]).astype(np.int64)
        ref[name] = vals.copy()
        if r.spec.numel == 0:
            continue
        got = r.elements(after).astype(np.int64)
        c = cells[name]
        got[c.required] = vals[c.required]
        free = ~(c.required | c.untouched)
        got[free] = rnd.choice([0, -1, 7])  # a may-write cell may hold anything
        r.typed(after)[r.spec.element_index()] = got.astype(r.spec.dtype)
    return after, ref


def cases(op: str, n: int):
    for variant in (None, "live_prefix") if op == "decode_metadata" else (None,):
        for i, (_, case) in enumerate(case_stream(op, 7, n, "cuda", in_contract_only=True)):
            if variant:
                case = case.replace(variant=variant)
            p = prepare(case, i)
            if p.status == "in_contract":
                yield p


@pytest.mark.parametrize("op", OPS)
def test_clean_runs_pass_the_fast_path(op):
    rnd = random.Random(op)
    seen = quick = 0
    for p in cases(op, 120):
        after, ref = correct_run(p, rnd)
        outcome = Outcome([RunResult(after=after), RunResult(after=after.copy())], ref)
        assert judge(p.case, outcome, prepared=p).findings == []
        seen += 1
        if quick_verdict(p, outcome) is not None:
            quick += 1
            assert quick_verdict(p, outcome).expected is p.expected
        else:  # only an oracle with rounding alternatives may send a clean case to the full judge
            assert clean_image(p) is None and p.expected.alternatives
    assert seen >= 60 and quick >= seen * 0.9


@pytest.mark.parametrize("op", sampled("fast path damaged", OPS))
def test_the_fast_path_never_passes_a_damaged_run(op):
    rnd = random.Random(f"damage:{op}")
    damaged = 0
    for p in cases(op, 120):
        after, ref = correct_run(p, rnd)
        for _ in range(6):
            a, tref, second, err = after.copy(), {k: v.copy() for k, v in ref.items()}, None, None
            how = rnd.choice(["byte", "byte", "byte", "output", "torch", "rerun", "error"])
            if how == "byte":
                a[rnd.randrange(a.size)] ^= 1 << rnd.randrange(8)
            elif how == "output":  # one element of an output, where it has one
                names = [n for n in ref if p.plan.regions[n].spec.numel]
                if not names:
                    continue
                r = p.plan.regions[rnd.choice(names)]
                idx = r.spec.element_index().ravel()
                with np.errstate(over="ignore"):  # a dtype's largest value wraps: still one element changed
                    r.typed(a)[idx[rnd.randrange(idx.size)]] += 1
            elif how == "torch":
                names = [n for n in tref if tref[n].size]
                if not names:
                    continue
                t = tref[rnd.choice(names)].reshape(-1)
                t[rnd.randrange(t.size)] += 1
            elif how == "rerun":
                second = a.copy()
                second[rnd.randrange(second.size)] ^= 0x10
            else:
                err = "RuntimeError: boom"
            runs = [RunResult(after=a, error=err, error_type=err and "RuntimeError"),
                    RunResult(after=a.copy() if second is None else second)]
            outcome = Outcome(runs, tref)
            full = judge(p.case, outcome, prepared=p).findings
            if full:
                damaged += 1
                assert quick_verdict(p, outcome) is None, (how, [f.signature for f in full])
            elif quick_verdict(p, outcome) is None:  # damage in a may-write cell: nothing to find
                assert clean_image(p) is None or clean_image(p).free or how == "torch"
    assert damaged >= 100


def whole_image(p) -> tuple[np.ndarray, np.ndarray]:
    """(the arena a correct run leaves, the bytes that must hold it), written out byte by byte
    from the definition: the plan's image, required cells set to the oracle's values, the bytes
    of may-write cells free."""
    contract = CONTRACTS[p.case.op]
    want, care = p.plan.image.copy(), np.ones(p.plan.image.size, dtype=bool)
    cells = contract.cells(p.case)
    for name in contract.outputs:
        if name not in p.plan.regions or p.plan.regions[name].spec.numel == 0:
            continue
        r, c = p.plan.regions[name], cells[name]
        idx, item = r.spec.element_index(), r.spec.itemsize
        r.typed(want)[idx[c.required]] = np.asarray(p.expected.values[name])[c.required].astype(r.spec.dtype)
        for i in idx[~(c.required | c.untouched)].tolist():
            care[r.start + i * item : r.start + (i + 1) * item] = False
    return want, care


@pytest.mark.parametrize("op", sampled("fast path every byte", OPS))
def test_the_fast_path_checks_every_byte(op):
    """`CleanImage.holds` says exactly what comparing the whole arena with its clean image says,
    for a byte changed at every edge of every region (guards, storage, elements) and anywhere."""
    rnd = random.Random(f"edges:{op}")
    checked = 0
    for p in list(cases(op, 40))[:12]:
        clean = clean_image(p)
        if clean is None:
            continue
        want, care = whole_image(p)
        after, _ = correct_run(p, rnd)
        assert clean.holds(p.plan.image, after) and np.array_equal(after[care], want[care])
        edges = {0, want.size - 1, *(rnd.randrange(want.size) for _ in range(20))}
        for r in p.plan.regions.values():
            for b in (r.start - r.guard, r.start - 1, r.start, r.start + r.nbytes - 1, r.start + r.nbytes,
                      r.start + r.nbytes + r.guard - 1):
                edges.add(min(max(b, 0), want.size - 1))
        for b in sorted(edges):
            a = after.copy()
            a[b] ^= 0x81
            assert clean.holds(p.plan.image, a) == np.array_equal(a[care], want[care]), (p.index, b)
            checked += 1
    assert checked >= 200
