"""The atheris engine (`--engine atheris`): coverage-guided fuzzing with libFuzzer.

libFuzzer mutates byte strings; `decode` turns each one into a case with the same per-op
generator every engine uses (`FuzzedDraw` over `atheris.FuzzedDataProvider`), and keeps an
input when it reaches new coverage: branches of kvfuzz's generators, contracts, oracles and
judge, of the target's host code, and, under the interpreter, of the target's kernel source
(the spec kernel's all-A, all-B and mixed blocks, the decode kernels' branches).

libFuzzer runs forever and owns its process and argv, so each op runs in its own process
(`atheris_child`), bounded by `-max_total_time` (what is left of the op's budget once it has
started) and `-runs` (`--max-cases`), on a corpus of libFuzzer inputs that persists between
campaigns (`DIR/atheris/<op>` with `--campaign DIR`, else under `$KVFUZZ_CACHE/atheris/`).

Coverage is measured where the kernel runs, so the fuzzing process runs the target itself; it
is not isolated the way the other engines' worker is. Isolation is restored around it: a case
that kills that process (a segfault, a hang past `-timeout`, i.e. `--case-timeout`) makes
libFuzzer write the input as an artifact and exit; this engine replays the artifact in the
campaign's worker (a subprocess: the crash is a `crash` finding like any other) and starts a new
fuzzing process on the same corpus for the rest of the budget (each start costs a few seconds,
counted in the report's `startup_s`).

Every verdict comes back over a pipe and is counted here. A new signature comes with its case,
which is re-run alone in the campaign's worker first (the fuzzing process is instrumented and
runs cases in-process; a signature that does not show there is listed as `fuzzer_only`, as the
batched engine lists `batch_only`); then it is recorded and handed to the campaign (`on_new`),
which confirms it in a fresh worker, saves it, and minimizes it with kvfuzz's reducer at the end
of the op, exactly as for the other engines.
The op's report gets `engine`: execs/s, libFuzzer's coverage (`cov` edges, `ft` features), the
corpus size, the processes started and the artifacts replayed.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import shutil
import subprocess
import tempfile
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Callable

from .. import spawn
from ..case import Case
from ..check import Checker
from ..judge import Verdict
from ..strategies import GENERATORS
from ..strategies.draw import CompileClass, FuzzedDraw
from ..worker import Executor
from .common import Found, OpStats

MAX_LIVES = 1000  # fuzzing processes per op: a crash ends one, the next resumes on the corpus
MIN_LIFE_S = 3.0  # budget left below which no new fuzzing process is started
STOP_GRACE_S = 10.0  # past the budget (plus one case's timeout), the fuzzing process is stopped
MAX_LEN = 1024  # bytes per input: a case draws fewer than 100
# every length from the start: libFuzzer's default grows it from 4 bytes, and a case whose
# bytes run out takes the smallest choice everywhere, so short inputs are nearly all one case
DEFAULT_ARGS = ("-len_control=0",)
RSS_LIMIT_MB = 8192  # libFuzzer's own memory limit (its default, 2 GB, is near torch's footprint)
INSTRUMENT = ("kvfuzz", "host", "kernels")  # kvfuzz's own code, the target's host code, its kernels
ARTIFACTS = ("crash-", "timeout-", "oom-", "leak-")  # what libFuzzer writes when the process dies
_STATUS = re.compile(r"cov: (\d+) ft: (\d+) corp: \d+/")  # libFuzzer's status lines


def missing() -> str | None:
    """Why the engine cannot run here (the `[atheris]` extra is not installed), or None."""
    try:
        import atheris  # noqa: F401
    except ImportError as exc:
        return f"--engine atheris needs the [atheris] extra (pip install 'kvfuzz[atheris]'): {exc}"
    return None


def decode(op: str, data: bytes, in_contract_only: bool = False,
           variant: str | None = None) -> tuple[Case, CompileClass]:
    """The case (and its compile class) that libFuzzer's `data` stands for: the same bytes,
    the same case, here and in the fuzzing process."""
    import atheris

    d = FuzzedDraw(atheris.FuzzedDataProvider(data))
    g = GENERATORS[op]
    k = g.compile_class(d)
    case = g.draw_case(d, k, in_contract_only)
    return (case.replace(variant=variant) if variant else case), k


def corpus_root(target: str, campaign_dir: Path | None) -> Path:
    """Where the libFuzzer inputs of each op persist: the campaign's, else one per target in
    kvfuzz's cache (inputs are bytes for kvfuzz's generators; coverage depends on the target)."""
    if campaign_dir is not None:
        return Path(campaign_dir) / "atheris"
    from ..targets.wheels import cache_dir

    return cache_dir() / "atheris" / hashlib.sha256(target.encode()).hexdigest()[:12]


def libfuzzer_seed(seed: int, op: str, start: int, life: int) -> int:
    digest = hashlib.sha256(f"{seed}:{op}:{start}:{life}".encode()).digest()
    return int.from_bytes(digest[:4], "little") % (2**31 - 2) + 1  # 0 would mean "random"


def fuzz_op(op: str, executor: Executor, *, target: str, device: str, seed: int, budget_s: float,
            max_cases: int, corpus: Path, in_contract_only: bool = False, variant: str | None = None,
            rerun_every: int = 10, case_timeout_s: float = 60.0,
            known: dict[str, Found] | None = None,
            on_case: Callable[[OpStats, Verdict], None] | None = None,
            on_new: Callable[[Found], None] | None = None,
            stats: OpStats | None = None, start: int = 0,
            instrument: tuple[str, ...] = INSTRUMENT, libfuzzer_args: tuple[str, ...] = ()) -> tuple[OpStats, dict[str, Found]]:
    """Fuzz one op with libFuzzer until the budget or the case count runs out; `corpus` is the
    op's directory of libFuzzer inputs (created, read, and added to). `executor` (the campaign's
    worker) replays the inputs that killed a fuzzing process. Returns stats and findings keyed
    by signature (`known` and `stats` are updated in place, as by the other engines).
    `instrument` names the code whose branches count (tests turn parts off)."""
    stats = OpStats(op) if stats is None else stats
    found: dict[str, Found] = {} if known is None else known
    t0 = time.monotonic()
    deadline = t0 + budget_s
    corpus = Path(corpus)
    corpus.mkdir(parents=True, exist_ok=True)
    info = stats.engine
    info.update(execs=0, execs_per_s=0.0, fuzzing_s=0.0, startup_s=0.0, lives=0, max_total_time=[], artifacts=[],
                fuzzer_only=[], cov=0, ft=0,
                corpus=str(corpus), corpus_units=0, instrumented_kernels=0, instrumented_host_functions=0)
    classes: set[str] = set()
    keys: set[str] = set()
    fuzzer_only: set[str] = set()  # signatures seen in the fuzzing process that the worker did not show
    stats.position = start
    checker = Checker(executor, op, variant)  # re-runs a new signature's case alone, replays artifacts

    def record(verdict: Verdict, case: Case | None, in_worker: bool = False) -> None:
        """Count a verdict; a new signature counts once it shows again with the case run alone
        in the worker (a verdict from the fuzzing process: instrumented, in-process)."""
        stats.count(verdict)
        stats.position = start + stats.cases
        if on_case:
            on_case(stats, verdict)
        new = [f for f in verdict.findings if f.signature not in found and f.signature not in fuzzer_only]
        if not new or case is None:
            return
        again = {f.signature: f for f in verdict.findings} if in_worker else \
            {f.signature: f for f in checker.check(case, repeats=2 if rerun_every else 1).findings}
        for f in new:
            if f.signature not in again:
                fuzzer_only.add(f.signature)
                info["fuzzer_only"].append(f.signature)
                continue
            found[f.signature] = Found(again[f.signature], case, case)
            if on_new:
                on_new(found[f.signature])

    def handle(msg: tuple) -> None:
        kind = msg[0]
        if kind == "case":
            status, not_target, findings, reruns, features, cls, case, new_keys = msg[1:]
            info["execs"] += 1
            stats.reruns += reruns
            stats.features.update(features)
            if cls:
                classes.add(cls)
            keys.update(new_keys)
            record(Verdict(status, [], list(findings), not_target=not_target), case)
        elif kind == "error":  # kvfuzz failed on an input: counted, never a finding
            stats.not_judged(f"HarnessError: {msg[1]}")

    for life in range(MAX_LIVES):
        left = deadline - time.monotonic()
        if left < MIN_LIFE_S or stats.cases >= max_cases:
            break
        artifacts = Path(tempfile.mkdtemp(prefix="kvfuzz-atheris-"))
        log = artifacts / "libfuzzer.log"
        read, write = os.pipe()
        cfg = {"op": op, "target": target, "device": device, "fd": write, "corpus": str(corpus),
               "artifacts": str(artifacts), "deadline": time.time() + left,
               "seed": libfuzzer_seed(seed, op, start, life), "timeout": max(math.ceil(case_timeout_s), 1),
               "runs": max_cases - stats.cases, "rss_limit_mb": RSS_LIMIT_MB, "max_len": MAX_LEN,
               "in_contract_only": in_contract_only, "variant": variant, "rerun_every": rerun_every,
               "instrument": list(instrument),
               "extra_args": [*DEFAULT_ARGS, *libfuzzer_args]}
        t_start = time.monotonic()
        with open(log, "wb") as out:
            proc = subprocess.Popen(spawn.command("kvfuzz.engines.atheris_child", json.dumps(cfg)),
                                    env=spawn.environment(dict(os.environ)), pass_fds=(write,),
                                    stdin=subprocess.DEVNULL, stdout=out, stderr=out)
        os.close(write)
        conn = Connection(read, writable=False)
        info["lives"] += 1
        t_ready = None
        try:
            while True:
                if time.monotonic() > deadline + case_timeout_s + STOP_GRACE_S and proc.poll() is None:
                    proc.terminate()  # libFuzzer overran its -max_total_time (a slow last case)
                if not conn.poll(0.5):
                    continue
                try:
                    msg = conn.recv()
                except EOFError:
                    break
                if msg[0] == "ready":
                    t_ready = time.monotonic()
                    info["startup_s"] += t_ready - t_start
                    info["instrumented_kernels"] = msg[1]["kernels"]
                    info["instrumented_host_functions"] = msg[1]["host_functions"]
                    info["max_total_time"].append(msg[1]["max_total_time"])
                else:
                    handle(msg)
        except BaseException:  # interrupted: the figures as they stand, no artifact replayed
            shutil.rmtree(artifacts, ignore_errors=True)
            raise
        finally:
            conn.close()
            _stop(proc)
            info["fuzzing_s"] += time.monotonic() - (t_ready or time.monotonic())
            _figures(info, corpus)
            stats.classes, stats.variants = len(classes), len(keys)
        text = log.read_text(errors="replace")
        status = _STATUS.findall(text)
        if status:
            cov, ft = int(status[-1][0]), int(status[-1][1])
            info.update(cov=max(info["cov"], cov), ft=max(info["ft"], ft))
        died = sorted(p for p in artifacts.iterdir() if p.name.startswith(ARTIFACTS))
        for path in died:  # the input that killed it, replayed in the isolated worker
            case, _ = decode(op, path.read_bytes(), in_contract_only, variant)
            verdict = checker.check(case)
            info["artifacts"].append({"kind": path.name.split("-")[0], "signatures": verdict.signatures()})
            record(verdict, case, in_worker=True)
        if t_ready is None or (proc.returncode != 0 and not died):
            stats.not_judged(f"HarnessError: the atheris process exited {proc.returncode} "
                             f"without an artifact: {_last_lines(text)}")
        shutil.rmtree(artifacts, ignore_errors=True)
        if not died or not info["execs"]:  # it ended by its budget or run count, or never got going
            break
    stats.seconds = time.monotonic() - t0
    return stats, found


def _figures(info: dict, corpus: Path) -> None:
    """The report's figures as they stand (an interrupted run reports them too)."""
    info["corpus_units"] = sum(1 for p in corpus.iterdir() if p.is_file())
    info["execs_per_s"] = round(info["execs"] / info["fuzzing_s"], 1) if info["fuzzing_s"] > 0 else 0.0
    info["fuzzing_s"], info["startup_s"] = round(info["fuzzing_s"], 3), round(info["startup_s"], 3)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
    proc.wait()


def _last_lines(text: str, n: int = 2) -> str:
    lines = [x.strip() for x in text.strip().splitlines() if x.strip()]
    return " | ".join(lines[-n:])[:300] or "no output"
