"""Run a target in a child process, so a crashing or hanging kernel costs one case.

The Triton interpreter does no bounds checking (a wild read can segfault the process) and a
CUDA fault poisons the whole context: either way the process is lost. `WorkerExecutor`
keeps the target in `python -m kvfuzz.worker SPEC DEVICE`, sends it cases, and gets
`Outcome`s back over a pipe (length-prefixed pickle frames, between our own processes
only). A worker that dies or overruns its deadline yields a `WorkerDied` / `Timeout`
outcome for that case, and the next case starts a fresh worker.
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
from typing import Any, Protocol

from .case import Case
from .errors import BadInput, TargetLoadError
from .execute import Outcome, RunResult, one_line, run_case

_HEADER = struct.Struct("<Q")
DIED, TIMEOUT = "WorkerDied", "Timeout"  # error types of a lost worker, judged as crashes
HARNESS = "HarnessError"  # kvfuzz itself failed on the case (a kvfuzz bug, reported as a crash)
# a worker that dies of these was stopped, not crashed by the kernel: the run is interrupted
_STOPPED_FROM_OUTSIDE = (-signal.SIGTERM, -signal.SIGINT, -signal.SIGHUP)  # exit codes


class Executor(Protocol):
    description: str
    identity: str  # the physical device (GPU UUID), see device.identity
    missing: dict[str, str]  # op -> why the target cannot run it; every other op it runs

    def run(self, case: Case, repeats: int = 1, torch_ref: bool = True) -> Outcome: ...

    def close(self) -> None: ...


class InProcessExecutor:
    """Runs the target in this process: fastest, but a crash takes the process with it."""

    def __init__(self, target_spec: str, device: str) -> None:
        from . import device as devmod
        from .targets import load_target

        self.target = load_target(target_spec, device)
        self.device = device
        self.description = self.target.description
        self.identity = devmod.identity(device)
        self.missing = dict(self.target.missing)

    def run(self, case: Case, repeats: int = 1, torch_ref: bool = True) -> Outcome:
        return run_case(self.target, case, self.device, repeats=repeats, torch_ref=torch_ref)

    def close(self) -> None:
        pass


class WorkerExecutor:
    def __init__(self, target_spec: str, device: str, timeout_s: float = 120.0,
                 env: dict[str, str] | None = None) -> None:
        self.target_spec, self.device, self.timeout_s = target_spec, device, timeout_s
        self.extra_env = dict(env or {})  # e.g. CUDA_VISIBLE_DEVICES to pin this worker to one GPU
        self.proc: subprocess.Popen | None = None
        self.log = tempfile.NamedTemporaryFile(prefix="kvfuzz-worker-", suffix=".log", delete=False)
        self.restarts = 0
        info = self._start()
        self.description = info["description"]
        self.identity = info["identity"]
        self.missing = info["missing"]

    # process management --------------------------------------------------------------
    def _start(self) -> dict[str, Any]:
        env = dict(os.environ) | self.extra_env
        env.setdefault("PYTHONUNBUFFERED", "1")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kvfuzz.worker", self.target_spec, self.device],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, env=env)
        reply = self._recv(time.monotonic() + max(self.timeout_s, 300.0))
        if reply is None:
            raise TargetLoadError(f"worker for {self.target_spec} did not start: {_exit_reason(self._exit_code())}")
        kind, payload = reply
        if kind == "error":
            self._kill()
            raise TargetLoadError(payload)
        return payload

    def _kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

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
    def run(self, case: Case, repeats: int = 1, torch_ref: bool = True) -> Outcome:
        if self.proc is None or self.proc.poll() is not None:
            self.restarts += 1
            self._start()
        t0 = time.monotonic()
        try:
            self._send(("run", case, repeats, torch_ref))
            reply = self._recv(t0 + self.timeout_s)
        except TimeoutError:
            self._kill()
            return self._lost(TIMEOUT, f"no result after {self.timeout_s:.0f} s (worker killed)", t0)
        except (BrokenPipeError, OSError):
            reply = None
        if reply is None:
            code = self._exit_code()
            self._kill()
            if code in _STOPPED_FROM_OUTSIDE:  # e.g. a scheduler's SIGTERM to the process group
                raise KeyboardInterrupt(f"worker {_exit_reason(code)}")
            return self._lost(DIED, _exit_reason(code), t0)
        outcome = reply[1]
        if outcome.device_lost:
            self._kill()
        return outcome

    def _lost(self, kind: str, why: str, t0: float) -> Outcome:
        run = RunResult(error=f"{kind}: {why}", error_type=kind, seconds=time.monotonic() - t0,
                        detail=self._log_tail())
        return Outcome(runs=[run], device_lost=True)

    def close(self) -> None:
        if self.proc and self.proc.poll() is None:
            try:
                self.proc.stdin.close()
                self.proc.wait(timeout=10)
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


def make_executor(target_spec: str, device: str, isolate: bool = True, timeout_s: float = 120.0) -> Executor:
    return WorkerExecutor(target_spec, device, timeout_s) if isolate else InProcessExecutor(target_spec, device)


# the child's side ---------------------------------------------------------------------


def _serve(spec: str, device: str) -> int:
    # Ctrl-C reaches the whole process group: the parent decides, then closes our stdin
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    proto_out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # anything the target prints goes to the log, not into the protocol
    proto_in = sys.stdin.buffer

    def send(obj: Any) -> None:
        data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
        proto_out.write(_HEADER.pack(len(data)) + data)
        proto_out.flush()

    from . import device as devmod
    from .targets import load_target

    try:
        dev = devmod.select(device)
        target = load_target(spec, dev)
    except BadInput as exc:
        send(("error", str(exc)))
        return 2
    send(("ready", {"description": target.description, "identity": devmod.identity(dev),
                    "missing": dict(target.missing)}))
    while True:
        head = proto_in.read(_HEADER.size)
        if len(head) < _HEADER.size:
            return 0
        _, case, repeats, torch_ref = pickle.loads(proto_in.read(_HEADER.unpack(head)[0]))
        try:
            outcome = run_case(target, case, dev, repeats=repeats, torch_ref=torch_ref)
        except Exception as exc:  # kvfuzz's own harness failed: report it, keep serving
            import traceback

            outcome = Outcome(runs=[RunResult(error=f"{HARNESS}: {one_line(exc)}", error_type=HARNESS,
                                              detail=traceback.format_exc()[-2000:])],
                              device_lost=dev == "cuda")  # a CUDA error poisons the context: restart
        send(("outcome", outcome))


if __name__ == "__main__":
    sys.exit(_serve(sys.argv[1], sys.argv[2]))
