"""One measurement at a time on this machine, whoever started it.

Snakemake's ``measurement`` resource keeps the measurements of one snakemake apart;
two snakemakes (two targets in two terminals, two checkouts, a test run beside a
study) would still measure at the same time and slow each other down unseen. Every
measurement (timed run, ceilings, trace, ncu, perf) therefore holds a machine-wide
advisory lock, ``flock`` on one file, while it measures. One that finds the lock held
waits, saying for whom; the kernel releases the lock of a process that dies, so a
killed measurement never leaves it held. Processes a measurement starts (data-parallel
ranks, the driver under ncu or perf) inherit it through :data:`HELD_ENV`.

``DNNROOFLINE_MEASUREMENT_LOCK`` names another lock file (one per container that
shares a machine, say), or ``off``.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

PATH_ENV = "DNNROOFLINE_MEASUREMENT_LOCK"
HELD_ENV = "DNNROOFLINE_MEASUREMENT_LOCK_HELD"


def lock_path(environ: dict[str, str] | None = None) -> Path | None:
    """The lock file: ``$DNNROOFLINE_MEASUREMENT_LOCK``, else one in the temp folder;
    None when that variable is ``off``."""
    environ = os.environ if environ is None else environ
    value = environ.get(PATH_ENV, "").strip()
    if value.lower() == "off":
        return None
    return Path(value) if value else Path(tempfile.gettempdir()) / "dnnroofline-measurement.lock"


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _open(path: Path) -> tuple[int, bool]:
    """(fd, writable): another user's lock file can be locked read-only."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except PermissionError:
        return os.open(path, os.O_RDONLY), False
    with contextlib.suppress(OSError):  # another user's measurements take it too
        os.fchmod(fd, 0o666)
    return fd, True


def _holder(fd: int) -> str:
    try:
        doc = json.loads(os.pread(fd, 4096, 0).decode() or "{}")
        return f"pid {doc['pid']} ({doc['what']}, since {doc['since']})"
    except (OSError, ValueError, KeyError, TypeError):
        return "another process"


@contextmanager
def measurement_lock(
    what: str | None = None, say: Callable[[str], None] = _stderr
) -> Iterator[float]:
    """Hold the machine's measurement lock while the block runs; yields the seconds waited.

    ``what`` tells a waiting measurement whom it waits for (default: this command line).
    A no-op where a parent holds it (:data:`HELD_ENV`), where it is ``off``, and where
    the platform has no ``flock``.
    """
    if what is None:
        what = " ".join([Path(sys.argv[0]).name, *sys.argv[1:]])[:300]
    path = lock_path()
    try:
        import fcntl
    except ImportError:  # Windows: no flock; Snakemake's resource still applies
        fcntl = None
    if os.environ.get(HELD_ENV) == "1" or path is None or fcntl is None:
        yield 0.0
        return
    fd, writable = _open(path)
    t0 = time.monotonic()
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say(f"waiting for the measurement lock {path}: held by {_holder(fd)}")
            fcntl.flock(fd, fcntl.LOCK_EX)
            say(f"took the measurement lock after {time.monotonic() - t0:.1f} s")
        waited = time.monotonic() - t0
        if writable:
            since = time.strftime("%Y-%m-%d %H:%M:%S")
            note = json.dumps({"pid": os.getpid(), "what": what, "since": since})
            os.ftruncate(fd, 0)
            os.pwrite(fd, note.encode(), 0)
        os.environ[HELD_ENV] = "1"
        try:
            yield waited
        finally:
            os.environ.pop(HELD_ENV, None)
    finally:
        os.close(fd)  # releases the lock
