"""Every place an SGLang release launches one of kvfuzz's ops, read from its Python sources.

`find_sites(sources, entries)` parses each module with `ast` and returns a `Site` per call of an
op's entry point: a launch `kernel[grid](...)` or a call `wrapper(...)`, under its own name, an
`import ... as` alias, or as an attribute (`module.kernel[grid](...)`). Per site it keeps what
is written there: the grid, the positional and keyword arguments (their source text), the dtype
of each argument whose allocation is visible (a `dtype=` keyword where the same function, or
another method of the same class for a `self.` attribute, assigns it), the `if` conditions
around the call inside its function, and the server options the site's place names (the
attention backend of `.../attention/<name>_backend.py`, speculative decoding, CUDA-graph
capture or replay, sliding-window attention).

`find_defs(sources, entries)` finds each entry point's module-level definition (the signature
`binding.py` replays a call against); `resolve_def` picks, for one site, the definition its
module imports (or defines itself).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

# a backend file's stem -> the attention backend name it serves (where the two differ)
_BACKEND_NAMES = {"flashattention": "fa3"}
_SPEC_WORDS = ("eagle", "draft", "verify", "speculative", "spec_")
_GRAPH_WORDS = ("cuda_graph", "capture", "replay", "graph_runner")
MAX_DEFS = 3  # a helper defined more often than this has too common a name to follow to its callers


@dataclass
class Site:
    """One call of an entry point, as written in the release's source."""

    op: str
    entry: str
    file: str  # inside the wheel, e.g. sglang/srt/layers/attention/triton_backend.py
    line: int
    function: str  # the enclosing function's qualified name (Class.method), "<module>" at top level
    kind: str  # "launch": kernel[grid](...); "call": wrapper(...); "passed": handed to another call
    # (`passed_to`), which launches it under another name
    grid: str | None
    args: list[str]  # positional arguments as written ("*x" for a starred one)
    kwargs: dict[str, str]  # keyword arguments as written ("**" for a ** expansion)
    dtypes: dict[str, str] = field(default_factory=dict)  # argument text -> dtype where allocated
    conditions: list[str] = field(default_factory=list)  # enclosing if-tests, outermost first
    options: dict[str, str] = field(default_factory=dict)  # server options the site's place names
    imported_from: str | None = None  # the module the entry's name is imported from in this file
    binding: list[dict] = field(default_factory=list)  # binding.py's findings (kind "binding")
    signature: str | None = None  # file:line of the definition the call binds to
    passed_to: str | None = None  # kind "passed": the call the entry point is an argument of
    callers: list[dict] = field(default_factory=list)  # find_callers: where the enclosing helper is called

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def _qualname(stack: list[ast.AST]) -> str:
    names = [n.name for n in stack if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    return ".".join(names) or "<module>"


def _module_of(file: str) -> str:
    mod = file[:-3] if file.endswith(".py") else file
    mod = mod.replace("/", ".")
    return mod[: -len(".__init__")] if mod.endswith(".__init__") else mod


def _absolute(file: str, node: ast.ImportFrom) -> str:
    """The absolute module an ImportFrom names (relative imports resolved against `file`)."""
    if not node.level:
        return node.module or ""
    package = _module_of(file).split(".")
    if not file.endswith("__init__.py"):
        package = package[:-1]
    package = package[: len(package) - (node.level - 1)] if node.level > 1 else package
    return ".".join(package + ([node.module] if node.module else []))


def _aliases(tree: ast.Module, file: str, entries: set[str]) -> dict[str, tuple[str, str | None]]:
    """local name -> (entry point, module it is imported from) for every import of an entry,
    at any depth (SGLang imports kernels inside functions too); an entry's own name maps to itself."""
    out: dict[str, tuple[str, str | None]] = {e: (e, None) for e in entries}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            for a in node.names:
                if a.name in entries:
                    out[a.asname or a.name] = (a.name, _absolute(file, node))
    return out


def _callee(func: ast.expr) -> tuple[str | None, str | None, str]:
    """(name called, grid text or None, kind) of a call's func: `f`, `m.f`, `f[g]`, `m.f[g]`."""
    grid = None
    if isinstance(func, ast.Subscript):
        grid, func = ast.unparse(func.slice), func.value
    name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
    return name, grid, "launch" if grid is not None else "call"


def _dtype_in(value: ast.AST) -> str | None:
    """The dtype an allocation expression gives: its `dtype=` keyword, or `.to(torch.X)`."""
    for n in ast.walk(value):
        if isinstance(n, ast.Call):
            for kw in n.keywords:
                if kw.arg == "dtype":
                    return ast.unparse(kw.value)
            if isinstance(n.func, ast.Attribute) and n.func.attr == "to" and n.args:
                text = ast.unparse(n.args[0])
                if text.startswith("torch."):
                    return text
    return None


def _assignments(scope: ast.AST) -> dict[str, tuple[str, int]]:
    """target text -> (dtype, line) of each assignment in `scope` whose value shows a dtype (the
    first such assignment of a target wins: the allocation, not a later refill)."""
    out: dict[str, tuple[str, int]] = {}
    for n in ast.walk(scope):
        targets = n.targets if isinstance(n, ast.Assign) else [n.target] if isinstance(n, ast.AnnAssign) and n.value else []
        if not targets:
            continue
        dtype = _dtype_in(n.value)
        if dtype is None:
            continue
        for t in targets:
            key = ast.unparse(t)
            if key not in out:
                out[key] = (dtype, n.lineno)
    return out


def _base(expr: ast.expr) -> ast.expr:
    """The tensor an argument expression reads: `x[:bs]`, `x.stride(0)`, `x.contiguous()` -> x."""
    while True:
        if isinstance(expr, ast.Subscript):
            expr = expr.value
        elif isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr in (
                "contiguous", "view", "flatten", "reshape", "narrow"):
            expr = expr.func.value
        else:
            return expr


def _options(file: str, function: str, conditions: list[str], texts: list[str]) -> dict[str, str]:
    """The server options the site's file, function and conditions name."""
    out: dict[str, str] = {}
    stem = file.rsplit("/", 1)[-1][:-3]
    if is_backend(file):
        name = stem[: -len("_backend")]
        out["attention_backend"] = _BACKEND_NAMES.get(name, name)
    where = f"{file} {function}".lower()
    if "/speculative/" in file or any(w in where for w in _SPEC_WORDS):
        out["speculative"] = "yes"
    if any(w in where for w in _GRAPH_WORDS):
        out["cuda_graph"] = "yes"
    if any("swa" in t.lower() or "sliding" in t.lower() for t in conditions + [function]):
        out["swa"] = "yes"
    elif any("swa" in t.lower() for t in texts):
        out["swa"] = "argument"
    return out


class _Walker(ast.NodeVisitor):
    def __init__(self, file: str, tree: ast.Module, entries: dict[str, str]):
        self.file, self.tree = file, tree
        self.aliases = _aliases(tree, file, set(entries))
        self.entries = entries  # entry point -> op
        self.stack: list[ast.AST] = []
        self.conds: list[str] = []
        self.sites: list[Site] = []

    def _scoped(self, node: ast.AST) -> None:
        self.stack.append(node)
        saved, self.conds = self.conds, []
        self.generic_visit(node)
        self.stack.pop()
        self.conds = saved

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _scoped

    def visit_If(self, node: ast.If) -> None:
        self.visit(node.test)
        test = ast.unparse(node.test)
        self.conds.append(test)
        for s in node.body:
            self.visit(s)
        self.conds[-1] = f"not ({test})"
        for s in node.orelse:
            self.visit(s)
        self.conds.pop()

    def _entry(self, name: str | None) -> tuple[str, str | None] | None:
        """(entry point, module imported from) a called name stands for: an entry's name, its
        import alias, or a parameter named after it (`<entry>_fn`: SGLang passes a kernel down so)."""
        if name is None:
            return None
        if name in self.aliases:
            return self.aliases[name]
        params = {a.arg for f in self.stack if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                  for a in f.args.posonlyargs + f.args.args + f.args.kwonlyargs}
        if name not in params:  # `<entry>_kernel` defined at module level is another kernel
            return None
        return next(((e, None) for e in self.entries if name.startswith(e + "_")), None)

    def visit_Call(self, node: ast.Call) -> None:
        name, grid, kind = _callee(node.func)
        found = self._entry(name)
        if found:
            self.sites.append(self._site(node, found[0], found[1], grid, kind))
        for value in list(node.args) + [kw.value for kw in node.keywords]:  # the kernel handed on
            passed = value.id if isinstance(value, ast.Name) else value.attr if isinstance(value, ast.Attribute) else None
            if passed in self.aliases:
                site = self._site(node, *self.aliases[passed], None, "passed")
                site.passed_to = ast.unparse(node.func)
                site.args, site.kwargs, site.dtypes = [], {}, {}  # the other call's, not the kernel's
                self.sites.append(site)
        self.generic_visit(node)

    def _site(self, node: ast.Call, entry: str, module: str | None, grid: str | None, kind: str) -> Site:
        args = [("*" + ast.unparse(a.value)) if isinstance(a, ast.Starred) else ast.unparse(a) for a in node.args]
        kwargs = {(kw.arg if kw.arg is not None else "**"): ast.unparse(kw.value) for kw in node.keywords}
        function = _qualname(self.stack)
        site = Site(op=self.entries[entry], entry=entry, file=self.file, line=node.lineno, function=function,
                    kind=kind, grid=grid, args=args, kwargs=kwargs, conditions=list(self.conds),
                    imported_from=module)
        site.dtypes = self._dtypes(node)
        site.options = _options(self.file, function, site.conditions, args + list(kwargs.values()))
        return site

    def _dtypes(self, node: ast.Call) -> dict[str, str]:
        func = next((n for n in reversed(self.stack) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))), None)
        cls = next((n for n in reversed(self.stack) if isinstance(n, ast.ClassDef)), None)
        local = _assignments(func) if func is not None else {}
        members = _assignments(cls) if cls is not None else {}
        out = {}
        for a in list(node.args) + [kw.value for kw in node.keywords]:
            key = ast.unparse(_base(a.value if isinstance(a, ast.Starred) else a))
            found = local.get(key) or (members.get(key) if key.startswith("self.") else None)
            if found:
                out[key] = found[0]
        return out


def find_sites(sources: dict[str, str], entries: dict[str, str]) -> list[Site]:
    """Every call of an entry point (entry name -> op) in `sources` (path inside the wheel ->
    text), in file and line order. A module that does not parse is skipped."""
    sites: list[Site] = []
    for file in sorted(sources):
        text = sources[file]
        if not any(e in text for e in entries):  # most modules name no entry point
            continue
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        walker = _Walker(file, tree, entries)
        walker.visit(tree)
        sites += walker.sites
    return sorted(sites, key=lambda s: (s.file, s.line))


def is_backend(file: str) -> bool:
    """Whether a module is an attention backend (`.../attention/<name>_backend.py`)."""
    return "/attention/" in file and file.endswith("_backend.py")


def find_callers(sources: dict[str, str], sites: list[Site]) -> None:
    """Fill each site's `callers`: the calls, anywhere in `sources`, of the function holding it,
    one level up and by its name (a helper outside the attention backends, such as
    `KVIndexTranslator.pack_read_stream`, is where the backends and speculative paths reach the
    kernel; a name several classes define lists the callers of each)."""
    helpers = {s.function.rsplit(".", 1)[-1] for s in sites
               if s.kind != "passed" and s.function != "<module>" and not is_backend(s.file)}
    # a name many modules define (`forward`, `__call__`) says nothing about which one is called
    helpers = {h for h in helpers if sum(text.count(f"def {h}(") for text in sources.values()) <= MAX_DEFS}
    if not helpers:
        return
    found = [c for c in find_sites(sources, {h: "caller" for h in helpers}) if c.kind != "passed"]
    for s in sites:
        name = s.function.rsplit(".", 1)[-1]
        if name in helpers:
            s.callers = [{"file": c.file, "line": c.line, "function": c.function, "options": c.options}
                         for c in found if c.entry == name and c.function != s.function]


def find_defs(sources: dict[str, str], entries: set[str]) -> dict[str, list[tuple[str, ast.FunctionDef]]]:
    """entry point -> [(file, its module-level def)] in `sources`."""
    out: dict[str, list[tuple[str, ast.FunctionDef]]] = {}
    for file in sorted(sources):
        text = sources[file]
        if not any(f"def {e}" in text for e in entries):
            continue
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in entries:
                out.setdefault(node.name, []).append((file, node))
    return out


def resolve_def(site: Site, defs: dict[str, list[tuple[str, ast.FunctionDef]]]) -> tuple[str, ast.FunctionDef] | None:
    """The definition a site's call reaches: its own module's, else the one in the module it
    imports the name from, else the only one the release has; None when that is ambiguous."""
    found = defs.get(site.entry, [])
    for file, node in found:
        if file == site.file:
            return file, node
    if site.imported_from:
        for file, node in found:
            if _module_of(file) == site.imported_from:
                return file, node
        # imported from a package that re-exports it: the def under that package
        under = [(f, n) for f, n in found if _module_of(f).startswith(site.imported_from + ".")]
        if len(under) == 1:
            return under[0]
    return found[0] if len(found) == 1 else None
