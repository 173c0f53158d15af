"""What a case exercises (its features), and the pool of compile classes a campaign visits.

`features(case)` names the adversarial properties a case has: generic ones (a misaligned
pointer, an odd stride, each tensor's dtype, a broadcast input) and the op's own (block
edges of its kernel paths, zero sizes). A campaign counts them in its coverage record, and
`required_features(op)` lists those every campaign of a few minutes must reach.

`class_pool(op, seed, size)` draws the compile classes a campaign will visit: first a greedy
cover of every class-level feature (each dtype of each tensor, every layout kind, misaligned
pointers, odd strides, each kernel path) from many random candidates, then random ones; an
op's production-size classes cover their own features apart and take one slot in sixteen,
from the sixteenth on, so that a short campaign under the interpreter starts with small cases.
Visiting classes from a fixed pool, each for a stint of many cases, bounds the compiled
variants of a campaign by the pool's size, whatever its length, and a second run of the
same campaign compiles nothing new.
"""

from __future__ import annotations

from typing import Callable

from ..case import Case, TensorSpec
from .draw import CompileClass, RandomDraw

ODD = "odd_stride"
MISALIGNED = "misaligned"
CANDIDATES = 400  # the random classes a pool is chosen from
CLASS_SEED = "class_seed"  # the key of a pool class's RandomDraw seed in its memo


def generic_features(case: Case) -> set[str]:
    out = set()
    for name, spec in case.tensors.items():
        # specs are immutable and the cases of a stint share theirs (layouts.class_layout): each
        # one's features are remembered by identity (the entry holds the spec, so its id stays its own)
        known = _TENSOR_FEATURES.get(id(spec))
        if known is None or known[0] is not spec or known[1] != name:
            if len(_TENSOR_FEATURES) >= _KEPT:
                _TENSOR_FEATURES.clear()
            known = _TENSOR_FEATURES[id(spec)] = (spec, name, _tensor_features(name, spec))
        out |= known[2]
    return out


_TENSOR_FEATURES: dict[int, tuple[TensorSpec, str, frozenset[str]]] = {}
_KEPT = 4096


def _tensor_features(name: str, spec: TensorSpec) -> frozenset[str]:
    out = {f"dtype:{name}:{spec.dtype}"}
    if (spec.offset * spec.itemsize) % 16:
        out |= {MISALIGNED, f"{MISALIGNED}:{name}"}
    for n, s in zip(spec.shape, spec.strides):
        if n > 1 and s not in (0, 1) and s % 16:
            out |= {ODD, f"{ODD}:{name}"}
        if n > 1 and s == 0:
            out.add(f"broadcast:{name}")
    return frozenset(out)


def class_features(k: CompileClass) -> set[str]:
    """Class-level features: what one compile class fixes for all its cases."""
    out = set()
    for name, value in k:
        if name.startswith("dtype:"):
            out.add(f"{name}:{value}")
        elif name.startswith("layout:"):
            tensor = name.split(":", 1)[1]
            out.add(f"layout:{value.kind}")
            if value.offset in (1, 3, 129):
                out.add(MISALIGNED)
            if value.kind in ("padded", "step", "transposed") and (value.pad % 16 or value.kind == "step"):
                out.add(ODD)
            out.add(f"layout:{tensor}:{value.kind}")
        else:  # a constexpr-like value or an integer class: each value once
            out.add(f"{name}={value}")
    return out


def class_pool(draw_class: Callable, op: str, seed: int, size: int,
               extra_features: Callable[[CompileClass], set[str]] | None = None,
               candidates: int = CANDIDATES, keep: Callable[[CompileClass], bool] | None = None,
               path_items: tuple[str, ...] = ()) -> list[CompileClass]:
    """`size` compile classes: a greedy cover of every class feature the candidates show (and
    of the op's own combinations, `extra_features`), then random ones; the same (op, seed,
    size) gives the same pool. The cover takes each value of the kernel-path items
    (`path_items`) first. `keep`: only the candidates it accepts (`--feature`; the pool may
    then be smaller than `size`, or empty)."""
    cands = [draw_class(RandomDraw(f"{seed}:{op}:class:{i}")) for i in range(candidates)]
    for i, k in enumerate(cands):  # where each was drawn from, to record its choices (kvfuzz.reduce)
        k.memo[CLASS_SEED] = f"{seed}:{op}:class:{i}"
    if keep is not None:
        cands = [k for k in cands if keep(k)]
        if not cands:
            return []
    big = [i for i, k in enumerate(cands) if is_production(k)]
    if big and len(big) < len(cands):
        # production-size classes (tables 32K wide, lengths to 128K, batches past 256) cost the
        # interpreter seconds a case: the cover of the ordinary classes comes first, and one
        # production class in every PRODUCTION_EVERY of the pool after it, each covering what the
        # others have not
        n_big = max(1, size // PRODUCTION_EVERY)
        plain = _cover([cands[i] for i in range(len(cands)) if i not in set(big)], size - n_big,
                       extra_features, path_items)
        prod = _cover([cands[i] for i in big], n_big, extra_features, path_items)
        pool, at = [], 0
        for k in plain:
            pool.append(k)
            if len(pool) % PRODUCTION_EVERY == PRODUCTION_EVERY - 1 and at < len(prod):
                pool.append(prod[at])
                at += 1
        return (pool + prod[at:])[:size]
    return _cover(cands, size, extra_features, path_items)


# size classes and layouts that degenerate a dimension: one row, zero pages, a table repeated by stride 0
DEGENERATE = ("one", "zero")
STRIDED = ("padded", "step", "transposed")  # layouts whose elements are not back to back
PRODUCTION_EVERY = 16  # the pool's share of production-size classes, and where they sit in it


def is_production(k: CompileClass) -> bool:
    """A production-size class (an op generator's `size: production`)."""
    try:
        return k.get("size") == "production"
    except (AttributeError, TypeError):
        return False


def _cover(cands: list[CompileClass], size: int,
           extra_features: Callable[[CompileClass], set[str]] | None,
           path_items: tuple[str, ...] = ()) -> list[CompileClass]:
    """`size` of `cands`: a greedy cover of their class features, then the rest in order."""
    extra = [extra_features(k) if extra_features else set() for k in cands]
    paths = [{f"{name}={k.get(name)}" for name in path_items} for k in cands]
    feats = [class_features(k) | e | p for k, e, p in zip(cands, extra, paths)]
    uncovered = set().union(*feats)

    degenerate = [sum(v in DEGENERATE or getattr(v, "kind", None) == "broadcast" for _, v in k) for k in cands]
    strided = [sum(getattr(v, "kind", None) in STRIDED for _, v in k) for k in cands]

    def gain(i: int) -> tuple[int, int, int]:
        # each kernel path first (a defect of one path shows in its first stint: the sooner a
        # campaign reaches every path, the sooner it finds one), each in a typical class (a
        # one-row pool hides a wrong row stride, a zero-page batch a wrong gather) with the most
        # strided tensors (a kernel or wrapper that assumes contiguity fails there), then the
        # op's combinations (they hold its block edges), then the rest
        new_paths = len(paths[i] & uncovered)
        return (new_paths, -degenerate[i] if new_paths else 0, strided[i] if new_paths else 0,
                100 * len(extra[i] & uncovered) + len(feats[i] & uncovered))
    pool: list[CompileClass] = []
    chosen: set[int] = set()
    while uncovered and len(pool) < size:
        best = max((i for i in range(len(cands)) if i not in chosen), key=gain)
        if not feats[best] & uncovered:
            break
        chosen.add(best)
        pool.append(cands[best])
        uncovered -= feats[best]
    for i in range(len(cands)):
        if len(pool) >= size:
            break
        if i not in chosen:
            pool.append(cands[i])
    return pool
