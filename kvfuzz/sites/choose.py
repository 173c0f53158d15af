"""Which of a case's sites (attribute.py) a finding stands on, by the finding's kind.

* A mismatch stands on the first wrong cell of the tensor its signature names, where the case
  has one (a case with two defects on two outputs), else on the case's first.
* A crash or GPU fault stands on the case's `fault`: its first access outside every tensor of
  its launch ("faults, reading 3 elements past the end of req_to_token").
* A finding whose wrong the interpreter's run does not show (a value only the compiled kernel
  computes wrong) stands on the static site of its tensor where there is one: the only
  `tl.store` that writes it (`"static": true`).
* Every site also carries `depends` (the inputs the case's broken precondition names, [] in
  contract) and `reads` (the load statements of the case that read outside their tensors, other
  than the site itself): the grouping rule uses both (defects.py).

A finding whose kind no statement explains (a run that must have been refused, the oracles
disagreeing), a crash whose run makes no access outside its tensors, and one with neither a
dynamic nor a static site have `{"none": why}`.
"""

from __future__ import annotations

from ..findings import defect_kind
from .attribute import Attribution
from .site import Site

# finding kind -> the kinds of wrong that explain it, the likeliest first
CHOICE = {
    "mismatch": ("wrong_value", "lost_write", "overlap", "stray_read", "stray_write"),
    "out_of_bounds_write": ("stray_write", "overlap"),
    "untouched_write": ("untouched_write", "stray_write", "overlap"),
    "input_modified": ("input_write",),
    "out_of_bounds_read": ("stray_read",),
    "nondeterministic": ("stray_read", "overlap", "stray_write"),
    "backend_divergence": ("stray_read", "overlap", "wrong_value", "lost_write", "stray_write", "untouched_write"),
    "crash": ("fault",),
}
# what a static site stands for, by finding kind: a wrong value the one store wrote, a stray write
STATIC = {"mismatch": "wrong_value", "backend_divergence": "wrong_value", "nondeterministic": "wrong_value",
          "out_of_bounds_write": "stray_write", "untouched_write": "untouched_write"}
NO_SITE = {
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
    tensor = signature.split(":")[3] if signature.count(":") >= 4 else "-"
    own = attribution.outputs.get(tensor, {})
    for what in CHOICE.get(kind, ()):
        # a wrong cell of the tensor the finding names before another output's (two defects in a case)
        site = own.get(what) or attribution.sites.get(what)
        if site is not None:
            return dict(site.to_json(), **_root(site, attribution), **_shape(site, attribution, own),
                        **_context(site, attribution))
    if kind == "crash":
        error = f" (it raises {attribution.error})" if attribution.error else ""
        return {"none": f"the interpreter's run makes no access outside its launch's tensors{error}: "
                        "the crash is not a wild load or store"}
    static = attribution.static.get(tensor)
    if static is not None and kind in STATIC:
        shows = ", ".join(attribution.sites) or "nothing wrong"
        site = Site.from_json(dict(static.to_json(), what=STATIC[kind],
                                   says=f"{static.says} (a static site: the interpreter's run shows no "
                                        f"{kind.replace('_', ' ')}, {shows})"))
        return dict(site.to_json(), static=True, **_context(site, attribution))
    seen = ", ".join(attribution.sites) or "nothing wrong"
    why = "" if tensor == "-" else f"; {tensor} has no single `tl.store` to name statically"
    return {"none": f"the interpreter's run shows no {kind.replace('_', ' ')} ({seen}){why}"}


def _context(site, attribution: Attribution) -> dict:
    """What the grouping rule reads beside the site: the inputs the case depends on, the case's
    reads outside their tensors other than the site's own statement, and for an access past a
    bound the guard of its statement (its pointer and mask as the source has them, static.py)."""
    from .static import guard_of

    reads = [r for r in attribution.reads if (r["file"], r["line"]) != (site.file, site.line)]
    out = {} if attribution.depends is None else {"depends": list(attribution.depends)}
    if reads:
        out["reads"] = reads
    guard = guard_of(site.file, site.line) if site.bound is not None else None
    return dict(out, guard=guard) if guard else out


# a store's kinds of wrong that put what it writes somewhere other than where it belongs
MISPLACED = ("stray_write", "untouched_write", "overlap", "wrong_value")


def _shape(site, attribution: Attribution, own: dict | None = None) -> dict:
    """How a store's place defect shows in a judged case, where the trace tells:

    * {"shape": "shifted"}: the case leaves a required cell no store wrote (`unwritten`; where a
      store is blamed for it, `lost_write`, this same statement) while this statement writes
      cells that are not its own (a stray or untouched write, an overlap, a wrong value, or a
      cell another program wrote too, `twice`, even with the same value): its writes moved (a
      segment's start read from the wrong element of an index, a row stride dropped);
    * {"shape": "copied"}: a wrong value this statement copied from a load, in a case where every
      required cell was written and the statement wrote nowhere else: the right cells, values
      read from the wrong place (a start offset ignored);
    * {"shape": "dropped"}: required cells left unwritten, blamed on this statement, and nothing
      written out of place anywhere (a last page dropped, a mask one element short);
    * {} otherwise, as a store running past its end (a mask one element too long: every required
      cell written, and a cell more, not its own).

    Four defects of one store (SGLang's FlashInfer kernel has one) then stay apart."""
    at = (site.file, site.line)
    if site.op != "tl.store" or site.kind != "place" or attribution.depends:
        return {}
    own = own or {}
    mine = {w for w in MISPLACED if (s := own.get(w) or attribution.sites.get(w)) is not None
            and (s.file, s.line) == at}
    twice = attribution.twice is not None and (attribution.twice["file"], attribution.twice["line"]) == at
    lost = own.get("lost_write") or attribution.sites.get("lost_write")
    if attribution.unwritten and (mine or twice) and (lost is None or (lost.file, lost.line) == at):
        return {"shape": "shifted"}
    ran_past = site.load is not None and any(
        (link["load"]["file"], link["load"]["line"]) == (site.load["file"], site.load["line"])
        and (link["store"]["file"], link["store"]["line"]) == at for link in attribution.lanes)
    if site.what == "wrong_value" and site.load is not None and not attribution.unwritten and mine == {"wrong_value"} \
            and not ran_past:  # a value read outside the tensors on its lane is an overrun's, not a copy
        return {"shape": "copied"}
    if attribution.unwritten and lost is not None and (lost.file, lost.line) == at and attribution.twice is None \
            and not any(attribution.sites.get(w) is not None for w in MISPLACED + ("input_write", "stray_read")):
        return {"shape": "dropped"}
    return {}


def _root(site, attribution: Attribution) -> dict:
    """{"root": the store} for a stray read whose value a store of the case wrote out, or on
    whose lane the same program's store then wrote out of place (the read and the store are one
    defect's: a mask that lets both run one element too far), else {}."""
    if site.what != "stray_read":
        return {}
    for s in attribution.sites.values():
        if s.op == "tl.store" and s.load is not None and (s.load["file"], s.load["line"]) == (site.file, site.line):
            return {"root": {"file": s.file, "line": s.line, "op": s.op}}
    for link in attribution.lanes:
        if (link["load"]["file"], link["load"]["line"]) == (site.file, site.line):
            return {"root": dict(link["store"])}
    return {}
