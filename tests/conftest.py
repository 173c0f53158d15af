"""Shared fixtures. The device is chosen here, before any test module imports a kernel:
Triton picks compiled or interpreted mode when a kernel is defined."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kvfuzz import device as devmod
from kvfuzz.errors import DeviceModeError

from sampling import SHARD_ENV, in_shard, thorough_shard

try:
    DEVICE = devmod.select(os.environ.get("KVFUZZ_DEVICE", "auto"))
    INTERPRETER_REFUSED: str | None = None
except DeviceModeError as exc:  # kvfuzz refuses this machine's interpreter (a triton whose probes fail)
    DEVICE, INTERPRETER_REFUSED = "cpu", str(exc)
REPO = Path(__file__).resolve().parent.parent


# The longest tests (half a minute or more on 2 cores), run first: xdist hands tests out in
# collection order, and one of these handed out last would leave the other workers idle.
LONGEST_FIRST = (
    "test_a_campaign_against_a_faulting_target_saves_each_crash_and_finishes",
    "test_four_campaigns_save_into_one_corpus",
    "test_a_campaign_killed_six_times_while_saving_loses_nothing",
    "test_every_builtin_kernel_variant_compiles_for_sm90",
    "test_fuzz_builtin_is_clean_and_reports",
    "test_divergence_is_found_minimized_confirmed_saved_and_replayed",
    "test_a_short_campaign_on_0_5_19_has_no_false_crash",
    "test_workflow_shard_and_merge_steps_run_end_to_end",
    "test_a_finding_the_corpus_already_holds_is_known_and_fails_nothing",
    "test_target_override_follows_the_release_triage",
    "test_one_defect_with_two_signatures_is_one_finding_and_one_case",
)


def pytest_collection_modifyitems(config, items):
    """The longest tests first (`LONGEST_FIRST`; the sort keeps every other order). Where kvfuzz
    refuses this machine's Triton interpreter and no GPU runs the kernels, only the tests marked
    `nokernel` (and not `interpreter`) can run; every other one skips with kvfuzz's one-line
    reason."""
    items.sort(key=lambda item: item.originalname not in LONGEST_FIRST if hasattr(item, "originalname") else True)
    shard = thorough_shard(os.environ.get(SHARD_ENV))
    if shard is not None:  # one shard of the thorough tests; every other test stays
        gone = [item for item in items if item.get_closest_marker("thorough") is not None
                and not in_shard(item.nodeid, shard)]
        if gone:
            dropped = set(map(id, gone))
            items[:] = [item for item in items if id(item) not in dropped]
            config.hook.pytest_deselected(items=gone)
    if INTERPRETER_REFUSED:
        skip = pytest.mark.skip(reason=f"kvfuzz refuses this machine's Triton interpreter: {INTERPRETER_REFUSED}")
        for item in items:
            if item.get_closest_marker("nokernel") is None or item.get_closest_marker("interpreter") is not None:
                item.add_marker(skip)


def seed_kernel_path() -> Path:
    """SGLang 0.5.14's metadata kernels: $KVFUZZ_SEED_PATH, the shared seed beside the
    checkout, or the file inside the sglang==0.5.14 wheel from PyPI."""
    env = os.environ.get("KVFUZZ_SEED_PATH")
    if env:
        return Path(env)
    shared = REPO.parent / "shared" / "seed" / "metadata_kernels.py"
    if shared.is_file():
        return shared
    from kvfuzz.targets.wheels import sglang_kernel_file

    return sglang_kernel_file("0.5.14")


@pytest.fixture(scope="session")
def device() -> str:
    return DEVICE


_interpreter_refusal: list[str | None] = []  # once per session: None, or why kvfuzz refuses it


def _cpu_interpreter_refused() -> str | None:
    """Why kvfuzz refuses this machine's Triton interpreter (its probes, in a process of its
    own), or None. On the CPU this pytest run already selected it: its own answer."""
    if DEVICE == "cpu":
        return INTERPRETER_REFUSED
    if not _interpreter_refusal:
        import subprocess
        import sys

        r = subprocess.run([sys.executable, "-c", "from kvfuzz import device; device.select('cpu')"],
                           capture_output=True, text=True, timeout=300,
                           env={**os.environ, "TRITON_INTERPRET": "1"})
        tail = (r.stderr.strip().splitlines() or ["exit status %d" % r.returncode])[-1]
        _interpreter_refusal.append(None if r.returncode == 0 else tail)
    return _interpreter_refusal[0]


@pytest.fixture(autouse=True)
def _needs_cpu_interpreter(request):
    """`@pytest.mark.interpreter`: the test runs kernels under Triton's interpreter in another
    process (`--device cpu`, a cross-check worker). Where kvfuzz refuses this machine's
    interpreter (a GPU image's numpy too new for its triton: docs/environment.md), it skips,
    saying why, instead of failing on kvfuzz's rightful refusal."""
    if request.node.get_closest_marker("interpreter") is not None:
        why = _cpu_interpreter_refused()
        if why:
            pytest.skip(f"kvfuzz refuses this machine's Triton interpreter: {why}")


@pytest.fixture(scope="session")
def seed_path() -> Path:
    return seed_kernel_path()


@pytest.fixture(scope="session")
def seed_target(seed_path, device):
    from kvfuzz.targets import load_target

    return load_target(str(seed_path), device)


@pytest.fixture(scope="session")
def builtin_target(device):
    from kvfuzz.targets import load_target

    return load_target("builtin", device)
