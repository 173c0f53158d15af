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
(`still_fails` is injected); it reads the op contracts in `kvfuzz.ops`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator

import numpy as np

from .case import Case, TensorSpec
from .contract import INT32_MAX, INT32_MIN, Contract
from .ops import CONTRACTS

__all__ = ["Minimized", "minimize", "rank", "contract_class", "aliasing_consistent", "relayout", "tight"]

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


def rank(case: Case) -> tuple:
    """The well-order every accepted reduction strictly decreases."""
    scalars = sum(abs(int(v)) for v in case.scalars.values() if isinstance(v, (int, np.integer))
                  and not isinstance(v, bool))
    dims = sum(sum(spec.shape) for spec in case.tensors.values())  # shrinks empty tensors too
    return tuple(case.size_key()) + (scalars, dims)


METHODS = ("both", "choices", "passes")
CHOICES_SHARE = 0.5  # of the budget, at most, for the generic reducer; what it leaves goes to the passes


def minimize(case: Case, still_fails: Callable[[Case], bool], budget_s: float = 30.0,
             method: str = "both") -> Minimized:
    """Greedy reduction of `case` while `still_fails(candidate)` holds, within `budget_s`.
    A case with recorded choices is first reduced by the generic reducer (`kvfuzz.reduce`,
    method "choices"), then by the per-op passes where they shrink it further ("passes");
    "both" runs the one and then the other."""
    from .reduce import reduce  # it uses this module's rules

    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    t0 = time.monotonic()
    deadline = t0 + budget_s
    origin = case.digest()
    klass = contract_class(case)
    passes = _passes(case.op) if method != "choices" else ()
    tried: set[bytes] = set()
    log: list[str] = []
    accepted: dict[str, int] = {}
    steps = 0
    current = case
    complete = False
    if method != "passes":
        share = budget_s if method == "choices" else budget_s * CHOICES_SHARE
        reduced = reduce(case, still_fails, share, admissible=lambda c: _admissible(c, klass), size=rank)
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
            if not _admissible(cand, klass):
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
    return Minimized(result, log, steps, time.monotonic() - t0, complete, accepted)


# admissibility ------------------------------------------------------------------------------


def _contract(op: str) -> Contract | None:
    return CONTRACTS.get(op)


def contract_class(case: Case) -> tuple:
    """The contract class a candidate must keep: status, and whether the shapes are at fault."""
    c = _contract(case.op)
    if c is None:
        return ("unknown",)
    if c.must_refuse(case):
        return ("must_refuse",)
    structural = bool(c.structural_reasons(case))
    return ("out_of_contract" if c.out_of_contract(case) else "in_contract", structural)


def _admissible(cand: Case, klass: tuple) -> bool:
    try:
        return aliasing_consistent(cand) and contract_class(cand) == klass
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
    """Exclusive upper bound of an index-valued input, so value moves stay in range."""
    t = case.tensors
    if case.op in ("decode_metadata", "draft_extend_metadata"):
        if name == "req_pool_indices":
            return t["req_to_token"].shape[0]
        if name in ("req_to_token", "out_cache_loc") and "full_to_swa_index_mapping" in t:
            return t["full_to_swa_index_mapping"].shape[0]
        if name == "req_to_token" and ("full_v2p" in t or "swa_v2p" in t):  # tokens on the tables' pages
            ps = case.scalars.get("page_size")
            if isinstance(ps, int) and ps > 0:
                return min(t[n].shape[0] for n in ("full_v2p", "swa_v2p") if n in t) * ps
    return None


def _escape(case: Case, name: str) -> int | None:
    """The smallest value of input `name` that lies past the table it indexes or measures: a
    wild index or length escapes from there on, so it shrinks toward this value and no
    further. None where the input has no such table."""
    if case.op == "swa_spec_page_table" and name in SPEC_TABLE_OF:
        return case.tensors[SPEC_TABLE_OF[name]].shape[1] + 1  # la in [0, WA], lb in [0, WB]
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


# decode_metadata ------------------------------------------------------------------------------

DECODE_BATCH = ("cache_seqlens_int32", "cu_seqlens_k", "page_table", "swa_page_table", "req_pool_indices", "seq_lens")


def _batch(case: Case) -> int:
    return case.tensors["cache_seqlens_int32"].shape[0]


def decode_rows_pass(case: Case) -> Iterator[Candidate]:
    """Drop batch rows from every batch-indexed tensor: halves first, then single rows."""
    B = _batch(case)
    for drop in _chunks(B):
        dropped = frozenset(drop)
        rows = {}
        for name in DECODE_BATCH:
            if name in case.tensors:
                n0 = case.tensors[name].shape[0]
                rows[name] = [i for i in range(n0) if i not in dropped]
        word = "row" if len(drop) == 1 else "rows"
        yield (f"dropped batch {word} {_fmt(drop)} (B {B} -> {B - len(drop)})",
               lambda rows=rows: _take_many(case, rows))


def decode_swa_pass(case: Case) -> Iterator[Candidate]:
    if {"swa_page_table", "full_to_swa_index_mapping", "swa_v2p", "swa_src_table"} & set(case.tensors):
        yield "dropped SWA (swa_page_table, its mapping, swa_v2p or swa_src_table)", \
            lambda: _edit(case, drop=("swa_page_table", "full_to_swa_index_mapping", "swa_v2p", "swa_src_table"))


def decode_unified_pass(case: Case) -> Iterator[Candidate]:
    """SGLang 0.5.17-0.5.23's arguments off: full_v2p dropped, the flags False, the multiplier 1."""
    if "full_v2p" in case.tensors:
        yield "dropped full_v2p", lambda: _edit(case, drop=("full_v2p",))
    for name in ("skip_page_table", "zero_tail", "src_is_read_table"):
        if case.scalars.get(name) is True:
            yield f"{name} -> False", (lambda n=name: case.with_scalars(**{n: False}))
    mult = case.scalars.get("kernel_page_multiplier")
    if isinstance(mult, int) and mult > 1:
        yield f"kernel_page_multiplier {mult} -> 1", lambda: case.with_scalars(kernel_page_multiplier=1)


def decode_pages_pass(case: Case) -> Iterator[Candidate]:
    """max_seq_pages smaller; lengths clipped to the new page count, or left alone."""
    s = case.scalars
    P, ps, delta = s["max_seq_pages"], s["page_size"], s["seq_len_delta"]
    if not isinstance(P, int) or P <= 0 or not isinstance(ps, int) or ps <= 0:
        return
    c = _contract(case.op)
    lens = case.values["seq_lens"].astype(np.int64)
    for p2 in _targets(P, 0, _block_edges(P, c.block_sizes if c else ())):
        top = max(p2 * ps - delta, 0)
        if lens.size and lens.max() > top and lens.min() >= 0:
            clipped = np.minimum(lens, top)
            yield (f"max_seq_pages {P} -> {p2} (seq_lens clipped to {top})",
                   lambda p2=p2, v=clipped: _edit(case, values={"seq_lens": v}, scalars={"max_seq_pages": p2}))
        yield f"max_seq_pages {P} -> {p2}", lambda p2=p2: _edit(case, scalars={"max_seq_pages": p2})


def _narrow(case: Case, name: str, width: int, axis: int = 1) -> Case:
    spec, vals = _take(case, name, axis, list(range(width)))
    return _edit(case, {name: spec}, {name: vals} if vals is not None else None)


def decode_widths_pass(case: Case) -> Iterator[Candidate]:
    """page_table / swa_page_table down to max_seq_pages; req_to_token down to what P needs;
    strided_indices down to P."""
    s, t = case.scalars, case.tensors
    P, ps = s["max_seq_pages"], s["page_size"]
    if not isinstance(P, int) or not isinstance(ps, int) or P < 0 or ps <= 0:
        return
    for name in ("page_table", "swa_page_table"):
        if name in t and len(t[name].shape) == 2:
            W = t[name].shape[1]
            for w in _targets(W, P):
                yield f"{name} width {W} -> {w}", (lambda n=name, w=w: _narrow(case, n, w))
    rtt = t.get("req_to_token")
    if rtt is not None and len(rtt.shape) == 2:
        T = rtt.shape[1]
        need = (P - 1) * ps + 1 if P > 0 else 0
        for w in _targets(T, need, [P * ps]):

            def build(w=w):
                c2 = _narrow(case, "req_to_token", w)
                si = case.tensors["strided_indices"]
                keep = min(si.shape[0], -(-w // ps))
                return _narrow(c2, "strided_indices", keep, axis=0) if keep < si.shape[0] else c2

            yield f"req_to_token width {T} -> {w}", build
    si = t.get("strided_indices")
    if si is not None and len(si.shape) == 1:
        for w in _targets(si.shape[0], P):
            yield (f"strided_indices length {si.shape[0]} -> {w}",
                   lambda w=w: _narrow(case, "strided_indices", w, axis=0))


def _read_tokens(case: Case) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(pool rows, columns, token ids) the kernel reads, or None if any read is out of range."""
    s, v = case.scalars, case.values
    P, ps = s["max_seq_pages"], s["page_size"]
    rtt, pool = v["req_to_token"], v["req_pool_indices"].astype(np.int64)
    if P <= 0:
        return pool, np.zeros(0, np.int64), np.zeros((pool.size, 0), np.int64)
    cols = np.arange(P, dtype=np.int64) * ps
    if pool.size and (pool.min() < 0 or pool.max() >= rtt.shape[0]) or cols[-1] >= rtt.shape[1]:
        return None
    return pool, cols, rtt[pool[:, None], cols[None, :]].astype(np.int64)


def decode_tables_pass(case: Case) -> Iterator[Candidate]:
    """Unused req_to_token rows dropped (pool indices remapped); unread token cells zeroed;
    the SWA mapping shrunk to the largest token id read + 1, a v2p table to the largest page read + 1."""
    t, v = case.tensors, case.values
    if not isinstance(case.scalars.get("max_seq_pages"), int) or not isinstance(case.scalars.get("page_size"), int):
        return
    read = _read_tokens(case)
    if read is None:
        yield from _wild_pool_rows(case)
        return
    pool, cols, tokens = read
    R = t["req_to_token"].shape[0]
    used = np.unique(pool)
    if used.size and used.size < R and pool.min() >= 0 and pool.max() < R:

        def drop_rows():
            c2 = _take_many(case, {"req_to_token": [int(i) for i in used]})
            spec = case.tensors["req_pool_indices"]
            return _edit(c2, {"req_pool_indices": spec},
                         {"req_pool_indices": np.searchsorted(used, pool).astype(np.int64)})

        yield f"req_to_token rows {R} -> {used.size} (unused rows dropped, req_pool_indices remapped)", drop_rows
    rtt = v["req_to_token"]
    mask = np.zeros(rtt.shape, bool)
    if cols.size:
        mask[pool[:, None], cols[None, :]] = True
    if (rtt[~mask] != 0).any():

        def zero_unread():
            f = rtt.astype(np.int64).copy()
            f[~mask] = 0
            return _edit(case, values={"req_to_token": f})

        yield "req_to_token: cells never read -> 0", zero_unread
    for name in ("full_v2p", "swa_v2p"):
        if name in t and len(t[name].shape) == 1 and not (tokens.size and tokens.min() < 0):
            V, lo = t[name].shape[0], max(int(tokens.max()) // case.scalars["page_size"] + 1 if tokens.size else 1, 1)
            for n in _targets(V, lo):
                yield f"{name} length {V} -> {n}", (lambda n=n, name=name: _narrow(case, name, n, axis=0))
    if "full_to_swa_index_mapping" in t and len(t["full_to_swa_index_mapping"].shape) == 1:
        if tokens.size and tokens.min() < 0:
            return
        N = t["full_to_swa_index_mapping"].shape[0]
        wild = tokens >= N  # token ids past the mapping (out of contract): they move with its end
        lo = max(int(tokens[~wild].max(initial=-1)) + 1, 1)
        for n in _targets(N, lo):
            if not wild.any():
                yield (f"full_to_swa_index_mapping length {N} -> {n}",
                       lambda n=n: _narrow(case, "full_to_swa_index_mapping", n, axis=0))
                continue

            def shorter(n=n):
                rtt = v["req_to_token"].astype(np.int64)
                moved = np.where(rtt >= N, rtt - (N - n), rtt)
                return _edit(_narrow(case, "full_to_swa_index_mapping", n, axis=0), values={"req_to_token": moved})

            yield f"full_to_swa_index_mapping length {N} -> {n}, its wild token ids {N - n} lower (as far past it)", shorter


def _wild_pool_rows(case: Case) -> Iterator[Candidate]:
    """Pool indices past req_to_token's rows (out of contract): the rows no index reads are
    dropped, the indices remapped, and each wild one stays as far past the new last row."""
    R = case.tensors["req_to_token"].shape[0]
    pool = case.values["req_pool_indices"].astype(np.int64)
    inside = (pool >= 0) & (pool < R)
    used = np.unique(pool[inside])
    if inside.all() or used.size >= R:
        return

    def drop_rows():
        c2 = _take_many(case, {"req_to_token": [int(i) for i in used]})
        moved = np.where(inside, np.searchsorted(used, pool), np.where(pool >= R, pool - (R - used.size), pool))
        return _edit(c2, values={"req_pool_indices": moved})

    yield (f"req_to_token rows {R} -> {used.size} (unused rows dropped, req_pool_indices remapped, "
           "the wild ones as far past the end)"), drop_rows


def decode_page_size_pass(case: Case) -> Iterator[Candidate]:
    """page_size toward 1: req_to_token keeps the columns the kernel reads (every k-th)."""
    s = case.scalars
    ps = s["page_size"]
    if not isinstance(ps, int) or ps <= 1 or ps & (ps - 1):
        return
    for ps2 in sorted({1, ps // 2}):
        k = ps // ps2

        def build(ps2=ps2, k=k):
            rtt = case.values["req_to_token"]
            keep = list(range(0, rtt.shape[1], k))
            c2 = _take_many(case, {"req_to_token": keep}, axis=1, scalars={"page_size": ps2})
            T2 = len(keep)
            si = case.tensors["strided_indices"]
            n = -(-T2 // ps2)
            spec = relayout(si, (n,))
            return _edit(c2, {"strided_indices": spec}, {"strided_indices": np.arange(0, T2, ps2)[:n]})

        yield f"page_size {ps} -> {ps2}", build


def decode_scalars_pass(case: Case) -> Iterator[Candidate]:
    d = case.scalars.get("seq_len_delta")
    if isinstance(d, int) and d > 0:
        for d2 in _targets(d, 0):
            yield f"seq_len_delta {d} -> {d2}", (lambda d2=d2: case.with_scalars(seq_len_delta=d2))


# swa_spec_page_table ---------------------------------------------------------------------------

SPEC_ROWS_M = ("page_table_dst", "page_table_b", "seq_len_b")
SPEC_TABLE_OF = {"seq_len_a": "page_table_a", "seq_len_b": "page_table_b"}  # a length and the table it measures
SPEC_ROWS_BS = ("page_table_a", "seq_len_a")


def spec_rows_pass(case: Case) -> Iterator[Candidate]:
    """Drop requests (A row, and its R expanded rows), then fewer draft tokens R."""
    t, R = case.tensors, case.scalars["speculative_num_draft_tokens"]
    if not isinstance(R, int) or R < 1:
        return
    bs = t["seq_len_a"].shape[0]
    for drop in _chunks(bs):
        dropped = frozenset(drop)
        rows = {n: [i for i in range(t[n].shape[0]) if i not in dropped] for n in SPEC_ROWS_BS}
        rows.update({n: [m for m in range(t[n].shape[0]) if m // R not in dropped] for n in SPEC_ROWS_M})
        word = "request" if len(drop) == 1 else "requests"
        yield f"dropped {word} {_fmt(drop)} (bs {bs} -> {bs - len(drop)})", (lambda rows=rows: _take_many(case, rows))
    for r2 in _targets(R, 1):
        for where, sel in (("first", range(r2)), ("last", range(R - r2, R))):
            sel = set(sel)
            rows = {n: [m for m in range(t[n].shape[0]) if m % R in sel] for n in SPEC_ROWS_M}
            yield (f"speculative_num_draft_tokens {R} -> {r2} (kept the {where} {r2} rows of each request)",
                   lambda rows=rows, r2=r2: _take_many(case, rows, scalars={"speculative_num_draft_tokens": r2}))


def spec_widths_pass(case: Case) -> Iterator[Candidate]:
    """A, B and dst no wider than the lengths need (never narrower: no new overflow)."""
    t, v, R = case.tensors, case.values, case.scalars["speculative_num_draft_tokens"]
    la, lb = v["seq_len_a"].astype(np.int64), v["seq_len_b"].astype(np.int64)
    needs = {"page_table_a": int(la.max(initial=0)), "page_table_b": int(lb.max(initial=0))}
    rows = min(la.size * R, lb.size, t["page_table_dst"].shape[0])
    m = np.arange(rows)
    needs["page_table_dst"] = int((la[m // R] + lb[m]).max(initial=0)) if rows else 0
    for name, need in needs.items():
        W = t[name].shape[1]
        for w in _targets(W, max(need, 0)):
            yield f"{name} width {W} -> {w}", (lambda n=name, w=w: _narrow(case, n, w))
    for length, name in SPEC_TABLE_OF.items():  # a table past which a length runs: narrower, the length with it
        W, lens = t[name].shape[1], v[length].astype(np.int64)
        wild = lens > W
        if not wild.any():
            continue
        for w in _targets(W, max(int(lens[~wild].max(initial=0)), 0)):

            def narrow(name=name, length=length, w=w, W=W, lens=lens, wild=wild):
                return _edit(_narrow(case, name, w), values={length: np.where(wild, lens - (W - w), lens)})

            yield f"{name} width {W} -> {w}, its wild {length} {W - w} lower (as far past it)", narrow


# num_kv_splits ----------------------------------------------------------------------------------


def splits_rows_pass(case: Case) -> Iterator[Candidate]:
    """Drop sequences (seq_lens, their num_group outputs, num_seq), then fewer groups."""
    t, s = case.tensors, case.scalars
    G, ns = s.get("num_group"), s.get("num_seq")
    if not isinstance(G, int) or G < 1 or not isinstance(ns, int):
        return
    n = t["seq_lens"].shape[0]
    for drop in _chunks(n):
        dropped = frozenset(drop)
        rows = {"seq_lens": [i for i in range(n) if i not in dropped],
                "num_kv_splits": [j for j in range(t["num_kv_splits"].shape[0]) if j // G not in dropped]}
        word = "sequence" if len(drop) == 1 else "sequences"
        yield (f"dropped {word} {_fmt(drop)} (num_seq {ns} -> {ns - len(drop)})",
               lambda rows=rows, d=len(drop): _take_many(case, rows, scalars={"num_seq": ns - d}))
    for g2 in _targets(G, 1):
        rows = {"num_kv_splits": [j for j in range(t["num_kv_splits"].shape[0]) if j % G < g2]}
        yield f"num_group {G} -> {g2}", (lambda rows=rows, g2=g2: _take_many(case, rows, scalars={"num_group": g2}))


def splits_scalars_pass(case: Case) -> Iterator[Candidate]:
    for name in ("num_head", "num_kv_head", "max_kv_splits", "device_core_count"):
        x = case.scalars.get(name)
        if isinstance(x, int) and x > 1:
            for y in _targets(x, 1):
                yield f"{name} {x} -> {y}", (lambda n=name, y=y: case.with_scalars(**{n: y}))


# draft_extend_metadata ----------------------------------------------------------------------------

DRAFT_BATCH = ("cache_seqlens_int32", "page_table", "swa_page_table", "req_pool_indices", "seq_lens",
               "extend_seq_lens")
DRAFT_SWA = ("full_to_swa_index_mapping", "swa_page_table", "out_cache_loc", "swa_out_cache_loc")


def draft_rows_pass(case: Case) -> Iterator[Candidate]:
    """Drop batch rows: from every batch-indexed tensor, both prefix sums, and each dropped
    row's block of write locations."""
    t, B = case.tensors, _batch(case)
    tpr = t["out_cache_loc"].shape[0] // B if "out_cache_loc" in t and B else 0
    for drop in _chunks(B):
        dropped = frozenset(drop)
        keep = [i for i in range(B) if i not in dropped]
        rows = {name: keep for name in DRAFT_BATCH if name in t}
        rows |= {name: list(range(len(keep) + 1)) for name in ("cu_seqlens_k", "cu_seqlens_q")}
        if tpr:
            rows["out_cache_loc"] = rows["swa_out_cache_loc"] = [i * tpr + j for i in keep for j in range(tpr)]
        word = "row" if len(drop) == 1 else "rows"
        yield (f"dropped batch {word} {_fmt(drop)} (B {B} -> {B - len(drop)})",
               lambda rows=rows: _take_many(case, rows))


def draft_swa_pass(case: Case) -> Iterator[Candidate]:
    if any(name in case.tensors for name in DRAFT_SWA):
        yield f"dropped SWA ({', '.join(DRAFT_SWA)})", lambda: _edit(case, drop=DRAFT_SWA)


def draft_widths_pass(case: Case) -> Iterator[Candidate]:
    """The page tables (together: SGLang wants one shape) down to the live pages; req_to_token
    down to the tokens they read."""
    t, ps = case.tensors, case.scalars.get("page_size")
    if not isinstance(ps, int) or ps <= 0 or len(t["page_table"].shape) != 2:
        return
    W = t["page_table"].shape[1]
    lens = case.values["seq_lens"].astype(np.int64)
    need = int(np.clip(-(-lens // ps), 0, W).max()) if lens.size else 0
    c = _contract(case.op)
    for w in _targets(W, need, _block_edges(W, c.block_sizes if c else ())):

        def narrow(w=w):
            out = _narrow(case, "page_table", w)
            return _narrow(out, "swa_page_table", w) if "swa_page_table" in t else out

        yield f"page tables width {W} -> {w}", narrow
    rtt = t["req_to_token"]
    if len(rtt.shape) == 2:
        for w in _targets(rtt.shape[1], max((need - 1) * ps + 1, 1)):
            yield f"req_to_token width {rtt.shape[1]} -> {w}", (lambda w=w: _narrow(case, "req_to_token", w))


# q8kv8_topk_length --------------------------------------------------------------------------------


def topk_rows_pass(case: Case) -> Iterator[Candidate]:
    """Drop rows of indices with their lengths; then narrow the rows (the widths SGLang's block
    choice turns on first)."""
    spec = case.tensors["indices"]
    if len(spec.shape) != 2 or case.tensors["topk_length"].shape != spec.shape[:1]:
        return
    S, K = spec.shape
    for drop in _chunks(S):
        dropped = frozenset(drop)
        keep = [i for i in range(S) if i not in dropped]
        yield (f"dropped row{'s' if len(drop) > 1 else ''} {_fmt(drop)} (S {S} -> {len(keep)})",
               lambda keep=keep: _take_many(case, {"indices": keep, "topk_length": keep}))
    for w in _targets(K, 0, [b for b in (128, 256, 512) if b < K]):
        yield f"indices width {K} -> {w}", (lambda w=w: _narrow(case, "indices", w))


# registry ---------------------------------------------------------------------------------------

GENERIC: tuple[Pass, ...] = (layout_pass, dtype_pass, value_pass)
PASSES: dict[str, tuple[Pass, ...]] = {
    "decode_metadata": (decode_rows_pass, decode_swa_pass, decode_unified_pass, decode_pages_pass,
                        decode_widths_pass, decode_tables_pass, decode_page_size_pass, *GENERIC, decode_scalars_pass),
    "swa_spec_page_table": (spec_rows_pass, spec_widths_pass, *GENERIC),
    "num_kv_splits": (splits_rows_pass, *GENERIC, splits_scalars_pass),
    "draft_extend_metadata": (draft_rows_pass, draft_swa_pass, draft_widths_pass, *GENERIC),
    "q8kv8_topk_length": (topk_rows_pass, *GENERIC),
}


def _passes(op: str) -> tuple[Pass, ...]:
    return PASSES.get(op, GENERIC)
