"""scripts/seeded_defect_times.py's defects are what it says: each is one line of its named
function replaced, the mutant still parses, and the seed's defects cover every Triton kernel
of the seed (the issue's goal is each seeded defect of the seed's kernels found in time)."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

pytestmark = pytest.mark.nokernel

REPO = Path(__file__).resolve().parent.parent


def _script():
    spec = importlib.util.spec_from_file_location("seeded_defect_times", REPO / "scripts" / "seeded_defect_times.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


SCRIPT = _script()


def _source(where: str, seed_path: Path) -> Path:
    return seed_path if where == "seed" else SCRIPT.KERNELS / f"{where}.py"


def _function_lines(text: str, name: str | None) -> range:
    if name is None:
        return range(1, text.count("\n") + 2)
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return range(node.lineno, node.end_lineno + 1)
    raise AssertionError(f"no function {name}")


@pytest.mark.parametrize("defect", SCRIPT.DEFECTS, ids=[d[0] for d in SCRIPT.DEFECTS])
def test_each_defect_is_one_line_of_its_function(defect, seed_path, tmp_path):
    name, _op, where, function, old, new = defect
    src = _source(where, seed_path)
    before = src.read_text().replace("from ._args import", "from kvfuzz.kernels._args import")
    after = SCRIPT.mutant(src, function, old, new, tmp_path / f"{name}.py").read_text()
    ast.parse(after)
    a, b = before.splitlines(), after.splitlines()
    assert len(a) == len(b)
    changed = [i + 1 for i, (x, y) in enumerate(zip(a, b)) if x != y]
    assert len(changed) == 1, f"{name}: lines {changed} changed"
    assert changed[0] in _function_lines(before, function), f"{name}: line {changed[0]} outside {function}"


def test_the_seeds_defects_cover_every_seed_kernel(seed_path):
    tree = ast.parse(seed_path.read_text())
    kernels = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)
               and any("jit" in ast.unparse(d) for d in n.decorator_list)}
    assert kernels, "no Triton kernel in the seed"
    covered = {d[3] for d in SCRIPT.DEFECTS if d[2] == "seed"}
    assert kernels <= covered, f"seed kernels without a seeded defect: {sorted(kernels - covered)}"


def test_a_finding_counts_when_any_of_its_signatures_is_new():
    """On a GPU the seeded stray store of `nkv-store-le` came in the same case as the seed's own
    mismatch, which the finding named first: the row must still count it, by its other signatures."""
    known = frozenset({"op:p:mismatch:t:partial"})

    def finding(sigs, s, case):
        return {"signature": sigs[0], "signatures": sigs, "found_after_s": s, "found_at_case": case}

    doc = {"ops": {"op": {"cases": 10}}, "findings": [
        finding(["op:p:mismatch:t:partial"], 0.5, 1),
        finding(["op:p:mismatch:t:partial", "op:p:out_of_bounds_write:t:gap"], 1.5, 3),
        finding(["op:p:untouched_write:t:cells"], 2.5, 7)]}
    row = SCRIPT.score(doc, known)
    assert row["found"] and row["first_s"] == 1.5 and row["first_case"] == 3
    assert row["signature"] == "op:p:out_of_bounds_write:t:gap" and row["cases"] == 10
    assert "op:p:out_of_bounds_write:t:gap" in row["signatures"]
    only_known = SCRIPT.score({"ops": {}, "findings": [finding(["op:p:mismatch:t:partial"], 0.5, 1)]}, known)
    assert not only_known["found"] and only_known["first_s"] is None
