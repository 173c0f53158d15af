"""Findings before grouping, defects after: campaigns against SGLang release kernel files with one
seeded single-line defect each, and whether two seeded defects on different lines would be merged.

usage: python scripts/measure_defects.py [--release X.Y.Z] [--op OP ...] [--device cpu|cuda]
                                         [--budget S] [--minimize-budget S] [--parallel N] [--out DIR]
                                         [--no-plain]

The defects are scripts/seeded_release_runs.py's `DEFECTS` (one line each of one of the release's
kernel files). Each mutant is fuzzed in contract by a real `kvfuzz fuzz` subprocess with
`--report`, and so is, once per op, the release's unmodified file (the same seed and budget;
`--no-plain` skips these), since some releases' own kernels have defects found in contract.
Per run the table gives the signatures the run's findings carry (the symptoms, what kvfuzz
reported one by one without sites), the findings (saved cases), the defects (the report's
`defects`), the findings saved without a site, and the defect keys (statement, kind, inputs); the
seeded columns subtract what the unmodified file's run of that op found: its signatures from the
symptoms, its defect keys from the defects (a native defect the plain run missed stays counted:
`native` says how many were subtracted). A mutation keeps every line number, so two runs whose
seeded defects share a key are two seeded defects on different lines the grouping rule would
merge if both were in one file: the last lines list them. `--json FILE` also writes the rows,
compact (no reports), to FILE.
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
    row["signatures"] = sorted({s for f in findings for s in (f.get("signatures") or [f["signature"]])})
    row["symptoms"] = sum(len(f.get("signatures") or [f["signature"]]) for f in findings)
    row["defects"] = len(doc.get("defects", []))
    row["keys"] = [d["defect"] for d in doc.get("defects", [])]
    row["no_site"] = [f["signature"] for f in findings if not (f.get("site") or {}).get("line")]
    return row


def subtract(row: dict, native: dict | None) -> dict:
    """`row` with its seeded columns: the symptoms whose signature the op's unmodified run did not
    show, the defect keys that run did not have."""
    sigs = set(native["signatures"]) if native else set()
    keys = set(native["keys"]) if native else set()
    row["seeded_signatures"] = [s for s in row.get("signatures", []) if s not in sigs]
    row["seeded_keys"] = [k for k in row.get("keys", []) if k not in keys]
    row["native"] = len(row.get("keys", [])) - len(row["seeded_keys"])
    return row


COMPACT = ("run", "op", "exit", "report", "wall_s", "cases", "findings", "internal_errors", "cut_short", "symptoms",
           "signatures", "defects", "keys", "no_site", "seeded_signatures", "seeded_keys", "native")


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
    ap.add_argument("--no-plain", action="store_true", help="do not fuzz the unmodified file (nothing subtracted)")
    ap.add_argument("--json", type=Path, default=None, help="write the rows, compact, to this file too")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    seeded = _seeded()
    ops = set(args.op) if args.op else None
    runs, skipped = seeded.mutants([args.release], ops, args.out)
    plain = [] if args.no_plain else seeded.plain(args.release, ops, args.out)
    for s in skipped:
        print(f"skipped: {s}")
    with ThreadPoolExecutor(args.parallel) as pool:
        done = list(pool.map(lambda r: measure(*r, args, args.out, seeded), plain + runs))
    natives = {r["op"]: r for r in done[:len(plain)]}
    rows = [subtract(r, natives.get(r["op"])) for r in done[len(plain):]]
    (args.out / "defects.json").write_text(json.dumps(done, indent=1))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        compact = {"plain": [{k: r[k] for k in COMPACT if k in r} for r in natives.values()],
                   "seeded": [{k: r[k] for k in COMPACT if k in r} for r in rows]}
        args.json.write_text(json.dumps(compact, indent=1) + "\n")
    for r in natives.values():
        print(f"unmodified {r['op']}: {r.get('symptoms', '-')} symptoms, {r.get('defects', '-')} defects: "
              f"{'; '.join(r.get('keys', [])) or '-'}")
    print("| seeded defect | op | symptoms (signatures) | findings (cases) | defects | without a site | seeded symptoms "
          "| seeded defects | seeded defect keys |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['run']} | {r['op']} | {r.get('symptoms', '-')} | {r.get('findings', '-')} | "
              f"{r.get('defects', '-')} | {len(r.get('no_site', []))} | {len(r['seeded_signatures'])} | "
              f"{len(r['seeded_keys'])} | {'; '.join(r['seeded_keys']) or '-'} |")
    found = [r for r in rows if r["seeded_keys"] or r["seeded_signatures"]]
    one = [r for r in found if len(r["seeded_keys"]) == 1]
    print(f"{len(found)} of {len(rows)} seeded defects found; {len(one)} of them are one defect each")
    owners: dict[str, list[str]] = {}
    for r in found:
        for k in set(r["seeded_keys"]):
            owners.setdefault(k, []).append(r["run"])
    for r in found:
        if not r["seeded_keys"]:
            print(f"new symptoms but no new defect key (merged with a defect of the unmodified file): {r['run']}")
    for k, names in sorted(owners.items()):
        if len(names) > 1:
            print(f"would merge in one file: {', '.join(names)} (key {k})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
