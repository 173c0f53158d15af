"""The class pool reaches every kernel path first: a defect of one path (the seed's page-size-1
decode kernel, say) shows in the first case of that path's first stint, so the stint a
campaign first reaches it at is its time to a finding."""

from __future__ import annotations

import pytest

from kvfuzz.engines.batch_engine import POOL, STINT, _stream_place
from kvfuzz.strategies import GENERATORS

PATH_OPS = sorted(op for op, gen in GENERATORS.items() if gen.path_items)


def _values(classes, items) -> set[str]:
    return {f"{name}={k.get(name)}" for k in classes for name in items}


def test_the_ops_with_several_kernel_paths_name_them():
    assert {"decode_metadata", "draft_extend_metadata"} <= set(PATH_OPS)


@pytest.mark.parametrize("op", PATH_OPS)
def test_each_path_item_is_a_class_item_with_several_values(op):
    gen = GENERATORS[op]
    classes = gen.pool(0, POOL, None)
    for name in gen.path_items:
        seen = {k.get(name, "absent") for k in classes}
        assert "absent" not in seen, f"{op}: a class without {name}"
        assert len(seen) >= 2, f"{op}: {name} takes one value only ({seen})"


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
@pytest.mark.parametrize("op", PATH_OPS)
def test_the_first_classes_of_the_pool_take_every_path(op, seed):
    gen = GENERATORS[op]
    classes = gen.pool(seed, POOL, None)
    every = _values(classes, gen.path_items)
    # a class takes one value of each item: as many classes as the values cover them all
    assert _values(classes[: len(every)], gen.path_items) == every


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
@pytest.mark.parametrize("op", ["decode_metadata", "draft_extend_metadata"])
def test_one_job_reaches_the_page_size_1_path_within_its_first_three_stints(op, seed):
    """The plain cover put decode's ps1 classes at the pool's sixth place for seeds 0 and 1:
    a one-job GPU campaign (a mutant's, say) first ran the seed's ps1 kernel at case 641."""
    gen = GENERATORS[op]
    classes = gen.pool(seed, POOL, None)
    stint = STINT["cuda"]
    first = next(i for i in range(0, 48 * stint, stint)
                 if classes[_stream_place(gen, classes, seed, i, stint, (1, 1), True)[0]].get("path") == "ps1")
    assert first < 3 * stint


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
@pytest.mark.parametrize("op", ["decode_metadata", "draft_extend_metadata"])
def test_each_path_comes_first_in_a_class_with_more_than_one_row(op, seed):
    """A one-row pool (`R` one) reads row 0 alone, so a kernel that steps rows by the column
    stride (the seed's `ps1-row-stride` defect) passes it: the path-first classes are the
    typical ones, whose rows and requests are several."""
    gen = GENERATORS[op]
    classes = gen.pool(seed, POOL, None)
    firsts = {}
    for k in classes:
        firsts.setdefault(k.get("path"), k)
    for path, k in firsts.items():
        assert k.get("R") != "one" and k.get("B") != "one", f"{op} seed {seed}: {path} first in {k.describe()}"
