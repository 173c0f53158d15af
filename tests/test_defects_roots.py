"""Where a finding's defect is rooted when its wrong value is not simply the store's own: a value
computed from elements its program read at the wrong place (a row stride dropped) is rooted at the
load that read them (`misread`), not merged with a value computed wrong at the same store; two
stores fed by one wrong load (a pool index ignored) are one defect, rooted at that load (`via`,
`root_keys`); a finding stands on a wrong cell of the tensor its signature names, not on another
output's; a required cell no lane wrote is a lost write at the output's one store; a scalar
store's value is never "copied" from one lane of a vector load.

The synthetic tests build sites by hand; the kernel tests attribute hand-made cases under the
interpreter against copies of the cached SGLang 0.5.23 files (skipped where the cache lacks them).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kvfuzz.case import Case, TensorSpec
from kvfuzz.sites.attribute import Attribution, _lost, _origin, _source
from kvfuzz.sites.choose import site_meta
from kvfuzz.sites.defects import defect_key, root_keys
from kvfuzz.sites.site import Site, site_line
from kvfuzz.sites.trace import Access, Arg, Launch, Trace
from kvfuzz.targets.wheels import cache_dir

F = "/x/metadata.py"


def store_site(line: int, what: str = "wrong_value", load: dict | None = None, **extra) -> dict:
    return dict({"kernel": "k", "file": F, "line": line, "op": "tl.store", "text": "tl.store(...)", "what": what,
                 "says": "writes", "depends": []}, **({"load": load} if load else {}), **extra)


def finding(op: str, sig: str, site: dict) -> dict:
    return {"op": op, "signature": sig, "signatures": [sig], "site": site}


# -- the grouping rule on synthetic sites ----------------------------------------------------

def test_misread_is_rooted_at_its_load_apart_from_a_value_of_the_same_store():
    misread = store_site(615, misread={"file": F, "line": 611, "text": "vals = tl.load(base + idx)",
                                       "tensor": "indices"})
    value = store_site(615)
    assert defect_key("q8", misread) == ("q8", "metadata.py", 611, "place", ())
    assert defect_key("q8", value) == ("q8", "metadata.py", 615, "value", ())
    assert Site.from_json(misread).misread["line"] == 611 and Site.from_json(misread).kind == "place"
    assert "read at the wrong place by `metadata.py:611`" in site_line({"site": misread})


def _load(line: int, via: int | None = None) -> dict:
    out = {"file": F, "line": line, "op": "tl.load", "text": "vals = tl.load(...)"}
    if via is not None:
        out["via"] = {"file": F, "line": via, "text": "vals = tl.load(...)"}
    return out


def test_two_stores_fed_by_one_load_are_one_defect_rooted_at_it():
    fs = [finding("r2t", "r2t:swa:mismatch:page_table:all", store_site(84, load=_load(78), shape="copied")),
          finding("r2t", "r2t:swa:mismatch:swa_page_table:all", store_site(93, load=_load(91, via=78), shape="copied"))]
    keys = root_keys(fs)
    assert keys[0] == keys[1] == ("r2t", "metadata.py", 78, "copied", ())


def test_one_store_keeps_its_own_key_and_different_origins_or_kinds_stay_apart():
    one = [finding("r2t", "a", store_site(84, load=_load(78), shape="copied")),
           finding("r2t", "b", store_site(84, load=_load(78), shape="copied"))]
    assert set(root_keys(one)) == {("r2t", "metadata.py", 84, "copied", ())}
    apart = [finding("r2t", "a", store_site(84, load=_load(78), shape="copied")),
             finding("r2t", "b", store_site(93, load=_load(91), shape="copied"))]
    assert len(set(root_keys(apart))) == 2
    kinds = [finding("r2t", "a", store_site(84, load=_load(78), shape="copied")),
             finding("r2t", "b", store_site(93, load=_load(91, via=78)))]
    assert len(set(root_keys(kinds))) == 2  # copied and place: two defects


# -- attribution pieces on synthetic traces ---------------------------------------------------

def _access(seq, op, line, lanes, addrs, values, width, program=(0, 0, 0)) -> Access:
    return Access(seq, 0, op, "k", F, line, program, np.asarray(lanes), np.asarray(addrs, dtype=np.uint64),
                  np.asarray(values, dtype=np.int32), 4, width)


def test_a_scalar_store_does_not_copy_one_lane_of_a_vector_load():
    vec = _access(0, "load", 611, [0, 1], [1000, 1004], [7, 9], 2)
    scalar_store = _access(1, "store", 615, [0], [2000], [7], 1)
    trace = Trace([Launch("k", [])], [vec, scalar_store])
    assert _source(trace, scalar_store, 0, 7) is None  # a reduction's result: computed
    vec_store = _access(2, "store", 620, [0, 1], [3000, 3004], [7, 9], 2)
    trace.accesses.append(vec_store)
    assert _source(trace, vec_store, 0, 7) is vec


def test_an_indirect_load_is_followed_back_to_the_load_that_gave_its_address():
    args = [Arg("idx", 1000, 4, 4, True, None), Arg("table", 5000, 4, 64, True, None)]
    first = _access(0, "load", 78, [0, 1], [1000, 1004], [3, 5], 2)
    second = _access(1, "load", 91, [0, 1], [5000 + 12, 5000 + 20], [30, 50], 2)
    trace = Trace([Launch("k", args)], [first, second])
    assert _origin(trace, second) is first
    direct = _access(2, "load", 95, [0, 1], [5000, 5004], [1, 2], 2)  # `table + offs`: no index loaded
    trace.accesses.append(direct)
    assert _origin(trace, direct) is direct
    zeros = _access(3, "load", 78, [0], [1000], [0], 2)  # a masked load: one lane active, index 0
    same = _access(4, "load", 91, [0, 1], [5000, 5000], [4, 4], 2)  # every lane reads table[0]
    trace.accesses += [zeros, same]
    assert _origin(trace, same) is zeros


def test_a_finding_stands_on_a_wrong_cell_of_its_own_tensor():
    mine = Site("k", F, 269, "tl.store", "tl.store(page_table ...)", "wrong_value", "writes page_table[0, 0]")
    other = Site("k", F, 237, "tl.store", "tl.store(cu_seqlens_k ...)", "wrong_value", "writes cu_seqlens_k[0]")
    a = Attribution(sites={"wrong_value": other}, depends=[],
                    outputs={"cu_seqlens_k": {"wrong_value": other}, "page_table": {"wrong_value": mine}})
    assert site_meta("decode_metadata:general:mismatch:page_table:partial", a)["line"] == 269
    assert site_meta("decode_metadata:ps1:mismatch:cu_seqlens_k:partial", a)["line"] == 237
    back = Attribution.from_json(a.to_json())
    assert back.outputs["page_table"]["wrong_value"].line == 269


def test_a_cell_no_lane_wrote_is_lost_at_the_outputs_one_store():
    static = Site("k", F, 87, "tl.store", "tl.store(page_table_ptr + out_off, ...)", "wrong_value", "only store")
    trace = Trace([Launch("k", [])], [_access(0, "store", 87, [], [], [], 4)])  # the mask left no lane

    class Region:
        numel, itemsize = 1, 4

    class Arena:
        def inside(self, addr):
            return False

    got = _lost(trace, Arena(), "page_table", 0, "page_table[0, 0]", 0, Region(), static)
    assert got is not None and got.what == "lost_write" and got.line == 87 and "no lane" in got.says
    assert _lost(trace, Arena(), "page_table", 0, "page_table[0, 0]", 0, Region(), None) is None


# -- under the interpreter: q8kv8's length one short and its row stride dropped ------------------

LENGTH = ("length = tl.where(pos >= 0, pos + 1, length)", "length = tl.where(pos >= 0, pos, length)")
STRIDE = ("base = indices_ptr + row * stride_row", "base = indices_ptr + row")
C = TensorSpec.contiguous


@pytest.fixture
def metadata_source(device) -> str:
    if device != "cpu":
        pytest.skip("attribution in this process runs under the interpreter (the CPU)")
    path = cache_dir() / "sglang-0.5.23" / "metadata.py"
    if not path.is_file():
        pytest.skip(f"sglang==0.5.23's metadata.py is not cached ({path})")
    return path.read_text()


def _mutant(tmp_path: Path, source: str, old: str, new: str) -> str:
    assert source.count(old) == 1
    path = tmp_path / new.split()[0] / "metadata.py"
    path.parent.mkdir()
    path.write_text(source.replace(old, new))
    return str(path)


def _q8kv8_key(target: str, indices) -> tuple:
    from kvfuzz.sites.run import attribute

    values = np.asarray(indices, dtype=np.int32)
    case = Case("q8kv8_topk_length", {}, {"indices": C("int32", values.shape), "topk_length": C("int32", (len(values),))},
                {"indices": values})
    sig = "q8kv8_topk_length:block128:mismatch:topk_length:partial"
    return defect_key("q8kv8_topk_length", site_meta(sig, attribute(case, target)))


def test_q8kv8_length_short_and_row_stride_dropped_are_two_defects(tmp_path, metadata_source):
    short = _mutant(tmp_path, metadata_source, *LENGTH)
    stride = _mutant(tmp_path, metadata_source, *STRIDE)
    rows = [[0, 0], [-1, 0]]
    k_short, k_stride = _q8kv8_key(short, rows), _q8kv8_key(stride, rows)
    assert k_short[2:4] == (615, "value")  # the one store, a value computed wrong
    assert k_stride[2:4] == (611, "place")  # row 1 read from row 0's elements: the load
    assert _q8kv8_key(short, [[0, -1], [0, 0]])[2:4] == k_short[2:4]  # another case, the same key


def test_a_stray_lookup_is_rooted_at_the_load_of_its_indices_where_the_run_has_that_defect():
    misread = store_site(32, misread={"file": F, "line": 30, "text": "vals = tl.load(...)", "tensor": "kv_flat"})
    fault = {"kernel": "k", "file": F, "line": 39, "op": "tl.load", "text": "sw_vals = tl.load(swa + vals)",
             "what": "stray_read", "says": "faults", "depends": [], "via": {"file": F, "line": 30, "text": "vals"}}
    keys = root_keys([finding("rag", "rag:no_swa:mismatch:page_table:partial", misread),
                      finding("rag", "rag:swa:crash:-:SIGSEGV", fault)])
    assert keys[0] == keys[1] == ("rag", "metadata.py", 30, "place", ())
    alone = root_keys([finding("rag", "rag:swa:crash:-:SIGSEGV", fault)])  # no defect at :30: its own
    assert alone == [("rag", "metadata.py", 39, "place", ())]


def test_a_value_read_outside_on_its_lane_is_no_copy():
    from kvfuzz.sites.choose import _shape

    load = {"kernel": "k", "file": F, "line": 51, "op": "tl.load", "text": "kv_loc = tl.load(...)"}
    site = Site("k", F, 56, "tl.store", "tl.store(...)", "wrong_value", "writes", load)
    a = Attribution(sites={"wrong_value": site}, depends=[])
    assert _shape(site, a) == {"shape": "copied"}
    a.lanes.append({"load": {"file": F, "line": 51}, "store": {"file": F, "line": 56, "op": "tl.store"}})
    assert _shape(site, a) == {}  # a mask `<=`: the load and its store run past together


def test_a_shifted_store_keeps_its_shape_over_what_its_program_read():
    moved = store_site(245, shape="shifted", misread={"file": F, "line": 212, "text": "tl.load", "tensor": "t"})
    assert defect_key("mla", moved) == ("mla", "metadata.py", 245, "shifted", ())
