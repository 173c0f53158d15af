"""Where a byte of a case's arena lies, and which tensor a stray byte is charged to.

Each tensor owns the guard band before its storage, its storage's stride gaps and the guard
band after it (alignment slack included). A stray write is charged to the output whose store
overran, never to the neighbour it landed in; a stray read to the input read past. `regions`
is a sequence, in arena order, of objects with `name`, `start`, `nbytes` and `guard`
(materialize.Region inside kvfuzz; the repro script's tensor layouts).

Standalone (standard library only): kvfuzz's arena and judge use it, and the repro script
embeds it (kvfuzz.repro.standalone_modules).
"""

ALIGN = 256  # every storage starts on this boundary; the slack after it is its guard band's


def round_up(n, a=ALIGN):
    return (n + a - 1) // a * a


def band_range(r, where):
    """The byte range of region `r`'s guard band before it, its storage (where="gap") or its
    guard band after it (alignment slack included)."""
    end = r.start + r.nbytes
    return {"before": (r.start - r.guard, r.start), "gap": (r.start, end),
            "after": (end, round_up(end) + r.guard)}[where]


def region_of_byte(regions, b):
    """(tensor, before|after|gap) for a byte that belongs to no element: the first region (in
    arena order) whose guard bands or storage hold it; ("-", "outside") for none."""
    for r in regions:
        if r.start - r.guard <= b < r.start:
            return r.name, "before"
        if r.start <= b < r.start + r.nbytes:
            return r.name, "gap"
        if r.start + r.nbytes <= b < r.start + r.nbytes + r.guard + ALIGN:
            return r.name, "after"
    return "-", "outside"


def band_words(tensor, where):
    """Words for where a stray byte lies, as region_of_byte names it."""
    if tensor == "-":
        return "past every tensor's guard bands"
    return f"{tensor}'s stride gaps" if where == "gap" else f"{tensor}'s guard band {where} it"


def extent_place(r, b):
    """(distance in bytes, before|after|gap) of byte `b` from region `r`'s storage."""
    if b < r.start:
        return r.start - b, "before"
    if b >= r.start + r.nbytes:
        return b - (r.start + r.nbytes), "after"
    return 0, "gap"


def write_place(regions, outputs, b):
    """((output, before|after|gap), (tensor, where) it landed in) for a stray byte `b` that
    changed. A byte in an output's own guard bands or gaps is that output's. Any other byte
    (a neighbour's guard band, past the case's arena) was written by a store that ran past
    the end of the nearest output before it (indices too large: what overruns are); with no
    output before it, by one that ran before the start of the nearest output after it."""
    hit = region_of_byte(regions, b)
    if hit[0] in outputs:
        return hit, hit
    outs = [r for r in regions if r.name in outputs]
    before = [r for r in outs if r.start + r.nbytes <= b]
    if before:
        r = max(before, key=lambda r: r.start + r.nbytes)
        return (r.name, "after"), hit
    after = [r for r in outs if r.start > b]
    if after:
        r = min(after, key=lambda r: r.start)
        return (r.name, "before"), hit
    return hit, hit


def charge_writes(regions, outputs, stray):
    """{(output, where): (its bytes, {(tensor, where) they landed in: count})} for the stray
    bytes `stray` (arena offsets, ascending) that changed. Every byte of one band goes to one
    output: the one its first byte is charged to (write_place)."""
    charged, out = {}, {}
    for b in stray:
        hit = region_of_byte(regions, b)
        place = charged.get(hit) or charged.setdefault(hit, write_place(regions, outputs, b)[0])
        at, landed = out.setdefault(place, ([], {}))
        at.append(b)
        landed[hit] = landed.get(hit, 0) + 1
    return out


def read_place(regions, inputs, b):
    """((input, before|after|gap), how it was told) for byte `b`, outside every element, that
    a kernel read: the input whose guard band or gap holds it; else the input whose extent
    the address continues, the nearest one."""
    hit = region_of_byte(regions, b)
    if hit[0] in inputs:
        return hit, f"in {band_words(*hit)}"
    best = min(((extent_place(r, b), r.name) for r in regions if r.name in inputs), default=None)
    if best is None:
        return hit, f"in {band_words(*hit)}"
    (dist, where), name = best
    return (name, where), (f"{dist} bytes {where} {name}'s storage, the nearest input (the address lies in "
                           f"{band_words(*hit)})")
