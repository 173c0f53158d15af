"""Which runs of one case kvfuzz makes, in which order: the schedule the judge's re-run rules
(rules.rerun_rules) are written for.

`repeats` runs, every second from the alternate image (every byte that is no element's holding
a position-encoding fill). Where the first two differ by more than the fill, the case runs
again from its image, twice (the run, or the fill?), then once per input with the fill in all
of its guard bands and gap together (probe "name:*"), and for an input whose fill changes the
run, twice per band with the fill there alone (probe "name:where"), and from the image once
more: a kernel whose runs differ by nature must not pass for one that reads the fill by chance.

kvfuzz (execute.run_case, NumPy arenas) and the repro script (torch arenas) both run this
schedule; the script embeds this module, so it imports nothing.
"""


def run_schedule(repeats, inputs, bands_of, once, fill_matters):
    """Make a case's runs. `inputs`: its input tensors' names, in the arena's order;
    `bands_of(name)`: that input's bands ("before", "gap", "after"); `once(alt, probe, bands)`
    makes one run (from the image; from the alternate image; or, with `probe` "name:*" or
    "name:where", from the image with the fill in those `bands` of that input alone) and returns
    (the run, whether to go on: False after a CUDA fault); `fill_matters(first, run)`: whether
    `run` left other bytes than the first run, the fill aside, or raised otherwise."""
    made = []
    for k in range(repeats):
        run, go_on = once(k % 2 == 1, None, ())
        made.append(run)
        if not go_on:
            return
    if repeats < 2 or not fill_matters(made[0], made[1]):
        return
    for _ in range(2):
        if not once(False, None, ())[1]:
            return
    for name in inputs:  # each input's bands together, then one by one for an input that matters
        bands = tuple(bands_of(name))
        run, go_on = once(True, f"{name}:*", bands)
        if not go_on:
            return
        if not fill_matters(made[0], run):
            continue
        for where in bands:  # twice each: a band counts where both runs change (rules.probed_bands)
            for _ in range(2):
                if not once(True, f"{name}:{where}", (where,))[1]:
                    return
    once(False, None, ())
