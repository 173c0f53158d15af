"""SGLang's call sites of kvfuzz's ops, per release: where each kernel is launched and how.

`build(version)` reads a release wheel's Python sources (sources.py), finds every call of an
op's entry point (extract.py; modules under `sglang/test/` are not production callers and are
left out) and the callers of the helpers holding them (one level up), and replays each call's
arguments against the definition it reaches in the same release (binding.py). `scripts/gen_callsites.py` writes the result for each release into
`kvfuzz/callsites/data/callsites.json` (shipped with kvfuzz) and `docs/callsites.md`
(table.py); `load()` reads the shipped data, `kvfuzz ops --target sglang==X` prints a release's.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from ..errors import BadInput
from . import binding
from .extract import find_callers, find_defs, find_sites, resolve_def

DATA = Path(__file__).parent / "data" / "callsites.json"
FORMAT = 1
SKIPPED = ("sglang/test/",)  # modules that are SGLang's tests, not its callers


def entries() -> dict[str, str]:
    """entry point name -> op, for every op kvfuzz has."""
    from ..ops import records

    return {rec.contract.entry: name for name, rec in records().items()}


def analyse(sources: dict[str, str]) -> list[dict]:
    """Every call site of an op in `sources` (path -> text), bound against its definition."""
    names = entries()
    sources = {f: t for f, t in sources.items() if not f.startswith(SKIPPED)}
    defs = find_defs(sources, set(names))
    out = []
    sites = find_sites(sources, names)
    find_callers(sources, sites)
    for site in sites:
        found = resolve_def(site, defs)
        if found is not None:
            site.signature = f"{found[0]}:{found[1].lineno}"
        if site.kind == "passed":  # its arguments are those of the call that launches it, a site of its own
            pass
        elif found is None:
            site.binding = [{"kind": "binding", "what": "no_definition",
                             "message": f"no single definition of {site.entry} this call reaches"}]
        else:
            site.binding = binding.check(site.args, site.kwargs, binding.signature(found[1]), site.kind == "launch")
        out.append(site.as_dict())
    return out


def build(version: str) -> dict:
    """The call-site record of sglang==`version`: its wheel and every call site."""
    from .sources import release_sources

    wheel, sha, sources = release_sources(version)
    return {"wheel": wheel, "sha256": sha, "sites": analyse(sources)}


def search_summary(built: dict) -> dict:
    """What the data keeps of a release searched for binding findings only: its wheel, its
    count of call sites, and each finding with its site."""
    return {"wheel": built["wheel"], "sha256": built["sha256"], "sites": len(built["sites"]),
            "binding": [{"file": s["file"], "line": s["line"], "entry": s["entry"], **b}
                        for s in built["sites"] for b in s["binding"]]}


@lru_cache(maxsize=1)
def load() -> dict:
    """The shipped call-site data: {"format", "releases": {version: build(version)},
    "searched": {version: search_summary(build(version))}}."""
    return json.loads(DATA.read_text())


def release_sites(version: str) -> list[dict]:
    """The shipped call sites of sglang==`version`; BadInput when the data lacks the release."""
    releases = load()["releases"]
    if version not in releases:
        raise BadInput(f"no call-site data for sglang=={version} (kvfuzz has {', '.join(releases)}; "
                       f"scripts/gen_callsites.py --release {version} adds it)")
    return releases[version]["sites"]
