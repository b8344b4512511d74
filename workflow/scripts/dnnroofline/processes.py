"""Child processes that must not outlive the stage that started them.

A measurement stage starts its work in a new session (data-parallel ranks, ncu and the
driver it profiles), so that one ``killpg`` ends all of it. That also puts the work out
of reach of a signal sent to the stage's own process group (``timeout``, Snakemake
stopping its jobs): a stage stopped without cleanup would leave it running on the
device, beside the next measurement, with the measurement lock already released. So
stages turn SIGTERM/SIGINT/SIGHUP into an exit through their ``finally`` blocks
(:func:`signals_exit`) and end their children's groups there (:func:`kill_group`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from typing import Any

#: Seconds a stopped child stage gets to end its own children before it is killed.
STOP_GRACE_S = 60.0


@contextlib.contextmanager
def signals_exit() -> Any:
    """SIGTERM/SIGINT/SIGHUP end this process through its cleanup (exit 128 + signal)."""

    def handler(signum: int, _frame: Any) -> None:
        raise SystemExit(128 + signum)

    saved = {}
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        with contextlib.suppress(ValueError, OSError):  # not the main thread
            saved[sig] = signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, old in saved.items():
            signal.signal(sig, old)


def ignore_signals() -> None:
    """From here on SIGTERM/SIGINT/SIGHUP are ignored: a second one must not stop a cleanup."""
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        with contextlib.suppress(ValueError, OSError):
            signal.signal(sig, signal.SIG_IGN)


def die_with_parent(parent: int) -> Callable[[], None] | None:
    """preexec_fn: the child gets SIGKILL when ``parent`` dies (Linux prctl)."""
    if not sys.platform.startswith("linux"):
        return None

    def setup() -> None:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # the parent died before prctl
            os._exit(1)

    return setup


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the child's whole process group (what it started too), then reap it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=30)


def run_stage(cmd: Sequence[str]) -> int:
    """Run a child stage to its end and return its exit code. If this process is stopped
    meanwhile (:func:`signals_exit`), the child is asked to stop (SIGTERM) and given
    :data:`STOP_GRACE_S` to end its own children, then killed."""
    proc = subprocess.Popen(list(cmd))
    try:
        return proc.wait()
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
