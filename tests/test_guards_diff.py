"""scripts/diff_guards.py: the guard and padding lines a release adds or removes around its call sites."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("diff_guards", ROOT / "scripts" / "diff_guards.py")
dg = importlib.util.module_from_spec(_spec)
sys.modules["diff_guards"] = dg  # dataclasses look their module up
_spec.loader.exec_module(dg)

BACKEND = "sglang/srt/layers/attention/x_backend.py"
RUNNER = "sglang/srt/model_executor/runner/y_runner.py"


def _sources(backend_body: str, runner_body: str, runner_file: str = RUNNER) -> dict[str, str]:
    backend = "class XBackend:\n    def init_forward_metadata(self, seq_lens, req_pool_indices):\n" + \
        textwrap.indent(textwrap.dedent(backend_body), " " * 8)
    runner = "def replay(backend, bs):\n" + textwrap.indent(textwrap.dedent(runner_body), " " * 4)
    return {BACKEND: backend, runner_file: runner, "sglang/srt/other.py": "def unrelated():\n    x = max(1, 2)\n"}


def _sites(sources: dict[str, str], runner_file: str = RUNNER) -> list[dict]:
    line = next(i for i, t in enumerate(sources[BACKEND].splitlines(), 1) if "kernel[" in t)
    call = next(i for i, t in enumerate(sources[runner_file].splitlines(), 1) if "init_forward_metadata(" in t)
    return [{"op": "decode_metadata", "kind": "launch", "file": BACKEND, "line": line,
             "function": "XBackend.init_forward_metadata",
             "callers": [{"file": runner_file, "line": call, "function": "replay", "options": {}}]}]


OLD_BACKEND = """\
    bs = seq_lens.numel()
    page_ids = req_pool_indices
    kernel[(bs,)](seq_lens, page_ids)
"""
NEW_BACKEND = """\
    bs = seq_lens.numel()
    page_ids = torch.clamp(req_pool_indices, min=0)
    kernel[(bs,)](seq_lens, page_ids)
    assert bs <= self.max_bs
"""
OLD_RUNNER = """\
    seq_lens = backend.seq_lens[:bs]
    backend.init_forward_metadata(seq_lens, backend.req_pool_indices[:bs])
"""
NEW_RUNNER = """\
    backend.seq_lens[bs:].fill_(1)
    seq_lens = backend.seq_lens[:bs]
    backend.init_forward_metadata(seq_lens, backend.req_pool_indices[:bs])
"""


def _changes(old: dict, new: dict, **kw) -> list:
    return dg.diff("A", dg.regions(_sites(old), old), "B", dg.regions(_sites(new), new), **kw)


def test_a_clamp_an_assert_and_a_padding_fill_are_found_where_they_were_added():
    old, new = _sources(OLD_BACKEND, OLD_RUNNER), _sources(NEW_BACKEND, NEW_RUNNER)
    got = _changes(old, new)
    # the removed line has no guard word: only the three added lines are kept
    assert [(c.sign, c.new, c.function, c.text) for c in got] == [
        ("+", "B", "XBackend.init_forward_metadata", "page_ids = torch.clamp(req_pool_indices, min=0)"),
        ("+", "B", "XBackend.init_forward_metadata", "assert bs <= self.max_bs"),
        ("+", "B", "replay", "backend.seq_lens[bs:].fill_(1)"),
    ]
    lines = new[BACKEND].splitlines()
    for c in got:
        file = BACKEND if c.function != "replay" else RUNNER
        assert new[file].splitlines()[c.line - 1].strip() == c.text
    assert all(c.ops == ("decode_metadata",) for c in got)
    assert "clamp" in lines[got[0].line - 1]


def test_the_same_text_in_both_releases_is_no_change_and_a_rename_is_no_guard():
    old = _sources(OLD_BACKEND, OLD_RUNNER)
    assert _changes(old, old) == []
    renamed = _sources(OLD_BACKEND.replace("page_ids", "pages"), OLD_RUNNER)
    assert _changes(old, renamed) == []  # no guard word on the changed lines
    assert _changes(old, renamed, every_line=True)  # but they did change


def test_a_guard_reused_under_a_new_name_is_not_new_and_a_moved_function_is_matched():
    old, new = _sources(NEW_BACKEND, NEW_RUNNER), _sources(NEW_BACKEND.replace("page_ids", "pages"), NEW_RUNNER)
    assert _changes(old, new) == []
    moved = "sglang/srt/model_executor/runner/z_runner.py"
    new = _sources(NEW_BACKEND, NEW_RUNNER, moved)
    got = dg.diff("A", dg.regions(_sites(old), old), "B", dg.regions(_sites(new, moved), new))
    assert got == []  # the runner's `replay` moved file: matched by name, its text unchanged


def test_near_keeps_only_lines_close_to_a_launch_or_call():
    far = OLD_BACKEND + "".join(f"    x{i} = {i}\n" for i in range(30)) + "    assert x0 == 0\n"
    old, new = _sources(OLD_BACKEND, OLD_RUNNER), _sources(far, OLD_RUNNER)
    assert [c.text for c in _changes(old, new)] == ["assert x0 == 0"]
    assert _changes(old, new, near=5) == []


@pytest.mark.parametrize("argv, message", [
    (["--releases", "0.5.99"], "not an SGLang release kvfuzz knows"),
    (["--releases", "0.5.14"], "at least two releases"),
    (["--releases", "0.5.14,0.5.15", "--op", "nope"], "no op nope"),
    (["--releases", "0.5.14,0.5.15", "--near", "-1"], "--near must be >= 0"),
])
def test_bad_input_is_one_line_and_exit_2(argv, message):
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "diff_guards.py"), *argv],
                       capture_output=True, text=True, cwd=ROOT)
    assert p.returncode == 2, p.stderr
    assert message in p.stderr and len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr


def test_padding_modules_are_diffed_whole_even_with_near():
    file = "sglang/srt/model_executor/cuda_graph_runner.py"
    assert dg.PADDING_MODULES.fullmatch(file)
    assert dg.PADDING_MODULES.fullmatch("sglang/srt/model_executor/runner/decode_cuda_graph_runner.py")
    assert not dg.PADDING_MODULES.fullmatch("sglang/srt/layers/attention/triton_backend.py")
    old = {file: "class B:\n    def populate(self, bs, raw_bs):\n        if bs != raw_bs:\n"
                 "            self.seq_lens.fill_(1)\n"}
    new = {file: old[file] + "            self.req_pool_indices[raw_bs:bs].zero_()\n"}
    a, b = dg.module_regions(old), dg.module_regions(new)
    assert list(b) == [(file, "B.populate")] and b[(file, "B.populate")].ops == (dg.PADDING,)
    got = dg.diff("A", a, "B", b, near=0)
    assert [(c.sign, c.line, c.text) for c in got] == [("+", 5, "self.req_pool_indices[raw_bs:bs].zero_()")]
