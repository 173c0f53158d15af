"""kvfuzz.reduce: recorded choices replay to their case, and the generic reducer shrinks them;
minimize runs it before the per-op passes, and a case without choices still gets the passes."""

from __future__ import annotations

import random

import pytest

from conftest import DEVICE  # the device conftest selected for this process

from kvfuzz.check import Checker
from kvfuzz.corpus.format import SavedCase, read_case_dir, write_case_dir
from kvfuzz.engines.batch_engine import STINT, case_stream, stream_recorded
from kvfuzz.judge import judge
from kvfuzz.minimize import minimize, rank
from kvfuzz.reduce import CHOICES, recorded, reduce, replay
from kvfuzz.strategies import GENERATORS
from kvfuzz.strategies.draw import RandomDraw, RecordingDraw, ReplayDraw
from sampling import sampled

pytestmark = pytest.mark.filterwarnings("ignore:Conversion of an array with ndim > 0:DeprecationWarning")

OPS = sorted(GENERATORS)
FIRST = {"decode_metadata": "cache_seqlens_int32", "draft_extend_metadata": "cache_seqlens_int32",
         "swa_spec_page_table": "page_table_dst", "num_kv_splits": "num_kv_splits", "q8kv8_topk_length": "indices",
         "flashinfer_kv_indices": "req_pool_indices", "chunked_prefix_kv_indices": "req_pool_indices",
         "flashmla_kv_indices": "req_pool_indices", "trtllm_mha_kv_indices": "req_pool_indices",
         "pa_page_table": "req_pool_indices", "trtllm_mha_graph_metadata": "req_pool_indices",
         "aiter_ragged_page_table": "kv_indptr", "aiter_req_to_token_page_table": "req_pool_indices"}


def recorded_stream(op: str, seed: int, n: int, in_contract_only: bool = False):
    """The first `n` cases of the batched engine's stream, each with its choices recorded."""
    gen, stint = GENERATORS[op], STINT["cpu"]
    classes = gen.pool(seed, 48, None)
    for i, (_, case) in enumerate(case_stream(op, seed, n, in_contract_only=in_contract_only)):
        yield stream_recorded(case, gen, classes, seed, i, stint, (1, 1), in_contract_only, None, {})


# ------------------------------------------------------------------- recording and replay


@pytest.mark.parametrize("op", OPS)
def test_recorded_choices_replay_to_the_same_case(op):
    n = 0
    for case in recorded_stream(op, 3, 160):  # two stints and a half: in and out of contract
        rec = recorded(case)
        assert rec is not None, case.describe()
        again, taken = replay(rec, rec["choices"])
        assert again == case and again.variant == case.variant
        assert [list(c) for c in taken] == rec["choices"]  # a replay records the same choices
        n += 1
    assert n == 160


def test_recording_leaves_the_random_stream_as_it_is():
    gen = GENERATORS["decode_metadata"]
    k = gen.pool(0, 48, None)[5]
    plain = gen.case_in_stint(RandomDraw("s:1"), k, None)
    d = RecordingDraw(RandomDraw("s:1"))
    assert gen.case_in_stint(d, k, None) == plain
    assert d.choices and all(c[0] in ("int", "choice", "bool") and c[1] <= c[3] <= c[2] for c in d.choices)


def test_replay_clamps_a_stale_answer_and_answers_the_simplest_past_the_end():
    d = ReplayDraw([("int", 0, 100, 70), ("bool", 0, 1, 1), ("choice", 0, 3, 2)])
    assert d.integer(0, 10) == 10  # 70 clamped into [0, 10]
    assert d.choice("abc") == "a"  # a boolean was recorded here: the simplest choice
    assert d.choice("xyz") == "z"
    assert d.integer(5, 9) == 5 and d.boolean() is False and d.choice((7, 8)) == 7  # past the end
    assert d.choices[0] == ("int", 0, 10, 10)


def test_a_record_of_another_case_is_not_used():
    case = next(recorded_stream("num_kv_splits", 0, 1))
    assert recorded(case) is not None
    edited = case.with_scalars(num_head=case.scalars["num_head"] + 1)
    assert recorded(edited) is None  # the record's digest names the case it replays to
    assert reduce(edited, lambda c: True) is None


def test_saved_cases_keep_their_choices(tmp_path):
    case = next(recorded_stream("swa_spec_page_table", 0, 1))
    saved = SavedCase(case=case, finding=None, target="builtin", device="cpu", versions={}, origin="batch",
                      expected="pass")
    (tmp_path / "c").mkdir()
    write_case_dir(saved, tmp_path / "c", fsync=False)
    back = read_case_dir(tmp_path / "c").case
    assert back == case and recorded(back) is not None
    assert replay(recorded(back), recorded(back)["choices"])[0] == case


# ------------------------------------------------------------------- the generic reducer


def _first_rows(case) -> int:
    return case.tensors[FIRST[case.op]].shape[0]


@pytest.mark.parametrize("op", sampled("generic reducer", OPS))
def test_the_generic_reducer_shrinks_its_choices_while_the_predicate_holds(op):
    """A pure predicate (two rows or more in the op's first tensor): the reducer ends at a
    smaller case that still holds it, with a shorter or simpler record that replays to it."""
    case = next(c for c in recorded_stream(op, 1, 400, in_contract_only=True) if _first_rows(c) >= 4)
    seen = []

    def pred(c):
        seen.append(c)
        return _first_rows(c) >= 2

    r = reduce(case, pred, budget_s=60)
    assert r.complete and r.log
    assert rank(r.case) < rank(case) and _first_rows(r.case) >= 2
    rec = recorded(r.case)
    assert rec is not None and replay(rec, rec["choices"])[0] == r.case
    before = recorded(case)["choices"]
    assert (len(rec["choices"]), [c[3] - c[1] for c in rec["choices"]]) < \
        (len(before), [c[3] - c[1] for c in before])
    assert all(rank(c) <= rank(case) for c in seen)  # never a larger candidate


def test_a_case_without_choices_still_minimizes_with_the_passes():
    case = next(c for c in recorded_stream("decode_metadata", 1, 400, in_contract_only=True) if _first_rows(c) >= 4)
    bare = case.replace(meta={})
    pred = lambda c: _first_rows(c) >= 2  # noqa: E731
    m = minimize(bare, pred, budget_s=60)
    assert m.complete and rank(m.case) < rank(bare)
    assert "choices" not in m.accepted and sum(m.accepted.values()) == len(m.log)
    assert minimize(bare, pred, budget_s=60, method="passes").case == m.case


# ------------------------------------------------------------------- a planted defect

# kvfuzz's own kernels, each with one planted defect: with two rows or more, the last
# element (2-D: first column of the last row) of the first output is one too high
# (flashinfer_kv_indices: of kv_indices, its sixth argument; chunked_prefix_kv_indices: of
# chunk_kv_indices, its sixth; flashmla_kv_indices: of kv_indices, its fifth; trtllm_mha_kv_indices:
# of page_table, its fifth; pa_page_table: of dst_page_table, the keyword argument;
# trtllm_mha_graph_metadata, whose arguments are keyword-only: of cache_seqlens; aiter_ragged_page_table:
# of page_table, its third; aiter_req_to_token_page_table: of page_table, its fourth)
PLANTED = '''
import functools

from kvfuzz import kernels as _k


def _planted(fn, returns=False, arg=0, kw=None):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        out = fn(*args, **kwargs)
        t = out if returns else kwargs[kw] if kw else args[arg]
        if t.shape[0] >= 2 and (t.dim() == 1 or t.shape[1] > 0):
            if t.dim() == 1:
                t[-1] += 1
            else:
                t[-1, 0] += 1
        return out
    return wrapper


normal_decode_set_metadata = _planted(_k.normal_decode_set_metadata)
draft_extend_set_metadata = _planted(_k.draft_extend_set_metadata)
prepare_swa_spec_page_table_triton = _planted(_k.prepare_swa_spec_page_table_triton)
get_num_kv_splits_triton = _planted(_k.get_num_kv_splits_triton)
q8kv8_topk_length_from_indices = _planted(_k.q8kv8_topk_length_from_indices, returns=True)
create_flashinfer_kv_indices_triton = _planted(_k.create_flashinfer_kv_indices_triton, arg=5)  # kv_indices
create_chunked_prefix_cache_kv_indices = _planted(_k.create_chunked_prefix_cache_kv_indices, arg=5)
create_flashmla_kv_indices_triton = _planted(_k.create_flashmla_kv_indices_triton, arg=4)
create_trtllm_mha_kv_indices_triton = _planted(_k.create_trtllm_mha_kv_indices_triton, arg=4)
_build_pa_page_table = _planted(_k._build_pa_page_table, kw="dst_page_table")  # passed by keyword
update_trtllm_mha_graph_metadata = _planted(_k.update_trtllm_mha_graph_metadata, kw="cache_seqlens")
scatter_ragged_to_page_table_kernel = _planted(_k.scatter_ragged_to_page_table_kernel, arg=2)
scatter_req_to_token_to_page_table_kernel = _planted(_k.scatter_req_to_token_to_page_table_kernel, arg=3)
'''


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    from kvfuzz.worker import WorkerExecutor

    path = tmp_path_factory.mktemp("planted") / "planted_kernels.py"
    path.write_text(PLANTED)
    ex = WorkerExecutor(str(path), DEVICE)
    yield ex
    ex.close()


@pytest.mark.parametrize("op", sampled("planted defect", OPS))
def test_on_a_planted_defect_choices_then_passes_is_no_larger_than_the_passes(op, planted):
    """The first in-contract case the planted defect shows on (a seeded stream): the generic
    reducer shrinks it, and with the passes after it the case is as small as, or smaller
    than, what the passes alone reach."""
    rnd = random.Random(op)
    for case in recorded_stream(op, rnd.randrange(100), 200, in_contract_only=True):
        if _first_rows(case) < 3:
            continue
        sigs = judge(case, planted.run(case)).signatures()
        if sigs:
            break
    else:
        pytest.fail(f"{op}: the planted defect did not show")
    sig = sorted(sigs)[0]
    checker = Checker(planted, op)
    still = checker.still_fails(sig)
    generic = minimize(case, still, budget_s=120, method="choices", assess=checker.prepare)
    passes = minimize(case, still, budget_s=120, method="passes", assess=checker.prepare)
    both = minimize(case, still, budget_s=120, assess=checker.prepare)
    assert generic.complete and passes.complete and both.complete
    assert generic.accepted.get("choices") and rank(generic.case) < rank(case)
    assert both.accepted.get("choices")
    assert rank(both.case) <= rank(passes.case), (both.log, passes.log)
    assert still(both.case)
    assert CHOICES in both.case.meta
