"""The corpus: case.json + tensors.npz round trip, refusal of bad files, the directory store."""

from __future__ import annotations

import io
import json
import multiprocessing
import os
import pickle
import random
import re
import shutil
import sys
import time
import warnings
import zipfile
from pathlib import Path

import numpy as np
import pytest

from kvfuzz.case import Case, TensorSpec
from kvfuzz.corpus import (
    SCHEMA_VERSION,
    DirectoryCorpus,
    SavedCase,
    case_to_json,
    dumps_case_json,
    environment_versions,
    iter_cases,
    list_cases,
    merge,
    prune,
    read_case_dir,
    write_case_dir,
)
from kvfuzz.corpus import store as store_mod
from kvfuzz.errors import BadCaseFile, BadInput
from kvfuzz.findings import Finding

pytestmark = pytest.mark.nokernel  # no kernel runs here (conftest: runs where the interpreter is refused)

OP = "swa_spec_page_table"
FOUND_AT = "2025-06-01T12:00:00+00:00"


def make_case(W: int = 4, bs: int = 1, R: int = 1, fill: int = 1, noncontig: bool = False, **meta) -> Case:
    """A swa_spec_page_table case; its size grows with W, bs and R."""
    M = bs * R
    a = TensorSpec.contiguous("int32", (bs, W))
    if noncontig:  # every other column, 3 elements in, 7 spare elements at the end
        a = TensorSpec("int32", (bs, W), (2 * W + 1, 2), offset=3, storage_size=3 + (bs - 1) * (2 * W + 1) + 2 * (W - 1) + 1 + 7)
    tensors = {
        "page_table_dst": TensorSpec.contiguous("int32", (M, 2 * W)),
        "page_table_a": a,
        "page_table_b": TensorSpec.contiguous("int32", (M, W)),
        "seq_len_a": TensorSpec.contiguous("int64" if noncontig else "int32", (bs,)),
        "seq_len_b": TensorSpec.contiguous("int32", (M,)),
    }
    values = {
        "page_table_a": np.arange(bs * W).reshape(bs, W) * fill,
        "page_table_b": np.arange(M * W).reshape(M, W) + 100,
        "seq_len_a": np.full(bs, W),
        "seq_len_b": np.full(M, min(W, 1)),
    }
    return Case(OP, {"speculative_num_draft_tokens": R}, tensors, values, meta=meta)


def finding(where: str = "partial", kind: str = "mismatch") -> Finding:
    return Finding(kind, OP, "spec", "page_table_dst", where, "page_table_dst: 3 cells differ",
                   cells=({"row": 0, "col": 1, "got": -1, "want": 7},))


def make_saved(case: Case | None = None, *, f: Finding | None | str = "default", target: str = "builtin", **kw) -> SavedCase:
    args = dict(
        case=case if case is not None else make_case(),
        finding=finding() if f == "default" else f,
        target=target,
        device="cpu",
        versions=environment_versions(),
        origin="hypothesis",
        found_at=FOUND_AT,
    )
    args.update(kw)
    return SavedCase(**args)


def written(tmp_path: Path, saved: SavedCase | None = None) -> Path:
    d = tmp_path / "case"
    d.mkdir()
    write_case_dir(saved or make_saved(), d)
    return d


# round trip ---------------------------------------------------------------------------------


def test_round_trip_gives_equal_case_finding_and_fields(tmp_path):
    saved = make_saved(make_case(W=5, bs=2, R=2, seed=17, engine="hypothesis"))
    back = read_case_dir(written(tmp_path, saved))
    assert back == saved
    assert back.case == saved.case and back.finding == saved.finding
    assert back.finding.cells == saved.finding.cells  # not part of Finding equality: check it here
    assert back.case.meta == {"seed": 17, "engine": "hypothesis"}
    assert back.case.scalars == {"speculative_num_draft_tokens": 2}
    assert type(back.case.scalars["speculative_num_draft_tokens"]) is int
    for name, arr in saved.case.values.items():
        assert back.case.values[name].dtype == arr.dtype
        np.testing.assert_array_equal(back.case.values[name], arr)
    assert set(back.case.values) == set(saved.case.values)
    assert back.case.tensors == saved.case.tensors
    assert back.key() == saved.key()
    for attr in ("target", "device", "versions", "expected", "reason", "minimized", "minimize_log",
                 "found_at", "origin"):
        assert getattr(back, attr) == getattr(saved, attr), attr


def test_round_trip_keeps_noncontiguous_layouts(tmp_path):
    case = make_case(W=3, bs=2, noncontig=True)
    spec = case.tensors["page_table_a"]
    assert not spec.is_contiguous and spec.offset == 3 and spec.storage_size > spec.extent
    back = read_case_dir(written(tmp_path, make_saved(case)))
    assert back.case.tensors["page_table_a"] == spec
    assert back.case.tensors["seq_len_a"].dtype == "int64"
    assert back.case.values["seq_len_a"].dtype == np.int64
    assert back.case == case


def test_round_trip_of_a_hand_written_xfail_case_without_finding(tmp_path):
    saved = make_saved(f=None, origin="hand", expected="xfail", reason="https://example.org/issue/1",
                       minimized=True, minimize_log=("dropped row 1", "page_table_a: 8 -> 2 columns"))
    back = read_case_dir(written(tmp_path, saved))
    assert back == saved and back.finding is None
    assert back.minimize_log == ("dropped row 1", "page_table_a: 8 -> 2 columns")
    assert back.key() == saved.key()


def test_numpy_scalars_are_normalised_so_the_saved_case_equals_the_read_one(tmp_path):
    case = make_case().with_scalars(speculative_num_draft_tokens=np.int64(1), flag=np.bool_(True), name="x", none=None)
    saved = make_saved(case)
    assert type(saved.case.scalars["speculative_num_draft_tokens"]) is int
    assert type(saved.case.scalars["flag"]) is bool
    assert read_case_dir(written(tmp_path, saved)) == saved


def test_case_json_is_readable_and_npz_holds_only_inputs_without_pickles(tmp_path):
    d = written(tmp_path)
    text = (d / "case.json").read_text()
    doc = json.loads(text)
    assert json.loads(text) == doc and list(doc) == sorted(doc)
    assert '"shape": [1, 4]' in text and '\n  "tensors": {\n    "page_table_a": {\n' in text  # indent 2
    assert text == dumps_case_json(case_to_json(make_saved()))
    assert doc["schema"] == SCHEMA_VERSION == 3
    assert {n: t["role"] for n, t in doc["tensors"].items()} == {
        "page_table_dst": "out", "page_table_a": "in", "page_table_b": "in", "seq_len_a": "in", "seq_len_b": "in"}
    assert doc["finding"]["signature"] == f"{OP}:spec:mismatch:page_table_dst:partial"
    with zipfile.ZipFile(d / "tensors.npz") as zf:
        assert sorted(zf.namelist()) == ["page_table_a.npy", "page_table_b.npy", "seq_len_a.npy", "seq_len_b.npy"]
    with np.load(d / "tensors.npz", allow_pickle=False) as npz:
        assert all(not npz[n].dtype.hasobject for n in npz.files)


def test_cases_written_by_np_savez_are_read(tmp_path):
    d = written(tmp_path)
    saved = read_case_dir(d)
    np.savez_compressed(d / "tensors.npz", **saved.case.values)
    assert read_case_dir(d) == saved


def test_writing_is_deterministic(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    write_case_dir(make_saved(), a)
    write_case_dir(make_saved(), b)
    for name in ("case.json", "tensors.npz"):
        assert (a / name).read_bytes() == (b / name).read_bytes()


def test_write_refuses_a_non_empty_directory(tmp_path):
    d = written(tmp_path)
    with pytest.raises(FileExistsError):
        write_case_dir(make_saved(), d)


def test_key_is_per_signature_and_target():
    small, big = make_saved(make_case(W=1)), make_saved(make_case(W=9))
    assert small.key() == big.key() and len(small.key()) == 16
    assert make_saved(target="sglang==0.5.14").key() != small.key()
    assert make_saved(f=finding(where="all")).key() != small.key()
    # without a finding the case itself is the identity
    assert make_saved(make_case(W=1), f=None).key() != make_saved(make_case(W=9), f=None).key()


@pytest.mark.parametrize("kw, match", [
    (dict(expected="xfail"), "needs a reason"),
    (dict(expected="maybe"), "expected must be one of"),
    (dict(origin="guesswork"), "origin must be one of"),
    (dict(found_at="yesterday"), "ISO 8601"),
    (dict(versions={"torch": 2}), "versions must map str to str"),
    (dict(f=Finding("crash", "decode_metadata", "ps1", "-", "RuntimeError", "boom")), "for op"),
    (dict(case=make_case().with_scalars(page_size=1.5)), "scalar 'page_size'"),
    (dict(case=make_case(blob=object())), "meta is not JSON"),
])
def test_saved_case_validates(kw, match):
    with pytest.raises(ValueError, match=match):
        make_saved(**kw)


# refusing bad files --------------------------------------------------------------------------


def edit_json(key_path, value=None, delete=False):
    def edit(d: Path) -> None:
        doc = json.loads((d / "case.json").read_text())
        *parents, last = key_path
        node = doc
        for k in parents:
            node = node[k]
        if delete:
            del node[last]
        else:
            node[last] = value
        (d / "case.json").write_text(json.dumps(doc))
    return edit


def write_bytes(name, data):
    return lambda d: (d / name).write_bytes(data)


def truncate(name, keep=0.5):
    def edit(d: Path) -> None:
        data = (d / name).read_bytes()
        (d / name).write_bytes(data[: int(len(data) * keep)])
    return edit


def pickled_member(d: Path) -> None:
    """A zip whose page_table_a.npy member was written with np.save(allow_pickle=True)."""
    buf = io.BytesIO()
    np.save(buf, np.array([[{"evil": 1}]], dtype=object), allow_pickle=True)
    with zipfile.ZipFile(d / "tensors.npz") as zf:
        members = {n: zf.read(n) for n in zf.namelist()}
    members["page_table_a.npy"] = buf.getvalue()
    with zipfile.ZipFile(d / "tensors.npz", "w") as zf:
        for n, data in members.items():
            zf.writestr(n, data)


def duplicate_member(d: Path) -> None:
    with zipfile.ZipFile(d / "tensors.npz") as zf:
        data = zf.read("seq_len_a.npy")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns about the duplicate name: that is the point
        with zipfile.ZipFile(d / "tensors.npz", "a") as zf:
            zf.writestr("seq_len_a.npy", data)


def savez_object_array(d: Path) -> None:
    with np.load(d / "tensors.npz") as npz:
        arrays = {n: npz[n] for n in npz.files}
    arrays["page_table_a"] = np.array([[object()]], dtype=object)
    np.savez(d / "tensors.npz", **arrays)


def big_endian(d: Path) -> None:
    with np.load(d / "tensors.npz") as npz:
        arrays = {n: npz[n] for n in npz.files}
    arrays["seq_len_b"] = arrays["seq_len_b"].astype(">i4")
    np.savez(d / "tensors.npz", **arrays)


def bare_npy(d: Path) -> None:
    with open(d / "tensors.npz", "wb") as f:
        np.save(f, np.zeros(3, np.int32))


BAD_FILES = {
    "corrupt json": (write_bytes("case.json", b'{"schema": 1, "op": '), r"invalid JSON"),
    "not utf-8": (write_bytes("case.json", b'{"schema": \xff}'), r"not UTF-8"),
    "top-level list": (write_bytes("case.json", b"[1, 2]"), r"top level must be a JSON object"),
    "duplicate key": (write_bytes("case.json", b'{"schema": 1, "schema": 1}'), r"duplicate key 'schema'"),
    "NaN": (write_bytes("case.json", b'{"schema": NaN}'), r"NaN is not valid JSON"),
    "missing case.json": (lambda d: (d / "case.json").unlink(), r"missing case.json"),
    "missing npz": (lambda d: (d / "tensors.npz").unlink(), r"missing tensors.npz"),
    "truncated npz": (truncate("tensors.npz"), r"corrupt|truncated"),
    "empty npz": (write_bytes("tensors.npz", b""), r"truncated|corrupt"),
    "garbage npz": (write_bytes("tensors.npz", b"PK\x03\x04" + b"\x00" * 40), r"corrupt|truncated"),
    "pickled member": (pickled_member, r"refusing pickled data"),
    "savez object array": (savez_object_array, r"refusing pickled data"),
    "duplicate member": (duplicate_member, r"duplicate array names"),
    "pickle as npz": (write_bytes("tensors.npz", pickle.dumps({"a": 1})), r"refusing pickled data"),
    "bare npy": (bare_npy, r"not an npz archive"),
    "newer schema": (edit_json(["schema"], 7), r"^schema 7 is newer than this kvfuzz \(3\)"),
    "schema zero": (edit_json(["schema"], 0), r"schema 0 is not a known version"),
    "schema string": (edit_json(["schema"], "1"), r"'schema' must be an int"),
    "no schema": (edit_json(["schema"], delete=True), r"no 'schema' version"),
    "missing key": (edit_json(["target"], delete=True), r"missing key 'target'"),
    "extra key": (edit_json(["colour"], "red"), r"unknown key 'colour'"),
    "minimized not bool": (edit_json(["minimized"], "yes"), r"'minimized' must be a bool"),
    "float scalar": (edit_json(["scalars", "speculative_num_draft_tokens"], 1.0), r"scalar 'speculative_num_draft_tokens'"),
    "shape mismatch": (edit_json(["tensors", "page_table_b", "shape"], [1, 3]),
                       r"array 'page_table_b' has shape \(1, 4\), case.json says \(1, 3\)"),
    "big-endian array": (big_endian, r"array 'seq_len_b' has dtype >i4, case.json says int32 \(<i4\)"),
    "dtype mismatch": (edit_json(["tensors", "seq_len_b", "dtype"], "int64"), r"array 'seq_len_b' has dtype <i4"),
    "float in shape": (edit_json(["tensors", "page_table_b", "shape"], [1.0, 4]), r"shape must be a list of ints"),
    "bad dtype": (edit_json(["tensors", "page_table_b", "dtype"], "float32"), r"dtype must be one of"),
    "bad role": (edit_json(["tensors", "page_table_b", "role"], "inout"), r"role must be 'in' or 'out'"),
    "spec missing key": (edit_json(["tensors", "page_table_b", "strides"], delete=True), r"tensor 'page_table_b' is missing key 'strides'"),
    "bad layout": (edit_json(["tensors", "page_table_b", "storage_size"], 2), r"page_table_b.*bad layout: storage_size 2 < extent"),
    "input without array": (edit_json(["tensors", "page_table_dst", "role"], "in"), r"input tensor 'page_table_dst' has no array"),
    "array without input": (edit_json(["tensors", "seq_len_a", "role"], "out"), r"has array 'seq_len_a' but tensor 'seq_len_a' has role 'out'"),
    "array without tensor": (edit_json(["tensors", "seq_len_a"], delete=True), r"has array 'seq_len_a' but case.json has no such tensor"),
    "unknown finding kind": (edit_json(["finding", "kind"], "slow"), r"unknown finding kind 'slow'"),
    "finding missing key": (edit_json(["finding", "where"], delete=True), r"finding is missing key 'where'"),
    "stale signature": (edit_json(["finding", "signature"], "x:y"), r"finding signature 'x:y' does not match"),
    "xfail without reason": (edit_json(["expected"], "xfail"), r"needs a reason"),
    "bad origin": (edit_json(["origin"], "magic"), r"origin must be one of"),
    "versions not strings": (edit_json(["versions", "torch"], 2), r"version of 'torch' must be a string"),
}


@pytest.mark.parametrize("name", sorted(BAD_FILES))
def test_bad_files_raise_bad_case_file_with_a_helpful_line(tmp_path, name):
    edit, match = BAD_FILES[name]
    d = written(tmp_path)
    edit(d)
    with pytest.raises(BadCaseFile) as info:
        read_case_dir(d)
    err = info.value
    assert re.search(match, err.why), err.why
    assert "\n" not in err.why and len(err.why) < 300
    assert Path(err.path) in (d, d / "case.json", d / "tensors.npz")
    assert str(err).startswith(str(err.path))


def test_missing_directory_raises_bad_case_file(tmp_path):
    with pytest.raises(BadCaseFile, match="no such case directory"):
        read_case_dir(tmp_path / "nope")


def test_any_corruption_gives_a_case_or_bad_case_file(tmp_path):
    """Byte flips and truncations anywhere: never another exception type."""
    d = written(tmp_path)
    originals = {n: (d / n).read_bytes() for n in ("case.json", "tensors.npz")}
    rng = random.Random(17)
    outcomes = {"ok": 0, "bad": 0}
    for trial in range(400):
        name = rng.choice(sorted(originals))
        data = bytearray(originals[name])
        if trial % 4 == 0:
            data = data[: rng.randrange(len(data))]
        else:
            for _ in range(rng.randint(1, 3)):
                data[rng.randrange(len(data))] = rng.randrange(256)
        (d / name).write_bytes(bytes(data))
        try:
            read_case_dir(d)
            outcomes["ok"] += 1
        except BadCaseFile as exc:
            assert "\n" not in exc.why
            outcomes["bad"] += 1
        (d / name).write_bytes(originals[name])
    assert outcomes["bad"] > 100  # most corruptions are noticed


# the directory store -------------------------------------------------------------------------


def dot_entries(root: Path, prefix: str) -> list[Path]:
    return [p for p in root.rglob(f"{prefix}*")]


def test_save_new_then_load(tmp_path):
    store = DirectoryCorpus(tmp_path / "corpus")
    saved = make_saved()
    res = store.save(saved)
    assert res.status == "new" and res.key == saved.key()
    assert res.path == tmp_path / "corpus" / OP / saved.key()
    assert sorted(p.name for p in res.path.iterdir()) == ["case.json", "tensors.npz"]
    assert store.load(saved.key()) == saved
    assert list(store.keys()) == [saved.key()]
    assert saved.key() in store and store.path_of(saved.key()) == res.path
    assert not dot_entries(tmp_path, ".tmp-") and not dot_entries(tmp_path, ".old-")


def test_load_of_absent_or_malformed_key(tmp_path):
    store = DirectoryCorpus(tmp_path)
    with pytest.raises(KeyError):
        store.load("0123456789abcdef")
    with pytest.raises(ValueError, match="not a corpus key"):
        store.load("../etc")


def test_save_is_atomic_when_writing_fails(tmp_path, monkeypatch):
    store = DirectoryCorpus(tmp_path)
    saved = make_saved()

    def half_write(s, directory, fsync=True):
        (Path(directory) / "case.json").write_text("{")
        raise OSError("disk full")

    monkeypatch.setattr(store_mod, "write_case_dir", half_write)
    with pytest.raises(OSError, match="disk full"):
        store.save(saved)
    assert not (tmp_path / OP / saved.key()).exists()
    assert not dot_entries(tmp_path, ".tmp-")
    assert list(store.keys()) == [] and list(iter_cases(tmp_path)) == []


def test_readers_skip_half_written_and_dot_dirs(tmp_path):
    store = DirectoryCorpus(tmp_path)
    saved = make_saved()
    store.save(saved)
    half = tmp_path / OP / f".tmp-{saved.key()}-dead"
    half.mkdir()
    (half / "case.json").write_text("{")
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "case.json").write_text("{")
    assert list(store.keys()) == [saved.key()]
    assert [p for p, _ in iter_cases(tmp_path)] == [tmp_path / OP / saved.key()]


def test_dedup_keeps_the_smaller_case(tmp_path):
    store = DirectoryCorpus(tmp_path)
    big, small, mid = (make_saved(make_case(W=w)) for w in (6, 2, 4))
    assert big.key() == small.key() == mid.key()
    assert store.save(big).status == "new"
    assert store.save(small).status == "replaced"
    assert store.save(mid).status == "kept"
    assert store.save(make_saved(make_case(W=2, fill=1))).status == "kept"  # a tie keeps the existing
    assert store.load(small.key()) == small
    assert [p.name for p in (tmp_path / OP).iterdir() if not p.name.startswith(".")] == [small.key()]
    assert not dot_entries(tmp_path, ".tmp-") and not dot_entries(tmp_path, ".old-")


def test_at_equal_size_a_minimized_case_replaces_one_saved_as_found(tmp_path):
    # a campaign saves each finding when first seen, then its minimized form over it
    store = DirectoryCorpus(tmp_path)
    found, done = make_saved(make_case(W=2)), make_saved(make_case(W=2), minimized=True, minimize_log=("kept",))
    assert store.save(found).status == "new"
    assert store.save(done).status == "replaced" and store.load(found.key()) == done
    assert store.save(found).status == "kept"  # never back to the unminimized one
    assert store.save(make_saved(make_case(W=1))).status == "replaced"  # smaller still wins
    assert store.load(found.key()) == make_saved(make_case(W=1))


def test_a_smaller_replacement_keeps_the_xfail_triage(tmp_path):
    store = DirectoryCorpus(tmp_path)
    store.save(make_saved(make_case(W=6), expected="xfail", reason="issue 42"))
    store.save(make_saved(make_case(W=2)))  # found again, smaller, untriaged
    back = store.load(make_saved().key())
    assert back.case == make_case(W=2)
    assert (back.expected, back.reason) == ("xfail", "issue 42")


def test_an_unreadable_existing_case_is_never_replaced(tmp_path):
    store = DirectoryCorpus(tmp_path)
    saved = make_saved(make_case(W=6))
    path = store.save(saved).path
    (path / "tensors.npz").write_bytes(b"junk")
    with pytest.raises(BadCaseFile, match="tensors.npz"):
        store.save(make_saved(make_case(W=1)))
    assert (path / "tensors.npz").read_bytes() == b"junk"
    assert not dot_entries(tmp_path, ".tmp-")


def test_a_case_edited_out_of_its_place_is_refused(tmp_path):
    store = DirectoryCorpus(tmp_path)
    saved = make_saved()
    path = store.save(saved).path
    doc = json.loads((path / "case.json").read_text())
    doc["target"] = "sglang==0.5.14"
    (path / "case.json").write_text(json.dumps(doc))
    with pytest.raises(BadCaseFile, match="was case.json edited"):
        store.load(saved.key())


def test_save_recovers_from_a_replace_that_died_halfway(tmp_path):
    store = DirectoryCorpus(tmp_path)
    small = make_saved(make_case(W=1))
    path = store.save(small).path
    os.rename(path, path.parent / f".old-{small.key()}-deadbeef")  # died before renaming the new one in
    assert list(store.keys()) == []
    assert store.save(make_saved(make_case(W=5))).status == "kept"
    assert store.load(small.key()) == small
    assert not dot_entries(tmp_path, ".old-")


def test_the_next_save_of_a_key_clears_what_dead_writers_left_of_it(tmp_path):
    store = DirectoryCorpus(tmp_path)
    saved = make_saved(make_case(W=3))
    key, other = saved.key(), make_saved(f=finding(where="other")).key()
    path = store.save(saved).path
    op_dir = path.parent
    half = op_dir / f".tmp-{key}-dead1"  # killed while writing its case
    half.mkdir()
    (half / "case.json").write_text("{")
    swapped_out = op_dir / f".tmp-{key}-dead2"  # killed after an exchange, before removing the old case
    swapped_out.mkdir()
    write_case_dir(make_saved(make_case(W=5)), swapped_out)
    (op_dir / f".old-{key}-dead3").mkdir()  # killed after a two-rename replace, before the cleanup
    (op_dir / f".del-{key}-dead4").mkdir()  # killed while deleting
    theirs = op_dir / f".tmp-{other}-dead5"  # another key's: left for that key's next save
    theirs.mkdir()
    assert store.save(make_saved(make_case(W=9))).status == "kept"
    assert sorted(p.name for p in op_dir.iterdir() if not p.name.endswith(".lock")) == sorted([key, theirs.name])
    assert store.load(key) == saved


def test_a_replace_never_leaves_the_key_missing(tmp_path, monkeypatch):
    store = DirectoryCorpus(tmp_path)
    path = store.save(make_saved(make_case(W=5))).path
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    if not store_mod._exchange(tmp_path / "a", tmp_path / "b"):
        pytest.skip("this filesystem cannot exchange two directories")
    renames = []
    real_rename = os.rename
    monkeypatch.setattr(os, "rename", lambda a, b: renames.append((a, b)) or real_rename(a, b))
    assert store.save(make_saved(make_case(W=1))).status == "replaced"
    assert renames == []  # one exchange, no rename aside: the path always holds a whole case
    assert store.load(make_saved().key()) == make_saved(make_case(W=1)) and path.is_dir()
    assert not dot_entries(tmp_path / OP, ".tmp-") and not dot_entries(tmp_path, ".old-")


def test_without_exchange_a_replace_renames_the_old_case_aside_first(tmp_path, monkeypatch):
    # as on a filesystem (NFS) or OS that cannot exchange two directories
    monkeypatch.setattr(store_mod, "_renameat2", None)
    store = DirectoryCorpus(tmp_path)
    store.save(make_saved(make_case(W=5), expected="xfail", reason="bug 7"))
    assert store.save(make_saved(make_case(W=1))).status == "replaced"
    back = store.load(make_saved().key())
    assert back.case == make_case(W=1) and (back.expected, back.reason) == ("xfail", "bug 7")
    assert not dot_entries(tmp_path, ".tmp-") and not dot_entries(tmp_path, ".old-")


def test_without_exchange_a_save_whose_staged_case_vanishes_puts_the_old_case_back(tmp_path, monkeypatch):
    # a writer whose locks do not reach us (an NFS mount with local_lock) may clear our .tmp-*
    # as a dead writer's; if staging again then fails, the case in place must still be there
    monkeypatch.setattr(store_mod, "_renameat2", None)
    store = DirectoryCorpus(tmp_path)
    big = make_saved(make_case(W=5))
    path = store.save(big).path
    real_rename, real_stage = store_mod._try_rename, DirectoryCorpus._stage

    def tmp_vanishes(src, dst):
        if src.name.startswith(".tmp-") and dst == path:
            shutil.rmtree(src)
        return real_rename(src, dst)

    stages = []

    def stage_once(self, saved, op_dir):
        stages.append(saved)
        if len(stages) > 1:
            raise OSError("disk full")
        return real_stage(self, saved, op_dir)

    monkeypatch.setattr(store_mod, "_try_rename", tmp_vanishes)
    monkeypatch.setattr(DirectoryCorpus, "_stage", stage_once)
    with pytest.raises(OSError, match="disk full"):
        store.save(make_saved(make_case(W=1)))
    assert store.load(big.key()) == big
    assert not dot_entries(tmp_path, ".tmp-") and not dot_entries(tmp_path, ".old-")


def test_a_case_replaced_while_it_is_read_is_read_again(tmp_path, monkeypatch):
    store = DirectoryCorpus(tmp_path)
    store.save(make_saved(make_case(W=5)))
    small = make_saved(make_case(W=1))
    real_read = store_mod.read_case_dir
    raced = []

    def read_then_replaced(path):
        got = real_read(path)
        if not raced:  # a concurrent save replaces the case before our read is done
            raced.append(got)
            assert store.save(small).status == "replaced"
        return got

    monkeypatch.setattr(store_mod, "read_case_dir", read_then_replaced)
    assert [item for _, item in iter_cases(tmp_path)] == [small]
    assert raced == [make_saved(make_case(W=5))]  # what the first read got: not returned


def test_a_case_deleted_while_it_is_read_is_not_reported_broken(tmp_path, monkeypatch):
    store = DirectoryCorpus(tmp_path)
    keep = store.save(make_saved(f=finding(where="keep"))).path
    gone = store.save(make_saved(f=finding(where="gone"))).key
    real_read = store_mod.read_case_dir

    def deleted_meanwhile(path):
        if path.name == gone and gone in store:  # a concurrent delete, between the two files
            store.delete(gone)
            raise BadCaseFile(path / "tensors.npz", "missing tensors.npz")
        return real_read(path)

    monkeypatch.setattr(store_mod, "read_case_dir", deleted_meanwhile)
    assert [p for p, _ in iter_cases(tmp_path)] == [keep]


def test_delete(tmp_path):
    store = DirectoryCorpus(tmp_path)
    key = store.save(make_saved()).key
    store.delete(key)
    assert key not in store and not dot_entries(tmp_path, ".del-")


def _save_pairs(root: str, pairs: list[tuple[int, str]], barrier, results) -> None:
    store = DirectoryCorpus(root)
    barrier.wait()
    for width, where in pairs:
        res = store.save(make_saved(make_case(W=width), f=finding(where=where)))
        results.put((res.key, res.status))


def run_savers(root: Path, jobs: list[list[tuple[int, str]]]) -> list[tuple[str, str]]:
    """Run one process per job (fork), all starting together; the SaveResults they got."""
    ctx = multiprocessing.get_context("fork")
    barrier, results = ctx.Barrier(len(jobs)), ctx.Queue()
    procs = [ctx.Process(target=_save_pairs, args=(str(root), pairs, barrier, results)) for pairs in jobs]
    for p in procs:
        p.start()
    out = [results.get(timeout=120) for _ in range(sum(map(len, jobs)))]
    for p in procs:
        p.join(timeout=120)
        assert p.exitcode == 0
    return out


needs_fork = pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(), reason="needs fork")


def slow_read(path):
    """read_case_dir, then a pause: widens the read-compare-replace window races would hit."""
    saved = read_case_dir(path)
    time.sleep(0.005)
    return saved


@needs_fork
def test_concurrent_saves_of_one_key_keep_exactly_the_smallest(tmp_path, monkeypatch):
    monkeypatch.setattr(store_mod, "read_case_dir", slow_read)  # inherited by the forked savers
    rng = random.Random(17)
    jobs = []
    for i in range(8):  # process i saves widths i+1, i+9, i+17, i+25 in a shuffled order
        widths = [i + 1 + 8 * j for j in range(4)]
        rng.shuffle(widths)
        jobs.append([(w, "partial") for w in widths])
    results = run_savers(tmp_path, jobs)
    key = make_saved().key()
    assert {k for k, _ in results} == {key}
    assert [s for _, s in results].count("new") == 1
    assert [p.name for p in (tmp_path / OP).iterdir() if not p.name.startswith(".")] == [key]
    assert DirectoryCorpus(tmp_path).load(key).case == make_case(W=1)
    assert not dot_entries(tmp_path, ".tmp-") and not dot_entries(tmp_path, ".old-")


@needs_fork
def test_concurrent_saves_of_many_keys_are_all_present(tmp_path, monkeypatch):
    monkeypatch.setattr(store_mod, "read_case_dir", slow_read)
    wheres = [f"w{i}" for i in range(24)]
    jobs = []
    for i in range(8):  # every process saves every key, in its own order, at width 1, 2 or 3
        order = wheres[i * 3:] + wheres[: i * 3]
        jobs.append([(1 + i % 3, w) for w in order])
    results = run_savers(tmp_path, jobs)
    store = DirectoryCorpus(tmp_path)
    want = {make_saved(f=finding(where=w)).key() for w in wheres}
    assert len(want) == len(wheres)
    assert sorted(store.keys()) == sorted(want)
    assert sum(s == "new" for _, s in results) == len(wheres)
    for key in want:
        assert store.load(key).case == make_case(W=1)
    assert not dot_entries(tmp_path, ".tmp-") and not dot_entries(tmp_path, ".old-")


# walking, listing, merging, pruning -------------------------------------------------------------


def test_iter_cases_walks_roots_and_case_dirs_and_yields_errors_as_values(tmp_path):
    store = DirectoryCorpus(tmp_path / "corpus")
    paths = [store.save(make_saved(f=finding(where=w))).path for w in ("a", "b", "c")]
    broken = paths[1]
    (broken / "case.json").write_text("{")
    single = written(tmp_path)  # a lone case directory outside any corpus
    items = list(iter_cases([tmp_path / "corpus", single, paths[0]]))  # paths[0] twice: once
    assert [p for p, _ in items] == sorted(paths) + [single]
    errors = {p: v for p, v in items if isinstance(v, BadCaseFile)}
    assert list(errors) == [broken] and "invalid JSON" in errors[broken].why
    assert list(iter_cases(single / "case.json"))[0][0] == single
    with pytest.raises(BadInput, match="no such file"):
        list(iter_cases(tmp_path / "missing"))


def test_list_cases_rows(tmp_path):
    store = DirectoryCorpus(tmp_path)
    good = make_saved(minimized=True)
    store.save(good)
    plain = make_saved(f=None, origin="hand")
    bad_path = store.save(plain).path
    (bad_path / "tensors.npz").write_bytes(b"")
    rows = {r.key: r for r in list_cases(tmp_path)}
    row = rows[good.key()]
    assert (row.op, row.kind, row.signature, row.target, row.expected, row.minimized, row.error) == (
        OP, "mismatch", good.finding.signature, "builtin", "pass", True, None)
    assert row.path == tmp_path / OP / good.key()
    assert "npz" in rows[plain.key()].error


def test_merge_dedups_into_the_smallest_per_key(tmp_path):
    a, b, dest = (DirectoryCorpus(tmp_path / n) for n in ("a", "b", "dest"))
    a.save(make_saved(make_case(W=5), f=finding(where="x")))
    a.save(make_saved(make_case(W=2), f=finding(where="y")))
    b.save(make_saved(make_case(W=3), f=finding(where="x")))
    b.save(make_saved(make_case(W=4), f=finding(where="y")))
    b.save(make_saved(make_case(W=4), f=finding(where="z")))
    results = merge([a.root, b.root], dest)
    assert sorted(r.status for r in results) == ["kept", "new", "new", "new", "replaced"]
    widths = {dest.load(k).finding.where: dest.load(k).case.tensors["page_table_b"].shape[1] for k in dest.keys()}
    assert widths == {"x": 3, "y": 2, "z": 4}
    assert {r.status for r in merge(dest.root, dest)} == {"kept"}  # merging into itself changes nothing


def test_merge_refuses_an_unreadable_source_and_saves_nothing(tmp_path):
    src = DirectoryCorpus(tmp_path / "src")
    src.save(make_saved(f=finding(where="a")))
    (src.save(make_saved(f=finding(where="b"))).path / "case.json").write_text("[]")
    with pytest.raises(BadCaseFile):
        merge(src.root, tmp_path / "dest")
    assert list(DirectoryCorpus(tmp_path / "dest").keys()) == []


def test_prune_removes_only_xfail_cases_that_no_longer_fail(tmp_path):
    store = DirectoryCorpus(tmp_path)
    fixed = store.save(make_saved(f=finding(where="fixed"), expected="xfail", reason="bug 1")).path
    still = store.save(make_saved(f=finding(where="still"), expected="xfail", reason="bug 2")).path
    passing = store.save(make_saved(f=finding(where="fixed"), target="other")).path  # expected pass
    replayed = []

    def still_fails(saved: SavedCase) -> bool:
        replayed.append(saved.finding.where)
        return saved.finding.where != "fixed"

    assert prune(tmp_path, still_fails, apply=False, device="cpu") == [(fixed, "would remove (no longer fails)")]
    assert fixed.exists() and sorted(replayed) == ["fixed", "still"]  # pass cases are not replayed
    assert prune(tmp_path, still_fails, apply=True, device="cpu") == [(fixed, "removed (no longer fails)")]
    assert not fixed.exists() and still.exists() and passing.exists()
    assert not dot_entries(tmp_path, ".del-")
    assert prune(tmp_path, still_fails, apply=True, device="cpu") == []


@pytest.mark.parametrize("here, other", [("cuda", "cpu"), ("cpu", "cuda")])
def test_prune_neither_replays_nor_deletes_a_case_seen_on_another_device(tmp_path, here, other):
    # e.g. an interpreter-only segfault (seen on cpu) does not show on a GPU: that proves nothing
    store = DirectoryCorpus(tmp_path)
    elsewhere = store.save(make_saved(f=finding(where="elsewhere"), device=other, expected="xfail", reason="bug 1")).path
    gone = store.save(make_saved(f=finding(where="gone"), device=here, expected="xfail", reason="bug 2")).path
    store.save(make_saved(f=finding(where="pass"), device=other))  # expected pass: not pruned, not listed
    replayed = []

    def still_fails(saved: SavedCase) -> bool:  # no defect shows anywhere any more
        replayed.append(saved.finding.where)
        return False

    skipped = (elsewhere, f"skipped (defect seen on {other}, not replayed on {here}: prune it on {other})")
    for apply, action in ((False, "would remove (no longer fails)"), (True, "removed (no longer fails)")):
        replayed.clear()
        assert sorted(prune(tmp_path, still_fails, apply=apply, device=here)) == sorted([skipped, (gone, action)])
        assert replayed == ["gone"]
    assert elsewhere.exists() and not gone.exists()
    assert prune(tmp_path, still_fails, apply=True, device=other) == [(elsewhere, "removed (no longer fails)")]


def test_prune_needs_the_device_it_replays_on(tmp_path):
    with pytest.raises(TypeError):
        prune(tmp_path, lambda s: False, apply=True)  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="device must be one of"):
        prune(tmp_path, lambda s: False, device="auto")


@pytest.mark.interpreter  # the command selects the device, which probes the interpreter on the CPU
def test_corpus_prune_command_lists_why_it_skipped_a_case(tmp_path, monkeypatch, capsys, device):
    import kvfuzz.replay
    from kvfuzz.cli import main

    other = "cuda" if device == "cpu" else "cpu"
    store = DirectoryCorpus(tmp_path)
    elsewhere = store.save(make_saved(f=finding(where="elsewhere"), device=other, expected="xfail", reason="b1")).path
    here = store.save(make_saved(f=finding(where="here"), device=device, expected="xfail", reason="b2")).path
    replayed = []

    class Replayed:
        same_defect = False

    def fake_replay(saved, target, dev, **kw):
        replayed.append((saved.finding.where, dev))
        return Replayed()

    monkeypatch.setattr(kvfuzz.replay, "replay", fake_replay)
    assert main(["corpus", "prune", str(tmp_path), "--device", device, "--apply"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert replayed == [("here", device)]
    assert f"skipped (defect seen on {other}, not replayed on {device}: prune it on {other})  {elsewhere}" in out
    assert f"removed (no longer fails)  {here}" in out
    assert out[-1] == f"1 xfail cases no longer fail on {device}, 1 skipped"
    assert elsewhere.exists() and not here.exists()


def test_prune_never_touches_unreadable_cases(tmp_path):
    store = DirectoryCorpus(tmp_path)
    path = store.save(make_saved(expected="xfail", reason="bug")).path
    (path / "case.json").write_text("{")
    actions = prune(tmp_path, lambda s: False, apply=True, device="cpu")
    assert len(actions) == 1 and actions[0][0] == path and actions[0][1].startswith("skipped (unreadable")
    assert path.exists()


def test_public_api_is_exported():
    import kvfuzz.corpus as corpus

    assert sorted(corpus.__all__) == sorted(set(corpus.format.__all__) | set(corpus.store.__all__))
    assert all(hasattr(corpus, name) for name in corpus.__all__)


def test_corpus_modules_do_not_import_torch():
    import subprocess

    code = "import sys, kvfuzz.corpus; assert 'torch' not in sys.modules and 'triton' not in sys.modules"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    subprocess.run([sys.executable, "-c", code], check=True, env=env)
