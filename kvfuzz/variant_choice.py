"""Which contract variant judges an op's entry point in a kernel file.

A release target is judged by its SGLang version; a kernel file given by path (`kvfuzz replay
--target FILE`, and a repro script run against FILE) by the SGLang API generation its entry
point's signature matches: the generation whose parameter names equal its own, else the one
sharing most names with it (on a tie, the one with fewest parameters the file lacks, then the
newest). A release's variant is the one of the last
`(first release, variant)` entry of the op's `release_variants` that it has reached.

kvfuzz (targets/releases.py, targets/calls.py) and both repro scripts use this module; the
scripts embed its source, so it imports only the standard library.
"""

from __future__ import annotations

import re


def parse_version(text):
    """(major, minor, micro) of a version string; post, pre and local parts are ignored."""
    m = re.match(r"^\s*v?(\d+)\.(\d+)(?:\.(\d+))?", text or "")
    return (int(m[1]), int(m[2]), int(m[3] or 0)) if m else None


def release_variant(release_variants, default, version):
    """The variant judging SGLang `version`: `default` (the op's first variant) before the first
    entry of `release_variants` ((first release, variant), oldest first) it has reached."""
    v = parse_version(version)
    chosen = default
    for first, variant in release_variants:
        if v is not None and v >= parse_version(first):
            chosen = variant
    return chosen


def generation_of(generations, names):
    """(the generation whose parameters equal `names`, if any; the one sharing most names with
    them, then the one with fewest parameters `names` lacks, then the newest).
    `generations`: (name, parameter names) pairs, oldest first."""
    gens = list(generations)
    equal = next((name for name, params in gens if tuple(params) == tuple(names)), None)
    closest = max(enumerate(gens), key=lambda ig: (len(set(ig[1][1]) & set(names)),  # most names shared,
                                                   -len(set(ig[1][1]) - set(names)),  # fewest it lacks,
                                                   ig[0]))[1][0]  # the newest
    return equal, closest


def binding_variant(release_variants, default, binding):
    """The variant judging an entry point bound by kvfuzz (targets/calls.py's Binding) in a kernel
    file that names no release: that of the generation its signature matches, or the closest."""
    return release_variant(release_variants, default, binding.generation or binding.closest)
