"""Static sites: the `tl.store` statements of a kernel's source that write through one of its
pointer parameters.

Where the interpreter's run does not show a finding's wrong (a value the compiled kernel
computes otherwise), the site can still be named when it is unambiguous: the output is written
by exactly one `tl.store` of the kernel that ran. A store writes through a parameter when its
pointer expression uses the parameter or a name assigned from it (`dst = dst_ptr + ...`,
followed through the kernel's assignments); a pointer passed on to a `@triton.jit` helper is not
followed, so such a kernel has no static site for it.
"""

from __future__ import annotations

import ast
import functools


@functools.lru_cache(maxsize=64)
def _tree(file: str) -> ast.Module | None:
    try:
        with open(file, encoding="utf-8") as fh:
            return ast.parse(fh.read(), filename=file)
    except (OSError, SyntaxError, ValueError):
        return None


def _function(tree: ast.Module, name: str, first_line: int) -> ast.FunctionDef | None:
    found = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == name]
    for fn in found:
        lines = {fn.lineno} | {d.lineno for d in fn.decorator_list}
        if first_line in lines:
            return fn
    return found[0] if len(found) == 1 else None


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _is_store(call: ast.Call) -> bool:
    f = call.func
    return isinstance(f, ast.Attribute) and f.attr == "store" and isinstance(f.value, ast.Name) and f.value.id == "tl"


def stores_through(file: str, kernel: str, first_line: int, param: str) -> list[int]:
    """The lines of the `tl.store` calls of `kernel` (defined in `file` at `first_line`) whose
    pointer is derived from `param`; [] where the source cannot be read."""
    tree = _tree(file)
    fn = _function(tree, kernel, first_line) if tree is not None else None
    if fn is None:
        return []
    derived = {param}
    assigns = [n for n in ast.walk(fn) if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and n.value]
    changed = True
    while changed:  # names assigned from a derived name are derived: to a fixed point
        changed = False
        for a in assigns:
            if _names(a.value) & derived:
                targets = a.targets if isinstance(a, ast.Assign) else [a.target]
                new = set().union(*(_names(t) for t in targets)) - derived
                if new:
                    derived |= new
                    changed = True
    lines = []
    for call in (n for n in ast.walk(fn) if isinstance(n, ast.Call) and _is_store(n)):
        ptr = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "pointer"), None)
        if ptr is not None and _names(ptr) & derived:
            lines.append(call.lineno)
    return sorted(set(lines))


def guard_of(file: str, line: int) -> dict | None:
    """{"kernel", "pointer", "mask"} of the `tl.store` or `tl.load` call at `line` of `file`: its
    function, and its pointer and mask expressions as source text, where every name in them is
    a parameter or assigned once in that function (so two calls with the same texts compute the
    same addresses and the same guard); None otherwise, or where the source cannot be read."""
    tree = _tree(file)
    if tree is None:
        return None
    fns = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.lineno <= line <= (n.end_lineno or 0)]
    if not fns:
        return None
    fn = max(fns, key=lambda n: n.lineno)  # the innermost
    calls = [n for n in ast.walk(fn) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
             and n.func.attr in ("store", "load") and isinstance(n.func.value, ast.Name) and n.func.value.id == "tl"
             and n.lineno <= line <= (n.end_lineno or n.lineno)]
    if len(calls) != 1:
        return None
    call = calls[0]
    ptr = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "pointer"), None)
    at = 2 if call.func.attr == "store" else 1
    mask = call.args[at] if len(call.args) > at else next((k.value for k in call.keywords if k.arg == "mask"), None)
    if ptr is None:
        return None
    assigned: dict[str, int] = {}
    for n in ast.walk(fn):
        targets = n.targets if isinstance(n, ast.Assign) else [n.target] if isinstance(
            n, (ast.AugAssign, ast.AnnAssign, ast.For)) else []
        for t in targets:
            for name in _names(t):
                assigned[name] = assigned.get(name, 0) + 1
    used = _names(ptr) | (_names(mask) if mask is not None else set())
    if any(assigned.get(name, 0) > 1 for name in used):
        return None
    return {"kernel": fn.name, "pointer": ast.unparse(ptr), "mask": ast.unparse(mask) if mask is not None else ""}
