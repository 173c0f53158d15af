"""Shrink a failing `Case` while its finding still holds: kvfuzz's own case reducer.

A case that carries the record of the choices that made it is first shrunk by the generic
reducer (`kvfuzz.reduce`: its choices shrunk and replayed through the op's generator), then
by the per-op passes below where they shrink it further; a case without one gets the passes.

The passes: greedy delta debugging to a fixpoint. Reduction passes (batch rows first, then widths and
page counts, layouts, dtypes, values, scalars) each propose candidates built from the
current case; the first candidate the caller's `still_fails` accepts becomes the current
case and the pass starts again; a round of every pass without progress is the fixpoint.

Three rules keep it safe and finite:

* Every accepted candidate is strictly smaller in `rank` = `Case.size_key()` followed by
  the sum of the integer scalars and the sum of all tensor dimensions (so an empty tensor
  can still shrink). Those are tuples of naturals compared lexicographically,
  a well-order, so the loop ends even without the time budget.
* A candidate is never shown to `still_fails` unless it is a valid `Case` (shapes and
  values agree), every aliased (stride-0) input holds one value per storage element, and it
  sits in the same contract class as the original (in contract / out of contract / must
  refuse, with or without structural reasons). An in-contract failure therefore stays in
  contract. The moves themselves keep indices inside their tables (pool indices, token ids
  under the SWA mapping) and never narrow a table below what its lengths need, so an
  out-of-contract case does not drift further out of bounds either.
* The caller's predicate decides everything else (it compares the exact signature).

The minimizer knows nothing about targets and does not import torch or triton itself
(`still_fails` is injected); it reads the op records in `kvfuzz.ops`: an op's own passes (its
rows, widths, tables: `kvfuzz/ops/<op>/minimize.py`, the record's `passes`, generic ones
included) and the bounds of its index-valued inputs (`value_bound`, `value_escape`). This
module holds the driver, the generic passes and the editing helpers those passes share.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator, Protocol

import numpy as np

from .case import Case, TensorSpec
from .contract import INT32_MAX, INT32_MIN, Contract
from .internal import internal_error
from .ops import CONTRACTS, records

__all__ = ["Minimized", "minimize", "rank", "contract_class", "aliasing_consistent", "relayout", "tight"]

class Assessed(Protocol):
    """What the contract class is read from: a `contract.Assessment`, or a prepared case."""

    status: str
    structural: bool


Candidate = tuple[str, Callable[[], Case]]  # (log line, builder); a builder may raise: skipped
Pass = Callable[[Case], Iterator[Candidate]]

SMALL_VECTOR = 8  # 1-D length vectors up to this size also get per-element moves
OUT_OF_TIME = object()


@dataclass
class Minimized:
    case: Case
    log: list[str]  # one line per accepted reduction
    steps_tried: int  # candidates shown to still_fails
    seconds: float
    complete: bool  # False if the time budget ran out before a fixpoint
    accepted: dict[str, int] = field(default_factory=dict)  # reductions kept, per pass ("choices": the generic reducer)
    errors: list[dict] = field(default_factory=list)  # internal errors it outlived (internal.internal_error)


def rank(case: Case) -> tuple:
    """The well-order every accepted reduction strictly decreases."""
    scalars = sum(abs(int(v)) for v in case.scalars.values() if isinstance(v, (int, np.integer))
                  and not isinstance(v, bool))
    dims = sum(sum(spec.shape) for spec in case.tensors.values())  # shrinks empty tensors too
    return tuple(case.size_key()) + (scalars, dims)


METHODS = ("both", "choices", "passes")
CHOICES_SHARE = 0.5  # of the budget, at most, for the generic reducer; what it leaves goes to the passes


def minimize(case: Case, still_fails: Callable[[Case], bool], budget_s: float = 30.0,
             assess: Callable[[Case], Assessed] | None = None, method: str = "both") -> Minimized:
    """Greedy reduction of `case` while `still_fails(candidate)` holds, within `budget_s`.
    A case with recorded choices is first reduced by the generic reducer (`kvfuzz.reduce`,
    method "choices"), then by the per-op passes where they shrink it further ("passes");
    "both" runs the one and then the other. `assess` classifies a candidate for its contract
    class (default: its contract's `assessment`); a checker passes its own `prepare`, so that
    the candidate it then runs is classified, and its NumPy oracle run, once
    (check.Checker.still_fails)."""
    from .reduce import reduce  # it uses this module's rules

    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    t0 = time.monotonic()
    deadline = t0 + budget_s
    origin = case.digest()
    klass = contract_class(case, assess)
    passes = _passes(case.op) if method != "choices" else ()
    tried: set[bytes] = set()
    log: list[str] = []
    accepted: dict[str, int] = {}
    steps = 0
    current = case
    complete = False
    errors: list[dict] = []
    if method != "passes":
        share = budget_s if method == "choices" else budget_s * CHOICES_SHARE
        try:
            reduced = reduce(case, still_fails, share, admissible=lambda c: _admissible(c, klass, assess), size=rank)
        except Exception as exc:  # a defect of the reducer costs its share only: the passes still run
            errors.append(internal_error("reduce", exc))
            reduced = None
        if reduced is not None:
            current, steps = reduced.case, reduced.steps_tried
            log += reduced.log
            if reduced.log:
                accepted["choices"] = len(reduced.log)
            complete = reduced.complete and not passes

    def attempt(pass_: Pass, cur: Case) -> tuple[str, Case] | None | object:
        """The first accepted (log line, case) of one pass; None if none; OUT_OF_TIME."""
        nonlocal steps
        cur_rank = rank(cur)
        gen = pass_(cur)
        while True:
            if time.monotonic() >= deadline:
                return OUT_OF_TIME
            try:
                desc, build = next(gen)
            except StopIteration:
                return None
            except Exception:  # a pass that cannot read this case proposes nothing more
                return None
            try:
                cand = build()
            except Exception:  # inconsistent shapes/values: not a case, never shown
                continue
            if cand is None or rank(cand) >= cur_rank:
                continue
            key = cand._identity()
            if key in tried:
                continue
            tried.add(key)
            try:
                if not _admissible(cand, klass, assess):
                    continue
            except Exception:  # a candidate the rules cannot classify is not shown
                continue
            steps += 1
            try:
                ok = bool(still_fails(cand))
            except Exception:
                ok = False
            if ok:
                return desc, cand

    out_of_time = False
    while passes and not out_of_time:
        progress = False
        for pass_ in passes:
            while True:
                got = attempt(pass_, current)
                if got is OUT_OF_TIME:
                    out_of_time = True
                    break
                if got is None:
                    break
                desc, current = got
                log.append(desc)
                accepted[pass_.__name__] = accepted.get(pass_.__name__, 0) + 1
                progress = True
            if out_of_time:
                break
        if not progress and not out_of_time:
            complete = True
            break
    # the meta keeps the record of choices the generic reducer ended at (its digest names the
    # case it replays to: this one, unless a pass shrank it further)
    result = current.replace(variant=case.variant, meta={**case.meta, **current.meta, "minimized_from": origin})
    return Minimized(result, log, steps, time.monotonic() - t0, complete, accepted, errors)


# admissibility ------------------------------------------------------------------------------


def _contract(op: str) -> Contract | None:
    return CONTRACTS.get(op)


def contract_class(case: Case, assess: Callable[[Case], Assessed] | None = None) -> tuple:
    """The contract class a candidate must keep: status, and whether the shapes are at fault."""
    c = _contract(case.op)
    if c is None:
        return ("unknown",)
    a = (assess or c.assessment)(case)
    if a.status == "must_refuse":
        return ("must_refuse",)
    return (a.status, a.structural)


def _admissible(cand: Case, klass: tuple, assess: Callable[[Case], Assessed] | None = None) -> bool:
    try:
        return aliasing_consistent(cand) and contract_class(cand, assess) == klass
    except Exception:
        return False


def aliasing_consistent(case: Case) -> bool:
    """Input elements that share storage hold the same value (else the case is a lie)."""
    for name, arr in case.values.items():
        spec = case.tensors[name]
        if spec.numel <= 1 or (spec.is_contiguous and 0 not in spec.strides):
            continue
        idx = spec.element_index().ravel()
        order = np.argsort(idx, kind="stable")
        idx, vals = idx[order], np.asarray(arr).ravel()[order]
        same = idx[1:] == idx[:-1]
        if same.any() and not np.array_equal(vals[1:][same], vals[:-1][same]):
            return False
    return True


# editing helpers ------------------------------------------------------------------------------


def _edit(case: Case, specs: dict | None = None, values: dict | None = None, scalars: dict | None = None,
          drop: Iterable[str] = ()) -> Case:
    t, v = dict(case.tensors), dict(case.values)
    t.update(specs or {})
    v.update(values or {})
    for name in drop:
        t.pop(name, None)
        v.pop(name, None)
    return Case(case.op, {**case.scalars, **(scalars or {})}, t, v, variant=case.variant, meta=case.meta)


def relayout(spec: TensorSpec, shape: tuple[int, ...], dtype: str | None = None) -> TensorSpec:
    """A spec for `shape` of the same layout kind as `spec`: the same dimension order, per-
    dimension padding, step, zero strides, offset and storage slack; contiguous when the kind
    cannot be carried over."""
    dtype = dtype or spec.dtype
    shape = tuple(int(n) for n in shape)
    plain = TensorSpec.contiguous(dtype, shape)
    simple = spec.is_contiguous and spec.offset == 0 and spec.storage_size == spec.extent
    if simple or len(shape) != len(spec.shape) or 0 in spec.shape or 0 in shape:
        return plain
    order = sorted(range(len(shape)), key=lambda d: (spec.strides[d], -d))  # innermost first
    strides = [0] * len(shape)
    old_need = new_need = None
    for d in order:
        s = spec.strides[d]
        if s == 0:
            continue
        if old_need is None:
            strides[d] = s  # the step of the innermost dimension
        else:
            strides[d] = new_need + max(s - old_need, 0)  # keep the padding
        old_need, new_need = s * spec.shape[d], strides[d] * shape[d]
    try:
        new = TensorSpec(dtype, shape, tuple(strides), spec.offset)
        new = TensorSpec(dtype, shape, new.strides, spec.offset, new.extent + (spec.storage_size - spec.extent))
    except ValueError:
        return plain
    if new.overlaps_itself() and not spec.overlaps_itself():
        return plain
    return new


def tight(spec: TensorSpec) -> TensorSpec:
    """The same dimension order (and zero strides) with no padding, step, offset or slack."""
    if spec.numel == 0:
        return TensorSpec.contiguous(spec.dtype, spec.shape)
    order = sorted(range(len(spec.shape)), key=lambda d: (spec.strides[d], -d))
    strides, acc = [0] * len(spec.shape), 1
    for d in order:
        if spec.strides[d] == 0:
            continue
        strides[d] = acc
        acc *= spec.shape[d]
    return TensorSpec(spec.dtype, spec.shape, tuple(strides))


def _take(case: Case, name: str, axis: int, keep: list[int]) -> tuple[TensorSpec, np.ndarray | None]:
    """`name` restricted to indices `keep` along `axis`, layout kind kept."""
    spec = case.tensors[name]
    shape = list(spec.shape)
    shape[axis] = len(keep)
    new = relayout(spec, tuple(shape))
    vals = None
    if name in case.values:
        vals = np.take(case.values[name], np.asarray(keep, dtype=np.int64), axis=axis)
    return new, vals


def _take_many(case: Case, rows: dict[str, list[int]], axis: int = 0, scalars: dict | None = None,
               cols: dict[str, int] | None = None) -> Case:
    specs, values = {}, {}
    for name, keep in rows.items():
        if name not in case.tensors:
            continue
        specs[name], v = _take(case, name, axis, keep)
        if v is not None:
            values[name] = v
    return _edit(case, specs, values, scalars)


def _narrow(case: Case, name: str, width: int, axis: int = 1) -> Case:
    spec, vals = _take(case, name, axis, list(range(width)))
    return _edit(case, {name: spec}, {name: vals} if vals is not None else None)


def _chunks(n: int, min_keep: int = 1) -> Iterator[tuple[int, ...]]:
    """ddmin-style subsets of range(n) to drop: halves, quarters, ... single elements, then
    everything but one chunk; none that leaves fewer than min_keep. Made as they are asked for,
    each in O(n): a case of 100,000 rows gets its halves at once (listing every subset first,
    with complements built by membership tests, took hours there)."""
    seen = set()  # ("range", lo, hi) or ("but", lo, hi): one name for each subset
    k = 2
    while True:
        bounds = [(int(p[0]), int(p[-1]) + 1) for p in np.array_split(np.arange(n), min(k, n)) if len(p)]
        for lo, hi in bounds:
            if n - (hi - lo) >= min_keep and ("range", lo, hi) not in seen:
                seen.add(("range", lo, hi))
                yield tuple(range(lo, hi))
        if len(bounds) >= 3:
            for lo, hi in bounds:  # everything but [lo, hi)
                name = ("range", hi, n) if lo == 0 else ("range", 0, lo) if hi == n else ("but", lo, hi)
                if hi - lo >= min_keep and n - (hi - lo) and name not in seen:
                    seen.add(name)
                    yield tuple(range(0, lo)) + tuple(range(hi, n))
        if k >= n:
            break
        k *= 2


def _targets(n: int, lo: int, edges: Iterable[int] = ()) -> list[int]:
    """Values in [lo, n) to try for a size n, smallest first: lo, lo+1, block edges,
    then n - d/2, n - d/4, ... n - 1."""
    out = [lo, lo + 1, *sorted(edges)]
    d = n - lo
    step = d // 2
    while step >= 1:
        out.append(n - step)
        step //= 2
    out.append(n - 1)
    seen, res = set(), []
    for x in out:
        if lo <= x < n and x not in seen:
            seen.add(x)
            res.append(x)
    return res


def _block_edges(n: int, blocks: Iterable[int]) -> list[int]:
    """For each block size b: the edge just below n, and its neighbours."""
    out = []
    for b in blocks:
        k = (n - 1) // b
        if k >= 1:
            out += [k * b - 1, k * b, k * b + 1]
    return out


def _fmt(rows: tuple[int, ...]) -> str:
    if len(rows) > 2 and rows == tuple(range(rows[0], rows[-1] + 1)):
        return f"{rows[0]}..{rows[-1]}"
    return ", ".join(map(str, rows))


def _kind(spec: TensorSpec) -> str:
    if 0 in spec.strides and spec.numel > 1:
        return "broadcast"
    if not spec.is_contiguous:
        if len(spec.shape) == 2 and spec.strides[0] < spec.strides[1]:
            return "transposed"
        return f"strided {spec.strides}"
    if spec.offset:
        return f"offset {spec.offset}"
    if spec.storage_size > spec.extent:
        return f"slack {spec.storage_size - spec.extent}"
    return "contiguous"


# generic passes --------------------------------------------------------------------------------


def layout_pass(case: Case) -> Iterator[Candidate]:
    """One tensor at a time: contiguous; the same order without padding; no offset; no slack."""
    for name, spec in sorted(case.tensors.items()):
        plain = TensorSpec.contiguous(spec.dtype, spec.shape)
        if spec == plain:
            continue
        options = [(plain, f"{name}: {_kind(spec)} -> contiguous")]
        t = tight(spec)
        if t != plain and t != spec:
            options.append((t, f"{name}: {_kind(spec)} {spec.strides} -> {t.strides} without padding"))
        if spec.offset:
            s = TensorSpec(spec.dtype, spec.shape, spec.strides, 0)
            options.append((TensorSpec(s.dtype, s.shape, s.strides, 0, s.extent + spec.storage_size - spec.extent),
                            f"{name}: offset {spec.offset} -> 0"))
        if spec.storage_size > spec.extent:
            options.append((TensorSpec(spec.dtype, spec.shape, spec.strides, spec.offset),
                            f"{name}: storage slack {spec.storage_size - spec.extent} removed"))
        if not spec.is_contiguous:  # one stride at a time toward its tight value
            for d, (s, s0) in enumerate(zip(spec.strides, t.strides)):
                for s2 in sorted({s0, (s + s0) // 2, s - 1}):
                    if not s0 <= s2 < s or spec.shape[d] <= 1:
                        continue
                    strides = spec.strides[:d] + (s2,) + spec.strides[d + 1:]
                    new = TensorSpec(spec.dtype, spec.shape, strides, spec.offset)
                    if new.overlaps_itself() and not spec.overlaps_itself():
                        continue
                    new = TensorSpec(spec.dtype, spec.shape, strides, spec.offset,
                                     new.extent + spec.storage_size - spec.extent)
                    options.append((new, f"{name}: strides {spec.strides} -> {strides}"))
        for new, desc in options:
            yield desc, (lambda n=name, s=new: _edit(case, {n: s}))


def dtype_pass(case: Case) -> Iterator[Candidate]:
    """int64 -> int32 where the op's argument allows it and the values fit."""
    c = _contract(case.op)
    for name, spec in sorted(case.tensors.items()):
        if spec.dtype != "int64":
            continue
        try:
            allowed = c.arg(name).dtypes if c else ("int32", "int64")
        except KeyError:
            continue
        if "int32" not in allowed:
            continue
        vals = case.values.get(name)
        if vals is not None and vals.size and (vals.min() < INT32_MIN or vals.max() > INT32_MAX):
            continue

        def build(n=name, s=spec, v=vals):
            new = TensorSpec("int32", s.shape, s.strides, s.offset, s.storage_size)
            return _edit(case, {n: new}, {n: v.astype(np.int32)} if v is not None else None)

        yield f"{name}: int64 -> int32", build


LENGTHS = {"seq_lens", "seq_len_a", "seq_len_b", "extend_seq_lens"}  # lengths: no arange, per-element moves


def _bound(case: Case, name: str) -> int | None:
    """Exclusive upper bound of an index-valued input, so value moves stay in range (the op
    record's `value_bound`)."""
    rec = records().get(case.op)
    return rec.value_bound(case, name) if rec is not None and rec.value_bound is not None else None


def _escape(case: Case, name: str) -> int | None:
    """The smallest value of input `name` that lies past the table it indexes or measures: a
    wild index or length escapes from there on, so it shrinks toward this value and no
    further (the op record's `value_escape`; by default its `value_bound`). None where the
    input has no such table."""
    rec = records().get(case.op)
    if rec is not None and rec.value_escape is not None:
        return rec.value_escape(case, name)
    return _bound(case, name)


def _wild_moves(name: str, v: np.ndarray, escape: int) -> list[tuple[str, Callable[[], np.ndarray]]]:
    """The elements of `v` past `escape` lowered toward it: all of them to it at once, then
    (a few wild elements) each by bisection between it and its value."""
    wild = np.flatnonzero(v.ravel() > escape)
    if wild.size == 0:
        return []

    def set_to(where: np.ndarray, y: int) -> np.ndarray:
        f = v.astype(np.int64).ravel().copy()
        f[where] = y
        return f.reshape(v.shape)

    moves = [(f"{name}: {wild.size} wild value(s) -> {escape} (the first past the table)",
              lambda: set_to(wild, escape))]
    if wild.size <= SMALL_VECTOR:
        for i in wild:
            x = int(v.ravel()[i])
            for y in _targets(x, escape)[1:]:  # [0] is escape itself, tried above for them all
                moves.append((f"{name}[{np.unravel_index(i, v.shape)}]: {x} -> {y} (toward {escape})",
                              lambda i=i, y=y: set_to(np.array([i]), y)))
    return moves


def _halve(v: np.ndarray) -> np.ndarray:
    v = v.astype(np.int64)
    return np.sign(v) * (np.abs(v) // 2)


def value_pass(case: Case) -> Iterator[Candidate]:
    """One input at a time: all 0, all 1, halved, arange, parts zeroed, single lengths lowered."""
    blocks = _contract(case.op).block_sizes if _contract(case.op) else ()
    for name in sorted(case.values):
        v = case.values[name]
        if v.size == 0 or name == "strided_indices":
            continue
        bound = _bound(case, name)
        escape = _escape(case, name)
        moves = _wild_moves(name, v, escape) if escape is not None else []
        moves.append((f"{name}: all 0", lambda v=v: np.zeros_like(v)))
        if bound is None or bound > 1:
            moves.append((f"{name}: all 1", lambda v=v: np.ones_like(v)))
        moves.append((f"{name}: halved", lambda v=v: _halve(v)))
        if name not in LENGTHS:
            moves.append((f"{name}: arange",
                          lambda v=v, b=bound: (np.arange(v.size) % (b or v.size + 1)).reshape(v.shape)))
        flat_n = v.size
        if flat_n >= 2:
            for k in (2, 4):
                for part in np.array_split(np.arange(flat_n), min(k, flat_n)):
                    if len(part) == 0 or len(part) == flat_n:
                        continue

                    def zero_part(v=v, p=part):
                        f = v.astype(np.int64).ravel().copy()
                        f[p] = 0
                        return f.reshape(v.shape)

                    moves.append((f"{name}: elements {_fmt(tuple(int(i) for i in part))} -> 0", zero_part))
        if name in LENGTHS and v.ndim == 1 and v.size <= SMALL_VECTOR:
            for i, x in enumerate(int(x) for x in v):
                if x <= 0:
                    continue
                for y in _targets(x, 0, _block_edges(x, blocks)):

                    def lower(v=v, i=i, y=y):
                        f = v.astype(np.int64).copy()
                        f[i] = y
                        return f

                    moves.append((f"{name}[{i}]: {x} -> {y}", lower))
        for desc, make in moves:
            yield desc, (lambda n=name, m=make: _edit(case, values={n: m()}))


# the passes of an op ---------------------------------------------------------------------------------------

GENERIC: tuple[Pass, ...] = (layout_pass, dtype_pass, value_pass)


def _passes(op: str) -> tuple[Pass, ...]:
    """The op record's passes (kvfuzz/ops/<op>/minimize.py), else the generic ones."""
    rec = records().get(op)
    return rec.passes if rec is not None and rec.passes is not None else GENERIC
