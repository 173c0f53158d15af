"""Host cost of the campaign's parent-side checking path, per case and stage, plus digests of
every verdict and plan image (to prove a speedup changed nothing).

usage: PYTHONPATH=. python scripts/judge_speed.py [--n 400] [--seeds 0,1,2] [--repeat 3]
                                   [--ops OP,...] [--sizes small|production] [--variant V] [--kept] [--out FILE] [--no-timing | --no-digest]
                                   [--profile STAGE]

No kernel runs. For each op, seed and in_contract_only in (True, False) it draws the engine's
case stream (`batch_engine.case_stream`, device "cpu") and goes through it as the batch engine
does, in batches of 64 (prepare, launches, judge, then the batch is dropped), timing per case the
least over --repeat passes (each pass starts from fresh `Prepared`s, so nothing cached on one
carries over):

  oracle    contract.assess alone (classification, NumPy oracle)
  plan      materialize.plan alone
  prepare   execute.prepare: assess + plan, what the engine runs
  launches  execute.launches: materialize.pack of the batch's plans, their layouts
  judge     quick_verdict-or-judge on a correct run (in contract: the arena a correct target
            leaves, a second identical run and the torch oracle's answer; out of contract: an
            unchanged arena and a refusal), as batch_engine.judge_batch does
  total     prepare + launches + judge

The first pass of a process writes memory the process never touched (page faults): take
--repeat 2 or more, as a long campaign runs warm. The machine's load moves the numbers by tens
of percent: compare two trees by alternating runs, e.g. the tree before a change unpacked with
`git archive COMMIT | tar -x -C /tmp/base`, then `PYTHONPATH=/tmp/base python
scripts/judge_speed.py --no-digest` and `PYTHONPATH=. python scripts/judge_speed.py --no-digest`
in turns (this script runs on both).

The arenas are built here from the oracle's answer and the contract's cells, independently of
judge.py. Digests (one pass): every plan image and its regions, every case's part of its batch's
image, and every verdict (status, reasons, refused, findings' kind/op/path/tensor/where/message/
cells, expected's arrays, alternatives and boundary) on the correct run and on damaged runs: a
required cell changed, a guard byte changed, an input element changed, an untouched cell
written, a may-write cell written, a second run that differs, the torch oracle off by one, an
error raised; wherever quick_verdict answers one of those, it must say what judge says (an
assertion). Compare two outputs' digest lines (`grep digest`) before and after a change.
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import pstats
import sys
import time
from contextlib import contextmanager

import numpy as np

from kvfuzz import materialize
from kvfuzz.engines.batch_engine import case_stream
from kvfuzz.execute import Outcome, RunResult, launches, prepare
from kvfuzz.judge import judge, quick_verdict
from kvfuzz.ops import CONTRACTS

BATCH = 64
STAGES = ("oracle", "plan", "prepare", "launches", "judge")


def correct_after(p) -> tuple[np.ndarray, dict]:
    """(the arena a correct run leaves, the torch oracle's answer = the NumPy one's, int64):
    required cells hold the oracle's values, every other byte its initial value."""
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
        idx = r.spec.element_index()
        req = cells[name].required
        r.typed(after)[idx[req]] = vals[req].astype(r.spec.dtype)
    return after, ref


def damaged(p, after: np.ndarray, ref: dict) -> list[tuple[str, Outcome]]:
    """Runs a wrong kernel leaves, each with its one defect (those the case has room for)."""
    contract = CONTRACTS[p.case.op]
    cells = contract.cells(p.case)
    regs = p.plan.regions
    out = []

    def run(a, second=None, tref=ref, err=None):
        return Outcome([RunResult(after=a, error=err, error_type=err and err.split(":")[0]),
                        RunResult(after=a.copy() if second is None else second)], tref)

    def cell(kind: str):  # (region, storage index) of the first output cell of this class
        for name in contract.outputs:
            if name in regs and regs[name].spec.numel:
                mask = getattr(cells[name], kind)
                if mask.any():
                    return regs[name], regs[name].spec.element_index()[mask].ravel()[0]
        return None

    for kind, label in (("required", "required+1"), ("untouched", "untouched_write"), ("may_write", "may_write")):
        got = cell(kind)
        if got:
            a = after.copy()
            got[0].typed(a)[got[1]] += 1
            out.append((label, run(a)))
    first = regs[p.plan.names[0]]
    a = after.copy()
    a[first.start - 1] ^= 0x40  # the last guard byte before the first tensor
    out.append(("guard_before", run(a)))
    last = regs[p.plan.names[-1]]
    a = after.copy()
    a[last.start + last.nbytes] ^= 0x02  # the first byte past the last tensor's storage
    out.append(("guard_after", run(a)))
    for name in contract.inputs:
        if name in regs and regs[name].spec.numel:
            a = after.copy()
            r = regs[name]
            r.typed(a)[r.spec.element_index().ravel()[-1]] ^= 1
            out.append(("input", run(a)))
            break
    second = after.copy()
    second[second.size // 2] ^= 0x10
    out.append(("rerun", run(after.copy(), second)))
    names = [n for n in ref if ref[n].size]
    if names:
        tref = {k: v.copy() for k, v in ref.items()}
        tref[names[0]].reshape(-1)[0] += 1
        out.append(("torch", run(after.copy(), tref=tref)))
    out.append(("error", run(after.copy(), err="RuntimeError: boom")))
    return out


KEPT = [None]  # --kept: the first run's keep_ok, as the worker's keep check answers on a GPU


def outcome_of(p) -> Outcome:
    """The run the campaign mostly sees: correct (in contract) or refused (out of contract)."""
    if p.status == "in_contract":
        after, ref = correct_after(p)
        return Outcome([RunResult(after=after, keep_ok=KEPT[0]), RunResult(after=after.copy())], ref)
    return Outcome([RunResult(after=p.plan.image.copy(), error="ValueError: refused", error_type="ValueError")])


def verdict_bytes(v) -> bytes:
    parts = [v.status, repr(v.reasons), repr(v.refused), repr(v.not_target)]
    for f in v.findings:
        parts.append(repr((f.kind, f.op, f.path, f.tensor, f.where, f.message, f.cells)))
    e = v.expected
    if e is not None:
        for answer in e.accepted():
            for k in sorted(answer):
                arr = np.asarray(answer[k])
                parts.append(f"{k}:{arr.dtype}:{arr.shape}")
                parts.append(arr.tobytes().hex())
        parts.append(repr(e.boundary))
    return "\x00".join(parts).encode()


def plan_bytes(plan) -> bytes:
    head = repr([(n, r.start, r.guard, r.nbytes) for n, r in plan.regions.items()] + [plan.names]).encode()
    return head + plan.image.tobytes()


def streams(ops, seeds, n, sizes=None, variant=None):
    for op in ops:
        v = variant if variant in (getattr(CONTRACTS[op], "variants", None) or {}) else None
        for seed in seeds:
            for ico in (True, False):
                cases = [c for _, c in case_stream(op, seed, n, "cpu", in_contract_only=ico, sizes=sizes, variant=v)]
                if cases:  # an op without production classes in its pool has none
                    yield op, seed, ico, cases


class Stage:
    """Times a stage into `secs[stage]`; profiles it when it is the one --profile names."""

    def __init__(self, secs: dict[str, float], profile: tuple[str, cProfile.Profile] | None) -> None:
        self.secs, self.profile = secs, profile

    @contextmanager
    def __call__(self, stage: str):
        prof = self.profile[1] if self.profile and self.profile[0] == stage else None
        t = time.perf_counter()
        if prof:
            prof.enable()
        yield
        if prof:
            prof.disable()
        self.secs[stage] += time.perf_counter() - t


def one_pass(cases_by_key, want_digest: bool, profile=None):
    """Per-op stage seconds (totals) and, when asked, the digests. Batch by batch, as the engine
    goes (prepare, launches, run, judge, drop), so memory is reused as it is there."""
    secs: dict[str, dict[str, float]] = {}
    counts: dict[str, int] = {}
    dig = {}
    for (op, seed, ico), cases in cases_by_key.items():
        s = secs.setdefault(op, dict.fromkeys(STAGES, 0.0))
        counts[op] = counts.get(op, 0) + len(cases)
        contract = CONTRACTS[op]
        h_plan, h_verdict, h_pack = hashlib.sha256(), hashlib.sha256(), hashlib.sha256()
        stats = {"in_contract": 0, "quick": 0, "findings": 0}
        for at in range(0, len(cases), BATCH):
            batch = cases[at : at + BATCH]
            stage = Stage(s, profile)
            with stage("oracle"):
                for c in batch:
                    contract.assess(c)
            with stage("plan"):
                for c in batch:
                    materialize.plan(c, contract.outputs)
            with stage("prepare"):
                prepared = [prepare(c, at + i) for i, c in enumerate(batch)]
            with stage("launches"):
                image, batch_ = launches(prepared, [True] * len(prepared), prove_on_device=False)
            outs = [outcome_of(p) for p in prepared]
            with stage("judge"):
                verdicts = [quick_verdict(p, o) or judge(p.case, o, prepared=p) for p, o in zip(prepared, outs)]
            if want_digest:
                for b in batch_:  # each case's part (the slack between them is never judged)
                    h_pack.update(repr((b.base, b.size)).encode() + image[b.base : b.base + b.size].tobytes())
                del image
                digest_batch(prepared, outs, verdicts, h_plan, h_verdict, stats)
        if want_digest:
            dig[(op, seed, ico)] = (h_plan.hexdigest()[:16], h_pack.hexdigest()[:16], h_verdict.hexdigest()[:16],
                                    stats)
    return secs, counts, dig


def digest_batch(prepared, outs, verdicts, h_plan, h_verdict, stats) -> None:
    """Hash each plan and verdict, and judge each case's damaged runs (fast path and full judge
    must agree wherever the fast path answers)."""
    for p, o, v in zip(prepared, outs, verdicts):
        op = p.case.op
        h_plan.update(plan_bytes(p.plan))
        h_verdict.update(b"clean" + verdict_bytes(v))
        stats["findings"] += len(v.findings)
        if p.status != "in_contract":
            # the same arena, run without refusing: must not be called clean either way
            ran = Outcome([RunResult(after=p.plan.image.copy())])
            h_verdict.update(b"ran" + verdict_bytes(quick_verdict(p, ran) or judge(p.case, ran, prepared=p)))
            continue
        stats["in_contract"] += 1
        stats["quick"] += quick_verdict(p, o) is not None
        after, ref = correct_after(p)
        for label, d in damaged(p, after, ref):
            fast = quick_verdict(p, d)
            full = judge(p.case, d, prepared=p)
            if fast is not None:
                assert not full.findings, (op, p.index, label, full.signatures())
                assert verdict_bytes(fast) == verdict_bytes(full), (op, p.index, label)
            stats["findings"] += len(full.findings)
            h_verdict.update(label.encode() + verdict_bytes(full))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=400)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--ops", default=",".join(CONTRACTS))
    ap.add_argument("--out", help="also write the output to this file")
    ap.add_argument("--no-timing", action="store_true", help="digests only (one pass)")
    ap.add_argument("--no-digest", action="store_true", help="timings only")
    ap.add_argument("--sizes", choices=("small", "production"), default=None,
                    help="the pool's small classes, or its production-size ones alone (default: the mix)")
    ap.add_argument("--variant", default=None,
                    help="the contract variant of the ops that have it (the KV-index family's production classes "
                    "are drawn in its variants: --variant default), the others their own cases")
    ap.add_argument("--kept", action="store_true",
                    help="judge as on a GPU, where the worker's keep check (execute.keep_checks) said the "
                    "first run changed only its outputs: quick_verdict compares the outputs alone")
    ap.add_argument("--profile", choices=STAGES, help="print the stage's profile (cProfile, by tottime), one pass")
    args = ap.parse_args(argv)
    ops, seeds = args.ops.split(","), [int(x) for x in args.seeds.split(",")]
    KEPT[0] = True if args.kept else None
    cases_by_key = {(op, seed, ico): cases for op, seed, ico, cases in streams(ops, seeds, args.n, args.sizes, args.variant)}
    if args.profile:
        prof = cProfile.Profile()
        one_pass(cases_by_key, False, (args.profile, prof))
        pstats.Stats(prof).sort_stats("tottime").print_stats(30)
        return 0
    lines = []
    best, counts, dig = None, None, None
    for k in range(1 if args.no_timing else args.repeat):
        secs, counts, d = one_pass(cases_by_key, want_digest=(k == 0 and not args.no_digest))
        dig = dig or d
        best = secs if best is None else {op: {st: min(best[op][st], secs[op][st]) for st in STAGES} for op in secs}
    if not args.no_timing:
        lines.append("ms/case (least of %d passes)  " % args.repeat
                     + "  ".join(f"{st:>8}" for st in STAGES + ("total",)))
        for op in [op for op in ops if op in counts]:
            ms = {st: 1e3 * best[op][st] / counts[op] for st in STAGES}
            ms["total"] = ms["prepare"] + ms["launches"] + ms["judge"]
            lines.append(f"{op:28s} " + "  ".join(f"{ms[st]:8.4f}" for st in STAGES + ("total",)))
    for (op, seed, ico), (hp, hk, hv, stats) in sorted(dig.items()):
        lines.append(f"digest {op} seed={seed} in_contract_only={ico} plan={hp} pack={hk} verdict={hv} {stats}")
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
