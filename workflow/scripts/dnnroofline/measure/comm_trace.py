"""Traces of data-parallel steps: every rank traced, and the step's communication time.

A data-parallel trace job (``trace_step.py --nproc N``,
:func:`dnnroofline.measure.traces.trace_data_parallel`) launches its ranks the way the
timed runs do (:mod:`dnnroofline.measure.ddp`), and every rank runs the traced step of
:func:`dnnroofline.measure.traces.trace`. Every rank is profiled, not only some: the profiler
slows the rank it runs in, so an unprofiled rank would wait for a profiled one in each
all-reduce and the trace would show waiting that the timed runs never had.

Rank ``i`` writes its own Kineto trace, ``X.rank{i}.json`` for ``--trace-out X.json``
(what Holistic Trace Analysis reads: one file per rank, the rank in its
``distributedInfo``). The job's table JSON names each rank's file, rank number and
figures under ``ranks``, and is the slowest rank's (largest median traced step) at the
top: its ``table`` and ``trace``, as the timed runs' record is the slowest rank's.

Communication time of a step: the union of the intervals in which a collective ran,
clipped to the step's ``ProfilerStep#N`` range, so that overlapping collectives (and
a collective's caller and its worker thread) count once. Which events are collectives
(as a real torch 2.x trace names them):

- host, gloo: ``c10d::allreduce_``, ``c10d::broadcast_``... (the caller's op, on the
  training thread) and ``gloo:all_reduce``, ``gloo:broadcast``... (the transfer itself,
  on gloo's worker threads), and ``record_param_comms`` where the profiler records it;
- CUDA, NCCL: the NCCL kernels (``ncclDevKernel_AllReduce_Sum_f32_RING_LL``...) inside
  the step's GPU range; the host-side ``nccl:all_reduce`` only enqueues them.

DDP all-reduces gradient buckets while backward still runs, so the time is when
communication was in flight, not how long the step waited for it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from dnnroofline.errors import InputError
from dnnroofline.measure.busy_share import covered

STEP_PREFIX = "ProfilerStep#"
#: canonical collective names, keyed by the name lowercased without "_"
_COLLECTIVES = {
    "allreduce": "all_reduce",
    "allgather": "all_gather",
    "allgatherinto": "all_gather",
    "reducescatter": "reduce_scatter",
    "alltoall": "all_to_all",
    "broadcast": "broadcast",
    "reduce": "reduce",
    "gather": "gather",
    "scatter": "scatter",
    "barrier": "barrier",
    "send": "send",
    "recv": "recv",
}
_HOST = re.compile(r"^(?:c10d::|gloo:)_?([a-z_]+?)_?(?:base_?|coalesced_?)?$")
_NCCL_KERNEL = re.compile(r"^nccl(?:Dev)?Kernel_([A-Za-z]+)")
HOST_BASIS = "collectives on the host: c10d ops and gloo's worker threads (gloo)"
DEVICE_BASIS = "NCCL kernels on the GPU"


def collective_name(raw: str) -> str:
    """``all_reduce`` for ``allreduce_``, ``AllReduce``, ``all_reduce``...; the cleaned
    name itself for a collective not in the list."""
    key = raw.lower().replace("_", "")
    return _COLLECTIVES.get(key, raw.strip("_").lower())


def collective_of(event: Mapping[str, Any], device: bool) -> str | None:
    """The collective a Chrome trace event runs, or None when it is no collective.

    On CUDA (``device``) only NCCL kernels count; on a host backend the c10d ops,
    gloo's ranges and ``record_param_comms`` (named by its "Collective name")."""
    name = str(event.get("name", ""))
    if device:
        if event.get("cat") != "kernel":
            return None
        match = _NCCL_KERNEL.match(name)
        return collective_name(match.group(1)) if match else None
    if event.get("cat") not in ("cpu_op", "user_annotation"):
        return None
    if name == "record_param_comms":
        what = (event.get("args") or {}).get("Collective name")
        return collective_name(str(what)) if what else None
    match = _HOST.match(name)
    return collective_name(match.group(1)) if match else None


def step_windows(events: Sequence[Mapping[str, Any]], device: bool) -> list[tuple[float, float]]:
    """The (start, end) of each ``ProfilerStep#N`` range in microseconds, in step order:
    on CUDA the GPU-side range (the step's kernels run after their host range), else
    (or where the GPU range is missing) the host range."""
    ranges: dict[str, dict[str, tuple[float, float]]] = {}
    for e in events:
        name = str(e.get("name", ""))
        if e.get("ph") != "X" or not name.startswith(STEP_PREFIX):
            continue
        side = "gpu" if e.get("cat") == "gpu_user_annotation" else "host"
        ts = float(e["ts"])
        ranges.setdefault(name, {})[side] = (ts, ts + float(e.get("dur", 0.0)))
    if not ranges:
        raise InputError(f"no {STEP_PREFIX}N range in the trace: not a trace of traced steps")
    order = sorted(ranges, key=lambda n: int(n[len(STEP_PREFIX) :] or 0))
    pick = ("gpu", "host") if device else ("host",)
    return [next(ranges[n][s] for s in pick if s in ranges[n]) for n in order]


def communication(
    trace_doc: Mapping[str, Any], traced_s: float, device: bool = False
) -> dict[str, Any]:
    """The communication of the traced steps in a Chrome trace (a rank's Kineto trace).

    ``traced_s``: the sum of the traced step times, the basis of the ops table's
    ``share_of_step``. Returns the union time in collectives within the steps (total
    and per step), its share, and per collective its union time and calls (the
    collectives' executors: gloo's ranges, NCCL kernels).
    """
    if not traced_s > 0:
        raise InputError(f"traced time {traced_s!r} s: must be > 0")
    events = [e for e in trace_doc.get("traceEvents") or [] if isinstance(e, Mapping)]
    windows = step_windows(events, device)
    found: list[tuple[str, str, float, float]] = []
    for e in events:
        what = collective_of(e, device) if e.get("ph") == "X" else None
        if what is not None:
            ts = float(e["ts"])
            found.append((what, str(e["name"]), ts, ts + float(e.get("dur", 0.0))))

    def clipped(which: Iterable[tuple[str, str, float, float]], a: float, b: float) -> list:
        return [(max(s, a), min(t, b)) for _, _, s, t in which if s < b and t > a]

    by_step = [covered(clipped(found, a, b)) / 1e6 for a, b in windows]
    total = sum(by_step)
    steps = len(windows)
    rows = []
    for what in sorted({f[0] for f in found}):
        mine = [f for f in found if f[0] == what]
        time_s = sum(covered(clipped(mine, a, b)) / 1e6 for a, b in windows)
        executors = [f for f in mine if device or f[1].startswith("gloo:")] or mine
        calls = sum(1 for _, _, s, t in executors if any(s < b and t > a for a, b in windows))
        rows.append(
            {
                "name": what,
                "calls": calls,
                "calls_per_step": calls / steps,
                "per_step_s": round(time_s / steps, 9),
                "share_of_step": round(time_s / traced_s, 6),
            }
        )
    rows.sort(key=lambda r: (-r["per_step_s"], r["name"]))
    return {
        "basis": DEVICE_BASIS if device else HOST_BASIS,
        "steps": steps,
        "total_s": round(total, 9),
        "per_step_s": round(total / steps, 9),
        "by_step_s": [round(s, 9) for s in by_step],
        "share_of_step": round(total / traced_s, 6),
        "collectives": rows,
        "events": sorted({f[1] for f in found}),
    }


def rank_trace_path(trace_out: str, rank: int) -> str:
    """Rank ``rank``'s trace file for the job's ``--trace-out``: X.json -> X.rank{i}.json."""
    path = Path(trace_out)
    stem = path.name[: -len(".json")] if path.name.endswith(".json") else path.name
    return str(path.with_name(f"{stem}.rank{rank}.json"))


# --------------------------------------------------------------------------- the trace job

#: the keys of a rank's trace record that the job's table JSON keeps per rank
RANK_KEYS = ("trace", "table", "busy")


def data_parallel_record(
    merged: Mapping[str, Any], steps: int, trace_out: str, table_out: str
) -> dict[str, Any]:
    """The job's table JSON from ddp's merged record of the ranks (with RANK_KEYS).

    Every rank entry gets its ``trace`` (a rank without a record, its path and 0 bytes)
    with ``path_from_table``: where the report finds the file from the table's folder.
    At the top: ``kind``, and the ``trace``, ``table`` and ``busy`` of the slowest rank
    (the trace of the failed rank, or rank 0, when the job failed), named by
    ``traced_rank``.
    """
    record = dict(merged)
    table_dir = str(Path(table_out).parent)
    ranks = []
    for entry in merged["ranks"]:
        path = rank_trace_path(trace_out, entry["rank"])
        trace = dict(entry.get("trace") or {"file": path, "bytes": 0, "steps": steps})
        trace["path_from_table"] = os.path.relpath(path, table_dir)
        ranks.append(dict(entry, trace=trace))
    ok = merged.get("status") == "ok"
    shown = merged.get("slowest_rank") if ok else merged.get("failed_rank")
    shown = int(shown or 0)
    record.update(
        kind="trace",
        ranks=ranks,
        traced_rank=shown,
        trace=dict(ranks[shown]["trace"], rank=shown),
        table=ranks[shown].get("table") if ok else None,
        busy=ranks[shown].get("busy") if ok else None,
    )
    return record


def communication_rows(comm: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """The CSV rows of a table's ``communication``: all collectives (their union, calls
    summed), then each collective, ranked; none for a single-process trace."""
    if not comm:
        return []
    steps = comm["steps"]
    calls = sum(r["calls"] for r in comm["collectives"])
    total = {
        "name": "all collectives",
        "calls": calls,
        "calls_per_step": calls / steps,
        "per_step_s": comm["per_step_s"],
        "share_of_step": comm["share_of_step"],
    }
    return [dict(total, rank=0)] + [
        dict(r, rank=i) for i, r in enumerate(comm["collectives"], start=1)
    ]
