#!/usr/bin/env python3
"""Whether `kvfuzz replay`, a case's full repro script and its short one say the same thing.

For every saved case under the corpus roots and every target it is checked on, three verdicts,
each from a process of its own, each an exit code read as pass (0), fail (1) or cannot run (2):

* `kvfuzz replay CASE --target T`;
* the full script (`kvfuzz replay --emit-repro F`) run on T's kernel file;
* the short script (`--emit-repro F --short`) run on T's kernel file, where the case has one
  (a finding only the guarded arena shows gets the full script only).

A case is checked on its own target, on builtin (kvfuzz/kernels), and, where it was triaged over
releases (`meta["affects"]`, `kvfuzz bisect --write`), on every SGLang release kvfuzz knows from
one before the first release it affects to one after the last. A (case, target) row agrees where
every verdict is the same, a script that refuses the file in one line (exit 2) where replay judged
it aside: a refusal claims nothing, and the table lists it apart; each disagreement is named
with its cause (`cause`).

    python3 scripts/check_repros.py [corpora ...] [--cases KEY,...] [--releases 0.5.14,0.5.17]
                                    [--no-builtin] [--device cpu|cuda] [--jobs N] [--json OUT.json]

Prints the table (agree / disagree counts, then each disagreement); exits 1 if any row
disagrees, 2 on bad input.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kvfuzz.corpus import CASE_FILE, read_case_dir  # noqa: E402
from kvfuzz.errors import BadCaseFile, TargetLoadError  # noqa: E402
from kvfuzz.targets.releases import known_releases  # noqa: E402

BUILTIN = ROOT / "kvfuzz" / "kernels"
VERDICTS = {0: "pass", 1: "fail", 2: "cannot-run"}
TOOLS = ("replay", "full", "short")


class Usage(Exception):
    """Bad input: one line, exit status 2."""


@dataclass
class Run:
    """One tool's run: its exit code read as a verdict, and what explains it."""

    rc: int | None  # None: it did not run (the case has no short script)
    verdict: str  # pass | fail | cannot-run | timeout | killed by signal N | exit N | -
    raised: str | None = None  # the exception a script died of, other than its own AssertionError
    variant: str | None = None  # replay: the contract variant it judged the case by
    varies: bool = False  # replay: the verdict differed between its runs ("shown in k of n runs")
    tail: str = ""  # the last line of stderr (stdout where stderr is empty)


@dataclass
class Row:
    case: str  # the case folder's name (its corpus key)
    op: str
    kind: str | None  # the saved finding's kind
    variant: str  # the saved case's contract variant
    target: str
    runs: dict[str, Run] = field(default_factory=dict)
    cause: str | None = None  # why the verdicts disagree; None where they agree

    @property
    def refused(self) -> list[str]:
        """The scripts that refused the target's file in one line (exit 2: cannot run this
        file), where replay judged it: a refusal claims nothing, so it is no disagreement."""
        replay = self.runs.get("replay")
        if replay is None or replay.verdict == "cannot-run":
            return []
        return [t for t, r in self.runs.items() if t != "replay" and r.verdict == "cannot-run"]

    @property
    def agrees(self) -> bool:
        refused = self.refused
        return len({r.verdict for t, r in self.runs.items()
                    if (r.rc is not None or r.verdict != "-") and t not in refused}) <= 1


def verdict_of(rc: int) -> str:
    if rc in VERDICTS:
        return VERDICTS[rc]
    if rc == 124:
        return "timeout"
    return f"killed by signal {-rc}" if rc < 0 else f"exit {rc}"


_EXC = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt))\b")


def raised(stderr: str) -> str | None:
    """The exception a process died of (its traceback's last line), other than the
    AssertionError a short script fails with."""
    if "Traceback (most recent call last)" not in stderr:
        return None
    last = [line for line in stderr.strip().splitlines() if _EXC.match(line)]
    name = _EXC.match(last[-1]).group(1) if last else "an exception"
    return None if name == "AssertionError" else name


def judged_variant(stdout: str) -> str | None:
    """The contract variant replay judged by, from its first line `case KEY (op [variant], ...)`."""
    m = re.search(r"\(\S+ \[([^\]]+)\]", stdout.splitlines()[0] if stdout else "")
    return m.group(1) if m else None


def cause(row: Row) -> str | None:
    """Why a row's verdicts disagree: every cause that applies, joined by '; ' (the first names
    the row's class in the table's counts); None where they agree."""
    if row.agrees:
        return None
    replay = row.runs.get("replay")
    scripts = {t: r for t, r in row.runs.items() if t != "replay" and r.rc is not None}
    causes = [f"script raised: the {tool} script died of {r.raised} (exit {r.rc}, read as '{r.verdict}'), "
              "not a verdict" for tool, r in scripts.items() if r.raised]
    if replay is not None and replay.variant and replay.variant != row.variant and any(
            r.verdict != replay.verdict for r in scripts.values()):
        causes.append(f"script variant: the scripts judge by the case's variant {row.variant}; replay judges "
                      f"{row.target} by {replay.variant}")
    causes += [f"{tool} {r.verdict}: {r.tail}" for tool, r in row.runs.items()
               if r.verdict == "timeout" or r.verdict.startswith(("killed", "exit"))]
    if replay is not None and replay.varies:
        causes.append("varies: replay's runs differ by nature (shown in k of n runs)")
    return "; ".join(causes) or "other: " + "; ".join(f"{t} {r.verdict}" for t, r in row.runs.items())


# --------------------------------------------------------------------------- what to check


def release_targets(affects, known: tuple[str, ...]) -> list[str]:
    """`sglang==X` for every release in `known` (oldest first) from one before the first of
    `affects` to one after the last; releases kvfuzz does not know are ignored."""
    at = [known.index(t.split("==", 1)[1]) for t in affects if t.startswith("sglang==")
          and t.split("==", 1)[1] in known]
    if not at:
        return []
    lo, hi = max(min(at) - 1, 0), min(max(at) + 1, len(known) - 1)
    return [f"sglang=={v}" for v in known[lo : hi + 1]]


def targets_of(saved, known: tuple[str, ...], releases: set[str] | None = None, builtin: bool = True) -> list[str]:
    """The targets a case is checked on: its own, builtin (unless not `builtin`), and the releases
    in and around its `affects` range (only those in `releases` where given)."""
    around = release_targets(saved.case.meta.get("affects", ()), known)
    if releases is not None:
        around = [t for t in around if t.split("==", 1)[1] in releases]
    own = saved.target
    if releases is not None and own.startswith("sglang==") and own.split("==", 1)[1] not in releases:
        own = None
    return list(dict.fromkeys(t for t in (own, "builtin", *around) if t and (builtin or t != "builtin")))


def kernel_path(target: str, case_dir: Path, op: str) -> Path:
    """The kernel file a target names: builtin (the package folder), sglang==X (the release's file
    holding the op, from the cache or its wheel), or a path (as saved: from here, the checkout, the
    case folder)."""
    if target == "builtin":
        return BUILTIN
    if target.startswith("sglang=="):
        from kvfuzz.ops import record
        from kvfuzz.targets.wheels import sglang_kernel_file

        return sglang_kernel_file(target.split("==", 1)[1], record(op).source_file)
    for base in (Path.cwd(), ROOT, case_dir):
        if (base / target).exists():
            return base / target
    raise TargetLoadError(f"{target} is not a file here")


# --------------------------------------------------------------------------- running


def run(cmd: list[str], timeout: float) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of a command run with this checkout's kvfuzz; 124 on timeout."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return 124, "", f"ran past {timeout:g} s"
    return p.returncode, p.stdout, p.stderr


KVFUZZ = [sys.executable, "-c", "import sys; from kvfuzz.cli import main; sys.exit(main())"]


def read(rc: int, out: str, err: str, tool: str) -> Run:
    lines = (err.strip() or out.strip()).splitlines()
    r = Run(rc, verdict_of(rc), tail=lines[-1][:200] if lines else "")
    if tool == "replay":
        r.variant = judged_variant(out)
        r.varies = "(its runs differ by nature)" in out
    else:
        r.raised = raised(err) if rc == 1 else None
    return r


@dataclass
class Scripts:
    """A case's scripts, written once: the full one, and the short one or why it has none."""

    full: Path
    short: Path | None


def write_scripts(saved, case_dir: Path, into: Path, device: str | None) -> Scripts:
    from kvfuzz.repro import write_repro
    from kvfuzz.short_repro import why_not_short, write_short_repro

    into.mkdir(parents=True, exist_ok=True)
    full = into / "full.py"
    write_repro(saved, full, device=device or "cpu")
    short = None
    if why_not_short(saved) is None:
        short = into / "short.py"
        write_short_repro(saved, short, case_dir.name)
    return Scripts(full, short)


def check_row(case_dir: Path, saved, target: str, scripts: Scripts, device: str | None, timeout: float,
              runner=run) -> Row:
    row = Row(case_dir.name, saved.case.op, saved.finding.kind if saved.finding else None, saved.case.variant,
              target)
    replay = KVFUZZ + ["replay", str(case_dir), "--target", target] + (["--device", device] if device else [])
    row.runs["replay"] = read(*runner(replay, timeout), "replay")
    try:
        kernels = kernel_path(target, case_dir, saved.case.op)
    except TargetLoadError as exc:  # replay said it in its own words; the scripts have no file to run
        for tool in ("full", "short"):
            row.runs[tool] = Run(2, "cannot-run", tail=str(exc))
        if scripts.short is None:
            row.runs["short"] = Run(None, "-")
        row.cause = cause(row)
        return row
    full = [sys.executable, str(scripts.full), str(kernels)] + (["--device", device] if device else [])
    row.runs["full"] = read(*runner(full, timeout), "full")
    if scripts.short is not None:  # the short script follows torch: cuda where there is one
        row.runs["short"] = read(*runner([sys.executable, str(scripts.short), str(kernels)], timeout), "short")
    else:
        row.runs["short"] = Run(None, "-")
    row.cause = cause(row)
    return row


def case_dirs(roots: list[Path], keys: list[str] | None) -> list[Path]:
    found = sorted({p.parent for root in roots for p in root.rglob(CASE_FILE)})
    if keys is not None:
        missing = [k for k in keys if not any(d.name.startswith(k) for d in found)]
        if missing:
            raise Usage(f"no case {', '.join(missing)} under {', '.join(map(str, roots))}")
        found = [d for d in found if any(d.name.startswith(k) for k in keys)]
    if not found:
        raise Usage(f"no case folders under {', '.join(map(str, roots))}")
    return found


def check(dirs: list[Path], releases: set[str] | None, device: str | None, jobs: int, timeout: float,
          workdir: Path, runner=run, builtin: bool = True) -> list[Row]:
    known = known_releases()
    work = []
    for d in dirs:
        try:
            saved = read_case_dir(d)
        except BadCaseFile as exc:
            raise Usage(f"{d}: {exc}") from None
        scripts = write_scripts(saved, d, workdir / d.name, device)
        work += [(d, saved, t, scripts) for t in targets_of(saved, known, releases, builtin)]
    with concurrent.futures.ThreadPoolExecutor(max(jobs, 1)) as pool:
        return list(pool.map(lambda w: _said(check_row(*w, device, timeout, runner)), work))


def _said(row: Row) -> Row:
    """A checked row, one line on stderr as it ends: a run cut off by its slot keeps what it did."""
    v = " ".join(f"{t}={r.verdict}" for t, r in row.runs.items())
    print(f"row {row.case} {row.target} {v} {'agree' if row.agrees else 'DISAGREE'}", file=sys.stderr, flush=True)
    return row


def table(rows: list[Row]) -> str:
    bad = [r for r in rows if not r.agrees]
    refusing = [r for r in rows if r.agrees and r.refused]
    lines = [f"{len(rows) - len(bad)} agree, {len(bad)} disagree ({len(rows)} case x target rows, "
             f"{len({r.case for r in rows})} cases)"]
    if refusing:
        lines.append(f"  of those that agree, {len(refusing)} with a script refusing the file (exit 2, one line): "
                     + ", ".join(f"{r.case[:8]} {'+'.join(r.refused)} on {r.target}" for r in refusing))
    causes: dict[str, int] = {}
    for r in bad:
        key = r.cause.split(":", 1)[0]
        causes[key] = causes.get(key, 0) + 1
    lines += [f"  {n} {key}" for key, n in sorted(causes.items(), key=lambda kv: -kv[1])]
    if bad:
        lines += ["", f"{'case':<17} {'op':<22} {'kind':<20} {'target':<16} {'replay':<10} {'full':<10} "
                  f"{'short':<10} cause"]
        for r in bad:
            v = {t: r.runs[t].verdict for t in TOOLS}
            lines.append(f"{r.case:<17} {r.op:<22} {str(r.kind):<20} {r.target:<16} {v['replay']:<10} "
                         f"{v['full']:<10} {v['short']:<10} {r.cause}")
    return "\n".join(lines)


def main(argv: list[str] | None = None, runner=run) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("roots", nargs="*", type=Path, default=[ROOT / "corpora"],
                    help="corpus folders (default: the checkout's corpora/)")
    ap.add_argument("--cases", help="comma-separated case keys (or their prefixes) to check; default: every case")
    ap.add_argument("--releases", help="comma-separated SGLang releases (0.5.14,...): check only these of each "
                    "case's releases")
    ap.add_argument("--no-builtin", action="store_true", help="leave out the builtin rows (a run split "
                    "over several machines checks builtin once)")
    ap.add_argument("--device", choices=("cpu", "cuda"), help="replay's and the full script's --device "
                    "(default: theirs, cuda if present); the short script follows torch")
    ap.add_argument("--jobs", type=int, default=1, help="rows checked at once (default 1)")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per process (default 300)")
    ap.add_argument("--json", type=Path, help="also write every row as JSON")
    args = ap.parse_args(argv)
    try:
        if args.jobs < 1:
            raise Usage("--jobs must be >= 1")
        keys = [k.strip() for k in args.cases.split(",") if k.strip()] if args.cases else None
        releases = None
        if args.releases:
            releases = {v.strip().removeprefix("sglang==") for v in args.releases.split(",") if v.strip()}
            unknown = sorted(releases - set(known_releases()))
            if unknown:
                raise Usage(f"--releases: kvfuzz knows no SGLang release {', '.join(unknown)}")
        for root in args.roots:
            if not root.is_dir():
                raise Usage(f"{root}: no such folder")
        dirs = case_dirs(args.roots, keys)
        with tempfile.TemporaryDirectory(prefix="kvfuzz-check-repros-") as tmp:
            rows = check(dirs, releases, args.device, args.jobs, args.timeout, Path(tmp), runner, not args.no_builtin)
    except Usage as exc:
        print(f"check_repros: {exc}", file=sys.stderr)
        return 2
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps([{**asdict(r), "agrees": r.agrees} for r in rows], indent=1))
    return 0 if all(r.agrees for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
