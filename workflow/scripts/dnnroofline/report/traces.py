"""The traces page: where each config's step time goes.

Per (env, model, precision, batch): the traced steps against the untraced median of the
timed runs (the profiler's own cost), the top operators (self time, share of the step,
calls) and on GPUs the top kernels, and a link to the trace file.

Written by its own rule (``trace_section``, not :data:`dnnroofline.report.SECTIONS`), so
that the other sections never wait for the traces, and ``traces.enabled: false`` drops
the page with them.

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
    # the trace lies next to its table, whatever folder the job ran from
    trace_path = Path(table_path).parent / Path(str(trace.get("file", ""))).name
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
    )


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
