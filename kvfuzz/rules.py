"""The judge's rules on one case's arrays, written once for both array libraries.

kvfuzz's judge calls them with NumPy arrays, the repro script with torch tensors: they use
only what both have (comparisons, `&`, `~`, boolean-mask indexing, `.any()`, `.sum()`), and
the caller turns what they return into findings (kvfuzz) or printed defects (the script).

* An in-contract case's output: its required cells must equal one accepted answer (the
  oracle's, or an alternative at a float32 rounding boundary), else `mismatch` (`all` cells
  or `partial`); the cells the contract leaves untouched must keep their value, else
  `untouched_write` (`output_rules`). A refused must-refuse case must have raised before
  writing any output cell (`after_error_rule`).
* A cross-checked case (`divergence_rules`): an output's cells that differ between the
  primary device's run and the backend's, by their contract class; required cells that
  differ where both answers are accepted (a rounding boundary) are not a divergence.
* The runs after the first (`rerun_rules`): one from the same image that differs is
  `nondeterministic`; one from the alternate image that differs is an out-of-bounds read
  where a differing value decodes as a read of the fill, or else where the fill in one input's
  band alone (a probe run) changes every run of that band, provided the kernel showed itself
  deterministic: no run from the image differed, and the runs from each probe image agree
  with one another (`stable`); any other difference is `nondeterministic` (not the fill's),
  unless it lies only in cells two programs of an out-of-contract case write (`racy_only`).

Standalone (no import at all): the repro script embeds this module
(kvfuzz.repro.standalone_modules).
"""


def same_on(a, b, mask):
    """Whether arrays `a` and `b` (one shape) hold the same values on the cells of `mask`."""
    x, y = a[mask], b[mask]
    return tuple(x.shape) == tuple(y.shape) and bool((x == y).all())


def extent(bad, required):
    """`all` when every required cell is bad, else `partial` (a finding's where)."""
    return "all" if int(bad.sum()) == int(required.sum()) else "partial"


def output_rules(name, required, untouched, got, before, accepted):
    """[(kind, where, message, mask of the cells concerned)] for one output of an in-contract
    case that ran: `got` its values after the run, `before` before it, `accepted` the accepted
    answers (the oracle's first)."""
    out = []
    if not any(same_on(got, a, required) for a in accepted):
        bad = required & (got != accepted[0])
        lost = bad & (got == before)
        note = f" ({int(lost.sum())} never written)" if bool(lost.any()) else ""
        out.append(("mismatch", extent(bad, required),
                    f"{name}: {int(bad.sum())} of {int(required.sum())} required cells differ{note}", bad))
    hit = untouched & (got != before)
    if bool(hit.any()):
        out.append(("untouched_write", "cells", f"{name}: {int(hit.sum())} cells the contract leaves untouched changed",
                    hit))
    return out


def after_error_rule(name, got, before, error_type):
    """(kind, where, message, mask) when output `name` changed although the call raised, else None."""
    hit = got != before
    if not bool(hit.any()):
        return None
    return ("untouched_write", "after_error",
            f"{name}: {int(hit.sum())} cells changed although the call raised {error_type}", hit)


def divergence_rules(name, backend, required, may_write, untouched, mine, theirs, accepted):
    """[(where, message, mask of the cells concerned)] for output `name` of an in-contract case
    that ran on the primary device (`mine`) and on `backend` (`theirs`)."""
    hit = mine != theirs
    out = []
    for where, mask in (("required", required), ("may_write", may_write), ("untouched", untouched)):
        bad = hit & mask
        if not bool(bad.any()):
            continue
        if where == "required" and all(any(same_on(x, a, required) for a in accepted) for x in (mine, theirs)):
            continue  # both answers accepted (a rounding boundary)
        out.append((where, f"{name}: {int(bad.sum())} {where.replace('_', '-')} cells differ between the primary "
                           f"device and {backend}", bad))
    return out


def rerun_rules(later, first_error, differs, decoded, same=None):
    """[(kind, run, places)] for the runs after the first (`later`: objects with `after`, the
    arena after the run or None; `alt`, it started from the alternate image; `probe`, the
    band it probed or None; `error`), in the order found. `differs(run)`: whether it differs
    from the first run (the fill put back to the canary); `decoded(run)`: {place: detail} of
    the values that decode as reads of the fill; `same(a, b)`: whether two runs left the same
    arena and raised alike (see `stable`). kind "nondeterministic" (places None);
    "read_decoded" (places: decoded's); "read_probed" (places: {band: its first probe run})."""
    out = []
    for run in later:
        if run.after is not None and not run.alt and run.probe is None and differs(run):
            out.append(("nondeterministic", run, None))
    # a run from the same image differed, or one image's runs disagree: probes cannot be trusted
    unstable = bool(out) or not stable(later, same)
    probed = [r for r in later if r.probe is not None and r.after is not None]
    for run in later:
        if run.after is None or not run.alt or run.probe is not None or not differs(run):
            continue
        reads = decoded(run) if run.error == first_error else {}
        bands = probed_bands(probed, differs) if not reads and not unstable else {}
        if reads:
            out.append(("read_decoded", run, reads))
        elif bands:
            out.append(("read_probed", run, bands))
        else:
            out.append(("nondeterministic", run, None))
    return out


def stable(later, same=None):
    """Whether the runs from each image other than the first run's (the alternate image, each
    probe image) agree with one another. A probe run tells a read only of a kernel whose run is
    a function of its image: where two runs from one image disagree, the kernel's runs differ
    by chance (a random choice, a race), and a probe run that differs from the first says
    nothing of what it reads. `same(a, b)`: whether two runs left the same arena and raised
    alike (without it nothing compares them: True)."""
    if same is None:
        return True
    seen = {}
    for run in later:
        if run.after is None or not run.alt:  # runs from the image: compared with the first by `differs`
            continue
        key = run.probe
        if key in seen:
            if not same(seen[key], run):
                return False
        else:
            seen[key] = run
    return True


def probed_bands(probed, differs):
    """{band: its first probe run} for each band whose probe runs (the alternate fill in that
    band alone) all differ from the first run."""
    steady = {r.probe for r in probed if not differs(r)}  # a band one of whose runs did not change
    out = {}
    for run in probed:
        if run.probe not in steady:
            out.setdefault(run.probe, run)
    return out


def racy_only(owners, racy, differs_outside):
    """Whether a later run that differs from the first (and raised alike) differs only in racy
    cells: cells two programs of this case write, either of whose values may be left there.
    `owners`: the names of the tensors whose bytes differ ("-" for bytes that are no element's);
    `racy`: {output: its racy cells}; `differs_outside(name, cells)`: whether `name`'s elements
    differ outside `cells`."""
    if not racy or not owners or "-" in owners or not set(owners) <= set(racy):
        return False
    return not any(differs_outside(name, racy[name]) for name in owners)
