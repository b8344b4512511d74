"""The report page of the traces: where each config's step time goes.

Per (env, model, precision, batch): the traced steps against the untraced median of the
timed runs (the profiler's own cost), the top operators (self time, share of the step,
calls) and on GPUs the top kernels, and a link to the trace file.

The link is a path relative to the page, not an embedded copy: a trace is MBs to tens of
MBs, and ``snakemake --report`` would inline every one into report.html as base64. The
page names the file's path too, since a page embedded in report.html cannot follow a
relative link.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from dnnroofline.analysis import (
    Raw,
    _label,
    esc,
    fmt_bytes,
    fmt_pct,
    fmt_time,
    ok_runs,
    page,
    table,
)
from dnnroofline.errors import InputError
from dnnroofline.io import read_json

PAGE_TITLE = "Where the step's time goes (traces)"
PERFETTO = "https://ui.perfetto.dev"


def read_table(path: str) -> dict[str, Any]:
    """A table JSON of the trace job; InputError naming the file otherwise."""
    doc = read_json(path)
    if not isinstance(doc, dict) or doc.get("kind") != "trace" or "status" not in doc:
        raise InputError(f"{path}: not a trace table (no 'kind': 'trace' and 'status')")
    return doc


def untraced_medians(metrics: pd.DataFrame | None) -> dict[tuple[str, str, str, int], float]:
    """Median over the ok timed runs of their median step time, per config."""
    ok = ok_runs(metrics)
    if ok.empty:
        return {}
    med = ok.groupby(["env", "model", "precision", "batch_size"])["step_median_s"].median()
    return {(e, m, p, int(b)): float(v) for (e, m, p, b), v in med.items() if v > 0}


def entry(doc: Mapping[str, Any], table_path: str, out_dir: str, untraced: Mapping) -> dict:
    """One config of the page, from its table JSON at ``table_path``; the link to its
    trace is relative to ``out_dir``, the page's folder (both paths from one folder)."""
    cfg = doc.get("config") or {}
    key = (str(doc.get("env")), str(cfg.get("arch")), str(cfg.get("precision")))
    batch = int(cfg.get("batch_size") or 0)
    trace = doc.get("trace") or {}
    # the trace lies next to its table, whatever folder the job ran from
    trace_path = Path(table_path).parent / Path(str(trace.get("file", ""))).name
    steps = doc.get("step_time_s") or {}
    traced = steps.get("median")
    base = untraced.get((*key, batch))
    return {
        "env": key[0],
        "model": key[1],
        "precision": key[2],
        "batch_size": batch,
        "status": doc.get("status"),
        "message": doc.get("message"),
        "steps": trace.get("steps"),
        "traced_median_s": traced,
        "untraced_median_s": base,
        "overhead": traced / base if traced and base else None,
        "trace_path": str(trace_path),
        "trace_href": os.path.relpath(trace_path, out_dir),
        "trace_bytes": trace.get("bytes"),
        "table": doc.get("table"),
        "device": (doc.get("config") or {}).get("backend"),
    }


def _share_bar(share: Any) -> Raw:
    width = max(0.0, min(1.0, float(share or 0))) * 120
    return Raw(
        f'<svg width="122" height="10" aria-hidden="true"><rect width="{width:.1f}" '
        'height="10" fill="#4c78a8"/></svg>'
    )


def _rows_table(rows: Sequence[Mapping], kernel: bool, basis: str) -> str:
    what = "kernel" if kernel else "operator"
    time_head = "GPU time / step" if kernel or basis == "self_device_s" else "self time / step"
    return table(
        ["#", what, "calls / step", time_head, "share of step", ""],
        [
            [
                r["rank"],
                Raw(f"<code>{esc(r['name'])}</code>"),
                f"{r['calls_per_step']:g}",
                fmt_time(r["per_step_s"]),
                fmt_pct(r["share_of_step"]),
                _share_bar(r["share_of_step"]),
            ]
            for r in rows
        ],
        num_cols=(0, 2, 3, 4),
    )


def _overhead_txt(e: Mapping) -> str:
    if e["overhead"] is None:
        return "no timed run to compare with"
    return (
        f"traced median {fmt_time(e['traced_median_s'])} against the timed runs' "
        f"{fmt_time(e['untraced_median_s'])}: {e['overhead']:.2f}× under the profiler"
    )


def config_html(e: Mapping) -> str:
    head = f"<h3>{esc(_label(e))}</h3>"
    link = (
        f'<p>Trace: <a href="{esc(e["trace_href"])}"><code>{esc(e["trace_path"])}</code></a> '
        f"({fmt_bytes(e['trace_bytes'])}, {e['steps']} steps)</p>"
    )
    if e["status"] != "ok":
        return (
            f'{head}<div class="warn">The trace job ended with status '
            f"<strong>{esc(e['status'])}</strong>: {esc(e['message'])}</div>"
        )
    t = e["table"] or {}
    basis = t.get("basis", "self_cpu_s")
    cover = t.get("coverage") or {}
    parts = [head, link, f"<p>{esc(_overhead_txt(e))}.</p>"]
    what = "GPU time of the kernels each op launched" if basis == "self_device_s" else "self time"
    parts.append(
        f"<p>Top operators by {what} ({fmt_pct(cover.get('ops'))} of the traced step time "
        f"is in the {t.get('distinct', {}).get('ops', 0)} distinct operators; the rest is "
        "Python and the step's own bookkeeping).</p>"
    )
    parts.append(_rows_table(t.get("ops") or [], False, basis))
    if t.get("kernels"):
        parts.append(
            f"<p>Top kernels by GPU time (the GPU was busy for {fmt_pct(cover.get('kernels'))} "
            "of the traced step time).</p>"
        )
        parts.append(_rows_table(t["kernels"], True, basis))
    return "\n".join(parts)


def _summary_table(entries: Sequence[Mapping]) -> str:
    rows = []
    for e in entries:
        top = ((e["table"] or {}).get("ops") or [{}])[0]
        rows.append(
            [
                _label(e),
                e["status"],
                fmt_time(e["traced_median_s"]),
                fmt_time(e["untraced_median_s"]),
                "–" if e["overhead"] is None else f"{e['overhead']:.2f}×",
                Raw(f"<code>{esc(top.get('name', '–'))}</code>"),
                fmt_pct(top.get("share_of_step")),
            ]
        )
    return table(
        [
            "config",
            "status",
            "traced step (median)",
            "timed runs (median)",
            "traced / untraced",
            "top operator",
            "its share",
        ],
        rows,
        num_cols=(2, 3, 4, 6),
    )


def traces_page(entries: Sequence[Mapping]) -> str:
    intro = (
        "<p>One torch.profiler (Kineto) trace per configuration: the timed runs' own step, "
        "traced for a few steps after the same warm-up, in a job of its own (never inside a "
        "timed run, and like every measurement never beside another). Each step is a "
        "<code>ProfilerStep#N</code> range. Open a trace in "
        f'<a href="{PERFETTO}">Perfetto</a> (Open trace file) or <code>chrome://tracing</code>. '
        "The links work from <code>results/report_sections/traces.html</code>; inside the "
        "single-file report open the file by its path.</p>"
        "<p>Traced step times are not measurements: the profiler costs time, which the "
        "<em>traced / untraced</em> ratio shows. The shares are of the traced step time.</p>"
    )
    if not entries:
        return page(PAGE_TITLE, intro + "<p>No traces in this study.</p>")
    body = [intro, _summary_table(entries)] + [config_html(e) for e in entries]
    return page(PAGE_TITLE, "\n".join(body))
