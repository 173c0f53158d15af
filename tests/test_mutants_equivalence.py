"""Why a mutant was not killed (kvfuzz/mutants/equivalence.py): beside the unmutated copy on a
seeded stream in and out of contract, a mutant is equivalent (byte-identical arenas), outside
the contract (it differs only on out-of-contract cases) or out of reach (a case of the stream
kills it); and the run's fourth phase turns those verdicts into statuses and reasons."""

from __future__ import annotations

import json
import shutil

import pytest

from kvfuzz.mutants import MutantsConfig, markdown, run_mutants, summary_lines
from kvfuzz.mutants import run as runmod
from kvfuzz.mutants.equivalence import compare, dimension
from kvfuzz.targets import load_target

from conftest import REPO

OP = "q8kv8_topk_length"
STORE = "    tl.store(out + row * out_s, length.to(tl.int32))\n"
CHECK = '    s_q, topk = _tensor_arg("indices", indices, 2, _INDEX, getattr(indices, "device", None))\n'
MUTANTS = {  # the edit -> why it is not killed
    "drop the output's stride (the wrapper's own contiguous torch.empty)":
        (STORE, STORE.replace("row * out_s", "row"), "equivalent"),
    "refuse a 1-D tensor in other words (out of contract: cases 6 and 10 of the stream)":
        (CHECK, CHECK.replace("    s_q,", "    assert indices.dim() == 2, 'not 2-D'\n    s_q,"), "outside contract"),
    "drop the store": (STORE, "    pass\n", "out of reach"),
}


def _copy(tmp_path, name, old="", new=""):
    folder = tmp_path / name.replace(" ", "_")[:20]
    folder.mkdir()
    (folder / "__init__.py").write_text("")
    shutil.copyfile(REPO / "kvfuzz" / "kernels" / "_args.py", folder / "_args.py")
    text = (REPO / "kvfuzz" / "kernels" / "q8kv8_topk_length.py").read_text()
    assert old in text
    (folder / "q8kv8_topk_length.py").write_text(text.replace(old, new))
    return str(folder / "q8kv8_topk_length.py")


@pytest.mark.thorough  # seconds of processes and campaigns: CI's thorough stage
def test_a_survivor_beside_the_original(tmp_path, device):
    original = load_target(_copy(tmp_path, "original"), device)
    for name, (old, new, why) in MUTANTS.items():
        got = compare(original, load_target(_copy(tmp_path, name, old, new), device), OP, "default", 1, 16, device)
        assert got["why"] == why, (name, got)
        assert got["cases"] == 16 if why != "out of reach" else got["cases"] < 16
    assert "byte-identical arenas and errors on 16 cases" in compare(original, original, OP, "default", 1, 16,
                                                                      device)["evidence"]


def test_the_input_a_line_is_about():
    assert dimension("L59: m = (row >= 0) & (row < P)  ->  m = (row >= 0) & (row <= P)").startswith("`P`")
    assert "non-contiguous" in dimension("L42: n = tl.load(lens + req * lens_s)  ->  n = tl.load(lens + req)")
    assert dimension("L3: x = a + b  ->  x = b + a") is None


def test_the_fourth_phase_gives_every_survivor_a_reason(tmp_path, monkeypatch):
    """Campaigns faked: two mutants survive everything, one is killed only by its confirmation
    run; the static rule shows one equivalent, the equivalence run (faked) says the other is
    out of reach."""
    def campaign(self, folder, target, op, budget, seed, variant, reference, stop):
        if not stop:
            return 0, {"findings": [], "ops": {op: {"cases": 5, "contract_variant": "default"}}}, ""
        late = "drop_store" in str(folder) and "confirm" in str(folder)
        found = [{"signature": "q:p:mismatch:o:all", "signatures": ["q:p:mismatch:o:all"], "kind": "mismatch",
                  "contract": "in contract", "found_after_s": 4.0}] if late else []
        return 0, {"findings": found, "ops": {op: {"cases": 5}}}, ""

    spawned = []

    def spawn(self, folder, args, limit):
        job = json.loads((folder / "job.json").read_text())
        spawned.append(job["mutant"])
        why = "out of reach"
        (folder / "verdict.json").write_text(json.dumps({"why": why, "evidence": "e", "cases": 9, "in_contract": 7,
                                                         "out_of_contract": 2, "paths": {}}))
        return 0, ""

    monkeypatch.setattr(runmod.Runner, "_campaign", campaign)
    monkeypatch.setattr(runmod.Runner, "_spawn", spawn)
    monkeypatch.setattr(runmod.Runner, "variants", lambda self, ops: {})
    cfg = MutantsConfig(ops=[OP], functions=["_topk_length_kernel"], device="cpu", workdir=tmp_path / "w")
    keep = lambda m: m.operator in ("drop_store", "drop_stride", "cmp_flip") and m.line in (33, 41)  # noqa: E731
    report = run_mutants(cfg, select=keep)
    whys = {(m["operator"], m["status"], m.get("why")) for m in report["mutants"]}
    assert ("drop_store", "survived", "slow") in whys, whys
    assert ("drop_stride", "equivalent", "equivalent") in whys, whys
    # the dropped stride of the wrapper's own 1-D result: shown by the static rule, no stream run
    assert next(m for m in report["mutants"] if m["operator"] == "drop_stride")["evidence"].startswith("static: ")
    assert all(m.get("why") for m in report["mutants"]) and len(spawned) == 1
    assert ("cmp_flip", "survived", "out of reach") in whys, whys
    t = report["ops"][OP]
    assert t["equivalent"] == 1 and t["kill_rate"] == 0.0
    text = "\n".join(summary_lines(report)) + markdown(report)
    assert "Equivalent" in text and "Killed only after the budget" in text
    run_mutants(cfg, select=keep)  # resumed: nothing explained again
    assert len(spawned) == 1


STATIC = b'''import torch
import triton
import triton.language as tl


@triton.jit
def _k(x, x_s, y, y_s, out, out_s, tmp, tmp_s, n):
    i = tl.program_id(0)
    v = tl.load(x + i * x_s) + tl.load(y + i * y_s)
    tl.store(tmp + i * tmp_s, v)
    tl.store(out + i * out_s, v)


def entry(x, y, out, n):
    x = x.contiguous()
    x_s = x.stride(0)
    (rows,) = y.shape
    tmp = torch.empty(rows, dtype=torch.int32)
    if out is None:
        out = torch.empty(n)
    _k[(n,)](x, x_s, y, y.stride(0), out, out.stride(0), tmp, tmp.stride(0), n)
'''


def test_a_static_rule_shows_a_dropped_unit_stride_equivalent():
    """x is made contiguous (its last stride, by the contract's rank), tmp is the wrapper's own
    1-D allocation: equivalent. y is the caller's, out the caller's unless None: not shown."""
    from kvfuzz.mutants import find_mutants
    from kvfuzz.mutants.equivalence import static_equivalent

    shown = {}
    for m in find_mutants(STATIC, "k.py", ["_k", "entry"]):
        if m.operator == "drop_stride":
            name = m.original.split("*")[-1].strip()
            shown[name] = static_equivalent(STATIC, m, {"x": 1, "y": 1, "out": 1})
    assert set(shown) == {"x_s", "y_s", "tmp_s", "out_s"}, shown
    assert "`x` is made contiguous (L15)" in shown["x_s"] and "`x_s` from L16" in shown["x_s"]
    assert "`tmp` is the 1-D `torch.empty` the wrapper allocates (L18)" in shown["tmp_s"]
    assert shown["y_s"] is None and shown["out_s"] is None
    assert static_equivalent(STATIC, next(m for m in find_mutants(STATIC, "k.py", ["_k"])
                                          if m.operator == "drop_stride" and "x_s" in m.original), {}) is None
