"""`kvfuzz bench`: how fast kvfuzz checks a target, against how fast the target can be called.

For each op, on one case mix (the batched engine's own stream for the seed, judged by the
variant the target selects, in-contract cases only, so that bare calls cannot take the process
down; the pool's small classes, and its production-size classes apart), in one run:

* checked: the campaign's loop (batched engine in a worker process, every detector on: both
  oracles, guard bands and canaries, the determinism re-run at the device's default, packed
  launches: packing.py) for an eighth of the size's time on an empty Triton cache, then the
  same cases again in the same worker (steady state: every variant in memory, as in a long
  campaign), in `ROUNDS` rounds, each an unpacked pass (one launch a case) and a packed one;
* bare: the target called on the same cases' prepared inputs in this process: on a GPU each
  once to warm up (compiles), then in each round, right after that round's checked pass, a
  pass over all of them with one synchronisation at its end (on a GPU the fastest of the
  passes that fit in a second, at most 20; under the interpreter one pass takes longer than
  that). Checked and bare alternate so that a busy spell of the host (a shared CPU) weighs on
  both: each figure is its rounds' cases over their seconds, and one pass of each, minutes
  apart, read 0.76 in one run and 0.98 in the next for the same code;
* warm cache: a quarter of those cases in a new worker on the cache the first filled.

With `jobs` > 1 the checked figure is that of `jobs` shards of the campaign running at once on
the device (each its own process and worker, as `kvfuzz fuzz --jobs`): each shard runs its
first pass, all wait for each other, then each runs passes over its own first pass's cases
until a common window closes (every shard busy all the while, as in a campaign, where no
shard waits for another), `ROUNDS` windows in all; `checked_per_s` is all their cases in the
windows over the windows' length.
The bare figure is then one process calling the target on exactly the cases the windows
checked (each shard's own classes; its whole passes and the prefixes the windows' ends cut),
after the windows, the fastest of `ROUNDS` rounds (`_Bare.windows_rate`),
and the ratios are against it; `bare_one_job_per_s` keeps the one-process mix's bare figure and
`checked_one_job_per_s` the single process's steady figure. On the CPU `jobs_speedup` compares like with like: after each window each
shard, in turn and alone on the machine, runs its pass again, timed case by case; the seconds
one job takes for exactly the cases the shards checked in the windows (each shard's whole
passes and the prefix each window's end cut) over the windows' length. (Under the interpreter
one class can cost several times another, so two shards' mixes and one job's differ.) On a
GPU it is None: jobs passes alone would double the bench, and classes cost alike there.

With `jobs` > 1 the shards' windows run twice, unpacked then packed, and the production-size
classes once more as `jobs` shards (packed) against bare calls on those shards' cases.

Figures per op: `bare_per_s`, `checked_per_s` (steady state, packed), their `ratio`,
`checked_unpacked_per_s` and `ratio_unpacked`, `cases_per_launch`, `host_us_per_case` by stage
(unpacked and packed), the same under `production` for the production-size classes,
`compiles_per_1000` on the cold and on the warm cache (kernels Triton built: new binaries in
its cache directory; the interpreter builds none), `variants_per_1000` (distinct
specialisation keys launched, by Triton's rules, on any device), and the steady run's
seconds per stage. docs/performance.md says how to read them and keeps measured figures.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import NamedTuple

from . import device as devmod
from . import environment
from .engines import batch_engine
from .engines.common import OpStats, fit_target
from .execute import prepare
from .packing import DEFAULT_K
from .materialize import to_device
from .worker import TORCH_THREADS, make_executor

KERNEL_BINARIES = ("*.cubin", "*.hsaco")  # one per kernel variant Triton compiled (NVIDIA, AMD)
MAX_BARE = 5000  # cases held on the device at once for the bare pass
MAX_BARE_PRODUCTION = 400  # the same at production sizes (a decode case's arena is about 8 MB)
ROUNDS = 3  # checked and bare passes, alternating, per op
ENGINE_COUNTS = ("launches", "packed_cases", "packed_launches", "device_clean")  # what shards send of their windows


def _binaries(cache: Path) -> int:
    return sum(1 for pattern in KERNEL_BINARIES for _ in cache.rglob(pattern))


def _executor(target: str, device: str, isolate: bool, baseline: str | None):
    """The checked loop's executor: the target's, paired with the baseline's where one is given
    (each case then runs on both, as `kvfuzz fuzz --baseline` runs it)."""
    executor = make_executor(target, device, isolate)
    if not baseline:
        return executor
    from . import baseline as baseline_mod

    try:
        return baseline_mod.pair(executor, None, target, baseline, device, 60.0, isolate=isolate)
    except BaseException:
        executor.close()
        raise


def _checked(op: str, target: str, device: str, seed: int, budget_s: float, max_cases: int, isolate: bool,
             rounds: int = 0, baseline: str | None = None, pack: int | None = None,
             sizes: str | None = None, variant: str | None = None) -> tuple[OpStats, int, list[OpStats], list[OpStats], float]:
    """(first pass's stats, its new variants, the later unpacked passes' stats, the later packed
    passes' stats, bare calls per second) of the campaign loop over the op's case stream (its
    classes of `sizes` only) in one worker: the first pass, packed, compiles (or loads) what it
    meets; then `rounds` times a pass over the same cases unpacked (`--pack 1`), one packed
    (`pack`; None: `packing.DEFAULT_K` for the device), warm, and right after them a bare pass
    over them in this process (0 for the bare figure with no rounds)."""
    pack = DEFAULT_K.get(device, 8) if pack is None else pack  # a campaign's default packs nothing
    executor = _executor(target, device, isolate, baseline)
    try:
        keys = set(executor.launch_keys)
        first = _run(op, executor, device, seed, (1, 1), max_cases, budget_s, pack=pack, sizes=sizes, variant=variant)
        variants = len(set(executor.launch_keys) - keys)
        unpacked, packed, bare_s, bare_n = [], [], 0.0, 0
        bare = _Bare(op, target, device, seed, min(first.cases, MAX_BARE), sizes, variant) if rounds and first.cases else None
        for _ in range(rounds if bare else 0):
            unpacked.append(_run(op, executor, device, seed, (1, 1), first.cases, 10 * budget_s, pack=1, sizes=sizes, variant=variant))
            packed.append(_run(op, executor, device, seed, (1, 1), first.cases, 10 * budget_s, pack=pack, sizes=sizes, variant=variant))
            bare_s += bare.pass_seconds()
            bare_n += len(bare.inputs)
        return first, variants, unpacked, packed, bare_n / max(bare_s, 1e-9)
    finally:
        executor.close()


def _shard_main(args: tuple, env: dict, barrier, results) -> None:
    """One shard of a `--jobs` bench, in its own process: its first pass (compiles or loads what
    it meets), then `ROUNDS` rounds of: from a barrier on, passes over the same cases until the
    round's common window of `budget_s / ROUNDS` closes (so no shard idles while another
    finishes); with `alone` (the CPU), then, one shard at a time while the others wait, a pass
    over the same cases alone, timed case by case (windows and alone passes alternate, so a
    busy spell of the host weighs on both). Sends (shard, cases, seconds, stages) of the windows,
    the seconds one job alone takes for the windows' cases (None without `alone`), its pass's
    cases, each window's (cases, seconds, each pass's cases), and the windows' engine counts
    (`ENGINE_COUNTS`)."""
    import signal

    # a SIGTERM to the bench's process group (a job scheduler, `timeout`) must end this shard
    # through its `finally`: closing the executor unlinks the batches' shared memory
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    os.environ.update(env)
    devmod.select(args[2])
    op, target, device, seed, budget_s, max_cases, isolate, shard, alone, baseline, variant, pack, sizes = args
    try:
        cases, windows, stages, engine = 0, 0.0, Counter(), Counter()
        each: list[tuple[int, float]] = []  # per window: (cases, seconds)
        one_job_s = 0.0 if alone else None
        executor = _executor(target, device, isolate, baseline)
        try:
            # compiles (or loads) what it meets; its cases are the ones each window's passes run
            n = _run(op, executor, device, seed, shard, max_cases, budget_s / ROUNDS, sizes=sizes,
                     variant=variant, pack=pack).cases
            for _ in range(ROUNDS):
                passes = []
                barrier.wait()
                t0 = time.monotonic()
                end = t0 + budget_s / ROUNDS
                while time.monotonic() < end:  # every shard busy for the whole window
                    stats = _run(op, executor, device, seed, shard, n, end - time.monotonic(), sizes=sizes,
                                 variant=variant, pack=pack)
                    passes.append(stats.cases)  # n, or fewer for the pass the window's end cut
                    stages.update(stats.stages)  # summed
                    engine.update({k: v for k, v in stats.engine.items() if k in ENGINE_COUNTS})
                windows += time.monotonic() - t0
                cases += sum(passes)
                each.append((sum(passes), time.monotonic() - t0, passes))
                if alone:
                    for turn in range(1, shard[1] + 1):  # in turn, the machine to itself
                        barrier.wait()
                        if turn == shard[0]:
                            upto = _alone_times(op, executor, device, seed, shard, n, variant, pack, sizes)
                            one_job_s += sum(upto[c - 1] for c in passes if c)  # the window's cases, alone
                    barrier.wait()
        finally:
            executor.close()
        results.put((shard[0], cases, windows, stages, one_job_s, n, each, engine))
    except BaseException as exc:  # the parent reports it; a shard that died must not hang the rest
        barrier.abort()
        results.put((shard[0], repr(exc)))


def _alone_times(op: str, executor, device: str, seed: int, shard: tuple[int, int], n: int,
                 variant: str | None = None, pack: int | None = None, sizes: str = "small") -> list[float]:
    """Seconds from the start of a pass over the shard's first `n` cases to each case judged:
    entry m-1 is what the pass's first m cases take (a pass the window's end cut short is such
    a prefix)."""
    stamps: list[float] = []
    t0 = time.monotonic()
    _run(op, executor, device, seed, shard, n, 1e9, on_case=lambda *_: stamps.append(time.monotonic() - t0),
         sizes=sizes, variant=variant, pack=pack)
    return stamps


def _stream_seed(seed: int, shard: tuple[int, int]) -> int:
    """The case stream's seed of shard `shard` of a campaign of seed `seed`."""
    return seed if shard[1] == 1 else seed * 1_000_003 + shard[0]  # as a campaign's shard


def _run(op: str, executor, device: str, seed: int, shard: tuple[int, int], max_cases: int, budget_s: float,
         on_case=None, pack: int | None = None, sizes: str | None = None, variant: str | None = None):
    """One pass of the campaign loop over shard `shard`'s first `max_cases` cases (`pack`: cases
    per packed launch, None the device's default; `sizes`: the pool's classes of that size only)."""
    stats, _ = batch_engine.fuzz_op(op, executor, seed=_stream_seed(seed, shard), pool_seed=seed, shard=shard, budget_s=budget_s,
                                    max_cases=max_cases, device=device, in_contract_only=True,
                                    rerun_every=1 if device == "cuda" else 10, on_case=on_case, pack=pack,
                                    sizes=sizes, variant=variant)
    return stats


def _checked_jobs(op: str, target: str, device: str, seed: int, budget_s: float, isolate: bool,
                  jobs: int, baseline: str | None = None, variant: str | None = None,
                  pack: int | None = None, sizes: str = "small") -> "Windows":
    """The windows of `jobs` shards run at once over the pool's classes of `sizes`."""
    import multiprocessing as mp

    from .errors import BadInput
    from .jobs import gpu_count, shard_env

    ctx = mp.get_context("spawn")  # a fresh interpreter: CUDA cannot be forked
    barrier, results = ctx.Barrier(jobs), ctx.Queue()
    gpus = gpu_count() if device == "cuda" else 0
    alone = device == "cpu"
    procs = [ctx.Process(target=_shard_main, args=((op, target, device, seed, budget_s, 1_000_000, isolate,
                                                     (i, jobs), alone, baseline, variant, pack, sizes), shard_env(i, device, gpus),
                                                    barrier, results))
             for i in range(1, jobs + 1)]
    try:
        for p in procs:
            p.start()
        got = [results.get() for _ in procs]
        for p in procs:
            p.join()
    finally:  # interrupted (Ctrl-C, SIGTERM): no shard may outlive the bench or keep its segment
        _stop(procs)
    failed = [g for g in got if len(g) == 2]
    if failed:
        raise BadInput(f"bench shard {failed[0][0]}/{jobs} failed: {failed[0][1]}")
    stages: Counter = Counter()
    for g in got:
        stages.update(g[3])  # summed
    # what one job takes to check the very cases the shards checked in the window, each shard's
    # passes timed alone (a class can cost several times another under the interpreter)
    one_job_s = sum(g[4] for g in got) if alone else None
    mix = sorted(((g[0], jobs), g[5]) for g in got)
    rates = [sum(g[6][w][0] for g in got) / max(max(g[6][w][1] for g in got), 1e-9) for w in range(ROUNDS)]
    passes = {(g[0], jobs): [c for w in g[6] for c in w[2]] for g in got}
    engine: Counter = Counter()
    for g in got:
        engine.update(g[7])
    return Windows(sum(g[1] for g in got), max(g[2] for g in got), stages, one_job_s, mix, rates, passes, engine)


class Windows(NamedTuple):
    """What `jobs` shards' windows checked."""
    cases: int  # in all the windows
    seconds: float  # the longest shard's windows
    stages: Counter  # summed over the shards
    one_job_s: float | None  # on the CPU: what one job alone takes for the windows' cases
    mix: list  # each shard's (shard, cases of a pass): the cases its windows repeat
    rates: list[float]  # each window's: all shards' cases in it over its longest shard's seconds
    passes: dict  # each shard's passes' cases: whole passes and the prefixes the windows' ends cut
    engine: Counter  # ENGINE_COUNTS summed

    def per_case(self) -> dict:
        """The windows' own cases per launch, packed share and host microseconds by stage."""
        e, cases = self.engine, max(self.cases, 1)
        return {"cases_per_launch": round(self.cases / max(e["launches"], 1), 2),
                "packed_cases_per_launch": round(e["packed_cases"] / max(e["packed_launches"], 1), 2),
                "packed_share": round(e["packed_cases"] / cases, 3),
                "device_clean_share": round(e["device_clean"] / max(e["launches"], 1), 3),
                "host_us_per_case": {name: round(1e6 * sum(self.stages.get(k, 0.0) for k in keys) / cases, 1)
                                     for name, keys in HOST_STAGES.items()}}


def _widest(*mixes: list) -> list:
    """Each shard once, with the most cases any of `mixes` gives it (its cases are a stream's
    prefix, so the longest holds every shorter one's)."""
    most: dict = {}
    for mix in mixes:
        for shard, m in mix:
            most[shard] = max(most.get(shard, 0), m)
    return sorted(most.items())


def _stop(procs: list, grace_s: float = 20.0) -> None:
    """SIGTERM to every shard still running (each then closes its worker and unlinks its shared
    memory), SIGKILL to those that outlast `grace_s`."""
    for p in procs:
        if p.is_alive():
            p.terminate()
    deadline = time.monotonic() + grace_s
    for p in procs:
        if p.pid is not None:
            p.join(max(deadline - time.monotonic(), 0.0))
            if p.is_alive():
                p.kill()
                p.join()


class _Bare:
    """The target called on the checked run's first `n` cases, prepared in this process; or,
    with `shards` ((shard, n) each), on each shard's first cases, the classes `--jobs` shards
    check (each shard runs its own classes of the pool: a bare figure over one shard's would
    compare the target on other classes than the checked figure's)."""

    def __init__(self, op: str, target: str, device: str, seed: int, n: int, sizes: str | None = None,
                 variant: str | None = None, shards: list[tuple[tuple[int, int], int]] | None = None) -> None:
        from .targets import load_target

        self.op, self.device, self.target = op, device, load_target(target, device)
        streams = [(seed, (1, 1), n)] if shards is None else \
            [(_stream_seed(seed, shard), shard, min(m, max(n // len(shards), 1))) for shard, m in shards]
        cases: list = []
        self.spans: dict[tuple[int, int], tuple[int, int]] = {}  # shard: (first, count) of its cases
        for s, shard, m in streams:
            got = [fit_target(case, self.target.lacks)
                   for _, case in batch_engine.case_stream(op, s, m, device, in_contract_only=True, shard=shard,
                                                           pool_seed=seed, sizes=sizes, variant=variant)]
            self.spans[shard] = (len(cases), len(got))
            cases += got
        dev = devmod.torch_device(device)
        self.inputs = [(c, to_device(prepare(c).plan, dev)[1]) for c in cases]
        if device != "cpu":
            self._one_pass()  # compiles (or loads) every variant; the interpreter compiles nothing

    def _one_pass(self, inputs: list | None = None) -> float:
        """One pass's seconds over `inputs` (None: all), on as many torch threads as a worker's
        (under the interpreter, with a thread per core, bare calls ran 4-7% slower than on one: a
        bare figure the checked one would be flattered against); this process's own setting
        comes back after."""
        import torch

        threads = torch.get_num_threads()
        torch.set_num_threads(TORCH_THREADS)
        try:
            t0 = time.perf_counter()
            for case, views in self.inputs if inputs is None else inputs:
                try:
                    self.target.invoke(self.op, views, case.scalars)
                except Exception:
                    pass  # a refusal is a call too
            if self.device == "cuda":
                torch.cuda.synchronize()
            return time.perf_counter() - t0
        finally:
            torch.set_num_threads(threads)

    def pass_seconds(self) -> float:
        """One pass's seconds: the fastest of the passes that fit in a second (at most 20, at
        least one). A pass over a few thousand cases takes tens of milliseconds on a GPU,
        short enough for the host to skew it; under the interpreter one pass takes seconds."""
        times, t_end = [], time.perf_counter() + 1.0
        while not times or (time.perf_counter() < t_end and len(times) < 20):
            times.append(self._one_pass())
        return min(times)

    def windows_rate(self, passes: dict[tuple[int, int], list[int]]) -> float:
        """Bare calls a second over exactly the cases `--jobs` windows checked (`passes`: each
        shard's passes' cases, whole passes and the prefixes the windows' ends cut): one process's
        seconds for them, each pass's count a timed pass over that many of its shard's first
        cases (on a GPU the fastest of up to 5 within a fifth of a second: such a pass takes
        milliseconds; under the interpreter one), a count past the cases held at their mean.
        Against all of a shard's cases instead, a window that ends early in a slow class's pass
        would be measured on its cheap first cases and the bare calls on every case."""
        cases, seconds = 0, 0.0
        for shard, counts in passes.items():
            first, held = self.spans.get(shard, (0, 0))
            timed: dict[int, float] = {}
            for c in counts:
                if not c or not held:
                    continue
                k = min(c, held)
                if k not in timed:
                    part = self.inputs[first:first + k]
                    times, t_end = [], time.perf_counter() + 0.2
                    while not times or (self.device != "cpu" and time.perf_counter() < t_end and len(times) < 5):
                        times.append(self._one_pass(part))
                    timed[k] = min(times)
                cases += c
                seconds += timed[k] * c / k
        return cases / max(seconds, 1e-9)


def run_bench(ops: list[str], target: str, device: str, budget_s: float, seed: int = 0,
              isolate: bool = True, jobs: int = 1, baseline: str | None = None, pack: int | None = None,
              sizes: str = "all", on_measured=None) -> dict:
    """The bench's figures (module doc). `on_measured(result, op, what)` is called each time one
    op's size is measured, with the result so far (`complete` False), so that a run cut short
    (a scheduler's limit, Ctrl-C) keeps what it measured."""
    from .errors import BadInput
    from .ops import get_contract

    for op in ops:
        get_contract(op)
    if budget_s <= 0:
        raise BadInput(f"--budget must be > 0 seconds, got {budget_s}")
    if jobs < 1:
        raise BadInput(f"--jobs must be >= 1, got {jobs}")
    if pack is not None and pack < 1:
        raise BadInput(f"--pack must be >= 1, got {pack}")
    floor = min_budget(len(ops), jobs)
    if budget_s < floor:  # windows this short check a case or none: a rate of 0 that measured nothing
        raise BadInput(f"--budget {budget_s:g} is too short for {len(ops)} op(s) at --jobs {jobs}: "
                       f"each shard's window would be {budget_s / len(ops) / 3 / ROUNDS:.2f} s; give at least {floor:g}")
    device = devmod.select(device)
    pack = DEFAULT_K.get(device, 8) if pack is None else pack  # the packed passes pack (a campaign does not)
    from .targets import load_target, variant_for

    loaded = load_target(target, device)
    missing = dict(loaded.missing)  # ops an older release lacks are skipped
    if baseline:  # and those the baseline lacks (each case runs on both)
        from .errors import TargetLoadError

        try:
            missing.update({op: f"baseline {baseline}: {why}" for op, why in load_target(baseline, device).missing.items()
                            if op not in missing})
        except TargetLoadError as exc:
            raise BadInput(f"--baseline {baseline}: {exc}") from None
    skipped = {op: missing[op] for op in ops if op in missing}
    ops = [op for op in ops if op not in missing]
    if not ops:
        raise BadInput(f"target {target} has none of the ops asked for: {'; '.join(skipped.values())}")
    own_cache = "TRITON_CACHE_DIR" not in os.environ
    tmp = tempfile.TemporaryDirectory(prefix="kvfuzz-bench-cache-") if own_cache else None
    cache = Path(tmp.name if tmp else os.environ["TRITON_CACHE_DIR"])
    os.environ["TRITON_CACHE_DIR"] = str(cache)  # the workers and this process share it
    out: dict = {"kvfuzz_bench": 1, "target": target, "device": device, "device_name": devmod.describe(device),
                 "seed": seed, "budget_s": budget_s, "cold_cache": own_cache, "jobs": jobs, "baseline": baseline,
                 "pack": pack if pack is not None else DEFAULT_K.get(device, 8), "sizes": sizes, "ops": {},
                 "complete": False,  # until every op and size asked for is measured
                 "skipped": skipped, "notes": environment.notes()}
    def measured(op: str, what: str) -> None:
        if on_measured is not None:
            on_measured(out, op, what)

    try:
        per_op = budget_s / len(ops)
        for op in ops:
            variant = variant_for(op, None, loaded)  # as a campaign on the target judges the op
            production = sizes == "all" and _has_production(op, seed, variant)
            share = per_op * (2 / 3 if production else 1.0)  # the rest: the production classes
            before = _binaries(cache)
            cold, variants, unpacked, packed, bare = _checked(op, target, device, seed, share / COLD_SHARE, 1_000_000,
                                                              isolate, ROUNDS, baseline, pack, "small", variant)
            n = max(cold.cases, 1)
            mid = _binaries(cache)
            # a new process on the cache the first one filled: it must compile nothing
            fresh = _checked(op, target, device, seed, share, max(n // 4, 1), isolate, baseline=baseline, pack=pack,
                             sizes="small", variant=variant)[0]
            after = _binaries(cache)
            figures = _figures(unpacked, packed, bare)
            checked = figures["checked_per_s"]
            # a figure over no case is no figure: it is void and said why, never a rate of 0
            empty = _empty_passes(cold, unpacked, packed, share / COLD_SHARE)
            stages: Counter = Counter()
            for w in packed:
                stages.update(w.stages)  # summed over the rounds
            one_job = checked
            speedup = None
            if jobs > 1:  # the same op again, as `jobs` shards at once on the cache now filled, unpacked then packed
                wu = _checked_jobs(op, target, device, seed, per_op / 3, isolate, jobs, baseline, variant, 1)
                wj = _checked_jobs(op, target, device, seed, per_op / 3, isolate, jobs, baseline, variant, pack)
                cases_u, seconds_u, mix_u, rates_u, passes_u = wu.cases, wu.seconds, wu.mix, wu.rates, wu.passes
                cases_j, seconds_j, stages, one_job_s = wj.cases, wj.seconds, wj.stages, wj.one_job_s
                mix, rates_j, passes_j = wj.mix, wj.rates, wj.passes
                # per launch, packing, device proofs and host work: the windows' own, the one
                # process's kept apart (its mix is one stint, not the shards')
                figures["one_job"] = {k: figures[k] for k in ("cases_per_launch", "packed_cases_per_launch",
                                                              "packed_share", "device_clean_share", "host_us_per_case")}
                u, j = wu.per_case(), wj.per_case()
                figures.update({k: j[k] for k in ("cases_per_launch", "packed_cases_per_launch", "packed_share")})
                figures["device_clean_share"] = {"unpacked": u["device_clean_share"], "packed": j["device_clean_share"]}
                figures["host_us_per_case"] = {"unpacked": u["host_us_per_case"], "packed": j["host_us_per_case"]}
                empty += [f"shard {shard[0]}/{jobs}'s first pass checked no case" for shard, m in mix if not m]
                empty += [f"{mode} window {w + 1} checked no case"
                          for mode, rates in (("unpacked", rates_u), ("packed", rates_j)) for w, r in enumerate(rates) if not r]
                # each window's rate: how far one run's figure can move by the host's noise alone
                figures["window_rates"] = {"unpacked": [round(r, 1) for r in rates_u],
                                           "packed": [round(r, 1) for r in rates_j]}
                # the bare calls on the very cases each set of windows checked (the shards' own
                # classes, each pass's count of its shard's first cases)
                figures["bare_one_job_per_s"] = round(bare, 1)
                shards_bare = _Bare(op, target, device, seed, MAX_BARE, "small", variant, shards=_widest(mix_u, mix))
                rounds_j, rounds_u = [], []
                for _ in range(ROUNDS):
                    rounds_j.append(shards_bare.windows_rate(passes_j))
                    rounds_u.append(shards_bare.windows_rate(passes_u))
                bare, bare_u = max(rounds_j), max(rounds_u)
                figures["bare_rates"] = [round(r, 1) for r in rounds_j]
                figures["bare_per_s"] = round(bare, 1)
                figures["bare_unpacked_per_s"] = round(bare_u, 1)
                figures["bare_cases"] = len(shards_bare.inputs)
                del shards_bare
                figures["checked_unpacked_per_s"] = round(cases_u / max(seconds_u, 1e-9), 1)
                figures["ratio_unpacked"] = round(cases_u / max(seconds_u, 1e-9) / max(bare_u, 1e-9), 3)
                checked = cases_j / max(seconds_j, 1e-9)
                figures["packed_vs_unpacked"] = round(checked / max(figures["checked_unpacked_per_s"], 1e-9), 3)
                speedup = None if one_job_s is None else one_job_s / max(seconds_j, 1e-9)
            entry = {
                "cases": n,
                **figures,
                "checked_per_s": round(checked, 1),
                "checked_first_pass_per_s": round(cold.cases / max(cold.seconds, 1e-9), 1),
                "checked_one_job_per_s": round(one_job, 1),
                "jobs_speedup": None if speedup is None else round(speedup, 3),
                "ratio": round(checked / max(bare, 1e-9), 3),
                "compiles_per_1000": {"cold": round(1000 * (mid - before) / n, 2),
                                      "warm": round(1000 * (after - mid) / max(fresh.cases, 1), 2)},
                "variants": variants,  # the count itself: per 1,000 it rounds to 0.00 on a fast GPU
                "variants_per_1000": round(1000 * variants / n, 2),
                "classes": cold.classes,
                "stages": {k: round(v, 3) for k, v in sorted(stages.items())},
            }
            if not fresh.cases:
                entry["compiles_per_1000"]["warm"] = None
                empty.append("the warm-cache pass checked no case")
            _void(entry, empty)
            out["ops"][op] = entry
            measured(op, "small sizes")
            if production:  # the production-size classes alone: one process, unpacked, packed, bare
                big, _, big_unpacked, big_packed, big_bare = _checked(op, target, device, seed,
                                                                      per_op / 3 / COLD_SHARE, 1_000_000, isolate,
                                                                      ROUNDS, baseline, pack, "production", variant)
                entry["production"] = {"cases": big.cases, **_figures(big_unpacked, big_packed, big_bare)}
                _void(entry["production"], _empty_passes(big, big_unpacked, big_packed, per_op / 3 / COLD_SHARE))
                measured(op, "production sizes")
                if jobs > 1:  # and as `jobs` shards at once, packed, against bare calls on their cases
                    entry["production"]["jobs"] = _production_jobs(op, target, device, seed, per_op / 3, isolate, jobs,
                                                                   baseline, variant, pack)
                    measured(op, f"production sizes as {jobs} shards")
        out["complete"] = True
    finally:
        if tmp is not None:
            os.environ.pop("TRITON_CACHE_DIR", None)
            tmp.cleanup()
    return out


COLD_SHARE = 8  # the first (compiling) pass takes this share of a size's time; each later pass about as long
# host work per case, by stage: the engine's and its worker's stages (`OpStats.stages`) each stage sums
HOST_STAGES = {"generate": ("generate",), "materialize": ("materialize", "submit"),
               "launch": ("worker launch", "worker views", "worker transfer", "worker synchronise"),
               "oracle": ("oracle (numpy)", "worker torch_oracle"), "judge": ("judge",)}


# the figures a pass that checked nothing leaves without meaning
RATES = ("bare_per_s", "bare_unpacked_per_s", "checked_unpacked_per_s", "checked_per_s", "ratio_unpacked", "ratio", "packed_vs_unpacked",
         "checked_first_pass_per_s", "checked_one_job_per_s", "jobs_speedup", "cases_per_launch",
         "packed_cases_per_launch", "packed_share", "bare_one_job_per_s")
MIN_WINDOW_S = 1.0  # a `--jobs` window shorter than this may end before a shard's first case


def min_budget(n_ops: int, jobs: int) -> float:
    """The shortest `--budget` whose `--jobs` windows last MIN_WINDOW_S (0 for one job: its
    passes run over the first pass's cases, however long they take)."""
    return n_ops * 3 * ROUNDS * MIN_WINDOW_S if jobs > 1 else 0.0


def _empty_passes(first: OpStats, unpacked: list[OpStats], packed: list[OpStats], first_s: float) -> list[str]:
    """Why the figures of one size are void: its first pass checked no case (so no later pass
    or bare call ran), or a later pass none."""
    if not first.cases:
        return [f"the first pass checked no case in {first_s:.2f} s"]
    return [f"{mode} pass {i + 1} checked no case" for mode, passes in (("unpacked", unpacked), ("packed", packed))
            for i, w in enumerate(passes) if not w.cases]


def _production_jobs(op: str, target: str, device: str, seed: int, budget_s: float, isolate: bool, jobs: int,
                     baseline: str | None, variant: str | None, pack: int) -> dict:
    """The production-size classes checked by `jobs` shards at once (packed windows, as the small
    classes' `checked_per_s`), against the target called bare in one process on the cases the
    windows checked (each shard's first cases, at most MAX_BARE_PRODUCTION of them in all: each
    holds its tables on the device)."""
    w = _checked_jobs(op, target, device, seed, budget_s, isolate, jobs, baseline, variant, pack, sizes="production")
    cases, seconds, mix, rates, passes = w.cases, w.seconds, w.mix, w.rates, w.passes
    empty = [f"shard {shard[0]}/{jobs}'s first pass checked no case" for shard, m in mix if not m]
    empty += [f"window {w + 1} checked no case" for w, r in enumerate(rates) if not r]
    out: dict = {"cases": cases, "bare_per_s": None, "checked_per_s": None, "ratio": None}
    if not empty:
        bare = _Bare(op, target, device, seed, MAX_BARE_PRODUCTION, "production", variant, shards=mix)
        out["bare_cases"] = len(bare.inputs)
        out["bare_rates"] = [round(bare.windows_rate(passes), 1) for _ in range(ROUNDS)]
        del bare
        checked = cases / max(seconds, 1e-9)
        out["bare_per_s"] = max(out["bare_rates"])
        out["checked_per_s"] = round(checked, 1)
        out["ratio"] = round(checked / max(out["bare_per_s"], 1e-9), 3)
        out["window_rates"] = {"packed": [round(r, 1) for r in rates]}
        per = w.per_case()
        out.update({k: per[k] for k in ("cases_per_launch", "packed_cases_per_launch", "packed_share")})
        out["device_clean_share"] = {"packed": per["device_clean_share"]}
        out["host_us_per_case"] = {"packed": per["host_us_per_case"]}
    _void(out, empty)
    return out


def _void(entry: dict, reasons: list[str]) -> None:
    """Marks the figures of `entry` void (None), with `reasons`, where any pass checked nothing."""
    if reasons:
        entry["invalid"] = reasons
        for key in RATES:
            if key in entry:
                entry[key] = None
        for key in ("window_rates", "bare_rates"):
            entry.pop(key, None)


def invalid(result: dict) -> list[str]:
    """Each op and size whose figures are void, with why, one string each."""
    return [f"{op}{size}: {'; '.join(fig['invalid'])}" for op, r in result["ops"].items()
            for size, fig in (("", r), (" production", r.get("production") or {}),
                              (" production shards", (r.get("production") or {}).get("jobs") or {}))
            if fig.get("invalid")]


def _has_production(op: str, seed: int, variant: str | None) -> bool:
    """Whether the op's pool for `seed` holds production-size classes (strategies/coverage.py)."""
    from .strategies import GENERATORS

    return bool(batch_engine.sized(GENERATORS[op].pool(seed, batch_engine.POOL, variant), "production"))


def _figures(unpacked: list[OpStats], packed: list[OpStats], bare: float) -> dict:
    """Checked cases per second unpacked and packed (each pass's cases over its seconds, summed over
    the rounds), against the bare calls; cases per launch; host microseconds per case by stage."""
    def rate(passes: list[OpStats]) -> float:
        return sum(w.cases for w in passes) / max(sum(w.seconds for w in passes), 1e-9)

    def engine(passes: list[OpStats], key: str) -> int:
        return sum(w.engine.get(key, 0) for w in passes)

    def host_us(passes: list[OpStats]) -> dict[str, float]:
        cases = max(sum(w.cases for w in passes), 1)
        return {name: round(1e6 * sum(w.stages.get(k, 0.0) for w in passes for k in keys) / cases, 1)
                for name, keys in HOST_STAGES.items()}

    up, pk = rate(unpacked), rate(packed)
    return {
        "bare_per_s": round(bare, 1),
        "checked_unpacked_per_s": round(up, 1),
        "checked_per_s": round(pk, 1),
        "ratio_unpacked": round(up / max(bare, 1e-9), 3),
        "ratio": round(pk / max(bare, 1e-9), 3),
        "packed_vs_unpacked": round(pk / max(up, 1e-9), 3),
        "cases_per_launch": round(sum(w.cases for w in packed) / max(engine(packed, "launches"), 1), 2),
        "packed_cases_per_launch": round(engine(packed, "packed_cases") / max(engine(packed, "packed_launches"), 1), 2),
        "packed_share": round(engine(packed, "packed_cases") / max(sum(w.cases for w in packed), 1), 3),
        # the share of launches the worker proved clean on the device (execute.device_clean_launches): none of
        # their bytes came back; 0 where the checks do not run on the device (the CPU)
        "device_clean_share": {name: round(engine(ps, "device_clean") / max(engine(ps, "launches"), 1), 3)
                          for name, ps in (("unpacked", unpacked), ("packed", packed))},
        "host_us_per_case": {"unpacked": host_us(unpacked), "packed": host_us(packed)},
    }


def _num(x: float | None, width: int, fmt: str) -> str:
    """`x` right-aligned in `width`, or a dash where the figure is void."""
    return f"{x:>{width}{fmt}}" if x is not None else f"{'-':>{width}}"


def _speedup(x: float | None) -> str:
    return f"{x:>11.2f}x" if x is not None else f"{'-':>12}"


def render(result: dict) -> str:
    lines = [f"kvfuzz bench: target {result['target']} on {result['device_name']}"
             + (" (cold Triton cache)" if result["cold_cache"] else "")
             + (f"; checked: {result['jobs']} shards at once" if result.get("jobs", 1) > 1 else "")
             + (f"; each case also on the baseline {result['baseline']}" if result.get("baseline") else "")
             + f"; packed: up to {result.get('pack', '-')} cases a launch"
             + ("" if result.get("complete", True) else "; cut short: the ops and sizes measured so far"),
             f"{'op':<30}{'cases':>7}{'bare/s':>10}{'unpacked/s':>12}{'checked/s':>11}{'per launch':>12}{'ratio':>8}"
             f"{'compiles/1000 cold':>20}{'warm':>7}{'variants/1000':>15}"]
    jobs = result.get("jobs", 1)
    if jobs > 1:
        lines[1] += f"{'vs one job':>12}"
    for op, r in result["ops"].items():
        c = r["compiles_per_1000"]
        lines.append(f"{op:<30}{r['cases']:>7}{_num(r['bare_per_s'], 10, '.1f')}{_num(r.get('checked_unpacked_per_s', 0), 12, '.1f')}"
                     f"{_num(r['checked_per_s'], 11, '.1f')}{_num(r.get('cases_per_launch', 1), 12, '.2f')}"
                     f"{_num(r['ratio'], 8, '.3f')}{_num(c['cold'], 20, '.2f')}{_num(c['warm'], 7, '.2f')}"
                     f"{_num(r['variants_per_1000'], 15, '.2f')}"
                     + (_speedup(r.get("jobs_speedup")) if jobs > 1 else ""))
        p = r.get("production")
        if p:
            lines.append(f"{'  production sizes':<30}{p['cases']:>7}{_num(p['bare_per_s'], 10, '.1f')}"
                         f"{_num(p['checked_unpacked_per_s'], 12, '.1f')}{_num(p['checked_per_s'], 11, '.1f')}"
                         f"{_num(p['cases_per_launch'], 12, '.2f')}{_num(p['ratio'], 8, '.3f')}")
            pj = p.get("jobs")
            if pj:  # the same classes as `jobs` shards at once, packed
                lines.append(f"{'  production, ' + str(jobs) + ' shards':<30}{pj['cases']:>7}"
                             f"{_num(pj.get('bare_per_s'), 10, '.1f')}{'':>12}{_num(pj.get('checked_per_s'), 11, '.1f')}"
                             f"{_num(pj.get('cases_per_launch'), 12, '.2f')}{_num(pj.get('ratio'), 8, '.3f')}")
    lines += [f"  VOID {why}: the budget was too short to measure it" for why in invalid(result)]
    for op, r in result["ops"].items():
        for size, fig in (("", r), (" production", r.get("production") or {}),
                          (f" production, {jobs} shards", (r.get("production") or {}).get("jobs") or {})):
            for mode, us in (fig.get("host_us_per_case") or {}).items():
                parts = ", ".join(f"{k} {v:.0f}" for k, v in us.items())
                lines.append(f"  {op}{size} host us/case {mode}: {parts}")
            if size == "" and fig.get("window_rates"):  # how far the host's noise moves one run's figures
                w, b = fig["window_rates"], fig.get("bare_rates") or [0.0]
                lines.append(f"  {op} spread: checked/s by window "
                             + ", ".join(f"{mode} {min(v):.1f}-{max(v):.1f}" for mode, v in w.items())
                             + f"; bare/s by pass {min(b):.1f}-{max(b):.1f}")
            proved = fig.get("device_clean_share") or {}
            if any(proved.values()):
                lines.append(f"  {op}{size} launches proved clean on the device: "
                             + ", ".join(f"{mode} {v:.3f}" for mode, v in proved.items()))
        for who, stages in (("kvfuzz", {k: v for k, v in r["stages"].items() if not k.startswith("worker ")}),
                            ("worker", {k[7:]: v for k, v in r["stages"].items() if k.startswith("worker ")})):
            total = sum(stages.values()) or 1.0
            parts = ", ".join(f"{k} {v:.2f}s ({100 * v / total:.0f}%)" for k, v in stages.items())
            lines.append(f"  {op} {who} (steady state): {parts}")
    return "\n".join(lines)
