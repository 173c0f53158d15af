"""Which of a case's sites (attribute.py) a finding stands on, by the finding's kind.

A finding whose kind no statement explains (a crash, a hang, a GPU fault, a run that must have
been refused, the oracles disagreeing) has no site; neither has one whose wrong the
interpreter's run does not show (the cells are right there). `meta["site"]` says why then.
"""

from __future__ import annotations

from ..findings import defect_kind
from .attribute import Attribution

# finding kind -> the kinds of wrong that explain it, the likeliest first
CHOICE = {
    "mismatch": ("wrong_value", "lost_write", "overlap", "stray_read", "stray_write"),
    "out_of_bounds_write": ("stray_write", "overlap"),
    "untouched_write": ("untouched_write", "stray_write", "overlap"),
    "input_modified": ("input_write",),
    "out_of_bounds_read": ("stray_read",),
    "nondeterministic": ("stray_read", "overlap", "stray_write"),
    "backend_divergence": ("stray_read", "overlap", "wrong_value", "lost_write", "stray_write", "untouched_write"),
}
NO_SITE = {
    "crash": "a crash, hang or GPU fault: no statement to name",
    "invalid_accepted": "a run it must refuse: no statement to name",
    "oracle_disagreement": "the oracles disagree: not the kernel's statement",
}


def site_meta(signature: str, attribution: Attribution | None, why: str = "") -> dict:
    """What a saved case's `meta["site"]` holds for the finding `signature`: its site, or
    {"none": why there is none}."""
    kind = defect_kind(signature)
    if kind in NO_SITE:
        return {"none": NO_SITE[kind]}
    if attribution is None:
        return {"none": why or "not attributed"}
    for what in CHOICE.get(kind, ()):
        site = attribution.sites.get(what)
        if site is not None:
            return dict(site.to_json(), **_root(site, attribution))
    seen = ", ".join(attribution.sites) or "nothing wrong"
    return {"none": f"the interpreter's run shows no {kind.replace('_', ' ')} ({seen})"}


def _root(site, attribution: Attribution) -> dict:
    """{"root": the store} for a stray read whose value a store of the case wrote out (the read
    and the store are one defect's: a mask that lets both run one element too far), else {}."""
    if site.what != "stray_read":
        return {}
    for s in attribution.sites.values():
        if s.op == "tl.store" and s.load is not None and (s.load["file"], s.load["line"]) == (site.file, site.line):
            return {"root": {"file": s.file, "line": s.line, "op": s.op}}
    return {}
