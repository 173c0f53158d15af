"""The Hypothesis engine: same seed, same cases; a new finding is shrunk while its exact
signature holds; the budget and case count bound a run."""

from __future__ import annotations

import pytest

from kvfuzz.engines.hypothesis_engine import fuzz_op
from kvfuzz.worker import InProcessExecutor, WorkerExecutor


class Recording:
    def __init__(self, inner):
        self.inner, self.cases = inner, []
        self.missing, self.description = inner.missing, inner.description

    def run(self, case, repeats=1, torch_ref=True):
        self.cases.append(case.digest())
        return self.inner.run(case, repeats=repeats, torch_ref=torch_ref)

    def close(self):
        pass


def test_same_seed_same_cases(device):
    runs = []
    for _ in range(2):
        ex = Recording(InProcessExecutor("builtin", device))
        stats, found = fuzz_op("num_kv_splits", ex, seed=5, budget_s=60, max_cases=40)
        assert stats.cases == 40 and found == {}
        runs.append(ex.cases)
    assert runs[0] == runs[1]
    other = Recording(InProcessExecutor("builtin", device))
    fuzz_op("num_kv_splits", other, seed=6, budget_s=60, max_cases=40)
    assert other.cases != runs[0]


@pytest.mark.slow
def test_new_finding_is_shrunk_keeping_its_signature(seed_path, device):
    ex = WorkerExecutor(str(seed_path), device)  # the seed can take its process down
    seen = []  # what on_new was shown: each finding once, as first seen, before any shrinking

    def on_new(f):
        seen.append((f.finding.signature, f.case.digest(), f.first.digest(), list(f.shrunk_by)))
    try:
        stats, found = fuzz_op("swa_spec_page_table", ex, seed=1, budget_s=30, max_cases=400,
                               in_contract_only=True, on_new=on_new)
    finally:
        ex.close()
    assert found, "the seed's strided seq_len defect should show within 400 in-contract cases"
    assert sorted(sig for sig, *_ in seen) == sorted(found)
    assert all(case == found[sig].first.digest() == first and by == [] for sig, case, first, by in seen)
    for sig, f in found.items():
        assert f.finding.signature == sig
        if f.shrunk_by:
            assert f.case.size_key() <= f.first.size_key()
    assert stats.shrink_runs > 0
