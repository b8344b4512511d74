"""A fake RAPL package for tests on hosts without /sys/class/powercap: a sysfs tree whose
``energy_uj`` a thread advances as a CPU package would draw, ``idle_w`` plus ``per_cpu_w``
for each CPU kept busy (from /proc/stat), so that the joules follow the work done.
``DNNROOFLINE_POWERCAP_ROOT`` pointed at :func:`running`'s tree makes a study read it."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

#: /proc/stat counts in USER_HZ ticks (100 per second on Linux).
TICKS_PER_S = os.sysconf("SC_CLK_TCK")
#: RAPL's usual wrap-around (the counter is 32 bits of 61 uJ units on many Intel parts).
MAX_RANGE_UJ = 262_143_328_850


def busy_cpu_s() -> float:
    """CPU-seconds every CPU of the host has spent busy since boot (not idle or iowait)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return (sum(fields[:8]) - idle) / TICKS_PER_S


def write_zone(path: Path, name: str, energy_uj: int) -> None:
    path.mkdir(parents=True, exist_ok=True)
    (path / "name").write_text(name + "\n")
    (path / "max_energy_range_uj").write_text(f"{MAX_RANGE_UJ}\n")
    set_energy(path, energy_uj)


def set_energy(zone: Path, energy_uj: int) -> None:
    """Replace the counter in one step, as a reader must never see half a number."""
    tmp = zone / "energy_uj.tmp"
    tmp.write_text(f"{energy_uj % (MAX_RANGE_UJ + 1)}\n")
    os.replace(tmp, zone / "energy_uj")


@contextlib.contextmanager
def running(
    root: Path, idle_w: float = 20.0, per_cpu_w: float = 15.0, period_s: float = 0.01
) -> Iterator[Path]:
    """A package zone under ``root`` whose counter advances while inside."""
    zone = root / "intel-rapl:0"
    write_zone(zone, "package-0", 0)
    stop = threading.Event()

    def advance() -> None:
        energy_j, t, busy = 0.0, time.monotonic(), busy_cpu_s()
        while not stop.wait(period_s):
            now, busy_now = time.monotonic(), busy_cpu_s()
            energy_j += idle_w * (now - t) + per_cpu_w * max(0.0, busy_now - busy)
            t, busy = now, busy_now
            set_energy(zone, int(energy_j * 1e6))

    thread = threading.Thread(target=advance, name="fake-rapl", daemon=True)
    thread.start()
    try:
        yield root
    finally:
        stop.set()
        thread.join(timeout=5)
