"""The study at a glance on the terminal: what `make study` prints after the report.

The same rows as the report's "At a glance" table (:func:`compare.at_a_glance`), as
plain text: a performance engineer sees each point's speed, bound and distance from
its roof without opening the HTML.
"""

from __future__ import annotations

import pandas as pd

from dnnroofline.report import compare, data
from dnnroofline.report.format import fmt_pct, isnum, sig

NOISY = " (noisy)"
HEADER = (
    "env",
    "model",
    "precision",
    "batch",
    "images/s",
    "GFLOP/s",
    "AI FLOP/B",
    "bound",
    "of roof",
    "what would move it",
)


def glance_rows(metrics: pd.DataFrame, points: pd.DataFrame) -> list[tuple[str, ...]]:
    """One row of text cells per roofline point (failed configurations have none)."""
    m, pts = data.prepare_metrics(metrics), data.prepare_points(points)
    rows = []
    for r in compare.at_a_glance(pts, data.throughput_table(m)):
        tp = r["tp"] or {}
        noisy = NOISY if tp.get("noisy") else ""
        ai = f"{sig(r['ai'])} ({r['ai_source']})" if isnum(r["ai"]) else "–"
        bound = r["bound_"] or "–"
        if r["above"]:
            bound += ", ABOVE ROOF"
        rows.append(
            (
                r["env"],
                r["model"],
                r["precision"],
                str(int(r["batch_size"])),
                sig(tp.get("ips_median", r["images_per_s"])) + noisy,
                sig(float(r["attained_flops"]) / 1e9),
                ai,
                bound,
                fmt_pct(r["eff"]),
                r["lever"],
            )
        )
    return rows


def text_table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    """Left-aligned columns, two spaces apart; numbers right-aligned."""
    numeric = {"batch", "images/s", "GFLOP/s", "of roof"}
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows, strict=True)]
    lines = []
    for row in (header, *rows):
        cells = [
            str(c).rjust(w) if h in numeric else str(c).ljust(w)
            for c, w, h in zip(row, widths, header, strict=True)
        ]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def study_summary(metrics: pd.DataFrame, points: pd.DataFrame) -> str:
    """The at-a-glance table, then a line on the runs that failed."""
    rows = glance_rows(metrics, points)
    m = data.prepare_metrics(metrics)
    failed = data.failed_runs(m)
    lines = [text_table(HEADER, rows) if rows else "no roofline point: no configuration ran ok"]
    if any(r[4].endswith(NOISY) for r in rows):
        lines.append(
            f"{NOISY.strip()}: a step-time CV or a spread of images/s over repeats above "
            f"{data.NOISY_CV:.0%}"
        )
    lines.append(
        f"{len(m)} timed runs: {len(m) - len(failed)} ok, {len(failed)} failed"
        + (" (the report's Failed runs table says why)" if len(failed) else "")
    )
    return "\n".join(lines)
