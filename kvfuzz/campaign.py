"""A fuzz campaign: ops x one target, each finding confirmed, minimized, saved and reported.

Library code behind `kvfuzz fuzz` (the CLI only parses and prints). The target runs in a
worker subprocess by default, so a kernel that crashes its process costs one case.

Each op runs with the engine `--engine` names (`engines.engine_class`), behind the one
interface of `engines/base.py`: the engine proposes and runs cases and hands every verdict to
the op's `OpRun` (statistics, budget, known signatures, the re-run alone of a new one). Each
finding it records goes to the campaign's `pipeline.FindingPipeline`, which confirms it in
fresh processes and saves it at once, and at the end of the op minimizes, confirms again,
merges (one defect, one finding) and saves; the report's findings come out of it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from . import IMPORTED_AT, cross, environment, stopping
from . import baseline as baseline_mod
from . import device as devmod
from .check import settle_variant
from .confirm import MIN_TRIES, TRIES
from .corpus import DirectoryCorpus, environment_versions
from .engines import ENGINES, engine_class
from .engines.base import EngineOptions, run_engine
from .engines.common import Found, OpStats
from .errors import BadInput, TargetLoadError
from .execute import one_line
from .internal import internal_error
from .held_back import held_line
from .judge import Verdict
from .callsites.launch import run_sites
from .contract import STRESS
from .ops import CONTRACTS, contract_label, contract_status, get_contract
from .outcome import op_status
from .pipeline import PENDING, Flaky, FindingPipeline, Saved
from .plan import Plan
from .strategies.feature_filter import feature_filter
from .progress import OpProgress, lines_to
from .worker import Executor, WorkerExecutor, discard, early_worker, make_executor

# a progress line each second on a terminal, every 10 s into a log, for callers that pass no `status`
PROGRESS_EVERY_S = 1.0 if sys.stderr.isatty() else 10.0
SNAPSHOT_EVERY_S = 0.25  # the fuzz loop builds a progress snapshot at most this often


@dataclass
class CampaignConfig:
    ops: list[str]
    target: str = "builtin"
    device: str = "auto"
    budget_s: float = 60.0  # generation time, split evenly over the ops the target has
    max_cases: int = 1_000_000  # per op
    seed: int = 0
    corpus: Path | None = None
    report: Path | None = None
    in_contract_only: bool = False
    isolate: bool = True
    minimize_budget_s: float = 30.0  # per new finding (Hypothesis' shrink, then kvfuzz's reducer)
    variant: str | None = None
    case_timeout_s: float = 60.0  # a run (or a batch, plus a little per case) longer than this is a hang
    engine: str = "batch"
    rerun_every: int | None = None  # determinism re-run of every N-th case; None: 1 on CUDA, 10 on the CPU
    batch: int | None = None  # cases per synchronisation (batched engine); None: per device
    # cases per packed launch (batched engine, packing.py); None: the op's default on the device
    # (PackSpec.default), 1: none
    pack: int | None = None
    confirm_tries: int = TRIES  # fresh processes each finding (and its minimized case) must show in
    shard: tuple[int, int] = (1, 1)  # (I, N): this process runs the I-th of N shards
    campaign_dir: Path | None = None  # resumable state (and, unless `corpus` says otherwise, the corpus)
    cross_check: str | None = None  # a second backend ("cpu": the interpreter) that runs the same cases
    cross_check_every: int = 1  # every N-th case (in contract) is cross-checked (batched engine)
    ops_named: bool = False  # the user named the ops (--op): one the target lacks is refused, not skipped
    time_limit_s: float | None = None  # wall clock for the whole run, confirming and minimizing included
    baseline: str | None = None  # a second target every case also runs on: regressions, fixes, changes
    sites: bool = True  # each saved finding's defect site, attributed under the interpreter (kvfuzz/sites)
    call_sites: Path | None = None  # call sites to check besides a release's own (callsites/launch.py)
    features: tuple[str, ...] = ()  # --feature: only cases with a feature fully matching one of these

    def validate(self) -> None:
        for op in self.ops:
            get_contract(op)
        if self.budget_s <= 0:
            raise BadInput(f"--budget must be > 0 seconds, got {self.budget_s}")
        if self.max_cases < 1:
            raise BadInput(f"--max-cases must be >= 1, got {self.max_cases}")
        if self.minimize_budget_s < 0:
            raise BadInput("--minimize-budget must be >= 0")
        if self.time_limit_s is not None and self.time_limit_s <= 0:
            raise BadInput(f"--time-limit must be > 0 seconds, got {self.time_limit_s}")
        if self.case_timeout_s <= 0:
            raise BadInput(f"--case-timeout must be > 0 seconds, got {self.case_timeout_s}")
        if self.rerun_every is not None and self.rerun_every < 0:
            raise BadInput(f"--rerun-every must be >= 0 (0: never), got {self.rerun_every}")
        if self.batch is not None and self.batch < 1:
            raise BadInput(f"--batch must be >= 1, got {self.batch}")
        if self.pack is not None and self.pack < 1:
            raise BadInput(f"--pack must be >= 1 (1: no packing), got {self.pack}")
        if self.baseline and self.cross_check:
            raise BadInput("--baseline and --cross-check do not go together: run the cross-check on its own")
        if self.cross_check_every < 1:
            raise BadInput(f"--cross-check-every must be >= 1, got {self.cross_check_every}")
        if self.confirm_tries < MIN_TRIES:
            raise BadInput(f"--confirm-tries must be >= {MIN_TRIES} (a finding must show in more than one "
                           f"fresh process), got {self.confirm_tries}")
        if self.engine not in ENGINES:
            raise BadInput(f"--engine must be one of {', '.join(ENGINES)}, got {self.engine!r}")
        why = engine_class(self.engine).missing()
        if why:
            raise BadInput(why)
        if self.features and self.engine != "batch":  # the filter acts on the batched engine's stream
            raise BadInput(f"--feature needs --engine batch, got --engine {self.engine}")
        feature_filter(self.features)  # a pattern that does not compile: BadInput
        i, n = self.shard
        if not (n >= 1 and 1 <= i <= n):
            raise BadInput(f"--shard must be I/N with 1 <= I <= N, got {i}/{n}")
        if self.variant is not None:
            for op in self.ops:
                if self.variant not in CONTRACTS[op].variants:
                    raise BadInput(f"op {op} has no contract variant {self.variant!r}; "
                                   f"it has {', '.join(CONTRACTS[op].variants)}")

    def rerun_for(self, device: str) -> int:
        """Every case is re-run on CUDA (races, uninitialised reads); the interpreter runs a
        kernel's programs one after another, so there a re-run can only show host-side
        nondeterminism and every tenth case is enough."""
        return self.rerun_every if self.rerun_every is not None else (1 if device == "cuda" else 10)

    def stream_seed(self) -> int:
        """The seed of this shard's case stream (shard 1 of 1 keeps the campaign's seed)."""
        i, n = self.shard
        return self.seed if n == 1 else self.seed * 1_000_003 + i


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
    flaky: list[Flaky] = field(default_factory=list)
    startup_s: float = 0.0  # from the campaign's start to its first judged case
    versions: dict = field(default_factory=dict)
    # from kvfuzz's import to the first judged case, for the first campaign of a process (the
    # whole start-up of `kvfuzz fuzz`: imports, device choice, the worker's start); else None
    since_import_s: float | None = None
    notes: list[str] = field(default_factory=list)  # about the environment (an untested triton)
    internal_errors: list[dict] = field(default_factory=list)  # kvfuzz's own exceptions (internal.py)
    stress_dropped: int = 0  # --in-contract-only: findings on stress cases, dropped unconfirmed
    binding: list[dict] = field(default_factory=list)  # call sites binding elsewhere (kind `binding`)
    not_run: dict[str, str] = field(default_factory=dict)  # op -> why it ran no case
    cut_short_by: str | None = None  # "SIGTERM", "the time limit (45 s)", ... (when interrupted)
    cut_op: str | None = None  # the op that was running when the run was cut short
    shared: list[Found] = field(default_factory=list)  # --baseline: findings the baseline shows the same way

    @property
    def cases(self) -> int:
        return sum(s.cases for s in self.stats)

    @property
    def not_target(self) -> int:
        return sum(s.not_target for s in self.stats)

    @property
    def new(self) -> list[Saved]:
        return [x for x in self.saved if x.new]

    def op_json(self, s: OpStats) -> dict:
        """An op's stats with its `status` and `reason` (outcome.py)."""
        status, reason = op_status(s.to_json(), self.not_run.get(s.op),
                                   self.cut_short_by if s.op == self.cut_op else None)
        return s.to_json() | {"status": status, "reason": reason}

    def report(self) -> dict:
        doc = {
            "kvfuzz_report": 1,
            "target": self.config.target,
            "target_description": self.target_description,
            "device": self.device,
            "device_name": self.device_name,
            "versions": self.versions,
            "notes": self.notes,
            "seed": self.config.seed,
            "shard": list(self.config.shard),
            "engine": self.config.engine,
            "positions": {s.op: s.position for s in self.stats},
            "cross_check": self.config.cross_check,
            "baseline": self.config.baseline,
            "feature": list(self.config.features),  # --feature (each op's feature_filter: drawn, dropped)
            "seconds": round(self.seconds, 2),
            "startup_s": round(self.startup_s, 2),
            "since_import_s": None if self.since_import_s is None else round(self.since_import_s, 2),
            "interrupted": self.interrupted,
            "cut_short": self.interrupted,
            "cut_short_by": self.cut_short_by,
            "cases": self.cases,
            "cases_per_s": round(self.cases / max(sum(s.seconds for s in self.stats), 1e-9), 1),
            "not_target": self.not_target,
            "ops": {s.op: self.op_json(s) for s in self.stats},
            "findings": [self._finding(x) for x in self.saved],
            "flaky": [{
                "op": x.finding.finding.op,
                "signature": x.finding.finding.signature,
                "message": x.finding.finding.message,
                "contract": contract_status(x.finding.first),
                "contract_status": contract_label(x.finding.first),
                "reproduced": x.confirmation.reproduced,
                "tries": x.confirmation.tries,
                "case_digest": x.finding.first.digest(),
            } for x in self.flaky],
        }
        doc["findings"] += [self._binding(b) for b in self.binding]
        from .sites.defects import defects_of

        doc["defects"] = defects_of([f for f in doc["findings"] if f["kind"] != "binding"])  # a binding finding: its call site  # the findings grouped by defect site, defects first
        doc["internal_errors"] = list(self.internal_errors)  # after the findings: theirs included
        from .reports import by_status

        doc["findings_by_status"] = by_status(doc["findings"])
        if self.config.in_contract_only:
            doc["stress_dropped"] = self.stress_dropped
        if self.config.baseline:  # the regressions, fixes and changes, apart from the rest
            from .reports import against_baseline

            doc["against_baseline"] = against_baseline(doc["findings"])
            doc["shared_with_baseline"] = [{
                "op": f.finding.op,
                "signature": f.finding.signature,
                "message": f.finding.message,
                "contract": contract_status(f.first),
                "case_digest": f.first.digest(),
                "found_after_s": f.found_after_s,
            } for f in self.shared]
        return doc

    def _binding(self, b: dict) -> dict:
        """A binding finding's report entry: with the case saved of its site's own launch
        (`as_called`) where that launch gave wrong output, new or known as that case is."""
        sig = (b.get("as_called") or {}).get("signature")
        host = next((x for x in self.saved if sig and sig in x.signatures), None)
        if host is None:
            return dict(b)
        return b | {"case": str(host.path) if host.path else None, "new": host.new}

    def _finding(self, x: Saved) -> dict:
        """A finding's report entry; one that cannot be described in full (an internal error)
        keeps what is known of it, and the error."""
        mine = lambda: [e for e in self.internal_errors if e.get("signature") in x.signatures]  # noqa: E731
        try:
            return {
                "op": x.found.finding.op,
                "kind": x.found.finding.kind,
                "signature": x.found.finding.signature,
                "signatures": x.signatures,
                "message": x.found.finding.message,
                "contract": contract_status(x.case),  # in contract, or the rule the saved case breaks
                "contract_status": contract_label(x.case),  # in_contract, stress, out_of_contract, must_refuse
                "case": str(x.path) if x.path else None,
                "save_error": x.save_error,
                "confirmed": x.confirmation.describe() if x.confirmation else None,
                "minimized_confirmed": x.minimized_confirmed,
                "new": x.new,
                "found_after_s": x.found.found_after_s,
                "found_at_case": x.found.found_at_case,
                "shrunk_by": x.found.shrunk_by,
                "minimize_log": x.minimize_log,
                "minimize_seconds": round(x.minimize_seconds, 2),
                "size": list(x.case.size_key()),
                "unconfirmed": x.unconfirmed,
                "unconfirmed_why": x.unconfirmed_why,
                "against_defect": x.against_defect,
                "site": x.site,
                "internal_errors": mine(),
            }
        except Exception as exc:
            err = internal_error("report", exc, x.found.finding.signature)
            if all(dict(e, where=None) != dict(err, where=None) for e in self.internal_errors):
                self.internal_errors.append(err)  # once, however often the report is made
            return {"op": x.found.finding.op, "kind": x.found.finding.kind, "signature": x.found.finding.signature,
                    "message": x.found.finding.message, "signatures": x.signatures,
                    "case": str(x.path) if x.path else None, "new": x.new,
                    "unconfirmed": x.unconfirmed, "internal_errors": mine()}


class CampaignState:
    """`--campaign DIR`: where each op's case stream stands, so that running the same campaign
    again continues where it stopped (a SIGKILL included: the state is written every few
    seconds, atomically). One file per shard, `state-I-of-N.json`; the corpus is `DIR/corpus`
    unless `--corpus` names another, so findings of earlier runs come back as known."""

    EVERY_S = 2.0

    def __init__(self, cfg: CampaignConfig) -> None:
        i, n = cfg.shard
        self.path = Path(cfg.campaign_dir) / f"state-{i}-of-{n}.json"
        self.who = {"target": cfg.target, "seed": cfg.seed, "engine": cfg.engine,
                    "in_contract_only": cfg.in_contract_only, "variant": cfg.variant,
                    **({"features": list(cfg.features)} if cfg.features else {})}  # --feature: its own stream
        self.positions: dict[str, int] = {}
        self.saved_at = 0.0
        if self.path.is_file():
            try:
                doc = json.loads(self.path.read_text())
            except (OSError, ValueError) as exc:
                raise BadInput(f"{self.path}: unreadable campaign state ({one_line(exc)})") from None
            if doc.get("campaign") != self.who:
                raise BadInput(f"{cfg.campaign_dir} holds another campaign ({doc.get('campaign')}); "
                               "resume it with the same options or use another directory")
            self.positions = {op: int(n) for op, n in doc.get("positions", {}).items()}

    def start(self, op: str) -> int:
        return self.positions.get(op, 0)

    def note(self, op: str, position: int, force: bool = False) -> None:
        self.positions[op] = position
        if force or time.monotonic() - self.saved_at >= self.EVERY_S:
            write_json_atomic(self.path, {"kvfuzz_campaign": 1, "campaign": self.who, "positions": self.positions})
            self.saved_at = time.monotonic()


def check_forced_variant(cfg: CampaignConfig, executor: Executor | None = None) -> None:
    """BadInput (one line) when `--variant` has arguments the target would drop, so that every
    case using one would be a false finding or a false pass. Without `executor`, a worker is
    started for the check (`--jobs`: the parent refuses once, before any shard starts)."""
    if cfg.variant is None:
        return
    own = executor is None
    if own:
        executor = make_executor(cfg.target, devmod.select(cfg.device), isolate=cfg.isolate)
    try:
        for op in cfg.ops:
            if op not in executor.missing:
                forced_variant(cfg, executor, op)
    finally:
        if own:
            executor.close()


def forced_variant(cfg: CampaignConfig, executor: Executor, op: str) -> str:
    """The contract variant that judges `op` (check.settle_variant): `--variant`, refused where
    the target would drop its arguments, else the target's (its release)."""
    return settle_variant(op, executor, cfg.target, cfg.variant, f"--variant {cfg.variant}",
                          "a variant that adds no argument, such as live_prefix, can be forced")


def _plan_limit(cfg: CampaignConfig, startup_s: float) -> float | None:
    """The wall-clock limit the run plans within: `--time-limit`; for a `--baseline` run
    without one, its start-up plus `--budget`, so that a gate on a pull request ends on time
    (generation, confirming and minimizing its regressions all inside the budget, shared as
    `--time-limit` shares it: plan.py); else none (minimizing follows the generation budget)."""
    if cfg.time_limit_s is not None:
        return cfg.time_limit_s
    if cfg.baseline:
        return startup_s + cfg.budget_s
    return None


_first_campaign = [True]  # whether this process has run no campaign yet (its report counts since_import_s)


def run_campaign(cfg: CampaignConfig, progress: Callable[[str], None] | None = None,
                 status: Callable[[OpProgress], None] | None = None) -> CampaignResult:
    """`progress` gets event lines (findings, an op done); `status` a snapshot of the current op
    a few times a second and at each change of stage (`progress.py` shows them). Stopped
    (KeyboardInterrupt: SIGINT, SIGTERM, --time-limit's alarm) at any point, start-up included,
    it still returns its result, cut short, and writes its report."""
    cfg.validate()
    if status is None and progress is not None:
        status = lines_to(progress, PROGRESS_EVERY_S)
    state = CampaignState(cfg) if cfg.campaign_dir else None
    if state is not None and cfg.corpus is None:
        cfg.corpus = Path(cfg.campaign_dir) / "corpus"
    t0 = time.monotonic()
    stats: list[OpStats] = []
    found: dict[str, Found] = {}  # the current op's findings, not yet settled
    current: OpStats | None = None  # the current op's stats as they grow (kept if interrupted)
    first_case = [0.0]
    stress_dropped = [0]  # --in-contract-only: findings on stress cases, not kept
    interrupted = False
    not_run: dict[str, str] = {}  # op -> why it ran no case
    executor: Executor | None = None
    pipeline: FindingPipeline | None = None
    device = cfg.device
    shown = {op: OpProgress(op, cfg.target, "", f"{cfg.shard[0]}/{cfg.shard[1]}") for op in cfg.ops}

    def show(op: str, stage: str, s: OpStats | None = None, t_op: float = 0.0) -> None:
        """A snapshot of `op` for `status` (new/known/flaky are kept up to date in `shown`)."""
        p = shown[op]
        p.stage = stage
        if s is not None:
            p.elapsed = time.monotonic() - t_op
            p.cases, p.rate = s.cases, s.cases / max(p.elapsed, 1e-9)
            p.classes, p.variants, p.compiled, p.cross_checked = s.classes, s.variants, s.compiled, s.cross_checked
        if status:
            status(dataclasses.replace(p))

    def count(op: str, outcomes: list[str]) -> None:
        """Confirmation outcomes ("new", "known" or "flaky") into the op's progress counts."""
        for outcome in outcomes:
            if outcome != PENDING:
                setattr(shown[op], outcome, getattr(shown[op], outcome) + 1)

    binding: list[dict] = []  # the binding findings of the ops' call sites
    # the call sites a run checks: shard 1 of a campaign only (one report entry per site)
    sites = run_sites(cfg.target, cfg.call_sites) if cfg.shard[0] == 1 else []
    try:
        executor, fresh, device = _start(cfg)
        store = DirectoryCorpus(cfg.corpus) if cfg.corpus else None
        versions = environment_versions(devmod.gpu_name(device))
        pipeline = FindingPipeline(cfg, executor, fresh, device, versions, store, progress)
        engine_cls = engine_class(cfg.engine)
        runnable = [op for op in cfg.ops if op not in executor.missing]
        # an op the target lacks leaves its share to the others; start-up is behind us: each
        # op's share comes out of what is left when its turn comes
        started_s = time.monotonic() - t0
        plan = Plan(runnable, cfg.budget_s, _plan_limit(cfg, started_s), started=t0)
        # no confirmation starts that cannot end by the plan's end; until one is timed, one costs
        # about what the campaign's worker took to start
        pipeline.deadline, pipeline.confirm_guess_s = plan.end, started_s
        for p in shown.values():
            p.device, p.budget = devmod.describe(device), cfg.budget_s / max(len(runnable), 1)
        for op in cfg.ops:
            show(op, "waiting")
        for op in cfg.ops:
            if op in executor.missing:
                s = OpStats(op, skipped=executor.missing[op])
                stats.append(s)
                show(op, "skipped")
                if progress:
                    progress(f"[{op}] skipped: {s.skipped}")
                continue
            variant = forced_variant(cfg, executor, op)  # --variant, else the target's (its release)
            turn = plan.turn(op)
            if turn is None:
                not_run[op] = (f"the time limit ({cfg.time_limit_s:g} s) left it no time" if cfg.time_limit_s
                               else f"the --baseline run's budget ({cfg.budget_s:g} s) left it no time")
                stats.append(OpStats(op, contract_variant=variant))
                plan.done(op, 0.0)
                show(op, "not run")
                continue
            found, current, t_op = {}, OpStats(op, contract_variant=variant), time.monotonic()
            shown[op].budget = turn.budget_s
            last = [0.0]
            show(op, "fuzzing", current, t_op)

            def on_case(s: OpStats, v: Verdict, op=op, t_op=t_op) -> None:
                now = time.monotonic()
                if state is not None:
                    state.note(op, s.position)
                if not first_case[0]:
                    first_case[0] = now - t0
                    pipeline.confirm_guess_s = max(pipeline.confirm_guess_s, first_case[0])
                if status and now - last[0] >= SNAPSHOT_EVERY_S:
                    last[0] = now
                    show(op, "fuzzing", s, t_op)

            def on_new_many(fs: list[Found], op=op, t_op=t_op) -> None:
                """Findings one case showed: confirmed together (one set of fresh processes)."""
                kept = []
                for f in fs:
                    if cfg.in_contract_only and contract_label(f.first) == STRESS:  # a launch no call site makes
                        stress_dropped[0] += 1
                        found.pop(f.finding.signature, None)  # an in-contract case may still show it
                    else:
                        kept.append(f)
                if not kept:
                    return
                show(op, "confirming", current, t_op)
                count(op, pipeline.add_many(kept, may_wait=True))  # piled up while spares start
                show(op, "fuzzing", current, t_op)

            def on_new(f: Found) -> None:
                on_new_many([f])

            options = EngineOptions(seed=cfg.stream_seed(), pool_seed=cfg.seed, shard=cfg.shard, device=device,
                                    target=cfg.target, in_contract_only=cfg.in_contract_only, variant=variant,
                                    rerun_every=cfg.rerun_for(device), batch=cfg.batch, pack=cfg.pack,
                                    cross_every=cfg.cross_check_every if cfg.cross_check else 0,
                                    case_timeout_s=cfg.case_timeout_s, shrink_budget_s=cfg.minimize_budget_s / 2,
                                    campaign_dir=cfg.campaign_dir, feature=feature_filter(cfg.features))
            s, found = run_engine(engine_cls(op, executor, options), budget_s=turn.budget_s,
                                  max_cases=cfg.max_cases, start=state.start(op) if state else 0,
                                  until=turn.fuzz_end, until_clean=turn.op_end, first_by=turn.first_by,
                                  to_minimize=lambda found=found: pipeline.waiting(found),
                                  known=found, stats=current,
                                  on_case=on_case, sink=on_new, sink_many=on_new_many)
            if sites:  # the op's call sites: binding findings, and the misbound ones launched as called
                show(op, "call sites", s, t_op)
                binding += call_site_findings(cfg, executor, op, variant, sites, found, on_new)
            count(op, pipeline.confirm_piled())  # what piled up while spares were starting
            current = None
            stats.append(s)
            plan.done(op, s.seconds)
            if state is not None:
                state.note(op, s.position, force=True)
            if not s.cases:
                not_run[op] = s.unrunnable or f"no case finished in its {s.seconds:.1f} s"
            if progress:
                progress(f"[{op}] done: {s.cases} cases in {s.seconds:.1f} s, {len(found)} findings")
                if s.held_back:  # cases like a known crash, drawn in one stint of ten (held_back.py)
                    progress(held_line(op, s.held_back))
            show(op, "minimizing" if pipeline.waiting(found) else "done", s, t_op)
            pipeline.settle(found, turn.op_end)
            show(op, "done")
        # findings whose op's minimizing time ran out, in what the later ops left unused
        pipeline.settle_starved(plan.end)
    except KeyboardInterrupt:
        # SIGINT, SIGTERM or --time-limit's alarm (stopping.py): keep what was found,
        # unminimized, and still write the report
        interrupted = True
        with stopping.deferred():
            if current is not None:
                current.seconds = time.monotonic() - t_op
                stats.append(current)
                if state is not None:
                    state.note(current.op, current.position, force=True)
                show(current.op, "cut short")
            if progress:
                progress(f"cut short by {stopping.stopped_by() or 'an interrupt'}: saving {len(found)} unsaved "
                         "finding(s) without minimizing")
            if pipeline is not None:
                pipeline.save_unminimized(found)
    finally:
        with stopping.deferred():
            if executor is not None:
                executor.close()
    with stopping.deferred():
        reached = {s.op for s in stats}
        stopped = stopping.stopped_by() or "an interrupt"
        for op in cfg.ops:
            if op not in reached:  # the run was stopped before its turn
                stats.append(OpStats(op))
                not_run[op] = f"the run was stopped by {stopped} before its turn"
        stats.sort(key=lambda s: cfg.ops.index(s.op))
        for s in stats:  # what confirming cost each op (its findings, and their minimized cases)
            s.confirm_seconds, s.confirm_batches = pipeline.confirming.get(s.op, (0.0, 0)) if pipeline else (0.0, 0)
        since_import = t0 + first_case[0] - IMPORTED_AT if _first_campaign[0] and first_case[0] else None
        _first_campaign[0] = False
        versions = pipeline.versions if pipeline is not None else {"gpu": devmod.describe(device)}
        result = CampaignResult(cfg, device, executor.description if executor else cfg.target, stats,
                                pipeline.saved if pipeline else [], time.monotonic() - t0,
                                versions["gpu"], interrupted, pipeline.flaky if pipeline else [], first_case[0],
                                versions, since_import, notes=environment.notes(), not_run=not_run,
                                cut_short_by=stopped if interrupted else None,
                                cut_op=current.op if interrupted and current is not None else None,
                                internal_errors=pipeline.internal_errors if pipeline is not None else [],
                                shared=pipeline.shared if pipeline is not None else [],
                                stress_dropped=stress_dropped[0], binding=binding)
        if cfg.report:
            write_json_atomic(cfg.report, result.report())
    return result


AS_CALLED_CASES = 16  # in-contract cases launched as each misbound call site launches them


def call_site_findings(cfg: CampaignConfig, executor, op: str, variant: str | None, sites: list[dict],
                       found: dict[str, Found], sink: Callable[[Found], None]) -> list[dict]:
    """`op`'s binding findings; each misbound site's kernel launched with the site's argument
    list on a seeded sample of in-contract cases until one gives wrong output, which becomes a
    finding of the op (confirmed, saved and minimized as any other)."""
    from .callsites.launch import as_called_cases, binding_findings, first_wrong, misbound
    from .check import Checker

    out = binding_findings(op, sites, cfg.target)
    if cfg.baseline:  # the baseline's launch of a site is not checked: the findings alone
        return out
    from .targets import variant_lacks

    checker = Checker(executor, op, variant)
    for site in misbound(out):
        cases = [c for c in as_called_cases(op, site, cfg.seed, 4 * AS_CALLED_CASES, variant)
                 if not variant_lacks(op, c.variant, executor)][:AS_CALLED_CASES]  # cases the target can take
        f, ran = first_wrong(checker, cases)
        result = {"cases": ran, "signature": f.finding.signature if f else None}
        for b in out:
            if b["site"] is site or b["site"] == site:
                b["as_called"] = result
        if f is not None and f.finding.signature not in found:
            found[f.finding.signature] = f
            sink(f)
    return out


def _start(cfg: CampaignConfig) -> tuple[Executor, Callable[[], WorkerExecutor], str]:
    """The campaign's executor (its worker, a cross-check's or a baseline's beside it), where
    confirmations get fresh workers, and the device; what was started is closed if this fails
    or is interrupted."""
    # the worker starts first: it imports torch and Triton (and probes the interpreter) while
    # this process does the same, instead of after it
    early = early_worker(cfg.target, cfg.device) if cfg.isolate else None
    try:
        device = devmod.select(cfg.device)
        if device == "cuda" and "TRITON_CACHE_DIR" not in os.environ:  # later workers inherit it
            os.environ["TRITON_CACHE_DIR"] = str(devmod.triton_cache_dir(cfg.target, device))
        executor = make_executor(cfg.target, device, isolate=cfg.isolate, timeout_s=cfg.case_timeout_s,
                                 standby=True, early=early)
    except BaseException:
        with stopping.deferred():
            discard(early)
        raise
    try:
        lacking = [op for op in cfg.ops if op in executor.missing] if cfg.ops_named else []
        if lacking:  # before anything runs; a campaign over all ops skips them instead
            raise TargetLoadError(f"target {cfg.target} has no {lacking[0]}: {executor.missing[lacking[0]]}")
        check_forced_variant(cfg, executor)
        fresh = _fresh_workers(executor, cfg, device)
        if cfg.cross_check:
            executor = cross.pair(executor, fresh, cfg.target, device, cfg.cross_check, cfg.case_timeout_s,
                                  standby=True)
            fresh = executor.fresh
        if cfg.baseline:
            executor = baseline_mod.pair(executor, fresh, cfg.target, cfg.baseline, device, cfg.case_timeout_s,
                                         isolate=cfg.isolate, standby=True, ops=cfg.ops)
            fresh = executor.fresh
    except BaseException:
        with stopping.deferred():
            executor.close()
        raise
    return executor, fresh, device


def _fresh_workers(executor: Executor, cfg: CampaignConfig, device: str) -> Callable[[], WorkerExecutor]:
    """Where confirmations get a process that has run no case: the campaign worker's standby,
    or (running in-process) a new worker; with a cross-check, one of each backend."""
    if isinstance(executor, (WorkerExecutor, cross.CrossExecutor)):
        return executor.fresh
    return lambda: WorkerExecutor(cfg.target, device, cfg.case_timeout_s)


def write_json_atomic(path: Path, doc: dict) -> None:
    path = Path(path)
    if path.parent and not path.parent.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    tmp.replace(path)


def stderr_progress(prefix: str = "") -> Callable[[str], None]:
    tty = sys.stderr.isatty()

    def say(line: str) -> None:
        if tty and not prefix and line.startswith("[") and " cases, " in line:
            sys.stderr.write("\r\033[K" + line)
        else:
            sys.stderr.write(("\r\033[K" if tty and not prefix else "") + prefix + line + "\n")
        sys.stderr.flush()
    return say
