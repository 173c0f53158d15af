"""`kvfuzz replay CASE --emit-repro FILE --short`: the plain torch script for a bug report. Every
corpus case whose finding a short script can show is written as one and run in a subprocess
(CPU tensors, TRITON_INTERPRET=1): it exits 1 against the release the case is from (a known
defect) and 0 against kvfuzz's builtin kernels; the kinds only the guarded arena shows get the
full script, and replay says why."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import cases
from kvfuzz.case import TensorSpec
from kvfuzz.cli import main
from kvfuzz.corpus import SavedCase, iter_cases
from kvfuzz.findings import Finding
from kvfuzz.short_repro import _run_list, render_short, why_not_short, write_short_repro
from sampling import fast_if_first

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "corpora"
BUILTIN = ROOT / "kvfuzz" / "kernels"
SEED_RELEASE = "sglang==0.5.14"  # the seed file is this release's kernel file


def _corpus():
    return [(path, saved) for path, saved in iter_cases(CORPUS)]


def _one_per_kind(shown) -> list:
    """In the fast suite the first case of each kind, op and expectation, the rest marked
    thorough (each runs its script twice in processes of their own)."""
    keys = [[("kind", s.finding.kind if s.finding else None), ("op", s.case.op), ("expected", s.expected)]
            for _, s in shown]
    return fast_if_first([pytest.param(p, s, id=p.name) for p, s in shown], keys)


SHOWN = [pytest.param(p, s, id=p.name) for p, s in _corpus() if why_not_short(s) is None]
SHOWN_RUN = _one_per_kind([(p, s) for p, s in _corpus() if why_not_short(s) is None])
NOT_SHOWN = [pytest.param(p, s, id=p.name) for p, s in _corpus() if why_not_short(s) is not None]


def run_script(script: Path, kernels: Path | str | None) -> subprocess.CompletedProcess:
    env = dict(os.environ, TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES="")
    argv = [sys.executable, str(script)] + ([str(kernels)] if kernels is not None else [])
    return subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env, cwd=script.parent)


def own_kernels(saved: SavedCase, seed_path: Path) -> Path:
    """The kernel file of the release (or file) the case was found with."""
    if saved.target == SEED_RELEASE:
        return seed_path
    if saved.target.startswith("sglang=="):
        from kvfuzz.errors import TargetLoadError
        from kvfuzz.targets.wheels import sglang_kernel_file

        try:
            return sglang_kernel_file(saved.target.split("==", 1)[1])
        except TargetLoadError as exc:  # no network and not in the cache
            pytest.skip(str(exc))
    return BUILTIN if saved.target == "builtin" else ROOT / saved.target


@pytest.mark.interpreter
@pytest.mark.parametrize("path, saved", SHOWN_RUN)
def test_a_short_script_fails_on_its_release_and_passes_on_builtin(path, saved, seed_path, tmp_path):
    script = tmp_path / "repro.py"
    write_short_repro(saved, script, path.name)
    src = script.read_text()
    assert "kvfuzz" not in src.replace(f"kvfuzz case {path.name}", "").replace("kvfuzz's canary", ""), src
    # a case judged differently under the variants a kernel file may select holds its choice too
    assert len(src.splitlines()) <= (180 if "VARIANT_OF" in src else 120), len(src.splitlines())
    assert "torch.tensor(" in src or "torch.full(" in src
    builtin = run_script(script, BUILTIN)
    assert builtin.returncode == 0 and builtin.stdout.startswith("OK"), builtin.stdout + builtin.stderr[-2000:]
    if saved.expected == "xfail":  # a known defect of its release: the script shows it
        own = run_script(script, own_kernels(saved, seed_path))
        assert own.returncode == 1, own.stdout + own.stderr[-2000:]
        last = own.stderr.strip().splitlines()[-1]
        assert last.startswith("AssertionError: "), own.stderr[-2000:]
        if saved.finding.kind in ("mismatch", "untouched_write"):
            assert " wrong cells: " in last and (" expected " in last or " must keep " in last), last


@pytest.mark.parametrize("path, saved", NOT_SHOWN)
def test_a_kind_only_the_arena_shows_is_refused_with_why(path, saved):
    why = why_not_short(saved)
    assert why.startswith((f"a short repro cannot show {saved.finding.kind}: ",
                           "a short repro cannot show this case: it also shows "))
    with pytest.raises(ValueError, match="a short repro cannot show"):
        render_short(saved)


def test_a_finding_merged_with_a_wild_write_gets_the_full_script():
    """On the H200, an input_modified (seq_len_a changed by the kernel's wild write past
    page_table_dst, which the case also shows) got a short script that did not reproduce: the
    short script's separate allocations put no input where the write lands."""
    import dataclasses

    path, saved = next((p, s) for p, s in _corpus() if why_not_short(s) is None)
    wild = f"{saved.case.op}:x:out_of_bounds_write:y:after"
    merged = dataclasses.replace(saved, case=saved.case.with_meta(signatures=[saved.finding.signature, wild]))
    assert why_not_short(merged) == (f"a short repro cannot show this case: it also shows {wild}, and it writes "
                                     "outside the tensors' elements, which only the guarded arena shows")
    alike = dataclasses.replace(saved, case=saved.case.with_meta(
        signatures=[saved.finding.signature, f"{saved.case.op}:x:mismatch:y:all"]))
    assert why_not_short(alike) is None


def test_replay_short_writes_the_full_script_for_an_out_of_bounds_write_and_says_why(tmp_path, device, capsys):
    case = CORPUS / "swa_spec_page_table" / "9eca8a1f0ba01d7d"  # out_of_bounds_write (a stride gap)
    script = tmp_path / "r.py"
    assert main(["replay", str(case), "--device", device, "--in-process", "--emit-repro", str(script), "--short"]) == 0
    out = capsys.readouterr().out
    assert "repro    a short repro cannot show out_of_bounds_write: it writes outside the tensors' elements, " \
           "which only the guarded arena shows: wrote the full script instead" in out
    assert "arena_image=" in script.read_text()  # the full script, memory image and all


def test_short_without_emit_repro_is_bad_usage(capsys):
    assert main(["replay", str(CORPUS / "swa_spec_page_table" / "97a4773cf309275b"), "--short"]) == 2
    assert "--short goes with --emit-repro" in capsys.readouterr().err


def _saved(case, finding=None, target="builtin"):
    return SavedCase(case=case, finding=finding, target=target, device="cpu", versions={}, origin="hand",
                     expected="pass")


def test_a_strided_input_is_its_storage_through_as_strided_and_runs_are_folded():
    assert _run_list([1, 2] + [7] * 9 + [3]) == "[1, 2] + [7] * 9 + [3]"
    assert _run_list([5] * 3) == "[5, 5, 5]"
    base = cases.spec(la=(2,), R=1, WB=1)
    lens = base.tensors["seq_len_b"]
    strided = TensorSpec(lens.dtype, lens.shape, (2,), 1, lens.storage_size * 2 + 1)
    case = base.replace(tensors={**base.tensors, "seq_len_b": strided})
    src = render_short(_saved(case))
    statement = " ".join(re.search(r"^seq_len_b = .*?(?=\n\S)", src, re.S | re.M).group(0).split())
    # the storage: canary at 0, the value at offset 1, then the guard band's canary
    b = int(case.values["seq_len_b"][0])
    assert statement.startswith(f"seq_len_b = torch.tensor([-1515870811, {b}] + [-1515870811] * 257, ")
    assert statement.endswith(".as_strided((1,), (2,), 1)"), statement


@pytest.mark.thorough  # seconds of processes and campaigns: CI's thorough stage
@pytest.mark.interpreter
def test_a_must_refuse_case_passes_only_when_the_call_raises(tmp_path):
    case = cases.decode(ps=4).with_scalars(page_size=3)
    finding = Finding("invalid_accepted", "decode_metadata", "general", "-", "page_size", "ran it")
    script = tmp_path / "refuse.py"
    write_short_repro(_saved(case, finding), script)
    assert run_script(script, BUILTIN).returncode == 0  # builtin raises ValueError
    accepting = tmp_path / "accepting.py"  # a kernel file that runs anything
    accepting.write_text("def normal_decode_set_metadata(**kwargs):\n    pass\n")
    p = run_script(script, accepting)
    assert p.returncode == 1 and "ran a case it must refuse: page_size 3 is not a positive power of two" in p.stderr
    assert run_script(script, tmp_path / "missing.py").returncode == 2


@pytest.mark.interpreter
def test_without_a_path_the_entry_point_comes_from_sglang_and_no_sglang_is_exit_2(tmp_path):
    saved = next(s for p, s in _corpus() if p.name == "97a4773cf309275b")
    script = tmp_path / "repro.py"
    write_short_repro(saved, script)
    assert "from sglang.srt.layers.attention.triton_ops.metadata import prepare_swa_spec_page_table_triton" \
        in script.read_text()  # sglang 0.5.14's module
    fake = tmp_path / "site" / "sglang"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('a stand-in that cannot be imported')\n")
    env = dict(os.environ, TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES="", PYTHONPATH=str(fake.parent))
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 2 and "cannot import sglang" in p.stderr and "Traceback" not in p.stderr, p.stderr


@pytest.mark.parametrize("path, saved", SHOWN)
def test_a_short_script_is_clean_and_imports_only_the_standard_library_torch_and_sglang(path, saved):
    from test_repro import lint, script_imports

    src = render_short(saved, path.name)
    assert lint(src, "repro.py") == []
    assert script_imports(src) <= {"importlib.util", "inspect", "os", "sys", "types", "torch",
                                   "sglang.kernels.ops.attention.metadata",
                                   "sglang.srt.layers.attention.triton_ops.metadata",
                                   "sglang.srt.mem_cache.swa_memory_pool"}, script_imports(src)
