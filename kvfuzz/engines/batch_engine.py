"""The batched engine: fuzz at the device's pace.

* Generation: the op's generator (`kvfuzz.strategies`) drawn from a seeded RNG, not from
  Hypothesis: a decode case costs about a fifth of a millisecond to draw, not several. The
  same seed gives the same cases.
* Bounded compiles: the campaign visits a fixed pool of compile classes
  (`strategies.coverage.class_pool`: a cover of every dtype, layout kind, alignment, kernel
  path and constexpr value first), each for a stint of `stint` cases, so a target compiles
  each of its kernels at most once per class, and a second run of the same campaign
  compiles nothing new.
* Many cases per synchronisation: each batch is planned and classified once (the NumPy
  oracle runs then), packed into one arena, launched, synchronised once and copied back
  once; the worker computes the torch oracle in the same pass. The next batch is drawn and
  planned while the worker runs this one.
* Out of contract: one stint in five applies one kind of contract violation to all its
  cases (`OpGenerator.stint`), so a violation that changes what a kernel specialises on
  costs one variant.
* Packed launches (`pack`, `--pack K`; by default only where the op's `PackSpec.default` says,
  q8kv8 on a GPU): in-contract cases of one
  class share a launch, k at a time, where the op's record says how (kvfuzz/packing.py); each
  is judged on its own arena, and a finding of a packed case counts only once the case alone
  shows it (else it is a packing artefact).
* Determinism: every `rerun_every`-th case runs a second time in the same batch.
* Cross-check: with a `cross.CrossExecutor`, every `cross_every`-th case (in contract) also
  runs on the second backend from the same image; the judge compares the two.
* A new finding is re-run alone (a fresh arena, its own synchronisation) before it counts;
  one that shows only inside a batch sends every case of that batch through alone, and is
  listed as `batch_only` when none of them shows it. A lost batch (a CUDA fault, a hang, a
  dead worker) is re-run case by case, so the case that lost it becomes a `crash` finding; a
  known hang or device fault showing again skips the rest of its stint, and cases with every
  feature of the cases that crashed so are held back in most stints (`held_back.py`).

Findings are shrunk and confirmed by the campaign's finding pipeline (kvfuzz's reducer, then
a fresh worker).
"""

from __future__ import annotations

import math
import time
from typing import Callable, Iterator

from ..case import Case
from .. import packing
from ..execute import Launch, Outcome, Prepared, launches, outcomes
from ..findings import MEMORY_FAULTS, Finding
from ..held_back import HeldBack
from ..materialize import ImageRing
from ..judge import Verdict
from ..reduce import record_case
from ..strategies import GENERATORS
from ..strategies.coverage import CANDIDATES, is_production
from ..strategies.draw import RandomDraw
from ..strategies.feature_filter import SAMPLES, FeatureFilter, class_hits
from ..worker import Executor
from .base import Engine, EngineOptions, OpRun, run_engine
from .case_cost import CaseCost
from .common import Found, OpStats, fit_target

POOL = 48  # compile classes per op and campaign
HELD_DRAWS = 64  # a batch of n cases draws at most this many times n (cases held back included)
STINT = {"cpu": 64, "cuda": 128}  # cases per visit of a class: many classes early, each compile amortised
BATCH = {"cpu": 16, "cuda": 64}  # cases per synchronisation
# a batch's images together: past this a batch closes (one case at least). Some small-size classes
# plan 15-21 MB a case (a 132K-wide table at a stride of 16 and its guard bands): 64 of them were
# a 1 GB image, written into fresh memory each batch (materialize.ImageRing holds up to its cap)
BATCH_BYTES = 64 << 20


class BatchEngine(Engine):
    """Batches of the seeded stream, pipelined through the worker (the module's notes)."""

    name = "batch"

    def __init__(self, op: str, executor: Executor, options: EngineOptions, *, stint: int | None = None,
                 pool: int = POOL, sizes: str | None = None) -> None:
        super().__init__(op, executor, options)
        # tests and the benchmark set them; a campaign keeps the defaults (sizes: "small" or
        # "production", the pool's classes of that size only: kvfuzz bench)
        self.stint, self.pool, self.sizes = stint, pool, sizes

    def fuzz(self, run: OpRun) -> None:
        op, executor, o = self.op, self.executor, self.options
        stats, found = run.stats, run.found
        gen = GENERATORS[op]
        batch = o.batch or BATCH.get(o.device, 16)
        stint = self.stint or STINT.get(o.device, 64)
        seed, rerun_every, cross_every = o.seed, o.rerun_every, o.cross_every
        pack_k = pack_size(o, executor, op)
        packed_cases: set[int] = set()  # stream indices of cases judged from a packed launch
        tick = time.perf_counter
        t = tick()
        # the same for every shard; the variant's later-release arguments only where it has them
        classes = sized(gen.pool(seed if o.pool_seed is None else o.pool_seed, self.pool, o.variant, o.feature),
                        self.sizes)
        stats.add_stage("generate", tick() - t)
        flt = FeatureCount(o.feature, classes) if o.feature else None
        if flt is not None:
            stats.feature_filter = flt.to_json()
        if not classes:  # no class of the size asked for, or none whose cases have the feature asked for
            if flt is not None:
                stats.unrunnable = flt.none_line(CANDIDATES)
            return
        lacks = getattr(executor, "lacks", {})  # optional tensors the target cannot take
        keys_before = set(executor.launch_keys)
        compiled_before = executor.compiled
        visited: set[int] = set()
        drawn = run.start  # the next case to draw (its index seeds it)
        max_cases = run.max_cases + run.start  # the count is this run's
        skip_until = [0]  # after a known hang or fault, the rest of its stint is skipped (each would repeat it)
        held = HeldBack()  # cases like a known crash, drawn in one stint of ten
        cost = CaseCost(o.device)  # seconds a case of each stint takes: batches sized to the budget left
        stint_of: dict[int, tuple] = {}  # stream index -> its stint's key (class, violation)
        ahead: dict[int, tuple] = {}  # a case drawn but left to open the next batch
        spent_budget = [False]  # the next case would end past the budget: draw no more

        def room() -> float:
            """Seconds of the budget left for a batch drawn now: after the one in flight."""
            left = run.time_left()
            if flight and "result" not in flight:
                expected = cost.predicted([stint_of[p.index] for p in flight["prepared"]])
                left -= max(0.0, expected - (tick() - flight["submitted"]))
            return left

        def keep_ahead(i: int, k_index: int, violation, case: Case, t: float) -> None:
            """Case `i`, drawn, opens the next batch instead."""
            ahead.clear()
            ahead[i] = (k_index, violation, case)
            stats.add_stage("generate", tick() - t)

        def draw_batch(n: int) -> list[Prepared]:
            nonlocal drawn
            out = []
            drawn = max(drawn, skip_until[0])
            first = drawn == run.start  # the op's first batch runs at least one case (OpRun.first_by)
            left, expected, size = room(), 0.0, 0
            spent_budget[0] = False
            tries = HELD_DRAWS * n  # cases held back count too: a batch is drawn in bounded time
            while len(out) < n and drawn < max_cases and tries > 0:
                tries -= 1
                t = tick()
                got = ahead.pop(drawn, None)
                if got is None:
                    k_index, violation, case = _stream_case(gen, classes, seed, drawn, stint, o.shard,
                                                            o.in_contract_only)
                    if o.variant:
                        case = case.replace(variant=o.variant)
                    case = fit_target(case, lacks)
                else:
                    k_index, violation, case = got
                key = (k_index, violation)
                each = cost.of(key)
                # a stint not yet measured opens a batch of its own (its probe, on the CPU); a
                # case that would end past the budget is not drawn (one of unknown cost: once
                # the budget is spent), bar the op's first
                if (each is None and cost.probe and out) or (expected + (each or 0.0) >= left and (out or not first)):
                    spent_budget[0] = not out
                    keep_ahead(drawn, k_index, violation, case, t)
                    break
                # nor one past half the case timeout: the worker's deadline for a batch is the
                # case timeout and a second a case, and a batch past it is lost as a hang
                if out and each is not None and expected + each > o.case_timeout_s / 2:
                    keep_ahead(drawn, k_index, violation, case, t)
                    break
                if flt is not None and not flt.keeps(gen.all_features(case)):  # --feature: a case without it
                    stats.add_stage("generate", tick() - t)
                    drawn += 1
                    continue
                if held.keys and held.holds(gen.all_features(case), drawn // stint):
                    stats.add_stage("generate", tick() - t)
                    drawn += 1
                    continue
                visited.add(k_index)
                stats.add_stage("generate", tick() - t)
                p = self.checker.prepare(case, drawn, stats.add_stage)
                if out and size + p.plan.size > BATCH_BYTES:
                    keep_ahead(drawn, k_index, violation, case, tick())
                    break
                size += p.plan.size
                out.append(p)
                stint_of[drawn] = key
                expected += each or 0.0
                drawn += 1
                if each is None and cost.probe:
                    break
            stats.held_back = held.to_json()
            if flt is not None:
                stats.feature_filter = flt.to_json()
            return out

        ring = ImageRing()  # the batches' images in reused buffers: at most three batches alive at once

        def pack(prepared: list[Prepared]) -> tuple:
            """The batch's image and launches: made when the batch is drawn, while the worker runs
            the one before, so that between two batches the worker waits only for the copy and send."""
            repeat = [bool(rerun_every) and p.index % rerun_every == 0 for p in prepared]
            cross = [bool(cross_every) and p.index % cross_every == 0 for p in prepared]
            if pack_k > 1:
                return packing.launches(prepared, repeat, cross, pack_k, ring=ring)
            return (*launches(prepared, repeat, cross, ring=ring), None)

        def drawn_and_packed() -> tuple[list[Prepared], tuple | None]:
            nxt = draw_batch(batch)
            while not nxt and flt is not None and more():  # --feature dropped a whole batch's draws
                nxt = draw_batch(batch)
            t = tick()
            packed = pack(nxt) if nxt else None
            stats.add_stage("submit", tick() - t)
            return nxt, packed

        def submit(prepared: list[Prepared], packed: tuple | None) -> tuple[list[Launch], object]:
            image, batch_, packs = packed or pack(prepared)  # packed again: what a skipped stint left of it
            executor.submit(image, batch_)
            return batch_, packs

        flight: dict = {}  # the batch the worker runs now: prepared, launches, and its result once collected
        batch_s = [0.0]  # the last batch's seconds from its submission to its result

        def collect() -> None:
            """Collect the batch in flight (before the worker is asked anything else)."""
            if flight and "result" not in flight:
                t = tick()
                flight["result"] = executor.collect()
                stats.add_stage("wait", tick() - t)
                batch_s[0] = tick() - flight["submitted"]
                keys = [stint_of.pop(p.index, None) for p in flight["prepared"]]
                if not flight["result"].lost:  # a lost batch's time is its fault's, not its cases'
                    cost.learn(keys, batch_s[0])

        def recorded(p: Prepared) -> Case:
            """A finding's case with its choices recorded: drawn again, so only findings pay for it."""
            return stream_recorded(p.case, gen, classes, seed, p.index, stint, o.shard, o.in_contract_only,
                                   o.variant, lacks)

        def alone(p: Case | Prepared) -> Verdict:
            collect()
            return self.alone(p)

        def take(p: Prepared, verdict: Verdict, batch_prepared: list[Prepared]) -> None:
            def not_alone(f: Finding, again: Verdict) -> None:
                if f.kind == "nondeterministic" and any(g.kind == "out_of_bounds_read" for g in again.findings):
                    # the batch's two runs could not say it was the fill; the case alone (its probe
                    # runs, judge_flow.rerun_findings) could: the same difference, named after the input read past
                    for g in again.findings:
                        if g.kind == "out_of_bounds_read" and g.signature not in found:
                            run.add(g, recorded(p))
                    return
                # shown only next to other cases: run every case of the batch alone
                for q in batch_prepared:
                    for g in alone(q).findings:
                        if g.signature not in found:
                            run.add(g, recorded(q))
                if f.signature not in found:
                    run.set_aside.add(f.signature)
                    stats.batch_only.append(f.signature)
                    if p.index in packed_cases:  # shown by a packed launch only
                        stats.engine.setdefault("pack_artefacts", []).append(f.signature)

            run.take(verdict, p.case, position=p.index + 1, features=gen.all_features(p.case),
                     alone=lambda _case: alone(p), not_alone=not_alone, keep=lambda: recorded(p))

        def judge_batch(prepared: list[Prepared], batch_: list[Launch], packs, result) -> None:
            """Judge a collected batch; a lost one case by case (a known hang or fault sets `skip_until`)."""
            for name, sec in result.stages.items():
                stats.add_stage(f"worker {name}", sec)
            stats.batches += 1
            counts = stats.engine
            counts["launches"] = counts.get("launches", 0) + sum(b.run for b in batch_)
            if result.device_clean:  # judged clean on the device: none of their bytes came back
                counts["device_clean"] = counts.get("device_clean", 0) + len(result.device_clean)
            if packs is not None:
                counts["packed_cases"] = counts.get("packed_cases", 0) + packs.packed()
                counts["packed_launches"] = counts.get("packed_launches", 0) + len(packs)
                packed_cases.update(prepared[i].index for i in packs.member_of)
            live_counts()
            if not result.lost:
                with run.gathering():  # the batch's new findings, confirmed together
                    for p, outcome, verdict in self.checker.verdicts(prepared, batch_, result, packs):
                        stats.reruns += len(outcome.runs) > 1
                        stats.cross_checked += outcome.cross is not None
                        take(p, verdict, prepared)
                return
            stats.lost_batches += 1
            pinned = False  # whether a case run alone has lost its run (the batch's loss, pinned on it)
            for k, p in enumerate(prepared):  # one by one: the case that loses its run is the finding
                # each fault costs a new worker: past the hard stop, or past the budget once the
                # loss is pinned on a case, leave the rest
                if time.monotonic() >= run.until or (pinned and not run.in_time()):
                    stats.skipped_cases += len(prepared) - k
                    break
                known = set(found)
                collect()
                verdict = self.checker.check(p, repeats=1)
                take(p, verdict, prepared)
                for f in verdict.findings:  # a recorded crash: cases like this one are held back
                    if f.kind == "crash" and f.where in ("timeout", *MEMORY_FAULTS) and f.signature in found:
                        held.learn(f.signature, gen.all_features(p.case))
                pinned = pinned or any(f.kind == "crash" for f in verdict.findings)
                # a known hang or memory fault again: its class keeps doing it, and each costs a new
                # worker (a fault) or the case timeout (a hang): move on to the next stint
                if any(f.where in ("timeout", *MEMORY_FAULTS) and f.signature in known for f in verdict.findings):
                    skip_until[0] = (p.index // stint + 1) * stint
                    stats.skipped_cases += sum(q.index > p.index for q in prepared)
                    break

        def live_counts() -> None:
            """Classes and compiles so far, for a progress display (the same counts as at the end)."""
            stats.classes = len(visited)
            stats.variants = len(executor.launch_keys - keys_before)
            stats.compiled = executor.compiled - compiled_before

        def more() -> bool:
            if max(drawn, skip_until[0]) >= max_cases or spent_budget[0]:
                return False
            if drawn == run.start:  # the first batch: whenever the op is in time (OpRun.first_by included)
                return run.in_time()
            if not run.in_time():
                return False
            if run.until == math.inf:
                return True
            # under a hard stop (--time-limit) a batch drawn now runs after the one in flight (if
            # any): none that the last batch's duration says would end past it, and none beside
            # the op's first batch before that one's duration is known
            if flight and not batch_s[0]:
                return False
            return run.until - time.monotonic() > batch_s[0] * (2 if flight else 1)

        # The worker runs batch k+1 while this process judges batch k and draws batch k+2.
        nxt, packed = drawn_and_packed() if more() else ([], None)  # packed: nxt's image and launches
        while nxt or flight:
            done = None
            if flight:
                collect()
                done = (flight["prepared"], flight["launches"], flight["packs"], flight["result"])
                flight.clear()
            if nxt and not (done and done[3].lost):  # a lost batch is rerun one by one first, nothing in flight
                t = tick()
                batch_, packs = submit(nxt, packed)
                flight.update(prepared=nxt, launches=batch_, packs=packs, submitted=t)
                stats.add_stage("submit", tick() - t)
                nxt, packed = [], None
            if done:
                t = tick()
                judge_batch(*done)
                stats.add_stage("judge", tick() - t)
                if skip_until[0]:  # drawn before a hang was known: drop what lies in the skipped stint
                    kept = [q for q in nxt if q.index >= skip_until[0]]
                    if len(kept) < len(nxt):
                        nxt, packed = kept, None  # packed again at its submission
            if not nxt and more():
                nxt, packed = drawn_and_packed()
        live_counts()
        stats.held_back = held.to_json()


class FeatureCount:
    """`--feature` in one op's stream: the filter, the pool it left and how many of those
    classes gave the feature in every sampled case (class-level: no case of theirs is dropped),
    and the cases drawn and dropped."""

    def __init__(self, feature: FeatureFilter, classes: list) -> None:
        self.feature = feature
        self.classes = len(classes)
        self.whole = sum(class_hits(GENERATORS[k.op], k, feature) == SAMPLES for k in classes)
        self.drawn = self.dropped = 0

    def keeps(self, features: set[str]) -> bool:
        self.drawn += 1
        ok = self.feature.matches(features)
        self.dropped += not ok
        return ok

    def none_line(self, candidates: int) -> str:
        return (f"no case has a feature matching {self.feature.describe()} "
                f"({candidates} candidate classes, {SAMPLES} cases drawn from each)")

    def to_json(self) -> dict:
        return {"patterns": list(self.feature.patterns), "classes": self.classes, "class_level": self.whole,
                "drawn": self.drawn, "dropped": self.dropped}


def sized(classes: list, sizes: str | None) -> list:
    """The pool's classes of one size ("small", "production"; None: all)."""
    if sizes is None:
        return classes
    return [k for k in classes if is_production(k) == (sizes == "production")]


def pack_size(o: EngineOptions, executor, op: str | None = None) -> int:
    """Cases per packed launch: `o.pack` (0 or 1: none), else the op's default on the device
    (`PackSpec.default`: where a GPU bench measured packing to pay; elsewhere none); none beside a
    cross-check or a baseline (they run each case's own launch on a second worker)."""
    if o.cross_every or hasattr(executor, "primary"):  # cross.CrossExecutor, baseline.BaselineExecutor
        return 1
    if o.pack is not None:
        return o.pack
    spec = packing.spec_of(op) if op is not None else None
    return dict(spec.default).get(o.device.split(":")[0], 1) if spec is not None else 1


def fuzz_op(op: str, executor: Executor, *, seed: int, budget_s: float, max_cases: int, device: str = "cpu",
            in_contract_only: bool = False, variant: str | None = None, rerun_every: int = 1,
            batch: int | None = None, pack: int | None = None, stint: int | None = None, pool: int = POOL,
            sizes: str | None = None, cross_every: int = 0,
            pool_seed: int | None = None, shard: tuple[int, int] = (1, 1),
            known: dict[str, Found] | None = None,
            on_case: Callable[[OpStats, Verdict], None] | None = None,
            on_new: Callable[[Found], None] | None = None,
            stats: OpStats | None = None, start: int = 0,
            until: float | None = None, case_timeout_s: float = 60.0) -> tuple[OpStats, dict[str, Found]]:
    """Fuzz one op with the batched engine outside a campaign (the benchmark, tests): from case
    `start` of the stream until the budget or the case count runs out. Returns stats and
    findings keyed by signature. `on_new` sees each new finding once, after it reproduced
    alone (the time that takes extends the budget, never past `until`, a monotonic time).
    Shard (I, N) visits every N-th class of the pool, from the I-th; `seed` then names the
    shard's own case stream and `pool_seed` the campaign's pool."""
    options = EngineOptions(seed=seed, pool_seed=pool_seed, shard=shard, device=device,
                            in_contract_only=in_contract_only, variant=variant, rerun_every=rerun_every,
                            batch=batch, pack=pack, cross_every=cross_every, case_timeout_s=case_timeout_s)
    return run_engine(BatchEngine(op, executor, options, stint=stint, pool=pool, sizes=sizes), budget_s=budget_s,
                      max_cases=max_cases, start=start, until=until, known=known, stats=stats,
                      on_case=on_case, sink=on_new)


def stream_case(gen, classes: list, seed: int, i: int, stint: int, shard: tuple[int, int] = (1, 1),
                in_contract_only: bool = False) -> tuple[int, Case]:
    """(class index, case) of the `i`-th case of a stream: the engine's and the benchmark's."""
    k_index, _, case = _stream_case(gen, classes, seed, i, stint, shard, in_contract_only)
    return k_index, case


def _stream_case(gen, classes: list, seed: int, i: int, stint: int, shard: tuple[int, int],
                 in_contract_only: bool) -> tuple[int, str | None, Case]:
    """(class index, violation, case): `stream_case` with the stint's violation."""
    k_index, violation = _stream_place(gen, classes, seed, i, stint, shard, in_contract_only)
    return k_index, violation, gen.case_in_stint(RandomDraw(f"{seed}:{gen.op}:{i}"), classes[k_index], violation)


def _stream_place(gen, classes: list, seed: int, i: int, stint: int, shard: tuple[int, int],
                  in_contract_only: bool) -> tuple[int, str | None]:
    """(class index, violation) of the `i`-th case of a stream."""
    class_no, violation = gen.stint(f"{seed}:{gen.op}", i // stint, in_contract_only)
    return (class_no * shard[1] + shard[0] - 1) % len(classes), violation  # shards take turns


def stream_recorded(case: Case, gen, classes: list, seed: int, i: int, stint: int, shard: tuple[int, int],
                    in_contract_only: bool, variant: str | None, lacks: dict) -> Case:
    """`case`, the `i`-th of the stream, with the record of its choices (`kvfuzz.reduce`)."""
    k_index, violation = _stream_place(gen, classes, seed, i, stint, shard, in_contract_only)
    return record_case(case, classes[k_index], f"{seed}:{gen.op}:{i}", violation, variant, lacks)


def case_stream(op: str, seed: int, n: int, device: str = "cpu", in_contract_only: bool = False,
                shard: tuple[int, int] = (1, 1), pool_seed: int | None = None, stint: int | None = None,
                pool: int = POOL, variant: str | None = None, sizes: str | None = None) -> Iterator[tuple[int, Case]]:
    """The first `n` (class index, case) pairs `fuzz_op` draws with the same arguments."""
    gen = GENERATORS[op]
    classes = sized(gen.pool(seed if pool_seed is None else pool_seed, pool, variant), sizes)
    if not classes:
        return
    for i in range(n):
        k, case = stream_case(gen, classes, seed, i, stint or STINT.get(device, 64), shard, in_contract_only)
        yield k, case if variant is None else case.replace(variant=variant)


def run_prepared(executor: Executor, prepared: list[Prepared], repeat: bool = False) -> list[Outcome]:
    """Run already prepared cases as one batch (benchmarks and tests); a lost batch is run
    case by case."""
    image, batch_ = launches(prepared, [repeat] * len(prepared), prove_on_device=False)  # the callers judge every byte
    result = executor.run_batch(image, batch_)
    if result.lost:
        return [executor.run(p.case, repeats=2 if repeat else 1, torch_ref=p.status == "in_contract")
                for p in prepared]
    return outcomes(batch_, result)
