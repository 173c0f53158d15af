"""A call site inside a run: its binding findings against the target, and the target's entry
point launched with the site's own argument list (`as_called`).

`run_sites` gives a run's call sites: a release's shipped ones (`sglang==X`), or those of a
`--call-sites FILE` (a JSON list of sites as `kvfuzz/callsites/data/callsites.json` holds them,
or `{"sites": [...]}`), for a kernel file or any other target. `binding_findings` replays each
site of an op against the target's own signature (a kernel file's `def`, read with `ast`; a
release's as its data says) and gives a finding of kind `binding` per argument that lands in
another parameter than it means, or per call that cannot bind.

`as_called`: a case whose `meta["as_called"]` is a call site is launched with that site's
positional and keyword arguments, in the site's order, bound as Python and Triton's launcher
bind them: each argument carries the value of the parameter it means (`binding.meant`: its
name's parameter, else the one it lands in), a constant its own value. So a page size written
in the slot of a newly inserted constexpr reaches that constexpr, as in SGLang, and the judge
sees the wrong output it makes. A case that gives a value the site writes as a constant (a
`kv_start_idx` where the site passes None) does not fit the site: kvfuzz's harness refuses it
(`HarnessError`, never a finding), and so does one that gives a parameter the site leaves at its
default another value (a page size where the site relies on the default 64). The case's kernel path gets `/as_called@FILE#LINE`, so its
findings are apart from those of kvfuzz's own by-name launch.
"""

from __future__ import annotations

import ast
import inspect
import json
from pathlib import Path
from typing import Any, Mapping

from ..errors import BadInput
from . import binding

AS_CALLED = "as_called"  # Case.meta key: the call site the case is launched as
SITE_FIELDS = ("op", "entry", "file", "line", "kind", "args", "kwargs")


def place(site: Mapping[str, Any]) -> str:
    """`file#line` with the file's base name: a signature's part (no ':' in it)."""
    return f"{Path(site['file']).name}#{site['line']}"


def as_called_path(case) -> str:
    """What a case launched as a call site adds to its kernel path ("" for kvfuzz's own launch)."""
    site = case.meta.get(AS_CALLED) if case.meta else None
    return f"/as_called@{place(site)}" if site else ""


def site_ref(site: Mapping[str, Any]) -> dict:
    """What a case's meta keeps of a call site: enough to launch it and to say where it is."""
    return {k: site.get(k) for k in (*SITE_FIELDS, "function", "grid")}


def read_sites(path: Path) -> list[dict]:
    """The call sites of a `--call-sites FILE`; BadInput (one line) for a file that is not one."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise BadInput(f"--call-sites {path}: cannot read it as JSON: {exc}") from None
    sites = doc.get("sites") if isinstance(doc, dict) else doc
    if not isinstance(sites, list):
        raise BadInput(f"--call-sites {path}: expected a list of call sites or {{\"sites\": [...]}}")
    for i, s in enumerate(sites):
        missing = [k for k in SITE_FIELDS if not isinstance(s, dict) or k not in s]
        if missing:
            raise BadInput(f"--call-sites {path}: site {i} lacks {', '.join(missing)}")
        if not isinstance(s["args"], list) or not isinstance(s["kwargs"], dict):
            raise BadInput(f"--call-sites {path}: site {i}: args must be a list and kwargs an object")
    return sites


def run_sites(target: str, call_sites: Path | None = None) -> list[dict]:
    """The call sites a run of `target` checks: the `--call-sites` file's, else a release's
    shipped ones (none for a release kvfuzz has no call-site data of, or another target)."""
    if call_sites is not None:
        return read_sites(call_sites)
    if target.startswith("sglang=="):
        from . import load

        release = load()["releases"].get(target.split("==", 1)[1])
        return list(release["sites"]) if release else []
    return []


def target_signature(target: str, entry: str) -> binding.Signature | None:
    """The signature of `entry` in a kernel-file target, read with `ast`; None for another
    target (a release's sites carry their binding against the release's own definition)."""
    path = Path(target)
    if not target.endswith(".py") or not path.is_file():
        return None
    try:
        tree = ast.parse(path.read_text())
    except (OSError, SyntaxError):
        return None
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == entry:
            return binding.signature(node)
    return None


def binding_of(site: Mapping[str, Any], target: str) -> list[dict]:
    """The site's binding findings against `target`'s entry point."""
    if site["kind"] == "passed":  # its arguments are those of the call that launches it
        return []
    sig = target_signature(target, site["entry"])
    if sig is None:
        return list(site.get("binding") or [])
    return binding.check(list(site["args"]), dict(site["kwargs"]), sig, site["kind"] == "launch")


def binding_findings(op: str, sites: list[dict], target: str) -> list[dict]:
    """The report entries (kind `binding`) of `op`'s call sites among `sites`, one per argument
    that lands elsewhere than it means or per call that cannot bind."""
    out, seen = [], set()
    for site in sites:
        if site["op"] != op or (site["file"], site["line"]) in seen:
            continue
        seen.add((site["file"], site["line"]))
        for b in binding_of(site, target):
            where = f"{site['file']}:{site['line']}"
            out.append({
                "op": op, "kind": "binding",
                "signature": f"{op}:call_site:binding:{b.get('param') or '-'}:{place(site)}",
                "message": f"{where}: {b['message']}",
                "contract": f"call site {where}", "contract_status": "binding",
                "what": b["what"], "site": site_ref(site), "argument": b.get("text"),
                "lands_in": b.get("param"), "means": b.get("means"), "new": True, "case": None,
            })
    return out


# launching a case as a call site does ---------------------------------------------------------


class SiteNotLaunched(Exception):
    """kvfuzz cannot give this call site's argument list from the case."""


def literal(text: str) -> tuple[bool, Any]:
    """(True, its value) for an argument written as a constant (`None`, `64`), else (False, None)."""
    try:
        return True, ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return False, None


def _signature(entry: Any) -> binding.Signature:
    from ..targets.calls import signature_of

    params = list(signature_of(entry).parameters.values())
    kept = [p for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    return binding.Signature(
        tuple(binding.Param(p.name, p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD),
                            p.default is not inspect.Parameter.empty, False) for p in kept),
        any(p.kind is p.VAR_POSITIONAL for p in params), any(p.kind is p.VAR_KEYWORD for p in params))


def site_arguments(b, site: Mapping[str, Any], tensors: Mapping[str, Any], scalars: Mapping[str, Any]):
    """(positional, keyword) values of the site's call on this case, each argument carrying the
    value of the parameter it means; SiteNotLaunched where kvfuzz has no value for it or the
    case gives a value the site writes as another constant."""
    sig = _signature(b.entry)
    getters = b.getters()

    def value(text: str, means: str) -> Any:
        is_const, const = literal(text)
        got = getters.get(means)
        if is_const:
            if got is not None:
                mine = got(tensors, scalars)
                if (const is None) != (mine is None) or (isinstance(const, (int, bool)) and mine != const):
                    given = "a tensor" if mine is not None and const is None else repr(mine)
                    raise SiteNotLaunched(f"the case passes {means} = {given}, the call site {text}")
            return const
        if got is None:
            raise SiteNotLaunched(f"`{text}` means {means}, which kvfuzz does not supply")
        return got(tensors, scalars)

    positional = sig.positional
    args, given = [], set()  # given: the parameters whose values the site passes (wherever they land)
    for i, text in enumerate(site["args"]):
        if text.startswith("*"):
            raise SiteNotLaunched(f"the call site passes `{text}`")
        if i >= len(positional):
            raise SiteNotLaunched(f"the call site's {len(site['args'])} positional arguments do not bind")
        means = binding.meant(text, positional[i].name, sig)
        given.add(means)
        args.append(value(text, means))
    kwargs = {k: value(text, k) for k, text in site["kwargs"].items()
              if k != "**" and k not in binding.LAUNCH_OPTIONS}
    given |= set(kwargs)
    for p in _defaults(b.entry):  # what the site leaves at its default, the case must give so too
        if p.name not in given and p.name in getters:
            mine = getters[p.name](tensors, scalars)
            if (p.default is None) != (mine is None) or (isinstance(p.default, (int, bool)) and mine != p.default):
                shown = "a tensor" if p.default is None else repr(mine)
                raise SiteNotLaunched(f"the call site leaves {p.name} at its default {p.default!r}; the case passes "
                                      f"{shown}")
    return args, kwargs


def _defaults(entry: Any) -> list[inspect.Parameter]:
    from ..targets.calls import signature_of

    return [p for p in signature_of(entry).parameters.values() if p.default is not inspect.Parameter.empty]


def launch_as_called(b, site: Mapping[str, Any], tensors: Mapping[str, Any], scalars: Mapping[str, Any]) -> None:
    """Call the entry point of Binding `b` as call site `site` does: its argument list, kvfuzz's
    grid for a bare kernel. A case that does not fit the site is kvfuzz's failure (HarnessError)."""
    from ..targets.calls import HarnessError, store_result

    try:
        args, kwargs = site_arguments(b, site, tensors, scalars)
    except SiteNotLaunched as exc:
        raise HarnessError(f"launching {b.op} as {site['file']}:{site['line']} calls it: {exc}") from None
    except Exception as exc:  # kvfuzz's case lacks what the site's arguments ask for
        raise HarnessError(f"building {b.op}'s call as {site['file']}:{site['line']}: "
                           f"{type(exc).__name__}: {exc}") from exc
    if b.bare:
        b.entry[b.grid(tensors, scalars) if b.grid else (1,)](*args, **kwargs)
    elif b.returns:
        store_result(tensors[b.returns], b.entry(*args, **kwargs))
    else:
        b.entry(*args, **kwargs)


def with_site(case, site: Mapping[str, Any]):
    """`case` launched as `site` calls the op (its meta names the site)."""
    return case.with_meta(**{AS_CALLED: site_ref(site)})


def misbound(findings: list[dict]) -> list[dict]:
    """The sites (once each) of binding findings whose argument lands in another parameter."""
    seen, out = set(), []
    for f in findings:
        key = (f["site"]["file"], f["site"]["line"])
        if f["what"] == "misbound" and key not in seen:
            seen.add(key)
            out.append(f["site"])
    return out


def as_called_cases(op: str, site: Mapping[str, Any], seed: int, n: int, variant: str | None = None) -> list:
    """`n` in-contract cases of `op` launched as `site` does (a seeded sample: the same each run):
    those no stress rule marks first (a launch some call site makes), then the others."""
    from ..ops import contract_label
    from ..strategies import random_cases

    drawn = random_cases(op, seed, 4 * n, in_contract_only=True, variant=variant)
    plain = [c for c in drawn if contract_label(c) == "in_contract"]
    rest = [c for c in drawn if contract_label(c) != "in_contract"]
    return [with_site(c, site) for c in (plain + rest)[:n]]



def first_wrong(checker, cases: list, started: float | None = None):
    """Run `cases` (launched as a call site) one by one until one shows a finding: (that
    finding as an engine's `Found`, the cases judged). Cases that do not fit the site are
    kvfuzz's (`not_target`), skipped."""
    import time

    from ..engines.common import Found

    ran = 0
    for case in cases:
        v = checker.check(case)
        if v.not_target:
            continue
        ran += 1
        if v.findings:
            return Found(v.findings[0], case, case, found_after_s=None if started is None else
                         time.monotonic() - started, found_at_case=ran), ran
    return None, ran
