"""scripts/nightly.sh and the recipes in docs/recipes/ run as written and bring new cases into
the corpus they are given: their shell is run here with a tiny budget against a target that is
wrong on every case (a finding in the first batch), on the CPU."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kvfuzz.corpus import iter_cases

REPO = Path(__file__).resolve().parent.parent
NIGHTLY = REPO / "scripts" / "nightly.sh"
SLURM = REPO / "docs" / "recipes" / "slurm" / "kvfuzz-shards.sh"
WORKFLOW = REPO / "docs" / "recipes" / "github-actions" / "kvfuzz-nightly.yml"

# a num_kv_splits entry point wrong on every case; plain torch, so the runs stay cheap
WRONG_SPLITS = "def get_num_kv_splits_triton(out, seq_lens, num_seq, *args):\n    out.fill_(-1)\n"
FUZZ_ARGS = "--op num_kv_splits --minimize-budget 1"


def wrong_target(tmp_path: Path) -> str:
    path = tmp_path / "wrong_splits.py"
    path.write_text(WRONG_SPLITS)
    return str(path)


def keys(corpus: Path) -> set[tuple[str, str]]:
    """(op, key) of every readable case under `corpus` (none when it does not exist)."""
    if not corpus.exists():
        return set()
    found = set()
    for path, case in iter_cases([corpus]):
        assert not isinstance(case, Exception), f"{path}: {case}"
        found.add((path.parent.name, path.name))
    return found


# what the scripts read from the environment: only what a test gives them
SCRIPT_VARS = {"CORPUS", "STATE", "TARGETS", "TARGET", "BUDGET", "JOBS", "TIME_LIMIT", "DEVICE", "FUZZ_ARGS",
               "SHARDS", "RUN_DIR", "COMMIT", "SLURM_ARRAY_TASK_ID", "SHARD", "SEED", "GITHUB_STEP_SUMMARY"}


def environment(**given: str) -> dict[str, str]:
    """This environment less the scripts' variables, plus `given`; the `kvfuzz` on PATH is this
    Python's."""
    env = {k: v for k, v in os.environ.items() if k not in SCRIPT_VARS}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return {**env, **given}


def bash(script: str | Path, *args: str, cwd: Path, env: dict[str, str], shell_flags=()) -> subprocess.CompletedProcess:
    argv = ["bash", *shell_flags, *(["-c", script] if isinstance(script, str) else [str(script)]), *args]
    return subprocess.run(argv, cwd=cwd, env=environment(**env), capture_output=True, text=True, timeout=600)


def show(p: subprocess.CompletedProcess) -> str:
    return f"exit {p.returncode}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"


# ------------------------------------------------------------------------------ nightly.sh


@pytest.mark.slow
@pytest.mark.interpreter
def test_nightly_merges_into_its_own_checkouts_corpus_from_any_directory(tmp_path):
    checkout = tmp_path / "checkout"  # a checkout holding the script (and so its corpora/)
    (checkout / "scripts").mkdir(parents=True)
    shutil.copy(NIGHTLY, checkout / "scripts" / "nightly.sh")
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "corpora").mkdir(parents=True)  # a corpora/ the script must leave alone
    env = {"TARGETS": wrong_target(tmp_path), "BUDGET": "2", "TIME_LIMIT": "120", "DEVICE": "cpu",
           "FUZZ_ARGS": FUZZ_ARGS}
    p = bash(checkout / "scripts" / "nightly.sh", "reports", cwd=elsewhere, env=env)
    assert p.returncode == 1, show(p)  # a new finding
    saved = keys(checkout / "corpora")
    assert saved and {op for op, _ in saved} == {"num_kv_splits"}, show(p)
    assert not any((elsewhere / "corpora").iterdir())
    assert f"new cases merged into {checkout / 'corpora'}" in p.stdout
    assert len(list((elsewhere / "reports").glob("*wrong_splits.py.json"))) == 1  # reports stay where it runs

    # CORPUS given: the next night's run merges there (its finding now known: exit 0)
    given = tmp_path / "given"
    p = bash(checkout / "scripts" / "nightly.sh", "reports2", cwd=elsewhere, env={**env, "BUDGET": "1", "CORPUS": str(given)})
    assert p.returncode == 0, show(p)
    assert keys(given) == saved
    assert not any((elsewhere / "corpora").iterdir())


# ----------------------------------------------------------------------------- Slurm recipe


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout


GIT_ID = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
          "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}


@pytest.mark.slow
@pytest.mark.interpreter
def test_slurm_tasks_save_per_shard_and_the_merge_brings_their_cases_to_the_corpus(tmp_path):
    repo = _repo_with_corpus(tmp_path / "checkout")  # the git checkout that holds CORPUS
    run_dir = tmp_path / "run"
    env = {"SHARDS": "2", "RUN_DIR": str(run_dir), "CORPUS": str(repo / "corpora"), "TARGET": wrong_target(tmp_path),
           "DEVICE": "cpu", "BUDGET": "2", "TIME_LIMIT": "120", "FUZZ_ARGS": FUZZ_ARGS, **GIT_ID}

    # the array's two tasks at once, as Slurm starts them
    tasks = [subprocess.Popen(["bash", str(SLURM), "task"], cwd=tmp_path, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True,
                              env=environment(**env, SLURM_ARRAY_TASK_ID=str(i))) for i in (0, 1)]
    outputs = [t.communicate(timeout=600)[0] for t in tasks]
    for shard, (t, out) in enumerate(zip(tasks, outputs), 1):
        assert t.returncode == 1, out[-3000:]  # each shard saw the defect: exit 1, saved in its corpus
        assert "1 new findings" in out, out[-3000:]
        assert (run_dir / f"shard-{shard}" / "report.json").is_file()
    per_shard = [keys(run_dir / f"shard-{i}" / "corpus") for i in (1, 2)]
    assert all(per_shard), per_shard

    p = bash(SLURM, "merge", cwd=tmp_path, env=env)
    assert p.returncode == 0, show(p)
    assert keys(repo / "corpora") == per_shard[0] | per_shard[1]
    # the printed commands commit the new cases, and only them (no lock files)
    *_, said, add, commit = p.stdout.strip().splitlines()
    assert said.startswith("kvfuzz: new cases in") and add.startswith("git -C") and " commit " in commit, p.stdout
    for line in (add, commit):
        subprocess.run(line, shell=True, executable="/bin/bash", check=True, cwd=tmp_path, env=environment(**GIT_ID))
    committed = _git(repo, "show", "--name-only", "--format=", "HEAD").split()
    assert committed and all(f.startswith("corpora/num_kv_splits/") and "/." not in f for f in committed)
    assert {tuple(f.split("/")[1:3]) for f in committed} == keys(repo / "corpora")
    p = bash(SLURM, "merge", cwd=tmp_path, env=env)  # again: nothing new to commit
    assert p.returncode == 0 and p.stdout.strip().splitlines()[-1].startswith("kvfuzz: no new cases"), show(p)


def _repo_with_corpus(path: Path) -> Path:
    """A git checkout at `path` with an empty corpora/ and one commit."""
    (path / "corpora").mkdir(parents=True)
    _git(path, "init", "-q")
    (path / "README").write_text("x\n")
    _git(path, "add", "README")
    subprocess.run(["git", "-C", str(path), "commit", "-q", "-m", "start"], check=True, env=environment(**GIT_ID))
    return path


def test_slurm_merge_with_commit_commits_the_new_cases_only(tmp_path):
    repo = _repo_with_corpus(tmp_path / "checkout")
    (repo / "staged.txt").write_text("someone's work in progress\n")
    _git(repo, "add", "staged.txt")
    run_dir = tmp_path / "run"
    cases = [p for p, _ in iter_cases([REPO / "corpora" / "num_kv_splits"])][:2]
    for shard, case in enumerate(cases, 1):  # two shards' corpora, a case each
        shutil.copytree(case, run_dir / f"shard-{shard}" / "corpus" / "num_kv_splits" / case.name)
    (run_dir / "shard-3").mkdir()  # a shard that saved nothing
    env = {"RUN_DIR": str(run_dir), "CORPUS": str(repo / "corpora"), "COMMIT": "1", **GIT_ID}
    p = bash(SLURM, "merge", cwd=tmp_path, env=env)
    assert p.returncode == 0, show(p)
    assert keys(repo / "corpora") == {("num_kv_splits", c.name) for c in cases}
    assert list((repo / "corpora" / "num_kv_splits").glob(".*.lock"))  # the store's own files, left out:
    committed = _git(repo, "show", "--name-only", "--format=", "HEAD").split()
    assert sorted(committed) == sorted(f"corpora/num_kv_splits/{c.name}/{f}" for c in cases
                                       for f in ("case.json", "tensors.npz"))
    assert _git(repo, "status", "--porcelain", "--", "staged.txt").startswith("A ")  # not committed with them


def test_slurm_submit_sbatches_the_array_then_the_merge_after_it(tmp_path):
    """sbatch here is a stand-in that logs its arguments and the environment it passes on."""
    log = tmp_path / "sbatch.log"
    fake = tmp_path / "bin" / "sbatch"
    fake.parent.mkdir()
    fake.write_text('#!/bin/bash\n{ printf "%s\\n" "$*"; echo "env $SHARDS $RUN_DIR $CORPUS"; } >> "$SBATCH_LOG"\n'
                    'n=$(grep -c "^env" "$SBATCH_LOG"); echo "$((100 + n));cluster"\n')
    fake.chmod(0o755)
    env = {"PATH": f"{fake.parent}:{os.environ['PATH']}", "SBATCH_LOG": str(log), "SHARDS": "3", "RUN_DIR": "runs"}
    p = bash(SLURM, "submit", cwd=tmp_path, env=env)
    assert p.returncode == 0, show(p)
    array, array_env, merge, merge_env = log.read_text().splitlines()
    assert array == f"--parsable --array=0-2 {SLURM} task"
    assert "--dependency=afterany:101 " in merge and f"--wrap=bash {SLURM} merge" in merge
    # RUN_DIR made absolute, CORPUS the corpora/ of the checkout holding the script
    assert array_env == merge_env == f"env 3 {tmp_path / 'runs'} {REPO / 'corpora'}"
    assert "array job 101 (3 tasks), merge job 102" in p.stdout


@pytest.mark.parametrize("mode, env, code, line", [
    ("task", {}, 2, "SLURM_ARRAY_TASK_ID is not set"),
    ("", {}, 2, "usage: kvfuzz-shards.sh submit|task|merge"),
    ("merge", {}, 0, "no shard saved a case"),
])
def test_slurm_script_modes_without_work(tmp_path, mode, env, code, line):
    p = bash(SLURM, *([mode] if mode else []), cwd=tmp_path,
             env={"RUN_DIR": str(tmp_path / "run"), "CORPUS": str(tmp_path / "c"), **env})
    assert p.returncode == code and line in (p.stdout + p.stderr), show(p)
    assert len((p.stdout + p.stderr).strip().splitlines()) == 1
    assert not (tmp_path / "c").exists()


# ------------------------------------------------------------------------- GitHub workflow


def readme_cpu_install() -> str:
    """The README's CPU install: its first command up to `pip install ... -e .`."""
    m = re.search(r"python3 -c 'import torch' 2>/dev/null \|\| .*? -e \.(?= |$)", (REPO / "README.md").read_text(), re.M)
    assert m, "README.md has no CPU install line"
    return m.group(0)


def run_blocks(text: str) -> dict[str, list[str]]:
    """Every job's `run: |` blocks, dedented, read from the text (no YAML parser needed)."""
    jobs: dict[str, list[str]] = {}
    lines = text.split("\n")
    in_jobs, job = False, None
    i = 0
    while i < len(lines):
        line = lines[i]
        if re.match(r"[A-Za-z]", line):  # a top-level key
            in_jobs = line == "jobs:"
        elif in_jobs and (m := re.fullmatch(r"  ([A-Za-z0-9_-]+):", line)):
            job = m.group(1)
            jobs[job] = []
        elif m := re.fullmatch(r"( *)run: \|", line):
            indent = len(m.group(1))
            block = []
            while i + 1 < len(lines) and (not lines[i + 1].strip() or len(lines[i + 1]) - len(lines[i + 1].lstrip()) > indent):
                i += 1
                block.append(lines[i])
            width = min(len(b) - len(b.lstrip()) for b in block if b.strip())
            jobs[job].append("\n".join(b[width:] for b in block).strip("\n") + "\n")
        i += 1
    return jobs


def test_workflow_structure():
    yaml = pytest.importorskip("yaml")
    doc = yaml.safe_load(WORKFLOW.read_text())
    jobs = doc["jobs"]
    assert set(jobs) == {"fuzz", "merge"}
    fuzz, merge = jobs["fuzz"]["steps"], jobs["merge"]["steps"]
    assert len(jobs["fuzz"]["strategy"]["matrix"]["shard"]) >= 2
    # the text-level reading of the run blocks (what the shell test runs) is the YAML's
    assert run_blocks(WORKFLOW.read_text()) == {j: [s["run"] for s in jobs[j]["steps"] if "run" in s] for j in jobs}

    (step,) = [s for s in fuzz if "kvfuzz fuzz" in s.get("run", "")]
    assert step["env"]["SHARD"] == "${{ matrix.shard }}/${{ strategy.job-total }}" and '--shard "$SHARD"' in step["run"]
    assert "--corpus shard-corpus" in step["run"]
    (upload,) = [s for s in fuzz if s.get("uses", "").startswith("actions/upload-artifact@")]
    assert upload["with"]["name"] == "kvfuzz-shard-${{ matrix.shard }}" and "shard-corpus/" in upload["with"]["path"]
    assert upload["if"] == "${{ !cancelled() }}"  # a shard with new findings fails, its corpus still goes up

    assert jobs["merge"]["needs"] == "fuzz" and jobs["merge"]["if"] == "${{ !cancelled() }}"
    (download,) = [s for s in merge if s.get("uses", "").startswith("actions/download-artifact@")]
    assert download["with"] == {"pattern": "kvfuzz-shard-*", "path": "shards"}
    assert any("kvfuzz corpus merge" in s.get("run", "") for s in merge)
    (pr,) = [s for s in merge if s.get("uses", "").startswith("peter-evans/create-pull-request@")]
    assert pr["with"]["add-paths"] == "corpora"
    assert jobs["merge"]["permissions"] == {"contents": "write", "pull-requests": "write"}


def test_workflow_installs_with_the_readmes_cpu_install_and_runs_no_expressions_in_shell():
    install = readme_cpu_install()
    blocks = run_blocks(WORKFLOW.read_text())
    for job in ("fuzz", "merge"):
        assert blocks[job][0] == install + "\n", job  # the first thing each job runs
    for block in sum(blocks.values(), []):
        assert "${{" not in block  # values reach the shell through env:, never spliced into it


@pytest.mark.slow  # campaign-sized: `pytest -m slow`
@pytest.mark.interpreter
def test_workflow_shard_and_merge_steps_run_end_to_end(tmp_path):
    blocks = run_blocks(WORKFLOW.read_text())
    (fuzz,) = [b for b in blocks["fuzz"] if "kvfuzz fuzz" in b]
    (merge,) = [b for b in blocks["merge"] if "kvfuzz corpus merge" in b]
    gh = ["--noprofile", "--norc", "-eo", "pipefail"]  # how GitHub runs a `run:` block with bash

    job = tmp_path / "fuzz-job"
    job.mkdir()
    summary = tmp_path / "summary.md"
    env = {"TARGET": wrong_target(tmp_path), "BUDGET": "2", "TIME_LIMIT": "120", "FUZZ_ARGS": FUZZ_ARGS,
           "SHARD": "1/2", "SEED": "7", "GITHUB_STEP_SUMMARY": str(summary), "RUN_ID": "4242"}
    p = bash(fuzz, cwd=job, env=env, shell_flags=gh)
    assert p.returncode == 1, show(p)  # new findings: the job fails, its corpus is kept
    assert keys(job / "shard-corpus") and (job / "shard-junit.xml").is_file()
    assert summary.read_text().startswith("# kvfuzz:")

    # the merge job's checkout: shards/ as download-artifact lays the artifacts out
    merge_job = tmp_path / "merge-job"
    shards = merge_job / "shards"
    shutil.copytree(job / "shard-corpus", shards / "kvfuzz-shard-1" / "shard-corpus")
    other = next(p for p, _ in iter_cases([REPO / "corpora" / "decode_metadata"]))
    shutil.copytree(other, shards / "kvfuzz-shard-2" / "shard-corpus" / "decode_metadata" / other.name)
    (shards / "kvfuzz-shard-3").mkdir()  # a shard that saved nothing uploads only its reports
    (shards / "kvfuzz-shard-3" / "shard-report.json").write_text("{}")
    held = next(p for p, _ in iter_cases([REPO / "corpora" / "num_kv_splits"]))
    shutil.copytree(held, merge_job / "corpora" / "num_kv_splits" / held.name)
    before = keys(merge_job / "corpora")
    from_shards = keys(shards / "kvfuzz-shard-1" / "shard-corpus") | keys(shards / "kvfuzz-shard-2" / "shard-corpus")

    p = bash(merge, cwd=merge_job, env=env, shell_flags=gh)
    assert p.returncode == 0, show(p)
    assert keys(merge_job / "merged-corpus") == from_shards
    assert keys(merge_job / "corpora") == before | from_shards
    assert "gh run download 4242 -n kvfuzz-merged-corpus -D merged-corpus && kvfuzz corpus merge merged-corpus corpora" \
        in summary.read_text()

    empty = tmp_path / "no-cases"
    (empty / "shards" / "kvfuzz-shard-1").mkdir(parents=True)
    p = bash(merge, cwd=empty, env=env, shell_flags=gh)
    assert p.returncode == 0 and not (empty / "corpora").exists(), show(p)
    assert summary.read_text().endswith("No shard saved a case.\n")
