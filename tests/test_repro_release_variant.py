"""Repro scripts judge the kernel file they are given as `kvfuzz replay --target FILE` does: by
the contract variant kvfuzz selects for that file (kvfuzz/variant_choice.py), and a file they
cannot run is exit 2, never 1.

Saved cases of the corpus against SGLang releases' kernel files (fetched into kvfuzz's release
cache from PyPI; skipped where that cannot be done): decode_metadata a6ff9ade7ec924ba is 0.5.14's
swa_page_table stride defect, fixed in 0.5.17 (whose wrapper selects another variant), so both
scripts fail on 0.5.14's file and pass on 0.5.17's and 0.5.23's, as replay does there."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvfuzz.corpus.format import read_case_dir as load_saved
from kvfuzz.errors import TargetLoadError
from kvfuzz.replay import replay
from kvfuzz.repro import write_repro
from kvfuzz.short_repro import write_short_repro
from kvfuzz.variant_choice import generation_of, release_variant
from test_repro import run_many, show

pytestmark = [pytest.mark.interpreter, pytest.mark.filterwarnings("ignore::DeprecationWarning")]

CORPUS = Path(__file__).resolve().parent.parent / "corpora" / "decode_metadata"
STRIDE = "a6ff9ade7ec924ba"  # 0.5.14's swa_page_table stride defect, fixed in 0.5.17
OLD_CALL = "09f1ce9ecaba5dda"  # its short script passes kernel_page_multiplier, which 0.5.23 dropped


def release_file(version: str) -> Path:
    from kvfuzz.targets.wheels import sglang_kernel_file

    try:
        return sglang_kernel_file(version)
    except TargetLoadError as exc:  # no network and not in the cache
        pytest.skip(str(exc))


def test_variant_choice_is_kvfuzzs():
    """The module both kvfuzz and the scripts use: a release's variant, and a signature's
    generation (equal first, else the one sharing most names, then lacking fewest, then the
    newest)."""
    table = (("0.5.10", "default"), ("0.5.17", "v2p"), ("0.5.23", "fused"))
    assert [release_variant(table, "d0", v) for v in ("0.5.9", "0.5.16.post1", "0.5.17", "0.5.22", "0.6")] == \
        ["d0", "default", "v2p", "v2p", "fused"]
    gens = [("0.5.14", ("a", "b")), ("0.5.17", ("a", "b", "c")), ("0.5.19", ("a", "d"))]
    assert generation_of(gens, ("a", "b")) == ("0.5.14", "0.5.14")  # equal beats the superset
    # the same names in another order: the generation whose every parameter the file has, not a
    # newer one with a parameter it lacks (whose variant's cases it could not take)
    assert generation_of(gens, ("b", "a")) == (None, "0.5.14")
    assert generation_of(gens, ("a", "d", "e")) == (None, "0.5.19")
    assert generation_of(gens, ("a", "b", "c", "d")) == (None, "0.5.17")  # most shared first
    assert generation_of([("0.5.14", ("a", "b")), ("0.5.17", ("a", "c"))], ("a", "e")) == (None, "0.5.17")  # newest


@pytest.mark.slow
def test_the_stride_defect_shows_on_its_release_only(tmp_path):
    """Full and short script of a6ff9ade7ec924ba: exit 1 on 0.5.14's file, 0 on 0.5.17's and
    0.5.23's, where `kvfuzz replay --target FILE` says PASS."""
    saved = load_saved(CORPUS / STRIDE)
    full, short = tmp_path / "full.py", tmp_path / "short.py"
    write_repro(saved, full, "cpu")
    write_short_repro(saved, short, STRIDE)
    files = {v: release_file(v) for v in ("0.5.14", "0.5.17", "0.5.23")}
    for version, path in files.items():
        assert replay(saved, str(path), "cpu", isolate=False).fails == (version == "0.5.14"), version
    runs = [(script, path, *(("--device", "cpu") if script is full else ()))
            for path in files.values() for script in (full, short)]
    results = run_many(*runs)
    for (script, path, *_), r in zip(runs, results):
        want = 1 if path == files["0.5.14"] else 0
        assert r.returncode == want, f"{script.name} on {path}: {show(r)}"
    full_on_17 = results[2]
    assert "[v2p, saved under default]" in full_on_17.stdout, show(full_on_17)


def test_a_short_script_whose_call_the_file_does_not_take_exits_2(tmp_path):
    """09f1ce9ecaba5dda's short script passes kernel_page_multiplier; 0.5.23's entry point has
    no such parameter: the TypeError at the call is 'this file cannot run the case' (exit 2, one
    line on stderr), not the defect."""
    saved = load_saved(CORPUS / OLD_CALL)
    short = tmp_path / "short.py"
    write_short_repro(saved, short, OLD_CALL)
    (r,) = run_many((short, release_file("0.5.23")))
    assert r.returncode == 2, show(r)
    assert "Traceback" not in r.stderr and "kernel_page_multiplier" in r.stderr.strip().splitlines()[-1], show(r)


def test_a_short_script_refuses_a_file_it_cannot_load(tmp_path):
    """A kernel file that raises on import, or defines no entry point: exit 2, one line."""
    saved = load_saved(CORPUS / STRIDE)
    short = tmp_path / "short.py"
    write_short_repro(saved, short, STRIDE)
    broken, empty = tmp_path / "broken.py", tmp_path / "empty.py"
    broken.write_text("import no_such_module_anywhere\n")
    empty.write_text("x = 1\n")
    for r, says in zip(run_many((short, broken), (short, empty)), ("cannot load", "defines no")):
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and says in r.stderr, show(r)
