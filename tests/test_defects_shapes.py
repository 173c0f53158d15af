"""Four one-line defects of SGLang 0.5.23's FlashInfer kernel all misplace what its one store
(`kv_indices.py:139`) writes, in contract: a store mask `<=` (the writes run one cell past the
segment), `kv_indptr` read one element on (the segment's start moves), the start offset ignored
(the right cells, values read from the wrong place) and a mask one short (cells dropped). The
trace tells them apart by the place's shape (sites/choose.py `_shape`): keyed `place`,
`shifted`, `copied` and `dropped`, each defect's symptoms one defect. Hand-made cases, attributed under the interpreter against copies of the
cached release file (skipped where the cache lacks it)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kvfuzz.case import Case, TensorSpec
from kvfuzz.sites.choose import site_meta
from kvfuzz.sites.defects import defect_key, defects_of
from kvfuzz.sites.run import attribute
from kvfuzz.targets.wheels import cache_dir

C = TensorSpec.contiguous
OP = "flashinfer_kv_indices"
MASK = ("mask = offset < kv_end - kv_start", "mask = offset <= kv_end - kv_start")
INDPTR = ("kv_indices_offset = tl.load(kv_indptr + pid)", "kv_indices_offset = tl.load(kv_indptr + pid + 1)")
SHORT = ("mask = offset < kv_end - kv_start", "mask = offset < kv_end - kv_start - 1")
START = ("kv_start = tl.load(kv_start_idx + pid).to(tl.int32)", "kv_start = tl.load(kv_start_idx + pid).to(tl.int32) * 0")


@pytest.fixture(autouse=True)
def _cpu(device):
    if device != "cpu":
        pytest.skip("attribution in this process runs under the interpreter (the CPU)")


@pytest.fixture(scope="module")
def release() -> str:
    path = cache_dir() / "sglang-0.5.23" / "kv_indices.py"
    if not path.is_file():
        pytest.skip(f"sglang==0.5.23's kv_indices.py is not cached ({path})")
    return path.read_text()


def mutant(tmp_path: Path, source: str, *defects: tuple[str, str]) -> str:
    """A copy of the release file with `defects` (the FlashInfer kernel's occurrence of each
    line, its first); every line number kept."""
    for old, new in defects:
        at = source.index(old)
        source = source[:at] + new + source[at + len(old):]
    path = tmp_path / "-".join(new.split()[0] for _, new in defects) / "kv_indices.py"
    path.parent.mkdir()
    path.write_text(source)
    return str(path)


def case(n_out: int, start: bool = False) -> Case:
    """Two requests of 2 and 3 tokens (rows 0 and 2) into kv_indices[0:5]; `n_out` > 5 leaves
    cells the contract keeps untouched; `start`: the requests begin at tokens 1 and 2."""
    tensors = {"req_to_token": C("int32", (3, 8)), "req_pool_indices": C("int64", (2,)),
               "paged_kernel_lens": C("int32", (2,)), "kv_indptr": C("int32", (3,)), "kv_indices": C("int32", (n_out,))}
    values = {"req_to_token": np.arange(100, 124).reshape(3, 8), "req_pool_indices": np.array([0, 2]),
              "paged_kernel_lens": np.array([2, 3]), "kv_indptr": np.array([0, 2, 5])}
    if start:
        tensors["kv_start_idx"], values["kv_start_idx"] = C("int32", (2,)), np.array([1, 2])
    return Case(OP, {}, tensors, values)


def findings(target: str, kinds: dict[str, Case]) -> list[dict]:
    """One finding per kind, each with the site its case's attribution names for it."""
    out = []
    for kind, c in kinds.items():
        sig = f"{OP}:no_start:{kind}:kv_indices:x"
        site = site_meta(sig, attribute(c, target))
        assert "line" in site, (kind, site)
        out.append({"op": OP, "signature": sig, "signatures": [sig], "contract": "in contract", "case": kind,
                    "site": site})
    return out


def keys(fs: list[dict]) -> set:
    return {defect_key(OP, f["site"]) for f in fs}


def test_a_mask_running_past_the_segment_and_a_moved_segment_start_are_two_defects(tmp_path, release):
    overrun = findings(mutant(tmp_path, release, MASK), {
        "out_of_bounds_write": case(5), "untouched_write": case(8), "mismatch": case(5)})
    moved = findings(mutant(tmp_path, release, INDPTR), {
        "out_of_bounds_write": case(5), "untouched_write": case(8), "mismatch": case(5)})
    # each defect's symptoms: one key; the two defects (one statement, every line kept): two
    assert keys(overrun) == {(OP, "kv_indices.py", 139, "place", ())}
    assert keys(moved) == {(OP, "kv_indices.py", 139, "shifted", ())}
    ds = defects_of(overrun + moved)
    assert [d["defect"] for d in ds] == [f"{OP} at kv_indices.py:139 (place)", f"{OP} at kv_indices.py:139 (shifted)"]
    assert [len(d["symptoms"]) for d in ds] == [3, 3]


def test_values_read_from_the_wrong_place_are_a_third_defect_of_that_store(tmp_path, release):
    (copied,) = findings(mutant(tmp_path, release, START), {"mismatch": case(5, start=True)})
    assert copied["site"]["what"] == "wrong_value" and copied["site"]["load"]
    assert defect_key(OP, copied["site"]) == (OP, "kv_indices.py", 139, "copied", ())


def test_a_mask_one_short_drops_cells_a_fourth_defect(tmp_path, release):
    dropped = findings(mutant(tmp_path, release, SHORT), {"mismatch": case(5)})
    assert dropped[0]["site"]["what"] == "lost_write"
    assert keys(dropped) == {(OP, "kv_indices.py", 139, "dropped", ())}


def test_both_defects_in_one_file_the_moved_start_hides_the_overrun(tmp_path, release):
    """With both lines in one file every request with tokens has its start moved: the case's
    symptoms are keyed at the moved segment, as one defect, none at the overrun."""
    both = findings(mutant(tmp_path, release, MASK, INDPTR), {
        "out_of_bounds_write": case(5), "untouched_write": case(8), "mismatch": case(5)})
    assert keys(both) == {(OP, "kv_indices.py", 139, "shifted", ())}


def test_a_read_and_a_store_one_lane_too_far_are_one_defect(tmp_path, release):
    """Paged entries (`entry_page_size` 2): the mask `<=` lets the load read one element past
    req_to_token and the store write one past kv_indices; the stored value is computed from the
    entry, not the entry itself, so only the lane ties them: the read is rooted at the store."""
    target = mutant(tmp_path, release, MASK)
    c = Case(OP, {"entry_page_size": 2}, {
        "req_to_token": C("int32", (1, 2)), "req_pool_indices": C("int64", (1,)), "paged_kernel_lens": C("int32", (1,)),
        "kv_indptr": C("int32", (2,)), "kv_indices": C("int32", (4,))}, {
        "req_to_token": np.array([[3, 7]]), "req_pool_indices": np.array([0]), "paged_kernel_lens": np.array([4]),
        "kv_indptr": np.array([0, 4])}, variant="token_mapping")  # the variant with paged entries
    a = attribute(c, target)
    read, write = site_meta(f"{OP}:no_start:out_of_bounds_read:req_to_token:after", a), \
        site_meta(f"{OP}:no_start:out_of_bounds_write:kv_indices:after", a)
    assert (read["line"], read["what"], write["line"], write["what"]) == (130, "stray_read", 139, "stray_write")
    assert write.get("load") is None  # no value copied: the lane is the only link
    assert read["root"]["line"] == 139
    assert defect_key(OP, read) == defect_key(OP, write) == (OP, "kv_indices.py", 139, "place", ())
