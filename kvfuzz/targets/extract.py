"""Entry points taken out of a module's source without importing the module.

SGLang 0.5.6 - 0.5.12 define their metadata kernels inside the attention backends, modules that
import sgl_kernel and most of sglang.srt at import time. `extract` parses such a module with
`ast`, takes the named entry points and every module-level definition they need, transitively
(the `@triton.jit` kernels, helpers, constants), plus only the imports those need, and returns
the text of a self-contained kernel file. Triton reads a kernel's source from disk
(`inspect.getsource`), so the caller writes that text to a file and loads it as any kernel file.

Allowed imports: `ALLOWED_MODULES` (torch, triton, triton.language, typing) and the names kvfuzz
provides stand-ins for (`STANDINS`: `SWAKVPool`, installed by `sglang_shim` before a target
loads). Anything else a needed definition uses (another import, a name defined conditionally,
a name defined nowhere) refuses the extraction: `ExtractError`, one line. Annotations are not
followed in a module with `from __future__ import annotations` (Python never evaluates them).
"""

from __future__ import annotations

import ast
import builtins
from dataclasses import dataclass

from ..errors import TargetLoadError
from .sglang_shim import POOL_MODULE

ALLOWED_MODULES = frozenset({"torch", "triton", "triton.language", "typing"})
STANDINS = frozenset({(POOL_MODULE, "SWAKVPool")})  # (module, name) kvfuzz provides (sglang_shim)


class ExtractError(TargetLoadError):
    """A definition an entry point needs cannot be taken out of its module: one line."""


@dataclass(frozen=True)
class Source:
    """A module's text, where it came from, and the entry points to take from it."""

    text: str
    origin: str  # e.g. "sglang/srt/layers/attention/triton_backend.py"
    entries: tuple[str, ...]


def _annotation_nodes(tree: ast.AST) -> set[int]:
    """ids of every node inside an annotation (arguments', returns, annotated assignments)."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        anns = []
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            anns.append(node.returns)
            a = node.args
            anns += [x.annotation for x in a.posonlyargs + a.args + a.kwonlyargs + [a.vararg, a.kwarg] if x]
        elif isinstance(node, ast.AnnAssign):
            anns.append(node.annotation)
        for ann in anns:
            if ann is not None:
                skip.update(id(n) for n in ast.walk(ann))
    return skip


def _local_names(node: ast.AST) -> set[str]:
    """Names a definition binds itself (parameters, assignments, loops, local imports)."""
    bound: set[str] = set()
    for n in ast.walk(node):
        if isinstance(n, ast.arg):
            bound.add(n.arg)
        elif isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)):
            bound.add(n.id)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in n.names)
    # `global X` makes X the module's, even where the function assigns it
    return bound - {name for n in ast.walk(node) if isinstance(n, ast.Global) for name in n.names}


def _used_names(node: ast.AST, skip: set[int]) -> set[str]:
    """Free names a top-level statement reads (its own bindings excluded)."""
    used = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
            and id(n) not in skip}
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        used -= _local_names(node) - {node.name}
    return used


def _check_import(node: ast.Import | ast.ImportFrom, alias: ast.alias, origin: str, needed_by: str) -> None:
    if isinstance(node, ast.Import):
        if alias.name in ALLOWED_MODULES:
            return
        what = f"import {alias.name}"
    else:
        module = "." * node.level + (node.module or "")
        if module in ALLOWED_MODULES or (module, alias.name) in STANDINS or module == "__future__":
            return
        what = f"from {module} import {alias.name}"
    raise ExtractError(f"{origin}: {needed_by} needs `{what}`, which kvfuzz does not load (it loads only "
                       f"{', '.join(sorted(ALLOWED_MODULES))} and its SWAKVPool stand-in)")


class _Module:
    """One parsed module: its top-level definitions and imports by the name they bind."""

    def __init__(self, src: Source):
        self.src = src
        try:
            self.tree = ast.parse(src.text)
        except SyntaxError as exc:
            raise ExtractError(f"{src.origin}: cannot parse: {exc}") from None
        self.future = any(isinstance(n, ast.ImportFrom) and n.module == "__future__" and
                          any(a.name == "annotations" for a in n.names) for n in self.tree.body)
        self.skip = _annotation_nodes(self.tree) if self.future else set()
        self.defs: dict[str, ast.stmt] = {}  # name -> its defining statement (the last one wins, as at run time)
        self.imports: dict[str, tuple[ast.stmt, ast.alias]] = {}
        self.conditional: set[str] = set()  # bound (or rebound) inside if/try/with/for blocks
        for stmt in self.tree.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.defs[stmt.name] = stmt
            elif isinstance(stmt, (ast.Assign, ast.AnnAssign)):
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                for t in targets:
                    for n in ast.walk(t):
                        if isinstance(n, ast.Name):
                            self.defs[n.id] = stmt
            elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
                for alias in stmt.names:
                    self.imports[(alias.asname or alias.name).split(".")[0]] = (stmt, alias)
            else:
                self.conditional |= {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name)
                                     and isinstance(n.ctx, ast.Store)}
                self.conditional |= {(a.asname or a.name).split(".")[0] for n in ast.walk(stmt)
                                     if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names}

    def closure(self) -> tuple[list[ast.stmt], list[tuple[ast.stmt, ast.alias]]]:
        """(the needed definitions, the needed imports), or ExtractError."""
        needed: dict[str, str] = {}  # name -> the definition that first needed it
        todo = []
        for entry in self.src.entries:
            if entry not in self.defs or not isinstance(self.defs[entry], (ast.FunctionDef, ast.ClassDef)):
                raise ExtractError(f"{self.src.origin} defines no {entry} at module level")
            needed[entry], todo = entry, todo + [entry]
        imports: dict[str, tuple[ast.stmt, ast.alias]] = {}
        while todo:
            name = todo.pop()
            stmt, chain = self.defs[name], [name]
            while needed[chain[0]] != chain[0]:  # who needs it, back to the entry point
                chain.insert(0, needed[chain[0]])
            name = " -> ".join(chain)
            for node in ast.walk(stmt):  # imports inside a function run when it is called
                if isinstance(node, (ast.Import, ast.ImportFrom)) and node is not stmt:
                    for alias in node.names:
                        _check_import(node, alias, self.src.origin, name)
            for used in sorted(_used_names(stmt, self.skip)):
                if used in needed or used in imports:
                    continue
                if used in self.conditional:  # its value depends on how the module's import went
                    raise ExtractError(f"{self.src.origin}: {name} needs {used}, which the module binds "
                                       f"conditionally (inside an if/try/with/for block)")
                if used in self.defs:
                    needed[used] = chain[-1]
                    todo.append(used)
                elif used in self.imports:
                    imp, alias = self.imports[used]
                    _check_import(imp, alias, self.src.origin, name)
                    imports[used] = (imp, alias)
                elif not hasattr(builtins, used):
                    raise ExtractError(f"{self.src.origin}: {name} needs {used}, which the module does not define")
        wanted = {id(self.defs[n]) for n in needed}
        return [s for s in self.tree.body if id(s) in wanted], list(imports.values())


def _import_text(stmt: ast.stmt, alias: ast.alias) -> str:
    if isinstance(stmt, ast.Import):
        return ast.unparse(ast.Import(names=[alias]))
    return ast.unparse(ast.ImportFrom(module=stmt.module, names=[alias], level=stmt.level))


def _statement_text(text: str, stmt: ast.stmt) -> str:
    """A top-level statement's lines, its decorators included (they start at column 0)."""
    first = min([stmt.lineno] + [d.lineno for d in getattr(stmt, "decorator_list", [])])
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")  # ast's line breaks only
    return "\n".join(lines[first - 1:stmt.end_lineno]) + "\n"


def extract(sources: list[Source], header: str) -> str:
    """The text of one kernel file holding every source's entry points and what they need.
    `header` (comment lines) goes first. A name defined differently by two sources refuses."""
    future, imports, body, seen = False, [], [], {}
    for src in sources:
        mod = _Module(src)
        defs, imps = mod.closure()
        future |= mod.future
        for stmt, alias in sorted(imps, key=lambda imp: imp[0].lineno):  # in the module's order
            text = _import_text(stmt, alias)
            if text not in imports:
                imports.append(text)
        for stmt in defs:
            text = _statement_text(src.text, stmt)
            key = getattr(stmt, "name", None) or text
            if key in seen and seen[key][1] != text:
                raise ExtractError(f"{src.origin} and {seen[key][0]} define {key} differently")
            if key not in seen:
                seen[key] = (src.origin, text)
                body.append(f"# from {src.origin}\n{text.rstrip()}\n")
    lines = [header.rstrip(), ""]
    if future:
        lines.append("from __future__ import annotations\n")
    lines += imports + ["", ""]
    return "\n".join(lines) + "\n\n".join(body)
