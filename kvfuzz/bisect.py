"""Which SGLang release introduced a saved case's defect, and which fixed it (`kvfuzz bisect`).

Each case is replayed on every release of a range of the releases kvfuzz knows
(`targets.releases.known_releases`), and on `builtin`, through the checking path `kvfuzz replay
--target` takes: a `Checker` on a `WorkerExecutor`, the case judged by the contract variant the
release selects (its own variant on the release it was found with). A kernel file is run once,
by one executor that every case of its ops goes through, and its result is given to every release
that ships the same file (`file_release`, `same_file_releases`). The file is the case op's
(`OpRecord.source_file`): a decode case groups the releases sharing metadata.py, a
flashinfer_kv_indices case those sharing kv_indices.py (0.5.20 - 0.5.22 share one metadata.py,
0.5.22's kv_indices.py is its own), so one `sglang==X` target can stand for different release
groups in different cases.

A cell is `defect` (the saved signature shows; a memory-fault crash under either backend's
name, SIGSEGV under the interpreter or cuda_fault on a GPU, is the same defect), `clean` (nothing shows), `other: SIG` (another
finding shows), `-` (the release cannot take the case: it has no such op, or the case uses an
argument the release does not take) or `error: ...` (kvfuzz could not run it). `history` reads a
case's cells in release order: the first release showing the defect, the last clean one before
it, where it was introduced and fixed, and each interval where it shows. Only `defect` says the
defect is there and only `clean` says it is gone; `-`, `other` and `error` say neither.

`write_meta` records in a triaged case (an xfail defect of an SGLang release) `meta.affects`,
the releases showing the defect with those shipping the same file (what the pytest plugin holds
`--kvfuzz-target sglang==X` to), `meta.introduced_in` and `meta.fixed_in`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from .corpus import SavedCase
from .errors import BadInput
from .findings import backend_neutral, ordinary_signature
from .targets.releases import METADATA, file_release, known_releases, op_file, same_file_releases

DEFECT, CLEAN, CANNOT = "defect", "clean", "-"
DEFAULT_RANGE = "0.5.6..0.5.23"
BUILTIN = "builtin"
META_KEYS = ("affects", "introduced_in", "fixed_in")


# ----------------------------------------------------------------------------- the range


def parse_releases(text: str) -> tuple[str, ...]:
    """The releases `--releases` names, oldest first: `A..B` (every known release from A to B,
    .post releases included) or `X,Y,Z`. A name may carry `sglang==`. BadInput, one line, for
    an unknown release, a malformed range or one that runs backwards."""
    known = known_releases()
    spec = (text or "").strip()
    shape = f"--releases {text!r}: expected A..B or X,Y,Z over the releases kvfuzz knows ({known[0]} - {known[-1]})"

    def one(name: str) -> str:
        v = name.strip()
        v = v[len("sglang=="):] if v.startswith("sglang==") else v
        if v not in known:
            raise BadInput(f"--releases: {name.strip()!r} is not an SGLang release kvfuzz knows "
                           f"({known[0]} - {known[-1]} and their .post releases; docs/releases.md)")
        return v

    if ".." in spec:
        parts = spec.split("..")
        if len(parts) != 2 or "," in spec or any(not p.strip() or p.strip().startswith(".") or p.strip().endswith(".")
                                                 for p in parts):
            raise BadInput(shape)
        first, last = (known.index(one(p)) for p in parts)
        if first > last:
            raise BadInput(f"--releases {spec}: {known[first]} comes after {known[last]}")
        return known[first:last + 1]
    parts = spec.split(",")
    if not spec or any(not p.strip() for p in parts):
        raise BadInput(shape)
    chosen = {one(p) for p in parts}
    return tuple(v for v in known if v in chosen)


def files_of(releases: Sequence[str], file: str = METADATA) -> tuple[str, ...]:
    """The distinct copies of the kernel file `file` in `releases`, each named by the release
    whose copy it is."""
    return tuple(dict.fromkeys(file_release(v, file) for v in releases))


def case_file(saved: SavedCase) -> str:
    """The kernel file of the case's op (metadata.py, kv_indices.py)."""
    return op_file(saved.case.op)


def targets_of(releases: Sequence[str], saved: Sequence[SavedCase]) -> tuple[str, ...]:
    """The releases whose kernel files the cases run on, in release order: for each kernel file
    the cases' ops live in, each distinct copy of it in `releases`, named by the release whose
    copy it is (metadata.py's for no case)."""
    files = tuple(dict.fromkeys(case_file(s) for s in saved)) or (METADATA,)
    return tuple(dict.fromkeys(file_release(v, f) for v in releases for f in files))


def spans(releases: Sequence[str], file: str = METADATA) -> list[tuple[str, str, str]]:
    """(first, last, release) of each run of consecutive releases that ship one copy of `file`
    (named by the release whose copy it is)."""
    out: list[tuple[str, str, str]] = []
    for v in releases:
        f = file_release(v, file)
        if out and out[-1][2] == f:
            out[-1] = (out[-1][0], v, f)
        else:
            out.append((v, v, f))
    return out


def span_name(first: str, last: str) -> str:
    return first if first == last else f"{first} - {last}"


# ----------------------------------------------------------------------------- the history


@dataclass(frozen=True)
class Interval:
    """A run of releases showing the defect, with no clean release inside it."""

    first: str
    last: str
    fixed_in: str | None  # the first clean release after it (None: none in the range)


@dataclass(frozen=True)
class History:
    kind: str  # "never", "always" (every release shows it), "monotone" (one interval), "non_monotone"
    first_bad: str | None = None
    last_good: str | None = None  # the last clean release before first_bad
    last_bad: str | None = None
    introduced_in: str | None = None  # first_bad, unless it is the range's first release
    fixed_in: str | None = None  # the first clean release after last_bad
    intervals: tuple[Interval, ...] = ()
    before: str = ""  # what the releases before first_bad are, when none of them is clean
    after: str = ""  # what the releases after last_bad are, when none of them is clean

    def lines(self) -> list[str]:
        """What `kvfuzz bisect` says about the history, a line each."""
        if self.kind == "never":
            return ["never shows in the range"]
        if self.kind == "always":
            return ["present in every release in the range"]
        out = [f"first bad {self.first_bad}, " + (
            f"last good before it {self.last_good}" if self.last_good else
            "the first release in the range" if self.introduced_in is None else
            f"no good release before it ({self.before})")]
        start = (f"introduced in {self.introduced_in}" if self.introduced_in else
                 f"present from the first release in the range ({self.first_bad})")
        end = (f"fixed in {self.fixed_in}" if self.fixed_in else
               f"not fixed in the range (last bad {self.last_bad}" + (f"; {self.after})" if self.after else ")"))
        out.append(f"{start}; {end}")
        if self.kind == "non_monotone":
            out.append("not monotone: " + ", ".join(
                span_name(i.first, i.last) + (f" (clean in {i.fixed_in})" if i.fixed_in else " (to the end of the range)")
                for i in self.intervals))
        return out


def history(rows: Sequence[tuple[str, str]]) -> History:
    """The history of one defect from its cells in release order, `(release, cell)`."""
    bad = [i for i, (_, cell) in enumerate(rows) if cell == DEFECT]
    if not bad:
        return History("never")
    clean = [i for i, (_, cell) in enumerate(rows) if cell == CLEAN]

    def next_clean(after: int) -> str | None:
        return next((rows[k][0] for k in clean if k > after), None)

    runs, start = [], bad[0]
    for prev, i in zip(bad, bad[1:]):
        if any(prev < k < i for k in clean):  # a clean release between two bad ones ends a run
            runs.append((start, prev))
            start = i
    runs.append((start, bad[-1]))
    intervals = tuple(Interval(rows[a][0], rows[b][0], next_clean(b)) for a, b in runs)
    first = bad[0]
    last_good = next((rows[k][0] for k in reversed(clean) if k < first), None)
    kind = "always" if len(bad) == len(rows) else "monotone" if len(intervals) == 1 else "non_monotone"
    fixed = intervals[-1].fixed_in
    after = rows[bad[-1] + 1:]
    return History(kind, rows[first][0], last_good, rows[bad[-1]][0], rows[first][0] if first else None,
                   fixed, intervals, "" if last_good else _neither(rows[:first], "before"),
                   "" if fixed or not after else _neither(after, "after"))


def _neither(rows: Sequence[tuple[str, str]], where: str) -> str:
    """What releases that are neither bad nor clean are."""
    cells = {cell for _, cell in rows}
    return (f"the releases {where} it cannot run the case" if cells == {CANNOT} else
            f"the releases {where} it show other findings, cannot run the case or could not be run")


# ----------------------------------------------------------------------------- running cases


@dataclass
class Result:
    """One case over the range: its cells per kernel file (`sglang==F`) and on `builtin`."""

    path: Path
    saved: SavedCase
    releases: tuple[str, ...]
    cells: dict[str, str] = field(default_factory=dict)  # target spec -> cell
    why: dict[str, str] = field(default_factory=dict)  # target spec -> why `-` or an error

    @property
    def signature(self) -> str:
        """The defect looked for: the saved finding's, or for a regression, fix or change
        found against a baseline the ordinary finding it stands on (a fix's: the baseline's)."""
        return ordinary_signature(self.saved.finding.signature)

    @property
    def file(self) -> str:
        """The kernel file of the case's op: what groups its releases."""
        return case_file(self.saved)

    def cell(self, release: str) -> str:
        return self.cells[f"sglang=={file_release(release, self.file)}"]

    @property
    def rows(self) -> list[tuple[str, str]]:
        return [(v, self.cell(v)) for v in self.releases]

    @property
    def builtin(self) -> str:
        return self.cells[BUILTIN]

    @property
    def history(self) -> History:
        return history(self.rows)

    @property
    def recorded_affects(self) -> list[str] | None:
        got = self.saved.case.meta.get("affects")
        return list(got) if got is not None else None

    def affects(self) -> list[str]:
        """meta.affects after this run: the releases showing the defect, with every release that
        ships the same file; what the case recorded for releases this run did not cover is kept."""
        own = files_of(self.releases, self.file)
        covered = {f"sglang=={v}" for f in own for v in same_file_releases(f, self.file)}
        bad = {f"sglang=={v}" for f in own if self.cells[f"sglang=={f}"] == DEFECT
               for v in same_file_releases(f, self.file)}
        return sorted((set(self.recorded_affects or ()) - covered) | bad)

    def meta(self) -> dict:
        h = self.history
        return {"affects": self.affects(), "introduced_in": h.introduced_in, "fixed_in": h.fixed_in}

    @property
    def defect(self) -> str:
        """The defect the case shows (docs/defects.md): its op and site statement, or where the
        case records no site, "site unknown" with its signature (each such case alone)."""
        from .sites.defects import defect_key, defect_name

        key = defect_key(self.saved.case.op, self.saved.case.meta.get("site"))
        return defect_name(key) if key is not None else f"{self.saved.finding.signature} (site unknown)"

    def to_json(self) -> dict:
        h = self.history
        return {"case": str(self.path), "op": self.saved.case.op, "signature": self.signature,
                "defect": self.defect,
                "found_with": self.saved.target, "expected": self.saved.expected,
                "releases": {v: cell for v, cell in self.rows}, "builtin": self.builtin,
                "cells": dict(self.cells), "why": dict(self.why),
                "history": h.kind, "first_bad": h.first_bad, "last_good": h.last_good, "last_bad": h.last_bad,
                "introduced_in": h.introduced_in, "fixed_in": h.fixed_in,
                "intervals": [{"first": i.first, "last": i.last, "fixed_in": i.fixed_in} for i in h.intervals],
                "affects": self.affects(), "recorded_affects": self.recorded_affects,
                "writable": writable(self.saved) is None}


def why_not_bisected(saved: SavedCase) -> str | None:
    """Why a case cannot be bisected, or None."""
    if saved.finding is None:
        return "it records no finding: there is no defect to look for"
    if saved.case.meta.get("cross_check"):
        return (f"a divergence between {saved.device} and {saved.case.meta['cross_check']}: bisect replays "
                "on one backend (kvfuzz replay runs both)")
    return None


def writable(saved: SavedCase) -> str | None:
    """Why `--write` leaves a case alone, or None: only a triaged defect of an SGLang release
    (an xfail case found with `sglang==X`) has the meta.affects the pytest plugin reads."""
    if saved.expected != "xfail":
        return "a must-pass case (the pytest plugin reads meta.affects of xfail cases only)"
    if not saved.target.startswith("sglang=="):
        return f"a defect of {saved.target}, not of an SGLang release"
    return None


def cannot_take(saved: SavedCase, executor) -> str | None:
    """Why the target behind `executor` cannot run the case (`-`), or None: it has no such op
    (or has one kvfuzz does not offer: docs/releases.md), or the case uses an argument of a later release that the target does not take (an optional
    tensor it lacks, a table, a flag set, a multiplier other than 1)."""
    from .ops import CONTRACTS

    case = saved.case
    if case.op in executor.missing:  # absent, or there but not offered (0.5.6 - 0.5.9's torch decode)
        offered = not str(executor.missing[case.op]).startswith("not offered")
        return f"no {case.op}" if offered else f"{case.op} not offered (docs/releases.md)"
    lacks = [n for n in executor.lacks.get(case.op, ()) if n in case.tensors]
    later = dict.fromkeys(a for args in CONTRACTS[case.op].variant_args.values() for a in args)
    takes = executor.takes.get(case.op, ())
    lacks += [a for a in later if a not in takes and a not in lacks and _uses(case, a)]
    return f"cannot take {', '.join(lacks)}" if lacks else None


def _uses(case, name: str) -> bool:
    """Whether the case passes `name` with a value that turns its path on (absent, None, False
    and a multiplier of 1 turn it off: docs/releases.md)."""
    if name in case.tensors:
        return True
    v = case.scalars.get(name)
    return not (v is None or v is False or (type(v) is int and v == 1))


def judge_on(executor, spec: str, saved: SavedCase) -> tuple[str, str]:
    """(cell, why) of one case on one target."""
    from .check import Checker

    why = cannot_take(saved, executor)
    if why:
        return CANNOT, why
    try:
        checker = Checker.for_saved(executor, saved.case, spec, spec == saved.target)
        got = checker.check(checker.adopt(saved.case), repeats=2).signatures()
    except Exception as exc:  # kvfuzz could not run it: said, never taken for clean
        text = f"{type(exc).__name__}: {exc}".splitlines()[0]
        return f"error: {text[:120]}", text
    sig = ordinary_signature(saved.finding.signature)
    if sig not in got and backend_neutral(sig) in {backend_neutral(s) for s in got}:
        sig = next(s for s in got if backend_neutral(s) == backend_neutral(sig))  # the other backend's name
    return (DEFECT if sig in got else CLEAN if not got else "other: " + ", ".join(sorted(got))), ""


def run(cases: Sequence[tuple[Path, SavedCase]], releases: Sequence[str], device: str,
        progress: Callable[[str], None] | None = None, make_executor=None) -> list[Result]:
    """Every case on every distinct copy of its op's kernel file in `releases` (targets_of) and
    on builtin: one worker per target, started once and given every case it stands for, then closed."""
    if make_executor is None:
        from .worker import WorkerExecutor as make_executor
    results = [Result(path, saved, tuple(releases)) for path, saved in cases]
    for v in targets_of(releases, [saved for _, saved in cases]):
        mine = [r for r in results if v in files_of(releases, r.file)]
        groups = {}  # file -> the releases this target's copy of it stands for, where more than itself
        for r in mine:
            group = same_file_releases(v, r.file)
            if len(group) > 1:
                groups[r.file] = span_name(group[0], group[-1])
        label = "; ".join(f"the {f} of {span}" for f, span in groups.items())
        _run_target(f"sglang=={v}", mine, device, make_executor, progress, f" ({label})" if label else "")
    _run_target(BUILTIN, results, device, make_executor, progress)
    return results


def _run_target(spec: str, results: list[Result], device: str, make_executor, progress, label: str = "") -> None:
    """The cells of `results` (the cases the target stands for) on one target."""
    t0 = time.monotonic()
    executor = make_executor(spec, device)
    try:
        for r in results:
            r.cells[spec], why = judge_on(executor, spec, r.saved)
            if why:
                r.why[spec] = why
    finally:
        executor.close()
    if progress:
        shown = sum(r.cells[spec] == DEFECT for r in results)
        progress(f"{spec}{label}: {len(results)} cases in {time.monotonic() - t0:.1f} s, the defect shows in {shown}")


# ----------------------------------------------------------------------------- output


def by_defect(results: Sequence[Result]) -> list[tuple[str, list[Result]]]:
    """`results` grouped by the defect each case shows (`Result.defect`: findings of one site are
    one defect), in the order each defect's first case comes."""
    groups: dict[str, list[Result]] = {}
    for r in results:
        groups.setdefault(r.defect, []).append(r)
    return list(groups.items())


def render_defect(n: int, defect: str, results: Sequence[Result]) -> list[str]:
    """A defect's header line: its cases, and where they say it was introduced and fixed."""
    said: dict[str, int] = {}  # what the cases' histories say (introduced, fixed) -> how many say it
    for r in results:
        lines = r.history.lines()
        text = lines[1] if len(lines) > 1 else lines[0]
        said[text] = said.get(text, 0) + 1
    where = "; ".join(t + (f" ({k} cases)" if len(said) > 1 else "") for t, k in said.items())
    return [f"defect {n}: {defect}: {len(results)} case{'s' if len(results) > 1 else ''}; {where}"]


def render(r: Result) -> list[str]:
    """The lines `kvfuzz bisect` prints for one case."""
    s = r.saved
    saved_as = "" if r.signature == s.finding.signature else f"saved as {s.finding.signature}, "
    lines = [f"{r.path}  {r.signature}  ({saved_as}found with {s.target}, {s.expected})"]
    rows = [(span_name(a, b), r.cells[f"sglang=={f}"], r.why.get(f"sglang=={f}", ""))
            for a, b, f in spans(r.releases, r.file)]
    rows.append((BUILTIN, r.builtin, r.why.get(BUILTIN, "")))
    width = max(len(name) for name, _, _ in rows)
    for name, cell, why in rows:
        loud = name == BUILTIN and cell not in (CLEAN, CANNOT)
        shown = cell.upper() if loud and cell == DEFECT else cell
        note = ("  <-- BUILTIN IS NOT CLEAN: kvfuzz's own kernel fails this case" if loud else
                f"  {why}" if cell == CANNOT and why else "")
        lines.append(f"  {name.ljust(width)}  {shown}{note}")
    lines += [f"  {line}" for line in r.history.lines()]
    recorded = r.recorded_affects
    if recorded is not None:
        new = r.affects()
        if new == sorted(recorded):
            lines.append("  meta.affects: as recorded")
        else:
            add, drop = sorted(set(new) - set(recorded)), sorted(set(recorded) - set(new))
            lines.append("  meta.affects: differs from the recorded one:"
                         + (f" adds {', '.join(add)}" if add else "") + ("," if add and drop else "")
                         + (f" drops {', '.join(drop)}" if drop else ""))
    return lines


def write_meta(r: Result) -> bool:
    """Record meta.affects, introduced_in and fixed_in in the case (atomically; nothing else in
    it changes). False when they were already what it holds."""
    from .corpus import set_meta

    meta = r.meta()
    if all(k in r.saved.case.meta and r.saved.case.meta[k] == v for k, v in meta.items()):
        return False
    set_meta(r.path, meta)
    return True
