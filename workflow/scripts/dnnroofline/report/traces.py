"""The traces page: where each config's step time goes.

Per (env, model, precision, batch): the traced steps against the untraced median of the
timed runs (the profiler's own cost), the top operators (self time, share of the step,
calls) and on GPUs the top kernels, and a link to the trace file. A data-parallel config
has a trace per rank: each rank's communication time and share, the slowest rank's table.

Written by its own rule (``trace_section``, not :data:`dnnroofline.report.SECTIONS`), so
that ``traces.enabled: false`` drops the page with them. (roofline_points.csv reads each
trace's ``busy`` block, so with traces on, the points wait for them.)

The link is a path relative to the page, not an embedded copy: a trace is MBs to tens of
MBs, and ``snakemake --report`` would inline every one into report.html as base64. The
page names each file's path too, since a page embedded in report.html cannot follow a
relative link.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from dnnroofline.estimate.roofline import HOST_BOUND_BELOW
from dnnroofline.report import data
from dnnroofline.report.render import section

PERFETTO = "https://ui.perfetto.dev"


def untraced_medians(metrics: pd.DataFrame | None) -> dict[tuple[str, str, str, int], float]:
    """Median over the ok timed runs of their median step time, per config."""
    ok = data.ok_runs(metrics)
    if ok.empty:
        return {}
    med = ok.groupby(data.GROUP)["step_median_s"].median()
    return {(e, m, p, int(b)): float(v) for (e, m, p, b), v in med.items() if v > 0}


def entry(doc: Mapping[str, Any], table_path: str, out_dir: str, untraced: Mapping) -> dict:
    """One config of the page, from its table JSON at ``table_path``; the link to its
    trace is relative to ``out_dir``, the page's folder (both paths from one folder)."""
    cfg = doc.get("config") or {}
    trace = doc.get("trace") or {}
    row = {
        "env": str(doc.get("env")),
        "model": str(cfg.get("arch")),
        "precision": str(cfg.get("precision")),
        "batch_size": int(cfg.get("batch_size") or 0),
    }
    trace_path = located(trace, table_path)
    traced = (doc.get("step_time_s") or {}).get("median")
    base = untraced.get(tuple(row.values()))
    table = doc.get("table") or {}
    return dict(
        row,
        label=data.label(row),
        status=doc.get("status"),
        message=doc.get("message"),
        steps=trace.get("steps"),
        traced_median_s=traced,
        untraced_median_s=base,
        overhead=traced / base if traced and base else None,
        trace_path=str(trace_path),
        trace_href=os.path.relpath(trace_path, out_dir),
        trace_bytes=trace.get("bytes"),
        on_device=table.get("basis") == "self_device_s",
        ops=table.get("ops") or [],
        kernels=table.get("kernels") or [],
        coverage=table.get("coverage") or {},
        distinct_ops=(table.get("distinct") or {}).get("ops", 0),
        busy=busy_facts(doc.get("busy"), base),
        communication=table.get("communication"),
        traced_rank=doc.get("traced_rank"),
        ranks=rank_rows(doc, table_path, out_dir),
    )


def busy_facts(busy: Mapping[str, Any] | None, untraced_s: float | None) -> dict | None:
    """The trace's busy time per step (dnnroofline.measure.busy_share), the point's kernel-busy
    share it gives (over the timed runs' median, as roofline_points.csv has it), and what
    the idle device waited on; None for a trace without it."""
    if not isinstance(busy, Mapping) or not isinstance(busy.get("busy_s_per_step"), float):
        return None
    per_step = busy["busy_s_per_step"]
    share = per_step / untraced_s if untraced_s else None
    return {
        "cpu": busy.get("basis") == "trace_cpu_ops",
        "per_step_s": per_step,
        "share": share,
        "host": share is not None and share < HOST_BOUND_BELOW,
        "cause": busy.get("cause"),
    }


def located(trace: Mapping[str, Any], table_path: str) -> Path:
    """A trace file from its table's folder, whatever folder the job ran from: by its
    ``path_from_table`` (a data-parallel rank's, in the ranks' folder), else next to it."""
    relative = trace.get("path_from_table") or Path(str(trace.get("file", ""))).name
    return Path(table_path).parent / relative


def rank_rows(doc: Mapping[str, Any], table_path: str, out_dir: str) -> list[dict]:
    """Per rank of a data-parallel trace (none for one process): its traced median step,
    its communication per step and share, and its trace file; the rank is the JSON's."""
    rows = []
    for r in doc.get("ranks") or []:
        trace = r.get("trace") or {}
        path = located(trace, table_path)
        comm = (r.get("table") or {}).get("communication") or {}
        rows.append(
            {
                "rank": r.get("rank"),
                "status": r.get("status"),
                "traced_median_s": (r.get("step_time_s") or {}).get("median"),
                "comm_per_step_s": comm.get("per_step_s"),
                "comm_share": comm.get("share_of_step"),
                "trace_path": str(path),
                "trace_href": os.path.relpath(path, out_dir),
                "trace_bytes": trace.get("bytes"),
            }
        )
    return rows


def facts(
    tables: Iterable[tuple[str, Mapping[str, Any]]], metrics: pd.DataFrame | None, out_dir: str
) -> dict:
    """``tables``: (path, table JSON) of each trace job; ``metrics``: the timed runs."""
    untraced = untraced_medians(metrics)
    return {
        "entries": [entry(doc, path, out_dir, untraced) for path, doc in tables],
        "perfetto": PERFETTO,
    }


traces_section = section("traces.html", facts)
