"""Attribution (kvfuzz/sites): a case run traced under Triton's interpreter names the kernel
statement of its first wrong cell, stray write or stray read. Seeded one-line defects in a small
hand-written kernel (tests/fixtures/site_kernels.py, statements marked `# SITE name`) and in
SGLang 0.5.14's seed kernels each name the line the defect is on, or the load its wrong value
came from."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kvfuzz.case import Case, TensorSpec
from kvfuzz.corpus import read_case_dir
from kvfuzz.sites import site_line
from kvfuzz.sites.choose import site_meta
from kvfuzz.sites.run import attribute, attribute_isolated

FIXTURES = Path(__file__).resolve().parent / "fixtures"
CORPUS = FIXTURES.parent.parent / "corpora"
KERNEL = FIXTURES / "site_kernels.py"
C = TensorSpec.contiguous


@pytest.fixture(autouse=True)
def _cpu(device):
    if device != "cpu":
        pytest.skip("attribution in this process runs under the interpreter (the CPU)")


def marker(path: Path, name: str) -> int:
    """The line of the statement marked `# SITE name`."""
    return next(n for n, line in enumerate(path.read_text().splitlines(), 1) if line.endswith(f"# SITE {name}"))


def mutant(tmp_path: Path, old: str, new: str) -> Path:
    src = KERNEL.read_text()
    assert src.count(old) == 1, old
    path = tmp_path / f"mutant_{abs(hash(old + new))}.py"
    path.write_text(src.replace(old, new))
    return path


def case(n_out: int = 7) -> Case:
    """Two requests: row 0, 3 tokens to kv_indices[0:3]; row 2, 4 tokens to kv_indices[3:7]."""
    return Case("flashinfer_kv_indices", {}, {
        "req_to_token": C("int32", (3, 8)), "req_pool_indices": C("int64", (2,)), "paged_kernel_lens": C("int32", (2,)),
        "kv_indptr": C("int32", (3,)), "kv_indices": C("int32", (n_out,))}, {
        "req_to_token": np.arange(100, 124).reshape(3, 8), "req_pool_indices": np.array([0, 2]),
        "paged_kernel_lens": np.array([3, 4]), "kv_indptr": np.array([0, 3, 7])})


def test_the_correct_kernel_has_no_site():
    a = attribute(case(), str(KERNEL))
    assert a.sites == {} and a.error is None


def test_a_store_mask_off_by_one_is_the_store_writing_past_the_output(tmp_path):
    path = mutant(tmp_path, "mask = offset < n", "mask = offset <= n")
    sites = attribute(case(), str(path)).sites
    stray = sites["stray_write"]
    assert (stray.line, stray.op) == (marker(path, "store"), "tl.store")
    assert (stray.tensor, stray.place) == ("kv_indices", "after")
    assert stray.says == "writes 1 element past the end of kv_indices"
    assert stray.load["line"] == marker(path, "load")  # the value it wrote past came from this load
    # request 0's extra lane writes request 1's first cell: two programs, two values
    assert sites["overlap"].line == marker(path, "store") and "kv_indices[3]" in sites["overlap"].says
    line = site_line({"site": site_meta("flashinfer_kv_indices:no_start:out_of_bounds_write:kv_indices:after",
                                        attribute(case(), str(path)))})
    assert line.startswith(f"`{path.name}:{marker(path, 'store')}` `tl.store` writes 1 element past the end of "
                           "kv_indices; the value comes from "), line


def test_a_wrong_row_loaded_names_the_store_and_the_load_it_copied(tmp_path):
    path = mutant(tmp_path, "row = tl.load(req_pool_indices_ptr + pid)", "row = pid")
    a = attribute(case(), str(path))
    wrong = a.sites["wrong_value"]
    assert (wrong.line, wrong.op, wrong.what) == (marker(path, "store"), "tl.store", "wrong_value")
    assert wrong.says == "writes kv_indices[3] = 108, expected 116"  # row 1's first token, not row 2's
    assert wrong.load["line"] == marker(path, "load") and wrong.kind == "place"
    assert set(a.sites) == {"wrong_value"}


def test_a_computed_wrong_value_is_a_value_defect_with_no_load(tmp_path):
    path = mutant(tmp_path, "data, mask=mask)  # SITE store", "data + 1, mask=mask)  # SITE store")
    wrong = attribute(case(), str(path)).sites["wrong_value"]
    assert (wrong.line, wrong.load, wrong.kind) == (marker(path, "store"), None, "value")


def test_a_stray_read_names_the_load_and_the_tensor_read_past(tmp_path):
    path = mutant(tmp_path, "+ offset, mask=mask)  # SITE load", "+ offset - 1, mask=mask)  # SITE load")
    read = attribute(case(), str(path)).sites["stray_read"]
    assert (read.line, read.op, read.tensor, read.place) == (marker(path, "load"), "tl.load", "req_to_token", "before")
    assert read.says == "reads 1 element before the start of req_to_token_ptr"


def test_a_cell_nobody_writes_is_a_lost_write_at_the_store_nearest_it(tmp_path):
    path = mutant(tmp_path, "mask = offset < n", "mask = offset < n - 1")
    lost = attribute(case(), str(path)).sites["lost_write"]
    assert (lost.line, lost.what) == (marker(path, "store"), "lost_write")
    assert lost.says == "never writes kv_indices[2] (expected 102)"


def test_a_kind_with_no_statement_has_no_site_and_says_why():
    assert site_meta("op:p:invalid_accepted:-:-", None) == {"none": "a run it must refuse: no statement to name"}
    assert site_meta("op:p:crash:-:SIGSEGV", None, "attribution timed out") == {"none": "attribution timed out"}
    assert site_line({"site": {"none": "x"}}) == "no site: x"
    assert site_line({}) == ""


def seed_line(seed_path, text: str) -> int:
    return next(n for n, line in enumerate(Path(seed_path).read_text().splitlines(), 1) if text in line)


def test_seed_stride_defect_is_the_store_into_the_wrappers_copy(seed_path):
    """SGLang 0.5.14's SWA path writes a .contiguous() copy of a strided swa_page_table: the
    required cells are never written; the site is the store, writing the copy."""
    saved = read_case_dir(CORPUS / "decode_metadata" / "a6ff9ade7ec924ba")  # 0.5.14's stride defect
    lost = attribute(saved.case, str(seed_path)).sites["lost_write"]
    assert lost.line == seed_line(seed_path, "tl.store(swa_page_table + swa_offsets")
    assert lost.says.endswith("it writes the kernel's argument swa_page_table, a copy the wrapper made"), lost.says


def test_seed_read_past_the_swa_mapping_copy_is_a_stray_read(seed_path):
    """The mapping, strided in the case, is read through the wrapper's .contiguous() copy, one
    element past its end: outside every argument of the launch, not in kvfuzz's guard bands."""
    saved = read_case_dir(FIXTURES / "cases" / "stray-read-swa-mapping")
    read = attribute(saved.case, str(seed_path)).sites["stray_read"]
    assert read.line == seed_line(seed_path, "full_to_swa_mapping + page_index * full_to_swa_mapping_stride_0") - 1
    assert (read.tensor, read.place) == ("full_to_swa_index_mapping", "after")
    assert read.says == "reads 1 element past the end of full_to_swa_mapping"


def test_attribution_in_a_subprocess_says_why_when_the_run_dies(tmp_path):
    path = tmp_path / "dies.py"
    path.write_text("import os\n\ndef create_flashinfer_kv_indices_triton(*a, **k):\n    os._exit(9)\n")
    a, why = attribute_isolated(case(), str(path), timeout_s=120)
    assert a is None and why.startswith("attribution under the interpreter failed"), why


def test_a_stray_read_whose_value_a_store_writes_out_is_rooted_at_the_store(tmp_path):
    """A mask that lets the load and its store both run one element past: the read's site is the
    load, its root the store (one defect, docs/defects.md)."""
    path = mutant(tmp_path, "mask = offset < n", "mask = offset < n + 8")  # past row 2's end: the table's end
    a = attribute(case(), str(path))
    meta = site_meta("flashinfer_kv_indices:no_start:out_of_bounds_read:req_to_token:after", a)
    assert meta["line"] == marker(path, "load") and meta["root"]["line"] == marker(path, "store"), meta
