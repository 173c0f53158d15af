"""A defect site: the kernel statement that produced a finding's first wrong cell, stray write
or stray read, as a saved case's `meta["site"]` holds it, and the line a maintainer opens.

`meta["site"]` is either a site (`Site.to_json`) or `{"none": why}` where none could be named
(a crash, a hang, a GPU fault, the interpreter refused the target, attribution timed out).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Mapping

# what went wrong at the site; the first four are places (where), the rest values (what)
PLACE = ("stray_write", "untouched_write", "input_write", "stray_read", "overlap", "lost_write")
VALUE = ("wrong_value",)


@dataclass(frozen=True)
class Site:
    kernel: str  # the function the statement is in (the kernel, or a @triton.jit helper)
    file: str  # the kernel file's path as the target loaded it
    line: int
    op: str  # "tl.load" | "tl.store"
    text: str  # the statement's source line, stripped
    what: str  # one of PLACE + VALUE
    says: str  # what it does wrong, in words ("writes 1 element past the end of kv_indices")
    load: Mapping[str, Any] | None = None  # where a wrongly stored value was loaded: {file, line, op, text, kernel}
    tensor: str = ""  # the case's tensor the stray access is charged to (a stray read: the one read past)
    place: str = ""  # before | after | gap | outside: where the stray access lies relative to it
    root: Mapping[str, Any] | None = None  # a stray read's: the store that wrote what it read, {file, line, op}
    # an access out of bounds: the bound it passed, {tensor, dim, side ("after" | "before")}, where
    # the trace tells (attribute.py `_bound`)
    bound: Mapping[str, Any] | None = None
    # a wrong value computed from elements its program read at the wrong place: the load
    # statement that read them, {file, line, text, tensor} (attribute.py `misread`)
    misread: Mapping[str, Any] | None = None
    # a stray load's: the load whose values gave it its addresses (an indirect load), {file, line, text}
    via: Mapping[str, Any] | None = None

    @property
    def kind(self) -> str:
        """"place" (a store or load at a wrong address, a cell not written, a value read from a
        wrong place) or "value" (a wrong value computed)."""
        return "place" if self.what in PLACE or self.load is not None or self.misread is not None else "value"

    def to_json(self) -> dict[str, Any]:
        out = {"kernel": self.kernel, "file": self.file, "line": self.line, "op": self.op, "text": self.text,
               "what": self.what, "says": self.says}
        if self.load is not None:
            out["load"] = dict(self.load)
        if self.tensor:
            out["tensor"], out["place"] = self.tensor, self.place
        if self.root is not None:
            out["root"] = dict(self.root)
        if self.bound is not None:
            out["bound"] = dict(self.bound)
        if self.misread is not None:
            out["misread"] = dict(self.misread)
        if self.via is not None:
            out["via"] = dict(self.via)
        return out

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Site":
        return cls(d["kernel"], d["file"], int(d["line"]), d["op"], d.get("text", ""), d.get("what", ""),
                   d.get("says", ""), d.get("load"), d.get("tensor", ""), d.get("place", ""),
                   d.get("root"), d.get("bound"), d.get("misread"), d.get("via"))


def site_of(meta: Mapping[str, Any] | None) -> Site | None:
    """The site a case's meta names, or None (none recorded, or none could be named)."""
    d = (meta or {}).get("site")
    if not isinstance(d, Mapping) or "line" not in d:
        return None
    return Site.from_json(d)


def where(file: str, line: int) -> str:
    return f"{os.path.basename(file)}:{line}"


def site_line(meta: Mapping[str, Any] | None) -> str:
    """One line a maintainer can open: "`kv_indices.py:42` `tl.store` writes 1 element past the
    end of kv_indices (`kv_indices.py:40`: `data = tl.load(...)`)"; why no site could be named;
    or "" where the case's meta has none."""
    d = (meta or {}).get("site")
    if not isinstance(d, Mapping):
        return ""
    if "line" not in d:
        return f"no site: {d.get('none', 'not attributed')}"
    s = Site.from_json(d)
    out = f"`{where(s.file, s.line)}` `{s.op}` {s.says}"
    if s.load is not None:
        out += f"; the value comes from `{where(s.load['file'], s.load['line'])}` `{s.load.get('text', 'tl.load')}`"
        if s.load.get("via"):
            out += f", its address from `{where(s.load['via']['file'], s.load['via']['line'])}` `{s.load['via'].get('text', 'tl.load')}`"
    if s.via is not None:
        out += f"; its address comes from `{where(s.via['file'], s.via['line'])}` `{s.via.get('text', 'tl.load')}`"
    if s.misread is not None:
        out += (f"; computed from elements of {s.misread.get('tensor', '?')} read at the wrong place by "
                f"`{where(s.misread['file'], s.misread['line'])}` `{s.misread.get('text', 'tl.load')}`")
    return out
