"""pytest plugin: every saved case in a corpus is one test.

`pytest corpora/` (or `pytest --kvfuzz-corpus DIR`) collects each `case.json` as a test with
a readable id (`op:kind:key`). A case runs in a kvfuzz worker subprocess, so a crashing
kernel fails one test; under `pytest -n auto` each xdist worker keeps its own kvfuzz worker,
pinned to one GPU when there are several. A case whose target cannot be loaded here is
skipped with the reason; `xfail` cases are strict: a fixed defect shows up as a failure. A
defect whose runs differ by nature (`nondeterministic`) is judged as `kvfuzz replay` judges it,
over several runs (replay.check_runs: a finding any of them shows counts), and is a non-strict
xfail: a replay where no run shows it passes, so `pytest` over any corpus kvfuzz writes gives the
same answer every time. A case in contract that no SGLang call site launches (`stress`) is
marked `kvfuzz_stress`, its id `op:kind:stress:key`: reported apart, and `-m "not
kvfuzz_stress"` leaves it out.

Cheap to load: nothing heavy is imported until a case runs.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

CORPUS_OPTION = "--kvfuzz-corpus"
DEVICE_OPTION = "--kvfuzz-device"
TARGET_OPTION = "--kvfuzz-target"
CASE_FILE = "case.json"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("kvfuzz", "kvfuzz saved cases")
    group.addoption(CORPUS_OPTION, action="append", default=[], metavar="DIR",
                    help="collect the saved cases under DIR (repeatable)")
    group.addoption(DEVICE_OPTION, default="auto", choices=("auto", "cpu", "cuda"),
                    help="device to replay cases on (default: cuda if present, else cpu)")
    group.addoption(TARGET_OPTION, default=None, metavar="SPEC",
                    help="replay every case against this target instead of the case's own")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "kvfuzz_case: a saved kvfuzz case replayed as a regression test")
    config.addinivalue_line("markers", "kvfuzz_stress: a saved case in contract that no SGLang call site launches "
                            "(its id says `stress:`; `-m 'not kvfuzz_stress'` leaves these out)")
    for d in config.getoption(CORPUS_OPTION):
        if not Path(d).is_dir():
            raise pytest.UsageError(f"{CORPUS_OPTION} {d}: no such directory")
        config.args.append(str(d))
    config._kvfuzz_executors = {}  # type: ignore[attr-defined]


def pytest_unconfigure(config: pytest.Config) -> None:
    for ex in getattr(config, "_kvfuzz_executors", {}).values():
        if not isinstance(ex, str):
            ex.close()


def pytest_collect_file(file_path: Path, parent: pytest.Collector):
    if file_path.name == CASE_FILE:
        return CaseFile.from_parent(parent, path=file_path)
    return None


def _label(case) -> str:
    """The case's contract status (Contract.label); "?" for an op kvfuzz does not know here."""
    from .errors import BadInput
    from .ops import contract_label

    try:
        return contract_label(case)
    except BadInput:
        return "?"


class CaseFile(pytest.File):
    def collect(self):
        from .corpus import read_case_dir
        from .errors import BadCaseFile

        try:
            saved = read_case_dir(self.path.parent)
        except BadCaseFile as exc:
            yield BadCaseItem.from_parent(self, name=f"unreadable:{self.path.parent.name}", why=str(exc))
            return
        kind = saved.finding.kind if saved.finding else "regression"
        stress = _label(saved.case) == "stress"  # a launch no SGLang call site makes: apart, by id and marker
        name = f"{saved.case.op}:{kind}:{'stress:' if stress else ''}{self.path.parent.name}"
        item = CaseItem.from_parent(self, name=name, saved=saved)
        item.add_marker("kvfuzz_case")
        if stress:
            item.add_marker("kvfuzz_stress")
        override = self.config.getoption(TARGET_OPTION)
        if saved.expected == "xfail":
            if override is None or override in affected(saved):
                item.add_marker(pytest.mark.xfail(reason=saved.reason or "", strict=saved.strict, raises=KnownDefect))
            elif "affects" in saved.case.meta:  # triaged over releases: this one is known to be clean of it
                item.must_pass_on = override
            else:
                item.untriaged = f"a defect of {saved.target}, not triaged for {override}"
        yield item


def affected(saved) -> set[str]:
    """The targets a triaged (xfail) case's defect shows on: the one it was found with, and the
    releases `kvfuzz bisect --write` found it on (`meta["affects"]`)."""
    return {saved.target, *saved.case.meta.get("affects", ())}


def pytest_collection_modifyitems(session, config, items) -> None:
    """With --kvfuzz-target: the defects known to show on that target (from the triaged cases
    that name it), so a must-pass case failing only with those is that target's known defect
    (xfail), not a new one."""
    override = config.getoption(TARGET_OPTION)
    config._kvfuzz_known = {  # type: ignore[attr-defined]
        defect_of(sig) for item in items
        if isinstance(item, CaseItem) and item.saved.expected == "xfail" and override in affected(item.saved)
        for sig in item.saved.signatures}


def defect_of(signature: str) -> str:
    """A signature less its extent (`all` / `partial` cells, `before` / `after` ...): other inputs
    show one defect with another extent."""
    return signature.rsplit(":", 1)[0]


def only_known_defects(signatures, known: set[str]) -> bool:
    """Whether a failing verdict shows only defects known on the target. A second run that
    differs (`nondeterministic`) beside a known wild write (`out_of_bounds_write`) is that write:
    its stores land where a race of programs puts them, so the bytes past the tensor differ
    between runs (sglang 0.5.14's and 0.5.17's swa_spec kernel on an empty request)."""
    defects = {defect_of(s) for s in signatures}
    wild = any(d.split(":")[2] == "out_of_bounds_write" for d in defects & known)
    return all(d in known or (wild and d.split(":")[2] == "nondeterministic") for d in defects)


def shows_varying(saved, verdict) -> bool:
    """A non-strict case's defect shows: one of its signatures, or any finding of a kind whose
    runs differ by nature (which bytes differ, and so the signature's tensor, varies too)."""
    from .findings import VARIES

    return bool(set(saved.signatures) & set(verdict.signatures())) or any(f.kind in VARIES for f in verdict.findings)


class KnownDefect(AssertionError):
    """The saved defect still shows (what an xfail case expects)."""


class CaseFailed(AssertionError):
    pass


class BadCaseItem(pytest.Item):
    def __init__(self, *, why: str, **kw) -> None:
        super().__init__(**kw)
        self.why = why

    def runtest(self) -> None:
        raise CaseFailed(self.why)

    def repr_failure(self, excinfo, style=None) -> str:
        return self.why

    def reportinfo(self):
        return self.path, None, self.name


def _gpu_env(device: str) -> dict[str, str]:
    """Under xdist with several GPUs, give each xdist worker its own GPU."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if device != "cuda" or not worker.startswith("gw") or "CUDA_VISIBLE_DEVICES" in os.environ:
        return {}
    import torch

    n = torch.cuda.device_count()
    return {"CUDA_VISIBLE_DEVICES": str(int(worker[2:]) % n)} if n > 1 else {}


class CaseItem(pytest.Item):
    def __init__(self, *, saved, **kw) -> None:
        super().__init__(**kw)
        self.saved = saved
        self.rendered = ""
        self.must_pass_on: str | None = None  # an xfail case replayed on a release triaged clean of it
        self.untriaged: str | None = None  # why an xfail case is skipped on the --kvfuzz-target given

    def _executor(self):
        from . import device as devmod
        from .errors import BadInput
        from .worker import WorkerExecutor

        config = self.config
        device = devmod.select(config.getoption(DEVICE_OPTION))
        spec = config.getoption(TARGET_OPTION) or self.saved.target
        cache = config._kvfuzz_executors  # type: ignore[attr-defined]
        backend = self.saved.case.meta.get("cross_check")  # a backend_divergence: run on both backends
        if backend == device:
            pytest.skip(f"a divergence between {self.saved.device} and {backend}: needs a device other than {backend}")
        key = (spec, device, backend)
        if key not in cache:
            try:
                cache[key] = WorkerExecutor(spec, device, env=_gpu_env(device))
            except BadInput as exc:
                cache[key] = f"target {spec} is not available here: {exc}"
            if backend and not isinstance(cache[key], str):
                from .cross import pair

                try:
                    cache[key] = pair(cache[key], lambda: WorkerExecutor(spec, device, env=_gpu_env(device)),
                                      spec, device, backend, 60.0)
                except BadInput as exc:  # the divergence needs both sides: skipped, never passed
                    cache[key].close()
                    cache[key] = (f"a divergence between {self.saved.device} and {backend}: {backend} is not "
                                  f"available here: {exc}")
        ex = cache[key]
        if isinstance(ex, str):
            pytest.skip(ex)
        if self.saved.case.op in ex.missing:
            pytest.skip(f"target {spec} has no {self.saved.case.op}: {ex.missing.get(self.saved.case.op)}")
        return ex, spec, device

    def runtest(self) -> None:
        from .check import Checker
        from .errors import BadInput
        from .replay import Replayed, check_runs, render

        if self.untriaged:
            pytest.skip(self.untriaged)
        ex, spec, device = self._executor()
        # shows up in --junitxml: which GPU ran this case (pinning under xdist can be checked)
        self.user_properties.append(("kvfuzz_device", f"{ex.description} {ex.identity}"))
        if os.environ.get("PYTEST_XDIST_WORKER"):
            self.user_properties.append(("kvfuzz_xdist_worker", os.environ["PYTEST_XDIST_WORKER"]))
        # on its own target the case keeps its variant (a target that would drop its arguments
        # cannot judge it); another target judges it by the contract variant it selects
        try:
            checker = Checker.for_saved(ex, self.saved.case, spec, spec == self.saved.target)
        except BadInput as exc:
            raise CaseFailed(str(exc)) from None
        verdict, runs, shown, failing = check_runs(checker, checker.adopt(self.saved.case), self.saved)
        r = Replayed(self.saved, spec, device, verdict, ex.description, runs, shown, failing)
        self.rendered = render(r)
        if self.saved.expected == "xfail" and self.must_pass_on is None:
            if r.same_defect or (not self.saved.strict and shows_varying(self.saved, verdict)):
                raise KnownDefect(f"known defect still shows: {self.saved.finding.signature}")
            if self.saved.device != device:  # e.g. a wild read that segfaults the interpreter only
                pytest.skip(f"defect was seen on {self.saved.device}; it does not show on {device}")
            if not self.saved.strict and not verdict.failed:
                return  # a defect that shows in some runs only did not show in this one: no news
            raise CaseFailed("the known defect no longer shows (strict xfail): replace expected 'xfail' by "
                             "'pass' or prune the case\n" + self.rendered)
        if verdict.failed:
            known = getattr(self.config, "_kvfuzz_known", set())
            if self.config.getoption(TARGET_OPTION) and only_known_defects(verdict.signatures(), known):
                pytest.xfail(f"known defect of {spec}: {', '.join(verdict.signatures())}")
            raise CaseFailed(self.rendered)

    def repr_failure(self, excinfo, style=None) -> str:
        if isinstance(excinfo.value, (CaseFailed, KnownDefect)):
            return str(excinfo.value) if isinstance(excinfo.value, CaseFailed) else self.rendered
        return super().repr_failure(excinfo)

    def reportinfo(self):
        return self.path, None, f"kvfuzz case {self.name}"
