"""`kvfuzz bisect`: the release range, the history of a defect over it (a pure function of the
cells), meta.affects as the pytest plugin reads it, bad input in one line, and real cases from
corpora/ replayed on release kernel files (fetched once into $KVFUZZ_CACHE, as tests/test_releases.py)."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kvfuzz import bisect
from kvfuzz.bisect import CANNOT, CLEAN, DEFECT, Interval, Result, history, parse_releases
from kvfuzz.corpus import read_case_dir, set_meta
from kvfuzz.errors import BadCaseFile, BadInput
from kvfuzz.targets.releases import RELEASES, file_release, known_releases, same_file_releases

REPO = Path(__file__).resolve().parent.parent
# a tombstone SWA slot truncated to page 0: 0.5.23 only (meta.affects names it alone)
TOMBSTONE = REPO / "corpora" / "decode_metadata" / "5cefcd05024116b2"


def run(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "kvfuzz.cli", "bisect", *args], capture_output=True, text=True,
                          timeout=timeout, env=dict(os.environ))


# ----------------------------------------------------------------------------- the range


def test_the_default_range_is_every_release_kvfuzz_knows():
    from kvfuzz.cli import build_parser

    assert build_parser().parse_args(["bisect", "x"]).releases == bisect.DEFAULT_RANGE
    releases = parse_releases(bisect.DEFAULT_RANGE)
    assert releases == known_releases() and releases[0] == "0.5.6" and releases[-1] == "0.5.23"
    assert "0.5.13.post1" in releases and all(v in releases for v in RELEASES)


def test_ranges_and_lists():
    assert parse_releases("0.5.14..0.5.16") == ("0.5.14", "0.5.15", "0.5.15.post1", "0.5.16")
    assert parse_releases(" 0.5.23 , sglang==0.5.14,0.5.17") == ("0.5.14", "0.5.17", "0.5.23")  # in release order
    assert parse_releases("0.5.19..0.5.19") == ("0.5.19",) == parse_releases("0.5.19")
    assert parse_releases("sglang==0.5.22..sglang==0.5.23") == ("0.5.22", "0.5.23")


@pytest.mark.parametrize("text, message", [
    ("0.5.5", "'0.5.5' is not an SGLang release kvfuzz knows"),
    ("0.5.14,0.5.24", "'0.5.24' is not an SGLang release"),
    ("0.5.23.post2", "is not an SGLang release"),
    ("0.5.14..", "expected A..B or X,Y,Z"),
    ("..0.5.14", "expected A..B or X,Y,Z"),
    ("0.5.6...0.5.9", "expected A..B or X,Y,Z"),
    ("0.5.6..0.5.9..0.5.10", "expected A..B or X,Y,Z"),
    ("0.5.6..0.5.9,0.5.10", "expected A..B or X,Y,Z"),
    ("0.5.14,,0.5.16", "expected A..B or X,Y,Z"),
    ("", "expected A..B or X,Y,Z"),
    ("0.5.23..0.5.14", "0.5.23 comes after 0.5.14"),
])
def test_a_bad_range_is_refused(text, message):
    with pytest.raises(BadInput, match=message.replace(".", r"\.").replace("(", r"\(")):
        parse_releases(text)


def test_each_kernel_file_runs_once_for_the_releases_that_ship_it():
    """What scripts/release_matrix.py's DISTINCT and SAME_FILE said, read from RELEASES."""
    assert bisect.files_of(known_releases()) == (
        "0.5.6", "0.5.10", "0.5.14", "0.5.16", "0.5.17", "0.5.18", "0.5.19", "0.5.20", "0.5.23")
    groups = {f: same_file_releases(f) for f in bisect.files_of(known_releases())}
    assert groups["0.5.6"] == ("0.5.6", "0.5.6.post1", "0.5.6.post2", "0.5.7", "0.5.8", "0.5.8.post1", "0.5.9")
    assert groups["0.5.10"] == ("0.5.10", "0.5.10.post1", "0.5.11", "0.5.12", "0.5.12.post1")
    assert groups["0.5.14"] == ("0.5.13", "0.5.13.post1", "0.5.14", "0.5.15", "0.5.15.post1")
    assert groups["0.5.20"] == ("0.5.20", "0.5.21", "0.5.22")
    assert all(len(groups[f]) == 1 for f in ("0.5.16", "0.5.17", "0.5.18", "0.5.19", "0.5.23"))
    assert bisect.files_of(parse_releases("0.5.13..0.5.13.post1")) == ("0.5.14",)
    assert bisect.spans(parse_releases("0.5.12..0.5.16")) == [
        ("0.5.12", "0.5.12.post1", "0.5.10"), ("0.5.13", "0.5.15.post1", "0.5.14"), ("0.5.16", "0.5.16", "0.5.16")]
    with pytest.raises(KeyError):
        file_release("0.5.23.post2")


def test_a_flashinfer_case_groups_the_releases_sharing_kv_indices():
    """Release identity is per kernel file: 0.5.20 - 0.5.22 share metadata.py, but 0.5.22's
    kv_indices.py is its own, and 0.5.16 ships 0.5.14's kv_indices.py in another place; the
    extracted kv_indices.py are two (the chunked-prefix kernel moved modules in 0.5.8) where
    metadata.py's split at 0.5.10."""
    kv = "kv_indices.py"
    assert bisect.files_of(known_releases(), kv) == (
        "0.5.6", "0.5.8", "0.5.13", "0.5.14", "0.5.17", "0.5.19", "0.5.20", "0.5.22", "0.5.23")
    assert same_file_releases("0.5.9", kv) == ("0.5.8", "0.5.8.post1", "0.5.9", "0.5.10", "0.5.10.post1", "0.5.11",
                                               "0.5.12", "0.5.12.post1")
    assert same_file_releases("0.5.13", kv) == ("0.5.13", "0.5.13.post1")
    assert same_file_releases("0.5.16", kv) == ("0.5.14", "0.5.15", "0.5.15.post1", "0.5.16")
    assert bisect.spans(parse_releases("0.5.19..0.5.23"), kv) == [
        ("0.5.19", "0.5.19", "0.5.19"), ("0.5.20", "0.5.21", "0.5.20"), ("0.5.22", "0.5.22", "0.5.22"),
        ("0.5.23", "0.5.23", "0.5.23")]
    flash = flashinfer_saved()
    assert bisect.case_file(flash) == kv and bisect.case_file(read_case_dir(TOMBSTONE)) == "metadata.py"
    releases = parse_releases("0.5.20..0.5.23")
    assert bisect.targets_of(releases, [read_case_dir(TOMBSTONE)]) == ("0.5.20", "0.5.23")
    assert bisect.targets_of(releases, [flash, read_case_dir(TOMBSTONE)]) == ("0.5.20", "0.5.22", "0.5.23")


def flashinfer_saved():
    """The tombstone case's record around a flashinfer_kv_indices case (only its op matters here)."""
    from kvfuzz.strategies import random_cases

    (case,) = random_cases("flashinfer_kv_indices", 1, 1, True)
    saved = read_case_dir(TOMBSTONE)
    finding = dataclasses.replace(saved.finding, op=case.op, path="no_start", tensor="kv_indices")
    return dataclasses.replace(saved, case=case, finding=finding)


def test_bisect_runs_each_case_on_the_copies_of_its_ops_file(monkeypatch):
    """A decode case and a flashinfer case over 0.5.20 - 0.5.23: sglang==0.5.22 runs the
    flashinfer case alone (its metadata.py is 0.5.20's), and each case's rows, history and
    meta.affects follow its own file's groups."""
    class Idle:
        def __init__(self, spec, device):
            pass

        def close(self):
            pass

    ran = []
    defect_on = {("metadata.py", "sglang==0.5.23"), ("kv_indices.py", "sglang==0.5.22")}

    def judge_on(executor, spec, saved):
        ran.append((spec, saved.case.op))
        return (DEFECT if (bisect.case_file(saved), spec) in defect_on else CLEAN), ""

    monkeypatch.setattr(bisect, "judge_on", judge_on)
    lines = []
    decode, flash = bisect.run([(TOMBSTONE, read_case_dir(TOMBSTONE)), (TOMBSTONE, flashinfer_saved())],
                               parse_releases("0.5.20..0.5.23"), "cpu", lines.append, make_executor=Idle)
    assert ran == [("sglang==0.5.20", "decode_metadata"), ("sglang==0.5.20", "flashinfer_kv_indices"),
                   ("sglang==0.5.22", "flashinfer_kv_indices"), ("sglang==0.5.23", "decode_metadata"),
                   ("sglang==0.5.23", "flashinfer_kv_indices"), ("builtin", "decode_metadata"),
                   ("builtin", "flashinfer_kv_indices")]
    assert lines[0].startswith("sglang==0.5.20 (the metadata.py of 0.5.20 - 0.5.22; the kv_indices.py of "
                               "0.5.20 - 0.5.21): 2 cases")
    assert lines[1].startswith("sglang==0.5.22: 1 cases")
    assert decode.rows == [("0.5.20", CLEAN), ("0.5.21", CLEAN), ("0.5.22", CLEAN), ("0.5.23", DEFECT)]
    assert flash.rows == [("0.5.20", CLEAN), ("0.5.21", CLEAN), ("0.5.22", DEFECT), ("0.5.23", CLEAN)]
    assert (flash.history.introduced_in, flash.history.fixed_in) == ("0.5.22", "0.5.23")
    assert flash.affects() == ["sglang==0.5.22"] and decode.affects() == ["sglang==0.5.23"]
    assert [line.split()[:2] for line in bisect.render(flash)[1:5]] == [
        ["0.5.20", "-"], ["0.5.22", "defect"], ["0.5.23", "clean"], ["builtin", "clean"]]


# ----------------------------------------------------------------------------- the history


def rows(text: str) -> list[tuple[str, str]]:
    """Synthetic cells over the first releases: `.` clean, `X` defect, `-` cannot run, `o` other."""
    cell = {".": CLEAN, "X": DEFECT, "-": CANNOT, "o": "other: op:p:crash:-:SIGSEGV"}
    return [(f"1.0.{i}", cell[c]) for i, c in enumerate(text)]


def test_introduced_and_never_fixed():
    h = history(rows("..XX"))
    assert (h.kind, h.first_bad, h.last_good, h.introduced_in, h.fixed_in) == ("monotone", "1.0.2", "1.0.1", "1.0.2", None)
    assert h.lines() == ["first bad 1.0.2, last good before it 1.0.1",
                         "introduced in 1.0.2; not fixed in the range (last bad 1.0.3)"]


def test_introduced_and_fixed():
    h = history(rows(".XX.."))
    assert (h.first_bad, h.last_good, h.last_bad, h.introduced_in, h.fixed_in) == ("1.0.1", "1.0.0", "1.0.2", "1.0.1", "1.0.3")
    assert h.intervals == (Interval("1.0.1", "1.0.2", "1.0.3"),)
    assert h.lines()[1] == "introduced in 1.0.1; fixed in 1.0.3"


def test_present_from_the_start_and_fixed():
    h = history(rows("XX."))
    assert (h.kind, h.introduced_in, h.last_good, h.fixed_in) == ("monotone", None, None, "1.0.2")
    assert h.lines() == ["first bad 1.0.0, the first release in the range",
                         "present from the first release in the range (1.0.0); fixed in 1.0.2"]


def test_non_monotone_gives_each_interval():
    h = history(rows(".X.XX.X"))
    assert h.kind == "non_monotone" and (h.introduced_in, h.fixed_in) == ("1.0.1", None)
    assert h.intervals == (Interval("1.0.1", "1.0.1", "1.0.2"), Interval("1.0.3", "1.0.4", "1.0.5"),
                           Interval("1.0.6", "1.0.6", None))
    assert h.lines()[-1] == "not monotone: 1.0.1 (clean in 1.0.2), 1.0.3 - 1.0.4 (clean in 1.0.5), 1.0.6 (to the end of the range)"
    # only a clean release ends an interval: `-` and another finding say nothing either way
    assert history(rows("X-oX.")).intervals == (Interval("1.0.0", "1.0.3", "1.0.4"),)


def test_never_and_always():
    for text in ("....", "--..", "-o-", ""):
        assert history(rows(text)).kind == "never" and history(rows(text)).lines() == ["never shows in the range"]
    h = history(rows("XXX"))
    assert (h.kind, h.introduced_in, h.fixed_in) == ("always", None, None)
    assert h.lines() == ["present in every release in the range"]


def test_an_op_the_old_releases_lack():
    h = history(rows("---XX"))
    assert (h.kind, h.first_bad, h.last_good, h.introduced_in) == ("monotone", "1.0.3", None, "1.0.3")
    assert h.lines()[0] == "first bad 1.0.3, no good release before it (the releases before it cannot run the case)"
    h = history(rows("-X--"))  # a release the later ones cannot take (0.5.19's read tables)
    assert h.fixed_in is None and h.lines()[1] == (
        "introduced in 1.0.1; not fixed in the range (last bad 1.0.1; the releases after it cannot run the case)")
    assert history(rows("-.oX")).last_good == "1.0.1"


# ----------------------------------------------------------------------------- meta.affects


def result(cells: dict[str, str], releases: str = bisect.DEFAULT_RANGE, affects=None) -> Result:
    saved = read_case_dir(TOMBSTONE)
    if affects is not None:
        saved = dataclasses.replace(saved, case=saved.case.with_meta(affects=affects))
    r = Result(TOMBSTONE, saved, parse_releases(releases))
    for f in bisect.files_of(r.releases):
        r.cells[f"sglang=={f}"] = cells.get(f, CLEAN)
    r.cells["builtin"] = CLEAN
    return r


def test_affects_names_every_release_shipping_a_file_that_shows_the_defect():
    r = result({"0.5.6": CANNOT, "0.5.14": DEFECT, "0.5.16": DEFECT})
    # sorted as scripts/release_matrix.py --write sorted it (the pytest plugin compares strings)
    assert r.affects() == sorted(f"sglang=={v}" for v in ("0.5.13", "0.5.13.post1", "0.5.14", "0.5.15",
                                                          "0.5.15.post1", "0.5.16"))
    assert r.meta() == {"affects": r.affects(), "introduced_in": "0.5.13", "fixed_in": "0.5.17"}


def test_a_narrower_range_keeps_what_the_case_recorded_outside_it():
    r = result({"0.5.23": DEFECT}, "0.5.21..0.5.23", affects=["sglang==0.5.10", "sglang==0.5.20", "sglang==0.5.23"])
    assert r.rows == [("0.5.21", CLEAN), ("0.5.22", CLEAN), ("0.5.23", DEFECT)]
    # 0.5.20 ships 0.5.21's file, which ran clean: dropped; 0.5.10 was not looked at: kept
    assert r.affects() == ["sglang==0.5.10", "sglang==0.5.23"]


def test_a_case_an_old_release_cannot_take():
    class Target:
        missing = {"draft_extend_metadata": "not in this release"}
        lacks = {"num_kv_splits": ("uneven_batch",)}
        takes = {"decode_metadata": ()}

    saved = read_case_dir(TOMBSTONE)

    def with_scalars(**scalars):
        return dataclasses.replace(saved, case=saved.case.with_scalars(**scalars))

    assert bisect.cannot_take(saved, Target()) is None
    # their off values: no later argument used
    assert bisect.cannot_take(with_scalars(kernel_page_multiplier=1, zero_tail=False), Target()) is None
    assert bisect.cannot_take(with_scalars(kernel_page_multiplier=2, skip_page_table=True), Target()) == (
        "cannot take kernel_page_multiplier, skip_page_table")
    extend = read_case_dir(REPO / "corpora" / "draft_extend_metadata" / "8c0a1f5466b547ef")
    assert bisect.cannot_take(extend, Target()) == "no draft_extend_metadata"
    Target.missing = {"decode_metadata": "not offered by sglang 0.5.6: normal_decode_set_metadata is plain torch"}
    assert bisect.cannot_take(saved, Target()) == "decode_metadata not offered (docs/releases.md)"


def test_only_triaged_defects_of_a_release_are_written_and_cases_without_a_defect_are_not_bisected():
    assert bisect.writable(read_case_dir(TOMBSTONE)) is None
    assert "must-pass" in bisect.writable(read_case_dir(REPO / "corpora" / "decode_metadata" / "ffd7cad8b2461268"))
    assert "mutant_kernels.py" in bisect.writable(read_case_dir(REPO / "corpora" / "decode_metadata" / "306fae2129a62215"))
    assert "no finding" in bisect.why_not_bisected(read_case_dir(REPO / "corpora" / "decode_metadata" / "70e86fd95f6bc261"))


def test_set_meta_changes_meta_alone(tmp_path):
    case = tmp_path / TOMBSTONE.name
    shutil.copytree(TOMBSTONE, case)
    before_json, before_npz = (case / "case.json").read_text(), (case / "tensors.npz").read_bytes()
    saved = set_meta(case, {"introduced_in": "0.5.7", "fixed_in": None, "note": "kept"})
    assert saved.case.meta["introduced_in"] == "0.5.7" and saved.case.meta["fixed_in"] is None
    doc, was = json.loads((case / "case.json").read_text()), json.loads(before_json)
    assert doc["meta"] == {**was["meta"], "introduced_in": "0.5.7", "fixed_in": None, "note": "kept"}
    doc["meta"] = was["meta"]
    assert doc == was and (case / "tensors.npz").read_bytes() == before_npz
    assert sorted(p.name for p in case.iterdir()) == ["case.json", "tensors.npz"]  # no temporary left
    (case / "case.json").write_text("{ not json")
    with pytest.raises(BadCaseFile):
        set_meta(case, {"fixed_in": "0.5.24"})
    assert (case / "case.json").read_text() == "{ not json"


# ----------------------------------------------------------------------------- the command


@pytest.mark.parametrize("args, message", [
    ([str(TOMBSTONE), "--releases", "0.5.5"], "'0.5.5' is not an SGLang release kvfuzz knows"),
    ([str(TOMBSTONE), "--releases", "0.5.14.."], "expected A..B or X,Y,Z"),
    ([str(TOMBSTONE), "--releases", "0.5.23..0.5.14"], "0.5.23 comes after 0.5.14"),
    (["/no/such/case"], "no such case or corpus folder"),
    ([str(REPO / "README.md")], "is not a case folder"),
    ([str(REPO / "docs")], "is not a case folder and holds no saved case"),
    ([str(REPO / "corpora" / "decode_metadata" / "70e86fd95f6bc261")], "records no finding"),
    ([str(TOMBSTONE), "--device", "tpu"], "invalid choice"),
    ([], "the following arguments are required: CASE"),
])
def test_bad_input_is_one_line_and_exit_2(args, message):
    p = run(*args)
    assert p.returncode == 2, p.stdout + p.stderr
    assert message in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "Traceback" not in p.stderr and not p.stdout


def test_an_unreadable_case_in_a_corpus_is_bad_input(tmp_path):
    (tmp_path / "op" / "broken").mkdir(parents=True)
    (tmp_path / "op" / "broken" / "case.json").write_text("{ not json")
    p = run(str(tmp_path))
    assert p.returncode == 2 and "case.json" in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr


def test_builtin_showing_the_defect_is_loud_exit_1_and_not_written(tmp_path, monkeypatch, capsys, device):
    """Without running a kernel: every target's cell is made up (the defect on builtin too)."""
    from kvfuzz import cli, worker

    class Idle:
        def __init__(self, spec, device):
            pass

        def close(self):
            pass

    case = tmp_path / TOMBSTONE.name
    shutil.copytree(TOMBSTONE, case)
    before = (case / "case.json").read_text()
    monkeypatch.setattr(worker, "WorkerExecutor", Idle)
    monkeypatch.setattr(bisect, "judge_on", lambda ex, spec, saved: (DEFECT, ""))
    assert cli.main(["bisect", str(case), "--releases", "0.5.22,0.5.23", "--device", device, "--write"]) == 1
    out, err = capsys.readouterr()
    assert "builtin  DEFECT  <-- BUILTIN IS NOT CLEAN" in out and "present in every release in the range" in out
    assert "BUILTIN IS NOT CLEAN on" in err and "not written" in err and "builtin is not clean" in err
    assert (case / "case.json").read_text() == before


@pytest.mark.slow  # CI's slow stage runs it (.ci/run)
def test_a_real_case_over_three_releases(tmp_path, device):
    """The tombstone case on 0.5.20's file (0.5.20 - 0.5.22: clean) and 0.5.23's (its defect), and builtin."""
    report = tmp_path / "bisect.json"
    p = run(str(TOMBSTONE), "--releases", "0.5.20..0.5.23", "--device", device, "--json", str(report))
    assert p.returncode == 0, p.stdout + p.stderr
    lines = [line.split() for line in p.stdout.splitlines()]
    assert ["0.5.20", "-", "0.5.22", "clean"] in lines and ["0.5.23", "defect"] in lines and ["builtin", "clean"] in lines
    assert "  first bad 0.5.23, last good before it 0.5.22" in p.stdout
    assert "  introduced in 0.5.23; not fixed in the range (last bad 0.5.23)" in p.stdout
    assert "  meta.affects: as recorded" in p.stdout
    doc = json.loads(report.read_text())
    assert doc["files"] == ["sglang==0.5.20", "sglang==0.5.23"]
    (c,) = doc["cases"]
    assert c["releases"] == {"0.5.20": "clean", "0.5.21": "clean", "0.5.22": "clean", "0.5.23": "defect"}
    assert (c["builtin"], c["introduced_in"], c["fixed_in"], c["affects"]) == ("clean", "0.5.23", None, ["sglang==0.5.23"])


@pytest.mark.slow  # CI's slow stage runs it (.ci/run)
def test_a_regression_found_against_a_baseline_is_bisected_by_the_defect_it_stands_on(tmp_path, device):
    """A case saved as a regression (op:path:regression:TENSOR:KIND.WHERE, found with a baseline)
    is looked for as the ordinary finding one release run alone shows."""
    case = tmp_path / TOMBSTONE.name
    shutil.copytree(TOMBSTONE, case)
    doc = json.loads((case / "case.json").read_text())
    f = doc["finding"]
    f.update(kind="regression", where=f"{f['kind']}.{f['where']}",
             signature="decode_metadata:swa:regression:swa_page_table:mismatch.all")
    doc["meta"]["baseline"] = "sglang==0.5.22"
    (case / "case.json").write_text(json.dumps(doc))
    p = run(str(case), "--releases", "0.5.22,0.5.23", "--device", device)
    assert p.returncode == 0, p.stdout + p.stderr
    lines = [line.split() for line in p.stdout.splitlines()]
    assert ["0.5.22", "clean"] in lines and ["0.5.23", "defect"] in lines, p.stdout
    assert "decode_metadata:swa:mismatch:swa_page_table:all" in p.stdout
    assert "  introduced in 0.5.23; not fixed in the range (last bad 0.5.23)" in p.stdout


@pytest.mark.slow  # campaign-sized: `pytest -m slow`
def test_write_records_the_history_and_changes_nothing_else(tmp_path, device):
    case = tmp_path / "decode_metadata" / TOMBSTONE.name
    shutil.copytree(TOMBSTONE, case)
    set_meta(case, {"affects": ["sglang==0.5.10", "sglang==0.5.21", "sglang==0.5.23"]})  # 0.5.21: wrong
    before_doc, before_npz = json.loads((case / "case.json").read_text()), (case / "tensors.npz").read_bytes()
    mode = (case / "case.json").stat().st_mode
    p = run(str(tmp_path), "--releases", "0.5.21,0.5.23", "--device", device, "--write")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "meta.affects: differs from the recorded one: drops sglang==0.5.21" in p.stdout
    assert f"wrote meta.affects, introduced_in, fixed_in: {case}" in p.stderr
    doc = json.loads((case / "case.json").read_text())
    # 0.5.10 lies outside the range and is kept; 0.5.20 - 0.5.22 share the file that ran clean
    assert doc["meta"] == {**before_doc["meta"], "affects": ["sglang==0.5.10", "sglang==0.5.23"],
                           "introduced_in": "0.5.23", "fixed_in": None}
    doc["meta"], before_doc["meta"] = {}, {}
    assert doc == before_doc and (case / "tensors.npz").read_bytes() == before_npz
    assert (case / "case.json").stat().st_mode == mode
    assert sorted(p.name for p in case.iterdir()) == ["case.json", "tensors.npz"]
    again = run(str(case), "--releases", "0.5.21,0.5.23", "--device", device, "--write")
    assert again.returncode == 0 and "wrote" not in again.stderr and "meta.affects: as recorded" in again.stdout


def test_the_release_matrix_script_is_kvfuzz_bisect_underneath():
    p = subprocess.run([sys.executable, str(REPO / "scripts" / "release_matrix.py"), "--releases", "0.5.5"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "'0.5.5' is not an SGLang release kvfuzz knows" in p.stderr, p.stderr


def test_a_memory_fault_is_the_same_defect_under_either_backends_crash_name(monkeypatch):
    """A case saved on the CPU as crash:-:SIGSEGV is `defect` where a GPU run faults the device
    (crash:-:cuda_fault), and not where another crash shows."""
    from types import SimpleNamespace

    from kvfuzz import check
    from kvfuzz.corpus import read_case_dir
    from kvfuzz.findings import backend_neutral

    assert backend_neutral("op:p:crash:-:SIGSEGV") == backend_neutral("op:p:crash:-:cuda_fault")
    assert backend_neutral("op:p:crash:-:timeout") == "op:p:crash:-:timeout"
    saved = read_case_dir(REPO / "corpora" / "decode_metadata" / "c70f6d25eb4ddafb")
    assert saved.finding.signature == "decode_metadata:swa:crash:-:SIGSEGV"
    shown: list[str] = []

    class Fixed:
        variant = None

        def adopt(self, case):
            return case

        def check(self, case, repeats=1):
            return SimpleNamespace(signatures=lambda: list(shown))
    monkeypatch.setattr(check.Checker, "for_saved", classmethod(lambda cls, *a, **k: Fixed()))
    ex = SimpleNamespace(missing={}, lacks={}, takes={"decode_metadata": ()})
    for got, cell in ((["decode_metadata:swa:crash:-:cuda_fault"], DEFECT),
                      (["decode_metadata:swa:crash:-:timeout"], "other: decode_metadata:swa:crash:-:timeout"),
                      ([], "clean")):
        shown[:] = got
        assert bisect.judge_on(ex, "sglang==0.5.14", saved)[0] == cell
