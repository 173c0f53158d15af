"""A batch closes before its cases' images pass `BATCH_BYTES` (one case at least): some classes
plan 15-21 MB a case, and 64 of them were a 1 GB image written into fresh memory each batch.
The cut changes the batches, not the stream: the same cases run and are judged alike."""

from __future__ import annotations

from kvfuzz.engines import batch_engine
from kvfuzz.engines.batch_engine import case_stream, fuzz_op
from kvfuzz.execute import prepare
from kvfuzz.worker import InProcessExecutor

CASES = 48


class Recording(InProcessExecutor):
    """Records each submitted batch: its cases' image bytes and their stream order."""

    def __init__(self) -> None:
        super().__init__("builtin", "cpu")
        self.batches: list[list[int]] = []

    def submit(self, image, batch) -> None:
        self.batches.append([b.size for b in batch])
        super().submit(image, batch)


def _run(monkeypatch, bound: int | None):
    if bound is not None:
        monkeypatch.setattr(batch_engine, "BATCH_BYTES", bound)
    ex = Recording()
    stats, found = fuzz_op("decode_metadata", ex, seed=0, budget_s=600, max_cases=CASES, device="cpu",
                           batch=16, stint=16, rerun_every=3)
    return ex.batches, stats, found


def test_a_batch_closes_before_its_images_pass_the_bound_and_runs_the_same_cases(monkeypatch):
    sizes = [prepare(c).plan.size for _, c in case_stream("decode_metadata", 0, CASES, "cpu", stint=16)]
    bound = sorted(sizes)[len(sizes) // 2] * 3  # about three typical cases a batch
    assert bound < sum(sorted(sizes)[-16:]), "no batch of 16 would pass the bound: nothing is tested"
    free, free_stats, free_found = _run(monkeypatch, None)
    cut, cut_stats, cut_found = _run(monkeypatch, bound)
    assert any(len(b) > 1 and sum(b) > bound for b in free), "no batch passed the bound unbounded: nothing was cut"
    for b in cut:
        assert len(b) == 1 or sum(b) <= bound, b
    assert len(cut) > len(free)
    # the same stream: every case, in order, each of the same size, judged alike
    assert [s for b in cut for s in b] == [s for b in free for s in b] == sizes
    assert cut_stats.cases == free_stats.cases == CASES
    assert dict(cut_stats.by_status) == dict(free_stats.by_status)
    assert set(cut_found) == set(free_found) == set()  # builtin: nothing to find
