"""Case generation: one generator drawn by Hypothesis or by a seeded RNG, compile classes that
bound the variants a target compiles, and a coverage of every adversarial feature.

The compile counts here come from running each case's host code with the kernels recorded
but not run (`LaunchRecorder(dry=True)`), so SGLang's and kvfuzz's own host functions decide
what their kernels receive, by Triton's rules, in a fraction of a second per thousand cases.
"""

from __future__ import annotations

from collections import defaultdict

import pytest
from hypothesis import HealthCheck, given, settings

from kvfuzz.engines.batch_engine import STINT, case_stream
from kvfuzz.engines.common import fit_target
from kvfuzz.ops import CONTRACTS
from kvfuzz.strategies import GENERATORS, cases, required_features

from conftest import seed_kernel_path
from sampling import sampled

OPS = list(GENERATORS)


def stream(op: str, seed: int, n: int, stint: int = STINT["cpu"], in_contract_only: bool = False,
           variant: str | None = None):
    """The batched engine's case stream: (class index, case); with `variant`, as a campaign
    judged by it draws (its later-release arguments too)."""
    return case_stream(op, seed, n, in_contract_only=in_contract_only, stint=stint, variant=variant)


@pytest.mark.parametrize("op", OPS)
def test_same_seed_same_cases_and_another_seed_others(op):
    a = [c.digest() for _, c in stream(op, 3, 50)]
    assert a == [c.digest() for _, c in stream(op, 3, 50)]
    assert a != [c.digest() for _, c in stream(op, 4, 50)]


@pytest.mark.parametrize("op", OPS)
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(data=__import__("hypothesis").strategies.data())
def test_the_hypothesis_strategies_draw_valid_cases_of_every_status(op, data):
    case = data.draw(cases(op))
    assert CONTRACTS[op].classify(case)[0] in ("in_contract", "out_of_contract", "must_refuse")


@pytest.mark.parametrize("op, variant", [(op, None) for op in OPS] + [
    ("decode_metadata", v) for v in ("v2p", "v2p_swa", "read_table", "skip", "fused", "strict")])
def test_generated_in_contract_cases_are_in_contract(op, variant):
    statuses = [CONTRACTS[op].classify(c)[0] for _, c in stream(op, 1, 300, in_contract_only=True, variant=variant)]
    assert statuses == ["in_contract"] * 300


# seed 0 of a quarter of the ops in the fast suite; the rest, and the other three seeds, thorough
@pytest.mark.parametrize("op, variant", sampled("feature reach", [pytest.param(op, None) for op in OPS] + [
    pytest.param("decode_metadata", "strict"), pytest.param("decode_metadata", "fused")]))
@pytest.mark.parametrize("seed", [0] + [pytest.param(s, marks=pytest.mark.thorough) for s in (1, 2, 3)])
def test_every_campaign_reaches_every_required_feature_early(op, variant, seed):
    """Misaligned pointers, odd strides, every dtype, zero sizes and the block edges +-1 of each
    kernel path, within the first 1,500 cases of any seed's stream (a CPU campaign of a minute
    per op checks about that many); for decode also with the classes of the variants that draw
    the later releases' arguments (builtin's, 0.5.23's)."""
    g = GENERATORS[op]
    seen: set[str] = set()
    for _, case in stream(op, seed, 1500, variant=variant):
        seen |= g.all_features(case)
    assert required_features(op) - seen == set()


def _targets():
    return [("builtin", "builtin"), ("seed", str(seed_kernel_path()))]


@pytest.fixture(scope="module")
def dry(device):
    from kvfuzz.specialize import recorder

    rec = recorder()  # the process's recorder (InProcessExecutor uses the same one)
    rec.dry = True
    yield rec
    rec.dry = False


# decode's arguments of SGLang 0.5.17-0.5.23 (multiplier and flags as constexprs, v2p tables'
# None-ness): the classes of the variants that draw them, on the targets judged by those variants
VARIANT_TARGETS = [("builtin", "builtin", "strict"), ("0.5.23", "sglang==0.5.23", "fused"),
                   ("0.5.17", "sglang==0.5.17", "v2p"), ("0.5.18", "sglang==0.5.18", "v2p_swa"),
                   ("0.5.19", "sglang==0.5.19", "read_table")]
_CASES = [(op, name, spec, None) for name, spec in _targets() for op in OPS] + [
    ("decode_metadata", name, spec, variant) for name, spec, variant in VARIANT_TARGETS]


def _load(spec, device):
    from kvfuzz.targets import load_target

    if spec.startswith("sglang=="):
        from test_releases import kernel_file

        kernel_file(spec.split("==")[1])
    return load_target(spec, device)


@pytest.mark.parametrize("op, name, spec, variant", _CASES)
def test_a_compile_class_compiles_each_kernel_once(op, name, spec, variant, device, dry):
    """Inside a class, in-contract cases give one specialisation key per kernel: what SGLang's
    and kvfuzz's host code pass (strides, sizes, constexprs, alignments) keeps its class."""
    target = _load(spec, device)
    if not target.supports(op):
        pytest.skip(f"{name} has no {op}")
    from kvfuzz.execute import prepare
    from kvfuzz.materialize import to_device
    from kvfuzz.device import torch_device

    per_class: dict[int, dict[str, set]] = defaultdict(lambda: defaultdict(set))
    for k, case in stream(op, 5, 12 * 16, stint=16, in_contract_only=True, variant=variant):
        case = fit_target(case, target.lacks)  # as a campaign does: no argument the target lacks
        before = set(dry.keys)
        views = to_device(prepare(case).plan, torch_device(device))[1]
        try:
            target.invoke(op, views, case.scalars)
        except AssertionError as exc:  # 0.5.19 refuses non-contiguous read tables (test_decode_unified.py)
            if "swa canonical must share" not in str(exc):
                raise
        for key in set(dry.keys) - before:
            per_class[k][key[0]].add(key)
        for kernel_keys in per_class[k].values():
            assert len(kernel_keys) == 1, (name, k, case.describe())


@pytest.mark.parametrize("op, name, spec, variant", sampled("compiles per 1000", [pytest.param(*c) for c in _CASES]))
def test_a_campaign_compiles_at_most_20_variants_per_1000_cases(op, name, spec, variant, device, dry):
    """The batched engine's stream with out-of-contract cases mixed in, as a campaign runs it
    (the seed's host code refuses or runs every case; its kernels are recorded, not run)."""
    from kvfuzz.device import torch_device
    from kvfuzz.execute import prepare
    from kvfuzz.materialize import to_device
    target = _load(spec, device)
    if not target.supports(op):
        pytest.skip(f"{name} has no {op}")
    start = set(dry.keys)
    n = 2000
    for _, case in stream(op, 7, n, variant=variant):
        case = fit_target(case, target.lacks)
        views = to_device(prepare(case).plan, torch_device(device))[1]
        try:
            target.invoke(op, views, case.scalars)
        except Exception:
            pass  # refused
    variants = len(set(dry.keys) - start)
    assert variants * 1000 / n <= 20, variants
