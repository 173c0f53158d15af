"""Every finding says whether its case is in or out of contract and, when out, the first rule it
breaks with the values that break it (`Contract.broken_rule`, `Contract.status_text`): in the
console lines, the JSON report, JUnit, Markdown and `kvfuzz replay`."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import numpy as np
import pytest

import cases
from kvfuzz.ops import CONTRACTS, contract_status
from kvfuzz.reports import junit_xml, markdown
from kvfuzz.strategies import random_cases


@pytest.mark.parametrize("op, variant", [(op, v) for op, c in CONTRACTS.items() for v in c.variants])
def test_the_broken_rule_and_the_predicate_agree_for_every_op_and_variant(op, variant):
    contract = CONTRACTS[op]
    statuses = set()
    for case in random_cases(op, 5, 120, variant=variant):  # in and out of contract
        status, reasons = contract.classify(case)
        rule = contract.broken_rule(case)
        statuses.add(status)
        assert (rule is None) == (status == "in_contract"), (status, reasons, rule)
        text = contract.status_text(case)
        if rule is None:  # in contract; a launch no SGLang call site makes says why (stress)
            stress = contract.stress_reasons(case)
            assert text == (f"stress: {stress[0]}" if stress else "in contract")
        else:
            assert text == f"{status.replace('_', ' ')}: {rule}" and rule == reasons[0]
    assert "in_contract" in statuses and len(statuses) > 1, statuses


def _with_values(case, **values):
    return case.replace(values={**case.values, **{k: np.asarray(v) for k, v in values.items()}})


def _below_tombstone():
    """A fused-variant decode case whose full_v2p entries are all -2 (below the tombstone -1), and
    the virtual page its row 0 reads first (token req_to_token[pool[0], 0] // page_size)."""
    case = cases.unified(cases.decode(ps=4, B=1), full_v2p="identity", variant="fused")
    page = int(case.values["req_to_token"][case.values["req_pool_indices"][0], 0]) // 4
    return _with_values(case, full_v2p=np.full(case.values["full_v2p"].shape, -2)), page


@pytest.mark.parametrize("case, rule", [
    # the spec op: the row, its two lengths' sum and the width (la 1, lb 1, width 1)
    (_with_values(cases.spec(la=(1,), R=1, WB=1), seq_len_b=[1]), "row 0: la + lb = 2 > page_table_dst width 1"),
    # decode: which batch row names a pool slot past req_to_token, and its value
    (_with_values(cases.decode(), req_pool_indices=[1, 9, 2]), "req_pool_indices[1] = 9 outside [0, 4)"),
    # decode: which strided index is wrong
    (_with_values(cases.decode(ps=4), strided_indices=np.array([0, 4, 9] + list(range(12, 72, 4)))),
     "strided_indices[2] = 9, not 2 * page_size = 8"),
    # num_kv_splits judged by SGLang's own contract: which length is below 1
    (cases.splits([5, 0, 7], variant="sglang"), "seq_lens[1] = 0 is below 1"),
    # a v2p entry below the tombstone, by its table index and value
    (_below_tombstone()[0], f"full_v2p[{_below_tombstone()[1]}] = -2 (row 0, page 0) is below -1"),
])
def test_a_broken_rule_names_the_values_that_break_it(case, rule):
    got = CONTRACTS[case.op].broken_rule(case)
    assert got is not None and got.startswith(rule), got
    assert contract_status(case) == f"out of contract: {got}"


def test_an_in_contract_and_a_must_refuse_case_say_so():
    assert contract_status(cases.decode(ps=4)) == "in contract"
    assert contract_status(cases.decode(ps=4).with_scalars(page_size=3)) == \
        "must refuse: page_size 3 is not a positive power of two"


REPORT = {
    "target": "t.py", "seconds": 1.0, "cases": 10, "seed": 0,
    "ops": {"swa_spec_page_table": {"cases": 10, "seconds": 1.0}},
    "findings": [
        {"op": "swa_spec_page_table", "kind": "mismatch", "signature": "swa_spec_page_table:spec:mismatch:x:all",
         "message": "m1", "case": "c/1", "new": True, "contract": "in contract"},
        {"op": "swa_spec_page_table", "kind": "crash", "signature": "swa_spec_page_table:spec:crash:-:SIGSEGV",
         "message": "m2", "case": "c/2", "new": False,
         "contract": "out of contract: row 0: la + lb = 2 > page_table_dst width 1"},
    ],
    "flaky": [{"op": "swa_spec_page_table", "signature": "swa_spec_page_table:spec:mismatch:y:all",
               "reproduced": 1, "tries": 3, "contract": "in contract"}],
}


def test_junit_and_markdown_carry_each_findings_contract_status():
    suite = ET.fromstring(junit_xml(REPORT))
    (case,) = suite.iter("testcase")
    assert case.find("failure").text == "swa_spec_page_table:spec:mismatch:x:all: m1 (c/1); in contract"
    out = case.find("system-out").text.splitlines()
    assert out == ["known: swa_spec_page_table:spec:crash:-:SIGSEGV (c/2); out of contract: row 0: la + lb = 2 > "
                   "page_table_dst width 1",
                   "flaky: swa_spec_page_table:spec:mismatch:y:all: 1 of 3 fresh runs; in contract"]
    md = markdown(REPORT)
    assert "| signature | | case | what | contract |" in md
    assert "| m2 | out of contract: row 0: la + lb = 2 > page_table_dst width 1 |" in md
    assert "fresh runs; in contract" in md


@pytest.mark.slow
@pytest.mark.interpreter
def test_a_campaigns_findings_say_their_contract_status_on_the_console_and_in_the_reports(seed_path, tmp_path):
    from kvfuzz.corpus import read_case_dir
    from test_cli import run

    report, junit = tmp_path / "r.json", tmp_path / "r.xml"
    p = run("fuzz", "--target", str(seed_path), "--op", "swa_spec_page_table", "--budget", "10", "--seed", "3",
            "--device", "cpu", "--corpus", str(tmp_path / "corpus"), "--report", str(report), "--junit", str(junit),
            "--minimize-budget", "0")
    assert p.returncode == 1, p.stderr[-2000:]
    doc = __import__("json").loads(report.read_text())
    lines = p.stdout.splitlines()
    for f in doc["findings"]:
        saved = read_case_dir(f["case"])
        assert f["contract"] == contract_status(saved.case)
        at = lines.index(next(x for x in lines if x.startswith(f"FINDING {f['kind']} {f['signature']}")))
        assert lines[at + 2] == f"  {f['contract']}", lines[at:at + 3]
    assert {f["contract"].split(":")[0] for f in doc["findings"]} <= {"in contract", "out of contract"}
    failure = ET.parse(junit).getroot().find("testcase/failure").text
    assert all(f"; {f['contract']}" in failure for f in doc["findings"])
