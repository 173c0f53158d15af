"""What an op reaches in its kernel file, and where a target keeps that file.

An op's mutants are made in the code its entry point can run: the entry function and every
top-level function of the same file it names (the kernels it launches, their `@triton.jit`
helpers, the host helpers), transitively, and the upper-case integer constants those name.
Code in other files (a sibling `_args.py`) is not mutated.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

from ..errors import BadInput, TargetLoadError
from ..ops import record


def reached(source: bytes, entry: str) -> tuple[list[str], list[str]]:
    """(functions, constants) of `source` that `entry` reaches, in file order."""
    tree = ast.parse(source)
    functions = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    constants = {n.targets[0].id for n in tree.body if isinstance(n, ast.Assign) and len(n.targets) == 1
                 and isinstance(n.targets[0], ast.Name) and n.targets[0].id.isupper()
                 and isinstance(n.value, ast.Constant) and type(n.value.value) is int}
    if entry not in functions:
        return [], []
    seen, todo, names = {entry}, [entry], set()
    while todo:
        fn = functions[todo.pop()]
        for node in ast.walk(fn):
            if isinstance(node, ast.Name):
                names.add(node.id)
                if node.id in functions and node.id not in seen:
                    seen.add(node.id)
                    todo.append(node.id)
    order = [n.name for n in tree.body if getattr(n, "name", None) in seen]
    return order, sorted(names & constants)


def kernel_file(spec: str, op: str) -> Path:
    """The file that holds `op`'s entry point for target `spec` (fetched into kvfuzz's cache for
    a release); BadInput when the spec names no file kvfuzz can mutate."""
    rec = record(op)
    if spec == "builtin":
        module = rec.builtin.partition(":")[0]
        found = importlib.util.find_spec(module)
        if found is None or not found.origin:
            raise BadInput(f"op {op}: cannot find its builtin kernel module {module}")
        return Path(found.origin)
    if spec.startswith("sglang=="):
        from ..targets.wheels import sglang_kernel_file

        return Path(sglang_kernel_file(spec.split("==", 1)[1], rec.source_file))
    if spec == "sglang":
        from ..targets.wheels import installed_kernel_file

        return Path(installed_kernel_file(rec.source_file)[0])
    if spec.startswith("git:"):
        from ..targets.gitrev import git_kernel_file

        return Path(git_kernel_file(spec)[0])
    if spec.startswith("module:") or (not spec.endswith(".py") and "/" not in spec):
        name = spec.removeprefix("module:")
        try:
            found = importlib.util.find_spec(name)
        except (ImportError, ValueError) as exc:
            raise TargetLoadError(f"cannot find target module {name!r}: {exc}") from None
        if found is None or not found.origin or not found.origin.endswith(".py"):
            raise TargetLoadError(f"target module {name!r} has no Python source file to mutate")
        return Path(found.origin)
    path = Path(spec.removeprefix("file:")).expanduser()
    if not path.is_file():
        raise TargetLoadError(f"target file {str(path)!r} does not exist")
    return path
