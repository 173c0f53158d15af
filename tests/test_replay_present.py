"""What `kvfuzz replay` shows a maintainer (the case's corpus name, its contract status, its inputs,
the wrong cells' expected and actual values), and the small things around it: `corpus ls`'s
header and exit status, a folder that is not a case."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import cases
from kvfuzz.cli import main
from kvfuzz.findings import Finding
from kvfuzz.show import input_lines

CORPUS = Path(__file__).resolve().parent.parent / "corpora"
SPEC_MISMATCH = CORPUS / "swa_spec_page_table" / "97a4773cf309275b"  # the seed's strided seq_len_b defect
SPEC_OUT_OF_CONTRACT = CORPUS / "swa_spec_page_table" / "3007b53d920c00dd"  # la + lb past the width: builtin passes


def test_replay_names_the_case_shows_its_inputs_and_the_wrong_cells(seed_path, device, capsys):
    code = main(["replay", str(SPEC_MISMATCH), "--target", str(seed_path), "--device", device, "--in-process"])
    out = capsys.readouterr().out
    assert code == 1, out
    lines = out.splitlines()
    assert lines[0].startswith("case     97a4773cf309275b  (swa_spec_page_table [default], content digest ")
    assert "contract in contract" in lines
    inputs = lines[lines.index("inputs") + 1 : lines.index("outputs")]
    # small inputs in full, with their layout: seq_len_b is one element seen twice (stride 0)
    at = inputs.index("  seq_len_b: int32[2] strides=(0,) storage=1")
    assert inputs[at + 1] == "    [1, 1]"
    assert "  page_table_b: int32[2, 1] contiguous storage=2" in inputs
    assert "    page_table_dst[1, 0]: expected 0, got -559038737" in lines


def test_replay_says_which_rule_an_out_of_contract_case_breaks(device, capsys):
    code = main(["replay", str(SPEC_OUT_OF_CONTRACT), "--device", device, "--in-process"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "contract out of contract: row 0: la + lb = 1 > page_table_dst width 0" in out.splitlines()
    assert out.startswith("case     3007b53d920c00dd  ")


def test_a_large_input_is_summarised_with_the_rows_the_wrong_cells_read():
    case = cases.decode(ps=1, B=5, delta=20)  # req_to_token is 4 x 51: past the sizes printed in full
    rtt, pool = case.values["req_to_token"], case.values["req_pool_indices"]
    wrong = Finding("mismatch", "decode_metadata", "ps1", "page_table", "partial", "m",
                    ({"index": [1, 5], "numpy": 1, "torch": 1, "got": 2},))
    lines = input_lines(case, [wrong])
    at = lines.index(f"  req_to_token: {case.tensors['req_to_token'].describe()}")
    assert lines[at + 1] == f"    min {rtt.min()}, max {rtt.max()}"
    row = int(pool[1])  # the slot batch row 1 reads
    assert lines[at + 2].startswith(f"    [{row}] [{', '.join(str(x) for x in rtt[row][:32])}")
    assert lines[at + 2].endswith(f"... ({rtt.shape[1] - 32} more)]")
    # without a wrong cell no row is singled out: the summary only
    plain = input_lines(case)
    assert not plain[plain.index(lines[at]) + 2].startswith("    [")


def test_corpus_ls_has_a_header_and_fails_on_an_unreadable_case(tmp_path, capsys):
    shutil.copytree(CORPUS / "num_kv_splits", tmp_path / "num_kv_splits")
    assert main(["corpus", "ls", str(tmp_path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["op", "key", "kind", "expected", "target", "signature", "path"]
    readable = len(out) - 2
    bad = tmp_path / "decode_metadata" / "0123456789abcdef"
    bad.mkdir(parents=True)
    (bad / "case.json").write_text("{")
    assert main(["corpus", "ls", str(tmp_path)]) == 1
    captured = capsys.readouterr()
    out = captured.out.splitlines()
    assert out[0].split()[0] == "op" and out[-1] == f"{readable + 1} cases, 1 unreadable"
    assert sum(line.startswith("num_kv_splits  ") for line in out) == readable  # the readable ones still listed
    assert any("UNREADABLE" in line and str(bad) in line for line in out)
    assert f"unreadable case {bad}: invalid JSON" in captured.err


@pytest.mark.parametrize("make", ["empty", "corpus root"])
def test_replay_of_a_folder_that_is_not_a_case_says_what_a_case_folder_holds(tmp_path, capsys, make):
    folder = tmp_path / "x"
    folder.mkdir()
    if make == "corpus root":
        shutil.copytree(CORPUS / "num_kv_splits", folder / "num_kv_splits")
    assert main(["replay", str(folder)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert f"{folder} is not a case folder: a case folder holds case.json and tensors.npz (docs/case-format.md)" in err
    if make == "corpus root":
        assert "replay one of the cases inside, e.g. " in err


def test_a_wrong_page_table_cell_names_the_input_cells_it_is_computed_from():
    from kvfuzz.show import cell_lines

    case = cases.decode(ps=4, swa=True)
    v = case.values
    slot = int(v["req_pool_indices"][1])
    token = int(v["req_to_token"][slot, 2 * 4])
    f = Finding("mismatch", "decode_metadata", "swa", "swa_page_table", "partial", "m",
                ({"index": [1, 2], "numpy": 7, "torch": 7, "got": 8},))
    assert cell_lines(f, case) == [
        "swa_page_table[1, 2]: expected 7, got 8",
        f"  reads req_pool_indices[1] = {slot}, req_to_token[{slot}, 8] = {token}, "
        f"full_to_swa_index_mapping[{token}] = {int(v['full_to_swa_index_mapping'][token])}"]
    spec = cases.spec(la=(3, 300), R=2, WB=2)  # row 1: la 3, lb 1
    g = Finding("untouched_write", "swa_spec_page_table", "spec", "page_table_dst", "cells", "m",
                ({"index": [1, 3], "got": 5, "before": -1}, {"index": [1, 4], "got": 5, "before": -1}))
    b = int(spec.values["page_table_b"][1, 0])
    assert cell_lines(g, spec) == ["page_table_dst[1, 3]: must stay -1, got 5",
                                   f"  reads seq_len_a[0] = 3, seq_len_b[1] = 1, page_table_b[1, 0] = {b}",
                                   "page_table_dst[1, 4]: must stay -1, got 5",
                                   "  reads seq_len_a[0] = 3, seq_len_b[1] = 1: past la + lb = 4"]
