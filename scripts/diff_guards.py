#!/usr/bin/env python3
"""Guards and padding in SGLang's callers of kvfuzz's ops, release pair by release pair.

    python scripts/diff_guards.py [--releases 0.5.6..0.5.23 | X,Y,Z] [--near N] [--all-lines]
                                  [--json FILE] [--markdown FILE]

For each release, the functions around every call site of docs/callsites.md (the function that
launches or calls the kernel, and the functions calling it one level up: the backends,
speculative paths and graph runners; kvfuzz/callsites/data/callsites.json says where) are read
from the release's wheel (kvfuzz/callsites/sources.py caches it). Each function is diffed against
the same function (same file and name; the same name in another file when the file moved) in the
release before, and the lines added or removed that look like a guard or a padding (clamp,
max/min, where, mask, assert, fill_, zero_, -1, pad, bounds against a size) are printed with
their release and file:line. `--near N` keeps only lines within N lines of a launch or call
inside the function; `--all-lines` prints every changed line. docs/guards.md records what each
guard means for kvfuzz's contracts. Bad input or a wheel that cannot be had: one line, exit 2.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import json
import re
import sys
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # this checkout's kvfuzz

from kvfuzz.errors import BadInput, TargetLoadError  # noqa: E402

DEFAULT_RANGE = "0.5.6..0.5.23"
# a changed line that clamps, bounds, masks, asserts or pads (what docs/guards.md calls a guard)
# (an attention mask, `custom_mask` / `mask_indptr`, is not one)
GUARD = re.compile(r"clamp|(?<![.\w])(?:max|min)\(|maximum|minimum|\.where\(|(?<!custom_)\bmask\b(?!_indptr)|mask="
                   r"|assert|\.fill_\(|\.zero_\(|zeros\(|(?:[=<>!]=?|\bother=|fill_\(|full\(|,)\s*-1\b(?!\s*[,)]?\s*self)"
                   r"|\bpad\b|padded|raise\b")


@dataclass(frozen=True)
class Region:
    """One function around a call site, as a release writes it."""

    file: str
    function: str  # qualified name, Class.method
    start: int  # line of its `def` in the file
    lines: tuple[str, ...]
    sites: tuple[int, ...]  # lines (in the file) of the launches and calls of the ops inside it
    ops: tuple[str, ...]  # the ops launched from it (directly or one level down)


@dataclass(frozen=True)
class Change:
    """A changed line of a region, between release `old` and release `new`."""

    old: str
    new: str
    sign: str  # "+" added in `new`, "-" removed from `old`
    file: str
    line: int  # in `new`'s file for "+", `old`'s for "-"
    function: str
    ops: tuple[str, ...]
    text: str

    def where(self) -> str:
        return f"{self.new if self.sign == '+' else self.old} {self.file}:{self.line}"


def _functions(text: str) -> dict[str, ast.AST]:
    """qualified name -> its def node, every function of a module (methods as Class.method)."""
    out: dict[str, ast.AST] = {}

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = f"{prefix}{child.name}"
                out.setdefault(name, child)
                walk(child, f"{name}.")
            elif isinstance(child, ast.ClassDef):
                walk(child, f"{prefix}{child.name}.")
            else:
                walk(child, prefix)

    walk(ast.parse(text), "")
    return out


def regions(sites: list[dict], sources: dict[str, str]) -> dict[tuple[str, str], Region]:
    """(file, function) -> Region of every function holding a site of `sites` (a release's
    call-site records) or calling one of them, read from `sources` (path -> text)."""
    wanted: dict[tuple[str, str], tuple[set[int], set[str]]] = {}
    for s in sites:
        if s["kind"] == "passed" or s["function"] == "<module>":
            continue
        lines, ops = wanted.setdefault((s["file"], s["function"]), (set(), set()))
        lines.add(s["line"])
        ops.add(s["op"])
        for c in s.get("callers", []):
            if c["function"] == "<module>":
                continue
            lines, ops = wanted.setdefault((c["file"], c["function"]), (set(), set()))
            lines.add(c["line"])
            ops.add(s["op"])
    parsed: dict[str, dict[str, ast.AST]] = {}
    out = {}
    for (file, function), (lines, ops) in sorted(wanted.items()):
        if file not in sources:
            continue
        if file not in parsed:
            parsed[file] = _functions(sources[file])
        node = parsed[file].get(function)
        if node is None:
            continue
        text = sources[file].splitlines()
        start = min([d.lineno for d in node.decorator_list] + [node.lineno])
        out[(file, function)] = Region(file, function, start, tuple(text[start - 1:node.end_lineno]),
                                       tuple(sorted(lines)), tuple(sorted(ops)))
    return out


def _match(key: tuple[str, str], old: dict[tuple[str, str], Region]) -> Region | None:
    """`key`'s region in the release before: the same file and function, else the one function
    of that name elsewhere (a module SGLang moved)."""
    if key in old:
        return old[key]
    for name in (key[1], key[1].rsplit(".", 1)[-1]):  # a method may move to another class too
        same = [r for (f, fn), r in old.items() if fn == name or fn.rsplit(".", 1)[-1] == name]
        if len(same) == 1:
            return same[0]
    return None


def diff(old_v: str, old: dict[tuple[str, str], Region], new_v: str, new: dict[tuple[str, str], Region],
         near: int | None = None, every_line: bool = False) -> list[Change]:
    """The changed lines between the regions of two releases that look like guards or padding
    (every changed line with `every_line`), within `near` lines of a site when given. A region
    only one release has counts as wholly added (or removed)."""
    out: list[Change] = []
    matched_old: set[tuple[str, str]] = set()
    pairs: list[tuple[Region | None, Region | None]] = []
    for key, r in new.items():
        o = _match(key, old)
        if o is not None:
            matched_old.add((o.file, o.function))
        pairs.append((o, r))
    pairs += [(r, None) for key, r in old.items() if key not in matched_old]

    def keep(region: Region, line: int, text: str) -> bool:
        if not text.strip() or text.strip().startswith("#"):
            return False
        if near is not None and region.sites and not any(abs(line - s) <= near for s in region.sites):
            return False
        return every_line or bool(GUARD.search(text))

    for o, r in pairs:
        a = [ln.strip() for ln in o.lines] if o else []
        b = [ln.strip() for ln in r.lines] if r else []
        ref = r or o
        ops = tuple(sorted(set((o.ops if o else ()) + (r.ops if r else ()))))
        for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
            gone = [i for i in range(i1, i2) if keep(o, o.start + i, o.lines[i])] if tag != "insert" else []
            came = [j for j in range(j1, j2) if keep(r, r.start + j, r.lines[j])] if tag != "delete" else []
            if not every_line:  # a line rewritten with the same guard words (a rename) is no new guard
                same = Counter(_words(a[i]) for i in gone) & Counter(_words(b[j]) for j in came)
                gone, came = _without(gone, a, same), _without(came, b, same)
            out += [Change(old_v, new_v, "-", o.file, o.start + i, o.function, ops, a[i]) for i in gone]
            out += [Change(old_v, new_v, "+", r.file, r.start + j, ref.function, ops, b[j]) for j in came]
    return out


def _words(line: str) -> tuple[str, ...]:
    return tuple(m.group(0) for m in GUARD.finditer(line))


def _without(idx: list[int], lines: list[str], same: Counter) -> list[int]:
    """`idx` less one line per guard-word tuple counted in `same`."""
    left = Counter(same)
    out = []
    for i in idx:
        w = _words(lines[i])
        if left[w] > 0:
            left[w] -= 1
        else:
            out.append(i)
    return out


# the modules where CUDA-graph replay pads its input buffers (`--padding`): the buffers every
# graph-launched kernel reads (seq_lens, req_pool_indices, out_cache_loc), set outside the callers
PADDING_MODULES = re.compile(r"sglang/srt/model_executor/(cuda_graph_buffer_registry|input_buffers|cuda_graph_runner"
                             r"|runner/\w*graph_runner|runner/base_runner)\.py")
PADDING = "graph padding"


def module_regions(sources: dict[str, str]) -> dict[tuple[str, str], Region]:
    """Every function of `sources` as a region of its own, its ops `PADDING`."""
    out = {}
    for file, text in sorted(sources.items()):
        lines = text.splitlines()
        for function, node in _functions(text).items():
            start = min([d.lineno for d in node.decorator_list] + [node.lineno])
            out[(file, function)] = Region(file, function, start, tuple(lines[start - 1:node.end_lineno]),
                                           (), (PADDING,))
    return out


def release_regions(version: str, padding: bool = False) -> dict[tuple[str, str], Region]:
    """The regions of sglang==`version`, from its shipped call sites and its wheel; with
    `padding`, also every function of its graph runners' buffer modules."""
    from kvfuzz.callsites import release_sites
    from kvfuzz.callsites.sources import release_sources

    sites = release_sites(version)
    files = {s["file"] for s in sites} | {c["file"] for s in sites for c in s.get("callers", [])}
    _, _, sources = release_sources(version)
    out = regions(sites, {f: t for f, t in sources.items() if f in files})
    if padding:
        more = module_regions({f: t for f, t in sources.items() if PADDING_MODULES.fullmatch(f)})
        out.update({k: r for k, r in more.items() if k not in out})
    return out


def releases_of(spec: str) -> list[str]:
    """The releases `--releases` names that the call-site data holds, oldest first (a range skips
    the .post releases it has no data for); BadInput for one named outright that it lacks."""
    from kvfuzz import bisect
    from kvfuzz.callsites import load

    have = load()["releases"]
    chosen = bisect.parse_releases(spec)
    if ".." not in spec:
        missing = [v for v in chosen if v not in have]
        if missing:
            raise BadInput(f"--releases: no call-site data for {', '.join(missing)} "
                           f"(scripts/gen_callsites.py --release X adds it)")
    out = [v for v in chosen if v in have]
    if len(out) < 2:
        raise BadInput(f"--releases {spec!r}: at least two releases with call-site data are needed")
    return out


def markdown(changes: list[Change]) -> str:
    lines = ["| release | file:line | function | ops | +/- | line |", "| --- | --- | --- | --- | --- | --- |"]
    for c in changes:
        text = c.text.replace("|", "\\|")
        lines.append(f"| {c.new if c.sign == '+' else c.old} | `{c.file.removeprefix('sglang/')}:{c.line}` | "
                     f"`{c.function}` | {', '.join(c.ops)} | {c.sign} | `{text}` |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--releases", default=DEFAULT_RANGE, help=f"A..B or X,Y,Z (default {DEFAULT_RANGE})")
    ap.add_argument("--near", type=int, metavar="N", help="only lines within N lines of a launch or call")
    ap.add_argument("--all-lines", action="store_true", help="every changed line, not only guard-like ones")
    ap.add_argument("--op", action="append", help="only regions launching this op (repeatable)")
    ap.add_argument("--padding", action="store_true",
                    help="also every function of the CUDA-graph runners' buffer modules (ops: 'graph padding')")
    ap.add_argument("--json", type=Path, metavar="FILE")
    ap.add_argument("--markdown", type=Path, metavar="FILE")
    args = ap.parse_args(argv)
    if args.near is not None and args.near < 0:
        print("diff_guards: error: --near must be >= 0", file=sys.stderr)
        return 2
    try:
        versions = releases_of(args.releases)
        if args.op:
            from kvfuzz.ops import records
            unknown = [o for o in args.op if o not in records()]
            if unknown:
                raise BadInput(f"--op: no op {', '.join(unknown)} (kvfuzz ops lists them)")
        found = {v: release_regions(v, args.padding) for v in versions}
    except (BadInput, TargetLoadError) as exc:
        print(f"diff_guards: error: {exc}", file=sys.stderr)
        return 2
    if args.op:
        keep = set(args.op) | {PADDING}
        found = {v: {k: r for k, r in rs.items() if set(r.ops) & keep} for v, rs in found.items()}
    changes: list[Change] = []
    for old_v, new_v in zip(versions, versions[1:]):
        got = diff(old_v, found[old_v], new_v, found[new_v], args.near, args.all_lines)
        print(f"== {old_v} -> {new_v}: {len(got)} lines", flush=True)
        for c in got:
            print(f"  {c.sign} {c.where()}  [{c.function}; {', '.join(c.ops)}]  {c.text}")
        changes += got
    if args.json:
        args.json.write_text(json.dumps({"releases": versions, "near": args.near,
                                         "changes": [asdict(c) for c in changes]}, indent=1) + "\n")
    if args.markdown:
        args.markdown.write_text(markdown(changes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
