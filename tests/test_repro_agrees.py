"""The standalone repro script agrees with kvfuzz's judge.

For every saved case under corpora/, the script that `kvfuzz replay --emit-repro` writes is run
as a user runs it (`python FILE.py KERNELS --device D`, a fresh process that supervises a child)
against the case's own target, and its verdict — exit status, and the signature
`op:path:kind:tensor:where` of every defect it prints, and the cells its `--json` lists for
each (index and value got, stray byte offsets, where a read came from) — must equal the verdict of kvfuzz's
judge on the same case, file and device, as `kvfuzz replay --target FILE` reaches it (a kvfuzz
worker process, the variant the file selects, two runs). Targets: `builtin` is kvfuzz's kernels
package (the script is given the directory kvfuzz/kernels and loads its __init__.py, the judge
that file); `sglang==0.5.14` is the seed file (conftest.seed_kernel_path); a file target is that
file. A known defect that was seen on another device and does not show here is skipped, as the
pytest plugin skips it. A few plain-torch kernels then check rules the corpus does not reach
(a nondeterministic kernel, a kernel that ends its process, an in-contract raise).

`oracle_disagreement` findings are left out of the comparison: they say kvfuzz's two oracles
disagree, which is about kvfuzz, not the kernel; the script embeds the NumPy oracle's answers only.

Each case costs one script process (the judge's worker runs meanwhile and is kept per target);
`-n 2` runs two cases at a time.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import DEVICE, seed_kernel_path
from kvfuzz.corpus import SavedCase, iter_cases
from sampling import fast_if_first, sampled

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO / "corpora"
NOT_COMPARED = ("oracle_disagreement",)  # kvfuzz's oracles against each other, not the kernel
DEFECT_LINE = re.compile(r"^DEFECT (\w+): .*  \[([^\]\s]+)\]$", re.M)

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

CASES = list(iter_cases(CORPUS))


def _one_per_kind(cases) -> list:
    """Every case; in the fast suite the first of each kind, op and expectation, the rest marked
    thorough (each is a script run in a process of its own)."""
    keys = []
    for path, saved in cases:
        if isinstance(saved, SavedCase):
            keys.append([("kind", saved.finding.kind if saved.finding else None), ("op", saved.case.op),
                         ("expected", saved.expected)])
        else:
            keys.append([("unreadable", path.name)])
    return fast_if_first([pytest.param(item, id=_case_id(item)) for item in cases], keys)


def _case_id(item) -> str:
    path, saved = item
    if not isinstance(saved, SavedCase):
        return f"unreadable:{path.name}"
    return f"{saved.case.op}:{saved.finding.kind if saved.finding else 'regression'}:{path.name}"


def target_files(target: str) -> tuple[Path, str]:
    """(what the script is given, the spec the judge loads) for a case's target."""
    if target == "builtin":  # the package by path: judged by the variant its signatures select, as the script does
        return REPO / "kvfuzz" / "kernels", str(REPO / "kvfuzz" / "kernels" / "__init__.py")
    if target.startswith("sglang=="):
        version = target.split("==", 1)[1]
        if version == "0.5.14":
            path = seed_kernel_path()
        else:
            from kvfuzz.errors import BadInput
            from kvfuzz.targets.wheels import sglang_kernel_file

            try:
                path = sglang_kernel_file(version)
            except BadInput as exc:
                pytest.skip(f"target {target} is not available here: {exc}")
        return Path(path), str(path)
    path = Path(target) if Path(target).is_absolute() else REPO / target
    if not path.is_file():
        pytest.skip(f"target {target} is not available here")
    return path, str(path)


@pytest.fixture(scope="module")
def judge_on():
    """judge_on(spec, case) -> kvfuzz's Verdict: a worker process per target (kept for the
    module, as the pytest plugin keeps one), the case under the contract variant the target
    selects (as `kvfuzz replay --target FILE`, and the script, judge a kernel file), two runs,
    the judge."""
    from kvfuzz.check import Checker
    from kvfuzz.judge import judge
    from kvfuzz.worker import WorkerExecutor

    executors: dict[str, WorkerExecutor] = {}

    def run(spec, case):
        if spec not in executors:
            executors[spec] = WorkerExecutor(spec, DEVICE)
        ex = executors[spec]
        if case.op in ex.missing:
            pytest.skip(f"target {spec} has no {case.op}: {ex.missing[case.op]}")
        case = Checker.settled(ex, case.op, spec).adopt(case)
        return judge(case, ex.run(case, repeats=2))

    yield run
    for ex in executors.values():
        ex.close()


def start_script(script: Path, kernels: Path) -> subprocess.Popen:
    """The script as a user runs it: a fresh process where kvfuzz cannot be imported
    (test_repro.without_kvfuzz), no TRITON_INTERPRET, the working directory the script's own."""
    from test_repro import without_kvfuzz

    env = without_kvfuzz()
    return subprocess.Popen([sys.executable, str(script), str(kernels), "--device", DEVICE,
                             "--json", str(script.with_suffix(".json"))], env=env,
                            cwd=str(script.parent), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen) -> subprocess.CompletedProcess:
    try:
        out, err = proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def script_verdict(r: subprocess.CompletedProcess) -> list[str]:
    """The signatures of the defects the script printed; its exit status must say the same."""
    assert r.returncode in (0, 1), f"the script did not give a verdict\n{show(r)}"
    defects = [sig for _, sig in DEFECT_LINE.findall(r.stdout)]
    assert r.stdout.count("\nDEFECT ") + r.stdout.startswith("DEFECT ") == len(defects), show(r)
    assert r.returncode == (1 if defects else 0), show(r)
    return sorted(defects)


def judge_verdict(verdict) -> list[str]:
    return sorted(f.signature for f in verdict.findings if f.kind not in NOT_COMPARED)


CELL_FIELDS = ("index", "byte", "got", "tensor", "read_at", "changed")  # what the script's --json writes


def assert_same_cells(script: Path, verdict, r: subprocess.CompletedProcess) -> None:
    """The script's --json verdict lists each finding with the cells kvfuzz's finding lists
    (the wrong cells, their values, the stray bytes, where a read came from), cell for cell."""
    written = json.loads(script.with_suffix(".json").read_text(encoding="utf-8"))
    assert written["exit"] == r.returncode, show(r)
    theirs = {f["signature"]: [{k: c[k] for k in CELL_FIELDS if k in c} for c in f["cells"]]
              for f in written["findings"]}
    ours: dict[str, list] = {}
    for f in verdict.findings:
        if f.kind not in NOT_COMPARED:
            ours.setdefault(f.signature, [{k: c[k] for k in CELL_FIELDS if k in c} for c in f.cells])
    assert theirs == ours, show(r)


def show(r: subprocess.CompletedProcess) -> str:
    return f"exit {r.returncode}\n--- stdout\n{r.stdout}\n--- stderr\n{r.stderr[-3000:]}"


@pytest.mark.parametrize("item", _one_per_kind(CASES))
def test_script_verdict_equals_replay(item, judge_on, tmp_path):
    from kvfuzz.repro import write_repro

    path, saved = item
    if not isinstance(saved, SavedCase):
        pytest.fail(f"{path}: unreadable case: {saved}")
    kernels, spec = target_files(saved.target)
    script = tmp_path / "repro.py"
    write_repro(saved, script, device=DEVICE)
    proc = start_script(script, kernels)
    try:
        verdict = judge_on(spec, saved.case)
    finally:
        r = finish(proc)
    judged = judge_verdict(verdict)
    saved_sig = saved.finding.signature if saved.finding else None
    if saved.expected == "xfail" and saved.device != DEVICE and saved_sig not in judged:
        pytest.skip(f"defect was seen on {saved.device}; it does not show on {DEVICE}")  # as the plugin does

    assert script_verdict(r) == judged, f"kvfuzz's judge: {judged}\n{show(r)}"
    assert_same_cells(script, verdict, r)
    reproduces = saved_sig is not None and saved_sig in judged
    assert ("The saved finding reproduces." in r.stdout) == reproduces, show(r)


# --------------------------------------------------------------------------- beyond the corpus
# Plain-torch kernels for one num_kv_splits case, each breaking a rule the corpus does not reach.

KERNELS = {
    # the second call differs from the first: nondeterministic, named after the tensor
    "nondeterministic": "CALLS.append(1); out[1] += len(CALLS) - 1",
    # the process ends inside the kernel, with a status that is not a verdict
    "exits": "import os; os._exit(0)",
    "sys_exit": "raise SystemExit(1)",
    # an in-contract case that raises (the corpus has none)
    "raises": "raise RuntimeError('boom')",
    # reads the word after seq_lens (its guard band) and stores it: decoded from the value
    "copies_past": "out[1] = seq_lens.as_strided((1,), (1,), seq_lens.storage_offset() + 4).item()",
    # reads it and only tests it: the value stored says nothing, the probe runs tell
    "tests_past": "out[1] += int(seq_lens.as_strided((1,), (1,), seq_lens.storage_offset() + 4).item() != -1515870811)",
}


@pytest.mark.parametrize("name", sampled("hand-made kernels", sorted(KERNELS), share=2))
def test_script_verdict_equals_replay_on_hand_made_kernels(name, judge_on, tmp_path):
    import numpy as np

    from kvfuzz.case import Case, TensorSpec
    from kvfuzz.corpus import environment_versions
    from kvfuzz.ops import CONTRACTS
    from kvfuzz.repro import write_repro

    lens = np.array([4, 5, 9, 1])
    c = TensorSpec.contiguous
    case = Case("num_kv_splits", dict(num_seq=4, num_group=1, num_head=32, num_kv_head=32, max_kv_splits=8,
                                      device_core_count=132),
                {"num_kv_splits": c("int32", (4,)), "seq_lens": c("int32", (4,))}, {"seq_lens": lens})
    want = CONTRACTS["num_kv_splits"].numpy_ref(case).values["num_kv_splits"].tolist()
    kernels = tmp_path / f"k_{name}.py"
    kernels.write_text("import torch\n\nCALLS = []\n\n" + textwrap.dedent(f"""
        def get_num_kv_splits_triton(out, seq_lens, num_seq, num_group, num_head, num_kv_head,
                                     max_kv_splits, device_core_count):
            out.copy_(torch.tensor({want!r}, dtype=out.dtype))
            {KERNELS[name]}
    """))
    saved = SavedCase(case=case, finding=None, target=str(kernels), device=DEVICE,
                      versions=environment_versions(), origin="hand")
    script = tmp_path / "repro.py"
    write_repro(saved, script, device=DEVICE)
    proc = start_script(script, kernels)
    try:
        verdict = judge_on(str(kernels), case)
    finally:
        r = finish(proc)
    judged = judge_verdict(verdict)
    expected = {"nondeterministic": ["num_kv_splits:splits:nondeterministic:num_kv_splits:rerun"],
                "exits": ["num_kv_splits:splits:crash:-:0"], "sys_exit": ["num_kv_splits:splits:crash:-:1"],
                "raises": ["num_kv_splits:splits:crash:-:RuntimeError"],
                "copies_past": ["num_kv_splits:splits:mismatch:num_kv_splits:partial",
                                "num_kv_splits:splits:out_of_bounds_read:seq_lens:after"],
                "tests_past": ["num_kv_splits:splits:out_of_bounds_read:seq_lens:after"]}[name]
    assert judged == expected  # what the judge says, so the comparison below means something
    assert script_verdict(r) == judged, show(r)
    assert_same_cells(script, verdict, r)


# The releases' own ways of passing SWA, which the corpus reaches for 0.5.19 only: 0.5.18's
# unified pool holds swa_v2p inside token_to_kv_pool; 0.5.19 reads that pool beside its read
# tables (the script passed None there and raised AttributeError where kvfuzz saw the release's
# AssertionError).
RELEASE_PATHS = {
    "0.5.18-swa_v2p": ("0.5.18", lambda c: c.unified(c.decode(ps=4, swa=True), swa_v2p="permuted",
                                                     variant="v2p_swa")),
    "0.5.19-read_table": ("0.5.19", lambda c: c.read_table(c.decode(ps=4, swa=True))),
}


@pytest.mark.parametrize("name", sampled("release swa paths", sorted(RELEASE_PATHS), share=2))
def test_script_verdict_equals_replay_on_release_swa_paths(name, judge_on, tmp_path):
    import cases as c
    from kvfuzz.corpus import environment_versions
    from kvfuzz.repro import write_repro

    version, make = RELEASE_PATHS[name]
    case = make(c)
    kernels, spec = target_files(f"sglang=={version}")
    saved = SavedCase(case=case, finding=None, target=f"sglang=={version}", device=DEVICE,
                      versions=environment_versions(), origin="hand")
    script = tmp_path / "repro.py"
    write_repro(saved, script, device=DEVICE)
    r = finish(start_script(script, kernels))
    judged = judge_verdict(judge_on(spec, case))
    assert not any(s.endswith(("AttributeError", "TypeError")) for s in judged), judged  # kvfuzz's call is right
    assert script_verdict(r) == judged, f"kvfuzz's judge: {judged}\n{show(r)}"


@pytest.mark.parametrize("name", sampled("overruns", ["reads_past_a", "writes_past_dst"], share=2))
def test_script_verdict_equals_replay_on_a_triton_kernel_that_overruns(name, judge_on, tmp_path):
    """tests/fixtures/overrun_kernels.py: a read past an input (decoded from the values
    stored) and a write past an output into a neighbour's guard band, named alike."""
    import test_out_of_bounds as oob
    from kvfuzz.corpus import environment_versions
    from kvfuzz.repro import write_repro

    case = getattr(oob, name)()
    kernels = Path(oob.OVERRUN)
    saved = SavedCase(case=case, finding=None, target=str(kernels), device=DEVICE,
                      versions=environment_versions(), origin="hand")
    script = tmp_path / "repro.py"
    write_repro(saved, script, device=DEVICE)
    proc = start_script(script, kernels)
    try:
        verdict = judge_on(str(kernels), case)
    finally:
        r = finish(proc)
    judged = judge_verdict(verdict)
    assert judged == [{"reads_past_a": oob.READ, "writes_past_dst": oob.WRITE}[name]]
    assert script_verdict(r) == judged, show(r)
    assert_same_cells(script, verdict, r)
