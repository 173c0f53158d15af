"""`kvfuzz defects DIR`: saved cases grouped by defect site, the sites attributed on the CPU
where a case has none (one saved on a host whose interpreter kvfuzz refuses, the H200's)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kvfuzz.cli import main
from kvfuzz.corpus import read_case_dir, set_meta

from conftest import seed_kernel_path

CASE = Path(__file__).resolve().parent / "fixtures" / "cases" / "stray-read-swa-mapping"


@pytest.mark.interpreter
def test_a_case_saved_without_a_site_gets_one_and_keeps_it(tmp_path, capsys):
    corpus = tmp_path / "corpus" / "decode_metadata"
    shutil.copytree(CASE, corpus / CASE.name)
    set_meta(corpus / CASE.name, {"site": {"none": "attribution under the interpreter failed: refused here"}})
    report, seed = tmp_path / "defects.json", seed_kernel_path()  # the seed, or 0.5.14's own file (metadata.py)
    assert main(["defects", str(tmp_path / "corpus"), "--target", str(seed), "--write",
                 "--report", str(report)]) == 0
    out = capsys.readouterr().out
    assert f"DEFECT 1: decode_metadata at {seed.name}:" in out and "tl.load" in out, out
    site = read_case_dir(corpus / CASE.name).case.meta["site"]
    assert "none" not in site and site["op"] == "tl.load" and site["file"].endswith(seed.name), site
    doc = json.loads(report.read_text())
    assert len(doc["defects"]) == 1 and doc["defects"][0]["findings"] == [doc["findings"][0]["signature"]]
    # a kept site is not attributed again: the same listing, nothing run
    assert main(["defects", str(corpus / CASE.name)]) == 0
    assert f"DEFECT 1: decode_metadata at {seed.name}:" in capsys.readouterr().out


def test_no_saved_case_is_one_line_and_exit_2(tmp_path, capsys):
    assert main(["defects", str(tmp_path / "nowhere")]) == 2
    assert main(["defects", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(line.startswith("kvfuzz: error:") for line in err), err


def test_a_site_kept_under_another_file_name_is_attributed_again_against_the_target():
    from kvfuzz.sites.corpus import needs_site

    kept = {"kernel": "k", "file": "/gpu/host/seed.py", "line": 102, "op": "tl.store", "depends": []}
    sig = "swa_spec_page_table:spec:out_of_bounds_write:page_table_dst:after"
    assert not needs_site(kept, sig)  # no target named: the site it was found with stands
    assert not needs_site(kept, sig, "/elsewhere/seed.py")  # the same file at another path
    assert needs_site(kept, sig, "/work/shared/seed/metadata_kernels.py")
    assert not needs_site(kept, sig, "sglang==0.5.14")  # a release names no file of its own
