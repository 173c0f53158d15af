"""Hard-to-find examples do get found: the fuzzer, with a fixed seed, finds SGLang 0.5.14's
three known defects on the CPU, and each saved case is small and replays."""

from __future__ import annotations

import pytest

from kvfuzz.campaign import CampaignConfig, run_campaign
from kvfuzz.corpus import read_case_dir

from conftest import DEVICE

pytestmark = pytest.mark.slow

DEFECTS = {
    # lost writes: the seed copies a non-contiguous swa_page_table and writes the copy
    "decode_metadata": "decode_metadata:swa:mismatch:swa_page_table:all",
    # la + lb past the destination width: writes beyond the row
    "swa_spec_page_table": "swa_spec_page_table:spec:out_of_bounds_write:page_table_dst:after",
    # a zero length divides by zero: the result is whatever the hardware gives
    "num_kv_splits": "num_kv_splits:splits:mismatch:num_kv_splits:partial",
}


# Most rows a minimized case may keep. The zero-length defect needs 3 under the interpreter:
# there a divide by zero yields 0, which gives the right answer for [0, x]; only when a third
# length makes min != max does the lost statistic change a result.
MAX_ROWS = {"decode_metadata": 2, "swa_spec_page_table": 2, "num_kv_splits": 2 if DEVICE == "cuda" else 3}


@pytest.mark.parametrize("op", list(DEFECTS))
def test_fuzzer_finds_seed_defect(op, seed_path, device, tmp_path):
    # the decode and splits defects are in contract: skip the out-of-contract family (its
    # wild reads segfault the interpreter, and each crash costs a worker restart). A case
    # count, not a time budget, bounds each campaign: with seed 1 the decode and splits defects
    # show in the first stint and the spec overrun near case 260, on any machine. Minimizing has a
    # time budget: 30 s leaves room for a CI host whose other worker runs campaigns too
    cfg = CampaignConfig(ops=[op], target=str(seed_path), device=device, budget_s=120, seed=1,
                         max_cases=320 if op == "swa_spec_page_table" else 128,
                         corpus=tmp_path, minimize_budget_s=30, in_contract_only=op != "swa_spec_page_table")
    result = run_campaign(cfg)
    # a finding merged with the others its minimized case shows lists them all (one defect, one finding)
    sigs = {s: x for x in result.saved for s in x.signatures}
    assert DEFECTS[op] in sigs, sorted(sigs)
    assert sigs[DEFECTS[op]].minimize_seconds < 35  # its budget, and the step under way at the deadline
    saved = read_case_dir(sigs[DEFECTS[op]].path)
    assert saved.expected == "xfail" and DEFECTS[op] in saved.signatures
    case = saved.case
    rows = {"decode_metadata": lambda c: c.tensors["seq_lens"].shape[0],
            "swa_spec_page_table": lambda c: c.tensors["seq_len_a"].shape[0],
            "num_kv_splits": lambda c: c.scalars["num_seq"]}[op](case)
    assert rows <= MAX_ROWS[op], case.describe()
    # no wider than one block past the boundary that matters (blocks are 128 or 256 columns)
    assert all(t.shape[-1] <= 257 for t in case.tensors.values() if len(t.shape) == 2), case.describe()
