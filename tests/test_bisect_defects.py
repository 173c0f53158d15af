"""`kvfuzz bisect` groups its rows by defect: cases whose findings share a site are one defect
(docs/defects.md), listed under one header that says where their histories put it; a case
with no site (a crash on a GPU) is a defect of its own, "site unknown"."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from kvfuzz import bisect
from kvfuzz.bisect import CLEAN, DEFECT, Result
from kvfuzz.corpus import read_case_dir

REPO = Path(__file__).resolve().parent.parent
TOMBSTONE = REPO / "corpora" / "decode_metadata" / "5cefcd05024116b2"
SITE = {"kernel": "_decode_kernel", "file": "/x/metadata.py", "line": 97, "op": "tl.store",
        "text": "tl.store(page_table + offs, val, mask=mask)", "what": "wrong_value", "says": "stores a wrong value"}
RELEASES = ("0.5.20", "0.5.21", "0.5.22", "0.5.23")


def result(name: str, site: dict | None, bad_from: int) -> Result:
    saved = read_case_dir(TOMBSTONE)
    meta = {k: v for k, v in saved.case.meta.items() if k != "site"}
    if site is not None:
        meta["site"] = site
    saved = dataclasses.replace(saved, case=dataclasses.replace(saved.case, meta=meta))
    cells = {f"sglang=={v}": DEFECT if i >= bad_from else CLEAN for i, v in enumerate(RELEASES)}
    return Result(Path(name), saved, RELEASES, cells | {"builtin": CLEAN})


def test_cases_of_one_site_are_one_defect_and_a_case_without_one_stands_alone():
    a, b = result("a", SITE, 3), result("b", dict(SITE, line=97), 0)
    c = result("c", None, 3)
    groups = bisect.by_defect([a, c, b])
    assert [(d, [r.path.name for r in g]) for d, g in groups] == [
        ("decode_metadata at metadata.py:97 (value)", ["a", "b"]),
        (f"{c.saved.finding.signature} (site unknown)", ["c"])]
    head = bisect.render_defect(1, *groups[0])
    assert head == ["defect 1: decode_metadata at metadata.py:97 (value): 2 cases; "
                    "introduced in 0.5.23; not fixed in the range (last bad 0.5.23) (1 cases); "
                    "present in every release in the range (1 cases)"]
    assert bisect.render_defect(2, *groups[1])[0].endswith("1 case; introduced in 0.5.23; not fixed in the range "
                                                          "(last bad 0.5.23)")
    assert a.to_json()["defect"] == "decode_metadata at metadata.py:97 (value)"
