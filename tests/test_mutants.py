"""`kvfuzz mutants`: each operator makes its one-line change (the file byte-identical
elsewhere), the plan is deterministic by seed, verdicts (stillborn, killed, survived) come
from a campaign's report as docs/mutants.md says, a resumed run skips finished mutants, and a
real run kills a real mutant and lets an equivalent one survive."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kvfuzz.errors import BadInput
from kvfuzz.mutants import MutantsConfig, exit_status, find_mutants, markdown, plan, run_mutants
from kvfuzz.mutants import run as runmod
from kvfuzz.mutants.reach import reached

from conftest import REPO

KERNEL = b'''import triton
import triton.language as tl

BLOCK = 64


@triton.jit
def _k(src, dst, n, stride_d, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    inb = (offs < n) & (offs >= 0)
    x = tl.load(src + offs, mask=inb, other=0)
    y = tl.where(x > 3, x - 1, tl.maximum(x, 0))
    pages = tl.cdiv(y, 4) + (y + 4 - 1) // 4
    tl.store(dst + offs * stride_d, pages, mask=inb)


def entry(src, dst, n):
    if n < 0:
        raise ValueError("n")
    _k[(n,)](src, dst, n, dst.stride(0), BLOCK=BLOCK)


def unrelated(a):
    return a < 1
'''

# operator -> (the line as written, the line as mutated): one example each operator must make
EXPECTED = {
    "cmp_flip": ("    inb = (offs < n) & (offs >= 0)", "    inb = (offs <= n) & (offs >= 0)"),
    "bound_pm1": ("    inb = (offs < n) & (offs >= 0)", "    inb = (offs < (n - 1)) & (offs >= 0)"),
    "offset_pm1": ("    x = tl.load(src + offs, mask=inb, other=0)", "    x = tl.load((src + offs + 1), mask=inb, other=0)"),
    "grid_pm1": ("    _k[(n,)](src, dst, n, dst.stride(0), BLOCK=BLOCK)",
                 "    _k[((n + 1),)](src, dst, n, dst.stride(0), BLOCK=BLOCK)"),
    "drop_stride": ("    tl.store(dst + offs * stride_d, pages, mask=inb)", "    tl.store(dst + offs, pages, mask=inb)"),
    "drop_mask": ("    x = tl.load(src + offs, mask=inb, other=0)", "    x = tl.load(src + offs)"),
    "widen_mask": ("    inb = (offs < n) & (offs >= 0)", "    inb = (offs < n)"),
    "drop_clamp": ("    y = tl.where(x > 3, x - 1, tl.maximum(x, 0))", "    y = tl.where(x > 3, x - 1, x)"),
    "swap": ("    y = tl.where(x > 3, x - 1, tl.maximum(x, 0))", "    y = tl.where(x > 3, tl.maximum(x, 0), x - 1)"),
    "drop_store": ("    tl.store(dst + offs * stride_d, pages, mask=inb)", "    pass"),
    "constexpr": ("BLOCK = 64", "BLOCK = 128"),
    "floor_ceil": ("    pages = tl.cdiv(y, 4) + (y + 4 - 1) // 4", "    pages = (y // 4) + (y + 4 - 1) // 4"),
}


def _changed_lines(a: bytes, b: bytes) -> list[tuple[str, str]]:
    la, lb = a.decode().splitlines(), b.decode().splitlines()
    assert len(la) == len(lb)
    return [(x, y) for x, y in zip(la, lb) if x != y]


def test_each_operator_makes_its_one_line_change_and_nothing_else():
    functions, constants = reached(KERNEL, "entry")
    assert functions == ["_k", "entry"] and constants == ["BLOCK"]  # `unrelated` is not reached
    mutants = find_mutants(KERNEL, "k.py", functions, constants)
    changes = {}
    for m in mutants:
        out = m.apply(KERNEL)
        # byte-identical before and after the patched span
        assert out[:m.start] == KERNEL[:m.start] and out[len(out) - (len(KERNEL) - m.end):] == KERNEL[m.end:]
        diff = _changed_lines(KERNEL, out)
        assert len(diff) == 1, (m, diff)
        changes.setdefault(m.operator, set()).add(diff[0])
        assert m.diff(KERNEL) == f"L{m.line}: {diff[0][0].strip()}  ->  {diff[0][1].strip()}"
    for operator, change in EXPECTED.items():
        assert change in changes.get(operator, set()), (operator, sorted(changes.get(operator, ())))
    # the `raise` guard's condition is left alone unless asked for
    assert not any(m.line == 18 for m in mutants)
    assert any(m.line == 18 for m in find_mutants(KERNEL, "k.py", functions, constants, validation=True))
    assert not any(m.function == "unrelated" for m in mutants)


def test_a_replacement_that_would_not_parse_is_parenthesised():
    src = b"import triton.language as tl\n\ndef f(x):\n    return tl.maximum(x, 1).to(tl.int32)\n"
    kept = {m.apply(src).decode().splitlines()[3] for m in find_mutants(src, "f.py", ["f"]) if m.operator == "drop_clamp"}
    assert "    return (1).to(tl.int32)" in kept and "    return x.to(tl.int32)" in kept


def test_the_plan_is_deterministic_by_seed():
    def keys(seed):
        plans, _ = plan(MutantsConfig(ops=["q8kv8_topk_length"], max_mutants=6, seed=seed))
        return [m.key for m in plans[0].mutants]

    assert keys(3) == keys(3) and len(keys(3)) == 6
    assert keys(3) != keys(4)
    every, _ = plan(MutantsConfig(ops=["q8kv8_topk_length"]))
    assert len(every[0].mutants) > 6 and set(keys(3)) <= {m.key for m in every[0].mutants}


def test_bad_input_is_one_line():
    with pytest.raises(BadInput, match="budget-per-mutant"):
        MutantsConfig(budget_s=0).validate()
    with pytest.raises(BadInput, match="reaches none of"):
        plan(MutantsConfig(ops=["q8kv8_topk_length"], functions=["nope"]))


def _report(*findings, cases=10):
    return {"findings": list(findings), "ops": {"op": {"cases": cases}}}


def _finding(sig, kind="mismatch", contract="in contract", after=1.5, message="m"):
    return {"signature": sig, "signatures": [sig], "kind": kind, "contract": contract, "found_after_s": after,
            "message": message}


def test_verdicts_from_a_campaign():
    classify = runmod.classify
    assert classify(2, None, "target x: loading the kernel file failed: NameError", "op", set())["status"] == "stillborn"
    crash = _finding("op:p:crash:-:InterpreterError", kind="crash", message="arange's range must be a power of 2")
    assert classify(0, _report(crash), "", "op", set())["status"] == "stillborn"
    got = classify(0, _report(_finding("op:p:mismatch:out:all", after=2.5), _finding("op:p:mismatch:x:all", after=0.5)),
                   "", "op", set())
    assert got["status"] == "killed" and got["time_to_kill_s"] == 0.5
    # the original's own finding kills nothing; an out-of-contract one neither, and says so
    assert classify(0, _report(_finding("op:p:mismatch:out:all")), "", "op", {"op:p:mismatch:out:all"})["status"] \
        == "survived"
    got = classify(0, _report(_finding("op:p:out_of_bounds_write:out:after", contract="out of contract: n < 0")),
                   "", "op", set())
    assert got["status"] == "survived" and "only out of contract" in got["reason"]
    assert classify(0, _report(cases=0), "", "op", set())["status"] == "stillborn"
    assert classify(4, None, "Traceback", "op", set())["status"] == "error"


def test_a_resumed_run_skips_finished_mutants(tmp_path, monkeypatch):
    calls = []

    def fake(self, folder, target, op, budget, seed, variant, reference, stop):
        calls.append(folder)
        if not stop:  # the reference
            return 0, {"findings": [], "ops": {op: {"cases": 5, "contract_variant": "default"}}}, ""
        killed = "drop_store" in str(folder) or "offset_pm1" in str(folder)
        return 0, _report(_finding("q:p:mismatch:o:all", after=1.0)) if killed else \
            {"findings": [], "ops": {op: {"cases": 5}}}, ""

    monkeypatch.setattr(runmod.Runner, "_campaign", fake)
    monkeypatch.setattr(runmod.Runner, "variants", lambda self, ops: calls.append("variants") or {})
    cfg = MutantsConfig(ops=["q8kv8_topk_length"], max_mutants=5, seed=0, workdir=tmp_path / "w", device="cpu",
                        equivalence_cases=0)
    first = run_mutants(cfg)
    assert calls and len(first["mutants"]) == 5
    n = len(calls)
    again = run_mutants(cfg)
    assert len(calls) == n  # nothing run again
    assert again["mutants"] == first["mutants"]
    states = {m["status"] for m in first["mutants"]}
    assert states <= {"killed", "likely_equivalent"}
    assert exit_status(first) == 0 and "| q8kv8_topk_length | **all** | 5 |" in markdown(first)
    # a state lost (a run killed part way) is run again, alone
    lost = next(p for p in (tmp_path / "w" / "q8kv8_topk_length").glob("*/state.json") if "reference" not in str(p))
    lost.unlink()
    run_mutants(cfg)
    assert len(calls) - n in (1, 2)  # the mutant, and its confirmation if it survives
    with pytest.raises(BadInput, match="holds another mutants run"):
        run_mutants(MutantsConfig(ops=["q8kv8_topk_length"], max_mutants=5, seed=1, workdir=tmp_path / "w",
                                  device="cpu", equivalence_cases=0))


def test_a_stopped_run_reports_what_it_judged(tmp_path, monkeypatch, capsys):
    """SIGTERM (a job's time limit) after some mutants: their verdicts are reported, the rest
    `not_run`, and the command still writes its reports (exit 130)."""
    from kvfuzz.cli import main

    seen = []

    def fake(self, folder, target, op, budget, seed, variant, reference, stop):
        if not stop:  # the reference
            return 0, {"findings": [], "ops": {op: {"cases": 5, "contract_variant": "default"}}}, ""
        mutant = Path(folder).parent.name
        if mutant not in seen:
            seen.append(mutant)
        if len(seen) == 3:
            raise KeyboardInterrupt  # the stop arrives during the third mutant's campaign
        return 0, _report(_finding("q:p:mismatch:o:all", after=1.0)), ""

    monkeypatch.setattr(runmod.Runner, "_campaign", fake)
    monkeypatch.setattr(runmod.Runner, "variants", lambda self, ops: {})
    report, md = tmp_path / "m.json", tmp_path / "m.md"
    rc = main(["mutants", "--op", "q8kv8_topk_length", "--max-mutants", "5", "--jobs", "1", "--device", "cpu",
               "--resume", str(tmp_path / "w"), "--report", str(report), "--markdown", str(md)])
    assert rc == 130
    doc = json.loads(report.read_text())
    statuses = [m["status"] for m in doc["mutants"]]
    killed = statuses.count("killed")  # the two before, and those the pool's thread began before the stop
    assert killed >= 2 and statuses.count("not_run") >= 1 and killed + statuses.count("not_run") == 5, statuses
    assert doc["cut_short"] and doc["ops"]["q8kv8_topk_length"]["killed"] == killed and md.read_text()
    assert f"{killed} of 5 mutants judged" in capsys.readouterr().err
    # its benchmark record says what it covers: a sample of 5 (of the op's mutants), cut short
    import importlib.util

    spec = importlib.util.spec_from_file_location("mutants_record", REPO / "scripts" / "mutants_record.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert script.main([str(report), "--command", "kvfuzz mutants", "--machine", "m", "--title", "t",
                        "--order", "1", "--commit", "abc"]) == 0
    record = json.loads(capsys.readouterr().out)
    population = doc["ops"]["q8kv8_topk_length"]["population"]
    assert population > 5 and record["notes"][0].startswith("A sample of 5 mutants per op, drawn by seed 0")
    assert f"q8kv8_topk_length {population}" in record["notes"][0]
    assert record["notes"][1].startswith(f"Cut short by ") and f"{killed} of 5 mutants judged" in record["notes"][1]


DEAD = "    if BLOCK < 0:  # never: BLOCK is 128\n        length = length + 7\n"


@pytest.mark.slow
def test_a_real_run_kills_a_real_mutant_and_an_equivalent_one_survives(tmp_path):
    """Two mutants of the builtin q8kv8_topk_length (a copy with a dead branch added): its store
    dropped (killed) and the dead branch's condition flipped (BLOCK <= 0: shown equivalent
    beside the original)."""
    folder = tmp_path / "k"
    folder.mkdir()
    (folder / "__init__.py").write_text("")
    shutil.copyfile(REPO / "kvfuzz" / "kernels" / "_args.py", folder / "_args.py")
    text = (REPO / "kvfuzz" / "kernels" / "q8kv8_topk_length.py").read_text()
    anchor = "    tl.store(out + row * out_s, length.to(tl.int32))\n"
    (folder / "q8kv8_topk_length.py").write_text(text.replace(anchor, DEAD + anchor))
    cfg = MutantsConfig(target=str(folder / "q8kv8_topk_length.py"), ops=["q8kv8_topk_length"],
                        functions=["_topk_length_kernel"], budget_s=2.0, confirm_factor=1.5, jobs=2, device="cpu",
                        equivalence_cases=32, workdir=tmp_path / "w")
    dead = (folder / "q8kv8_topk_length.py").read_text().splitlines().index(DEAD.splitlines()[0]) + 1
    report = run_mutants(cfg, select=lambda m: m.operator == "drop_store" or (m.operator, m.line) == ("cmp_flip", dead))
    by_op = {m["operator"]: m for m in report["mutants"]}
    assert set(by_op) == {"drop_store", "cmp_flip"}, report["mutants"]
    assert by_op["drop_store"]["status"] == "killed" and by_op["drop_store"]["time_to_kill_s"] < 2.0
    assert by_op["cmp_flip"]["status"] == "equivalent", by_op["cmp_flip"]
    assert by_op["cmp_flip"]["evidence"].startswith("byte-identical arenas and errors on 32 cases")
    assert report["ops"]["q8kv8_topk_length"]["kill_rate"] == 1.0
    assert exit_status(report) == 0
    json.dumps(report)


def test_the_command_refuses_bad_input_in_one_line(capsys, tmp_path):
    from kvfuzz.cli import main

    for argv, says in ((["--op", "nope"], "unknown op"), (["--budget-per-mutant", "0"], "budget-per-mutant"),
                       (["--op", "q8kv8_topk_length", "--function", "nope"], "reaches none of"),
                       (["--target", str(tmp_path / "missing.py"), "--op", "q8kv8_topk_length"], "does not exist")):
        assert main(["mutants", *argv]) == 2, argv
        err = capsys.readouterr().err
        assert says in err and err.count("\n") == 1, err
