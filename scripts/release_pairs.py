"""Every consecutive pair of SGLang releases with distinct kernel files (metadata.py or
kv_indices.py differs), the newer fuzzed against the older as its baseline (`kvfuzz fuzz --target sglang==NEW --baseline sglang==OLD`): what each
release introduced (regressions) and fixed, each case minimized, then bisected over every
release (`kvfuzz bisect`).

usage: python scripts/release_pairs.py [--releases A..B] [--budget S] [--time-limit S]
                                       [--device cpu|cuda] [--parallel N] [--seed N]
                                       [--out DIR] [--json FILE] [--no-bisect]

Each pair is one `kvfuzz fuzz` process (a real subprocess) with its own corpus under
DIR/<new>-vs-<old>/, in and out of contract; `--parallel` pairs run at once. The regression,
fixed and changed findings of every pair are then bisected in one `kvfuzz bisect` run over the
pair corpora. docs/findings.md keeps the table this prints.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from kvfuzz.bisect import DEFAULT_RANGE, parse_releases  # noqa: E402
from kvfuzz.findings import CLASSES, kind_of  # noqa: E402
from kvfuzz.targets.releases import file_release, kernel_files  # noqa: E402


def distinct(releases: tuple[str, ...]) -> list[str]:
    """The first release of each run of consecutive releases shipping the same kernel files."""
    out, last = [], None
    for v in releases:
        files = tuple(file_release(v, f) for f in kernel_files())
        if files != last:
            out.append(v)
            last = files
    return out


def kvfuzz(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kvfuzz.cli", *args], capture_output=True, text=True, cwd=REPO)


def fuzz_pair(old: str, new: str, args: argparse.Namespace) -> dict:
    where = args.out / f"{new}-vs-{old}"
    where.mkdir(parents=True, exist_ok=True)
    report = where / "report.json"
    t0 = time.monotonic()
    p = kvfuzz("fuzz", "--target", f"sglang=={new}", "--baseline", f"sglang=={old}", "--device", args.device,
               "--budget", str(args.budget), "--time-limit", str(args.time_limit), "--seed", str(args.seed),
               "--minimize-budget", str(args.minimize_budget), "--corpus", str(where / "corpus"),
               "--report", str(report))
    (where / "console.txt").write_text(p.stdout + p.stderr)
    doc = json.loads(report.read_text()) if report.is_file() else {}
    found = []
    for f in doc.get("findings", []):
        for sig in f.get("signatures") or [f["signature"]]:
            if kind_of(sig) in CLASSES:
                found.append({"class": kind_of(sig), "signature": sig, "case": f.get("case"),
                              "contract": f.get("contract"), "size": f.get("size"),
                              "found_after_s": f.get("found_after_s")})
    skipped = {op: s["skipped"] for op, s in doc.get("ops", {}).items() if s.get("skipped")}
    return {"old": old, "new": new, "rc": p.returncode, "seconds": round(time.monotonic() - t0, 1),
            "cases": doc.get("cases"), "ops": sorted(set(doc.get("ops", {})) - set(skipped)), "skipped": skipped,
            "ordinary": sorted({f["signature"] for f in doc.get("findings", []) if kind_of(f["signature"]) not in CLASSES}),
            "flaky": [f["signature"] for f in doc.get("flaky", [])], "found": found,
            "error": (p.stderr.strip().splitlines() or [""])[-1] if p.returncode == 2 or not doc else ""}


def bisect_pairs(rows: list[dict], args: argparse.Namespace) -> dict[str, dict]:
    """case path -> its bisect record (first bad, last good, introduced in, fixed in)."""
    cases = sorted({f["case"] for r in rows for f in r["found"] if f["case"]})
    if not cases:
        return {}
    out = args.out / "bisect.json"
    p = kvfuzz("bisect", *cases, "--releases", args.releases, "--device", args.device, "--json", str(out))
    (args.out / "bisect.txt").write_text(p.stdout + p.stderr)
    if not out.is_file():
        raise SystemExit(f"release_pairs: kvfuzz bisect failed (exit {p.returncode}): {p.stderr.strip()[-300:]}")
    return {c["case"]: c for c in json.loads(out.read_text())["cases"]}


def table(rows: list[dict]) -> list[str]:
    lines = ["| pair (new vs old) | cases | regressions | fixes | changes | introduced in / fixed in (bisect) |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        by = {k: [f for f in r["found"] if f["class"] == k] for k in CLASSES}
        hist = "; ".join(f"{f['signature'].split(':', 1)[1]}: {f.get('bisect', '-')}" for f in r["found"]
                         if f["class"] != "changed") or "-"
        lines.append(f"| {r['new']} vs {r['old']} | {r['cases']} | {len(by['regression'])} | {len(by['fixed'])} "
                     f"| {len(by['changed'])} | {hist} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--releases", default=DEFAULT_RANGE)
    ap.add_argument("--budget", type=float, default=10.0, help="seconds of fuzzing per op (default 10)")
    ap.add_argument("--time-limit", type=float, default=240.0, help="seconds per pair, all included (default 240)")
    ap.add_argument("--minimize-budget", type=float, default=10.0)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--parallel", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", type=Path, default=Path("release-pairs"))
    ap.add_argument("--json", type=Path)
    ap.add_argument("--no-bisect", action="store_true")
    args = ap.parse_args(argv)
    args.out = args.out.resolve()
    files = distinct(parse_releases(args.releases))
    pairs = list(zip(files, files[1:]))
    print(f"release_pairs: {len(pairs)} pairs of releases with distinct kernel files: {', '.join(files)}", flush=True)
    with ThreadPoolExecutor(max(1, args.parallel)) as pool:
        rows = list(pool.map(lambda p: fuzz_pair(*p, args), pairs))
    for r in rows:
        print(f"{r['new']} vs {r['old']}: exit {r['rc']}, {r['cases']} cases in {r['seconds']} s, "
              + ", ".join(f"{sum(f['class'] == k for f in r['found'])} {k}" for k in CLASSES)
              + (f"; {r['error']}" if r["error"] else ""), flush=True)
    if not args.no_bisect:
        records = bisect_pairs(rows, args)
        for r in rows:
            for f in r["found"]:
                b = records.get(f["case"]) if f["case"] else None
                if b is not None:
                    f["bisect"] = (f"introduced in {b['introduced_in'] or '-'}, fixed in {b['fixed_in'] or '-'}"
                                   f" ({b['history']})")
                    f["releases"] = b["releases"]
    print("\n".join(table(rows)))
    if args.json:
        args.json.write_text(json.dumps({"releases": args.releases, "budget_s": args.budget, "device": args.device,
                                         "seed": args.seed, "pairs": rows}, indent=1) + "\n")
    return 0 if all(not r["error"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
