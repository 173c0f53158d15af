"""One defect, many symptoms: findings with the same site are one defect.

A finding's defect is keyed by its op, the statement at its root and the kind of wrong there:

* the root is the statement itself; for a stray read whose value a store of the same case wrote
  out, that store (a mask that lets a load and its store both run one element too far is one
  defect);
* the kind is "place" (a store or load at a wrong address, a cell left unwritten, a value read
  from a wrong place) or "value" (a value computed wrong), `Site.kind`.

So two defects that share a statement (a kernel with one store) stay apart when one puts values
in the wrong place and the other computes wrong values, or when their values come from different
loads (different inputs). Findings with no site (crashes, hangs, GPU faults, a run it must have
refused, no attribution) are each their own defect, as their signature and case say.
"""

from __future__ import annotations

import os
from typing import Any, Iterable, Mapping

from .site import Site, site_of


def defect_key(op: str, site: Mapping[str, Any] | Site | None) -> tuple | None:
    """(op, file, line, kind) of the statement at a finding's root, or None without a site."""
    s = site if isinstance(site, Site) else site_of({"site": site}) if site else None
    if s is None:
        return None
    if s.root is not None:
        return op, os.path.basename(str(s.root["file"])), int(s.root["line"]), s.kind
    return op, os.path.basename(s.file), s.line, s.kind


def defect_name(key: tuple | None, site: Mapping[str, Any] | None = None) -> str:
    """How a report names a defect: "flashinfer_kv_indices at kv_indices.py:44 (place)"."""
    if key is None:
        return "no site"
    op, file, line, kind = key
    return f"{op} at {file}:{line} ({kind})"


def group(items: Iterable[Any], key) -> list[list[Any]]:
    """`items` grouped by `key(item)` (a defect key, or None: a group of its own), in the order
    each group's first item comes."""
    groups: dict[Any, list[Any]] = {}
    for n, item in enumerate(items):
        k = key(item)
        groups.setdefault(("alone", n) if k is None else k, []).append(item)
    return list(groups.values())



def defects_of(findings: list[dict]) -> list[dict]:
    """A report's findings (each with its `site`, `signatures`, `contract`, `case`, `new`) as
    defects, each listing its symptoms: what the JSON report's `defects` holds."""
    from ..findings import kind_of
    from .site import site_line

    def op(f: dict) -> str:
        return f.get("op") or f["signature"].split(":")[0]

    out = []
    for g in group(findings, lambda f: defect_key(op(f), f.get("site"))):
        key = defect_key(op(g[0]), g[0].get("site"))
        site = g[0].get("site") if key is not None else None
        out.append({
            "defect": defect_name(key) if key else f"{g[0]['signature']} (no site)",
            "op": op(g[0]),
            "site": site,
            "site_line": site_line({"site": g[0].get("site")}) if g[0].get("site") else "",
            "new": any(f.get("new", True) for f in g),
            "findings": [f["signature"] for f in g],
            "symptoms": [{"signature": s, "kind": kind_of(s), "path": s.split(":")[1], "contract": f.get("contract"),
                          "case": f.get("case"), "new": f.get("new", True)}
                         for f in g for s in (f.get("signatures") or [f["signature"]])],
        })
    return out


__all__ = ["defect_key", "defect_name", "defects_of", "group"]


def header(n: int, defect: dict) -> str:
    """The console's line above a defect's findings."""
    k = len(defect["symptoms"])
    line = f"DEFECT {n}: {defect['defect']}, {k} symptom{'s' if k > 1 else ''}"
    return line + (f"\n  site {defect['site_line']}" if defect.get("site_line") else "")
