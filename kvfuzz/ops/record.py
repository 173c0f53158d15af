"""`OpRecord`: everything kvfuzz knows about one op, in one object (modelled on PyTorch's OpInfo).

An op lives in one folder, `kvfuzz/ops/<op>/` (or in any module named in `KVFUZZ_OPS`), whose
`RECORD` names its contract (with its NumPy and torch oracles), its generator, how its entry
point is called in each SGLang API generation, the contract variant of each release, its
builtin kernel, and the optional hooks the minimizer and the case printers use. Generic code
walks the records (`kvfuzz.ops.records()`); nothing else is keyed by an op's name.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable, Optional

from ..case import Case
from ..contract import Contract


# how a tensor's rows stack in a packed launch (PackSpec)
ROWS, PREFIX, POOL = "rows", "prefix", "pool"
# RUNNING: an output holding 0 and then the running sum over the rows (bs + 1 entries): stacked as
# PREFIX, so a packed case's entries hold its own sums plus every earlier case's total.
# SHARED: an input every row reads whole: packed cases must hold equal values, the launch one copy.
RUNNING, SHARED = "running", "shared"


@dataclass(frozen=True)
class ShortCall:
    """How a short repro script calls the entry point for one case: its lines, the standard
    modules they use, and the helpers they call (`short_repro.HELPERS`: "swa_pool")."""

    lines: tuple[str, ...]
    imports: tuple[str, ...] = ()
    helpers: tuple[str, ...] = ()


@dataclass(frozen=True)
class PackSpec:
    """How an op's cases pack into one launch (kvfuzz/packing.py): each tensor's kind (ROWS: its
    first dimension is the request row; PREFIX: a prefix sum over the rows; RUNNING: an output
    running sum over the rows; POOL: its first dimension is indexed by values; SHARED: read whole
    by every row), the inputs whose values index a POOL tensor's rows (an
    entry whose tensors a case lacks is skipped), those of them whose negative values mean
    "none" (the kernel masks them: kept as they are, not offset), and the op's own reason a
    case cannot pack."""

    kinds: tuple[tuple[str, str], ...]  # (tensor, ROWS | PREFIX | RUNNING | POOL | SHARED)
    indexes: tuple[tuple[str, str], ...] = ()  # (input, POOL tensor whose first dimension its values index)
    keep_negative: tuple[str, ...] = ()  # index inputs whose negative values are a masked "none"
    # (index input, scalar): one unit of the input's value is that many rows of its pool (a
    # page-granular table's page p reads a mapping at p * entry_page_size + offset)
    units: tuple[tuple[str, str], ...] = ()
    # (POOL tensor, scalar): its blocks start at a multiple of the scalar (a block start is the
    # move of the ids that index it: a multiple of page_size moves token ids by whole pages)
    aligned: tuple[tuple[str, str], ...] = ()
    # (output, index input, scalar): an output whose cells hold the input's values // scalar
    # (decode's page_table, token ids // page_size): a case's packed cells move with the input,
    # by its move // scalar, in the cells `moved_cells(case, output)` names (a bool mask of the
    # case's own output; the others hold values of their own, a zeroed tail)
    moved: tuple[tuple[str, str, str], ...] = ()
    moved_cells: Callable[[Case, str], Any] | None = None
    refuse: Callable[[Case], str | None] | None = None  # why a case cannot pack (the op's own rule), or None
    # (device type, K): cases per launch a campaign packs there without --pack, where a GPU bench
    # measured packing to pay (docs/performance.md); elsewhere one launch per case
    default: tuple[tuple[str, int], ...] = ()

    def kind(self, name: str) -> str | None:
        return dict(self.kinds).get(name)


@dataclass(frozen=True)
class NoPacking:
    """An op whose cases never pack, and why (its contract: rows that interact)."""

    why: str


@dataclass(frozen=True)
class OpRecord:
    name: str
    contract: Contract  # arguments, cells, variants; its numpy_ref and torch_ref are the oracles
    generator: Any  # strategies.OpGenerator: compile classes, cases, violations, features
    call: Any  # targets.calls.OpCall: what kvfuzz can pass to the entry point
    generations: tuple  # targets.calls.Generation per SGLang API generation, oldest first
    builtin: str  # "module:attribute" of kvfuzz's own kernel for the op (the `builtin` target)
    # the SGLang release's kernel file holding the entry point, by its name in kvfuzz's cache
    # (`sglang-X/<source_file>`): what a `sglang==X` target looks the entry up in, and which file's
    # identity groups releases for the op's cases (targets.releases.file_release, kvfuzz bisect)
    source_file: str = "metadata.py"
    release_variants: tuple[tuple[str, str], ...] = ()  # (first release, variant), oldest first
    builtin_variant: str | None = None  # the variant judging the builtin kernel (default: as any target)
    # minimizer: the op's passes in order, generic ones included (None: minimize.GENERIC)
    passes: Optional[tuple[Callable, ...]] = None
    # minimizer: (case, input name) -> exclusive bound of an index-valued input, or None
    value_bound: Optional[Callable[[Case, str], Optional[int]]] = None
    # minimizer: (case, input name) -> where a wild index or length escapes its table (None: value_bound)
    value_escape: Optional[Callable[[Case, str], Optional[int]]] = None
    # show: (case, output rows) -> input name -> the first-dimension indices those rows read
    related_rows: Optional[Callable[[Case, list[int]], dict[str, list[int]]]] = None
    # show: (case, output tensor, index) -> the input cells that output cell reads, in words
    cell_sources: Optional[Callable[[Case, str, list[int]], Optional[str]]] = None
    # short repro: (case, entry name) -> ShortCall (None: every argument by keyword)
    short_call: Optional[Callable[[Case, str], ShortCall]] = None
    # short repro: case -> why a short script cannot build its call (None: it can)
    short_refuses: Optional[Callable[[Case], Optional[str]]] = None
    # the full repro script: modules it embeds for the op (kvfuzz.repro.standalone_modules), which
    # bind CALL and GENERATIONS (the op's call.py); empty: the op has no full repro script
    standalone: tuple[str, ...] = ()
    # where the op sorts among the package's ops in listings and campaigns (ties: by name); the ops
    # of KVFUZZ_OPS follow them in the order named there
    order: int = 100
    # packed launches (kvfuzz/packing.py): how k cases share one launch (PackSpec), or why they
    # never do (NoPacking: rows that interact); None: not packed
    packing: "PackSpec | NoPacking | None" = None

    def __post_init__(self):
        names = {self.name, self.contract.name, getattr(self.generator, "op", self.name)}
        if len(names) != 1:
            raise ValueError(f"op record {self.name!r}: its contract and generator name {sorted(names)}")

    @property
    def numpy_ref(self) -> Callable:
        return self.contract.numpy_ref

    @property
    def torch_ref(self) -> Callable:
        return self.contract.torch_ref

    def required_features(self) -> set[str]:
        """Features every campaign of a few minutes must exercise for the op."""
        return self.generator.required()

    def bind(self, entry: Any, where: str = "target") -> Any:
        """How `entry` is called for this op (targets.calls.Binding), or TargetLoadError."""
        from ..targets.calls import bind

        return bind(self.name, entry, self.call, self.generations, where)

    def builtin_kernel(self) -> Any:
        """kvfuzz's own kernel for the op, imported now (after the device is selected)."""
        module, _, attr = self.builtin.partition(":")
        return getattr(importlib.import_module(module), attr)
