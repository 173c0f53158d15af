#!/usr/bin/env python3
"""Render the measured figures of docs/performance.md from benchmarks/*.json.

Each data file is one measurement worth keeping: the command, the kvfuzz commit, the versions of
torch/triton/numpy, the machine and the figures (docs/performance.md, "Adding a measurement",
describes the fields). This script writes them, in their `order`, between the two marker lines
of docs/performance.md, so the page's figures are always the data's; tests/test_docs.py fails
when they differ.

    python3 scripts/render_performance.py            # rewrite the section
    python3 scripts/render_performance.py --check    # exit 1 if the page is not what the data renders

Bad data or a page without the markers: one line on stderr, exit 2.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA_DIR = ROOT / "benchmarks"
PAGE = ROOT / "docs" / "performance.md"
BEGIN = "<!-- BEGIN measured figures: rendered from benchmarks/*.json by scripts/render_performance.py; do not edit -->"
END = "<!-- END measured figures -->"

REQUIRED = ("order", "title", "command", "kvfuzz_commit", "versions", "machine", "columns", "rows")
VERSIONS = ("torch", "triton", "numpy")


class BadData(Exception):
    """A data file or the page is not what this script can render."""


def load(data_dir: Path = DATA_DIR) -> list[dict]:
    """Every benchmarks/*.json, checked, in their `order`."""
    runs = []
    for path in sorted(data_dir.glob("*.json")):
        try:
            run = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise BadData(f"{path}: cannot read: {exc}") from None
        if not isinstance(run, dict):
            raise BadData(f"{path}: not a JSON object")
        missing = [key for key in REQUIRED if key not in run]
        if missing:
            raise BadData(f"{path}: missing {', '.join(missing)}")
        lacking = [name for name in VERSIONS if name not in run["versions"]]
        if lacking:
            raise BadData(f"{path}: versions lack {', '.join(lacking)}")
        keys = [column["key"] for column in run["columns"]]
        for row in run["rows"]:
            if sorted(row) != sorted(keys):
                raise BadData(f"{path}: a row's keys {sorted(row)} are not the columns' {sorted(keys)}")
        run["_file"] = path.name
        runs.append(run)
    if not runs:
        raise BadData(f"no data files in {data_dir}")
    return sorted(runs, key=lambda run: (run["order"], run["_file"]))


def _value(value, spec: dict) -> str:
    """One cell: a number in the column's format (a list: the runs, first / second), or text."""
    if isinstance(value, list):
        return " / ".join(_value(v, spec) for v in value)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and "format" in spec:
        text = format(value, spec["format"])
    else:
        text = str(value)
    if spec.get("code"):
        text = f"`{text}`"
    return text + spec.get("suffix", "")


def _table(columns: list[dict], rows: list[dict]) -> list[str]:
    head = "| " + " | ".join(column["label"] for column in columns) + " |"
    rule = "| " + " | ".join("---:" if "format" in column else "---" for column in columns) + " |"
    body = ["| " + " | ".join(_value(row[c["key"]], c) for c in columns) + " |" for row in rows]
    return [head, rule, *body]


def render_run(run: dict) -> str:
    versions = ", ".join(f"{name} {run['versions'][name]}" for name in VERSIONS)
    lines = [f"### {run['title']}", "",
             f"{run['machine']}; kvfuzz at commit {run['kvfuzz_commit']}; {versions}. "
             f"Data: `benchmarks/{run['_file']}`.", "",
             f"    {run['command']}", ""]
    if run.get("summary"):
        lines += _table([{"key": "label", "label": "measure"}, {"key": "value", "label": "value", "format": ""}],
                        [{"label": item["label"], "value": _value(item["value"], item)} for item in run["summary"]])
        lines.append("")
    lines += _table(run["columns"], run["rows"])
    lines.append("")
    lines += [f"* {note}" for note in run.get("notes", [])]
    return "\n".join(lines).rstrip() + "\n"


def render(runs: list[dict]) -> str:
    """The whole section between the markers (markers excluded)."""
    return "\n".join(render_run(run) for run in runs)


def split_page(text: str) -> tuple[str, str, str]:
    """(before, section, after) of the page; the markers stay in before and after."""
    if text.count(BEGIN) != 1 or text.count(END) != 1 or text.index(BEGIN) > text.index(END):
        raise BadData(f"{PAGE.name} must hold the marker lines once each, BEGIN before END")
    before, rest = text.split(BEGIN + "\n", 1)
    section, after = rest.split(END, 1)
    return before + BEGIN + "\n", section, END + after


def rendered_page(text: str, runs: list[dict]) -> str:
    before, _, after = split_page(text)
    return before + "\n" + render(runs) + "\n" + after


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the page differs from what the data renders")
    parser.add_argument("--page", type=Path, default=PAGE, help=argparse.SUPPRESS)
    parser.add_argument("--data", type=Path, default=DATA_DIR, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    try:
        text = args.page.read_text(encoding="utf-8")
        new = rendered_page(text, load(args.data))
    except (OSError, BadData) as exc:
        print(f"render_performance: {exc}", file=sys.stderr)
        return 2
    if args.check:
        if new != text:
            print(f"render_performance: {args.page} is stale: run python3 scripts/render_performance.py",
                  file=sys.stderr)
            return 1
        return 0
    if new != text:
        args.page.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
