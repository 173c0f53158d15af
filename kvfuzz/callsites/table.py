"""The call-site data as text: docs/callsites.md (Markdown) and `kvfuzz ops --target` lines."""

from __future__ import annotations

from ..targets.releases import parse_version

# releases whose every call site docs/callsites.md lists (the others: counts per op)
DETAILED = ("0.5.14", "0.5.19", "0.5.20", "0.5.23")
_CONDITION_CHARS = 160


def _place(site: dict) -> str:
    return f"{site['file'].removeprefix('sglang/')}:{site['line']}"


def _launch(site: dict) -> str:
    if site["kind"] == "passed":
        return f"passed to {site['passed_to']}"
    return f"[{site['grid']}]" if site["kind"] == "launch" else "call"


def _arguments(site: dict) -> str:
    return ", ".join(site["args"] + [f"{k}={v}" if k != "**" else f"**{v}" for k, v in site["kwargs"].items()])


def _selected(site: dict) -> str:
    opts = [k if v == "yes" else f"{k}={v}" for k, v in site["options"].items()]
    cond = " and ".join(site["conditions"])
    if len(cond) > _CONDITION_CHARS:
        cond = cond[: _CONDITION_CHARS - 3] + "..."
    via = _via(site)
    return "; ".join(x for x in (", ".join(opts), f"if {cond}" if cond else "",
                                 f"via {', '.join(via)}" if via else "") if x)


def _via(site: dict) -> list[str]:
    """Where the helper holding a site is called: `file:line function (options)`."""
    out = []
    for c in site.get("callers", []):
        opts = ", ".join(k if v == "yes" else f"{k}={v}" for k, v in c["options"].items())
        out.append(f"{_place(c)} {c['function']}" + (f" ({opts})" if opts else ""))
    return out


def _dtypes(site: dict) -> str:
    return ", ".join(f"{k}: {v}" for k, v in site["dtypes"].items())


def _binding(site: dict) -> str:
    return "; ".join(b["message"] for b in site["binding"])


def _launched(site: dict, version: str) -> str:
    from .launched import launched_by

    return launched_by(site, version)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ") if text else "-"


def _ops_in_order() -> list[str]:
    from ..ops import records

    return list(records())


def _releases(data: dict) -> list[str]:
    return sorted(data["releases"], key=lambda v: (parse_version(v), v))


def markdown(data: dict) -> str:
    """docs/callsites.md."""
    releases = _releases(data)
    ops = _ops_in_order()
    lines = [
        "# SGLang's call sites of kvfuzz's ops",
        "",
        "Where each SGLang release launches the kernels kvfuzz fuzzes, read from the release wheel's",
        "Python sources with `ast` (`kvfuzz/callsites/`): every launch of a kernel on a grid and every",
        "call of a wrapper that is an op's entry point, in the attention backends, the speculative paths,",
        "the graph runners and the memory pools (modules under `sglang/test/` are left out). Per site:",
        "where it is, the enclosing function, the grid, the arguments as written, the dtype of each",
        "argument whose allocation is visible (a `dtype=` where the same function, or for `self.x` a",
        "method of the same class, assigns it), and what selects it: the attention backend its file",
        "serves (`<name>_backend.py`; `flashattention` is `fa3`), speculative decoding, CUDA-graph",
        "capture or replay (by its file and function names), sliding-window attention (`swa`: named by a",
        "condition or the function; `swa=argument`: an argument names it), the `if` conditions",
        "around the call inside its function, as written, and, for a site inside a helper outside the",
        "attention backends (`KVIndexTranslator.pack_read_stream`, say), `via`: where that helper is",
        "called, one level up, by its name (a name defined more than three times is not followed).",
        "A kernel handed to another function as an argument is a site of its own (`passed to`); a",
        "parameter named after the kernel (`<entry>_fn`) that the receiving function launches is a launch.",
        "",
        "`launched by`: the contract variant (and its modes: the optional tensors and later arguments the",
        "site passes, an output dtype other than the first the contract takes) by which kvfuzz launches the",
        "site's call as the site makes it, or `not launched` and why (`kvfuzz/callsites/launched.py`, read",
        "from the site's arguments, the op's `OpCall` and the release's contract variant).",
        "",
        "`binding`: the site's arguments replayed, as written, against the definition of the entry point",
        "the call reaches in the same release (`kvfuzz/callsites/binding.py`): a positional argument",
        "whose name means another parameter than the one it lands in, or a call that cannot bind.",
        "kvfuzz binds its own calls by parameter name, so only a call site shows these. In a run, `kvfuzz",
        "fuzz --target sglang==X` binds each call site of the ops it runs against the target and reports",
        "each such argument as a finding of kind `binding` (JSON, console, JUnit, Markdown: the site, the",
        "argument as written, the parameter it lands in, the one it means), and launches each misbound site",
        "with its own argument list (`as_called`, `kvfuzz/callsites/launch.py`), so the misbinding shows as",
        "wrong output in a case saved to the corpus that `kvfuzz replay` launches the same way;",
        "`--call-sites FILE` (a JSON list of sites as `kvfuzz/callsites/data/callsites.json` holds them)",
        "checks given sites against any target (a kernel file with an older release's signature, say).",
        "",
        "Generated by `python scripts/gen_callsites.py " + " ".join(f"--release {v}" for v in releases) +
        "".join(f" --search {v}" for v in data.get("searched", {})) + "`",
        "(which also writes `kvfuzz/callsites/data/callsites.json`, the data `kvfuzz ops --target",
        "sglang==X` prints); `--check` exits 1 when these files differ from what the wheels give.",
        "Every call site of 0.5.14, 0.5.19, 0.5.20 and 0.5.23 is listed below; for the other releases,",
        "the counts, and `kvfuzz ops --target sglang==X` lists them.",
        "",
        "## Binding findings",
        "",
    ]
    searched = data.get("searched", {})
    every = sorted([*releases, *searched], key=lambda v: (parse_version(v), v))
    found = [(v, s, b) for v in releases for s in data["releases"][v]["sites"] for b in s["binding"]]
    found += [(v, b, b) for v in searched for b in searched[v]["binding"]]
    found.sort(key=lambda f: (every.index(f[0]), f[1]["file"], f[1]["line"]))
    if found:
        lines += ["| release | site | entry point | finding |", "| --- | --- | --- | --- |"]
        lines += [f"| {v} | `{_place(s)}` | `{s['entry']}` | {_cell(b['message'])} |" for v, s, b in found]
    else:
        lines.append("None.")
    if searched:
        lines += ["", "Searched for binding findings only (the number of call sites each has): " +
                  ", ".join(f"{v} ({searched[v]['sites']})" for v in sorted(searched, key=lambda v: (parse_version(v), v)))
                  + ". Every release with call sites kept is in the tables below."]
    lines += ["", "## Launched by kvfuzz", "",
              "Call sites whose launch mode (variant, optional tensors, later arguments, dtypes) kvfuzz makes, of all",
              "call sites (`launched by`), per release:", ""]
    for v in DETAILED:
        if v in data["releases"]:
            sites = data["releases"][v]["sites"]
            out = [s for s in sites if _launched(s, v).startswith("not launched")]
            lines.append(f"- {v}: {len(sites) - len(out)} of {len(sites)}"
                         + (": not " + "; ".join(f"`{_place(s)}` ({_launched(s, v).split(': ', 1)[1]})" for s in out)
                            if out else ""))
    lines += ["", "## Call sites per op and release", "",
              "| release | " + " | ".join(f"`{op}`" for op in ops) + " |",
              "| --- |" + " --- |" * len(ops)]
    for v in releases:
        sites = data["releases"][v]["sites"]
        lines.append(f"| {v} | " + " | ".join(str(sum(s["op"] == op for s in sites) or "-") for op in ops) + " |")
    for op in ops:
        lines += ["", f"## {op}", ""]
        for v in DETAILED:
            if v not in data["releases"]:
                continue
            sites = [s for s in data["releases"][v]["sites"] if s["op"] == op]
            lines += [f"### {op} in sglang {v}", ""]
            if not sites:
                lines += ["No call site.", ""]
                continue
            lines += ["| site | function | launch | arguments as written | dtypes | selected by | launched by "
                      "| binding |",
                      "| --- | --- | --- | --- | --- | --- | --- | --- |"]
            lines += [f"| `{_place(s)}` | `{s['function']}` | {_cell(_launch(s))} | {_cell(_arguments(s))} | "
                      f"{_cell(_dtypes(s))} | {_cell(_selected(s))} | {_cell(_launched(s, v))} | "
                      f"{_cell(_binding(s))} |" for s in sites]
            lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def cli_lines(data: dict, version: str) -> list[str]:
    """The lines `kvfuzz ops --target sglang==X` prints for a release's call sites."""
    entry = data["releases"].get(version)
    if entry is None:
        return [f"call sites: kvfuzz has no call-site data for sglang {version} (docs/callsites.md)"]
    lines = [f"call sites in sglang {version} ({entry['wheel']}; docs/callsites.md):"]
    for op in _ops_in_order():
        sites = [s for s in entry["sites"] if s["op"] == op]
        if not sites:
            continue
        lines.append(f"  {op}: {len(sites)} site{'s' if len(sites) != 1 else ''}")
        for s in sites:
            extra = "; ".join(x for x in (_dtypes(s), _selected({**s, "callers": []})) if x)  # callers: below
            call = _launch(s) if s["kind"] == "passed" else f"{_launch(s)}({_arguments(s)})"
            lines.append(f"    {_place(s)} {s['function']} {call}" + (f"  [{extra}]" if extra else ""))
            lines.append(f"      launched by: {_launched(s, version)}")
            lines += [f"      binding: {b['message']}" for b in s["binding"]]
            lines += [f"      via {v}" for v in _via(s)]
    return lines
