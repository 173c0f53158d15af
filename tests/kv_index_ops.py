"""What the tests of the three kv_indices ops (test_flashinfer_kv_indices.py,
test_chunked_prefix_kv_indices.py, test_flashmla_kv_indices.py) do alike: seeded streams judged
on a target, a short campaign of the builtin, the two oracles on generated cases, every violation
kind out of contract, seeded defects in a copy of the builtin kernel, and a release target's
kv_indices.py. Each takes the op's name; the tests keep what is the op's own."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from kvfuzz.case import Case
from kvfuzz.execute import run_case
from kvfuzz.judge import judge
from kvfuzz.ops import record
from kvfuzz.strategies import random_cases
from kvfuzz.strategies.draw import RandomDraw
from kvfuzz.targets import load_target

KERNELS = Path(__file__).resolve().parents[1] / "kvfuzz" / "kernels"


def stream_findings(op: str, target, device, seed=3, n=30, in_contract_only=False, first=False) -> set[str]:
    """The signatures a seeded stream of n cases of `op` (one in five out of contract) finds
    on `target` (first: those of the first case that finds any)."""
    out = set()
    for case in random_cases(op, seed, n, in_contract_only):
        v = judge(case, run_case(target, case, device))
        assert v.not_target is None, (case.describe(), v.not_target)
        out |= set(v.signatures())
        if first and out:
            break
    return out


def short_campaign(op: str, device, budget_s: float, min_cases: int) -> None:
    """The builtin kernel of `op` runs more than min_cases cases in budget_s seconds and saves nothing."""
    from kvfuzz.campaign import CampaignConfig, run_campaign

    res = run_campaign(CampaignConfig(ops=[op], ops_named=True, device=device, budget_s=budget_s, isolate=False,
                                      seed=5, minimize_budget_s=0))
    (stats,) = res.stats
    assert stats.cases > min_cases and res.saved == [], (stats, res.saved)


def builtin_finds_nothing(op: str, builtin_target, device, n=30, generation="0.5.14") -> None:
    b = builtin_target.bindings[op]
    assert b.generation == generation and not b.bare, b.describe()
    found = stream_findings(op, builtin_target, device, n=n)
    assert found == set(), found


def oracles_agree(op: str, n: int) -> set[str]:
    """The two oracles agree on the required cells of n in-contract cases of `op`; the features
    those cases reach."""
    rec = record(op)
    (out,) = rec.contract.outputs
    seen = set()
    for case in random_cases(op, 11, n, in_contract_only=True):
        status, reasons, expected = rec.contract.assess(case)
        assert status == "in_contract", reasons
        req = rec.contract.cells(case)[out].required
        got = rec.torch_ref(case, "cpu")[out].numpy()
        assert np.array_equal(got[req], expected.values[out][req]), case.describe()
        seen |= rec.generator.features(case)
    return seen


def violation(op: str, kind: str, label: str) -> Case:
    """A case of `op` that breaks the rule `kind`, drawn from the seed `label`."""
    g = record(op).generator
    d = RandomDraw(label)
    k = g.compile_class(d)
    return g.violation(d, g.in_class(d, k), k, kind)


def violations_leave_contract(op: str) -> None:
    contract = record(op).contract
    for kind in record(op).generator.violations:
        for i in range(6):
            case = violation(op, kind, f"violation:{kind}:{i}")
            assert contract.classify(case)[0] == "out_of_contract", (kind, case.describe())


def mutant_copy(src: Path | str, old: str, new: str, path: Path) -> Path:
    """`path`: kernel file `src` (or its text) with its one `old` replaced by `new`; a builtin
    kernel's relative import of its argument checks made absolute (the copy lives elsewhere)."""
    text = src if isinstance(src, str) else src.read_text()
    assert text.count(old) == 1, old
    path.write_text(text.replace(old, new).replace("from ._args import", "from kvfuzz.kernels._args import"))
    return path


def seeded_defect_found(op: str, old: str, new: str, tmp_path: Path, device, name: str, **stream) -> None:
    """A seeded stream (`stream`: stream_findings' arguments) finds the op's defect in a copy of
    its builtin kernel with `old` replaced by `new` (the mutant `name`)."""
    path = mutant_copy(KERNELS / f"{op}.py", old, new, tmp_path / f"mutant_{name.replace(' ', '_')}.py")
    found = stream_findings(op, load_target(str(path), device), device, **stream)
    assert any(s.startswith(f"{op}:") for s in found), found


def release_file(version: str) -> Path:
    """SGLang `version`'s kv_indices.py from kvfuzz's cache (fetched once), or skip."""
    from test_releases import kernel_file

    return kernel_file(version, "kv_indices.py")


def release_target_runs_clean(op: str, version: str, generation: str, device, n=20):
    """`sglang==version` offers `op` as a bare kernel of API `generation` from its
    kv_indices.py, judged by the default variant, and a short in-contract stream runs clean;
    the target."""
    release_file(version)
    t = load_target(f"sglang=={version}", device)
    b = t.bindings[op]
    assert b.bare and b.generation == generation and not b.defaulted, b.describe()
    assert t.variants[op] == "default" and "kv_indices.py" in t.description
    assert t.entries[op] is t.modules["kv_indices.py"].__dict__[record(op).contract.entry]
    found = stream_findings(op, t, device, seed=4, n=n, in_contract_only=True)
    assert found == set(), found
    return t


def writes_past_on_0_5_14(op: str, case: Case, device) -> None:
    """SGLang 0.5.14's kernel writes past the op's output on `case` (its offsets or rows past
    it: the kernel takes no size); the builtin masks them."""
    release_file("0.5.14")
    out = record(op).contract.outputs[0]
    t = load_target("sglang==0.5.14", device)
    sigs = judge(case, run_case(t, case, device)).signatures()
    assert any(s.endswith(f"out_of_bounds_write:{out}:after") for s in sigs), sigs
    assert judge(case, run_case(load_target("builtin", device), case, device)).signatures() == []
