"""`kvfuzz replay CASE --emit-repro FILE.py`: one saved case as a standalone script.

The script is assembled from the source of kvfuzz's own modules (`assemble`): a description
of the case, then each standalone module the script needs (`standalone_modules(op)`: the
judge itself, judge_flow, and what it stands on: the finding signatures, which exceptions are
CUDA faults, the two fills, where a byte lies and whom it is charged to, the output, re-run
and cross-check rules; the SGLang stand-ins, the call bindings), each under a header comment
naming it and with its imports of kvfuzz modules dropped, then `kvfuzz/repro_script.py` (the
script's own part), its line `CASE = None` replaced by the case's data. kvfuzz runs the same
modules, so each rule exists once. Those modules import only the standard library, torch,
triton and each other (checked here, when a script is assembled), so the script needs only
Python, torch and triton (no NumPy, no kvfuzz), and a kernel author can run it against their
own kernel file:

    python FILE.py PATH/TO/KERNELS.py [--device cpu|cuda]

Everything kvfuzz knows about the case is computed here, at emit time, and embedded as
data (`repro_case`): the guarded arena's layout and whole initial image (canaries, poison and
input values; zlib + base64), which byte belongs to which tensor's elements, and, for an
in-contract case, the NumPy oracle's values of every required cell (with every accepted
alternative) plus the cells that must stay untouched. The script runs kvfuzz's judge on them
(judge_flow's functions, which kvfuzz.judge runs on NumPy arenas; tests/test_repro_agrees.py
holds its verdict on every corpus case equal to `kvfuzz replay`'s). The case is judged under
every contract variant kvfuzz may select for a kernel file (`judged_variants`), and the script
judges the file it is given by the variant kvfuzz selects for that file
(kvfuzz/variant_choice.py, as `kvfuzz replay --target FILE`).
Exit status: 0 clean, 1 defect, 2 it cannot run this file (one line on stderr).
"""

from __future__ import annotations

import ast
import base64
import importlib.util
import sys
import zlib
from importlib import resources
from pathlib import Path

import numpy as np

from . import repro_script
from .case import Case
from .corpus import SavedCase
from .materialize import NOBODY, plan as make_plan
from .errors import BadInput
from .ops import record

__all__ = ["assemble", "repro_case", "render_repro", "script_source", "standalone_modules", "write_repro"]

BLOB_LINE = 96  # characters of base64 per source line
CASE_LINE = "CASE = None"  # the line of repro_script.py that an emitted script replaces with its case


# --------------------------------------------------------------------------- emit-time data


def _b64(data: bytes) -> str:
    """zlib + base64 of `data`, as the script's blobs hold it."""
    return base64.b64encode(zlib.compress(bytes(data), 9)).decode("ascii")


def _blob(text: str) -> str:
    """A base64 blob as a parenthesised run of string literals (one per line)."""
    lines = [text[i : i + BLOB_LINE] for i in range(0, len(text), BLOB_LINE)] or [""]
    return "(\n" + "".join(f'    "{line}"\n' for line in lines) + ")"


def _le_bytes(arr: np.ndarray, dtype: str) -> bytes:
    return np.ascontiguousarray(np.asarray(arr), dtype=np.dtype(dtype).newbyteorder("<")).tobytes()


def _docsafe(text: str) -> str:
    """Text that can sit inside a triple-quoted docstring."""
    return text.replace("\\", "\\\\").replace('"""', '\\"\\"\\"')


def _oneline(text: str, limit: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _classify(case: Case) -> tuple[str, list[str]]:
    from .judge import classify

    return classify(case)


def _header(saved: SavedCase, status: str, reasons: list[str], kernel_path: str, entry: str,
            device: str, boundary: str | None) -> str:
    c, f = saved.case, saved.finding
    out = [f"kvfuzz repro: {c.op} case {c.digest()} (saved under contract variant {c.variant!r})", ""]
    if f is not None:
        out += [f"Finding    {f.kind}",
                f"Signature  {f.signature}",
                f"Message    {_oneline(f.message)}"]
    else:
        out += ["Finding    none recorded (a hand-written case that must pass)"]
    v = saved.versions
    found = ", ".join(f"{k} {v[k]}" for k in ("torch", "triton") if k in v)
    ran = f"; ran on {v['gpu']}" if "gpu" in v else ""
    out += [f"Found on   target {saved.target}, device {saved.device} ({found}{ran})",
            f"           origin {saved.origin}, {saved.found_at}, corpus expects {saved.expected}"
            + (f" ({_oneline(saved.reason, 120)})" if saved.reason else ""),
            f"Emitted    by kvfuzz after a replay on {device}",
            f"Entry      {entry} (kernel path {kernel_path!r}), called the way SGLang calls it",
            "Variant    a kernel file is judged by the contract variant kvfuzz selects for it, as",
            "           `kvfuzz replay --target FILE` does: the one of the SGLang API generation its entry",
            "           point's signature matches (a release whose wrapper fixed a defect may judge the",
            f"           case by another variant than {c.variant!r}). What follows is said under {c.variant!r}.",
            ""]
    if status == "in_contract":
        out += ["Contract   in contract: every required output cell is compared with kvfuzz's NumPy",
                "           oracle; cells the contract leaves untouched must keep their poison value."]
        if boundary:
            out += [f"           {_oneline(boundary, 200)}"]
        backend = c.meta.get("cross_check")
        if backend:
            dev = saved.device
            out += [f"Cross      a divergence between {dev} and {backend} (kvfuzz --cross-check {backend}): the",
                    f"           case runs on {dev} (--device) and on {backend}, each in a process of its own,",
                    "           and the two arenas must be equal byte for byte (required cells may differ only",
                    f"           where both answers are accepted). It needs a device other than {backend}: without",
                    "           one the script says so in one line (exit 2)."]
    elif status == "must_refuse":
        out += ["Contract   must refuse: the call has to raise before touching anything, because"]
        out += [f"           - {_oneline(r, 200)}" for r in reasons]
    else:
        out += ["Contract   out of contract: the kernel may raise or run, but must not write outside its",
                "           tensors' elements nor change an input. Why it is out of contract:"]
        out += [f"           - {_oneline(r, 200)}" for r in reasons[:6]]
    out += ["", "Scalars    " + (", ".join(f"{k}={val!r}" for k, val in sorted(c.scalars.items())) or "none"),
            "Tensors"]
    for name, spec in sorted(c.tensors.items()):
        role = "in " if name in c.values else "out"
        out.append(f"  {role} {name}: {spec.describe()}")
    out += [
        "",
        "Run",
        "  python THIS_FILE.py PATH/TO/KERNELS.py [--device cpu|cuda] [--runs N] [--in-process]",
        "",
        "A child process calls the kernel (a kernel that kills its process is a crash defect);",
        "--in-process calls it in this one, for a debugger. It is called twice on fresh arenas,",
        "as kvfuzz replay does (--runs), and the runs must agree. On CUDA a CUDA error (illegal",
        "memory access, device-side assert) is a crash defect, in contract or not.",
        "The kernel file is loaded by path (relative imports of sibling files work; a package",
        "directory such as kvfuzz/kernels loads its __init__.py); SGLang's",
        "SWAKVPool is stubbed when sglang cannot be imported. The default device is cuda when torch",
        "sees one, else cpu under Triton's interpreter (TRITON_INTERPRET=1, set before triton is",
        "imported). Every tensor is a strided view into one uint8 arena; bytes outside every",
        "tensor's elements hold the canary 0xA5, outputs start as poison (0xDEADBEEF...).",
        "",
        "Exit status: 0 clean (prints 'OK: ...'), 1 a defect shows (prints 'DEFECT <kind>: ...'),",
        "2 it cannot run this file, in one line on stderr (bad arguments, a missing or unloadable",
        "kernel file, no such entry point, a signature kvfuzz cannot call or one without an argument",
        "the case passes).",
        "Needs only Python 3.9+, torch and triton.",
    ]
    return _docsafe("\n".join(out))


def judged_variants(op: str, own: str) -> list[str]:
    """The contract variants a script for an `op` case may judge by: the one kvfuzz selects for
    any kernel file (the op's default and each release's, kvfuzz.variant_choice) and the case's own."""
    rec = record(op)
    out = [next(iter(rec.contract.variants)), *(v for _, v in rec.release_variants), own]
    return list(dict.fromkeys(out))


class _Judgment:
    """How the case is judged under one contract variant: its class, the reasons, and for an
    in-contract case each output's required and untouched cells and accepted values."""

    def __init__(self, case: Case, regions) -> None:
        from .ops import CONTRACTS

        contract = CONTRACTS[case.op]
        status, reasons = _classify(case)
        self.status, self.reasons = status, reasons
        self.boundary: str | None = None
        self.cell_notes: dict[str, list[str]] = {}
        cells = {}
        if status == "in_contract":
            expected = contract.numpy_ref(case)
            self.boundary = expected.boundary
            all_cells = contract.cells(case)
            for name in contract.outputs:
                if name not in regions or name not in all_cells:
                    continue
                c = all_cells[name]
                main = np.asarray(expected.values[name], dtype=np.int64)
                alts = [main] + [np.asarray(a.get(name, main), dtype=np.int64) for a in expected.alternatives]
                uniq: list[np.ndarray] = []
                for a in alts:
                    if not any(np.array_equal(a[c.required], u[c.required]) for u in uniq):
                        uniq.append(a)
                cells[name] = dict(required=_b64(_le_bytes(c.required, "uint8")),
                                   untouched=_b64(_le_bytes(c.untouched, "uint8")),
                                   expected=[_b64(_le_bytes(a, "int64")) for a in uniq])
                self.cell_notes[name] = _cells_notes(c.required, c.untouched, uniq)
        racy = contract.racy(case) if contract.racy is not None else {}  # as kvfuzz.judge takes them
        self.fields = dict(status=status, reasons=[_oneline(r) for r in reasons],
                           cells=cells, racy={name: _b64(_le_bytes(m, "uint8")) for name, m in racy.items()
                                              if name in regions and m.any()})

    def source(self, indent: int) -> str:
        """The `dict(...)` expression of `fields`, its blobs one per line, at `indent`."""
        f, pad = self.fields, " " * indent
        out = ["dict(", f"{pad}    status={f['status']!r},",
               f"{pad}    reasons={_indent(_pylist(f['reasons']), indent + 4)},"]
        if not f["cells"]:
            out.append(f"{pad}    cells={{}},  # an in-contract case's required / untouched cells and accepted values")
        else:
            out.append(f"{pad}    # per output: the required and the must-stay-untouched cells, and the accepted values")
            out.append(f"{pad}    cells={{")
            for name, c in f["cells"].items():
                out.append(f"{pad}        {name!r}: dict(")
                out += [f"{pad}            # {line}" for line in self.cell_notes[name]]
                out.append(f"{pad}            required={_indent(_blob(c['required']), indent + 12)},")
                out.append(f"{pad}            untouched={_indent(_blob(c['untouched']), indent + 12)},")
                out.append(f"{pad}            expected=[")
                out += [f"{pad}                {_indent(_blob(b), indent + 16)}," for b in c["expected"]]
                out += [f"{pad}            ],", f"{pad}        ),"]
            out.append(f"{pad}    }},")
        if f["racy"]:
            out.append(f"{pad}    # per output: cells two programs write (out of contract), either value may stay")
            out.append(f"{pad}    racy={{")
            out += [f"{pad}        {name!r}: {_indent(_blob(m), indent + 8)}," for name, m in f["racy"].items()]
            out.append(f"{pad}    }},")
        else:
            out.append(f"{pad}    racy={{}},")
        out.append(f"{pad})")
        return "\n".join(out)


class _Emitted:
    """The case's fields for the script's ReproCase, and what the emitted source's comments
    and header say about them. The case is judged under each variant the script may judge a
    kernel file by (judged_variants): the script picks the file's own (kvfuzz.variant_choice)."""

    def __init__(self, saved: SavedCase) -> None:
        from .ops import CONTRACTS

        case = saved.case
        contract = CONTRACTS[case.op]
        rec = record(case.op)
        p = make_plan(case, contract.outputs)
        if len(p.names) > 254:  # pragma: no cover - ops have < 10 tensors
            raise ValueError("too many tensors for a uint8 owner map")
        owner = np.where(p.owner == NOBODY, 0, p.owner.astype(np.int64) + 1).astype(np.uint8)
        tensors = {}
        for name in p.names:
            r = p.regions[name]
            sp = r.spec
            tensors[name] = dict(role="out" if name in contract.outputs else "in", dtype=sp.dtype,
                                 shape=tuple(sp.shape), strides=tuple(sp.strides), offset=sp.offset,
                                 start=r.start, nbytes=r.nbytes, guard=r.guard)
        self.judgments: list[_Judgment] = []
        by_variant: dict[str, int] = {}
        for variant in judged_variants(case.op, case.variant):
            j = _Judgment(case if variant == case.variant else case.replace(variant=variant), p.regions)
            same = next((i for i, k in enumerate(self.judgments) if k.fields == j.fields), None)
            if same is None:
                self.judgments.append(j)
                same = len(self.judgments) - 1
            by_variant[variant] = same
        own = self.judgments[by_variant[case.variant]]
        self.status, self.reasons, self.boundary = own.status, own.reasons, own.boundary
        f = saved.finding
        self.fields = dict(
            op=case.op,
            entry=contract.entry,
            kernel_path=contract.kernel_path(case),
            variant=case.variant,
            default_variant=next(iter(contract.variants)),
            release_variants=tuple(rec.release_variants),
            digest=case.digest(),
            saved_signature=f.signature if f is not None else None,
            scalars=dict(sorted(case.scalars.items())),
            tensors=tensors,
            arena_bytes=int(p.image.size),
            arena_image=_b64(p.image.tobytes()),
            owner=_b64(owner.tobytes()),
            judgments=[j.fields for j in self.judgments],
            by_variant=by_variant,
            # a backend_divergence case (only in-contract cases are cross-checked): both sides run
            cross_check=case.meta.get("cross_check") if own.status == "in_contract" else None,
            found_on=saved.device if own.status == "in_contract" and case.meta.get("cross_check") else None,
        )

    def source(self) -> str:
        """The `CASE = ReproCase(...)` statement."""
        f = self.fields
        out = ["CASE = ReproCase("]
        for key in ("op", "entry", "kernel_path", "variant", "digest", "saved_signature", "scalars"):
            out.append(f"    {key}={f[key]!r},")
        out.append("    call=CALL, generations=GENERATIONS,  # how the entry point is called: the op's call.py, above")
        out.append("    # the variant a kernel file is judged by: its release's, told from its signature")
        out.append(f"    default_variant={f['default_variant']!r}, release_variants={f['release_variants']!r},")
        out.append("    tensors={")
        out += [f"        {name!r}: dict({', '.join(f'{k}={v!r}' for k, v in t.items())}),"
                for name, t in f["tensors"].items()]
        out += ["    },",
                f"    arena_bytes={f['arena_bytes']},",
                "    # the arena before the call: canaries, input values, output poison",
                f"    arena_image={_indent(_blob(f['arena_image']), 4)},",
                "    # one byte per arena byte: 0 = no tensor's element (must keep the canary); k = an element",
                "    # of the k-th tensor in `tensors`",
                f"    owner={_indent(_blob(f['owner']), 4)},",
                "    # how the case is judged under each contract variant (by_variant: which judgment)",
                "    judgments=["]
        out += [f"        {j.source(8)}," for j in self.judgments]
        out += ["    ],", f"    by_variant={f['by_variant']!r},"]
        if f["cross_check"]:
            out.append(f"    cross_check={f['cross_check']!r},  # the backend that {f['found_on']} is compared with")
            out.append(f"    found_on={f['found_on']!r},")
        out.append(")")
        return "\n".join(out)


def repro_case(saved: SavedCase) -> repro_script.ReproCase:
    """The ReproCase an emitted script for `saved` holds (for calling kvfuzz.repro_script directly)."""
    rec = record(saved.case.op)
    return repro_script.ReproCase(**_Emitted(saved).fields, call=rec.call, generations=rec.generations)


def script_source() -> str:
    """repro_script.py's source: the script's own part, the last module an emitted script holds."""
    return resources.files(__package__).joinpath("repro_script.py").read_text(encoding="utf-8")


# --------------------------------------------------------------------------- assembly
# An emitted script is flat: every embedded module's top-level names share its one namespace,
# so an import of one kvfuzz module from another is dropped (its names are already there) and
# two modules must never bind one name to different things (checked below).

SCRIPT_MODULE = f"{__package__}.repro_script"
THIRD_PARTY = ("torch", "triton")  # besides the standard library, what an embedded module may import
RULE = "# " + "-" * 76  # the header line above each embedded module


def standalone_modules(op: str) -> tuple[str, ...]:
    """The kvfuzz modules an emitted script for `op` embeds before repro_script.py, each after
    the ones it imports: those repro_script.py imports, and those the op's record names in
    its `standalone` (its call.py, which binds CALL and GENERATIONS, and any rules of its own),
    with everything they import in turn. BadInput (one line) for an op without them: it has no
    full repro script."""
    rec = record(op)  # an unknown op: BadInput
    if not rec.standalone:
        raise BadInput(f"{op} has no full repro script: its op record names no standalone call module "
                       "(OpRecord.standalone, docs/adding-an-op.md); --short may still write one")
    roots = (SCRIPT_MODULE,) + tuple(rec.standalone)
    order: list[str] = []

    def visit(name: str, chain: tuple[str, ...]) -> None:
        if name in order:
            return
        if name in chain:
            raise AssertionError(f"standalone modules import each other in a cycle: {' -> '.join(chain + (name,))}")
        for dep in _kvfuzz_imports(name):
            visit(dep, chain + (name,))
        order.append(name)

    for root in roots:
        visit(root, ())
    return tuple(m for m in order if m != SCRIPT_MODULE)


def _module_file(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        raise AssertionError(f"no module {name}")
    return Path(spec.origin)


def _of_kvfuzz(node: ast.stmt) -> bool:
    """A `from ... import` of a kvfuzz module: relative inside kvfuzz, absolute (`from
    kvfuzz.targets.calls import ...`) in an op's module outside it."""
    return isinstance(node, ast.ImportFrom) and bool(
        node.level or (node.module or "").split(".")[0] == __package__)


def _resolve(module: str, node: ast.ImportFrom) -> str:
    """The absolute name of a kvfuzz `from ... import` in `module` (a module, not a package)."""
    if not node.level:
        return node.module
    parts = module.split(".")[: -node.level]
    if node.module is None:
        raise AssertionError(f"{module}: `from {'.' * node.level} import ...` imports a module; "
                             "a standalone module imports names")
    return ".".join(parts + [node.module])


def _imports(name: str) -> list[ast.stmt]:
    """The import statements of module `name`, checked: a kvfuzz module only by `from ...
    import` at the top level (relative inside kvfuzz, absolute in an op's module outside it);
    anything else only from the standard library, torch or triton."""
    tree = ast.parse(_module_file(name).read_text(encoding="utf-8"))
    top = set(map(id, tree.body))
    out = []
    for node in ast.walk(tree):
        if _of_kvfuzz(node):
            if id(node) not in top:
                raise AssertionError(f"{name}:{node.lineno}: a kvfuzz module imported inside a function")
            out.append(node)
            continue
        if isinstance(node, ast.Import):
            roots = [a.name.split(".")[0] for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            roots = [node.module.split(".")[0]]
        else:
            continue
        for root in roots:
            if root not in sys.stdlib_module_names and root not in THIRD_PARTY:
                raise AssertionError(f"{name}:{node.lineno} imports {root}: a module the repro script embeds may "
                                     f"import only the standard library, {' and '.join(THIRD_PARTY)}")
        out.append(node)
    return out


def _kvfuzz_imports(name: str) -> list[str]:
    return [_resolve(name, n) for n in _imports(name) if _of_kvfuzz(n)]


def _top_names(tree: ast.Module) -> dict[str, str]:
    """name -> what binds it, for every top-level name a module binds: "import M.N" for an
    import of a module outside kvfuzz (the same import in two modules binds the same thing),
    else "defined"."""
    out: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out[node.name] = "defined"
        elif isinstance(node, ast.Import):
            for a in node.names:
                out[a.asname or a.name.split(".")[0]] = f"import {a.name if a.asname else a.name.split('.')[0]}"
        elif isinstance(node, ast.ImportFrom) and not _of_kvfuzz(node) and node.module != "__future__":
            for a in node.names:
                out[a.asname or a.name] = f"import {node.module}.{a.name}"
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                for n in ast.walk(t):
                    if isinstance(n, ast.Name):
                        out[n.id] = "defined"
    return out


def embedded_source(name: str) -> str:
    """Module `name`'s source as an emitted script holds it: its `from __future__` line and its
    imports of kvfuzz modules dropped (an import under another name becomes an assignment).
    The script's own part (repro_script.py) also loses its shebang line and its docstring."""
    text = _module_file(name).read_text(encoding="utf-8")
    lines = text.split("\n")
    tree = ast.parse(text)
    drop = [n for n in tree.body if _of_kvfuzz(n) or (isinstance(n, ast.ImportFrom) and n.module == "__future__")]
    if name == SCRIPT_MODULE:
        doc = tree.body[0]
        if not (isinstance(doc, ast.Expr) and isinstance(doc.value, ast.Constant) and isinstance(doc.value.value, str)):
            raise AssertionError("repro_script.py must start with its docstring")
        drop.append(doc)
    for node in sorted(drop, key=lambda n: n.lineno, reverse=True):
        keep = [f"{a.asname} = {a.name}" for a in getattr(node, "names", ()) if _of_kvfuzz(node)
                and a.asname and a.asname != a.name]
        lines[node.lineno - 1 : node.end_lineno] = keep
    if name == SCRIPT_MODULE and lines[0].startswith("#!"):
        del lines[0]
    return "\n".join(lines).strip("\n") + "\n"


def assemble(op: str) -> str:
    """An emitted script for an `op` case, less its docstring and its case: the header of each
    embedded module and its source (embedded_source), then repro_script.py's (its line
    `CASE = None` still there). AssertionError when two modules bind one name to different
    things, or a module imports a name that no module before it binds."""
    modules = standalone_modules(op) + (SCRIPT_MODULE,)
    bound: dict[str, tuple[str, str]] = {}  # name -> (module, what binds it)
    parts = ["from __future__ import annotations", ""]
    for name in modules:
        tree = ast.parse(_module_file(name).read_text(encoding="utf-8"))
        for node in _imports(name):
            if _of_kvfuzz(node):
                source = _resolve(name, node)
                for a in node.names:
                    if bound.get(a.name, (None,))[0] != source:
                        raise AssertionError(f"{name} imports {a.name} from {source}, which does not bind it "
                                             "(or a later module binds it again)")
        for top, what in _top_names(tree).items():
            had = bound.get(top)
            if had is not None and (what == "defined" or had[1] != what):
                raise AssertionError(f"{name} and {had[0]} both bind {top!r}: an emitted script holds them in "
                                     "one namespace; rename one")
            bound[top] = (name, what)
        title = "the script's own part" if name == SCRIPT_MODULE else \
            "embedded from kvfuzz" if name.split(".")[0] == __package__ else "embedded from the op's record"
        parts += ["", RULE, f"# {name} ({name.replace('.', '/')}.py): {title}", RULE, "", embedded_source(name)]
    return "\n".join(parts)


def render_repro(saved: SavedCase, device: str = "cpu") -> str:
    """The standalone script's source for `saved` (device: where kvfuzz replayed it)."""
    from .ops import CONTRACTS

    e = _Emitted(saved)
    header = _header(saved, e.status, e.reasons, e.fields["kernel_path"], CONTRACTS[saved.case.op].entry, device,
                     e.boundary)
    lines = assemble(saved.case.op).split("\n")
    at = [i for i, line in enumerate(lines) if line == CASE_LINE]
    if len(at) != 1:
        raise AssertionError(f"an assembled script must hold the line {CASE_LINE!r} exactly once")
    lines[at[0]] = e.source()
    return "\n".join(["#!/usr/bin/env python3", '"""' + header, '"""', ""] + lines)


def _indent(text: str, n: int) -> str:
    return text.replace("\n", "\n" + " " * n)


def _cells_notes(required: np.ndarray, untouched: np.ndarray, accepted: list[np.ndarray]) -> list[str]:
    """Comment lines for one output's entry of the script's cells: counts, and the expected
    values spelled out when there are few."""
    n_req = int(required.sum())
    out = [f"{n_req} required cells, {int(untouched.sum())} that must stay untouched"]
    if 0 < n_req <= 32:
        cells = " ".join(f"[{', '.join(str(int(i)) for i in ix)}]={int(accepted[0][tuple(ix)])}"
                         for ix in np.argwhere(required))
        out += [f"expected: {line}" for line in _wrap(cells, 80)]
    if len(accepted) > 1:
        out.append(f"{len(accepted) - 1} alternative answer(s) accepted too: a float32 rounding boundary")
    return out


def _wrap(text: str, width: int) -> list[str]:
    lines, cur = [], ""
    for word in text.split(" "):
        if cur and len(cur) + 1 + len(word) > width:
            lines.append(cur)
            cur = word
        else:
            cur = f"{cur} {word}" if cur else word
    return lines + [cur] if cur else lines


def _pylist(items: list[str]) -> str:
    if not items:
        return "[]"
    return "[\n" + "".join(f"    {x!r},\n" for x in items) + "]"


def write_repro(saved: SavedCase, path: Path, device: str) -> None:
    """Write the standalone repro script for `saved` to `path` (device: where kvfuzz replayed it)."""
    path = Path(path)
    try:
        src = render_repro(saved, device)
    except AssertionError as exc:  # a standalone module the assembly refuses (an op's own, say)
        raise BadInput(f"cannot write the full repro script for {saved.case.op}: {exc}") from None
    compile(src, str(path), "exec")  # a template bug must fail here, not in a kernel author's hands
    if path.parent and not path.parent.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(src, encoding="utf-8")
    try:
        path.chmod(0o755)
    except OSError:  # pragma: no cover - read-only or foreign filesystems
        pass
