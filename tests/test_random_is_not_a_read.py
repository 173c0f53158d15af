"""A kernel whose run is random is `nondeterministic`, never an `out_of_bounds_read`, even where
its runs from the image happen to agree: the probe runs tell a read only of a kernel whose runs
from one image agree with one another (rules.stable).

The target is the mutant fixture's random page (page_size 2, B > 1: the last row's last page
is copied from a row drawn at random), its draws replayed from a list instead of torch's
generator. The list is one real sequence of draws under which the judge once took the random
page for reads of four inputs' guard bands: the three runs from the image drew what the first
did, and some band's two probe runs both drew another row; the runs of another band drew
differently from each other, which only a kernel that is not deterministic does.
"""

from __future__ import annotations

import types
from pathlib import Path


import cases as hand
from kvfuzz.execute import prepare
from kvfuzz.judge import judge
from kvfuzz.rules import probed_bands, rerun_rules
from kvfuzz.worker import InProcessExecutor

MUTANT = Path(__file__).resolve().parent / "fixtures" / "mutant_kernels.py"

# the row drawn by each call: the first run, the alternate image's, the image twice, the probe
# runs (each input's bands together, then each band twice), the image once more
DRAWS = [0, 1, 0, 0, 1, 1, 1, 0, 2, 1, 2, 2, 1, 1, 2, 1, 2, 1, 2, 1, 0, 2, 1, 1, 0]

REPLAYED = f'''
import importlib.util

import torch

_spec = importlib.util.spec_from_file_location("random_page_mutant", {str(MUTANT)!r})
_mutant = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_mutant)
DRAWS = iter({DRAWS!r})


class _Torch:
    """torch, with randint answering the next replayed draw."""

    def __getattr__(self, name):
        return getattr(torch, name)

    def randint(self, low, high, size):
        return torch.tensor(next(DRAWS))


_mutant.torch = _Torch()
normal_decode_set_metadata = _mutant.normal_decode_set_metadata
'''


def test_a_random_page_whose_image_runs_agree_is_nondeterministic(tmp_path):
    target = tmp_path / "replayed_random_page.py"
    target.write_text(REPLAYED)
    case = hand.decode(ps=2, B=4)
    outcome = InProcessExecutor(str(target), "cpu").run(case, repeats=2)
    assert len(outcome.runs) == len(DRAWS)

    # the trap: every run from the image agrees with the first, the alternate image's differs,
    # and some band's every probe run differs from the first (a read, had the kernel been
    # deterministic); another band's two runs disagree with each other
    table = prepare(case).plan.regions["page_table"]
    last = [int(table.elements(r.after)[3, 16]) for r in outcome.runs]
    first = last[0]
    assert len({last[0], last[1]}) == 2
    assert all(v == first for r, v in zip(outcome.runs, last) if not r.alt)
    runs = [types.SimpleNamespace(probe=r.probe, last=v) for r, v in zip(outcome.runs, last)
            if r.probe is not None and not r.probe.endswith(":*")]
    assert probed_bands(runs, lambda r: r.last != first)
    assert any(len({r.last for r in runs if r.probe == band}) == 2 for band in {r.probe for r in runs})

    verdict = judge(case, outcome)
    assert {f.kind for f in verdict.findings} == {"mismatch", "nondeterministic"}, verdict.signatures()


def run(probe=None, alt=True, after="x", differs=True):
    return types.SimpleNamespace(after=after, alt=alt, probe=probe, error=None, differs=differs)


def kinds(later):
    """rerun_rules's kinds (and bands) over stand-in runs: `after` stands for the arena a run left."""
    found = rerun_rules(later, None, lambda r: r.differs, lambda r: {}, lambda a, b: a.after == b.after)
    return [(kind, sorted(places or ())) for kind, _, places in found]


def test_a_probe_image_whose_runs_disagree_voids_every_probe():
    alt, image = run(after="alt"), run(alt=False, after="first", differs=False)
    read = [run("a:before", after="y"), run("a:before", after="y")]
    # deterministic: each probe image gives one arena; the band that changes it is read
    assert kinds([alt, image, *read, run("a:after", differs=False, after="first"),
                  run("a:after", differs=False, after="first")]) == [("read_probed", ["a:before"])]
    # one of a:after's runs changed and the other not, or both changed, differently: chance
    for other in ([run("a:after", after="y"), run("a:after", differs=False, after="first")],
                  [run("a:after", after="y"), run("a:after", after="z")]):
        assert kinds([alt, image, *read, *other]) == [("nondeterministic", [])]
    # the same for two runs from the alternate image
    assert kinds([alt, image, *read, run(after="other")]) == [("nondeterministic", []), ("nondeterministic", [])]
