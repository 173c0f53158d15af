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
batched engine lists `batch_only`); then it is recorded and handed to the campaign's finding
pipeline, which confirms it in a fresh worker, saves it, and minimizes it with kvfuzz's reducer
at the end of the op, exactly as for the other engines.
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
from ..judge import Verdict
from ..strategies import GENERATORS
from ..strategies.draw import CompileClass, FuzzedDraw
from ..worker import Executor
from .base import Engine, EngineOptions, OpRun, run_engine
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


class AtherisEngine(Engine):
    """libFuzzer in a fuzzing process per life. libFuzzer proposes the cases and, for coverage,
    the fuzzing process runs and judges them itself; the engine meets the interface on this
    side of the pipe: each verdict is handed to `OpRun.take`, with the case re-run alone in the
    campaign's worker before a new signature counts."""

    name = "atheris"

    def __init__(self, op: str, executor: Executor, options: EngineOptions, *, corpus: Path | None = None,
                 instrument: tuple[str, ...] = INSTRUMENT, libfuzzer_args: tuple[str, ...] = ()) -> None:
        super().__init__(op, executor, options)
        # the op's directory of libFuzzer inputs (created, read, and added to)
        self.corpus = Path(corpus) if corpus is not None else corpus_root(options.target, options.campaign_dir) / op
        self.instrument, self.libfuzzer_args = instrument, libfuzzer_args  # tests turn parts off

    @classmethod
    def missing(cls) -> str | None:
        return missing()

    def fuzz(self, run: OpRun) -> None:
        op, executor, o, corpus = self.op, self.executor, self.options, self.corpus
        stats = run.stats
        corpus.mkdir(parents=True, exist_ok=True)
        info = stats.engine
        info.update(execs=0, execs_per_s=0.0, fuzzing_s=0.0, startup_s=0.0, lives=0, max_total_time=[], artifacts=[],
                    fuzzer_only=[], cov=0, ft=0,
                    corpus=str(corpus), corpus_units=0, instrumented_kernels=0, instrumented_host_functions=0)
        classes: set[str] = set()
        keys: set[str] = set()

        def fuzzer_only(f, again: Verdict) -> None:  # seen in the fuzzing process, not in the worker
            run.set_aside.add(f.signature)
            info["fuzzer_only"].append(f.signature)

        def record(verdict: Verdict, case: Case | None, in_worker: bool = False) -> None:
            """Count a verdict; a new signature counts once it shows again with the case run alone
            in the worker (a verdict from the fuzzing process: instrumented, in-process)."""
            run.take(verdict, case, position=run.start + stats.cases + 1, alone=None if in_worker else self.alone,
                     not_alone=fuzzer_only)

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
            left = run.time_left()
            if left < MIN_LIFE_S or stats.cases >= run.max_cases:
                break
            artifacts = Path(tempfile.mkdtemp(prefix="kvfuzz-atheris-"))
            log = artifacts / "libfuzzer.log"
            read, write = os.pipe()
            cfg = {"op": op, "target": o.target, "device": o.device, "fd": write, "corpus": str(corpus),
                   "artifacts": str(artifacts), "deadline": time.time() + left,
                   "seed": libfuzzer_seed(o.seed, op, run.start, life), "timeout": max(math.ceil(o.case_timeout_s), 1),
                   "runs": run.max_cases - stats.cases, "rss_limit_mb": RSS_LIMIT_MB, "max_len": MAX_LEN,
                   "in_contract_only": o.in_contract_only, "variant": o.variant, "rerun_every": o.rerun_every,
                   "instrument": list(self.instrument),
                   "extra_args": [*DEFAULT_ARGS, *self.libfuzzer_args]}
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
                    if run.time_left() < -(o.case_timeout_s + STOP_GRACE_S) and proc.poll() is None:
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
                case, _ = decode(op, path.read_bytes(), o.in_contract_only, o.variant)
                verdict = self.checker.check(case)
                info["artifacts"].append({"kind": path.name.split("-")[0], "signatures": verdict.signatures()})
                record(verdict, case, in_worker=True)
            if t_ready is None or (proc.returncode != 0 and not died):
                stats.not_judged(f"HarnessError: the atheris process exited {proc.returncode} "
                                 f"without an artifact: {_last_lines(text)}")
            shutil.rmtree(artifacts, ignore_errors=True)
            if not died or not info["execs"]:  # it ended by its budget or run count, or never got going
                break


def fuzz_op(op: str, executor: Executor, *, target: str, device: str, seed: int, budget_s: float,
            max_cases: int, corpus: Path, in_contract_only: bool = False, variant: str | None = None,
            rerun_every: int = 10, case_timeout_s: float = 60.0,
            known: dict[str, Found] | None = None,
            on_case: Callable[[OpStats, Verdict], None] | None = None,
            on_new: Callable[[Found], None] | None = None,
            stats: OpStats | None = None, start: int = 0, until: float | None = None,
            instrument: tuple[str, ...] = INSTRUMENT, libfuzzer_args: tuple[str, ...] = ()) -> tuple[OpStats, dict[str, Found]]:
    """Fuzz one op with libFuzzer outside a campaign (tests) until the budget or the case count
    runs out; `corpus` is the op's directory of libFuzzer inputs. `executor` (a worker) replays
    the inputs that killed a fuzzing process and re-runs new signatures alone. Returns stats
    and findings keyed by signature. `instrument` names the code whose branches count."""
    options = EngineOptions(seed=seed, device=device, target=target, in_contract_only=in_contract_only,
                            variant=variant, rerun_every=rerun_every, case_timeout_s=case_timeout_s)
    engine = AtherisEngine(op, executor, options, corpus=corpus, instrument=instrument, libfuzzer_args=libfuzzer_args)
    return run_engine(engine, budget_s=budget_s, max_cases=max_cases, start=start, until=until, known=known,
                      stats=stats, on_case=on_case, sink=on_new)


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
