#!/usr/bin/env python3
"""Write SGLang's call sites of kvfuzz's ops, per release, from the release wheels.

    python scripts/gen_callsites.py --release 0.5.14 --release 0.5.23 [--check]

writes kvfuzz/callsites/data/callsites.json (the data `kvfuzz ops --target sglang==X` prints)
and docs/callsites.md (kvfuzz/callsites/table.py). Each wheel is fetched once into
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

from kvfuzz.callsites import DATA, FORMAT, build  # noqa: E402
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
    return "\n".join(out) + "\n}}\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--release", action="append", dest="releases", metavar="X.Y.Z",
                   help="an SGLang release to read (repeatable; default: those the data holds)")
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 when the files differ from the wheels'")
    args = p.parse_args(argv)
    old = json.loads(DATA.read_text()) if DATA.is_file() else {"format": FORMAT, "releases": {}}
    releases = args.releases or list(old["releases"])
    if not releases:
        print("gen_callsites: no --release given and no data to regenerate", file=sys.stderr)
        return 2
    try:
        fresh = {v: build(v) for v in releases}
    except TargetLoadError as exc:
        print(f"gen_callsites: {exc}", file=sys.stderr)
        return 2
    if args.check:
        drift = [v for v in releases if old["releases"].get(v) != fresh[v]]
        doc_now = DOC.read_text() if DOC.is_file() else ""
        full = {"format": FORMAT, "releases": {**old["releases"], **fresh}}
        doc_drift = not args.releases and markdown(full) != doc_now
        for v in drift:
            print(f"drift: sglang {v}: {DATA.relative_to(ROOT)} differs from its wheel's call sites")
        if doc_drift:
            print(f"drift: {DOC.relative_to(ROOT)} differs from the data")
        if drift or doc_drift:
            return 1
        print(f"no drift: {', '.join(releases)}")
        return 0
    data = {"format": FORMAT, "releases": {v: fresh[v] for v in releases}}
    DATA.parent.mkdir(parents=True, exist_ok=True)
    DATA.write_text(_dump(data))
    DOC.write_text(markdown(data))
    sites = sum(len(r["sites"]) for r in fresh.values())
    found = sum(len(s["binding"]) for r in fresh.values() for s in r["sites"])
    print(f"wrote {DATA.relative_to(ROOT)} and {DOC.relative_to(ROOT)}: {len(releases)} releases, "
          f"{sites} call sites, {found} binding findings")
    return 0


if __name__ == "__main__":
    sys.exit(main())
