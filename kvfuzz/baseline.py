"""`--baseline TARGET`: what a change broke.

Every case runs on the target and on a baseline target (the merge base of a pull request,
the previous release) from the same arena image, so both see identical inputs, strides and
guard bands, and each run is judged by the oracle. The two verdicts are compared unit by
unit, where a unit is an output cell, a byte outside every tensor's elements or of an input
(`out_of_bounds_write`, `input_modified`), an out-of-bounds read's place (input and band),
or the run itself (a crash, a must-refuse case accepted). Each unit a target finding covers
is

* `regression`: the baseline right on it (judged, and not wrong there), the target wrong;
* `changed`: both wrong, differently (another value left there, another crash; or the
  baseline's run judged nothing there: it crashed or raised);
* shared: the baseline wrong there the same way (the same value).

A target finding takes the class of its worst unit (regression, then changed, then shared),
so a cell the target newly gets wrong is a regression even where the baseline fails other
cells of the case. A baseline finding with a unit the target gets right is `fixed`. The
regressions, changes and fixes are findings of their own kinds, beside the ordinary ones, with
the ordinary finding they stand on in their signature (`op:path:regression:TENSOR:KIND.WHERE`),
so a regression is new even where the target's ordinary signature is already known from other
cases; the ordinary finding carries its class (`Finding.against`): a shared one is the
baseline's defect too, and the campaign does not confirm or minimize it on the target alone
(pipeline.py). The classes live in `Checker` (check.py), the one checking path: confirmation in
fresh processes, the minimizer (a minimized regression is still a regression), replay and the
pytest plugin all see them.

`BaselineExecutor` pairs the campaign's executor with a worker for the baseline; each batch
goes to both workers at once (two processes run side by side: a baseline run costs at most a
second run). The pair draws cases both targets can take: the target's contract variant where
the baseline takes its arguments, else the baseline's where the target takes its; an op where
neither fits is skipped with the reason, and a pair with no op in common is refused (`pair`).
"""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .case import Case
from .cross import _many, _primarys, _single  # the cross-check's pairing helpers, the same here
from .errors import BadInput, TargetLoadError
from .execute import BatchResult, Launch, Outcome, Prepared, outcomes
from .findings import CLASSES, Finding
from .judge import Verdict, judge, quick_verdict
from .materialize import NOBODY
from .ops import CONTRACTS
from .places import charge_writes
from .rules import after_error_rule, output_rules
from .targets import variant_lacks
from .worker import Executor, InProcessExecutor, WorkerExecutor

# kinds that are kvfuzz's own or the machine's, never a difference between two targets; and a
# race, which shows on some runs only: one side showing it on a case and the other not says
# nothing about a change (the seed against itself on the H200 gave such pairs), so it stays the
# target's ordinary finding
NOT_COMPARED = ("oracle_disagreement", "backend_divergence", "nondeterministic") + CLASSES
MAX_UNITS = 8  # units shown per class finding


# one place's units a finding covers: (their indices, ascending: flat element indices of an
# output, arena byte offsets, or [0] for a place that is one unit; the value the run left on
# each; the output's shape, to show an index, or None)
Units = tuple[np.ndarray, np.ndarray, "tuple[int, ...] | None"]


@dataclass
class Side:
    """One target's verdict on a case, with the units each compared finding covers:
    `wrong`: signature -> {place: Units}; a place is a tuple whose first item is its domain:
    ("outputs", TENSOR), ("memory",), ("reads", INPUT, WHERE), ("run", KIND); `judged`: the
    domains this run lets one judge (a lost run judges no output cell, a refused in-contract
    run no output)."""

    verdict: Verdict
    wrong: dict[str, dict[tuple, Units]]
    judged: frozenset[str]


def one(value: object) -> Units:
    """A place that is one unit (a crash, a read's place), with what the run left there."""
    return np.zeros(1, np.int64), np.array([value], dtype=object), None


def side(p: Prepared, outcome: Outcome, verdict: Verdict) -> Side:
    """`verdict` (on `outcome`, a run of the prepared case `p`) with the units of each of its
    compared findings, told by the judge's own rules on the run's arena."""
    first = outcome.runs[0]
    judged = {"run"}
    if first.after is not None:
        judged.add("memory")
        if len(outcome.runs) > 1:
            judged.add("reads")
        if (p.status == "in_contract" and first.error is None) or (p.status == "must_refuse" and first.error):
            judged.add("outputs")
    compared = [f for f in verdict.findings if f.kind not in NOT_COMPARED]
    kinds = {f.kind for f in compared}
    cells = _output_units(p, first) if first.after is not None and kinds & {"mismatch", "untouched_write"} else {}
    memory = _memory_units(p, first.after) if first.after is not None and \
        kinds & {"out_of_bounds_write", "input_modified"} else {}
    wrong: dict[str, dict[tuple, Units]] = {}
    for f in compared:
        if f.kind in ("crash", "invalid_accepted"):
            units = {("run", f.kind): one(f.where)}
        elif f.kind == "out_of_bounds_read":
            units = {("reads", f.tensor, f.where): one(None)}
        else:
            got = (cells if f.kind in ("mismatch", "untouched_write") else memory).get((f.kind, f.tensor, f.where))
            units = {got[0]: got[1]} if got is not None else {("run", f.signature): one(None)}  # none told
        wrong[f.signature] = units
    return Side(verdict, wrong, frozenset(judged))


def _output_units(p: Prepared, first) -> dict[tuple, tuple[tuple, Units]]:
    """(kind, tensor, where) -> (("outputs", tensor), its cells' Units) for each output finding,
    by rules.output_rules (in contract) or rules.after_error_rule (a refused must-refuse case)."""
    contract, plan = CONTRACTS[p.case.op], p.plan
    out: dict[tuple, tuple[tuple, Units]] = {}
    refused = p.status == "must_refuse" and first.error is not None
    if not refused and (p.status != "in_contract" or first.error is not None or p.expected is None):
        return out
    cells = None if refused else contract.cells(p.case)
    for name in contract.outputs:
        r = plan.regions.get(name)
        if r is None:
            continue
        got = r.elements(first.after).astype(np.int64)
        before = r.elements(plan.image).astype(np.int64)
        if refused:
            hit = after_error_rule(name, got, before, first.error_type)
            rules = [hit] if hit is not None else []
        else:
            c = cells[name]
            rules = output_rules(name, c.required, c.untouched, got, before,
                                 [np.asarray(a[name]) for a in p.expected.accepted()])
        for kind, where, _, mask in rules:
            idx = np.flatnonzero(np.asarray(mask).reshape(-1))
            out[(kind, name, where)] = (("outputs", name), (idx, got.reshape(-1)[idx], tuple(got.shape)))
    return out


def _memory_units(p: Prepared, after: np.ndarray) -> dict[tuple, tuple[tuple, Units]]:
    """(kind, tensor, where) -> (("memory",), Units of arena bytes) for the stray bytes (charged
    to the output whose store overran, as the judge charges them) and the input bytes that changed."""
    contract, plan = CONTRACTS[p.case.op], p.plan
    if after.shape != plan.image.shape:
        return {}
    changed = np.flatnonzero(after != plan.image)
    owner = plan.owner_of(changed)
    out: dict[tuple, tuple[tuple, Units]] = {}
    stray = changed[owner == NOBODY]
    for (tensor, where), (bytes_, _) in charge_writes(plan.regions.values(), contract.outputs, stray.tolist()).items():
        at = np.asarray(bytes_, np.int64)
        out[("out_of_bounds_write", tensor, where)] = (("memory",), (at, after[at].astype(np.int64), None))
    for i, name in enumerate(plan.names):
        at = changed[owner == i]
        if name not in contract.outputs and at.size:
            out[("input_modified", name, "elements")] = (("memory",), (at, after[at].astype(np.int64), None))
    return out


def _merged(side_: Side) -> dict[tuple, tuple[np.ndarray, np.ndarray]]:
    """place -> (indices ascending, values): every compared finding's units of a side at once."""
    parts: dict[tuple, list[Units]] = {}
    for units in side_.wrong.values():
        for place, u in units.items():
            parts.setdefault(place, []).append(u)
    out = {}
    for place, us in parts.items():
        idx = np.concatenate([u[0] for u in us])
        vals = np.concatenate([np.asarray(u[1], dtype=object) for u in us]) if any(u[1].dtype == object for u in us) \
            else np.concatenate([u[1] for u in us])
        order = np.argsort(idx, kind="stable")
        out[place] = idx[order], vals[order]
    return out


def _against(idx: np.ndarray, vals: np.ndarray, other: tuple[np.ndarray, np.ndarray] | None
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(present, same, the other side's values where present) of units `idx` with `vals`
    against the other side's units of the same place (None: none)."""
    if other is None or other[0].size == 0:
        false = np.zeros(idx.size, bool)
        return false, false, np.full(idx.size, None, dtype=object)
    oi, ov = other
    pos = np.minimum(np.searchsorted(oi, idx), oi.size - 1)
    present = oi[pos] == idx
    theirs = ov[pos].astype(object)
    same = present & np.asarray(theirs == vals, dtype=bool)
    theirs[~present] = None  # the other side is right there
    return present, same, theirs


def compare(target: Side, base: Side, baseline: str) -> tuple[list[Finding], dict[str, str]]:
    """(the regressions, changes and fixes one case shows between the target's side and the
    baseline's, {each compared target finding's signature: its class, "regression", "changed"
    or "shared"}); `baseline`: its spec, for the messages."""
    if target.verdict.not_target or base.verdict.not_target:
        return [], {}
    theirs, mine = _merged(base), _merged(target)
    found, classes = [], {}
    for f in target.verdict.findings:
        units = target.wrong.get(f.signature)
        if units is None:
            continue
        counts = {"regression": 0, "changed": 0, "shared": 0}
        rows: dict[str, list[dict]] = {"regression": [], "changed": []}
        noun = None
        for place, (idx, vals, shape) in units.items():
            noun = noun or place[0]
            if place[0] in base.judged:
                present, same, other = _against(idx, vals, theirs.get(place))
            else:  # the baseline's run judged nothing there: wrong on both, differently
                present, same, other = np.ones(idx.size, bool), np.zeros(idx.size, bool), \
                    np.full(idx.size, "not judged", dtype=object)
            for kind, mask in (("regression", ~present), ("changed", present & ~same), ("shared", same)):
                counts[kind] += int(mask.sum())
                if kind in rows:
                    rows[kind] += _rows(place, shape, idx, vals, other, mask, MAX_UNITS - len(rows[kind]))
        kind = "regression" if counts["regression"] else "changed" if counts["changed"] else "shared"
        classes[f.signature] = kind
        if kind == "shared":
            continue
        words = _count(counts[kind], noun)
        message = (f"{words} the baseline {baseline} gets right" if kind == "regression" else
                   f"{words} both get wrong, differently (baseline {baseline})")
        others = counts["changed"] if kind == "regression" else 0
        extra = "".join(f"; {n} {what}" for n, what in ((others, "wrong on both, differently"),
                                                        (counts["shared"], "wrong on both the same way")) if n)
        found.append(_class(kind, f, f"{message}{extra}; the target: {f.message}", tuple(rows[kind])))
    for f in base.verdict.findings:
        units = base.wrong.get(f.signature)
        if units is None:
            continue
        n, rows, noun = 0, [], None
        for place, (idx, vals, shape) in units.items():
            if place[0] not in target.judged:
                continue
            noun = noun or place[0]
            present, _, _ = _against(idx, vals, mine.get(place))
            n += int((~present).sum())
            rows += _rows(place, shape, idx, vals, None, ~present, MAX_UNITS - len(rows), who="baseline")
        if n:
            found.append(_class("fixed", f, f"the target gets {_count(n, noun)} right that baseline {baseline} "
                                            f"gets wrong; baseline: {f.message}", tuple(rows)))
    return found, classes


def _count(n: int, domain: str | None) -> str:
    noun = {"outputs": "cell", "memory": "byte", "reads": "read place"}.get(domain or "")
    return f"{n} {noun}{'s' if n != 1 else ''}" if noun else "the run"


def _rows(place: tuple, shape, idx: np.ndarray, vals: np.ndarray, other: np.ndarray | None, mask: np.ndarray,
          room: int, who: str = "target") -> list[dict]:
    """The first `room` units of `mask`, as a finding's cells: where, and what each side left there."""
    rows = []
    for k in np.flatnonzero(mask)[:max(room, 0)]:
        row: dict = {"unit": place[0]}
        if place[0] == "outputs":
            row.update(tensor=place[1], index=[int(i) for i in np.unravel_index(int(idx[k]), shape)])
        elif place[0] == "memory":
            row["byte"] = int(idx[k])
        elif place[0] == "reads":
            row.update(tensor=place[1], where=place[2])
        else:
            row["what"] = place[1]
        theirs = None if other is None else other[k]
        row[who] = _plain(vals[k])
        row["baseline" if who == "target" else "target"] = _plain(theirs)
        rows.append(row)
    return rows


def _plain(v):
    """A value as JSON holds it."""
    return int(v) if isinstance(v, (np.integer, int)) and not isinstance(v, bool) else v


def _class(kind: str, f: Finding, message: str, cells: tuple = ()) -> Finding:
    return Finding(kind, f.op, f.path, f.tensor, f"{f.kind}.{f.where}", message, cells or f.cells)


def with_baseline(p: Prepared, outcome: Outcome, verdict: Verdict, baseline: str) -> Verdict:
    """`verdict` (the target's) with the classes its case shows against the baseline's run:
    each compared finding marked with its class (`Finding.against`), and the regression,
    change and fix findings added."""
    b = outcome.baseline
    base = quick_verdict(p, b) or judge(p.case, b, prepared=p)
    if not verdict.findings and not base.findings:
        return verdict
    found, classes = compare(side(p, outcome, verdict), side(p, b, base), baseline)
    verdict.findings = [dataclasses.replace(f, against=classes[f.signature]) if f.signature in classes else f
                        for f in verdict.findings] + found
    return verdict


class BaselineExecutor:
    """The campaign's executor plus the baseline's. What the target is, its compile counts and
    description are the primary's; what the pair can run (`missing`, `variants`, `lacks`,
    `takes`) is what both can."""

    description = _primarys("description")
    identity = _primarys("identity")
    launch_keys = _primarys("launch_keys")
    compiled = _primarys("compiled")

    def __init__(self, primary: Executor, baseline: Executor, spec: str, missing: dict, variants: dict,
                 fresh_primary: Callable[[], Executor] | None = None,
                 fresh_baseline: Callable[[], Executor] | None = None) -> None:
        self.primary, self.baseline, self.spec = primary, baseline, spec
        self.missing, self.variants = missing, variants
        self.fresh_primary, self.fresh_baseline = fresh_primary, fresh_baseline
        self._pending: tuple | None = None

    @property
    def lacks(self) -> dict:
        a, b = self.primary.lacks, self.baseline.lacks
        return {op: tuple(dict.fromkeys((*a.get(op, ()), *b.get(op, ())))) for op in {*a, *b}}

    @property
    def takes(self) -> dict:
        a, b = self.primary.takes, self.baseline.takes
        return {op: tuple(x for x in a.get(op, ()) if x in b.get(op, ())) for op in a}

    def run(self, case: Case, repeats: int = 1, torch_ref: bool | None = None) -> Outcome:
        out = self.primary.run(case, repeats, torch_ref)
        out.baseline = self._theirs(self.baseline.run(case, repeats, torch_ref=False), out)
        return out

    @staticmethod
    def _theirs(b: Outcome, mine: Outcome) -> Outcome:
        # one torch oracle for both: it depends on the case, not on the target
        b.torch_ref, b.torch_ref_error = mine.torch_ref, mine.torch_ref_error
        return b

    def submit(self, image: np.ndarray, batch: list[Launch]) -> None:
        """Both workers start on the same image at once; the baseline without the torch oracle.
        Neither proves a run clean on the device: the comparison of the two reads both runs' bytes."""
        batch = [dataclasses.replace(b, expect=None) for b in batch]
        self.primary.submit(image, batch)
        sub = [dataclasses.replace(b, torch_ref=False) for b in batch]
        self.baseline.submit(image, sub)
        self._pending = (image, sub)

    def collect(self) -> BatchResult:
        (image, sub), self._pending = self._pending, None
        result = self.primary.collect()
        other = self.baseline.collect()  # always: the baseline worker's protocol stays in step
        if result.lost:  # the engine re-runs it case by case (`run` pairs each case)
            return result
        if other.lost:  # pin the loss on its case: each launch alone, on the same image
            runs = [_single(self.baseline.run_batch(image, [b]), b) for b in sub]
        else:
            runs = outcomes(sub, other)
            for name, sec in other.stages.items():
                result.stages[f"baseline {name}"] = result.stages.get(f"baseline {name}", 0.0) + sec
        for i, r in enumerate(runs):
            r.torch_ref, r.torch_ref_error = result.torch_refs[i], result.torch_errors[i]
        result.baseline = dict(enumerate(runs))
        return result

    def run_batch(self, image: np.ndarray, batch: list[Launch]) -> BatchResult:
        self.submit(image, batch)
        return self.collect()

    def fresh(self) -> "BaselineExecutor":
        """A target process that has run no case (confirmations), beside the baseline's (`_theirs`)."""
        return self._paired(self.fresh_primary() if self.fresh_primary else self.primary.fresh(),
                            self.fresh_baseline() if self.fresh_baseline else _Lent(self.baseline))

    def fresh_many(self, n: int) -> list["BaselineExecutor"]:
        """`n` fresh target processes, started together, each beside the baseline's. What a
        confirmation proves in fresh processes is the target's wrong answer; the baseline's
        side of the comparison runs in the pair's own baseline worker (lent, not closed), so a
        confirmation starts `n` processes, not `2n`. Running in this process (`--in-process`),
        the baseline's side gets fresh workers too: a crash there must not end the campaign."""
        mine = _many(self.fresh_primary, n) if self.fresh_primary else self.primary.fresh_many(n)
        theirs = _many(self.fresh_baseline, n) if self.fresh_baseline else [_Lent(self.baseline)] * n
        return [self._paired(a, b) for a, b in zip(mine, theirs)]

    def _paired(self, a: Executor, b: Executor) -> "BaselineExecutor":
        return BaselineExecutor(a, b, self.spec, self.missing, self.variants)

    def close(self) -> None:
        """Both workers closed at once, each with its bounded wait (a worker that does not exit
        in time is killed): closing the pair costs one wait, not two."""
        other = threading.Thread(target=self.baseline.close, name="kvfuzz-close-baseline", daemon=True)
        other.start()
        try:
            self.primary.close()
        finally:
            other.join()


class _Lent:
    """The pair's baseline worker lent to a confirmation: it runs the confirmation's cases (one
    at a time, between the engine's batches) and stays open when the confirmation closes it."""

    def __init__(self, executor: Executor) -> None:
        self._executor = executor

    def __getattr__(self, name: str):
        return getattr(self._executor, name)

    def close(self) -> None:
        pass


def common_ground(primary: Executor, baseline: Executor, spec: str) -> tuple[dict, dict]:
    """(missing, variants) of the pair: an op either target lacks is missing, with the reason;
    each other op is drawn with the target's contract variant where the baseline takes its
    arguments, else with the baseline's where the target takes its, else it is missing too."""
    missing = dict(primary.missing)
    variants = {}
    for op, mine in primary.variants.items():
        if op in missing:
            continue
        if op in baseline.missing:
            missing[op] = f"baseline {spec}: {baseline.missing[op]}"
            continue
        theirs = baseline.variants.get(op, mine)
        if mine == theirs or not variant_lacks(op, mine, baseline):
            variants[op] = mine
        elif not variant_lacks(op, theirs, primary):
            variants[op] = theirs
        else:
            missing[op] = (f"the target and baseline {spec} cannot be compared: the target's variant {mine} "
                           f"passes {', '.join(variant_lacks(op, mine, baseline))}, which the baseline does not "
                           f"take, and the baseline's {theirs} passes {', '.join(variant_lacks(op, theirs, primary))}, "
                           "which the target does not take")
    return missing, variants


def pair(primary: Executor, fresh_primary: Callable[[], Executor] | None, target: str, spec: str, device: str,
         timeout_s: float, isolate: bool = True, standby: bool = False,
         ops: list[str] | None = None) -> BaselineExecutor:
    """`primary` joined by an executor for the baseline `spec` (a worker process when `isolate`),
    or BadInput, in one line, where the two cannot be compared: the baseline does not load,
    or no op of `ops` (None: every op) runs on both."""
    try:
        baseline = WorkerExecutor(spec, device, timeout_s, standby=standby) if isolate else \
            InProcessExecutor(spec, device)
    except TargetLoadError as exc:
        raise BadInput(f"--baseline {spec}: {exc}") from None
    missing, variants = common_ground(primary, baseline, spec)
    wanted = ops or list(primary.variants) + list(primary.missing)
    if not any(op not in missing for op in wanted):
        baseline.close()
        first = next((op for op in wanted if op in missing), None)
        raise BadInput(f"--baseline {spec}: target {target} and the baseline have no op in common to compare"
                       + (f" ({first}: {missing[first]})" if first else ""))
    fresh_baseline = None if isolate else (lambda: WorkerExecutor(spec, device, timeout_s))
    return BaselineExecutor(primary, baseline, spec, missing, variants, fresh_primary, fresh_baseline)


# --- a class finding's defect against the baseline's (docs/regressions.md, "New defect or new symptom")
NEW_DEFECT = "new_defect"  # its site is a statement the baseline goes wrong at nowhere seen
NEW_SYMPTOM = "new_symptom"  # its site is a statement the baseline also goes wrong at: a known defect's new symptom
SITE_UNKNOWN = "site_unknown"  # no site (a crash, a GPU fault, no attribution): cannot tell
DEFECT_WORDS = {NEW_DEFECT: "new defect", NEW_SYMPTOM: "new symptom of a known defect", SITE_UNKNOWN: "site unknown"}


def statement(site: dict | None) -> tuple | None:
    """The statement a site names, comparable between two kernel files (line numbers move from
    one release to the next, and a copy has another file name): (kernel, tl.load/tl.store, the
    statement's text without spaces); None where there is no site."""
    if not isinstance(site, dict) or "line" not in site:
        return None
    return site.get("kernel"), site.get("op"), "".join(str(site.get("text", "")).split())


def defect_against(site: dict | None, baseline_sites: list[dict], why_unknown: str = "") -> dict:
    """Whether a class finding with `site` is a new defect or a new symptom of one the baseline
    has (`baseline_sites`: where the baseline goes wrong on the finding's case and on the cases
    it shares with the target). A one-line defect in a statement's own text is a new defect
    (the baseline's statement reads otherwise); one upstream of a store the baseline already
    gets wrong is that store's new symptom."""
    mine = statement(site)
    if mine is None:
        return {"is": SITE_UNKNOWN, "why": why_unknown or (site or {}).get("none") or "no site"}
    for b in baseline_sites:
        if statement(b) == mine:
            return {"is": NEW_SYMPTOM, "baseline_site": f"{b.get('file')}:{b.get('line')}"}
    return {"is": NEW_DEFECT}


def defect_words(entry: dict | None) -> str:
    """"new defect", "new symptom of a known defect", "site unknown" (or "" where not judged)."""
    return DEFECT_WORDS.get((entry or {}).get("is"), "")


def against_line(entry: dict) -> str:
    """A class finding's defect in words, for the console: "new defect", "new symptom of a
    known defect (the baseline goes wrong at metadata.py:97 too)", "site unknown (why)"."""
    words = defect_words(entry)
    if entry.get("is") == NEW_SYMPTOM and entry.get("baseline_site"):
        return f"{words} (the baseline goes wrong at {entry['baseline_site']} too)"
    if entry.get("is") == SITE_UNKNOWN and entry.get("why"):
        return f"{words} ({entry['why']})"
    return words
