"""One defect, many symptoms: findings with the same site are one defect.

A finding's defect is keyed by its op, the statement at its root, the kind of wrong there and
the inputs it depends on:

* the root is the statement itself; for a stray read whose value a store of the same case wrote
  out, that store (a mask that lets a load and its store both run one element too far is one
  defect); and, across a run's findings, for a finding whose stored value came from a load, or
  whose case read outside its tensors at a load, that load where it is itself the site of
  another finding of the run (one wrong read showing at several stores is one defect); for a
  value computed from elements its program read at the wrong place (`misread`), that load; and,
  across a run's findings, for findings at two or more stores whose wrong values came from one
  load statement (directly or through loads whose address it gave, `load.via`), that load;
* the kind is "place" (a store or load at a wrong address, a cell left unwritten, a value read
  from a wrong place) or "value" (a value computed wrong), `Site.kind`; a place site's `shape`
  where its case shows one: "shifted" (the store's writes moved) or "copied" (the right cells,
  values loaded from the wrong place);
* the inputs are those the case's broken precondition names, none in contract (`depends`).

Then accesses past one bound of one tensor under one guard (one kernel's statements with the
same pointer and mask: one missing check) are merged into one defect, across statements and
inputs (`_merge_bounds`).

So two defects that share a statement (a kernel with one store) stay apart when one puts values
in the wrong place and the other computes wrong values, or when one shows in contract and the
other only on an input outside it, or on another broken precondition. Findings with no site
(a run it must have refused, no attribution) are each their own defect, as their signature and
case say.
"""

from __future__ import annotations

import os
from typing import Any, Iterable, Mapping

from .site import Site, site_of


def _depends(site: Mapping[str, Any] | Site | None) -> tuple[str, ...]:
    d = site.get("depends") if isinstance(site, Mapping) else None
    return tuple(sorted(d)) if d else ()


def defect_key(op: str, site: Mapping[str, Any] | Site | None) -> tuple | None:
    """(op, file, line, kind, depends) of the statement at a finding's root, or None without a
    site; `depends`: the inputs its case's broken precondition names, () in contract."""
    s = site if isinstance(site, Site) else site_of({"site": site}) if site else None
    if s is None:
        return None
    if s.root is not None:
        return op, os.path.basename(str(s.root["file"])), int(s.root["line"]), s.kind, _depends(site)
    # a value computed from elements a load read at the wrong place: that load; not where the store's
    # writes moved (`shifted`: the cell's writer was the wrong program, what it read says nothing)
    if s.misread is not None and not (isinstance(site, Mapping) and site.get("shape") in SHAPES):
        return op, os.path.basename(str(s.misread["file"])), int(s.misread["line"]), "place", _depends(site)
    return op, os.path.basename(s.file), s.line, _kind(s, site), _depends(site)


def _kind(s: Site, site: Mapping[str, Any] | Site) -> str:
    """A place site's shape where its case showed one (choose.py `_shape`): "shifted" (the
    store's writes moved: required cells left unwritten, cells not its own written), "copied"
    (the right cells, values loaded from the wrong place); else the site's kind. A store writing
    its segment one element too far, at the wrong start, or from the wrong source: three defects."""
    shape = site.get("shape") if isinstance(site, Mapping) else None
    return shape if shape in SHAPES and s.kind == "place" else s.kind


SHAPES = ("shifted", "copied", "dropped")


def root_keys(findings: list[dict]) -> list[tuple | None]:
    """Each finding's defect key with the run's loads taken as roots: a finding whose stored value
    came from a load (`load`) or whose case read outside its tensors at a load (`reads`) is keyed
    at that load's, where another finding of the run with the same op and inputs is keyed at the
    load itself (its own site, a stray read or a fault). Else its own `defect_key`."""
    keys = _shared_origin([defect_key(_op(f), f.get("site")) for f in findings], findings)
    at_load = {(k[0], k[1], k[2], k[4]): k for k, f in zip(keys, findings)
               if k is not None and (f.get("site") or {}).get("op") == "tl.load" and not (f.get("site") or {}).get("root")}
    keyed = {(k[0], k[1], k[2], k[4]): k for k in keys if k is not None}
    out = []
    for k, f in zip(keys, findings):
        site = f.get("site") or {}
        via = site.get("via") if site.get("op") == "tl.load" and not site.get("root") else None
        if k is not None and via:  # a stray lookup whose indices a load read: that load's defect, if the run has one
            hit = keyed.get((k[0], os.path.basename(str(via["file"])), int(via["line"]), k[4]))
            if hit is not None:
                k = hit
        if k is not None and site.get("op") == "tl.store":
            loads = ([site["load"]] if site.get("load") else []) + list(site.get("reads") or ())
            for load in loads:
                hit = at_load.get((k[0], os.path.basename(str(load["file"])), int(load["line"]), k[4]))
                if hit is not None:
                    k = hit
                    break
        out.append(k)
    return _merge_bounds(out, findings)


def _origin_of(site: Mapping[str, Any]) -> tuple[str, int] | None:
    """(file name, line) of the load a store's wrong value came from, or of the load that gave
    that load its address (`via`, an indirect load): the first load of the chain."""
    load = site.get("load") if site.get("op") == "tl.store" else None
    if not load:
        return None
    first = load.get("via") or load
    return os.path.basename(str(first["file"])), int(first["line"])


def _shared_origin(keys: list[tuple | None], findings: list[dict]) -> list[tuple | None]:
    """`keys` with findings at two or more stores whose wrong values came from one load statement
    (directly or through loads whose address it gave), of one kind and on the same inputs, keyed
    at that load: one wrong read (a pool index ignored) feeding two stores is one defect."""
    stores: dict[tuple, set] = {}
    origin = []
    for k, f in zip(keys, findings):
        o = _origin_of(f.get("site") or {}) if k is not None else None
        g = (k[0], *o, k[3], k[4]) if o is not None else None
        origin.append(g)
        if g is not None:
            stores.setdefault(g, set()).add(k[1:3])
    return [(g[0], g[1], g[2], g[3], g[4]) if g is not None and len(stores[g]) > 1 else k
            for k, g in zip(keys, origin)]


def bound_key(op: str, site: Mapping[str, Any] | None) -> tuple | None:
    """(op, file, kernel, pointer, mask, tensor, dim, side) of an access past a tensor's bound
    whose statement's guard is known (`bound` and `guard`, choose.py), else None."""
    b, g = (site or {}).get("bound"), (site or {}).get("guard")
    if not b or not g or "line" not in (site or {}):
        return None
    return (op, os.path.basename(str(site["file"])), g["kernel"], g["pointer"], g["mask"], b["tensor"],
            int(b["dim"]), b["side"])


def _merge_bounds(keys: list[tuple | None], findings: list[dict]) -> list[tuple | None]:
    """`keys` with the defects of accesses past one bound merged: findings whose accesses pass
    the same dimension of the same tensor of one kernel, at statements with the same pointer and
    mask (one missing guard: one fix, that mask, repairs them all) are one defect, whichever
    statement and inputs each names; each merged key's other findings follow it. A key whose
    findings pass different bounds (a zero-width destination and one with too few rows, at one
    store) is first split by bound, so that no merge joins two bounds through it."""
    bounds = [bound_key(_op(f), f.get("site")) if k is not None else None for k, f in zip(keys, findings)]
    seen: dict[tuple, set] = {}
    for k, b in zip(keys, bounds):
        if b is not None:
            seen.setdefault(k, set()).add(b[5:])
    keys = [k + (b[5:],) if b is not None and len(seen[k]) > 1 else k for k, b in zip(keys, bounds)]
    parent: dict[tuple, tuple] = {}

    def top(k: tuple) -> tuple:
        while k in parent:
            k = parent[k]
        return k

    first: dict[tuple, tuple] = {}
    for k, b in zip(keys, bounds):
        if b is None:
            continue
        here, there = top(k), top(first.setdefault(b, k))
        if here != there:
            parent[here] = there
    return [top(k) if k is not None else None for k in keys]


def _op(f: dict) -> str:
    return f.get("op") or f["signature"].split(":")[0]


def defect_name(key: tuple | None, site: Mapping[str, Any] | None = None) -> str:
    """How a report names a defect: "flashinfer_kv_indices at kv_indices.py:44 (place)", with the
    inputs an out-of-contract one depends on: "... (place; out of contract: page_table)"."""
    if key is None:
        return "no site"
    op, file, line, kind = key[:4]
    depends = key[4] if len(key) > 4 else ()
    past = f"; past {key[5][0]} dim {key[5][1]} ({key[5][2]})" if len(key) > 5 else ""  # split by bound
    return f"{op} at {file}:{line} ({kind}{'; out of contract: ' + ', '.join(depends) if depends else ''}{past})"


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

    keys = dict(zip(map(id, findings), root_keys(findings)))
    out = []
    for g in group(findings, lambda f: keys[id(f)]):
        key = keys[id(g[0])]
        at = next((f for f in g if key is not None and defect_key(_op(f), f.get("site")) == key), g[0])
        site = at.get("site") if key is not None else None
        out.append({
            "defect": defect_name(key) if key else f"{g[0]['signature']} (no site)",
            "op": _op(g[0]),
            "site": site,
            "site_line": site_line({"site": at.get("site")}) if at.get("site") else "no site: not attributed",
            "new": any(f.get("new", True) for f in g),
            "findings": [f["signature"] for f in g],
            "symptoms": [{"signature": s, "kind": kind_of(s), "path": s.split(":")[1], "contract": f.get("contract"),
                          "case": f.get("case"), "new": f.get("new", True)}
                         for f in g for s in (f.get("signatures") or [f["signature"]])],
        })
    return out


__all__ = ["bound_key", "defect_key", "defect_name", "defects_of", "group", "root_keys"]


def header(n: int, defect: dict) -> str:
    """The console's line above a defect's findings."""
    k = len(defect["symptoms"])
    line = f"DEFECT {n}: {defect['defect']}, {k} symptom{'s' if k > 1 else ''}"
    return line + (f"\n  site {defect['site_line']}" if defect.get("site_line") else "")
