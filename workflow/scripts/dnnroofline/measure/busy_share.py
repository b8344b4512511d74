"""Where the step waits: the share of a training step in which the device runs work.

A roofline point's bound says what limits its kernels. A step whose device sits idle
much of the time is limited by the host instead (Python, dispatch, launches, a sync that
drains the queue), whatever its AI says. This module gives, per point:

- ``kernel_busy_share`` = device-busy time per step / the timed runs' median step;
- ``kernel_time_source``, where the busy time comes from:

  - ``trace``: a CUDA torch.profiler (Kineto) trace of the step (``traces.py``): the
    union of its device activities (kernels, memcpys, memsets), so kernels that overlap on
    several streams count once. The denominator is the *untraced* median: the profiler
    slows the host, not the kernels, so the traced steps' own times would understate the
    share.
  - ``ncu_kernel_pass``: no trace; the sum of the ncu kernel pass's per-kernel
    ``gpu__time_duration``. The step pass (app-range replay) only has the range's duration,
    host gaps included, so it is no kernel time. Kernel replay runs each kernel alone with
    flushed caches, so the sum is an *upper bound* on the step's kernel time (the H100
    captures: resnet18 fp32 sums 47.7 ms against a 45.2 ms step, a share of 1.06), and the
    share an upper bound too: conservative for a ``host`` verdict. The share is not
    clipped at 1: above 1 shows that bound at work. memcpys and memsets are not replayed.
  - ``trace_cpu_ops``: a CPU trace: the union of the aten operators' spans inside the
    step ranges, on every thread. The rest of the step is framework overhead (Python, the
    autograd engine between ops, the optimizer's loop), the CPU's form of a device
    waiting on its host; so a CPU point gets ``host`` under the same threshold. Not *leaf*
    operators: the math ops call ``aten::empty`` and views themselves, so leaves are
    mostly those (a resnet18 CPU trace: leaves 16% of the step, aten ops 94%). An op's
    span holds its own dispatch, so this share is an upper bound on time in the math.

- ``host_wait_cause``: what the trace shows the idle device waiting on (the idle gaps
  that follow a host sync, named by the operators around it, and the gaps where the host
  launched slower than the kernels ran); ``not seen (no trace)`` for an ncu share.

Why not HolisticTraceAnalysis (``holistictraceanalysis`` on PyPI), which computes a
temporal breakdown and idle-time causes from Kineto traces: its "idle" is measured
between a rank's first and last kernel, not against the step time the roofline uses; it
needs GPU kernels, so CPU traces get nothing; it reads whole trace folders of ranks; and
0.5.0 requires jupyterlab, plotly and pytest at run time, a large tree for two
interval sums. Its definitions are kept: merged kernel intervals (``merge_kernel_intervals``)
and a gap is a host wait when the next kernel's launch call started after the gap began.

Pure functions over the Chrome trace-event JSON; times in the trace are microseconds.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from dnnroofline.errors import InputError

#: Trace categories of device work (Kineto's names).
DEVICE_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
#: Host calls that block until the device has drained: the device idles after them.
SYNC_CALLS = (
    "cudaStreamSynchronize",
    "cudaDeviceSynchronize",
    "cudaEventSynchronize",
    "cudaMemcpy",
    "cuStreamSynchronize",
    "cuCtxSynchronize",
)
STEP_PREFIX = "ProfilerStep#"
NO_TRACE_CAUSE = "not seen (no trace)"
SOURCES = ("trace", "ncu_kernel_pass", "trace_cpu_ops")
_US = 1e-6


def _spans(events: Iterable[Mapping[str, Any]]) -> list[tuple[float, float]]:
    out = []
    for e in events:
        ts, dur = e.get("ts"), e.get("dur")
        if isinstance(ts, (int, float)) and isinstance(dur, (int, float)) and dur >= 0:
            out.append((float(ts), float(ts) + float(dur)))
    return out


def merge_intervals(spans: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """Sorted, disjoint (start, end) intervals covering ``spans``: overlaps count once."""
    merged: list[list[float]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(a, b) for a, b in merged]


def covered(spans: Iterable[tuple[float, float]]) -> float:
    """Length of the union of ``spans``."""
    return sum(b - a for a, b in merge_intervals(spans))


def _events(trace: Mapping[str, Any], where: str) -> list[Mapping[str, Any]]:
    events = trace.get("traceEvents") if isinstance(trace, Mapping) else None
    if not isinstance(events, list):
        raise InputError(f"{where}: not a Chrome trace (no 'traceEvents' list)")
    return [e for e in events if isinstance(e, Mapping) and e.get("ph") == "X"]


def _steps(events: list[Mapping[str, Any]], where: str) -> list[tuple[float, float]]:
    steps = [
        e
        for e in events
        if str(e.get("name", "")).startswith(STEP_PREFIX) and e.get("cat") != "gpu_user_annotation"
    ]
    if not steps:
        raise InputError(f"{where}: no {STEP_PREFIX}N step range in the trace")
    return _spans(steps)


def aten_ops(events: list[Mapping[str, Any]]) -> list[tuple[float, float]]:
    """Spans of the aten operators (``cpu_op`` events named ``aten::*``), nested or not."""
    return _spans(
        e
        for e in events
        if e.get("cat") == "cpu_op" and str(e.get("name", "")).startswith("aten::")
    )


def _clip(spans: list[tuple[float, float]], windows: list[tuple[float, float]]) -> list:
    out = []
    for a, b in spans:
        for lo, hi in windows:
            if a < hi and b > lo:
                out.append((max(a, lo), min(b, hi)))
    return out


def _gaps(busy: list[tuple[float, float]]) -> list[tuple[float, float]]:
    return [(busy[i][1], busy[i + 1][0]) for i in range(len(busy) - 1)]


def _enclosing_ops(sync: Mapping[str, Any], events: list[Mapping[str, Any]]) -> str:
    """``outer > ... > inner`` names of the operators (and user ranges) around a host call
    on its thread, the step range left out."""
    ts, end = float(sync["ts"]), float(sync["ts"]) + float(sync.get("dur") or 0)
    around = [
        e
        for e in events
        if e.get("cat") in ("cpu_op", "user_annotation")
        and e.get("tid") == sync.get("tid")
        and not str(e.get("name", "")).startswith(STEP_PREFIX)
        and float(e["ts"]) <= ts
        and float(e["ts"]) + float(e.get("dur") or 0) >= end
    ]
    around.sort(key=lambda e: (float(e["ts"]), -float(e.get("dur") or 0)))
    return " > ".join(str(e["name"]) for e in around) or "the host"


def idle_causes(events: list[Mapping[str, Any]]) -> dict[str, float]:
    """Idle device time (µs) between device activities, by what the host was doing.

    A gap in which a sync call returned is the sync's: the device drained while the host
    waited, then idled until the host launched again (named ``after <ops> (<call>)``). Of
    the other gaps, one whose next activity was launched after the gap began is a host
    wait (``host launching slower than the kernels run``, HolisticTraceAnalysis's
    definition); in the rest the next work was already queued (launch latency, a wait on
    another stream).
    """
    device = [e for e in events if e.get("cat") in DEVICE_CATEGORIES]
    busy = merge_intervals(_spans(device))
    runtime = [e for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")]
    launch_at = {
        (e.get("args") or {}).get("correlation"): float(e["ts"])
        for e in runtime
        if (e.get("args") or {}).get("correlation") is not None
    }
    first_started = {}  # the device activity that starts at each start time (first one)
    for e in sorted(device, key=lambda e: float(e["ts"])):
        first_started.setdefault(float(e["ts"]), e)
    syncs = sorted(
        (
            e
            for e in runtime
            if e.get("name") in SYNC_CALLS and isinstance(e.get("ts"), (int, float))
        ),
        key=lambda e: float(e["ts"]),
    )
    causes: dict[str, float] = defaultdict(float)
    for lo, hi in _gaps(busy):
        sync = next(
            (s for s in syncs if lo <= float(s["ts"]) + float(s.get("dur") or 0) <= hi), None
        )
        if sync is not None:
            causes[f"after {_enclosing_ops(sync, events)} ({sync['name']})"] += hi - lo
            continue
        nxt = first_started.get(hi)
        corr = ((nxt or {}).get("args") or {}).get("correlation")
        launched = launch_at.get(corr)
        if launched is not None and launched > lo:
            causes["host launching slower than the kernels run"] += hi - lo
        else:
            causes["with work queued (launch latency, waits between streams)"] += hi - lo
    return dict(causes)


def describe_causes(causes: Mapping[str, float]) -> str | None:
    """``N% <cause>; ...`` of the idle gaps, largest first; None when there were none."""
    total = sum(causes.values())
    if total <= 0:
        return None
    ranked = sorted(causes.items(), key=lambda kv: (-kv[1], kv[0]))
    return "; ".join(f"{v / total:.0%} of idle gaps {k}" for k, v in ranked if v / total >= 0.01)


def trace_summary(trace: Mapping[str, Any], cuda: bool, where: str = "trace") -> dict:
    """What a trace says about the busy share: ``basis`` (``trace`` or ``trace_cpu_ops``),
    ``steps``, ``busy_s_per_step`` and ``cause``.

    CUDA: the device activities' union over the traced steps (the profiler runs only
    around the timed steps, each of which starts and ends with a CUDA event, so every
    device activity in the trace is a traced step's). CPU: the aten operators' union
    inside the step ranges.
    """
    events = _events(trace, where)
    steps = _steps(events, where)
    if cuda:
        device = _spans(e for e in events if e.get("cat") in DEVICE_CATEGORIES)
        if not device:
            raise InputError(f"{where}: a CUDA trace without a kernel, memcpy or memset")
        busy_us = covered(device)
        cause = describe_causes(idle_causes(events))
    else:
        steps_us = covered(steps)
        busy_us = covered(_clip(aten_ops(events), merge_intervals(steps)))
        outside = 1 - busy_us / steps_us if steps_us > 0 else math.nan
        cause = (
            f"{outside:.0%} of the traced steps outside aten operators: framework overhead "
            "(Python, autograd engine, optimizer loop)"
        )
    summary = {
        "basis": "trace" if cuda else "trace_cpu_ops",
        "steps": len(steps),
        "busy_s_per_step": busy_us * _US / len(steps),
        "cause": cause or "no idle gap between device activities",
    }
    if not cuda:
        # The profiler slows host work, operators and overhead alike: a CPU share is
        # taken within the traced steps, never against the untraced step.
        summary["share_of_traced_step"] = busy_us / steps_us if steps_us > 0 else math.nan
    return summary


def ncu_kernel_time_s(ncu: Mapping | None) -> float | None:
    """Sum of the kernel pass's per-kernel durations (``kernel_pass_totals.time_s``, or
    ``totals.time_s`` where provenance says it is the kernel pass's); None without one."""
    if not isinstance(ncu, Mapping) or ncu.get("status", "ok") != "ok":
        return None
    block = ncu.get("kernel_pass_totals")
    if not isinstance(block, Mapping):
        provenance = ncu.get("provenance") or {}
        block = ncu.get("totals") if provenance.get("totals.time_s", "kernel") == "kernel" else None
    value = block.get("time_s") if isinstance(block, Mapping) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        return None
    return float(value)


@dataclass(frozen=True)
class BusyShare:
    share: float  # NaN: no source
    source: str | None
    cause: str | None


def point_busy(
    trace_busy: Mapping | None, ncu: Mapping | None, step_median_s: float, where: str = "trace"
) -> BusyShare:
    """A point's busy share: from its trace summary (``trace_summary``) where there is one,
    else from its ncu capture's kernel pass; NaN and no source otherwise."""
    if isinstance(trace_busy, Mapping):
        per_step = trace_busy.get("busy_s_per_step")
        basis = trace_busy.get("basis")
        if basis not in SOURCES or not isinstance(per_step, (int, float)) or per_step < 0:
            raise InputError(
                f"{where}: busy block needs basis and busy_s_per_step, got {trace_busy!r}"
            )
        traced_share = trace_busy.get("share_of_traced_step")
        if basis == "trace_cpu_ops" and isinstance(traced_share, (int, float)):
            return BusyShare(float(traced_share), basis, trace_busy.get("cause"))
        return BusyShare(per_step / step_median_s, basis, trace_busy.get("cause"))
    kernel_s = ncu_kernel_time_s(ncu)
    if kernel_s is not None:
        return BusyShare(kernel_s / step_median_s, "ncu_kernel_pass", NO_TRACE_CAUSE)
    return BusyShare(math.nan, None, None)
