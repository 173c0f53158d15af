"""scripts/seeded_release_runs.py's seeded defects: each one's line is in its SGLang 0.5.23 file
as the entry says, the mutant differs from the release by that one line and keeps the file's
name (kvfuzz finds the op's entry point in it), every op kvfuzz has gets one; and
scripts/measure_defects.py subtracts what the unmodified file's run found."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from kvfuzz.ops import records
from kvfuzz.targets import load_target
from test_releases import kernel_file

ROOT = Path(__file__).resolve().parent.parent
VERSION = "0.5.23"


def _script(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SEEDED = _script("seeded_release_runs")


def test_every_op_has_a_seeded_defect():
    assert set(records()) <= {op for _, op, *_ in SEEDED.DEFECTS}
    names = [name for name, *_ in SEEDED.DEFECTS]
    assert len(names) == len(set(names))


@pytest.mark.nokernel
@pytest.mark.parametrize("entry", SEEDED.DEFECTS, ids=[d[0] for d in SEEDED.DEFECTS])
def test_each_defect_line_is_in_its_release_file(entry):
    name, op, file, old, new, *nth = entry
    source = kernel_file(VERSION, file).read_text()
    if nth:  # a line some kernels share: the nth occurrence
        assert source.count(old) >= nth[0], (name, source.count(old))
    else:
        assert source.count(old) == 1, (name, source.count(old))
    text = SEEDED.seeded(source, old, new, *nth)
    before, after = source.splitlines(), text.splitlines()
    assert len(before) == len(after)  # every line number kept: sites compare across mutants
    assert sum(a != b for a, b in zip(before, after)) == 1


def test_each_mutant_keeps_its_file_name_and_offers_its_op(tmp_path, device):
    for _, _, file, *_ in SEEDED.DEFECTS:
        kernel_file(VERSION, file)
    runs, skipped = SEEDED.mutants([VERSION], None, tmp_path)
    assert skipped == [] and len(runs) == len(SEEDED.DEFECTS)
    for (run, op, target), (name, _, file, *_) in zip(runs, SEEDED.DEFECTS):
        assert run == f"{VERSION}-{name}" and Path(target).name == file
        assert op in load_target(target, device).bindings, run
    plain = SEEDED.plain(VERSION, {"num_kv_splits"}, tmp_path)
    assert [(r, o) for r, o, _ in plain] == [(f"{VERSION}-plain-num_kv_splits", "num_kv_splits")]
    assert Path(plain[0][2]).read_text() == kernel_file(VERSION, "metadata.py").read_text()


@pytest.mark.nokernel
def test_measure_subtracts_the_unmodified_files_signatures_and_defects():
    measure = _script("measure_defects")
    native = {"signatures": ["op:a:mismatch:t:all"], "keys": ["op at f.py:10 (value)"]}
    row = {"signatures": ["op:a:mismatch:t:all", "op:a:out_of_bounds_write:t:after"],
           "keys": ["op at f.py:10 (value)", "op at f.py:12 (place)"]}
    row = measure.subtract(row, native)
    assert row["seeded_signatures"] == ["op:a:out_of_bounds_write:t:after"]
    assert row["seeded_keys"] == ["op at f.py:12 (place)"] and row["native"] == 1
    assert measure.subtract({"signatures": ["s"], "keys": ["k"]}, None)["seeded_keys"] == ["k"]


@pytest.mark.nokernel
@pytest.mark.parametrize("op", sorted(SEEDED.REPAIRS))
def test_each_native_repair_applies_once_and_keeps_line_numbers(op):
    for file, old, new in SEEDED.REPAIRS[op]:
        source = kernel_file(VERSION, file).read_text()
        assert source.count(old) == 1, (op, file)
        text = SEEDED.repaired(source, op, file)
        assert text != source and len(text.splitlines()) == len(source.splitlines())
    # a seeded defect of the op still applies to the repaired file
    for name, dop, file, old, new, *nth in SEEDED.DEFECTS:
        if dop == op:
            assert SEEDED.seeded(SEEDED.repaired(kernel_file(VERSION, file).read_text(), op, file), old, new, *nth)
