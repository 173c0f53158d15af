"""The progress display of `kvfuzz fuzz`: plain periodic lines in a log, a live rich table on a
terminal, a shard's snapshots read back by its `--jobs` parent; none of it changes a result."""

from __future__ import annotations

import io
import json

from rich.console import Console

from kvfuzz import progress
from kvfuzz.cli import main
from kvfuzz.jobs import _relay
from kvfuzz.progress import LiveDisplay, OpProgress, PlainDisplay, ShardDisplay, make_display, merge, parse


def snap(op="decode_metadata", shard="1/1", **kw) -> OpProgress:
    return OpProgress(op, "builtin", "cpu (triton interpreter)", shard, **kw)


def test_plain_lines_in_a_non_tty_run(tmp_path, capsys, monkeypatch, device):
    monkeypatch.setattr(progress, "PLAIN_EVERY_S", 0.0)  # a line at every snapshot
    report = tmp_path / "r.json"
    rc = main(["fuzz", "--op", "num_kv_splits", "--budget", "30", "--max-cases", "48", "--device", device,
               "--report", str(report)])
    out, err = capsys.readouterr()
    assert rc == 0, err
    lines = [x for x in err.splitlines() if x.startswith("[num_kv_splits] ") and " cases/s, findings " in x]
    assert len(lines) >= 2, err  # periodic lines while fuzzing, then where it ended
    assert lines[-1].startswith("[num_kv_splits] 48 cases, ") and lines[-1].endswith(", done")
    assert "0 new, 0 known" in lines[-1] and "\x1b" not in err  # no escape codes in a log
    # the report and the summary are what they always were
    doc = json.loads(report.read_text())
    assert doc["cases"] == 48 and doc["findings"] == []
    assert out.splitlines()[-1].startswith("kvfuzz: 48 cases, 0 new findings")


def test_plain_display_throttles_snapshots_not_events():
    buf = io.StringIO()
    d = PlainDisplay(buf, every_s=3600)
    d.update(snap(cases=5, stage="fuzzing"))
    d.update(snap(cases=9, stage="fuzzing"))
    d.event("  mismatch: x:y:mismatch:t:all")
    assert buf.getvalue() == "  mismatch: x:y:mismatch:t:all\n"
    d.close()  # the last state once, at the end
    assert buf.getvalue().splitlines()[1].startswith("[decode_metadata] 9 cases")
    d.close()
    assert len(buf.getvalue().splitlines()) == 2  # nothing new: not repeated


def test_rich_table_renders_on_a_terminal():
    buf = io.StringIO()
    d = LiveDisplay(Console(file=buf, force_terminal=True, width=120))
    d.update(snap(cases=1234, rate=99.4, new=1, known=2, flaky=0, classes=7, variants=7, compiled=3,
                  elapsed=4, budget=20, stage="minimizing"))
    d.update(snap("num_kv_splits", budget=20))
    d.event("[decode_metadata] done: 1234 cases in 4.0 s, 3 findings")
    d.close()
    text = buf.getvalue()
    assert "\x1b[" in text  # drawn with terminal control codes
    for part in ("decode_metadata", "1234", "99", "1/2/0", "7/3", "4/20 s", "minimizing", "num_kv_splits",
                 "waiting", "done: 1234 cases in 4.0 s, 3 findings"):
        assert part in text, part


def test_shards_are_read_back_and_summed():
    buf = io.StringIO()
    shard = ShardDisplay(buf, every_s=3600, prefix="[shard 2/2] ")
    shard.update(snap(shard="2/2", cases=10, rate=5, new=1, classes=3, stage="fuzzing"))
    shard.update(snap(shard="2/2", cases=11, stage="fuzzing"))  # throttled
    shard.update(snap(shard="2/2", cases=12, rate=6, new=1, classes=3, stage="confirming"))  # a new stage: at once
    shard.event("[decode_metadata] done")
    said, seen = [], []
    _relay(io.StringIO(buf.getvalue()), said.append, seen.append)
    assert said == ["[shard 2/2] [decode_metadata] done"]
    assert [s.cases for s in seen] == [10, 12]
    total = merge([snap(shard="1/2", cases=20, rate=10, known=1, classes=4, elapsed=9, stage="fuzzing"), seen[-1]])
    assert (total.cases, total.rate, total.new, total.known, total.classes, total.elapsed) == (32, 16, 1, 1, 7, 9)
    assert total.stage_text() == "confirming 1, fuzzing 1" and "(2 shards)" in total.line()
    assert parse("an ordinary line") is None and parse(progress.MARK + "{broken") is None


def test_make_display_picks_by_stream(monkeypatch):
    monkeypatch.delenv(progress.JSON_ENV, raising=False)
    assert isinstance(make_display(io.StringIO()), PlainDisplay)
    monkeypatch.setenv(progress.JSON_ENV, "1")
    assert isinstance(make_display(io.StringIO()), ShardDisplay)


def test_the_first_snapshot_goes_out_on_a_freshly_booted_machine(monkeypatch):
    """time.monotonic() counts from the machine's boot: on a GPU host started a few minutes ago
    a throttle that starts from 0.0 held back every snapshot of its first `every_s` seconds."""
    monkeypatch.setattr(progress.time, "monotonic", lambda: 5.0)  # 5 s after boot
    buf = io.StringIO()
    ShardDisplay(buf, every_s=3600).update(snap(shard="1/2", cases=1, stage="fuzzing"))
    assert [parse(x).cases for x in buf.getvalue().split("\n") if x] == [1]
    said = []
    show = progress.lines_to(said.append, 3600)
    show(snap(cases=1, stage="fuzzing"))
    show(snap(cases=2, stage="fuzzing"))  # throttled
    assert len(said) == 1
