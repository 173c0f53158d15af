"""`kvfuzz mutants`: mutate a target's kernel file, fuzz each mutant, report which were killed.

For each op: the file holding its entry point (`reach.kernel_file`), the functions it reaches,
every mutant the operators make there (`operators.py`; `--max-mutants` draws a sample by seed).
Three phases, each a pool of `--jobs` subprocesses (`one.py`; on CUDA slot I runs on GPU
(I - 1) mod the GPU count, as `kvfuzz fuzz --jobs` places its shards):

1. the reference: the unmutated copy of the file, fuzzed for the confirmation budget under the
   contract variant the original target is judged by (its release's), which then judges every
   mutant; what it finds is the original's own (a mutant showing only that is not killed);
2. each mutant, a copy of the file with one span patched (with the file's package siblings
   beside it, so relative imports load), fuzzed for `--budget-per-mutant` seconds with the same
   seed, stopping at its first killing finding;
3. each survivor again, `--confirm-factor` times the budget on the next seed: not killed then,
   it is "likely equivalent".

Every finished mutant leaves `state.json` in its folder under the work directory (`--resume
DIR`), so a run stopped part way continues where it stopped.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import shutil
import signal
import subprocess
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from statistics import median

from .. import spawn
from ..errors import BadInput
from ..ops import CONTRACTS, record
from .equivalence import dimension, static_equivalent
from .operators import Mutant, find_mutants
from .reach import kernel_file, reached

KILLED, SURVIVED, EQUIVALENT, STILLBORN, ERROR = "killed", "survived", "likely_equivalent", "stillborn", "error"
# a survivor's reason (phase 4, equivalence.py), as a status: neither counts in the kill rate
SHOWN_EQUIVALENT, OUTSIDE = "equivalent", "outside_contract"
# a crash whose exception is one of these is the kernel failing to compile (the interpreter
# wraps what the compiler would reject): the mutant is stillborn, not killed
COMPILE_ERRORS = ("CompilationError", "InterpreterError")


@dataclass
class MutantsConfig:
    target: str = "builtin"
    ops: list[str] = field(default_factory=list)  # empty: every op the target's files hold
    functions: list[str] = field(default_factory=list)  # only mutants in these functions
    budget_s: float = 10.0  # fuzzing time per mutant
    jobs: int = 1
    seed: int = 0
    max_mutants: int | None = None  # per op: a sample drawn by seed
    confirm_factor: float = 3.0  # a survivor's confirmation run: this times the budget (0: none)
    device: str = "auto"
    in_contract_only: bool = True
    validation: bool = False  # also mutate `if ...: raise` conditions (argument checks)
    case_timeout_s: float = 60.0  # each campaign's hang limit (a mutant that loops forever is killed by it)
    equivalence_cases: int = 256  # a survivor beside the original on this many seeded cases (0: no such run)
    workdir: Path | None = None  # --resume DIR; None: a temporary folder

    def validate(self) -> None:
        for op in self.ops:
            record(op)
        if self.budget_s <= 0:
            raise BadInput(f"--budget-per-mutant must be > 0 seconds, got {self.budget_s:g}")
        if self.jobs < 1:
            raise BadInput(f"--jobs must be >= 1, got {self.jobs}")
        if self.max_mutants is not None and self.max_mutants < 1:
            raise BadInput(f"--max-mutants must be >= 1, got {self.max_mutants}")
        if self.case_timeout_s <= 0:
            raise BadInput(f"--case-timeout must be > 0 seconds, got {self.case_timeout_s:g}")
        if self.equivalence_cases < 0:
            raise BadInput(f"--equivalence-cases must be >= 0, got {self.equivalence_cases}")
        if self.confirm_factor != 0 and self.confirm_factor < 1:
            raise BadInput(f"--confirm-factor must be 0 (no confirmation run) or >= 1, got {self.confirm_factor:g}")

    def identity(self) -> dict:
        """What a resumed run must share with the run that made the work directory."""
        return {k: v for k, v in asdict(self).items() if k not in ("jobs", "workdir", "device")}


@dataclass
class OpPlan:
    op: str
    source: Path  # the original kernel file
    functions: list[str]
    mutants: list[Mutant]
    population: int = 0  # mutants the operators made there, before `--max-mutants` drew its sample


def plan(cfg: MutantsConfig) -> tuple[list[OpPlan], dict[str, str]]:
    """Each op's mutants (deterministic: the file, the operators, `--max-mutants` by seed), and
    op -> why it has none (no entry point in a file kvfuzz can mutate)."""
    plans, skipped = [], {}
    for op in cfg.ops or list(CONTRACTS):
        try:
            path = kernel_file(cfg.target, op)
        except BadInput as exc:
            if cfg.ops:
                raise
            skipped[op] = str(exc)
            continue
        source = path.read_bytes()
        functions, constants = reached(source, record(op).contract.entry)
        if not functions:
            if cfg.ops:
                raise BadInput(f"op {op}: {path} has no top-level {record(op).contract.entry} to mutate")
            skipped[op] = f"{path.name} has no top-level {record(op).contract.entry}"
            continue
        if cfg.functions:
            unknown = [f for f in cfg.functions if f not in functions]
            if cfg.ops and len(unknown) == len(cfg.functions):
                raise BadInput(f"op {op} reaches none of {', '.join(unknown)} in {path.name}; "
                               f"it reaches {', '.join(functions)}")
            functions, constants = [f for f in functions if f in cfg.functions], []
        mutants = find_mutants(source, path.name, functions, constants, cfg.validation or not cfg.in_contract_only)
        population = len(mutants)
        if cfg.max_mutants is not None and len(mutants) > cfg.max_mutants:
            chosen = set(random.Random(f"{cfg.seed}:{op}").sample(range(len(mutants)), cfg.max_mutants))
            mutants = [m for i, m in enumerate(mutants) if i in chosen]
        if not mutants:
            skipped[op] = f"no mutant in {', '.join(functions)}"
            continue
        plans.append(OpPlan(op, path, functions, mutants, population))
    if not plans:
        raise BadInput(f"target {cfg.target}: nothing to mutate ({'; '.join(f'{k}: {v}' for k, v in skipped.items())})")
    return plans, skipped


def write_mutant(p: OpPlan, m: Mutant | None, folder: Path) -> Path:
    """The mutant's kernel file in `folder` (the original with `m` None), with the original's
    package siblings beside it when it has any (its relative imports then load)."""
    folder.mkdir(parents=True, exist_ok=True)
    if (p.source.parent / "__init__.py").is_file():
        for sibling in p.source.parent.glob("*.py"):
            shutil.copyfile(sibling, folder / sibling.name)
    out = folder / p.source.name
    source = p.source.read_bytes()
    out.write_bytes(m.apply(source) if m is not None else source)
    return out


class Runner:
    """The three phases over a work directory, `jobs` subprocesses at a time."""

    def __init__(self, cfg: MutantsConfig, workdir: Path, say) -> None:
        self.cfg, self.dir, self.say = cfg, workdir, say
        from .. import device as devmod
        from ..jobs import gpu_count

        self.device = devmod.select(cfg.device)
        self.gpus = gpu_count() if self.device == "cuda" else 0
        self.slots: list[int] = list(range(1, cfg.jobs + 1))
        self.lock = threading.Lock()
        self.running: set[subprocess.Popen] = set()
        self.stopping = False  # interrupted: a campaign's report is not a verdict

    def _campaign(self, folder: Path, target: str, op: str, budget: float, seed: int, variant: str | None,
                  reference: list[str], stop: bool) -> tuple[int, dict | None, str]:
        """One campaign in a subprocess: (exit status, its report or None, its stderr's last line)."""
        folder.mkdir(parents=True, exist_ok=True)
        corpus = folder / "corpus"
        shutil.rmtree(corpus, ignore_errors=True)
        report = folder / "report.json"
        report.unlink(missing_ok=True)
        job = {"campaign": {"ops": [op], "target": target, "device": self.device, "budget_s": budget, "seed": seed,
                            "corpus": str(corpus), "report": str(report), "in_contract_only": self.cfg.in_contract_only,
                            "minimize_budget_s": 0.0, "variant": variant, "confirm_tries": 2, "ops_named": True,
                            "case_timeout_s": self.cfg.case_timeout_s},
               "reference": reference, "stop_at_kill": stop}
        (folder / "job.json").write_text(json.dumps(job, indent=1))
        # a campaign has its own case timeout: past this limit it is kvfuzz stuck
        rc, last = self._spawn(folder, [str(folder / "job.json")], max(600.0, 30 * budget))
        doc = json.loads(report.read_text()) if report.is_file() else None
        return rc, doc, last

    def _spawn(self, folder: Path, args: list[str], limit: float) -> tuple[int, str]:
        """`python -m kvfuzz.mutants.one ARGS` on a free slot (its GPU), output in folder/log.txt:
        (exit status, the output's last line); killed past `limit` seconds (exit -9)."""
        from ..jobs import shard_env

        with self.lock:
            if self.stopping:
                raise KeyboardInterrupt
            slot = self.slots.pop()
            # a session of its own: the terminal's Ctrl-C reaches this process, which stops it
            log = open(folder / "log.txt", "w")
            proc = subprocess.Popen(spawn.command("kvfuzz.mutants.one", *args),
                                    env=spawn.environment(shard_env(slot, self.device, self.gpus)),
                                    stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            self.running.add(proc)
        try:
            rc = proc.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            rc = proc.wait()
        finally:
            log.close()
            with self.lock:
                self.running.discard(proc)
                self.slots.append(slot)
        if self.stopping:
            raise KeyboardInterrupt
        lines = (folder / "log.txt").read_text(errors="replace").strip().splitlines()
        return rc, lines[-1] if lines else ""

    def variants(self, ops: list[str]) -> dict[str, str]:
        """op -> the contract variant the original target is judged by (looked up in a process
        of its own: loading the target defines its kernels)."""
        proc = subprocess.run(spawn.command("kvfuzz.mutants.one", "--variants", self.cfg.target, self.device, *ops),
                              env=spawn.environment(dict(os.environ)), capture_output=True, text=True)
        if proc.returncode != 0:
            lines = (proc.stderr or proc.stdout).strip().splitlines()
            raise BadInput(f"target {self.cfg.target}: {lines[-1] if lines else f'exit {proc.returncode}'}")
        return json.loads(proc.stdout.strip().splitlines()[-1])

    def reference(self, p: OpPlan, variant: str | None) -> dict:
        """The unmutated copy of the file, fuzzed as the mutants are (under the original's
        `variant`) for the confirmation budget: its signatures are the original's own (state
        kept for a resume)."""
        folder = self.dir / p.op / "reference"
        state = _read_state(folder)
        if state is not None:
            return state
        budget = self.cfg.budget_s * max(self.cfg.confirm_factor, 1.0)
        target = write_mutant(p, None, folder / "src")
        rc, doc, last = self._campaign(folder / "run", str(target), p.op, budget, self.cfg.seed, variant, [], False)
        if rc != 0 or doc is None:
            raise BadInput(f"op {p.op}: the unmutated copy of {p.source.name} does not run as a target "
                           f"(exit {rc}): {last}")
        sigs = sorted({s for f in doc["findings"] for s in f.get("signatures") or [f["signature"]]})
        state = {"signatures": sigs, "variant": doc["ops"][p.op].get("contract_variant"),
                 "cases": doc["ops"][p.op].get("cases", 0), "paths": paths_run(doc, p.op),
                 "versions": doc.get("versions", {}),
                 "device_name": doc.get("device_name")}
        _write_state(folder, state)
        return state

    def mutant(self, p: OpPlan, m: Mutant, ref: dict) -> dict:
        """A mutant's verdict: killed, stillborn, survived (pending confirmation) or error."""
        folder = self.dir / p.op / m.key
        state = _read_state(folder)
        if state is not None and state["status"] != ERROR:
            return state
        base = {"op": p.op, "key": m.key, "file": m.file, "function": m.function, "operator": m.operator,
                "line": m.line, "diff": m.diff(p.source.read_bytes())}
        target = write_mutant(p, m, folder / "src")
        state = base | self._judge(folder / "run", target, p.op, self.cfg.budget_s, self.cfg.seed, ref)
        if state["status"] == SURVIVED and self.cfg.confirm_factor:
            state["status"] = "unconfirmed"  # the confirmation phase decides
        _write_state(folder, state)
        return state

    def confirm(self, p: OpPlan, state: dict, ref: dict) -> dict:
        folder = self.dir / p.op / state["key"]
        target = folder / "src" / p.source.name
        got = self._judge(folder / "confirm", target, p.op, self.cfg.budget_s * self.cfg.confirm_factor,
                          self.cfg.seed + 1, ref)
        if got["status"] == KILLED:
            state = state | {"status": SURVIVED, "confirmation": got,
                             "reason": f"killed only by the confirmation run, after {got['time_to_kill_s']:.1f} s"}
        elif got["status"] == SURVIVED:
            state = state | {"status": EQUIVALENT, "confirmation": got, "reason": state.get("reason") or
                             f"not killed in {self.cfg.budget_s * self.cfg.confirm_factor:g} s on seed "
                             f"{self.cfg.seed + 1} either"}
        else:
            state = state | {"status": got["status"], "confirmation": got, "reason": got.get("reason")}
        _write_state(folder, state)
        return state

    def explain(self, p: OpPlan, state: dict, ref: dict) -> dict:
        """Why a survivor was not killed (equivalence.py): the mutant beside the unmutated copy
        on `equivalence_cases` seeded cases, in and out of contract; resumable like the rest."""
        folder = self.dir / p.op / state["key"]
        if state.get("why"):
            return state
        ranks = {a.name: len(a.shape.split(",")) for a in record(p.op).contract.args}
        shown = static_equivalent(p.source.read_bytes(), _mutant_of(p, state["key"]), ranks)
        if shown:
            state = state | {"why": "equivalent", "evidence": shown, "status": SHOWN_EQUIVALENT}
            _write_state(folder, state)
            return state
        work = folder / "equivalence"
        work.mkdir(parents=True, exist_ok=True)
        out = work / "verdict.json"
        out.unlink(missing_ok=True)
        seconds = self.cfg.budget_s * max(self.cfg.confirm_factor, 1.0) * 2
        job = {"original": str(self.dir / p.op / "reference" / "src" / p.source.name),
               "mutant": str(folder / "src" / p.source.name), "op": p.op, "variant": ref["variant"],
               "seed": self.cfg.seed + 1, "cases": self.cfg.equivalence_cases, "seconds": seconds,
               "device": self.device, "out": str(out)}
        (work / "job.json").write_text(json.dumps(job, indent=1))
        rc, last = self._spawn(work, ["--equivalence", str(work / "job.json")], seconds + 300)
        if rc != 0 or not out.is_file():
            state = state | {"why": "unknown", "evidence": f"the equivalence run failed (exit {rc}): {last}"}
        else:
            got = json.loads(out.read_text())
            why = got["why"]
            if why == "out of reach":
                took = (state.get("confirmation") or state).get("paths") or {}
                if got.get("path") and took and got["path"] not in took:
                    got["evidence"] += (f"; that case is on kernel path {got['path']}, which its campaigns never took "
                                        f"(they took {', '.join(took)})")
                dim = dimension(state["diff"])
                got["evidence"] += f"; the line is about {dim}" if dim else ""
            state = state | {"why": why, "evidence": got["evidence"], "equivalence": {
                k: got[k] for k in ("cases", "in_contract", "out_of_contract", "paths")},
                "status": {"equivalent": SHOWN_EQUIVALENT, "outside contract": OUTSIDE}.get(why, SURVIVED)}
        _write_state(folder, state)
        return state

    def _judge(self, folder: Path, target: Path, op: str, budget: float, seed: int, ref: dict) -> dict:
        rc, doc, last = self._campaign(folder, str(target), op, budget, seed, ref["variant"], ref["signatures"], True)
        return classify(rc, doc, last, op, set(ref["signatures"]))

    def pool(self, fn, items: list) -> list:
        """`fn(*item)` for every item, `jobs` at a time. An exception or an interrupt stops the
        rest: the campaigns running are sent SIGTERM (they write their reports and close their
        workers), nothing more starts, and it is raised here; states already written stay."""
        ex = ThreadPoolExecutor(self.cfg.jobs)
        try:
            futures = [ex.submit(fn, *item) for item in items]
            return [f.result() for f in futures]
        except BaseException:
            self.stopping = True
            ex.shutdown(wait=False, cancel_futures=True)
            with self.lock:
                for proc in self.running:
                    try:
                        os.killpg(proc.pid, signal.SIGTERM)
                    except ProcessLookupError:
                        pass
            raise
        finally:
            ex.shutdown(wait=True)


def killing(signatures: list[str], contract: str, reference: set[str]) -> bool:
    """Whether a finding with these signatures and contract status kills a mutant."""
    return contract == "in contract" and not set(signatures) <= reference


def classify(rc: int, doc: dict | None, last: str, op: str, reference: set[str]) -> dict:
    """A mutant campaign's verdict from its exit status, report and last line of output:
    stillborn (it did not load, compile, or run a case), killed (with the time of the first
    in-contract finding the original does not show), survived (with why, when it was killed
    only out of contract) or error."""
    if rc == 2:
        return {"status": STILLBORN, "reason": f"does not load: {last}"}
    if rc != 0 or doc is None:
        return {"status": ERROR, "reason": f"its campaign failed (exit {rc}): {last}"}
    findings = doc["findings"]
    sigs = lambda f: f.get("signatures") or [f["signature"]]  # noqa: E731
    kills = [f for f in findings if killing(sigs(f), f.get("contract", ""), reference)]
    cases = doc["ops"].get(op, {}).get("cases", 0)
    if kills and all(f["kind"] == "crash" and f["signature"].rsplit(":", 1)[-1] in COMPILE_ERRORS for f in kills):
        return {"status": STILLBORN, "reason": f"does not compile: {kills[0]['message']}", "cases": cases}
    if kills:
        first = min(kills, key=lambda f: f.get("found_after_s") or 0.0)
        return {"status": KILLED, "time_to_kill_s": first.get("found_after_s"), "signature": first["signature"],
                "found_at_case": first.get("found_at_case"), "cases": cases}
    if not cases:
        return {"status": STILLBORN, "reason": f"ran no case: {doc['ops'].get(op, {}).get('reason')}"}
    outside = [f for f in findings if f.get("contract") != "in contract" and not set(sigs(f)) <= reference]
    reason = f"killed only out of contract ({outside[0]['signature']}: {outside[0]['contract']})" if outside else None
    return {"status": SURVIVED, "cases": cases, "paths": paths_run(doc, op), "reason": reason}


def paths_run(doc: dict, op: str) -> dict[str, int]:
    """Kernel path -> cases a campaign's report says it ran there: a survivor of a campaign that
    never took its kernel's path says nothing about that kernel."""
    coverage = doc["ops"].get(op, {}).get("coverage", {})
    return {k.removeprefix("path:"): n for k, n in sorted(coverage.items()) if k.startswith("path:")}


def _read_state(folder: Path) -> dict | None:
    path = folder / "state.json"
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except ValueError:
        return None  # a state cut off mid-write: run it again


def _write_state(folder: Path, state: dict) -> None:
    from ..campaign import write_json_atomic

    write_json_atomic(folder / "state.json", state)


def run_mutants(cfg: MutantsConfig, say=lambda line: None, select=None) -> dict:
    """Plan, run the three phases, and return the report (`report.build`). `select(mutant)`, a
    library caller's filter, keeps only the planned mutants it accepts."""
    from .report import build

    from .. import device as devmod

    cfg.validate()
    devmod.select(cfg.device)  # before the builtin kernels' package (and Triton) is imported
    plans, skipped = plan(cfg)
    if select is not None:
        plans = [dataclasses.replace(p, mutants=[m for m in p.mutants if select(m)]) for p in plans]
        plans = [p for p in plans if p.mutants]
    tmp = None
    refs: dict | None = None
    workdir = cfg.workdir
    if workdir is None:
        tmp = tempfile.TemporaryDirectory(prefix="kvfuzz-mutants-")
        workdir = Path(tmp.name)
    try:
        workdir.mkdir(parents=True, exist_ok=True)
        marker = workdir / "mutants.json"
        if marker.is_file():
            try:
                held = json.loads(marker.read_text()).get("config")
            except ValueError:
                held = None
            if held != json.loads(json.dumps(cfg.identity())):
                raise BadInput(f"{workdir} holds another mutants run ({held}); resume it with the same options "
                               "or use another directory")
        else:
            from ..campaign import write_json_atomic

            write_json_atomic(marker, {"kvfuzz_mutants": 1, "config": cfg.identity()})
        runner = Runner(cfg, workdir, say)
        total = sum(len(p.mutants) for p in plans)
        say(f"{total} mutants of {cfg.target} ({', '.join(f'{p.op}: {len(p.mutants)}' for p in plans)}); "
            f"{cfg.budget_s:g} s each, {cfg.jobs} at a time")
        unsettled = [p.op for p in plans if _read_state(workdir / p.op / "reference") is None]
        variants = runner.variants(unsettled) if unsettled else {}
        refs = dict(zip([p.op for p in plans], runner.pool(runner.reference, [(p, variants.get(p.op)) for p in plans])))
        for p in plans:
            shown = ", ".join(refs[p.op]["signatures"]) or "none"
            paths = ", ".join(f"{k} {n}" for k, n in refs[p.op].get("paths", {}).items())
            say(f"[{p.op}] the original: variant {refs[p.op]['variant']}, cases per kernel path: {paths}; "
                f"findings of its own: {shown}")
        by_op = {p.op: p for p in plans}
        done = [0]

        def one(p: OpPlan, m: Mutant) -> dict:
            state = runner.mutant(p, m, refs[p.op])
            with runner.lock:
                done[0] += 1
                say(f"[{done[0]}/{total}] {p.op} {m.key}: {_verdict(state)}")
            return state

        states = runner.pool(one, [(p, m) for p in plans for m in p.mutants])
        pending = [(by_op[s["op"]], s, refs[s["op"]]) for s in states if s["status"] == "unconfirmed"]
        if pending:
            say(f"{len(pending)} survivor(s): confirmation runs of {cfg.budget_s * cfg.confirm_factor:g} s")
            confirmed = iter(runner.pool(runner.confirm, pending))
            states = [next(confirmed) if s["status"] == "unconfirmed" else s for s in states]
        states = [_settled_why(s) for s in states]
        unexplained = [(by_op[s["op"]], s, refs[s["op"]]) for s in states
                       if s["status"] in (SURVIVED, EQUIVALENT) and not s.get("why")]
        if unexplained and cfg.equivalence_cases:
            say(f"{len(unexplained)} mutant(s) not killed: each beside the original on {cfg.equivalence_cases} "
                "seeded cases, in and out of contract")
            explained = {s["key"]: s for s in runner.pool(runner.explain, unexplained)}
            states = [explained.get(s["key"], s) if s["status"] in (SURVIVED, EQUIVALENT) else s for s in states]
        return build(cfg, plans, skipped, refs, states, runner.device)
    except KeyboardInterrupt:
        # SIGINT, SIGTERM: what finished is kept, a report of it is not lost (the running
        # campaigns were stopped and gave no verdict: those mutants are `not_run`)
        if refs is None or set(refs) != {p.op for p in plans}:
            raise
        from .. import stopping

        states = [_read_state(workdir / p.op / m.key) or {
            "op": p.op, "key": m.key, "file": m.file, "function": m.function, "operator": m.operator,
            "line": m.line, "diff": m.diff(p.source.read_bytes()), "status": NOT_RUN} for p in plans for m in p.mutants]
        report = build(cfg, plans, skipped, refs, states, runner.device)
        report["cut_short"] = stopping.stopped_by() or "an interrupt"
        raise CutShort(report) from None
    finally:
        if tmp is not None:
            tmp.cleanup()


NOT_RUN = "not_run"  # a mutant whose campaign a stopped run never finished


class CutShort(KeyboardInterrupt):
    """A run stopped by SIGINT or SIGTERM once its references had run: `report` holds every
    mutant judged by then (`unconfirmed` ones awaited their confirmation run, `not_run` ones
    their campaign)."""

    def __init__(self, report: dict) -> None:
        super().__init__("cut short")
        self.report = report


def _mutant_of(p: OpPlan, key: str) -> Mutant:
    return next(m for m in p.mutants if m.key == key)


def _settled_why(s: dict) -> dict:
    """A not-killed mutant whose campaigns already say why: killed by its confirmation run only
    (`slow`), or killed only by out-of-contract cases (`outside contract`, with --out-of-contract)."""
    if s["status"] != SURVIVED or s.get("why"):
        return s
    if (s.get("confirmation") or {}).get("status") == KILLED:
        return s | {"why": "slow", "evidence": s["reason"]}
    if (s.get("reason") or "").startswith("killed only out of contract"):
        return s | {"why": "outside contract", "evidence": s["reason"], "status": OUTSIDE}
    return s


def _verdict(state: dict) -> str:
    if state["status"] == KILLED:
        return f"killed after {state['time_to_kill_s']:.1f} s ({state['signature']})"
    return state["status"] + (f": {state['reason']}" if state.get("reason") else "")


def exit_status(report: dict) -> int:
    """4 a mutant's campaign failed, 1 a survivor, else 0 (equivalent and stillborn mutants fail nothing)."""
    statuses = [m["status"] for m in report["mutants"]]
    return 4 if ERROR in statuses else 1 if SURVIVED in statuses else 0


def median_or_none(values: list[float]) -> float | None:
    return round(median(values), 2) if values else None
