"""What an op must compute, as data: arguments, the in-contract predicate, output cells.

One `Contract` record per op (in `kvfuzz.ops`), in the manner of PyTorch's OpInfo: the
arguments a reader can scan, and behaviour hung off it as functions of a `Case`.

`Contract.assess` is the in-contract predicate; `Contract.broken_rule` names the first rule a
case breaks, with its values (`row 0: la + lb = 2 > page_table_dst width 1`), and
`Contract.status_text` says it as every report does (`in contract`, `stress: WHY`, `out of
contract: RULE`, `must refuse: RULE`). Both read `assess`, so a status and its rule cannot disagree.

`stress` is an in-contract case that no SGLang call site launches (`Contract.stress`: flashmla
with `kv_start_idx`, which every backend passes as None, say). It is generated and judged as an
in-contract case, by the same oracles; only its label differs (`Contract.label`), so its
findings are reported apart from in-contract ones and `--in-contract-only` drops them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Callable, Mapping, NamedTuple

import numpy as np

from .case import Case, TensorSpec


@dataclass(frozen=True)
class Arg:
    """A tensor argument. `shape` uses the op's size names, e.g. "B,W"."""

    name: str
    role: str  # "in" or "out"
    dtypes: tuple[str, ...]
    shape: str
    optional: bool = False
    doc: str = ""

    def __post_init__(self) -> None:
        if self.role not in ("in", "out"):
            raise AssertionError(f"Arg {self.name}: role must be 'in' or 'out'")
        if not self.dtypes:
            raise AssertionError(f"Arg {self.name} has no dtypes")


@dataclass(frozen=True)
class Scalar:
    name: str
    doc: str = ""


@dataclass(frozen=True)
class Cells:
    """For one output: which cells must be written (with the oracle's value), may be written,
    and (the rest) must stay as they were."""

    required: np.ndarray
    may_write: np.ndarray

    @property
    def untouched(self) -> np.ndarray:
        return ~(self.required | self.may_write)


@dataclass(frozen=True)
class Expected:
    """An oracle's answer. `values[name]` is meaningful on the required cells only.

    `alternatives` are further accepted answers: a case on a floating-point rounding
    boundary has more than one right result, and `boundary` says why."""

    values: Mapping[str, np.ndarray]
    alternatives: tuple[Mapping[str, np.ndarray], ...] = ()
    boundary: str | None = None

    def accepted(self) -> tuple[Mapping[str, np.ndarray], ...]:
        return (self.values, *self.alternatives)


class Assessment(NamedTuple):
    """What `Contract.assessment` says of a case."""

    status: str  # in_contract | out_of_contract | must_refuse
    reasons: list[str]
    expected: Expected | None  # the NumPy oracle's answer (in-contract cases)
    structural: bool  # out of contract by its structure (`structural_reasons`), not its values


class OutOfContract(Exception):
    """Raised by an oracle when the case leaves the contract (e.g. int32 overflow)."""

    def __init__(self, *reasons: str) -> None:
        super().__init__("; ".join(reasons))
        self.reasons = list(reasons)


@dataclass(frozen=True)
class Contract:
    name: str  # kvfuzz's op name
    entry: str  # the entry point's name in SGLang (what a target must provide)
    doc: str
    args: tuple[Arg, ...]
    scalars: tuple[Scalar, ...]
    variants: Mapping[str, str]  # contract variant -> what differs; the first is the default
    paths: Mapping[str, str]  # kernel paths behind the entry point -> when taken
    kernel_path: Callable[[Case], str]
    structural_reasons: Callable[[Case], list[str]]  # out-of-contract reasons, oracle aside
    must_refuse: Callable[[Case], list[str]]  # reasons the target must raise before launching
    cells: Callable[[Case], dict[str, Cells]]
    numpy_ref: Callable[[Case], Expected]  # raises OutOfContract
    torch_ref: Callable[..., dict[str, Any]]  # (case, torch device, inputs=None) -> int64 tensors there
    block_sizes: tuple[int, ...] = field(default=())  # the seed's column blocks: edges to fuzz
    # contract variant -> the later releases' optional arguments its cases may carry; a target must
    # take them all to be judged by it (targets.variant_lacks); a variant absent here has none
    variant_args: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # output -> the cells more than one program writes on this case (only an out-of-contract
    # case can have them: overlapping CSR ranges); a second run may leave either program's
    # value there, so a difference confined to them is the input's race, not nondeterminism
    # of the kernel (judge._reruns). None: no op program shares a cell with another
    racy: Callable[[Case], dict[str, np.ndarray]] | None = None
    # reasons an in-contract case is a launch no SGLang call site makes, though the kernel's
    # contract covers it ([] or None: a launch some call site makes); judged as in contract
    stress: Callable[[Case], list[str]] | None = None

    def __post_init__(self) -> None:
        if not self.args or not self.variants or not self.paths:
            raise AssertionError(f"Contract {self.name} needs args, variants and paths")

    @cached_property  # read for every case: computed once (a frozen dataclass's __dict__ takes it)
    def outputs(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.args if a.role == "out")

    @cached_property
    def inputs(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.args if a.role == "in")

    @cached_property
    def arg_names(self) -> frozenset[str]:
        return frozenset(a.name for a in self.args)

    def arg(self, name: str) -> Arg:
        for a in self.args:
            if a.name == name:
                return a
        raise KeyError(name)

    def classify(self, case: Case) -> tuple[str, list[str]]:
        """("in_contract" | "out_of_contract" | "must_refuse", the reasons)."""
        status, reasons, _ = self.assess(case)
        return status, reasons

    def assess(self, case: Case) -> tuple[str, list[str], Expected | None]:
        """classify, plus the NumPy oracle's answer for an in-contract case (it is what tells
        int32 overflow from a valid case, so it runs once, here)."""
        status, reasons, expected, _ = self.assessment(case)
        return status, reasons, expected

    def assessment(self, case: Case) -> "Assessment":
        """`assess`, and whether the case's structure (shapes, layouts, dtypes, its variant)
        is at fault rather than its values: what the minimizer keeps a candidate to."""
        refuse = self.must_refuse(case)
        if refuse:
            return Assessment("must_refuse", refuse, None, False)
        if case.variant not in self.variants:
            return Assessment("out_of_contract", [f"unknown contract variant {case.variant!r}"], None,
                              bool(self.structural_reasons(case)))
        reasons = self.structural_reasons(case)
        if reasons:
            return Assessment("out_of_contract", reasons, None, True)
        try:
            return Assessment("in_contract", [], self.numpy_ref(case), False)
        except OutOfContract as exc:
            return Assessment("out_of_contract", exc.reasons, None, False)

    def broken_rule(self, case: Case) -> str | None:
        """The first rule `case` breaks, as text with the values that break it, or None when
        it is in contract (a must-refuse case breaks the rule it must be refused for)."""
        status, reasons, _ = self.assess(case)
        return None if status == "in_contract" else reasons[0]

    def status_text(self, case: Case) -> str:
        """`in contract`, `stress: WHY`, `out of contract: RULE` or `must refuse: RULE` (RULE:
        broken_rule)."""
        status, reasons, _ = self.assess(case)
        return status_text(status, reasons, self.stress_reasons(case) if status == "in_contract" else ())

    def stress_reasons(self, case: Case) -> list[str]:
        """Why `case`, taken as in contract, is a launch no SGLang call site makes; [] when some
        call site makes it (or the op names no stress)."""
        return list(self.stress(case)) if self.stress is not None else []

    def label(self, case: Case) -> str:
        """The case's contract status as reports group findings: "in_contract", "stress",
        "out_of_contract" or "must_refuse"."""
        status, _, _ = self.assess(case)
        return STRESS if status == "in_contract" and self.stress_reasons(case) else status

    def out_of_contract(self, case: Case) -> list[str]:
        """Every reason the case is outside the contract; [] means in contract."""
        status, reasons, _ = self.assess(case)
        return reasons if status != "in_contract" else []


STRESS = "stress"


def status_text(status: str, reasons: list[str], stress=()) -> str:
    """An `assess` status and its reasons as one phrase: `in contract`, `stress: why no call
    site makes it` (an in-contract case with `stress` reasons), `out of contract: the first
    broken rule`, `must refuse: the first reason`."""
    if status == "in_contract":
        return f"stress: {stress[0]}" if stress else "in contract"
    rule = reasons[0] if reasons else "?"
    return f"{status.replace('_', ' ')}: {rule}"


# Shared checks the op modules build their predicates from -------------------------------


def dtype_and_layout_reasons(contract: Contract, case: Case) -> list[str]:
    """Missing/unknown tensors, wrong dtypes, outputs whose elements overlap."""
    reasons = []
    for a in contract.args:
        spec = case.tensors.get(a.name)
        if spec is None:
            if not a.optional:
                reasons.append(f"{a.name} is missing")
            continue
        if spec.dtype not in a.dtypes:
            reasons.append(f"{a.name} dtype {spec.dtype} not in {a.dtypes}")
        if a.role == "in" and a.name not in case.values:
            reasons.append(f"{a.name} has no values")
        if a.role == "out" and not spec.is_contiguous and not disjoint(spec) and spec.overlaps_itself():
            reasons.append(f"output {a.name} has overlapping elements")
    known = contract.arg_names
    for name in case.tensors:
        if name not in known:
            reasons.append(f"unknown tensor {name!r}")
    return reasons


def disjoint(spec: TensorSpec) -> bool:
    """True when no two elements of `spec` share a storage element, by the sorted-stride rule
    (each dimension's stride reaches past all the smaller strides' extent); False when it
    cannot tell (then `spec.overlaps_itself()` does)."""
    reach = 0  # the largest offset the dimensions taken so far reach
    for stride, n in sorted((s, n) for n, s in zip(spec.shape, spec.strides) if n > 1):
        if stride <= reach:
            return False
        reach += (n - 1) * stride
    return True


def zero_stride_reasons(case: Case, names: tuple[str, ...]) -> list[str]:
    """Stress reasons for the named tensors that repeat elements along an axis by stride 0: a
    table SGLang's callers never build (their pools and buffers are dense)."""
    out = []
    for name in names:
        spec = case.tensors.get(name)
        if spec is not None and any(s == 0 and n > 1 for s, n in zip(spec.strides, spec.shape)):
            out.append(f"{name} repeats along an axis by stride 0 (strides {spec.strides}; SGLang's tables are dense)")
    return out


def is_power_of_two(n: Any) -> bool:
    return isinstance(n, int) and not isinstance(n, bool) and n > 0 and n & (n - 1) == 0


INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


def fits_int32(x: Any) -> bool:
    arr = np.asarray(x)
    if arr.size == 0:
        return True
    return bool(arr.min() >= INT32_MIN and arr.max() <= INT32_MAX)


def written_more_than_once(size: int, starts, lens) -> np.ndarray:
    """[size] bool: the cells of a flat output that two or more of the ranges [starts[i],
    starts[i] + lens[i]) cover (each range cut to the output; an empty or negative one covers
    nothing): where programs writing one range each race."""
    count = np.zeros(size + 1, np.int64)
    for a, n in zip(np.asarray(starts, np.int64).tolist(), np.asarray(lens, np.int64).tolist()):
        lo, hi = min(max(a, 0), size), min(max(a + max(n, 0), 0), size)
        if lo < hi:
            count[lo] += 1
            count[hi] -= 1
    return np.cumsum(count)[:size] >= 2

