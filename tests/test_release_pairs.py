"""scripts/release_pairs.py: which releases it pairs (one per run of releases shipping the same
kernel files) and the table it prints. The fuzzing itself is `kvfuzz fuzz --baseline`
(tests/test_baseline.py) and `kvfuzz bisect` (tests/test_bisect.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import release_pairs  # noqa: E402

from kvfuzz.bisect import parse_releases  # noqa: E402
from kvfuzz.targets.releases import file_release, kernel_files  # noqa: E402

pytestmark = pytest.mark.nokernel  # no kernel runs here


def test_each_release_paired_ships_other_kernel_files_than_the_one_before():
    releases = parse_releases("0.5.6..0.5.23")
    chosen = release_pairs.distinct(releases)
    assert chosen[0] == "0.5.6" and chosen[-1] == "0.5.23"
    files = [tuple(file_release(v, f) for f in kernel_files()) for v in chosen]
    assert all(a != b for a, b in zip(files, files[1:]))  # each pair compares two different file sets
    # every release skipped ships what the chosen release before it ships
    for v in releases:
        before = [c for c in chosen if releases.index(c) <= releases.index(v)][-1]
        assert tuple(file_release(v, f) for f in kernel_files()) == files[chosen.index(before)]
    assert "0.5.21" not in chosen  # byte-identical to 0.5.20's
    assert "0.5.15" in chosen  # 0.5.14's files, and the first trtllm_mha_graph_metadata.py


def test_the_table_counts_each_class_and_shows_the_bisect_of_regressions_and_fixes():
    row = {"new": "0.5.23", "old": "0.5.22", "cases": 10, "found": [
        {"class": "fixed", "signature": "decode_metadata:swa:fixed:t:mismatch.all", "bisect": "fixed in 0.5.23"},
        {"class": "changed", "signature": "decode_metadata:swa:changed:t:mismatch.all"}]}
    lines = release_pairs.table([row])
    assert lines[-1] == "| 0.5.23 vs 0.5.22 | 10 | 0 | 1 | 1 | swa:fixed:t:mismatch.all: fixed in 0.5.23 |"
