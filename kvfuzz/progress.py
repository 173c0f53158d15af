"""How a running campaign shows its progress: a live table on a terminal (rich), plain periodic
lines otherwise (CI logs, nightly logs), machine-readable lines from a `--jobs` shard.

The campaign hands a display an `OpProgress` snapshot per op (throttled there, so the fuzz
loop pays for a snapshot a few times a second, not per case) and event lines (findings,
flaky findings, an op done), which every display prints at once. A display only shows:
reports and exit statuses never depend on it.

Under `--jobs N` each shard runs with `JSON_ENV` set and writes its snapshots to stderr as
`MARK {json}` lines; the parent reads them (`jobs.py`) and shows, per op, the shards summed
(`merge`): cases, rates, classes and compiles add up (shards visit disjoint classes);
findings are summed as each shard counts them, so one defect found by two shards counts
twice here, while the merged report lists each signature once.
"""

from __future__ import annotations

import json
import os
import sys
import math
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import IO, Callable

JSON_ENV = "KVFUZZ_PROGRESS_JSON"  # set by `--jobs` for its shards
MARK = "\x1ekvfuzz-progress "  # starts a shard's snapshot line on its stderr
PLAIN_EVERY_S = float(os.environ.get("KVFUZZ_PROGRESS_EVERY", "10"))  # a plain line per op this often (logs)
SHARD_EVERY_S = 1.0  # a shard's snapshot this often (its parent redraws from them)


@dataclass
class OpProgress:
    """Where one op of one campaign (or shard) stands."""

    op: str
    target: str = ""
    device: str = ""
    shard: str = "1/1"
    cases: int = 0
    rate: float = 0.0  # cases per second of the op's fuzzing time
    new: int = 0  # confirmed findings new to the corpus
    known: int = 0  # confirmed findings the corpus already held
    flaky: int = 0
    classes: int = 0  # compile classes visited
    variants: int = 0  # Triton specialisation keys launched
    compiled: int = 0  # kernels Triton compiled or loaded (on a GPU)
    cross_checked: int = 0  # cases compared with the cross-check backend
    elapsed: float = 0.0  # seconds of the op so far
    budget: float = 0.0  # the op's generation budget (confirming and minimizing come on top)
    stage: str = "waiting"  # waiting | fuzzing | confirming | minimizing | saving | done | skipped | not run | cut short
    stages: dict[str, int] = field(default_factory=dict)  # merged rows: stage -> shards in it

    def line(self) -> str:
        """The plain one-line form."""
        found = f"{self.new} new, {self.known} known" + (f", {self.flaky} flaky" if self.flaky else "")
        shards = f" ({self.shard})" if self.shard.endswith("shards") else ""
        return (f"[{self.op}]{shards} {self.cases} cases, {self.rate:.0f} cases/s, findings {found}, "
                f"{self.classes} classes, {self.variants} variants/{self.compiled} compiled, "
                + (f"{self.cross_checked} cross-checked, " if self.cross_checked else "")
                + f"{self.elapsed:.0f}/{self.budget:.0f} s, {self.stage_text()}")

    def stage_text(self) -> str:
        if not self.stages:
            return self.stage
        return ", ".join(f"{k} {n}" for k, n in sorted(self.stages.items()))


def merge(rows: list[OpProgress]) -> OpProgress:
    """One op's shards as one row (see the module docstring for what is summed)."""
    out = OpProgress(rows[0].op, rows[0].target, rows[0].device, shard=f"{len(rows)} shards",
                     budget=max(r.budget for r in rows), elapsed=max(r.elapsed for r in rows))
    for r in rows:
        for name in ("cases", "rate", "new", "known", "flaky", "classes", "variants", "compiled", "cross_checked"):
            setattr(out, name, getattr(out, name) + getattr(r, name))
        out.stages[r.stage] = out.stages.get(r.stage, 0) + 1
    out.stage = max(out.stages, key=out.stages.get)
    return out


class Display:
    """Snapshots by (shard, op) and event lines; subclasses decide how they are shown."""

    def __init__(self) -> None:
        self.rows: dict[tuple[str, str], OpProgress] = {}
        self.lock = threading.Lock()  # `--jobs` feeds it from one reader thread per shard

    def update(self, p: OpProgress) -> None:
        with self.lock:
            self.rows[(p.shard, p.op)] = p

    def event(self, line: str) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass

    def merged(self) -> list[OpProgress]:
        """One row per op, in the order the ops first showed up."""
        with self.lock:
            by_op: dict[str, list[OpProgress]] = {}
            for (_, op), p in self.rows.items():
                by_op.setdefault(op, []).append(p)
        return [rows[0] if len(rows) == 1 and rows[0].shard == "1/1" else merge(rows) for rows in by_op.values()]


class PlainDisplay(Display):
    """A line per op with news every `every_s` seconds, and event lines as they come."""

    def __init__(self, stream: IO[str], every_s: float | None = None, prefix: str = "") -> None:
        super().__init__()
        self.stream, self.prefix = stream, prefix
        self.every_s = PLAIN_EVERY_S if every_s is None else every_s
        self.last = time.monotonic()
        self.shown: dict[str, tuple] = {}  # op -> what its last line said (an idle op is not repeated)

    def update(self, p: OpProgress) -> None:
        super().update(p)
        now = time.monotonic()
        if now - self.last >= self.every_s:
            self.last = now
            self.flush()

    def flush(self) -> None:
        for p in self.merged():
            said = (p.cases, p.new, p.known, p.flaky, p.stage_text())
            if p.stage != "waiting" and self.shown.get(p.op) != said:
                self.shown[p.op] = said
                self._write(p.line())

    def event(self, line: str) -> None:
        self._write(line)

    def close(self) -> None:
        self.flush()  # where each op ended, if its last line did not say so

    def _write(self, line: str) -> None:
        with self.lock:
            self.stream.write(self.prefix + line + "\n")
            self.stream.flush()


class ShardDisplay(Display):
    """A `--jobs` shard: snapshots as `MARK {json}` lines for the parent, events as plain lines."""

    def __init__(self, stream: IO[str], every_s: float = SHARD_EVERY_S, prefix: str = "") -> None:
        super().__init__()
        self.stream, self.every_s, self.prefix = stream, every_s, prefix
        self.sent: dict[str, float] = {}

    def update(self, p: OpProgress) -> None:
        now = time.monotonic()  # counts from an arbitrary point (a fresh machine's boot): never from 0.0
        last = self.sent.get(p.op)
        if p.stage != "fuzzing" or last is None or now - last >= self.every_s:  # a stage change at once
            self.sent[p.op] = now
            self._write(MARK + json.dumps(asdict(p)))

    def event(self, line: str) -> None:
        self._write(self.prefix + line)

    def _write(self, line: str) -> None:
        self.stream.write(line + "\n")
        self.stream.flush()


def parse(line: str) -> OpProgress | None:
    """A shard's snapshot line, or None for any other line."""
    if not line.startswith(MARK):
        return None
    try:
        return OpProgress(**json.loads(line[len(MARK):]))
    except (ValueError, TypeError):
        return None


class LiveDisplay(Display):
    """A table redrawn in place (rich's `Live`, twice a second from its own thread); event lines
    are printed above it. The last table stays on screen when the run ends."""

    def __init__(self, console) -> None:
        from rich.live import Live

        super().__init__()
        self.console = console
        self.t0 = time.monotonic()
        self.live = Live(console=console, refresh_per_second=2, get_renderable=self.render,
                         redirect_stdout=False, redirect_stderr=False)
        self.live.start()

    def render(self):
        from rich import box
        from rich.table import Table

        rows = self.merged()
        first = rows[0] if rows else OpProgress("-")
        title = f"kvfuzz fuzz {first.target} on {first.device}" + (
            f" ({first.shard})" if first.shard != "1/1" else "") + f", {time.monotonic() - self.t0:.0f} s"
        cross = any(p.cross_checked for p in rows)
        table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True,
                      caption="findings: new/known/flaky; var/comp: Triton variants launched/kernels compiled; "
                      "time: the op's seconds/its budget", caption_justify="left")
        table.add_column("op", no_wrap=True, min_width=max((len(p.op) for p in rows), default=2))
        for name in ("cases", "/s", "findings", "classes", "var/comp", *(("x-check",) if cross else ()), "time"):
            table.add_column(name, justify="right", no_wrap=True)
        table.add_column("stage", no_wrap=True)
        for p in rows:
            table.add_row(p.op, str(p.cases), f"{p.rate:.0f}", f"{p.new}/{p.known}/{p.flaky}", str(p.classes),
                          f"{p.variants}/{p.compiled}", *((str(p.cross_checked),) if cross else ()),
                          f"{p.elapsed:.0f}/{p.budget:.0f} s", p.stage_text())
        return table

    def event(self, line: str) -> None:
        self.console.print(line, markup=False, highlight=False, soft_wrap=True)

    def close(self) -> None:
        self.live.stop()


def make_display(stream: IO[str] | None = None, prefix: str = "") -> Display:
    """For `kvfuzz fuzz`: a shard's JSON lines under `--jobs`, a live table on a terminal,
    plain periodic lines otherwise (a pipe, a file, TERM=dumb)."""
    stream = sys.stderr if stream is None else stream
    if os.environ.get(JSON_ENV) == "1":
        return ShardDisplay(stream, prefix=prefix)
    from rich.console import Console

    console = Console(file=stream)
    if console.is_terminal and not console.is_dumb_terminal:
        return LiveDisplay(console)
    return PlainDisplay(stream, prefix=prefix)


def lines_to(say: Callable[[str], None], every_s: float) -> Callable[[OpProgress], None]:
    """Snapshots as a plain line through `say` at most every `every_s` (library callers that
    pass only an event callback, e.g. scripts/build_corpus.py)."""
    last = [-math.inf]  # time.monotonic() may start near 0 (a machine booted a minute ago)

    def show(p: OpProgress) -> None:
        now = time.monotonic()
        if p.stage == "fuzzing" and now - last[0] >= every_s:
            last[0] = now
            say(p.line())
    return show
