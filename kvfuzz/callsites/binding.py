"""Replay a call site's argument list, as written, against the signature of the same release.

Python (and Triton's launcher, which binds a kernel's arguments as Python does) gives the i-th
positional argument to the i-th positional parameter, whatever the argument is called. A release
that inserts a parameter before others shifts every caller that passes them by position: sglang
0.4.10.post1's cutlass_mla_backend.py passes `PAGE_SIZE` as the 8th positional argument of
`create_flashmla_kv_indices_triton`, whose 8th parameter is `NUM_PAGE_PER_BLOCK` (`PAGED_SIZE`
is the 9th), so the page size becomes the block's page count and `PAGED_SIZE` keeps its default.

`check(site, func)` binds the site's arguments to the `def` and returns a finding of kind
`binding` for
* a positional argument whose name (the variable, attribute or `x.stride(0)` it is written as)
  matches another parameter of the signature better than the one it binds to (`misbound`);
* a call that cannot bind at all (`cannot_bind`): more positional arguments than the signature
  takes, a keyword it does not have, a parameter given twice, a required parameter missing.
A call with `*args` or `**kwargs` is bound as far as it is written (no missing-parameter check).
kvfuzz binds by name, so its own launches never show these; the finding is about the call site.
"""

from __future__ import annotations

import ast
import difflib
from dataclasses import dataclass

# keywords Triton's launcher takes beside the kernel's parameters
LAUNCH_OPTIONS = frozenset({"num_warps", "num_stages", "num_ctas", "waves_per_eu", "matrix_instr_nonkdim", "kpack",
                            "enable_fp_fusion", "maxnreg", "launch_cooperative_grid", "debug", "grid"})
MATCH = 0.9  # name similarity (difflib ratio) from which an argument's name "means" a parameter


@dataclass(frozen=True)
class Param:
    name: str
    positional: bool  # may be given by position
    default: bool  # has a default
    constexpr: bool


@dataclass(frozen=True)
class Signature:
    params: tuple[Param, ...]
    varargs: bool
    varkw: bool

    @property
    def positional(self) -> list[Param]:
        return [p for p in self.params if p.positional]

    def text(self) -> str:
        parts = [p.name + (": constexpr" if p.constexpr else "") + ("=..." if p.default else "") for p in self.params]
        return "(" + ", ".join(parts) + ")"


def signature(func: ast.FunctionDef) -> Signature:
    a = func.args
    pos = a.posonlyargs + a.args
    first_default = len(pos) - len(a.defaults)

    def constexpr(arg: ast.arg) -> bool:
        return arg.annotation is not None and ast.unparse(arg.annotation).endswith("constexpr")

    params = [Param(x.arg, True, i >= first_default, constexpr(x)) for i, x in enumerate(pos)]
    params += [Param(x.arg, False, d is not None, constexpr(x)) for x, d in zip(a.kwonlyargs, a.kw_defaults)]
    return Signature(tuple(params), a.vararg is not None, a.kwarg is not None)


def arg_name(text: str) -> str | None:
    """The name an argument is written as: `x`, `self.x`, `x[:bs]` -> x; `x.stride(0)` ->
    x_stride; a constant or another expression -> None."""
    try:
        expr = ast.parse(text, mode="eval").body
    except SyntaxError:
        return None
    suffix = ""
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr == "stride":
        expr, suffix = expr.func.value, "_stride"
    while isinstance(expr, ast.Subscript):
        expr = expr.value
    if isinstance(expr, ast.Name):
        return expr.id + suffix
    if isinstance(expr, ast.Attribute):
        return expr.attr + suffix
    return None


def _norm(name: str) -> str:
    """lower case, without leading underscores and `ptr` words (`req_to_token_ptr_stride` ->
    `req_to_token_stride`)."""
    return "_".join(w for w in name.lower().strip("_").split("_") if w != "ptr")


def similarity(a: str, b: str) -> float:
    a, b = _norm(a), _norm(b)
    return 1.0 if a == b else difflib.SequenceMatcher(None, a, b).ratio()


def _within(short: list[str], long: list[str]) -> bool:
    return any(long[i:i + len(short)] == short for i in range(len(long) - len(short) + 1))


def names_match(arg: str, param: str) -> bool:
    """Whether an argument's name stands for a parameter: the same name, a close spelling, or one
    whose words run inside the other's (`cu_seq_lens` for `chunk_cu_seq_lens`, `page_table` for
    `page_table_dst`)."""
    a, p = _norm(arg).split("_"), _norm(param).split("_")
    return similarity(arg, param) >= MATCH or _within(a, p) or _within(p, a)


def meant(text: str, lands_in: str, sig: Signature) -> str:
    """The parameter an argument written as `text` means, given that it lands in `lands_in`:
    another parameter its name stands for much better (`misbound`), else the one it lands in
    (a name that matches it, a constant, an expression)."""
    name = arg_name(text)
    if name is None or names_match(name, lands_in):
        return lands_in
    best = max((p for p in sig.params if p.name != lands_in), key=lambda p: similarity(name, p.name), default=None)
    return best.name if best is not None and similarity(name, best.name) >= MATCH else lands_in


def _finding(what: str, message: str, **extra) -> dict:
    return {"kind": "binding", "what": what, "message": message, **extra}


def check(args: list[str], kwargs: dict[str, str], sig: Signature, launch: bool) -> list[dict]:
    """The binding findings of a call with these arguments (as written) against `sig`."""
    out: list[dict] = []
    positional = sig.positional
    bound: dict[str, str] = {}
    starred = any(a.startswith("*") for a in args) or "**" in kwargs
    for i, text in enumerate(args):
        if text.startswith("*"):
            break  # the rest binds at run time
        if i >= len(positional):
            if not sig.varargs:
                out.append(_finding("cannot_bind", f"{len(args)} positional arguments, the signature takes "
                                    f"{len(positional)}: `{text}` has no parameter", arg=i, text=text))
            break
        param = positional[i]
        bound[param.name] = text
        means = meant(text, param.name, sig)
        if means != param.name:
            kind = " (constexpr)" if param.constexpr else ""
            out.append(_finding("misbound", f"positional argument {i + 1} `{text}` binds to `{param.name}`{kind}; "
                                f"its name means `{means}`", arg=i, text=text, param=param.name, means=means))
    names = {p.name for p in sig.params}
    for key, text in kwargs.items():
        if key == "**":
            continue
        if key in bound:
            out.append(_finding("cannot_bind", f"`{key}` given by position (`{bound[key]}`) and by keyword (`{text}`)",
                                param=key, text=text))
        elif key in names:
            bound[key] = text
        elif not sig.varkw and not (launch and key in LAUNCH_OPTIONS):
            out.append(_finding("cannot_bind", f"keyword `{key}` is no parameter of the signature", param=key, text=text))
    if not starred:
        for p in sig.params:
            if not p.default and p.name not in bound:
                out.append(_finding("cannot_bind", f"required parameter `{p.name}` is not given", param=p.name))
    return out
