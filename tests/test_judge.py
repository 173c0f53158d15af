"""The judge on hand-made runs: where a stray write is charged (the output whose store overran,
not the neighbour it landed in), and how a re-run from the alternate image is read (a
difference the fill explains is an `out_of_bounds_read` on the input read past; any other
difference stays `nondeterministic`).

No kernel runs here: each run's arena is written by hand from the case's image (the first
run) or its alternate image (the re-run), as a kernel would leave it."""

from __future__ import annotations

import numpy as np

from kvfuzz.case import TensorSpec
from kvfuzz.execute import Outcome, RunResult, prepare
from kvfuzz.judge import judge, quick_verdict
from kvfuzz.materialize import alt_fill
from kvfuzz.ops import CONTRACTS

import cases

CANARY_WORD = -0x5A5A5A5B  # the canary bytes read as an int32


def _runs(p, first: np.ndarray, again: np.ndarray | None = None) -> Outcome:
    runs = [RunResult(after=first)]
    if again is not None:
        runs.append(RunResult(after=again, alt=True))
    return Outcome(runs)


def _out_of_contract_spec():
    """A spec case whose last request's la exceeds page_table_a's width (out of contract)."""
    c = cases.spec(la=(3, 5), extra=4)
    return prepare(c.replace(values={**c.values, "seq_len_a": np.array([3, 7])}))


def _correct(p, arena: np.ndarray) -> np.ndarray:
    """`arena` with page_table_dst's required cells (the first la + lb of each row) written
    as a correct run writes them."""
    arena = arena.copy()
    required = CONTRACTS["swa_spec_page_table"].cells(p.case)["page_table_dst"].required
    p.plan.regions["page_table_dst"].view(arena)[required] = p.expected.values["page_table_dst"][required]
    return arena


# out-of-bounds writes: charged to the output written ------------------------------------


def test_a_write_that_lands_in_a_neighbours_guard_band_is_charged_to_the_output_it_overran():
    p = prepare(cases.spec())
    first = _correct(p, p.plan.image)
    dst, victim = p.plan.regions["page_table_dst"], p.plan.regions["seq_len_a"]  # seq_len_a lies after it
    first[victim.start - 8 : victim.start - 4] = 0  # in seq_len_a's guard band before it
    first[dst.start + dst.nbytes + 16] = 1  # in page_table_dst's own guard band after it
    v = judge(p.case, _runs(p, first), prepared=p)
    assert v.signatures() == ["swa_spec_page_table:spec:out_of_bounds_write:page_table_dst:after"]
    (f,) = v.findings
    assert "5 bytes after page_table_dst" in f.message
    assert "4 seq_len_a's guard band before it" in f.message and "1 page_table_dst's guard band after it" in f.message


def test_a_write_in_an_outputs_own_band_before_it_or_its_gaps_stays_there():
    padded = TensorSpec("int32", (4, 6), (8, 1))  # rows of 6 cells, 2 cells of gap after each
    p = prepare(cases.spec(la=(3, 4), dst=padded))
    first = _correct(p, p.plan.image)
    dst = p.plan.regions["page_table_dst"]
    first[dst.start - 4] = 0  # its guard band before it
    first[dst.start + 6 * 4] = 0  # the first row's gap
    v = judge(p.case, _runs(p, first), prepared=p)
    assert sorted(v.signatures()) == ["swa_spec_page_table:spec:out_of_bounds_write:page_table_dst:before",
                                      "swa_spec_page_table:spec:out_of_bounds_write:page_table_dst:gap"]


def test_with_several_outputs_a_stray_write_goes_to_the_nearest_output_before_it():
    """decode's arena, by name: ..., page_table, req_pool_indices, req_to_token, ...: a write
    in req_to_token's guard band ran past page_table's end (no output lies between)."""
    p = prepare(cases.decode(ps=4))
    first = p.plan.image.copy()
    victim = p.plan.regions["req_to_token"]
    first[victim.start - 4] = 0
    v = judge(p.case, _runs(p, first), prepared=p)
    assert [f.signature for f in v.findings if f.kind == "out_of_bounds_write"] == [
        "decode_metadata:general:out_of_bounds_write:page_table:after"]


# the re-run from the alternate image ---------------------------------------------------


def test_an_output_copied_from_a_guard_band_is_an_out_of_bounds_read_on_the_input_read_past():
    p = _out_of_contract_spec()
    a, dst = p.plan.regions["page_table_a"], p.plan.regions["page_table_dst"]
    at = a.start + a.nbytes + 8  # two words past page_table_a's end
    first, again = p.plan.image.copy(), p.plan.alt_image.copy()
    dst.view(first)[2, 5] = CANARY_WORD >> 2  # what the kernel stored: the word read, shifted by 2
    dst.view(again)[2, 5] = int(alt_fill(at + 4)[at : at + 4].view("<i4")[0]) >> 2
    v = judge(p.case, _runs(p, first, again), prepared=p)
    assert v.signatures() == ["swa_spec_page_table:spec:out_of_bounds_read:page_table_a:after"]
    (f,) = v.findings
    assert "page_table_a's guard band after it" in f.message and "page_table_dst" in f.message
    assert f.cells[0]["tensor"] == "page_table_dst" and f.cells[0]["index"] == [2, 5]
    assert 0 <= a.nbytes + 8 - f.cells[0]["read_at"] < 16  # to within the 4 << 2 bytes the shift lost


def test_a_read_in_an_outputs_guard_band_goes_to_the_nearest_input_and_says_so():
    p = _out_of_contract_spec()
    dst = p.plan.regions["page_table_dst"]
    at = dst.start - 64  # page_table_dst's guard band before it; page_table_b's storage ends nearest
    first, again = p.plan.image.copy(), p.plan.alt_image.copy()
    dst.view(first)[0, 0] = CANARY_WORD
    dst.view(again)[0, 0] = int(alt_fill(at + 4)[at : at + 4].view("<i4")[0])
    v = judge(p.case, _runs(p, first, again), prepared=p)
    assert v.signatures() == ["swa_spec_page_table:spec:out_of_bounds_read:page_table_b:after"]
    assert "the nearest input" in v.findings[0].message and "page_table_dst's guard band before it" in v.findings[0].message


def test_a_difference_the_fill_does_not_explain_stays_nondeterministic():
    p = _out_of_contract_spec()
    dst = p.plan.regions["page_table_dst"]
    first, again = p.plan.image.copy(), p.plan.alt_image.copy()
    dst.view(first)[1, 1], dst.view(again)[1, 1] = 777, 12345
    v = judge(p.case, _runs(p, first, again), prepared=p)
    assert v.signatures() == ["swa_spec_page_table:spec:nondeterministic:page_table_dst:rerun"]
    assert "not explained by the fill" in v.findings[0].message


def test_a_clean_rerun_from_the_alternate_image_is_clean_on_both_paths():
    """A correct kernel's two runs differ only in the fill: nothing for the full judge, and the
    fast path still proves the case clean."""
    p = prepare(cases.spec())
    assert p.status == "in_contract"
    first, again = _correct(p, p.plan.image), _correct(p, p.plan.alt_image)
    outcome = _runs(p, first, again)
    assert judge(p.case, outcome, prepared=p).findings == []
    assert quick_verdict(p, outcome) is not None
    damaged = again.copy()
    damaged[p.plan.regions["page_table_dst"].start] ^= 1  # one output byte differs in the re-run
    assert quick_verdict(p, _runs(p, first, damaged)) is None
    assert [f.kind for f in judge(p.case, _runs(p, first, damaged), prepared=p).findings] == ["nondeterministic"]


# races an out-of-contract input makes: not the kernel's nondeterminism -----------------------


def _overlapping_kv_indptr():
    """flashinfer_kv_indices with kv_indptr out of step with the lengths (out of contract):
    request 0 writes cells 0-2, request 1 cells 2-4, so cell 2 is written by both programs."""
    from kvfuzz.case import Case

    i32 = lambda *shape: TensorSpec.contiguous("int32", shape)  # noqa: E731
    values = {"req_to_token": np.arange(16, dtype=np.int32).reshape(2, 8), "req_pool_indices": np.array([0, 1]),
              "paged_kernel_lens": np.array([3, 3]), "kv_indptr": np.array([0, 2, 5])}
    case = Case("flashinfer_kv_indices", {}, {"req_to_token": i32(2, 8), "req_pool_indices": i32(2),
                                              "paged_kernel_lens": i32(2), "kv_indptr": i32(3),
                                              "kv_indices": i32(6)}, values)
    p = prepare(case)
    assert p.status == "out_of_contract"
    return p


def test_a_second_run_differing_only_where_two_programs_write_is_not_nondeterministic():
    p = _overlapping_kv_indptr()
    out = p.plan.regions["kv_indices"]
    first, again = p.plan.image.copy(), p.plan.image.copy()
    for arena, order in ((first, (0, 1)), (again, (1, 0))):  # the two programs' stores land in either order
        for i in order:
            out.view(arena)[[0, 1, 2] if i == 0 else [2, 3, 4]] = [0, 1, 2] if i == 0 else [8, 9, 10]
    runs = Outcome([RunResult(after=first), RunResult(after=again)])
    assert judge(p.case, runs, prepared=p).findings == []
    out.view(again)[4] = 99  # a cell only request 1 writes: that difference is the kernel's
    v = judge(p.case, Outcome([RunResult(after=first), RunResult(after=again)]), prepared=p)
    assert v.signatures() == ["flashinfer_kv_indices:no_start:nondeterministic:kv_indices:rerun"]


def test_written_more_than_once_counts_the_ranges_cut_to_the_output():
    from kvfuzz.contract import written_more_than_once

    got = written_more_than_once(6, [0, 2, 5, -3, 4], [3, 3, 4, 2, 0])
    assert got.tolist() == [False, False, True, False, False, False]
    assert not written_more_than_once(4, [0, 2], [2, 2]).any()


def test_the_byte_comparison_sees_one_changed_byte_anywhere_at_any_size_and_offset():
    # quick_verdict's comparisons go by 8-byte words over the bulk and by bytes over the tail:
    # a change in either part, at any alignment of the slice, must show
    from kvfuzz.judge import _same_bytes

    rng = np.random.default_rng(0)
    for n in (1, 7, 8, 9, 4095, 65536, 65537, 70001, 70007, (1 << 17) + 3):
        base = rng.integers(0, 256, n + 8, dtype=np.uint8)
        for off in (0, 1, 3):
            a = base[off:off + n]
            assert _same_bytes(a, a.copy())
            for pos in {0, n // 2, n - n % 8 - 1, n - n % 8, n - 1} - {-1, n}:
                b = a.copy()
                b[pos] ^= 0x10
                assert not _same_bytes(a, b), (n, off, pos)
