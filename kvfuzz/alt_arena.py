"""The repeated launches' arena built where the batch runs, from the batch's first copy there.

A batch's repeated launches run a second time from their alternate images
(`materialize.refill`: the alternate fill everywhere, then every tensor's elements as the
image has them). Built on the host, that image is a second batch-sized copy to the device and a
host pass over every byte of it; on a GPU it was about a third of a worker's time a case. Here
the device writes it: the fill's words from their positions (`fills.alt_words`, each launch's
words counted from its base, as `refill` counts them) and then the elements' words copied from
the batch's first copy, before any launch has run on it. The bytes are the host's, word for
word (tests/test_alt_arena.py); bytes between the repeated launches hold fill no launch reads.

Every dtype kvfuzz lays out is 4 or 8 bytes wide and every region starts on an `ALIGN`
boundary, so an element is whole 32-bit words: the copy works on words, a run of them per
tensor (or per innermost row), gathered in one indexed copy for the batch. A tensor whose
innermost stride is not 1 (a transposed table) would need a run per element, as much metadata
as elements: it is copied through strided views of its dtype instead, one copy each.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from .fills import alt_words
from .materialize import Layout

_ITEM = {"int32": 1, "int64": 2}  # words an element spans


def fits(batch) -> bool:
    """Whether every repeated launch can be built here: word-aligned, of dtypes in words."""
    return all(b.base % 4 == 0 and b.size % 4 == 0 and
               all(r[1] in _ITEM and r[2] % 4 == 0 for r in (b.fill or b.regions))
               for b in batch if b.repeat and b.run)


@lru_cache(maxsize=4096)
def element_runs(layout: Layout) -> tuple[np.ndarray, np.ndarray] | None:
    """(first word, words) of each run of one tensor's element words, counted from its
    launch's base: its whole storage where it has no gaps, else a run per innermost row where
    the innermost stride is 1; None where the innermost stride is not 1 (a run per element
    would be as long as the elements: such a tensor is copied through strided views instead,
    `_copy_strided`). Cached: a class's layouts repeat."""
    _, dtype, start, nbytes, shape, strides, offset = layout
    item = _ITEM[dtype]
    first = start // 4
    if not nbytes or 0 in shape:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    if not shape:
        return np.array([first + offset * item], np.int64), np.array([item], np.int64)
    contiguous = tuple(int(np.prod(shape[d + 1:])) for d in range(len(shape)))
    if not offset and tuple(strides) == contiguous and nbytes == 4 * item * int(np.prod(shape)):
        return np.array([first], np.int64), np.array([nbytes // 4], np.int64)
    if strides[-1] != 1 and shape[-1] > 1:
        return None
    inner = shape[-1]
    at = np.full(1, offset, dtype=np.int64)
    for n, s in zip(shape[:-1], strides):
        at = (at[:, None] + np.arange(n, dtype=np.int64)[None, :] * s).reshape(-1)
    return first + at * item, np.full(at.size, inner * item, np.int64)


def alternate_on_device(first, batch, size: int):
    """The second arena (uint8, `size` bytes, on `first`'s device): each repeated launch's
    alternate image at its base, from `first` (the batch's image there, no launch run yet)."""
    import torch

    dev = first.device
    picked = sorted((b for b in batch if b.repeat and b.run), key=lambda b: b.base)  # searchsorted wants them so
    nw = -(-size // 4)
    out = torch.empty(4 * nw, dtype=torch.uint8, device=dev)
    if not picked:
        return out[:size]
    words = out.view(torch.int32)
    bases = torch.tensor([b.base // 4 for b in picked], dtype=torch.int64).to(dev, non_blocking=True)
    g = torch.arange(nw, device=dev, dtype=torch.int64)
    k = (torch.searchsorted(bases, g, right=True) - 1).clamp_(min=0)  # the launch at or before each word
    fill = alt_words(g - bases[k])  # 0 .. 2**32 - 1: stored as the int32 of the same bits
    words.copy_(torch.where(fill >= 1 << 31, fill - (1 << 32), fill))
    starts, lens = [], []
    for b in picked:
        for layout in b.fill or b.regions:
            runs = element_runs(layout)
            if runs is None:
                _copy_strided(out, first, layout, b.base)
            elif runs[0].size:
                starts.append(runs[0] + b.base // 4)
                lens.append(runs[1])
    if starts:
        s = np.concatenate(starts)
        n = np.concatenate(lens)
        total = int(n.sum())
        meta = torch.from_numpy(np.stack([s, n])).to(dev, non_blocking=True)
        run = torch.repeat_interleave(torch.arange(s.size, device=dev), meta[1], output_size=total)
        idx = meta[0][run] + torch.arange(total, device=dev, dtype=torch.int64) \
            - (torch.cumsum(meta[1], 0) - meta[1])[run]
        src = first[: 4 * (first.numel() // 4)].view(torch.int32)
        words[idx] = src[idx]
    return out[:size]


def _copy_strided(out, first, layout: Layout, base: int) -> None:
    """One tensor's elements from `first` into `out` through typed strided views of both (one
    device copy), a dimension of stride 0 taken at its first index (its elements are the same
    storage: a destination that repeats an element is refused by torch)."""
    import torch

    name, dtype, start, nbytes, shape, strides, offset = layout
    shape = tuple(1 if st == 0 else n for n, st in zip(shape, strides))
    item = 4 * _ITEM[dtype]
    t = getattr(torch, dtype)
    at = (base + start) // item + offset
    dst = out[: out.numel() - out.numel() % item].view(t).as_strided(shape, strides, at)
    src = first[: first.numel() - first.numel() % item].view(t).as_strided(shape, strides, at)
    dst.copy_(src)
