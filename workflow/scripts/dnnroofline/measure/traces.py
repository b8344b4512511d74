"""Where the step's time goes: a torch.profiler (Kineto) trace of a few steps after warm-up.

The trace job runs the timed runs' own step (``dnnroofline.measure.train``: same arguments,
``build`` and ``timed_loop``), with the profiler on for ``--steps`` steps after the
warm-up. It writes:

- the trace, Chrome trace-event JSON (opens in https://ui.perfetto.dev or chrome://tracing),
  each step a ``ProfilerStep#N`` range;
- the top-operators table as JSON (with the run record of the traced steps) and CSV:
  per operator its self time, share of the traced step time and calls; on CUDA also
  the top kernels by GPU time.

The traced steps' times are not measurements (the profiler costs time): the report
sets them against the untraced median of the timed runs to show that overhead.
"""

from __future__ import annotations

import argparse
import csv
import io
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from dnnroofline.errors import InputError
from dnnroofline.io import atomic_path, read_json, write_json_atomic, write_text_atomic
from dnnroofline.measure import ddp, train
from dnnroofline.measure.comm_trace import (
    RANK_KEYS,
    communication,
    communication_rows,
    data_parallel_record,
    rank_trace_path,
)
from dnnroofline.measure.envinfo import cpu_model
from dnnroofline.measure.run_record import new_record
from dnnroofline.measure.train_config import (
    Resolved,
    config_from_args,
    step_arguments,
    validate,
)
from dnnroofline.study.defaults import default

SCHEMA_VERSION = 1
#: the step range put around every traced step (TensorBoard's and Perfetto's convention);
#: key_averages() groups them as "ProfilerStep*"
STEP_PREFIX = "ProfilerStep#"
# config/schema.yaml's traces.steps and traces.top (stated there only)
DEFAULT_STEPS = default("traces.steps")
DEFAULT_TOP = default("traces.top")
CSV_COLUMNS = (
    "kind",
    "rank",
    "name",
    "calls",
    "calls_per_step",
    "self_cpu_s",
    "self_device_s",
    "per_step_s",
    "share_of_step",
    "total_cpu_s",
)


# --------------------------------------------------------------------------- pure table


def event_rows(averages: Iterable[Any]) -> list[dict[str, Any]]:
    """Plain rows from ``profile.key_averages()``: ``kind`` "op" (host side: aten ops,
    autograd nodes, user ranges) or "kernel" (a device activity: kernel, memcpy, memset).
    Times in seconds; the step ranges themselves are left out (they are the step)."""
    rows = []
    for e in averages:
        name = str(e.key)
        if name.startswith(STEP_PREFIX[:-1]):
            continue
        on_device = str(getattr(e, "device_type", "")).endswith(("CUDA", "PrivateUse1"))
        if on_device and getattr(e, "is_user_annotation", False):
            continue  # the device-side copy of a user range, not a kernel
        rows.append(
            {
                "kind": "kernel" if on_device else "op",
                "name": name,
                "calls": int(e.count),
                "self_cpu_s": float(e.self_cpu_time_total) / 1e6,
                "total_cpu_s": float(e.cpu_time_total) / 1e6,
                "self_device_s": float(getattr(e, "self_device_time_total", 0.0)) / 1e6,
            }
        )
    return rows


def _ns(seconds: float) -> float:
    return round(seconds, 9)  # the profiler's resolution: no float noise in the CSV


def top_table(
    rows: Sequence[Mapping[str, Any]],
    traced_s: float,
    steps: int,
    top: int = DEFAULT_TOP,
    device: bool = False,
) -> dict[str, Any]:
    """The top-``top`` operators (and, with ``device``, kernels) of ``steps`` traced steps
    that took ``traced_s`` seconds in all.

    Operators are ranked by self CPU time on a host backend; on a GPU (``device``) by
    the GPU time of the kernels each launched itself (``self_device_s``), since the GPU
    timeline sets the step time there. ``share_of_step`` is that time over ``traced_s``.
    ``coverage`` is the sum over all rows (not only the top ones): on a host backend,
    near 1 when the ops account for the step; on a GPU the kernels' share is how busy
    the GPU was.
    """
    if steps < 1:
        raise InputError(f"steps {steps}: must be >= 1")
    if not traced_s > 0:
        raise InputError(f"traced time {traced_s!r} s: must be > 0")
    basis = "self_device_s" if device else "self_cpu_s"

    def ranked(kind: str, key: str) -> list[dict[str, Any]]:
        chosen = [r for r in rows if r["kind"] == kind and r[key] > 0]
        chosen.sort(key=lambda r: (-r[key], r["name"]))
        out = []
        for rank, r in enumerate(chosen[:top], start=1):
            out.append(
                {
                    "rank": rank,
                    "name": r["name"],
                    "calls": r["calls"],
                    "calls_per_step": r["calls"] / steps,
                    "self_cpu_s": _ns(r["self_cpu_s"]) if kind == "op" else None,
                    "self_device_s": _ns(r["self_device_s"]) if device else None,
                    "per_step_s": _ns(r[key] / steps),
                    "share_of_step": round(r[key] / traced_s, 6),
                    "total_cpu_s": _ns(r["total_cpu_s"]) if kind == "op" else None,
                }
            )
        return out

    ops = [r for r in rows if r["kind"] == "op"]
    kernels = [r for r in rows if r["kind"] == "kernel"]
    return {
        "basis": basis,
        "top": top,
        "ops": ranked("op", basis),
        "kernels": ranked("kernel", "self_device_s") if device else [],
        "coverage": {
            "ops": sum(r[basis] for r in ops) / traced_s,
            "kernels": sum(r["self_device_s"] for r in kernels) / traced_s if device else None,
        },
        "distinct": {"ops": len(ops), "kernels": len(kernels)},
    }


def table_csv(table: Mapping[str, Any]) -> str:
    """The table as CSV text: one row per operator, then per kernel (``kind``); in a
    data-parallel trace then ``communication``: all collectives, then each one."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=CSV_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for kind, key in (("op", "ops"), ("kernel", "kernels")):
        for row in table.get(key) or []:
            writer.writerow({"kind": kind, **{c: row.get(c) for c in CSV_COLUMNS[1:]}})
    for row in communication_rows(table.get("communication")):
        writer.writerow({"kind": "communication", **{c: row.get(c) for c in CSV_COLUMNS[1:]}})
    return buf.getvalue()


# --------------------------------------------------------------------------- the trace job


class Tracer:
    """A train.Instrument: the profiler on around the timed steps of train.run, a
    ``ProfilerStep#N`` range around each step's compute (the batch fetch stays outside)."""

    def __init__(self, backend: str) -> None:
        self.backend = backend
        self.prof: Any = None
        self.active = False
        self.step_no = 0

    def activities(self) -> list[Any]:
        from torch.profiler import ProfilerActivity

        acts = [ProfilerActivity.CPU]
        if self.backend == "cuda":
            acts.append(ProfilerActivity.CUDA)
        return acts

    def __call__(self, setup: train.Setup) -> tuple[Any, Any]:
        from torch.profiler import profile, record_function

        inner = setup.step

        def step(images: Any, labels: Any) -> None:
            if not self.active:  # warm-up: untouched
                inner(images, labels)
                return
            with record_function(f"{STEP_PREFIX}{self.step_no}"):
                inner(images, labels)
            self.step_no += 1

        def start() -> None:
            self.prof = profile(activities=self.activities(), record_shapes=False)
            self.prof.start()
            self.active = True

        def stop() -> None:
            # timed_loop has synchronized the device: every kernel is in the trace
            self.close()

        setup.step = step
        return start, stop

    def close(self) -> None:
        if self.active:
            self.active = False
            self.prof.stop()


def _write_trace(path: str, tracer: Tracer, record: Mapping[str, Any]) -> int:
    """The Chrome trace of the traced steps, atomically; for a failed job a valid,
    empty trace that says why. Returns its size in bytes."""
    if record["status"] == "ok" and tracer.prof is not None:
        with atomic_path(path) as tmp:
            tracer.prof.export_chrome_trace(str(tmp))
            size = tmp.stat().st_size
        return size
    write_json_atomic(
        path,
        {
            "traceEvents": [],
            "otherData": {"status": record["status"], "message": record["message"]},
        },
    )
    return 0


def trace(
    resolved: Resolved,
    trace_out: str,
    top: int = DEFAULT_TOP,
    progress: train.ProgressFn | None = train.progress_to_stderr,
) -> dict[str, Any]:
    """Run the step with the profiler on ``resolved.cfg.iters`` steps after warm-up; write
    the trace; return the record (train.run's, plus ``trace`` and ``table``). A crash or
    OOM is the record's status, as for a timed run."""
    tracer = Tracer(resolved.backend)
    try:
        record = train.run(resolved, progress, instrument=tracer)
    finally:
        tracer.close()
    record["kind"] = "trace"
    steps = resolved.cfg.iters
    size = _write_trace(trace_out, tracer, record)
    record["trace"] = {
        "file": trace_out,
        "bytes": size,
        "steps": steps,
        "activities": ["cpu", "cuda"] if resolved.backend == "cuda" else ["cpu"],
        "step_range": f"{STEP_PREFIX}N (forward, loss, backward, optimizer; not the batch fetch)",
        "note": "the traced steps ran under the profiler: their times are not a measurement",
    }
    record["table"] = record["busy"] = None
    if record["status"] == "ok":
        traced_s = float(sum(record["step_time_s"]["all"]))
        rows = event_rows(tracer.prof.key_averages())
        record["table"] = top_table(rows, traced_s, steps, top, device=resolved.backend == "cuda")
        record["busy"] = _busy(trace_out, resolved.backend == "cuda")
    return record


def _busy(trace_out: str, cuda: bool) -> dict[str, Any]:
    """The trace's kernel-busy time per step and what the idle device waited on
    (:mod:`dnnroofline.measure.busy_share`), read back from the trace just written."""
    from dnnroofline.measure.busy_share import trace_summary

    return trace_summary(read_json(trace_out), cuda, trace_out)


# --------------------------------------------------------------------------- data-parallel

#: the entry script each rank runs (ddp.launch starts it with --rank i)
TRACE_SCRIPT = str(Path(__file__).resolve().parents[2] / "trace_step.py")


def trace_rank(resolved: Any, trace_out: str, top: int, say: Any) -> dict[str, Any]:
    """One rank's traced step (:func:`trace`) into its own trace
    file, and the communication of its steps in its table."""
    path = rank_trace_path(trace_out, resolved.cfg.rank)
    record = trace(resolved, path, top, say)
    if record["status"] == "ok":
        traced_s = float(sum(record["step_time_s"]["all"]))
        record["table"]["communication"] = communication(
            read_json(path), traced_s, device=resolved.backend == "cuda"
        )
    return record


def trace_data_parallel(
    resolved: Any, argv: Sequence[str], trace_out: str, table_out: str, say: Any
) -> dict[str, Any]:
    """The launcher of a data-parallel trace job: every rank traced (``trace_step.py
    --rank i``), then the job's table JSON (:func:`data_parallel_record`). A rank that
    left no trace (killed when a peer failed) gets an empty one that says why."""
    Path(trace_out).parent.mkdir(parents=True, exist_ok=True)
    cfg = resolved.cfg
    merged = ddp.launch(
        new_record(resolved),
        list(argv),
        cfg.nproc,
        resolved.threads,
        say,
        script=TRACE_SCRIPT,
        rank_keys=RANK_KEYS,
    )
    if merged.get("device_name") is None:
        merged["device_name"] = cpu_model() if resolved.backend == "cpu" else None
    for entry in merged["ranks"]:
        path = rank_trace_path(trace_out, entry["rank"])
        if not Path(path).exists():
            why = entry.get("message") or (
                f"stopped before writing its trace ({merged.get('message')})"
            )
            other = {"status": entry.get("status") or "error", "message": why}
            write_json_atomic(path, {"traceEvents": [], "otherData": other})
    return data_parallel_record(merged, cfg.iters, trace_out, table_out)


# --------------------------------------------------------------------------- CLI


def arg_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="trace_step.py",
        description="A torch.profiler trace of a few training steps after warm-up (the timed "
        "runs' step), and its top-operators table.",
    )
    step_arguments(p)
    p.add_argument(
        "--steps",
        dest="iters",
        type=int,
        default=DEFAULT_STEPS,
        help="steps traced after the warm-up (keep it small: the trace grows with it)",
    )
    p.add_argument("--top", type=int, default=DEFAULT_TOP, help="rows per table")
    p.add_argument(
        "--trace-out",
        required=True,
        help="Chrome trace JSON to write (X.json; with --nproc > 1 each rank i writes "
        "X.rank{i}.json)",
    )
    p.add_argument("--table-out", required=True, help="table JSON (with the run record)")
    p.add_argument("--csv-out", required=True, help="table CSV")
    # set by the data-parallel launcher on each rank's command line (dnnroofline.measure.ddp)
    p.add_argument("--rank", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--dist-store", default=None, help=argparse.SUPPRESS)
    p.add_argument("--out", default=None, help=argparse.SUPPRESS)
    p.set_defaults(profile_step=False)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """CLI: 0 when the files were written (status ok, oom or error), 2 for bad input."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = arg_parser().parse_args(argv)
    try:
        if args.iters < 1:
            raise InputError(f"--steps {args.iters}: must be >= 1")
        if args.top < 1:
            raise InputError(f"--top {args.top}: must be >= 1")
        cfg = config_from_args(args)
        resolved = validate(cfg)
        if cfg.nproc > 1:  # every rank traced: dnnroofline.measure.comm_trace
            if cfg.rank is not None:  # one rank, started by the launcher below
                return ddp.rank_main(
                    resolved,
                    args.out,
                    train.progress_to_stderr,
                    lambda r, say: trace_rank(r, args.trace_out, args.top, say),
                )
            record = trace_data_parallel(
                resolved, argv, args.trace_out, args.table_out, train.progress_to_stderr
            )
        else:
            record = trace(resolved, args.trace_out, args.top)
    except InputError as exc:
        print(f"trace_step.py: error: {exc}", file=sys.stderr)
        return 2
    write_text_atomic(args.csv_out, table_csv(record["table"] or {}))
    write_json_atomic(args.table_out, record)
    print(
        f"[trace_step] wrote {record['trace']['file']} ({record['trace']['bytes']} bytes), "
        f"{args.table_out} (status {record['status']})",
        file=sys.stderr,
    )
    return 0
