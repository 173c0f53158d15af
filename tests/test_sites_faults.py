"""Sites for findings that have no wrong cell to trace (docs/defects.md): a crash or GPU fault
gets the first load or store of its case outside every tensor of its launch (traced guarded
where the access kills the interpreter); a wrong the interpreter does not reproduce gets the
output's only `tl.store` (a static site); every finding has a site or says why not. And the
grouping rule across a run's findings: a store's wrong rooted at a load that is another
finding's site, and the split rule (value vs place, the inputs a case depends on)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvfuzz.corpus import read_case_dir
from kvfuzz.sites import site_line
from kvfuzz.sites.choose import site_meta
from kvfuzz.sites.defects import defects_of
from kvfuzz.sites.run import attribute, attribute_isolated

from test_sites import case, marker, seed_line

FIXTURES = Path(__file__).resolve().parent / "fixtures"
FAULTS = FIXTURES / "fault_kernels.py"
SITES = FIXTURES / "site_kernels.py"
CRASH = "flashinfer_kv_indices:no_start:crash:-:cuda_fault"


@pytest.fixture(autouse=True)
def _cpu(device):
    if device != "cpu":
        pytest.skip("attribution in this process runs under the interpreter (the CPU)")


def test_a_crash_case_gets_the_site_of_its_out_of_range_load():
    """The load reads one row on: for the last request, past req_to_token's end. The
    interpreter survives it; the crash a GPU reported stands on that load."""
    meta = site_meta(CRASH, attribute(case(), str(FAULTS)))
    assert (meta["line"], meta["op"]) == (marker(FAULTS, "load"), "tl.load"), meta
    assert meta["says"] == "faults, reading 1 element past the end of req_to_token_ptr"
    assert (meta["tensor"], meta["place"], meta["depends"]) == ("req_to_token", "after", [])
    assert site_line({"site": meta}).startswith(f"`fault_kernels.py:{marker(FAULTS, 'load')}` `tl.load` faults, "
                                                "reading 1 element past the end of req_to_token_ptr")


@pytest.mark.thorough  # seconds of processes and campaigns: CI's thorough stage
def test_a_wild_load_that_kills_the_interpreter_is_named_by_the_guarded_trace(tmp_path):
    wild = tmp_path / "wild_kernels.py"
    wild.write_text(FAULTS.read_text().replace("+ offset, mask=mask)  # SITE load",
                                               "+ offset + (1 << 40), mask=mask)  # SITE load"))
    a, why = attribute_isolated(case(), str(wild), timeout_s=120)
    assert a is not None and a.guarded, why  # the first run died by a signal; the guarded one stopped
    meta = site_meta(CRASH, a)
    assert (meta["line"], meta["op"], meta["tensor"]) == (marker(wild, "load"), "tl.load", "req_to_token"), meta
    assert meta["says"].startswith("faults, reading ") and "past the end of req_to_token_ptr" in meta["says"]


def test_a_crash_without_a_wild_access_says_why():
    meta = site_meta(CRASH, attribute(case(), str(SITES)))  # the correct kernel: nothing outside
    assert meta == {"none": "the interpreter's run makes no access outside its launch's tensors: "
                            "the crash is not a wild load or store"}


def test_a_wrong_the_interpreter_does_not_show_gets_the_outputs_only_store_as_a_static_site():
    """A GPU-only wrong value: the interpreter's run is right, and kv_indices is written by one
    `tl.store` of the kernel that ran, so that store is the site, said to be static."""
    a = attribute(case(), str(SITES))
    assert a.sites == {}
    meta = site_meta("flashinfer_kv_indices:no_start:mismatch:kv_indices:partial", a)
    assert (meta["line"], meta["what"], meta["static"]) == (marker(SITES, "store"), "wrong_value", True), meta
    assert meta["says"] == ("is the only `tl.store` to kv_indices in create_flashinfer_kv_indices_triton (a static "
                            "site: the interpreter's run shows no mismatch, nothing wrong)")
    # a tensor the kernel never stores to has no static site, and says why
    none = site_meta("flashinfer_kv_indices:no_start:mismatch:req_to_token:partial", a)["none"]
    assert none.endswith("req_to_token has no single `tl.store` to name statically"), none


def test_two_stores_to_one_output_give_no_static_site(tmp_path):
    two = tmp_path / "two_stores.py"
    two.write_text(SITES.read_text().replace(
        "        tl.store(kv_indices_ptr + out_at + offset, data, mask=mask)  # SITE store",
        "        tl.store(kv_indices_ptr + out_at + offset, data, mask=mask)  # SITE store\n"
        "        dst = kv_indices_ptr + out_at\n"
        "        tl.store(dst + offset, data, mask=mask)"))
    meta = site_meta("flashinfer_kv_indices:no_start:mismatch:kv_indices:partial", attribute(case(), str(two)))
    assert "none" in meta and "no single `tl.store`" in meta["none"], meta


@pytest.mark.thorough  # seconds of processes and campaigns: CI's thorough stage
def test_the_seeds_wild_row_read_crash_is_named_at_the_load(seed_path):
    """SGLang 0.5.14: a req_pool_indices value past req_to_token's rows is read unchecked; the
    interpreter dies by SIGSEGV on that read (the saved case's signature), and the guarded
    trace names the load."""
    saved = read_case_dir(FIXTURES.parent.parent / "corpora" / "decode_metadata" / "c70f6d25eb4ddafb")
    assert saved.finding.signature == "decode_metadata:swa:crash:-:SIGSEGV"
    a, why = attribute_isolated(saved.case, str(seed_path), timeout_s=120)
    meta = site_meta(saved.finding.signature, a, why)
    assert meta.get("line") == seed_line(seed_path, "page_index = tl.load(") and meta["op"] == "tl.load", meta
    assert meta["says"].startswith("faults, reading ") and meta["depends"] == ["req_pool_indices"], meta


# the grouping rule over a run's findings ---------------------------------------------------

def _site(line: int, op: str = "tl.store", what: str = "stray_write", **kw) -> dict:
    return dict({"kernel": "k", "file": "/x/m.py", "line": line, "op": op, "text": "t", "what": what,
                 "says": "s", "depends": []}, **kw)


def _finding(sig: str, site: dict | None) -> dict:
    return {"op": "spec", "kind": sig.split(":")[2], "signature": sig, "signatures": [sig], "contract": "in contract",
            "case": f"/c/{sig}", "new": True, "site": site}


READ87 = {"file": "/x/m.py", "line": 87, "text": "seq_len_b = tl.load(seq_len_b_ptr + idx_b)"}


def test_stores_whose_case_read_outside_at_another_findings_load_are_that_loads_defect():
    """A length read through a stride gap (line 87, a finding of its own) decides where two other
    stores write or leave cells: the three are one defect, named at the load."""
    fs = [_finding("spec:p:mismatch:dst:all", _site(87, "tl.load", "stray_read")),
          _finding("spec:p:mismatch:dst:partial", _site(122, what="lost_write", reads=[READ87])),
          _finding("spec:p:untouched_write:dst:cells", _site(108, what="untouched_write",
                                                             load={"file": "/x/m.py", "line": 107}, reads=[READ87])),
          _finding("spec:p:out_of_bounds_write:dst:gap", _site(108, load={"file": "/x/m.py", "line": 107}))]
    ds = defects_of(fs)
    assert [d["defect"] for d in ds] == ["spec at m.py:87 (place)", "spec at m.py:108 (place)"]
    assert ds[0]["findings"] == [f["signature"] for f in fs[:3]]
    assert ds[0]["site_line"].startswith("`m.py:87` `tl.load`")
    # without the load's own finding, each store stays at its own statement
    assert [d["defect"] for d in defects_of(fs[1:])] == ["spec at m.py:122 (place)", "spec at m.py:108 (place)"]


def test_a_load_rooted_at_its_store_does_not_pull_the_store_to_the_load():
    """A mask that lets a load and its store both run one element too far: the read is keyed at
    the store (root), the store's wrong value came from the load: one defect, at the store."""
    fs = [_finding("spec:p:out_of_bounds_read:src:after", _site(40, "tl.load", "stray_read",
                                                               root={"file": "/x/m.py", "line": 44})),
          _finding("spec:p:out_of_bounds_write:dst:after", _site(44, load={"file": "/x/m.py", "line": 40}))]
    (d,) = defects_of(fs)
    assert d["defect"] == "spec at m.py:44 (place)"


def test_the_split_rule_keeps_apart_what_differs_in_kind_or_inputs_and_merges_the_rest():
    fs = [_finding("spec:a:mismatch:dst:all", _site(60, what="wrong_value")),  # a value computed wrong
          _finding("spec:b:mismatch:dst:partial", _site(60, what="wrong_value", static=True)),  # same: merged
          _finding("spec:a:out_of_bounds_write:dst:after", _site(60)),  # a place: apart
          _finding("spec:b:out_of_bounds_write:dst:gap", _site(60, depends=["dst", "width"])),  # out of contract
          _finding("spec:c:out_of_bounds_write:dst:after", _site(60, depends=["width", "dst"])),  # the same inputs
          _finding("spec:c:out_of_bounds_write:dst:before", _site(60, depends=["rows"]))]  # other inputs: apart
    ds = defects_of(fs)
    assert [d["defect"] for d in ds] == ["spec at m.py:60 (value)", "spec at m.py:60 (place)",
                                         "spec at m.py:60 (place; out of contract: dst, width)",
                                         "spec at m.py:60 (place; out of contract: rows)"]
    assert [len(d["findings"]) for d in ds] == [2, 1, 2, 1]
    # a load-rooted regroup needs the same inputs too
    apart = defects_of([_finding("spec:p:mismatch:dst:all", _site(87, "tl.load", "stray_read")),
                        _finding("spec:p:mismatch:dst:partial", _site(122, what="lost_write", reads=[READ87],
                                                                      depends=["dst"]))])
    assert len(apart) == 2


def test_every_defect_has_a_site_or_says_why_not():
    ds = defects_of([_finding("spec:p:crash:-:cuda_fault", None),
                     _finding("spec:p:invalid_accepted:-:-", {"none": "a run it must refuse: no statement to name"})])
    assert [d["site_line"] for d in ds] == ["no site: not attributed", "no site: a run it must refuse: no statement "
                                                                        "to name"]
