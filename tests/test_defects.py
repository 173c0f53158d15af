"""One defect, many symptoms (kvfuzz/sites/defects.py): findings whose sites have one root
statement and one kind of wrong are one defect; findings on different lines, or of another kind
(value vs place), or with no site, stay apart. The pipeline keeps one case per defect and symptom
kind, the smallest; the report, JUnit and `kvfuzz replay` say it. The saved stray-read case of the
seed replays as `out_of_bounds_read` with one exit code, every time."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvfuzz.campaign import CampaignConfig
from kvfuzz.case import Case, TensorSpec
from kvfuzz.cli import main
from kvfuzz.engines.common import Found
from kvfuzz.findings import Finding
from kvfuzz.pipeline import FindingPipeline, Saved
from kvfuzz.reports import junit_xml
from kvfuzz.sites.defects import defect_key, defects_of

FIXTURES = Path(__file__).resolve().parent / "fixtures"
STORE = {"kernel": "k", "file": "/x/kv_indices.py", "line": 44, "op": "tl.store", "text": "tl.store(...)",
         "what": "stray_write", "says": "writes 1 element past the end of kv_indices"}
LOAD = {"kernel": "k", "file": "/x/kv_indices.py", "line": 37, "op": "tl.load", "text": "data = tl.load("}


def site(what: str, line: int = 44, load: dict | None = None) -> dict:
    return dict(STORE, what=what, line=line, **({"load": load} if load else {}))


def finding(sig: str, s: dict | None, new: bool = True) -> dict:
    return {"op": sig.split(":")[0], "kind": sig.split(":")[2], "signature": sig, "signatures": [sig],
            "message": "m", "contract": "in contract", "case": f"/c/{abs(hash(sig))}", "new": new, "site": s}


def test_symptoms_of_one_statement_are_one_defect_across_paths_and_kinds():
    fs = [finding("fi:start:out_of_bounds_write:kv_indices:after", site("stray_write", load=LOAD)),
          finding("fi:no_start:out_of_bounds_read:req_to_token:gap",  # the read whose value the store wrote
                  dict(LOAD, what="stray_read", says="reads", root={"file": STORE["file"], "line": 44})),
          finding("fi:no_start:untouched_write:kv_indices:cells", site("untouched_write", load=LOAD))]
    (d,) = defects_of(fs)
    assert d["defect"] == "fi at kv_indices.py:44 (place)"
    assert [s["path"] for s in d["symptoms"]] == ["start", "no_start", "no_start"]
    assert {s["kind"] for s in d["symptoms"]} == {"out_of_bounds_write", "out_of_bounds_read", "untouched_write"}
    assert d["site_line"].startswith("`kv_indices.py:44` `tl.store` writes 1 element past the end of kv_indices")


def test_defects_on_different_lines_or_of_another_kind_or_without_a_site_stay_apart():
    fs = [finding("fi:start:mismatch:kv_indices:partial", site("wrong_value", 44)),  # a value computed wrong
          finding("fi:start:out_of_bounds_write:kv_indices:after", site("stray_write", 44)),  # place, same store
          finding("fi:no_start:mismatch:kv_indices:all", site("wrong_value", 50)),  # another line
          finding("fi:start:crash:-:SIGSEGV", {"none": "a crash"}),
          finding("fi:no_start:crash:-:cuda_fault", None)]
    ds = defects_of(fs)
    assert [len(d["symptoms"]) for d in ds] == [1, 1, 1, 1, 1]
    assert ds[0]["defect"] == "fi at kv_indices.py:44 (value)" and ds[1]["defect"] == "fi at kv_indices.py:44 (place)"
    assert ds[3]["defect"] == "fi:start:crash:-:SIGSEGV (no site)"
    assert defect_key("fi", site("wrong_value", load=LOAD)) == ("fi", "kv_indices.py", 44, "place", ())  # copied
    assert defect_key("fi", dict(LOAD, what="stray_read", says="r")) == ("fi", "kv_indices.py", 37, "place", ())


def test_junit_counts_defects_first_and_lists_symptoms_under_each():
    fs = [finding("fi:start:out_of_bounds_write:kv_indices:after", site("stray_write", load=LOAD)),
          finding("fi:no_start:untouched_write:kv_indices:cells", site("untouched_write", load=LOAD))]
    report = {"target": "t", "ops": {"fi": {"cases": 5, "seconds": 1.0}}, "findings": fs, "defects": defects_of(fs)}
    xml = junit_xml(report)
    assert 'message="1 new defect(s), 2 new finding(s): ' in xml
    assert "defect fi at kv_indices.py:44 (place): `kv_indices.py:44` `tl.store`" in xml
    assert "  fi:no_start:untouched_write:kv_indices:cells [no_start] (/c/" in xml


def _saved(sig: str, s: dict | None, size: int) -> Saved:
    kind = sig.split(":")[2]
    f = Finding(kind, "flashinfer_kv_indices", sig.split(":")[1], sig.split(":")[3], sig.split(":")[4], "m")
    case = Case("flashinfer_kv_indices", {}, {"kv_indices": TensorSpec.contiguous("int32", (size,))}, {})
    return Saved(Found(f, case, case), case, None, new=True, shows=frozenset({sig}), site=s)


def test_the_pipeline_keeps_one_case_per_defect_and_symptom_kind_the_smallest():
    pipe = FindingPipeline(CampaignConfig(ops=["flashinfer_kv_indices"]), None, None, "cpu", {}, None)
    big = _saved("flashinfer_kv_indices:start:out_of_bounds_write:kv_indices:after", site("stray_write", load=LOAD), 9)
    small = _saved("flashinfer_kv_indices:no_start:out_of_bounds_write:kv_indices:gap",
                   site("stray_write", load=LOAD), 3)
    read = _saved("flashinfer_kv_indices:no_start:out_of_bounds_read:req_to_token:after",
                  dict(LOAD, what="stray_read", says="r", root={"file": STORE["file"], "line": 44}), 5)
    other = _saved("flashinfer_kv_indices:start:out_of_bounds_write:kv_indices:before", site("stray_write", 50), 4)
    lost = _saved("flashinfer_kv_indices:start:crash:-:SIGSEGV", None, 2)
    pipe.saved = [big, small, read, other, lost]
    pipe._group_defects(0)
    assert pipe.saved == [small, read, other, lost]  # the larger write case merged into the smaller
    assert small.signatures == ["flashinfer_kv_indices:no_start:out_of_bounds_write:kv_indices:gap",
                                "flashinfer_kv_indices:start:out_of_bounds_write:kv_indices:after"]
    assert read.signatures == ["flashinfer_kv_indices:no_start:out_of_bounds_read:req_to_token:after"]


def _replays(seed_path, device, capsys, n: int) -> None:
    case = FIXTURES / "cases" / "stray-read-swa-mapping"
    codes, outs = [], []
    for _ in range(n):
        codes.append(main(["replay", str(case), "--target", str(seed_path), "--device", device, "--in-process"]))
        outs.append(capsys.readouterr().out)
    assert codes == [1] * n, codes
    for out in outs:
        assert "  out_of_bounds_read: decode_metadata:swa:out_of_bounds_read:full_to_swa_index_mapping:after" in out
        assert "site     `" in out and "`tl.load` reads 1 element past the end of full_to_swa_mapping" in out
        assert "runs (its runs differ by nature)" not in next(x for x in out.splitlines() if x.startswith("verdict"))


@pytest.mark.thorough  # seconds of processes and campaigns: CI's thorough stage
def test_the_stray_read_case_replays_as_out_of_bounds_read(seed_path, device, capsys):
    """SGLang 0.5.14's kernel reads past a .contiguous() copy of a strided SWA mapping, where no
    guard band lies: the value read varies, and a replay judged by the runs alone flipped. The
    traced run names the read: exit 1, the read and its line named, every run failing."""
    _replays(seed_path, device, capsys, 1)


@pytest.mark.slow
def test_the_stray_read_case_replays_as_out_of_bounds_read_five_times(seed_path, device, capsys):
    """The same, five replays: one exit code, the read named each time."""
    _replays(seed_path, device, capsys, 5)


def test_an_exception_attributing_a_site_ends_that_stage_only(monkeypatch):
    def boom(*a, **k):
        raise RuntimeError("injected")
    monkeypatch.setattr("kvfuzz.sites.run.attribute_isolated", boom)
    pipe = FindingPipeline(CampaignConfig(ops=["flashinfer_kv_indices"]), None, None, "cpu", {}, None)
    x = _saved("flashinfer_kv_indices:start:out_of_bounds_write:kv_indices:after", None, 3)
    pipe._attribute(x.found, x.case, None)
    assert pipe.sites == {} and [e["stage"] for e in pipe.internal_errors] == ["site"]
    refused = _saved("flashinfer_kv_indices:start:invalid_accepted:-:-", None, 3)
    pipe._attribute(refused.found, refused.case, None)  # no statement to name: nothing run, said so
    assert pipe.sites["flashinfer_kv_indices:start:invalid_accepted:-:-"]["none"].startswith("a run it must refuse")
