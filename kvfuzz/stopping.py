"""How a run is stopped: SIGINT, SIGTERM and `--time-limit`'s alarm raise KeyboardInterrupt in
the main thread (the campaign keeps what it found and writes its reports), and `stopped_by()`
says which of them did. Only the first stops the run: those that follow (a scheduler's second
SIGTERM to the process group, a second Ctrl-C) are noted, and so is any inside `deferred()`,
where the workers are closed and the reports written; a worker then gets `close_wait_s()` to
exit before it is killed.
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Iterator

CLOSE_WAIT_S = 10.0  # a worker's time to finish its request and exit at the end of a run
STOPPING_CLOSE_WAIT_S = 1.0  # ... once the run is stopping: its result is not wanted

_why: list[str] = []  # what stopped the run, first first
_deferring = [0]  # inside deferred(): note a signal, raise nothing


def stopped_by() -> str | None:
    """"SIGINT", "SIGTERM", "the time limit (45 s)", or None while nothing has stopped the run."""
    return _why[0] if _why else None


def note(why: str) -> None:
    """Record what stopped the run (the first cause stays)."""
    _why.append(why)


def close_wait_s() -> float:
    return STOPPING_CLOSE_WAIT_S if _why else CLOSE_WAIT_S


def _handler(why: str):
    def handle(signum, frame) -> None:
        note(why)
        if not _deferring[0] and len(_why) == 1:  # the first stops the run; the stop is under way for the rest
            raise KeyboardInterrupt
    return handle


@contextmanager
def deferred() -> Iterator[None]:
    """Signals inside are noted, not raised: closing workers and writing reports finish."""
    _deferring[0] += 1
    try:
        yield
    finally:
        _deferring[0] -= 1


@contextmanager
def stop_on_signals() -> Iterator[None]:
    """SIGTERM, and SIGINT unless this process started with it ignored (a background job),
    stop the run as KeyboardInterrupt; the handlers are restored on exit. Outside the main
    thread: nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    del _why[:]
    old = {signal.SIGTERM: signal.signal(signal.SIGTERM, _handler("SIGTERM"))}
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        old[signal.SIGINT] = signal.signal(signal.SIGINT, _handler("SIGINT"))
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


@contextmanager
def alarm(after_s: float, why: str) -> Iterator[None]:
    """SIGALRM `after_s` seconds from now stops the run as KeyboardInterrupt, noted as `why`
    (`--time-limit`); the timer is cancelled on exit. Outside the main thread: nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.signal(signal.SIGALRM, _handler(why))
    signal.setitimer(signal.ITIMER_REAL, max(after_s, 0.01))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
