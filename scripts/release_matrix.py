"""Which SGLang releases have each known defect: every triaged (xfail) case of a corpus replayed
against every distinct release kernel file, and against `builtin` (which must be clean).

usage: python scripts/release_matrix.py [CORPUS...] [--releases 0.5.14,0.5.23] [--device cpu|cuda]
                                        [--json FILE] [--markdown FILE] [--write]

Each release is judged by the contract variant it selects (as `kvfuzz replay --target` does).
A cell says `defect` (the saved signature shows), `clean` (nothing shows), `other: SIG` (a
different finding shows), or `-` (the release has no such op). Wheels come from kvfuzz's cache
(or PyPI, once). docs/findings.md keeps the table this prints.

`--write` records, in each case's `meta["affects"]`, the releases that show its defect (with
the releases whose kernel file is identical): `pytest corpora --kvfuzz-target sglang==X`
(tox -e release) then expects the defect exactly there, and a clean replay everywhere else.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

# one release per distinct kernel file (docs/releases.md), and the releases with the same file
# (0.5.6 - 0.5.12: the file kvfuzz extracts from the attention backends, docs/releases.md)
DISTINCT = ("0.5.6", "0.5.10", "0.5.14", "0.5.16", "0.5.17", "0.5.18", "0.5.19", "0.5.20", "0.5.23")
SAME_FILE = {"0.5.6": ("0.5.6.post1", "0.5.6.post2", "0.5.7", "0.5.8", "0.5.8.post1", "0.5.9"),
             "0.5.10": ("0.5.10.post1", "0.5.11", "0.5.12", "0.5.12.post1"),
             "0.5.14": ("0.5.13", "0.5.13.post1", "0.5.15", "0.5.15.post1"), "0.5.20": ("0.5.21", "0.5.22")}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("corpus", nargs="*", default=["corpora"])
    ap.add_argument("--releases", default=",".join(DISTINCT))
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda", "auto"))
    ap.add_argument("--json", type=Path)
    ap.add_argument("--markdown", type=Path)
    ap.add_argument("--write", action="store_true", help="record meta.affects in each case")
    args = ap.parse_args(argv)

    from kvfuzz import device as devmod
    from kvfuzz.corpus import iter_cases
    from kvfuzz.check import Checker
    from kvfuzz.worker import WorkerExecutor

    device = devmod.select(args.device)
    cases = [(p, s) for p, s in iter_cases(args.corpus)
             if not isinstance(s, Exception) and s.expected == "xfail" and s.target.startswith("sglang==")]
    targets = [f"sglang=={v}" for v in args.releases.split(",")] + ["builtin"]
    executors = {t: WorkerExecutor(t, device) for t in targets}
    rows = []
    try:
        for path, saved in cases:
            row = {"case": str(path), "signature": saved.finding.signature, "found_with": saved.target, "cells": {}}
            for t, ex in executors.items():
                if saved.case.op in ex.missing:
                    row["cells"][t] = "-"
                    continue
                checker = Checker.settled(ex, saved.case.op, t)  # the variant the release selects
                got = checker.check(checker.adopt(saved.case), repeats=2).signatures()
                row["cells"][t] = ("defect" if saved.finding.signature in got else
                                   "clean" if not got else "other: " + ", ".join(sorted(got)))
            rows.append(row)
            print(row["signature"], " ".join(f"{t.split('==')[-1]}={v}" for t, v in row["cells"].items()), flush=True)
    finally:
        for ex in executors.values():
            ex.close()
    result = {"device": device, "targets": targets, "rows": rows}
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    if args.markdown:
        head = "| defect (signature) | case | " + " | ".join(t.split("==")[-1] for t in targets) + " |"
        lines = [head, "|" + " --- |" * (len(targets) + 2)]
        for r in rows:
            lines.append(f"| `{r['signature']}` | `{Path(r['case']).name}` | "
                         + " | ".join(r["cells"][t] for t in targets) + " |")
        args.markdown.write_text("\n".join(lines) + "\n")
    if args.write:
        for r in rows:
            hit = [t.split("==")[1] for t, v in r["cells"].items() if v == "defect" and t.startswith("sglang==")]
            write_affects(Path(r["case"]), sorted({f"sglang=={v}" for h in hit for v in (h, *SAME_FILE.get(h, ()))}))
    builtin_bad = [r for r in rows if r["cells"]["builtin"] not in ("clean", "-")]
    return 1 if builtin_bad else 0


def write_affects(case_dir: Path, affects: list[str]) -> None:
    """Set meta.affects in one saved case (meta is not part of the case's identity: its key and
    directory stay), atomically."""
    import os

    from kvfuzz.corpus import read_case_dir
    from kvfuzz.corpus.format import case_to_json, dumps_case_json

    saved = read_case_dir(case_dir)
    saved = dataclasses.replace(saved, case=saved.case.with_meta(affects=affects))
    tmp = case_dir / "case.json.tmp"
    tmp.write_text(dumps_case_json(case_to_json(saved)))
    os.replace(tmp, case_dir / "case.json")
    assert read_case_dir(case_dir).case.meta["affects"] == affects


if __name__ == "__main__":
    sys.exit(main())
