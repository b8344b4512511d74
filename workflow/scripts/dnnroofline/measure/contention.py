"""Other processes' CPU use while something is measured: a roof measured on a busy
machine is low, and a run timed beside another job is slow, with no error.

The measurement lock keeps the pipeline's own measurements apart; this sees the rest
(another user's job, a second checkout without the lock, a build). Between two
snapshots: the CPU time every CPU spent busy (``/proc/stat`` through psutil), less the
CPU time of this process and its descendants, over the wall time between them, is how
many CPUs other processes kept busy on average. Hypervisor steal is reported apart:
the CPUs the VM was denied.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

#: Other processes busy on average on at least this many CPUs: the measurement is
#: flagged (an idle Linux box runs its daemons on a few hundredths of one).
CONTENDED_CPUS = 0.25


@dataclass(frozen=True)
class CpuSnapshot:
    monotonic_s: float
    busy_s: float  # all CPUs: user, nice, system, irq, softirq (not idle, iowait, steal)
    steal_s: float
    own_s: float  # this process, its live descendants and its exited, waited-for children


def snapshot(root_pid: int | None = None) -> CpuSnapshot | None:
    """Now, or None where psutil cannot read the system's CPU times. ``root_pid``: the
    process whose tree is the measurement's own (default this one; a data-parallel
    rank passes its launcher, so the other ranks are not "other processes")."""
    try:
        import psutil

        t = psutil.cpu_times()
        me = psutil.Process(root_pid)
        own = sum(me.cpu_times()[:4])  # user, system, children_user, children_system
        for child in me.children(recursive=True):
            try:
                c = child.cpu_times()
                own += c.user + c.system
            except psutil.Error:  # exited in between: its time is in children_* soon
                continue
    except Exception:  # noqa: BLE001 - no psutil, no /proc: nothing to say
        return None
    busy = t.user + t.nice + t.system + getattr(t, "irq", 0.0) + getattr(t, "softirq", 0.0)
    return CpuSnapshot(time.monotonic(), busy, getattr(t, "steal", 0.0), own)


def other_load(before: CpuSnapshot | None, after: CpuSnapshot | None) -> dict | None:
    """``{other_processes_cpus, steal_cpus, wall_s}`` between two snapshots: the CPUs
    other processes kept busy, and those the hypervisor took, on average."""
    if before is None or after is None:
        return None
    wall = after.monotonic_s - before.monotonic_s
    if wall <= 0:
        return None
    others = (after.busy_s - before.busy_s) - (after.own_s - before.own_s)
    return {
        "other_processes_cpus": round(max(0.0, others) / wall, 3),
        "steal_cpus": round(max(0.0, after.steal_s - before.steal_s) / wall, 3),
        "wall_s": round(wall, 3),
    }


def contended_cpus(load: Mapping | None) -> float | None:
    """The CPUs others took (other processes plus steal) when that reaches
    :data:`CONTENDED_CPUS`, else None."""
    if not isinstance(load, Mapping):
        return None
    taken = float(load.get("other_processes_cpus") or 0) + float(load.get("steal_cpus") or 0)
    return taken if taken >= CONTENDED_CPUS else None
