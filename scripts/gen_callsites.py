#!/usr/bin/env python3
"""Write SGLang's call sites of kvfuzz's ops, per release, from the release wheels.

    python scripts/gen_callsites.py --release 0.5.14 --release 0.5.23 [--search 0.4.9 ...] [--check]

writes kvfuzz/callsites/data/callsites.json (the data `kvfuzz ops --target sglang==X` prints)
and docs/callsites.md (kvfuzz/callsites/table.py); a `--search` release keeps only its count
of call sites and its binding findings. Each wheel is fetched once into
$KVFUZZ_CACHE/wheels (pip download --no-deps). `--check` writes nothing: exit 1 when the files
differ from what the wheels give (drift), naming what differs. Without --release: the releases
the checked-in data holds. Bad input or a wheel that cannot be had: one line, exit 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kvfuzz.callsites import DATA, FORMAT, build, search_summary  # noqa: E402
from kvfuzz.callsites.table import markdown  # noqa: E402
from kvfuzz.errors import TargetLoadError  # noqa: E402

DOC = ROOT / "docs" / "callsites.md"


def _dump(data: dict) -> str:
    """The data as JSON with one call site a line (small, and a diff shows the sites that changed)."""
    out = [f'{{"format": {data["format"]}, "releases": {{']
    for i, (version, entry) in enumerate(data["releases"].items()):
        head = {k: v for k, v in entry.items() if k != "sites"}
        out.append(f"{json.dumps(version)}: {json.dumps(head)[:-1]}, \"sites\": [")
        out += [json.dumps(site) + ("," if j < len(entry["sites"]) - 1 else "") for j, site in enumerate(entry["sites"])]
        out.append("]}" + ("," if i < len(data["releases"]) - 1 else ""))
    return "\n".join(out) + "\n}, \"searched\": " + json.dumps(data.get("searched", {})) + "}\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--release", action="append", dest="releases", metavar="X.Y.Z",
                   help="an SGLang release whose call sites to keep (repeatable; default: those the data holds)")
    p.add_argument("--search", action="append", dest="searched", metavar="X.Y.Z",
                   help="an SGLang release to search for binding findings only: its count of call sites and "
                   "its findings are kept (repeatable; default with no --release: those the data holds)")
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 when the files differ from the wheels'")
    args = p.parse_args(argv)
    old = json.loads(DATA.read_text()) if DATA.is_file() else {"format": FORMAT, "releases": {}}
    given = bool(args.releases or args.searched)
    releases = args.releases or ([] if given else list(old["releases"]))
    searched = args.searched or ([] if given else list(old.get("searched", {})))
    if not releases and not searched:
        print("gen_callsites: no --release given and no data to regenerate", file=sys.stderr)
        return 2
    try:
        fresh = {v: build(v) for v in releases}
        found = {v: search_summary(build(v)) for v in searched}
    except TargetLoadError as exc:
        print(f"gen_callsites: {exc}", file=sys.stderr)
        return 2
    if args.check:
        drift = [v for v in releases if old["releases"].get(v) != fresh[v]]
        drift += [v for v in searched if old.get("searched", {}).get(v) != found[v]]
        doc_now = DOC.read_text() if DOC.is_file() else ""
        doc_drift = not given and markdown(old) != doc_now
        for v in drift:
            print(f"drift: sglang {v}: {DATA.relative_to(ROOT)} differs from its wheel's call sites")
        if doc_drift:
            print(f"drift: {DOC.relative_to(ROOT)} differs from the data")
        if drift or doc_drift:
            return 1
        print(f"no drift: {', '.join(releases + searched)}")
        return 0
    data = {"format": FORMAT, "releases": fresh, "searched": found}
    DATA.parent.mkdir(parents=True, exist_ok=True)
    DATA.write_text(_dump(data))
    DOC.write_text(markdown(data))
    sites = sum(len(r["sites"]) for r in fresh.values())
    findings = sum(len(s["binding"]) for r in fresh.values() for s in r["sites"]) + \
        sum(len(s["binding"]) for s in found.values())
    print(f"wrote {DATA.relative_to(ROOT)} and {DOC.relative_to(ROOT)}: {len(releases)} releases "
          f"({sites} call sites), {len(searched)} more searched, {findings} binding findings")
    return 0


if __name__ == "__main__":
    sys.exit(main())
