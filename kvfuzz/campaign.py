"""A fuzz campaign: ops x one target, each finding minimized, saved and reported.

Library code behind `kvfuzz fuzz` (the CLI only parses and prints). The target runs in a
worker subprocess by default, so a kernel that crashes its process costs one case.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from . import device as devmod
from .case import Case
from .corpus import DirectoryCorpus, SavedCase, SaveResult, environment_versions
from .engines.hypothesis_engine import Found, OpStats, fuzz_op
from .errors import BadInput
from .execute import one_line
from .judge import Verdict, judge
from .minimize import minimize
from .ops import CONTRACTS, get_contract
from .worker import Executor, make_executor


# a progress line each second on a terminal, every 10 s into a log (nightly jobs)
PROGRESS_EVERY_S = 1.0 if sys.stderr.isatty() else 10.0


@dataclass
class CampaignConfig:
    ops: list[str]
    target: str = "builtin"
    device: str = "auto"
    budget_s: float = 60.0  # generation time, split evenly over the ops
    max_cases: int = 1_000_000  # per op
    seed: int = 0
    corpus: Path | None = None
    report: Path | None = None
    in_contract_only: bool = False
    isolate: bool = True
    minimize_budget_s: float = 30.0  # per new finding (Hypothesis' shrink, then kvfuzz's reducer)
    variant: str | None = None
    case_timeout_s: float = 120.0

    def validate(self) -> None:
        for op in self.ops:
            get_contract(op)
        if self.budget_s <= 0:
            raise BadInput(f"--budget must be > 0 seconds, got {self.budget_s}")
        if self.max_cases < 1:
            raise BadInput(f"--max-cases must be >= 1, got {self.max_cases}")
        if self.minimize_budget_s < 0:
            raise BadInput("--minimize-budget must be >= 0")
        if self.variant is not None:
            for op in self.ops:
                if self.variant not in CONTRACTS[op].variants:
                    raise BadInput(f"op {op} has no contract variant {self.variant!r}; "
                                   f"it has {', '.join(CONTRACTS[op].variants)}")


@dataclass
class Saved:
    found: Found
    case: Case
    path: Path | None
    minimize_log: list[str] = field(default_factory=list)
    minimize_seconds: float = 0.0  # kvfuzz's reducer (Hypothesis' shrink ran during fuzzing)
    save_error: str | None = None  # the corpus refused it (say, its slot holds an unreadable case)


@dataclass
class CampaignResult:
    config: CampaignConfig
    device: str
    target_description: str
    stats: list[OpStats]
    saved: list[Saved]
    seconds: float
    device_name: str  # the GPU's name, or "cpu (triton interpreter)"
    interrupted: bool = False  # stopped by SIGINT/SIGTERM: partial, findings unminimized

    @property
    def cases(self) -> int:
        return sum(s.cases for s in self.stats)

    def report(self) -> dict:
        return {
            "kvfuzz_report": 1,
            "target": self.config.target,
            "target_description": self.target_description,
            "device": self.device,
            "device_name": self.device_name,
            "seed": self.config.seed,
            "seconds": round(self.seconds, 2),
            "interrupted": self.interrupted,
            "cases": self.cases,
            "ops": {s.op: {"cases": s.cases, "shrink_runs": s.shrink_runs, "seconds": round(s.seconds, 2),
                           "by_status": s.by_status, "skipped": s.skipped} for s in self.stats},
            "findings": [{
                "op": x.found.finding.op,
                "kind": x.found.finding.kind,
                "signature": x.found.finding.signature,
                "message": x.found.finding.message,
                "case": str(x.path) if x.path else None,
                "save_error": x.save_error,
                "shrunk_by": x.found.shrunk_by,
                "minimize_log": x.minimize_log,
                "minimize_seconds": round(x.minimize_seconds, 2),
                "size": list(x.case.size_key()),
            } for x in self.saved],
        }


def still_fails_fn(executor: Executor, signature: str) -> Callable[[Case], bool]:
    def still_fails(candidate: Case) -> bool:
        try:
            return signature in judge(candidate, executor.run(candidate)).signatures()
        except Exception:
            return False
    return still_fails


def run_campaign(cfg: CampaignConfig, progress: Callable[[str], None] | None = None) -> CampaignResult:
    cfg.validate()
    t0 = time.monotonic()
    device = devmod.select(cfg.device)
    executor = make_executor(cfg.target, device, isolate=cfg.isolate, timeout_s=cfg.case_timeout_s)
    store = DirectoryCorpus(cfg.corpus) if cfg.corpus else None
    versions = environment_versions(devmod.gpu_name(device))
    stats: list[OpStats] = []
    saved: list[Saved] = []
    found: dict[str, Found] = {}  # the current op's findings, not yet saved minimized
    first_saved: dict[str, str] = {}  # signature -> store status when first seen ("new", "kept")
    current: OpStats | None = None  # the current op's stats as they grow (kept if interrupted)
    interrupted = False
    try:
        per_op = cfg.budget_s / len(cfg.ops)
        for op in cfg.ops:
            if op in executor.missing:
                s = OpStats(op, skipped=executor.missing[op])
                stats.append(s)
                if progress:
                    progress(f"[{op}] skipped: {s.skipped}")
                continue
            found, current, t_op = {}, OpStats(op), time.monotonic()
            last = [0.0]

            def on_case(s: OpStats, v: Verdict, op=op, found=found) -> None:
                now = time.monotonic()
                if progress and now - last[0] >= PROGRESS_EVERY_S:
                    last[0] = now
                    rate = s.cases / max(now - t_op, 1e-9)
                    progress(f"[{op}] {s.cases} cases, {len(found)} findings, {rate:.0f} cases/s")

            def on_new(f: Found) -> None:
                # on disk at once: a SIGKILL (OOM killer, a scheduler's hard stop) during the
                # long shrink that follows must not lose the finding
                if store is not None:
                    res, error = _try_save(store, _saved_case(f, f.case, cfg, device, versions))
                    if res is not None:
                        first_saved[f.finding.signature] = res.status
                    elif progress:  # _finish saves again, and reports it
                        progress(f"  {f.finding.signature}: not saved yet: {error}")

            s, found = fuzz_op(op, executor, seed=cfg.seed, budget_s=per_op, max_cases=cfg.max_cases,
                               in_contract_only=cfg.in_contract_only, variant=cfg.variant,
                               shrink_budget_s=cfg.minimize_budget_s / 2, known=found, on_case=on_case,
                               on_new=on_new, stats=current)
            current = None
            stats.append(s)
            if progress:
                progress(f"[{op}] done: {s.cases} cases in {s.seconds:.1f} s, {len(found)} findings")
            for sig in list(found):
                saved.append(_finish(found[sig], executor, cfg, device, versions, store, progress,
                                     first_saved.get(sig)))
                del found[sig]
    except KeyboardInterrupt:
        # SIGINT, or SIGTERM from a job scheduler (the CLI maps it here): keep what was found,
        # unminimized, and still write the report
        interrupted = True
        if current is not None:
            current.seconds = time.monotonic() - t_op
            stats.append(current)
        if progress:
            progress(f"interrupted: saving {len(found)} unsaved finding(s) without minimizing")
        for f in found.values():
            saved.append(_finish(f, executor, cfg, device, versions, store, progress,
                                 first_saved.get(f.finding.signature), interrupted=True))
    finally:
        executor.close()
    result = CampaignResult(cfg, device, executor.description, stats, saved, time.monotonic() - t0,
                            versions["gpu"], interrupted)
    if cfg.report:
        write_json_atomic(cfg.report, result.report())
    return result


def _try_save(store: DirectoryCorpus, sc: SavedCase) -> tuple[SaveResult | None, str | None]:
    """`store.save`, or why it refused (say, the slot holds an unreadable case): one refused
    save must not cost the run its other findings."""
    try:
        return store.save(sc), None
    except (OSError, ValueError, BadInput) as exc:
        return None, one_line(exc)


def _saved_case(f: Found, case: Case, cfg: CampaignConfig, device: str, versions: dict,
                log: tuple[str, ...] = ()) -> SavedCase:
    external = cfg.target != "builtin"
    return SavedCase(
        case=case.with_meta(seed=cfg.seed, first_seen=f.first.digest()), finding=f.finding, target=cfg.target,
        device=device, versions=versions, origin="hypothesis", expected="xfail" if external else "pass",
        reason=f"known defect of {cfg.target}: {f.finding.message}" if external else None,
        minimized=bool(log or f.shrunk_by), minimize_log=log)


def _finish(f: Found, executor: Executor, cfg: CampaignConfig, device: str, versions: dict,
            store: DirectoryCorpus | None, progress, first_saved: str | None = None,
            interrupted: bool = False) -> Saved:
    """kvfuzz's reducer after Hypothesis' shrink, then save the case over the one saved when
    the finding was first seen. Interrupted: save the case as it stands, without running
    anything (the finding was judged on this very case)."""
    sig = f.finding.signature
    case, log, seconds = f.case, [], 0.0
    budget = cfg.minimize_budget_s / 2 if f.shrunk_by else cfg.minimize_budget_s
    if budget > 0 and not interrupted:
        m = minimize(case, still_fails_fn(executor, sig), budget_s=budget)
        case, log, seconds = m.case, list(m.log), m.seconds
    if not interrupted:
        verdict = judge(case, executor.run(case))
        f.finding = next((x for x in verdict.findings if x.signature == sig), f.finding)
    finding = f.finding
    path, error = None, None
    if store is not None:
        res, error = _try_save(store, _saved_case(f, case, cfg, device, versions, tuple(log)))
        if res is None:
            if progress:
                progress(f"  {finding.kind}: {sig}: NOT SAVED: {error}")
        else:
            path = res.path
            if progress:  # "new": new to the corpus, though its first form was saved earlier
                progress(f"  {finding.kind}: {sig} -> {res.path} ({'new' if first_saved == 'new' else res.status})")
    elif progress:
        progress(f"  {finding.kind}: {sig}")
    return Saved(f, case, path, log, seconds, error)


def write_json_atomic(path: Path, doc: dict) -> None:
    path = Path(path)
    if path.parent and not path.parent.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    tmp.replace(path)


def stderr_progress() -> Callable[[str], None]:
    tty = sys.stderr.isatty()

    def say(line: str) -> None:
        if tty and line.startswith("[") and " cases, " in line:
            sys.stderr.write("\r\033[K" + line)
        else:
            sys.stderr.write(("\r\033[K" if tty else "") + line + "\n")
        sys.stderr.flush()
    return say
