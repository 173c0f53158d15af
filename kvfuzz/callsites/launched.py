"""Which kvfuzz launch makes a call site's launch: the `launched by` column of docs/callsites.md
and of `kvfuzz ops --target sglang==X`.

Read from data: the site's arguments as written (positional ones by 0.5.14's order,
`OpCall.legacy`, then by keyword), the op's `OpCall` (what kvfuzz passes: `supplied`, the
later releases' arguments it turns off: `neutral`, and which case argument each parameter
carries: `carries`, `optional`) and the contract variant that judges the release
(`variant_for_release`, its `variant_args`). A site is launched by that variant with the modes it
uses: each optional tensor it passes (not a literal None), each later argument it passes
(`entry_page_size` for `ENTRY_PAGE_SIZE`), and each output dtype it allocates that the contract
allows (`kv_indices int64`). It is `not launched` where kvfuzz cannot make its call: a keyword
kvfuzz leaves at its default, a parameter kvfuzz keeps at its neutral value that the site sets, a
later argument the release's variant does not draw, a dtype the contract lacks, a release kvfuzz
does not run, a kernel passed elsewhere (launched at its own site).

`MODES` (keyed by op) holds what the generic reading cannot tell, as a function of a site giving
more mode names or a reason it is not launched: an op that adds a launch mode adds an entry.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from .binding import LAUNCH_OPTIONS
from .launch import literal as _literal

NOT_LAUNCHED = "not launched"


def passed(site: Mapping[str, Any], call) -> dict[str, str]:
    """parameter -> the argument as written: positional ones in 0.5.14's order (`call.legacy`),
    then the keywords (launch options left out)."""
    out = {name: text for name, text in zip(call.legacy, site["args"])}
    out.update({k: v for k, v in site["kwargs"].items() if k != "**" and k not in LAUNCH_OPTIONS})
    return out


def _trtllm_graph_modes(site: Mapping[str, Any], given: Mapping[str, str]) -> list[str] | str:
    """trtllm graph metadata: Q_MODE as the site writes it (a name: the mode the backend picks)."""
    q = given.get("q_mode")
    if q is None:
        return ["q_mode 0"]
    return [f"q_mode {q}" if _literal(q)[0] else f"q_mode `{q}` (the backend's)"]


# op -> (site, parameter -> argument as written) -> more modes, or why kvfuzz does not launch it
MODES: dict[str, Callable[[Mapping[str, Any], Mapping[str, str]], "list[str] | str"]] = {
    "trtllm_mha_graph_metadata": _trtllm_graph_modes,
}


def launched_by(site: Mapping[str, Any], version: str) -> str:
    """`VARIANT (mode, ...)` for a site kvfuzz launches as it is called, else `not launched: why`."""
    from ..ops import record
    from ..targets.releases import known_releases, variant_for_release

    if site["kind"] == "passed":
        return f"{NOT_LAUNCHED}: the kernel is passed to {site.get('passed_to')}, whose launch is a site of its own"
    if version not in known_releases():
        return f"{NOT_LAUNCHED}: kvfuzz runs sglang {known_releases()[0]}-{known_releases()[-1]}, not {version}"
    rec = record(site["op"])
    call, contract = rec.call, rec.contract
    variant = variant_for_release(site["op"], version)
    draws = contract.variant_args.get(variant, ())
    given = passed(site, call)
    modes: list[str] = []
    for param, text in given.items():
        is_const, value = _literal(text)
        name = call.canonical(param)
        if name in call.neutral:
            if not (is_const and value == call.neutral[name]):
                return f"{NOT_LAUNCHED}: passes {param}={text}; kvfuzz keeps it {call.neutral[name]!r}"
            continue
        if name not in call.supplied:
            return f"{NOT_LAUNCHED}: passes {param}, which kvfuzz leaves at its default"
        if is_const and value is None:
            continue  # an optional argument left off: the path without it
        for arg, params in call.optional.items():
            if name in params and arg not in modes:
                modes.append(arg)
        for arg, params in call.carries.items():
            if name in params and not (is_const and value in (1, False)):
                if arg not in draws:
                    return f"{NOT_LAUNCHED}: passes {param}; variant {variant} draws no {arg}"
                if arg not in modes:
                    modes.append(arg)
    for tensor, dtype in site.get("dtypes", {}).items():
        arg = next((a for a in contract.args if a.name == tensor or tensor.endswith(a.name)), None)
        short = dtype.removeprefix("torch.")
        if arg is not None and arg.role == "out" and short != arg.dtypes[0]:
            if short not in arg.dtypes:
                return f"{NOT_LAUNCHED}: {tensor} is {short}; the contract takes {', '.join(arg.dtypes)}"
            modes.append(f"{arg.name} {short}")
    extra = MODES.get(site["op"])
    if extra is not None:
        more = extra(site, given)
        if isinstance(more, str):
            return f"{NOT_LAUNCHED}: {more}"
        modes += more
    return f"{variant}" + (f" ({', '.join(modes)})" if modes else "")
