"""What every engine reports: the findings of an op (`Found`) and its statistics (`OpStats`)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from ..case import Case
from ..findings import Finding
from ..judge import Verdict

NOT_TARGET_KEPT = 5  # messages kept per op of failures that were kvfuzz's or the environment's


@dataclass
class Found:
    finding: Finding
    case: Case  # smallest case seen with this signature
    first: Case  # the case it was first seen on
    shrunk_by: list[str] = field(default_factory=list)
    # when it was first seen: seconds of fuzzing into its op (confirming earlier findings not
    # counted) and the op's cases run by then; how fast a campaign finds it
    found_after_s: float | None = None
    found_at_case: int | None = None


@dataclass
class OpStats:
    op: str
    cases: int = 0
    shrink_runs: int = 0
    seconds: float = 0.0
    by_status: dict[str, int] = field(default_factory=dict)
    skipped: str | None = None  # why the op was not fuzzed at all
    skipped_cases: int = 0  # drawn but not run: the rest of a stint whose class hangs
    reruns: int = 0  # cases run twice (the determinism check)
    batches: int = 0
    lost_batches: int = 0  # batches re-run case by case (a fault, a hang or a dead worker inside)
    classes: int = 0  # compile classes visited
    variants: int = 0  # distinct Triton specialisation keys launched while fuzzing this op
    compiled: int = 0  # kernels Triton compiled (or loaded from its cache) while fuzzing this op
    features: Counter = field(default_factory=Counter)  # coverage record: feature -> cases
    stages: dict[str, float] = field(default_factory=dict)  # seconds per stage
    not_target: int = 0  # runs that failed for kvfuzz's or the environment's reasons
    not_target_messages: list[str] = field(default_factory=list)
    batch_only: list[str] = field(default_factory=list)  # signatures seen in a batch but not alone
    position: int = 0  # where the engine's case stream stands (a resumed campaign starts there)
    timeline: list[tuple[float, int, int]] = field(default_factory=list)  # (seconds, cases, findings), ~1 a second
    contract_variant: str | None = None  # the contract variant the op's cases were judged by
    cross_checked: int = 0  # cases also run on the cross-check backend and compared (--cross-check)
    engine: dict = field(default_factory=dict)  # the engine's own figures (atheris: execs/s, coverage)
    held_back: list = field(default_factory=list)  # cases held back like a known crash, per key (held_back.py)
    # --feature: the filter, the pool it left, the cases drawn and dropped (batch_engine.FeatureCount)
    feature_filter: dict | None = None
    unrunnable: str | None = None  # why the engine could draw no case at all (no class has the feature)
    confirm_seconds: float = 0.0  # confirming the op's findings in fresh processes (pipeline.py), minimized cases too
    confirm_batches: int = 0  # confirmations made (the findings shown together confirmed as one)

    def count(self, verdict: Verdict) -> None:
        self.cases += 1
        self.by_status[verdict.status] = self.by_status.get(verdict.status, 0) + 1
        if verdict.not_target:
            self.not_target += 1
            if len(self.not_target_messages) < NOT_TARGET_KEPT and verdict.not_target not in self.not_target_messages:
                self.not_target_messages.append(verdict.not_target)

    def not_judged(self, message: str) -> None:
        """A failure that is kvfuzz's or the environment's, outside any case."""
        self.not_target += 1
        if len(self.not_target_messages) < NOT_TARGET_KEPT and message not in self.not_target_messages:
            self.not_target_messages.append(message)

    def sample(self, seconds: float, findings: int, every_s: float = 1.0) -> None:
        """A point of the op's timeline (for the report's plots), at most one per `every_s`."""
        if not self.timeline or seconds - self.timeline[-1][0] >= every_s:
            self.timeline.append((seconds, self.cases, findings))

    def add_stage(self, name: str, seconds: float) -> None:
        self.stages[name] = self.stages.get(name, 0.0) + seconds

    def to_json(self) -> dict:
        return {
            "cases": self.cases, "shrink_runs": self.shrink_runs, "seconds": round(self.seconds, 2),
            "by_status": self.by_status, "skipped": self.skipped, "skipped_cases": self.skipped_cases,
            "reruns": self.reruns,
            "batches": self.batches, "lost_batches": self.lost_batches, "classes": self.classes,
            "variants": self.variants, "compiled": self.compiled,
            "coverage": dict(sorted(self.features.items())),
            "stages": {k: round(v, 3) for k, v in sorted(self.stages.items())},
            "not_target": self.not_target, "not_target_messages": self.not_target_messages,
            "batch_only": self.batch_only, "position": self.position,
            "timeline": [[round(t, 2), n, f] for t, n, f in self.timeline],
            "contract_variant": self.contract_variant,
            "cross_checked": self.cross_checked,
            "held_back": self.held_back,
            "confirm_seconds": round(self.confirm_seconds, 2), "confirm_batches": self.confirm_batches,
            **({"engine": self.engine} if self.engine else {}),
            **({"feature_filter": self.feature_filter} if self.feature_filter is not None else {}),
        }


def fit_target(case: Case, lacks: dict) -> Case:
    """`case` without the optional tensors its target's entry point cannot take (an older
    SGLang release has no `uneven_batch_ptr`): the contract then asks nothing of them."""
    drop = [name for name in lacks.get(case.op, ()) if name in case.tensors]
    if not drop:
        return case
    return case.replace(tensors={k: v for k, v in case.tensors.items() if k not in drop},
                        values={k: v for k, v in case.values.items() if k not in drop})
