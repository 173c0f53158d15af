#!/usr/bin/env python3
"""Turn a `kvfuzz mutants --report` JSON into a benchmarks/*.json record (docs/performance.md).

    python3 scripts/mutants_record.py REPORT.json --command "kvfuzz mutants ..." --machine "..." \
        --title "..." --order N [--commit SHA] > benchmarks/NAME.json

The record names the command, the kvfuzz commit (`git rev-parse --short HEAD`), the versions and
the machine; `python3 scripts/render_performance.py` then renders it with the other records.
Bad input: one line on stderr, exit 2.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main(argv: list[str] | None = None) -> int:
    from kvfuzz.mutants.report import benchmark_record

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("report", type=Path)
    p.add_argument("--command", required=True)
    p.add_argument("--machine", required=True)
    p.add_argument("--title", required=True)
    p.add_argument("--order", type=int, required=True)
    p.add_argument("--commit", help="the kvfuzz commit the report was made at (default: HEAD)")
    args = p.parse_args(argv)
    try:
        report = json.loads(args.report.read_text())
        if report.get("kvfuzz_mutants") != 1:
            raise ValueError("not a kvfuzz mutants report")
    except (OSError, ValueError) as exc:
        print(f"mutants_record: {args.report}: {exc}", file=sys.stderr)
        return 2
    commit = args.commit or subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                           text=True).stdout.strip()
    record = benchmark_record(report, args.command, commit, args.machine, args.title, args.order)
    print(json.dumps(record, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
