"""kvfuzz/rules.py, places.py and fills.py serve kvfuzz's judge (NumPy arrays) and the repro
script (torch tensors) alike: the same inputs give the same verdicts in both libraries."""

from __future__ import annotations

import types

import numpy as np
import pytest
import torch

from kvfuzz.fills import alt_source, alt_words
from kvfuzz.materialize import alt_fill
from kvfuzz.places import charge_writes, read_place, region_of_byte
from kvfuzz.rules import after_error_rule, divergence_rules, output_rules, rerun_rules

REQUIRED = np.array([[1, 1, 1], [1, 0, 0]], dtype=bool)
UNTOUCHED = np.array([[0, 0, 0], [0, 0, 1]], dtype=bool)
BEFORE = np.full((2, 3), -7, dtype=np.int64)
WANT = np.where(REQUIRED, [[1, 2, 3], [4, 0, 0]], BEFORE)  # other cells as they were
ALT = np.where(REQUIRED, [[1, 2, 3], [5, 0, 0]], BEFORE)  # an accepted alternative: [1, 0] may be 5


def both(*arrays):
    """The arrays as NumPy arrays and as torch tensors."""
    return [tuple(arrays), tuple(torch.from_numpy(np.ascontiguousarray(a)) for a in arrays)]


@pytest.mark.parametrize("got, want", [
    (WANT, []),  # the oracle's answer
    (ALT, []),  # the alternative
    (np.where(REQUIRED, WANT, BEFORE) + np.array([[0, 9, 0], [0, 0, 0]]),
     [("mismatch", "partial", "out: 1 of 4 required cells differ")]),
    (BEFORE, [("mismatch", "all", "out: 4 of 4 required cells differ (4 never written)")]),
    (np.where(UNTOUCHED, 1, WANT),
     [("untouched_write", "cells", "out: 1 cells the contract leaves untouched changed")]),
])
def test_output_rules_agree_in_numpy_and_torch(got, want):
    verdicts = []
    for req, unt, g, before, a, b in both(REQUIRED, UNTOUCHED, got, BEFORE, WANT, ALT):
        found = output_rules("out", req, unt, g, before, [a, b])
        verdicts.append([(k, w, m, np.asarray(mask).tolist()) for k, w, m, mask in found])
    assert verdicts[0] == verdicts[1]
    assert [v[:3] for v in verdicts[0]] == want


def test_after_error_rule_agrees_in_numpy_and_torch():
    got = BEFORE.copy()
    got[0, 1] = 3
    for g, before in both(got, BEFORE):
        kind, where, message, hit = after_error_rule("out", g, before, "ValueError")
        assert (kind, where, message) == ("untouched_write", "after_error",
                                          "out: 1 cells changed although the call raised ValueError")
        assert np.asarray(hit).tolist() == [[False, True, False], [False, False, False]]
        assert after_error_rule("out", before, before, "ValueError") is None


def test_divergence_rules_agree_in_numpy_and_torch():
    may_write = ~(REQUIRED | UNTOUCHED)
    theirs = ALT.copy()  # an accepted answer on the backend: no required divergence
    theirs[1, 1] = 9  # a may-write cell
    theirs[1, 2] = 8  # an untouched cell
    verdicts = []
    for req, free, unt, mine, other, a, b in both(REQUIRED, may_write, UNTOUCHED, WANT, theirs, WANT, ALT):
        found = divergence_rules("out", "cpu", req, free, unt, mine, other, [a, b])
        verdicts.append([(w, m, np.asarray(mask).tolist()) for w, m, mask in found])
    assert verdicts[0] == verdicts[1]
    assert [v[:2] for v in verdicts[0]] == [
        ("may_write", "out: 1 may-write cells differ between the primary device and cpu"),
        ("untouched", "out: 1 untouched cells differ between the primary device and cpu")]
    # a required cell that is no accepted answer on one side diverges
    theirs[0, 0] = 7
    assert [w for w, _, _ in divergence_rules("out", "cpu", REQUIRED, may_write, UNTOUCHED, WANT, theirs,
                                              [WANT, ALT])] == ["required", "may_write", "untouched"]


def run(alt=False, probe=None, error=None, differs=False):
    return types.SimpleNamespace(after=b"", alt=alt, probe=probe, error=error, differs=differs)


def kinds(later, decoded=None):
    found = rerun_rules(later, None, lambda r: r.differs, lambda r: decoded or {})
    return [(kind, later.index(r), places if kind == "read_decoded" else sorted(places or ())) for kind, r, places
            in found]


def test_rerun_rules():
    alt = run(alt=True, differs=True)
    assert kinds([alt], decoded={("a", "after"): "x"}) == [("read_decoded", 0, {("a", "after"): "x"})]
    # not decoded: the bands whose every probe run changed
    probes = [run(alt=True, probe="a:before", differs=True), run(alt=True, probe="a:before", differs=True),
              run(alt=True, probe="a:after", differs=True), run(alt=True, probe="a:after", differs=False)]
    assert kinds([alt, *probes]) == [("read_probed", 0, ["a:before"])]
    # a run from the image that differs: nondeterministic, and the probes are not trusted
    assert kinds([alt, run(differs=True), *probes]) == [("nondeterministic", 1, []), ("nondeterministic", 0, [])]
    # nothing explains it
    assert kinds([alt]) == [("nondeterministic", 0, [])]
    assert kinds([run(alt=True), run()]) == []


def test_places():
    regions = [types.SimpleNamespace(name=n, start=s, nbytes=64, guard=4096) for n, s in (("a", 4096), ("out", 12544))]
    assert region_of_byte(regions, 4096 + 64) == ("a", "after")
    assert region_of_byte(regions, 12544 - 1) == ("out", "before")
    assert region_of_byte(regions, 12544 + 64 + 4096 + 256) == ("-", "outside")
    # a stray write past a's storage is charged to the nearest output: none before it, so `out`'s start
    assert charge_writes(regions, ("out",), [4200, 4201, 12618]) == {
        ("out", "before"): ([4200, 4201], {("a", "after"): 2}), ("out", "after"): ([12618], {("out", "after"): 1})}
    assert read_place(regions, ("a",), 12618) == (("a", "after"), "8458 bytes after a's storage, the nearest input "
                                                  "(the address lies in out's guard band after it)")


def test_the_fill_is_one_formula_for_numpy_torch_and_ints():
    n = 1 << 12
    fill = alt_fill(4 * n).view("<u4")
    assert alt_words(np.arange(n, dtype=np.uint32)).tolist() == fill.tolist()
    assert alt_words(torch.arange(n, dtype=torch.int64)).tolist() == fill.tolist()
    assert [alt_words(i) for i in (0, 5, n - 1)] == fill[[0, 5, n - 1]].tolist()
    assert alt_source(-0x5A5A5A5B, int(fill[1000]), 32) == (4000, 0)
