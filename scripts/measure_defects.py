"""Findings before grouping, defects after: campaigns against SGLang release kernel files with one
seeded single-line defect each, and whether two seeded defects on different lines would be merged.

usage: python scripts/measure_defects.py [--release X.Y.Z] [--op OP ...] [--device cpu|cuda]
                                         [--budget S] [--minimize-budget S] [--parallel N] [--out DIR]

The defects are scripts/seeded_release_runs.py's `DEFECTS` (the release's `kv_indices.py`, one line
each). Each mutant is fuzzed in contract by a real `kvfuzz fuzz` subprocess with `--report`. Per
run the table gives the signatures the run's findings carry (the symptoms, what kvfuzz reported
one by one without sites), the findings (saved cases), the defects (the report's `defects`),
the findings saved without a site, and the defect keys (statement, kind, inputs). A mutation keeps every line number, so two runs whose
defects share a key are two seeded defects on different lines the grouping rule would merge if
both were in one file: the last lines list them.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _seeded():
    spec = importlib.util.spec_from_file_location("seeded_release_runs", HERE / "seeded_release_runs.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def measure(name: str, op: str, target: str, args, out: Path, seeded) -> dict:
    row = seeded.fuzz(name, op, target, args, out)
    doc = json.loads((out / f"{name}.json").read_text()) if row["report"] else {}
    findings = doc.get("findings", [])
    row["symptoms"] = sum(len(f.get("signatures") or [f["signature"]]) for f in findings)
    row["defects"] = len(doc.get("defects", []))
    row["keys"] = [d["defect"] for d in doc.get("defects", [])]
    row["no_site"] = [f["signature"] for f in findings if not (f.get("site") or {}).get("line")]
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--release", default="0.5.23")
    ap.add_argument("--op", action="append", default=None)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--budget", type=float, default=20.0)
    ap.add_argument("--minimize-budget", type=float, default=5.0)
    ap.add_argument("--parallel", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", type=Path, default=Path("runs/defects"))
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    seeded = _seeded()
    runs, skipped = seeded.mutants([args.release], set(args.op) if args.op else None, args.out)
    for s in skipped:
        print(f"skipped: {s}")
    with ThreadPoolExecutor(args.parallel) as pool:
        rows = list(pool.map(lambda r: measure(*r, args, args.out, seeded), runs))
    (args.out / "defects.json").write_text(json.dumps(rows, indent=1))
    print("| seeded defect | op | symptoms (signatures) | findings (cases) | defects | without a site | defect keys |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['run']} | {r['op']} | {r.get('symptoms', '-')} | {r.get('findings', '-')} | "
              f"{r.get('defects', '-')} | {len(r.get('no_site', []))} | {'; '.join(r.get('keys', [])) or '-'} |")
    found = [r for r in rows if r.get("symptoms")]
    one = [r for r in found if r["defects"] == 1]
    print(f"{len(one)} of {len(found)} seeded defects found are one defect each")
    owners: dict[str, list[str]] = {}
    for r in found:
        for k in set(r["keys"]):
            owners.setdefault(k, []).append(r["run"])
    for k, names in sorted(owners.items()):
        if len(names) > 1:
            print(f"would merge in one file: {', '.join(names)} (key {k})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
