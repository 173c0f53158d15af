"""The `git:REV:PATH` target: a kernel file as it is at a revision of a local git repository.

A throwaway repository holds `kernels/metadata.py` in two commits: a clean
`normal_decode_set_metadata` (the mutant fixture without its planted in-place write), then the
mutant fixture itself, whose write to `seq_lens` on a draft step with `seq_len_delta == 3` is an
`input_modified` finding. Each revision's spec loads that revision's file: the defect shows at
one and not at the other.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

import cases as hand
from kvfuzz.cli import main
from kvfuzz.corpus import SavedCase, write_case_dir
from kvfuzz.errors import TargetLoadError
from kvfuzz.judge import judge
from kvfuzz.targets import load_target
from kvfuzz.targets.gitrev import git_kernel_file
from kvfuzz.worker import InProcessExecutor

MUTANT_TEXT = (Path(__file__).resolve().parent / "fixtures" / "mutant_kernels.py").read_text()
PLANTED = "    if seq_len_delta == 3 and seq_lens.numel():\n        seq_lens[:1].add_(1)\n"
CLEAN_TEXT = MUTANT_TEXT.replace(PLANTED, "")
MODIFIED = "decode_metadata:ps1:input_modified:seq_lens:elements"
REL = "kernels/metadata.py"


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def repo(tmp_path, monkeypatch) -> Path:
    """A repository at tmp_path/repo, branch `main`: commit 1 (branch `clean`, tag `v1`) the
    clean kernel, commit 2 the mutant. No host git configuration, no repository above it, and
    kvfuzz's cache under tmp_path."""
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", os.devnull)
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    monkeypatch.setenv("KVFUZZ_CACHE", str(tmp_path / "cache"))
    r = tmp_path / "repo"
    (r / "kernels").mkdir(parents=True)
    git(r, "init", "-q")
    git(r, "symbolic-ref", "HEAD", "refs/heads/main")
    git(r, "config", "user.name", "kvfuzz test")
    git(r, "config", "user.email", "kvfuzz@example.invalid")
    git(r, "config", "commit.gpgsign", "false")
    assert CLEAN_TEXT != MUTANT_TEXT
    (r / REL).write_text(CLEAN_TEXT)
    git(r, "add", REL)
    git(r, "commit", "-q", "-m", "clean kernel")
    git(r, "branch", "clean")
    git(r, "tag", "v1")
    (r / REL).write_text(MUTANT_TEXT)
    git(r, "commit", "-q", "-am", "mutant kernel")
    return r


def findings(spec: str, device: str) -> set[str]:
    """The signatures of the input_modified case on `spec`'s target."""
    ex = InProcessExecutor(spec, device)
    try:
        return {f.signature for f in judge(hand.decode(ps=1, delta=3), ex.run(hand.decode(ps=1, delta=3))).findings}
    finally:
        ex.close()


def test_each_revision_loads_its_own_file(repo, device, tmp_path):
    path = repo / REL
    mutant, clean = f"git:HEAD:{path}", f"git:HEAD~1:{path}"
    assert MODIFIED in findings(mutant, device)
    assert findings(clean, device) == set()
    assert load_target(mutant, device).module is not load_target(clean, device).module

    sha = git(repo, "rev-parse", "HEAD~1")
    top = Path(git(repo, "rev-parse", "--show-toplevel"))
    t = load_target(clean, device)
    assert t.description == f"git HEAD~1 ({sha[:12]}) {REL} in {top}"
    assert t.release is None
    cached = Path(t.module.__file__)
    assert cached.parent == tmp_path / "cache" / "git" and cached.read_text() == CLEAN_TEXT


@pytest.mark.parametrize("rev, defect", [("main", True), ("clean", False), ("v1", False), ("HEAD^", False)])
def test_branches_tags_and_relative_revisions_resolve(repo, device, rev, defect):
    assert (MODIFIED in findings(f"git:{rev}:{repo / REL}", device)) is defect


def test_a_full_sha_such_as_a_merge_base_resolves(repo, device):
    base = git(repo, "merge-base", "main", "clean")
    path, _ = git_kernel_file(f"git:{base}:{repo / REL}")
    assert path.read_text() == CLEAN_TEXT
    assert findings(f"git:{base}:{repo / REL}", device) == set()


def test_a_relative_path_is_taken_from_the_working_directory(repo, monkeypatch):
    monkeypatch.chdir(repo)
    path, description = git_kernel_file(f"git:clean:{REL}")
    assert path.read_text() == CLEAN_TEXT and f" {REL} in " in description
    monkeypatch.chdir(repo / "kernels")  # a subdirectory: PATH is relative to it, not to the top
    path, description = git_kernel_file("git:main:metadata.py")
    assert path.read_text() == MUTANT_TEXT and f" {REL} in " in description


def test_a_file_deleted_from_the_work_tree_still_loads_from_a_revision(repo, device, monkeypatch):
    git(repo, "rm", "-q", "-r", "kernels")  # the file and its directory gone from the work tree
    git(repo, "commit", "-q", "-m", "drop the kernel")
    assert not (repo / "kernels").exists()
    assert MODIFIED in findings(f"git:HEAD~1:{repo / REL}", device)
    monkeypatch.chdir(repo)
    path, _ = git_kernel_file(f"git:clean:{REL}")
    assert path.read_text() == CLEAN_TEXT
    with pytest.raises(TargetLoadError, match=f"{REL} does not exist at HEAD"):
        git_kernel_file(f"git:HEAD:{REL}")


def test_the_path_may_hold_a_colon_the_first_one_ends_the_revision(repo):
    (repo / "odd:name.py").write_text(CLEAN_TEXT)
    git(repo, "add", "odd:name.py")
    git(repo, "commit", "-q", "-m", "a colon in a name")
    path, description = git_kernel_file(f"git:HEAD:{repo / 'odd:name.py'}")
    assert path.read_text() == CLEAN_TEXT and " odd:name.py in " in description


@pytest.mark.slow  # CI's slow stage runs it (.ci/run)
def test_a_replay_in_a_worker_shows_the_defect_at_one_revision_only(repo, device, tmp_path, monkeypatch, capsys):
    """The CLI, with the target in a worker process (the same working directory, a relative PATH)."""
    monkeypatch.chdir(repo)
    case = hand.decode(ps=1, delta=3)
    spec = f"git:main:{REL}"
    verdict = judge(case, InProcessExecutor(spec, device).run(case))
    finding = next(f for f in verdict.findings if f.signature == MODIFIED)
    saved = SavedCase(case=case, finding=finding, target=spec, device=device, versions={}, origin="hand",
                      expected="xfail", reason="the mutant's planted input_modified")
    (tmp_path / "case").mkdir()
    write_case_dir(saved, tmp_path / "case")
    assert main(["replay", str(tmp_path / "case"), "--device", device]) == 1  # its own target, in a worker
    assert main(["replay", str(tmp_path / "case"), "--device", device, "--target", f"git:clean:{REL}"]) == 0
    out = capsys.readouterr().out
    assert "input_modified" in out


@pytest.mark.parametrize("spec, message", [
    ("git:", "target 'git:': no revision; expected git:REV:PATH"),
    ("git:HEAD", "target 'git:HEAD': no path; expected git:REV:PATH"),
    ("git::{repo}/kernels/metadata.py", "no revision; expected git:REV:PATH"),
    ("git:nope:{repo}/kernels/metadata.py", "unknown revision 'nope' in "),
    ("git:HEAD:{repo}/kernels/gone.py", "kernels/gone.py does not exist at HEAD ("),
    ("git:HEAD:{repo}/kernels", "kernels at HEAD ("),
    ("git:HEAD:{outside}/x.py", "is not inside a git work tree"),
])
def test_bad_input_is_one_line_and_exit_2(repo, tmp_path, capsys, spec, message):
    (tmp_path / "outside").mkdir()
    spec = spec.format(repo=repo, outside=tmp_path / "outside")
    assert main(["fuzz", "--target", spec, "--budget", "1", "--in-process"]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err, err


def test_without_git_the_error_says_so(repo, monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no git program anywhere on PATH
    assert main(["ops", "--target", f"git:HEAD:{repo / REL}"]) == 2
    err = capsys.readouterr().err
    assert "git is not installed" in err and err.count("\n") == 1, err


def test_the_command_line_refuses_an_unknown_revision_in_one_line(repo, monkeypatch):
    """As a user runs it: `python3 -m kvfuzz.cli fuzz --target git:nope:x.py --budget 1`."""
    import sys

    monkeypatch.chdir(repo)
    p = subprocess.run([sys.executable, "-m", "kvfuzz.cli", "fuzz", "--target", "git:nope:x.py", "--budget", "1"],
                       capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)})
    assert p.returncode == 2, p.stderr
    assert p.stderr.count("\n") == 1 and "unknown revision 'nope'" in p.stderr, p.stderr


def test_a_package_file_with_relative_imports_loads_with_its_siblings_at_that_revision(repo, device, tmp_path):
    """kvfuzz's own kernels import `._args` relatively: the git target extracts the file's whole
    package folder as it was at REV, so the sibling it imports is REV's, not the work tree's."""
    kernels = Path(__file__).resolve().parent.parent / "kvfuzz" / "kernels"
    pkg = repo / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "_args.py").write_text((kernels / "_args.py").read_text() + "\nMARK = 'at v2'\n")
    (pkg / "num_kv_splits.py").write_text((kernels / "num_kv_splits.py").read_text()
                                          + "\nfrom ._args import MARK  # noqa: E402\n")
    git(repo, "add", "pkg")
    git(repo, "commit", "-q", "-m", "a package")
    (pkg / "_args.py").write_text("raise ImportError('the work tree, not the revision')\n")
    t = load_target(f"git:HEAD:{pkg / 'num_kv_splits.py'}", device)
    assert t.module.MARK == "at v2"
    assert callable(t.module.get_num_kv_splits_triton)


def test_a_lone_file_with_relative_imports_fails_naming_the_spec(repo, tmp_path, capsys):
    (repo / "lone.py").write_text("from ._args import _INDEX\n")
    git(repo, "add", "lone.py")
    git(repo, "commit", "-q", "-m", "a lone file")
    spec = f"git:HEAD:{repo / 'lone.py'}"
    assert main(["ops", "--target", spec]) == 2
    err = capsys.readouterr().err
    assert f"target {spec}: loading the kernel file failed: ImportError" in err, err
    assert str(tmp_path / "cache") not in err and err.count("\n") == 1, err
