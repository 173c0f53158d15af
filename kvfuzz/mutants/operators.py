"""Mutation operators: one-point changes to a kernel file that model real kernel bugs.

Each operator looks at one syntax-tree node of a function the op reaches (`reach.py`) and
proposes replacements for a span of the original text: the mutant is the file with that span
patched, byte-identical elsewhere, so its diff is one line (or the few lines a multi-line node
spans). Replacements that combine an operand with more text are parenthesised, so the
mutated expression binds as the original did wherever it sits.

| operator | change |
| --- | --- |
| `cmp_flip` | `<` <-> `<=`, `>` <-> `>=` |
| `bound_pm1` | a comparison's bound moved by one the other way than `cmp_flip` moves it |
| `offset_pm1` | a `tl.load` / `tl.store` pointer + 1 or - 1 |
| `grid_pm1` | a launch grid's size + 1 or - 1 |
| `drop_stride` | `x * stride` -> `x` (a name with `stride` in it, or ending `_s` / `_sN`) |
| `drop_mask` | a `tl.load` / `tl.store` without its `mask=` (and `other=`) |
| `widen_mask` | `a & b` -> `a` or `b` (a mask, or any condition, loses a conjunct) |
| `drop_clamp` | `tl.maximum` / `tl.minimum` / `max` / `min` (a, b) -> a or b; `tl.where(c, a, b)` -> a or b |
| `swap` | `a - b` -> `b - a`; `tl.where(c, a, b)` -> `tl.where(c, b, a)`; `tl.maximum` <-> `tl.minimum` |
| `drop_store` | a `tl.store(...)` statement -> `pass` |
| `constexpr` | a launch's upper-case keyword argument, or an upper-case module constant, x 2 or // 2 |
| `floor_ceil` | `tl.cdiv(a, b)` / `triton.cdiv(a, b)` -> `a // b`; `(a + b - 1) // b` -> `a // b` (also `>>`) |

Conditions of an `if` whose body only raises (argument validation) are left alone unless asked
for: in-contract cases never reach a refusal, so their mutants are equivalent there.
"""

from __future__ import annotations

import ast
import hashlib
import re
from dataclasses import dataclass

OPERATORS = ("cmp_flip", "bound_pm1", "offset_pm1", "grid_pm1", "drop_stride", "drop_mask", "widen_mask",
             "drop_clamp", "swap", "drop_store", "constexpr", "floor_ceil")

STRIDE_NAME = re.compile(r"stride|_s\d*$", re.IGNORECASE)
FLIP = {ast.Lt: ("<", "<="), ast.LtE: ("<=", "<"), ast.Gt: (">", ">="), ast.GtE: (">=", ">")}
# the bound change that `cmp_flip` does not already make: a < b is a <= b - 1, so flip covers b + 1
BOUND = {ast.Lt: "-", ast.LtE: "+", ast.Gt: "+", ast.GtE: "-"}
SIMPLE = (ast.Name, ast.Constant, ast.Attribute, ast.Call, ast.Subscript)


@dataclass(frozen=True)
class Mutant:
    """One mutation of `file`: bytes [start, end) of the original replaced by `replacement`."""

    file: str  # the kernel file's name
    function: str  # the function (or module constant) it is in
    operator: str
    line: int  # 1-based line of the span's start
    start: int  # byte offsets into the original file
    end: int
    original: str
    replacement: str

    @property
    def key(self) -> str:
        """A stable name: function, line, operator and a digest of the change."""
        digest = hashlib.sha256(f"{self.start}:{self.end}:{self.replacement}".encode()).hexdigest()[:8]
        return f"{self.function}-L{self.line}-{self.operator}-{digest}"

    def apply(self, source: bytes) -> bytes:
        return source[:self.start] + self.replacement.encode() + source[self.end:]

    def diff(self, source: bytes) -> str:
        """The changed line(s), original and mutated, each on one line: `L12: a < b  ->  a <= b`."""
        lo = source.rfind(b"\n", 0, self.start) + 1
        hi = source.find(b"\n", self.end)
        hi = len(source) if hi < 0 else hi
        old = source[lo:hi].decode()
        new = (source[lo:self.start] + self.replacement.encode() + source[self.end:hi]).decode()
        squash = lambda s: " ".join(s.split())  # noqa: E731  (a multi-line node on one line)
        return f"L{self.line}: {squash(old)}  ->  {squash(new)}"


def _is_call(node: ast.AST, *names: str) -> bool:
    """Whether `node` calls one of `names` (`tl.store`, `max`, ...) as written."""
    if not isinstance(node, ast.Call):
        return False
    f = node.func
    text = f.id if isinstance(f, ast.Name) else (
        f"{f.value.id}.{f.attr}" if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) else "")
    return text in names


def _paren(text: str, node: ast.AST) -> str:
    return text if isinstance(node, SIMPLE) else f"({text})"


def _is_upper(name: str | None) -> bool:
    return bool(name) and name.upper() == name and any(c.isalpha() for c in name)


def _validation_tests(tree: ast.AST) -> set[int]:
    """ids of the nodes inside the test of an `if` whose body only raises."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and node.body and all(isinstance(s, ast.Raise) for s in node.body):
            out |= {id(n) for n in ast.walk(node.test)}
    return out


class _Finder:
    """Walks one function (or constant) and collects its mutants."""

    def __init__(self, source: bytes, file: str, lines: list[int], validation: bool) -> None:
        self.source, self.file, self.starts, self.validation = source, file, lines, validation
        self.out: list[Mutant] = []

    def off(self, line: int, col: int) -> int:
        return self.starts[line - 1] + col

    def span(self, node: ast.AST) -> tuple[int, int]:
        return self.off(node.lineno, node.col_offset), self.off(node.end_lineno, node.end_col_offset)

    def text(self, node: ast.AST) -> str:
        a, b = self.span(node)
        return self.source[a:b].decode()

    def add(self, where: str, operator: str, node: ast.AST, replacement: str,
            span: tuple[int, int] | None = None) -> None:
        a, b = span or self.span(node)
        original = self.source[a:b].decode()
        if replacement != original:
            self.out.append(Mutant(self.file, where, operator, self.source.count(b"\n", 0, a) + 1, a, b,
                                   original, replacement))

    def pm1(self, where: str, operator: str, node: ast.AST, signs: str = "+-") -> None:
        for sign in signs:
            if isinstance(node, ast.Constant) and type(node.value) is int:
                self.add(where, operator, node, str(node.value + (1 if sign == "+" else -1)))
            else:
                self.add(where, operator, node, f"({self.text(node)} {sign} 1)")

    def visit(self, where: str, root: ast.AST) -> None:
        skip = set() if self.validation else _validation_tests(root)
        for node in ast.walk(root):
            if id(node) in skip:
                continue
            if isinstance(node, ast.Compare):
                self.compare(where, node)
            elif isinstance(node, ast.BinOp):
                self.binop(where, node)
            elif isinstance(node, ast.Call):
                self.call(where, node)
            elif isinstance(node, ast.Expr) and _is_call(node.value, "tl.store"):
                self.add(where, "drop_store", node.value, "pass")
            elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Tuple) and any(
                    isinstance(t, ast.Name) and "grid" in t.id.lower() for t in node.targets):
                for elt in node.value.elts:
                    self.pm1(where, "grid_pm1", elt)

    def compare(self, where: str, node: ast.Compare) -> None:
        operands = [node.left, *node.comparators]
        for i, op in enumerate(node.ops):
            if type(op) not in FLIP:
                continue
            old, new = FLIP[type(op)]
            gap_a, gap_b = self.span(operands[i])[1], self.span(operands[i + 1])[0]
            gap = self.source[gap_a:gap_b].decode()
            m = re.search(re.escape(old) + r"(?![=<>])", gap)
            if m is not None:
                a = gap_a + len(gap[:m.start()].encode())
                self.add(where, "cmp_flip", node, new, (a, a + len(old.encode())))
            if len(node.ops) == 1:
                self.pm1(where, "bound_pm1", node.comparators[0], BOUND[type(op)])

    def binop(self, where: str, node: ast.BinOp) -> None:
        if isinstance(node.op, ast.Mult):
            for keep, drop in ((node.left, node.right), (node.right, node.left)):
                if STRIDE_NAME.search(self.text(drop)) and not STRIDE_NAME.search(self.text(keep)):
                    self.add(where, "drop_stride", node, _paren(self.text(keep), keep))
        elif isinstance(node.op, ast.BitAnd):
            for keep in (node.left, node.right):
                self.add(where, "widen_mask", node, _paren(self.text(keep), keep))
        elif isinstance(node.op, ast.Sub):
            self.add(where, "swap", node, f"({_paren(self.text(node.right), node.right)} - "
                     f"{_paren(self.text(node.left), node.left)})")
        if isinstance(node.op, (ast.FloorDiv, ast.RShift)):
            left = node.left
            # (a + b - 1) // b, (x + (1 << S) - 1) >> S: a rounded-up quotient
            if (isinstance(left, ast.BinOp) and isinstance(left.op, ast.Sub) and isinstance(left.right, ast.Constant)
                    and left.right.value == 1 and isinstance(left.left, ast.BinOp) and isinstance(left.left.op, ast.Add)):
                a = left.left.left
                sym = "//" if isinstance(node.op, ast.FloorDiv) else ">>"
                self.add(where, "floor_ceil", node, f"({_paren(self.text(a), a)} {sym} "
                         f"{_paren(self.text(node.right), node.right)})")

    def call(self, where: str, node: ast.Call) -> None:
        if _is_call(node, "tl.load", "tl.store") and node.args:
            self.pm1(where, "offset_pm1", node.args[0])
            names = {"mask", "other"}
            if any(k.arg == "mask" for k in node.keywords):
                kept = [self.text(a) for a in node.args] + [f"{k.arg}={self.text(k.value)}"
                                                            for k in node.keywords if k.arg not in names]
                self.add(where, "drop_mask", node, f"{self.text(node.func)}({', '.join(kept)})")
        if _is_call(node, "tl.maximum", "tl.minimum", "max", "min") and len(node.args) == 2 and not node.keywords:
            for keep in node.args:
                self.add(where, "drop_clamp", node, _paren(self.text(keep), keep))
            if _is_call(node, "tl.maximum", "tl.minimum"):
                other = "tl.minimum" if _is_call(node, "tl.maximum") else "tl.maximum"
                self.add(where, "swap", node.func, other)
        if _is_call(node, "tl.where") and len(node.args) == 3:
            c, a, b = node.args
            for keep in (a, b):
                self.add(where, "drop_clamp", node, _paren(self.text(keep), keep))
            self.add(where, "swap", node, f"{self.text(node.func)}({self.text(c)}, {self.text(b)}, {self.text(a)})")
        if _is_call(node, "tl.cdiv", "triton.cdiv") and len(node.args) == 2:
            a, b = node.args
            self.add(where, "floor_ceil", node, f"({_paren(self.text(a), a)} // {_paren(self.text(b), b)})")
        launch = isinstance(node.func, ast.Subscript) or (
            isinstance(node.func, ast.Attribute) and node.func.attr == "run")
        if launch:
            grid = node.func.slice if isinstance(node.func, ast.Subscript) else next(
                (k.value for k in node.keywords if k.arg == "grid"), None)
            if isinstance(grid, ast.Tuple):
                for elt in grid.elts:
                    self.pm1(where, "grid_pm1", elt)
            for k in node.keywords:
                if _is_upper(k.arg):
                    self.scale(where, k.value)

    def scale(self, where: str, value: ast.AST) -> None:
        """A constexpr doubled and halved (a power of two stays one)."""
        if isinstance(value, ast.Constant) and type(value.value) is int:
            self.add(where, "constexpr", value, str(value.value * 2))
            if value.value > 1:
                self.add(where, "constexpr", value, str(value.value // 2))
        elif not isinstance(value, ast.Constant):
            text = _paren(self.text(value), value)
            self.add(where, "constexpr", value, f"({text} * 2)")
            self.add(where, "constexpr", value, f"({text} // 2)")


def find_mutants(source: bytes, file: str, functions: list[str], constants: list[str] = (),
                 validation: bool = False) -> list[Mutant]:
    """Every mutant the operators make in the named top-level functions and upper-case module
    constants of `source`, in file order (then operator order). `validation`: also mutate the
    conditions of `if ...: raise` blocks."""
    tree = ast.parse(source)
    starts = [0]
    for line in source.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    finder = _Finder(source, file, starts, validation)
    wanted, consts = set(functions), set(constants)
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in wanted:
            for part in node.body:  # not the decorators, not the signature
                finder.visit(node.name, part)
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                and node.targets[0].id in consts and isinstance(node.value, ast.Constant) \
                and type(node.value.value) is int:
            finder.scale(node.targets[0].id, node.value)
    unique: dict[tuple, Mutant] = {}
    for m in finder.out:  # two operators, one change: once
        m = _parses(source, m)
        if m is not None:
            unique.setdefault((m.start, m.end, m.replacement), m)
    return sorted(unique.values(), key=lambda m: (m.start, OPERATORS.index(m.operator), m.end, m.replacement))


def _parses(source: bytes, m: Mutant) -> Mutant | None:
    """`m`, its replacement parenthesised if the bare one does not parse in place (`1.to(...)`),
    or None if neither does."""
    for replacement in (m.replacement, f"({m.replacement})"):
        candidate = Mutant(m.file, m.function, m.operator, m.line, m.start, m.end, m.original, replacement)
        try:
            ast.parse(candidate.apply(source))
        except SyntaxError:
            continue
        return candidate
    return None
