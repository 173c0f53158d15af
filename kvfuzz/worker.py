"""Run a target in a child process, so a crashing or hanging kernel costs one case.

The Triton interpreter does no bounds checking (a wild read can segfault the process) and a
CUDA fault poisons the whole context: either way the process is lost. `WorkerExecutor`
keeps the target in `python -m kvfuzz.worker SPEC DEVICE`, sends it cases (one, or a batch
packed in one arena), and gets `Outcome`s back over a pipe (length-prefixed pickle frames,
between our own processes only). A batch's arena image and the arena after the run go
through one shared-memory segment instead of the pipe. A worker that dies or overruns its deadline yields a
`WorkerDied` / `Timeout` outcome for that case (a lost batch for a batch), and the next
request starts a fresh worker.

Each worker records the Triton specialisation key of every launch it makes
(`specialize.LaunchRecorder`) and reports the new ones with every reply, so a campaign
knows how many kernel variants it made the target compile, on the CPU as on a GPU.
"""

from __future__ import annotations

import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from . import segments, spawn, stopping
from .case import Case
from .errors import BadInput, TargetLoadError
from .execute import (HARNESS, BatchResult, Launch, Outcome, RunResult, lost_batch, one_line, repeated_from,
                      run_batch, run_case, not_clean_from)
from .materialize import GUARD_MAX

# torch's threads in a worker: one. Its tensors are small, and parallelism comes from more
# workers (`--jobs`, the bench's shards); two CPU workers on two cores, each with torch's
# default of a thread per core, copied a batch's arena 20x slower (OpenMP threads contending).
TORCH_THREADS = 1

_HEADER = struct.Struct("<Q")
DIED, TIMEOUT = "WorkerDied", "Timeout"  # error types of a lost worker, judged as crashes

# A batch's shared segment: the image, the arena after the first pass, the repeated cases'
# arena (built there from their alternate images, materialize.refill) after theirs, each
# followed by `SECTION_GAP` bytes. On the CPU the kernels run in the
# last two sections themselves (execute.run_batch), and the interpreter checks no bounds: a wild
# write past an arena's guard bands lands in a gap, not in another section's cases.
SECTION_GAP = GUARD_MAX


def segment_size(n: int) -> int:
    return 3 * (n + SECTION_GAP)


def sections(segment: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(image, after, repeat): the three `n`-byte sections of a shared segment."""
    step = n + SECTION_GAP
    return segment[:n], segment[step : step + n], segment[2 * step : 2 * step + n]


BATCH_SECONDS_PER_CASE = 1.0  # a batch's deadline: the case timeout plus this per case
# a worker that dies of these was stopped, not crashed by the kernel: the run is interrupted
_STOPPED_FROM_OUTSIDE = (-signal.SIGTERM, -signal.SIGINT, -signal.SIGHUP)  # exit codes


class Executor(Protocol):
    description: str
    identity: str  # the physical device (GPU UUID), see device.identity
    missing: dict[str, str]  # op -> why the target cannot run it; every other op it runs
    variants: dict[str, str]  # op -> the contract variant the target selects (targets.variant_for)
    lacks: dict[str, tuple[str, ...]]  # op -> optional tensors its entry point cannot take (Target.lacks)
    takes: dict[str, tuple[str, ...]]  # op -> later releases' arguments it takes (Target.takes)
    launch_keys: set  # Triton specialisation keys of every launch so far (see specialize.py)
    compiled: int  # kernel variants Triton compiled in the worker (0 under the interpreter)

    # torch_ref: the case is in contract (the torch oracle is due); None: the executor classifies it
    def run(self, case: Case, repeats: int = 1, torch_ref: bool | None = None) -> Outcome: ...

    def run_batch(self, image: np.ndarray, batch: list[Launch]) -> BatchResult: ...

    def submit(self, image: np.ndarray, batch: list[Launch]) -> None: ...  # run_batch, split in two

    def collect(self) -> BatchResult: ...

    def close(self) -> None: ...


class InProcessExecutor:
    """Runs the target in this process: fastest, but a crash takes the process with it."""

    def __init__(self, target_spec: str, device: str) -> None:
        from . import device as devmod
        from .specialize import recorder
        from .targets import load_target

        self.target = load_target(target_spec, device)
        self.device = device
        self.description = self.target.description
        self.identity = devmod.identity(device)
        self.missing = dict(self.target.missing)
        self.variants = dict(self.target.variants)
        self.lacks = self.target.lacks
        self.takes = self.target.takes
        self.recorder = recorder()

    @property
    def launch_keys(self) -> set:
        return set(self.recorder.keys)

    @property
    def compiled(self) -> int:
        return self.recorder.compiled()

    def run(self, case: Case, repeats: int = 1, torch_ref: bool | None = None) -> Outcome:
        return run_case(self.target, case, self.device, repeats=repeats, torch_ref=torch_ref)

    def run_batch(self, image: np.ndarray, batch: list[Launch]) -> BatchResult:
        return run_batch(self.target, image, batch, self.device)

    def submit(self, image: np.ndarray, batch: list[Launch]) -> None:
        self._pending = (image, batch)

    def collect(self) -> BatchResult:
        (image, batch), self._pending = self._pending, None
        return self.run_batch(image, batch)

    def close(self) -> None:
        pass


class WorkerExecutor:
    """`standby`: keep a second worker started and idle, so that a worker lost to a crash is
    replaced at once instead of after a new interpreter has imported torch (about 2 s).

    Confirmations (`fresh_many`) want processes that have run no case. From a campaign's first
    confirmation on, as many as it asked for are kept started and idle (`spares`), restarted
    right after each confirmation takes them (once the worker next answers, like the standby),
    so the next confirmation costs only running its cases, not a process start (on the H200,
    several seconds each: torch, a CUDA context, the target's kernels). None is started before
    the first confirmation: on two cores their imports would slow every clean run's start."""

    _spares: tuple = ()  # idle processes that have run no case (replaced, never changed in place)
    _spares_due = 0  # how many spares to keep once the worker next answers (0: none)
    # a confirmation's worker (`fresh`): killed on close instead of waited for; it ran its
    # cases and keeps nothing, and a worker's orderly exit (torch's teardown) took 0.5 s on the
    # CPU, three of them a confirmation's critical path
    throwaway = False

    def __init__(self, target_spec: str, device: str, timeout_s: float = 60.0,
                 env: dict[str, str] | None = None, standby: bool = False,
                 _proc: subprocess.Popen | None = None, _early: "EarlyWorker | None" = None) -> None:
        self.target_spec, self.device, self.timeout_s = target_spec, device, timeout_s
        self.extra_env = dict(env or {})  # e.g. CUDA_VISIBLE_DEVICES to pin this worker to one GPU
        self.proc: subprocess.Popen | None = None
        self.standby: subprocess.Popen | None = _early.proc if _early else _proc  # a process already started for us
        self.use_standby = standby
        self._standby_due = False  # start the standby once the worker has answered a request
        self._shm = None  # the batches' shared memory (created on the first batch)
        self.log = _early.log if _early else tempfile.NamedTemporaryFile(prefix="kvfuzz-worker-", suffix=".log",
                                                                          delete=False)
        self.restarts = 0
        self.launch_keys: set = set()
        self.compiled = 0  # summed over the worker's lives
        self._compiled_now = 0
        info = self._start()
        self.description = info["description"]
        self.identity = info["identity"]
        self.missing = info["missing"]
        self.variants = info.get("variants", {})
        self.lacks = info.get("lacks", {})
        self.takes = info.get("takes", {})

    # process management --------------------------------------------------------------
    def _spawn(self) -> subprocess.Popen:
        return _spawn_worker(self.target_spec, self.device, dict(os.environ) | self.extra_env, self.log)

    def _start(self) -> dict[str, Any]:
        ready = self.standby is not None and self.standby.poll() is None
        self.proc, self.standby = (self.standby if ready else self._spawn()), None
        payload = self._hello()
        if payload.get("device", self.device) != self.device:  # an early worker resolved "auto" otherwise
            self._kill()
            self.proc = self._spawn()
            payload = self._hello()
        # the standby imports while this one works: for the first worker from its first answer
        # on (on two cores, importing beside the first batch delayed the first judged case);
        # for a lost worker's replacement at once (a target that crashes loses the next soon)
        if self.use_standby and self.restarts:
            self.standby = self._spawn()
        else:
            self._standby_due = self.use_standby
        return payload

    def _hello(self) -> dict[str, Any]:
        try:
            reply = self._recv(time.monotonic() + max(self.timeout_s, 300.0))
        except TimeoutError:
            reply = None
        if reply is None:
            raise TargetLoadError(f"worker for {self.target_spec} did not start: {_exit_reason(self._exit_code())}")
        kind, payload = reply
        if kind == "error":
            self._kill()
            raise TargetLoadError(payload)
        return payload

    def _start_standby(self) -> None:
        """After an answer: the standby and the spares that are due, started in the background."""
        if self._standby_due:
            self._standby_due = False
            if self.standby is None:
                self.standby = self._spawn()
        self._refill_spares()

    def _refill_spares(self) -> None:
        live = self._live_spares()
        self._spares = tuple(live) + tuple(self._spawn() for _ in range(self._spares_due - len(live)))

    def _live_spares(self) -> list[subprocess.Popen]:
        """The spares still running; one that died idle (killed, out of memory) is reaped."""
        live = []
        for proc in self._spares:
            if proc.poll() is None:
                live.append(proc)
            else:
                proc.wait()
        self._spares = tuple(live)
        return live

    def _take_spares(self, n: int) -> list[subprocess.Popen]:
        """Up to `n` spares, taken out of the pool; the pool is kept at `n` from now on."""
        live = self._live_spares()
        self._spares, self._spares_due = tuple(live[n:]), max(self._spares_due, n)
        return live[:n]

    def spares_ready(self, n: int) -> bool:
        """Whether a confirmation of `n` tries finds its spares started and ready (each has said
        hello). True while no spare is kept: the first confirmation starts its own processes."""
        if not self._spares_due:
            return True
        live = self._live_spares()
        if len(live) < n:
            return False
        said = select.select([p.stdout for p in live[:n]], [], [], 0)[0]
        return len(said) == n

    @property
    def spare_pids(self) -> list[int]:
        """The process ids of the spares (tests count them; none is a case's worker)."""
        return [p.pid for p in self._spares]

    def fresh(self) -> "WorkerExecutor":
        """A new executor on a process that has run no case (a spare, else the standby, if one is up)."""
        spare = self._take_spares(1) if self._spares else []
        if spare:
            proc = spare[0]
        else:
            proc, self.standby = self.standby, None
            if self.use_standby:
                self.standby = self._spawn()
                self._standby_due = False
        return self._throwaway(proc)

    def _throwaway(self, proc: subprocess.Popen | None) -> "WorkerExecutor":
        made = WorkerExecutor(self.target_spec, self.device, self.timeout_s, self.extra_env, _proc=proc)
        made.throwaway = True
        return made

    def fresh_many(self, n: int) -> list["WorkerExecutor"]:
        """`n` executors on processes that have run no case: the spares, ready since the last
        confirmation; else (the first confirmation) the standby and new processes started
        together, so that their imports overlap and n of them cost about one start, not n."""
        procs = self._take_spares(n)
        if len(procs) < n:
            procs += [self.standby] + [self._spawn() for _ in range(n - len(procs) - 1)]
            self.standby = self._spawn() if self.use_standby else None
            self._standby_due = False
        made: list[WorkerExecutor] = []
        try:
            for proc in procs:
                made.append(self._throwaway(proc))
        except BaseException:
            for ex in made:
                ex.close()
            for proc in procs[len(made):]:
                if proc is not None and proc.poll() is None:
                    proc.kill()
            raise
        return made

    def _kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None
        self._compiled_now = 0  # a new worker compiles (or loads from Triton's cache) anew

    def _telemetry(self, keys: list, compiled: int) -> None:
        self.launch_keys.update(keys)
        self.compiled += max(compiled - self._compiled_now, 0)
        self._compiled_now = compiled

    def _exit_code(self) -> int | None:
        """The worker's exit status once it has closed its pipe (None if it does not exit)."""
        if self.proc:
            try:
                return self.proc.wait(timeout=10)  # it closed its pipe: let it finish dying
            except subprocess.TimeoutExpired:
                pass
        return None

    def _log_tail(self, n: int = 6) -> str:
        try:
            with open(self.log.name, "rb") as f:
                f.seek(max(0, os.path.getsize(self.log.name) - 4000))
                lines = f.read().decode(errors="replace").splitlines()
            return "\n".join(lines[-n:])
        except OSError:
            return ""

    # framing --------------------------------------------------------------------------
    def _send(self, obj: Any) -> None:
        data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
        self.proc.stdin.write(_HEADER.pack(len(data)) + data)
        self.proc.stdin.flush()

    def _recv(self, deadline: float) -> Any | None:
        head = self._read(_HEADER.size, deadline)
        if head is None:
            return None
        body = self._read(_HEADER.unpack(head)[0], deadline)
        return None if body is None else pickle.loads(body)

    def _read(self, n: int, deadline: float) -> bytes | None:
        fd, chunks, got = self.proc.stdout.fileno(), [], 0
        while got < n:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise TimeoutError
            chunk = os.read(fd, min(n - got, 1 << 20))
            if not chunk:
                return None
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks)

    # running -----------------------------------------------------------------------------
    def _begin(self, message: tuple, deadline_s: float) -> None:
        """Send a request (starting a worker if none runs); `_end` collects its reply."""
        if self.proc is None or self.proc.poll() is not None:
            self.restarts += 1
            self._start()
        self._t0, self._deadline, self._send_failed = time.monotonic(), deadline_s, False
        try:
            self._send(message)
        except (BrokenPipeError, OSError):
            self._send_failed = True

    def _end(self) -> tuple[Any, str | None, float]:
        """(reply payload, why the worker was lost, t0); raises KeyboardInterrupt when the
        worker was stopped from outside (a scheduler's SIGTERM to the process group)."""
        t0 = self._t0
        reply = None
        if not self._send_failed:
            try:
                reply = self._recv(t0 + self._deadline)
            except TimeoutError:
                self._kill()
                return None, f"{TIMEOUT}: no result after {self._deadline:.0f} s (worker killed)", t0
            except (BrokenPipeError, OSError):
                reply = None
        if reply is None:
            code = self._exit_code()
            self._kill()
            if code in _STOPPED_FROM_OUTSIDE:
                raise KeyboardInterrupt(f"worker {_exit_reason(code)}")
            return None, f"{DIED}: {_exit_reason(code)}", t0
        _, payload, keys, compiled = reply
        self._telemetry(keys, compiled)
        self._start_standby()
        return payload, None, t0

    def run(self, case: Case, repeats: int = 1, torch_ref: bool | None = None) -> Outcome:
        # the timeout is each run's: a case run twice (its determinism re-run) gets twice as long
        self._begin(("run", case, repeats, torch_ref), self.timeout_s * max(1, repeats))
        outcome, lost, t0 = self._end()
        if lost:
            kind, why = lost.split(": ", 1)
            return self._lost(kind, why, t0)
        if outcome.device_lost:
            self._kill()
        return outcome

    def _shared(self, n: int) -> np.ndarray:
        """A shared segment with room for the three sections of a batch of `n` bytes (`sections`)."""
        if self._shm is None or self._shm.size < segment_size(n):
            self._drop_shared()
            self._shm = segments.create(max(segment_size(n), 1 << 20))
        return np.ndarray((self._shm.size,), dtype=np.uint8, buffer=self._shm.buf)

    def _drop_shared(self) -> None:
        if self._shm is not None:
            shm, self._shm = self._shm, None
            shm.close()
            try:
                shm.unlink()
            except FileNotFoundError:  # already gone (another process's sweep on a SIGTERM): what close wants
                pass

    def submit(self, image: np.ndarray, batch: list[Launch]) -> None:
        """Start a batch; the caller prepares the next one while the worker runs this one."""
        n = image.size
        sections(self._shared(n), n)[0][:] = image
        self._pending = (batch, n)
        self._begin(("batch", self._shm.name, n, batch), self.timeout_s + BATCH_SECONDS_PER_CASE * len(batch))

    def collect(self) -> BatchResult:
        (batch, n), self._pending = self._pending, None
        result, lost, _ = self._end()
        if lost:
            return lost_batch(batch, lost)
        if result.lost:
            self._kill()
        else:  # copied out now: the next batch reuses the segment
            _, after, repeat = sections(self._shared(n), n)
            if result.afters[0] is None:
                result.afters[0] = not_clean_from(after, batch, result.device_clean)
            if result.afters[1] is None:
                result.afters[1] = repeated_from(repeat, batch, result.device_clean)
        return result

    def run_batch(self, image: np.ndarray, batch: list[Launch]) -> BatchResult:
        self.submit(image, batch)
        return self.collect()

    def _lost(self, kind: str, why: str, t0: float) -> Outcome:
        run = RunResult(error=f"{kind}: {why}", error_type=kind, seconds=time.monotonic() - t0,
                        detail=self._log_tail())
        return Outcome(runs=[run], device_lost=True)

    def close(self) -> None:
        self._drop_shared()
        self._spares_due = 0
        for idle in (self.standby, *self._spares):  # they have run nothing: nothing to wait for
            if idle is not None:
                if idle.poll() is None:
                    idle.kill()
                idle.wait()
        self.standby, self._spares = None, ()
        if self.throwaway:
            self._kill()
        if self.proc and self.proc.poll() is None:
            try:
                self.proc.stdin.close()
                self.proc.wait(timeout=stopping.close_wait_s())  # short once the run is stopping
            except Exception:
                self._kill()
        self.proc = None
        try:
            os.unlink(self.log.name)
        except OSError:
            pass


def _exit_reason(code: int | None) -> str:
    if code is None:
        return "no reply"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with status {code}"


def make_executor(target_spec: str, device: str, isolate: bool = True, timeout_s: float = 60.0,
                  standby: bool = False, early: "EarlyWorker | None" = None) -> Executor:
    if isolate:
        return WorkerExecutor(target_spec, device, timeout_s, standby=standby, _early=early)
    return InProcessExecutor(target_spec, device)


# Without TRITON_CACHE_DIR, a worker started before its parent chose the device takes the
# per-target cache a campaign uses (device.triton_cache_dir): only it knows the GPU by then.
CACHE_PER_TARGET_ENV = "KVFUZZ_TRITON_CACHE_PER_TARGET"


@dataclass
class EarlyWorker:
    proc: subprocess.Popen
    log: Any  # the file its stderr goes to


def early_worker(target_spec: str, device: str) -> EarlyWorker | None:
    """A worker started before this process has chosen its device, so that its imports (torch,
    Triton, the interpreter's probes: seconds) run beside this process's own instead of after
    them. `device` may be "auto": the worker resolves it as this process will (the same
    environment), and `WorkerExecutor` replaces it should their answers differ. None for a
    device name this process will refuse anyway."""
    from . import device as devmod

    if device not in devmod.CHOICES:
        return None
    env = dict(os.environ)
    if "TRITON_CACHE_DIR" not in env:
        env[CACHE_PER_TARGET_ENV] = "1"
    log = tempfile.NamedTemporaryFile(prefix="kvfuzz-worker-", suffix=".log", delete=False)
    return EarlyWorker(_spawn_worker(target_spec, device, env, log), log)


def discard(early: EarlyWorker | None) -> None:
    """An early worker no executor took (this process refused its arguments first)."""
    if early is not None:
        if early.proc.poll() is None:
            early.proc.kill()
        early.proc.wait()
        early.log.close()
        try:
            os.unlink(early.log.name)
        except OSError:
            pass


def _spawn_worker(target_spec: str, device: str, env: dict[str, str], log) -> subprocess.Popen:
    env = spawn.environment(env)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return subprocess.Popen(spawn.command("kvfuzz.worker", target_spec, device),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, env=env)


# the child's side ---------------------------------------------------------------------


class _Attached:
    """The parent's shared segment, attached once per name (the parent grows it by replacing it).

    On CUDA the segment is page-locked for the device (cudaHostRegister), so a batch's copies
    to and from the GPU run at DMA speed instead of through the driver's staging buffer; if
    the driver refuses, the copies stay pageable (slower, the same bytes)."""

    def __init__(self, device: str = "cpu") -> None:
        self.shm = None
        self.device = device
        self.pinned: int | None = None  # the registered address

    def attach(self, name: str):
        from multiprocessing import resource_tracker, shared_memory

        if self.shm is None or self.shm.name != name:
            if self.shm is not None:
                self._unpin()
                try:
                    self.shm.close()
                except BufferError:  # a view still alive: leave it mapped, it is the old one
                    pass
            self.shm = shared_memory.SharedMemory(name=name)
            # the parent owns the segment: this process must not unlink it when it exits
            resource_tracker.unregister(self.shm._name, "shared_memory")
            self._pin()
        return self.shm

    def _pin(self) -> None:
        if self.device != "cuda":
            return
        import torch

        ptr = np.ndarray((self.shm.size,), np.uint8, self.shm.buf).ctypes.data
        try:
            if int(torch.cuda.cudart().cudaHostRegister(ptr, self.shm.size, 0)) == 0:
                self.pinned = ptr
        except Exception:  # no such runtime call in this torch build: stay pageable
            pass

    def _unpin(self) -> None:
        if self.pinned is not None:
            import torch

            try:
                torch.cuda.synchronize()  # no copy may still be reading it
                torch.cuda.cudart().cudaHostUnregister(self.pinned)
            except Exception:  # a faulted context: the process is about to be replaced anyway
                pass
            self.pinned = None


def _serve(spec: str, device: str) -> int:
    # Ctrl-C reaches the whole process group: the parent decides, then closes our stdin
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from .heap import return_large_frees

    return_large_frees()  # batch images and afters of a few MiB each, every batch (heap.py)
    proto_out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # anything the target prints goes to the log, not into the protocol
    proto_in = sys.stdin.buffer

    def send(obj: Any) -> None:
        data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
        proto_out.write(_HEADER.pack(len(data)) + data)
        proto_out.flush()

    from . import device as devmod
    from .specialize import recorder as launch_recorder
    from .targets import load_target

    import torch

    torch.set_num_threads(TORCH_THREADS)
    try:
        dev = devmod.select(device)
        if os.environ.pop(CACHE_PER_TARGET_ENV, None) and dev == "cuda" and "TRITON_CACHE_DIR" not in os.environ:
            os.environ["TRITON_CACHE_DIR"] = str(devmod.triton_cache_dir(spec, dev))  # before any compile
        target = load_target(spec, dev)
    except BadInput as exc:
        send(("error", str(exc)))
        return 2
    recorder = launch_recorder()
    reported: set = set()
    shared = _Attached(dev)
    send(("ready", {"device": dev, "description": target.description, "identity": devmod.identity(dev),
                    "missing": dict(target.missing), "variants": dict(target.variants),
                    "lacks": target.lacks, "takes": target.takes}))
    while True:
        head = proto_in.read(_HEADER.size)
        if len(head) < _HEADER.size:
            return 0
        t0 = time.perf_counter()
        request = pickle.loads(proto_in.read(_HEADER.unpack(head)[0]))
        if request[0] == "batch":
            _, name, n, batch = request
            try:
                shm = shared.attach(name)
                image, after, repeat = sections(np.ndarray((shm.size,), np.uint8, shm.buf), n)
                payload = run_batch(target, image, batch, dev, after_out=after, repeat_out=repeat)
            except Exception as exc:  # kvfuzz's own harness failed: the cases are re-run one by one
                payload = lost_batch(batch, f"{HARNESS}: {one_line(exc)}")
            # reading the request and everything around the stages run_batch times
            payload.stages["protocol"] = time.perf_counter() - t0 - sum(payload.stages.values())
        else:
            _, case, repeats, torch_ref = request
            try:
                payload = run_case(target, case, dev, repeats=repeats, torch_ref=torch_ref)
            except Exception as exc:  # kvfuzz's own harness failed: report it, keep serving
                import traceback

                payload = Outcome(runs=[RunResult(error=f"{HARNESS}: {one_line(exc)}", error_type=HARNESS,
                                                  detail=traceback.format_exc()[-2000:])],
                                  device_lost=dev == "cuda")  # a CUDA error poisons the context: restart
        new = [k for k in recorder.keys if k not in reported]
        reported.update(new)
        send((request[0], payload, new, recorder.compiled()))


if __name__ == "__main__":
    sys.exit(_serve(sys.argv[1], sys.argv[2]))
