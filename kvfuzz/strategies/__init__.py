"""Case generators, one family per op, written once against `Draw` (public API); each op's
generator lives in its record (`kvfuzz/ops/<op>/generate.py`, an `OpGenerator`).

`in_contract(op)` leans on where such kernels break: zero pages and empty parts, block
edges, independent non-contiguous layouts on every tensor, odd values. `out_of_contract(op)`
applies one violation a target must refuse, or at least survive without touching memory
outside its tensors. `cases(op)` mixes the two. These are Hypothesis strategies; the batched
engine draws the same generators from a seeded RNG (`GENERATORS`, `draw_case`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Mapping

from ..case import Case
from ..ops import RecordView, record
from .coverage import class_pool, generic_features
from .draw import CompileClass, Draw, HypothesisDraw, RandomDraw
from .feature_filter import FeatureFilter, class_hits
from .layouts import layouts

if TYPE_CHECKING:  # Hypothesis loads when a strategy is built: a worker never builds one
    from hypothesis import strategies as st

__all__ = [
    "cases", "in_contract", "out_of_contract", "layouts",
    "decode_cases", "decode_out_of_contract", "spec_cases", "spec_out_of_contract",
    "splits_cases", "splits_out_of_contract",
]

OUT_OF_CONTRACT_ONE_IN = 5  # one case in five leaves the contract (unless in-contract only)


def _no_class_features(k: CompileClass) -> set[str]:
    return set()


@dataclass(frozen=True)
class OpGenerator:
    op: str
    compile_class: Callable[[Draw], CompileClass]
    in_class: Callable[[Draw, CompileClass], Case]  # an in-contract case of the class
    violation: Callable[..., Case]  # (draw, case, class, kind=None): that case, one contract rule broken
    violations: tuple[str, ...]  # the kinds of violation
    features: Callable[[Case], set[str]]  # the op's own features of a case
    required: Callable[[], set[str]]  # the op's features every campaign must reach
    class_features: Callable[[CompileClass], set[str]] = _no_class_features  # combinations the pool must cover
    # (draw, contract variant) -> a class using only the arguments that variant's targets take
    variant_class: Callable[[Draw, str], CompileClass] | None = None
    # the class items that choose which kernel (or which branch of one) a case runs: the
    # pool's first classes take each of their values, so a campaign's first stints (and each
    # shard's first) reach every path, not the fifth or sixth stint a plain cover gave them
    path_items: tuple[str, ...] = ()

    def class_for(self, variant: str | None) -> Callable[[Draw], CompileClass]:
        """The class drawer for cases judged by `variant` (None: the op's base arguments)."""
        if variant is None or self.variant_class is None:
            return self.compile_class
        return lambda d: self.variant_class(d, variant)

    def draw_case(self, d: Draw, k: CompileClass, in_contract_only: bool = False) -> Case:
        """One case of class `k`; one in five out of contract (a violation drawn per case)."""
        leave = not in_contract_only and d.integer(0, OUT_OF_CONTRACT_ONE_IN - 1) == OUT_OF_CONTRACT_ONE_IN - 1
        case = self.in_class(d, k)
        return self.violation(d, case, k) if leave else case

    def stint(self, seed: int | str, stint_no: int, in_contract_only: bool = False) -> tuple[int, str | None]:
        """(class number, violation) of the batched engine's `stint_no`-th stint. Every fifth
        stint applies one kind of violation to all its cases, on the class of the stint before
        it: a violation that changes what a kernel specialises on costs one variant per
        stint, not one per case, and every class still gets a whole in-contract stint."""
        if in_contract_only:
            return stint_no, None
        block, pos = divmod(stint_no, OUT_OF_CONTRACT_ONE_IN)
        in_block = OUT_OF_CONTRACT_ONE_IN - 1
        if pos < in_block:
            return block * in_block + pos, None
        return block * in_block + in_block - 1, _stint_violation(seed, stint_no, self.violations)

    def case_in_stint(self, d: Draw, k: CompileClass, violation: str | None) -> Case:
        case = self.in_class(d, k)
        return self.violation(d, case, k, violation) if violation else case

    def all_features(self, case: Case) -> set[str]:
        return generic_features(case) | self.features(case)

    def pool(self, seed: int, size: int, variant: str | None = None,
             feature: FeatureFilter | None = None) -> list[CompileClass]:
        """The campaign's compile classes; with `feature` (`--feature`), only classes whose
        sampled cases show a matching feature (feature_filter.py), possibly none."""
        # the same seeds for every variant: one without later arguments gets the op's own pool
        return list(_pool(self, seed, size, variant, feature))


@functools.lru_cache(maxsize=64)  # the same pool for each pass of a bench, each resumed run (tens of ms each)
def _pool(gen: OpGenerator, seed: int, size: int, variant: str | None,
          feature: FeatureFilter | None = None) -> tuple[CompileClass, ...]:
    keep = None if feature is None else (lambda k: class_hits(gen, k, feature) > 0)
    return tuple(class_pool(gen.class_for(variant), gen.op, seed, size, gen.class_features, keep=keep,
                            path_items=gen.path_items))


@functools.lru_cache(maxsize=256)  # asked once per case of the stint
def _stint_violation(seed: int | str, stint_no: int, violations: tuple[str, ...]) -> str:
    return RandomDraw(f"{seed}:{stint_no}:violation").choice(violations)


# op name -> its generator (kvfuzz/ops/<op>/generate.py), a view over the op records
GENERATORS: Mapping[str, OpGenerator] = RecordView(lambda r: r.generator)


def required_features(op: str) -> set[str]:
    """Features every campaign of a few minutes must exercise for `op` (generic ones included)."""
    return record(op).required_features()


def _strategy(op: str, mode: str, variant: str | None = None) -> st.SearchStrategy:
    from hypothesis import strategies as st

    g = GENERATORS[op]
    draw_class = g.class_for(variant)

    @st.composite
    def strategy(draw) -> Case:
        d = HypothesisDraw(draw)
        k = draw_class(d)
        if mode == "in":
            case = g.in_class(d, k)
        elif mode == "out":
            case = g.violation(d, g.in_class(d, k), k)
        else:
            case = g.draw_case(d, k)
        return case if variant is None else case.replace(variant=variant)
    return strategy()


def in_contract(op: str, variant: str | None = None) -> st.SearchStrategy:
    """In-contract cases; with `variant`, judged by it and using every argument it has."""
    return _strategy(op, "in", variant)


def out_of_contract(op: str, variant: str | None = None) -> st.SearchStrategy:
    return _strategy(op, "out", variant)


def cases(op: str, in_contract_only: bool = False, variant: str | None = None) -> st.SearchStrategy:
    """In-contract cases, and (unless `in_contract_only`) one case in five out of contract;
    with `variant`, judged by it and using every argument it has."""
    return _strategy(op, "in" if in_contract_only else "mixed", variant)


def decode_cases() -> st.SearchStrategy:
    return in_contract("decode_metadata")


def decode_out_of_contract() -> st.SearchStrategy:
    return out_of_contract("decode_metadata")


def spec_cases() -> st.SearchStrategy:
    return in_contract("swa_spec_page_table")


def spec_out_of_contract() -> st.SearchStrategy:
    return out_of_contract("swa_spec_page_table")


def splits_cases() -> st.SearchStrategy:
    return in_contract("num_kv_splits")


def splits_out_of_contract() -> st.SearchStrategy:
    return out_of_contract("num_kv_splits")


def random_cases(op: str, seed: int, n: int, in_contract_only: bool = False,
                 variant: str | None = None) -> list[Case]:
    """`n` cases from fresh random classes (a quick sample for tests and benchmarks); with
    `variant`, judged by it and using every argument it has."""
    g = GENERATORS[op]
    draw_class = g.class_for(variant)
    out = []
    for i in range(n):
        d = RandomDraw(f"{seed}:{op}:sample:{i}")
        case = g.draw_case(d, draw_class(d), in_contract_only)
        out.append(case if variant is None else case.replace(variant=variant))
    return out
