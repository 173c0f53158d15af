"""`kvfuzz bench`: how fast kvfuzz checks a target, against how fast the target can be called.

For each op, on one case mix (the batched engine's own stream for the seed, in-contract
cases only, so that bare calls cannot take the process down), in one run:

* checked: the campaign's loop (batched engine in a worker process, every detector on: both
  oracles, guard bands and canaries, the determinism re-run at the device's default) for a
  third of the op's time on an empty Triton cache, then the same cases again in the same
  worker (steady state: every variant in memory, as in a long campaign);
* warm cache: a quarter of those cases in a new worker on the cache the first filled;
* bare: the target called on the same cases' prepared inputs in this process, each once to
  warm up, then each once more, timed, with one synchronisation at the end.

Figures per op: `bare_per_s`, `checked_per_s` (steady state), their `ratio`,
`compiles_per_1000` on the cold and on the warm cache (kernels Triton built: new binaries in
its cache directory; the interpreter builds none), `variants_per_1000` (distinct
specialisation keys launched, by Triton's rules, on any device), and the steady run's
seconds per stage. docs/performance.md says how to read them and keeps measured figures.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from . import device as devmod
from .engines import batch_engine
from .engines.common import OpStats, fit_target
from .execute import prepare
from .materialize import to_device
from .worker import InProcessExecutor, WorkerExecutor

KERNEL_BINARIES = ("*.cubin", "*.hsaco")  # one per kernel variant Triton compiled (NVIDIA, AMD)
MAX_BARE = 5000  # cases held on the device at once for the bare pass


def _binaries(cache: Path) -> int:
    return sum(1 for pattern in KERNEL_BINARIES for _ in cache.rglob(pattern))


def _checked(op: str, target: str, device: str, seed: int, budget_s: float, max_cases: int, isolate: bool,
             passes: int = 1) -> list[tuple[OpStats, int]]:
    """(stats, new variants) of `passes` runs of the campaign loop over the op's case stream in
    one worker: the first compiles (or loads) what it meets, the later ones run warm."""
    executor = WorkerExecutor(target, device) if isolate else InProcessExecutor(target, device)
    out = []
    try:
        for i in range(passes):
            keys = set(executor.launch_keys)
            stats, _ = batch_engine.fuzz_op(op, executor, seed=seed, budget_s=budget_s if i == 0 else 10 * budget_s,
                                            max_cases=max_cases, device=device, in_contract_only=True,
                                            rerun_every=1 if device == "cuda" else 10)
            out.append((stats, len(set(executor.launch_keys) - keys)))
            max_cases = stats.cases  # the later passes: the same cases
        return out
    finally:
        executor.close()


def _bare(op: str, target: str, device: str, seed: int, n: int) -> float:
    """Calls per second of the target on the checked run's first `n` cases, prepared."""
    from .targets import load_target

    t = load_target(target, device)
    cases = [fit_target(case, t.lacks) for _, case in batch_engine.case_stream(op, seed, n, device,
                                                                                 in_contract_only=True)]
    dev = devmod.torch_device(device)
    inputs = [(c, to_device(prepare(c).plan, dev)[1]) for c in cases]

    def one_pass() -> float:
        t0 = time.perf_counter()
        for case, views in inputs:
            try:
                t.invoke(op, views, case.scalars)
            except Exception:
                pass  # a refusal is a call too
        if device == "cuda":
            import torch

            torch.cuda.synchronize()
        return time.perf_counter() - t0

    one_pass()  # compiles (or loads) every variant
    return len(inputs) / max(one_pass(), 1e-9)


def run_bench(ops: list[str], target: str, device: str, budget_s: float, seed: int = 0,
              isolate: bool = True) -> dict:
    from .errors import BadInput
    from .ops import get_contract

    for op in ops:
        get_contract(op)
    if budget_s <= 0:
        raise BadInput(f"--budget must be > 0 seconds, got {budget_s}")
    device = devmod.select(device)
    from .targets import load_target

    missing = load_target(target, device).missing  # ops an older release lacks are skipped
    skipped = {op: missing[op] for op in ops if op in missing}
    ops = [op for op in ops if op not in missing]
    if not ops:
        raise BadInput(f"target {target} has none of the ops asked for: {'; '.join(skipped.values())}")
    own_cache = "TRITON_CACHE_DIR" not in os.environ
    tmp = tempfile.TemporaryDirectory(prefix="kvfuzz-bench-cache-") if own_cache else None
    cache = Path(tmp.name if tmp else os.environ["TRITON_CACHE_DIR"])
    os.environ["TRITON_CACHE_DIR"] = str(cache)  # the workers and this process share it
    out: dict = {"kvfuzz_bench": 1, "target": target, "device": device, "device_name": devmod.describe(device),
                 "seed": seed, "budget_s": budget_s, "cold_cache": own_cache, "ops": {}, "skipped": skipped}
    try:
        per_op = budget_s / len(ops)
        for op in ops:
            before = _binaries(cache)
            (cold, variants), (warm, _) = _checked(op, target, device, seed, per_op / 3, 1_000_000, isolate, 2)
            n = max(cold.cases, 1)
            mid = _binaries(cache)
            # a new process on the cache the first one filled: it must compile nothing
            [(fresh, _)] = _checked(op, target, device, seed, per_op, max(n // 4, 1), isolate)
            after = _binaries(cache)
            bare = _bare(op, target, device, seed, min(n, MAX_BARE))
            checked = warm.cases / max(warm.seconds, 1e-9)
            out["ops"][op] = {
                "cases": n,
                "bare_per_s": round(bare, 1),
                "checked_per_s": round(checked, 1),
                "checked_first_pass_per_s": round(cold.cases / max(cold.seconds, 1e-9), 1),
                "ratio": round(checked / max(bare, 1e-9), 3),
                "compiles_per_1000": {"cold": round(1000 * (mid - before) / n, 2),
                                      "warm": round(1000 * (after - mid) / max(fresh.cases, 1), 2)},
                "variants_per_1000": round(1000 * variants / n, 2),
                "classes": cold.classes,
                "stages": {k: round(v, 3) for k, v in sorted(warm.stages.items())},
            }
    finally:
        if tmp is not None:
            os.environ.pop("TRITON_CACHE_DIR", None)
            tmp.cleanup()
    return out


def render(result: dict) -> str:
    lines = [f"kvfuzz bench: target {result['target']} on {result['device_name']}"
             + (" (cold Triton cache)" if result["cold_cache"] else ""),
             f"{'op':<22}{'cases':>8}{'bare/s':>11}{'checked/s':>11}{'ratio':>8}"
             f"{'compiles/1000 cold':>20}{'warm':>7}{'variants/1000':>15}"]
    for op, r in result["ops"].items():
        c = r["compiles_per_1000"]
        lines.append(f"{op:<22}{r['cases']:>8}{r['bare_per_s']:>11.1f}{r['checked_per_s']:>11.1f}"
                     f"{r['ratio']:>8.3f}{c['cold']:>20.2f}{c['warm']:>7.2f}{r['variants_per_1000']:>15.2f}")
    for op, r in result["ops"].items():
        for who, stages in (("kvfuzz", {k: v for k, v in r["stages"].items() if not k.startswith("worker ")}),
                            ("worker", {k[7:]: v for k, v in r["stages"].items() if k.startswith("worker ")})):
            total = sum(stages.values()) or 1.0
            parts = ", ".join(f"{k} {v:.2f}s ({100 * v / total:.0f}%)" for k, v in stages.items())
            lines.append(f"  {op} {who} (steady state): {parts}")
    return "\n".join(lines)
