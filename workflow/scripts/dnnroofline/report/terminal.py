"""The study at a glance on the terminal: what `make study` prints after the report.

The same rows as the report's "At a glance" table (:func:`compare.at_a_glance`), as
plain text: a performance engineer sees each point's speed, bound and distance from
its roof without opening the HTML.
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from dnnroofline.aggregate.compare import describe, regressions
from dnnroofline.formatting import fmt_pct, fmt_time, isnum, sig
from dnnroofline.measure import contention
from dnnroofline.perfmodel.scoring import check_summary
from dnnroofline.report import compare, data
from dnnroofline.report.before_after import verdict_rows

NOISY = " (noisy)"
#: The model's table: step time first (the error the check scores), then images/s.
MODEL_HEADER = (
    "env",
    "model",
    "precision",
    "batch",
    "predicted step",
    "measured step",
    "step error",
    "predicted images/s",
    "measured images/s",
    "images/s error",
)
#: The comparison with a baseline (results/compare.csv), slower points first.
COMPARE_HEADER = (
    "verdict",
    "env",
    "model",
    "precision",
    "batch",
    "baseline images/s",
    "images/s",
    "change",
    "95% interval",
    "note",
)
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
    for r in compare.at_a_glance(pts, data.throughput_table(m), data.env_devices(m)):
        tp = r["tp"] or {}
        noisy = NOISY if tp.get("noisy") else ""
        ai = f"{sig(r['ai'])} ({r['ai_source']})" if isnum(r["ai"]) else "–"
        bound = r["bound_"] or "–"
        if bound == "host" and isnum(r.get("kernel_busy_share")):  # how idle the device was
            bound += f" (busy {fmt_pct(r['kernel_busy_share'], 0)})"
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
    numeric = {"batch", "images/s", "GFLOP/s", "of roof", *MODEL_HEADER[4:], *COMPARE_HEADER[5:9]}
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows, strict=True)]
    lines = []
    for row in (header, *rows):
        cells = [
            str(c).rjust(w) if h in numeric else str(c).ljust(w)
            for c, w, h in zip(row, widths, header, strict=True)
        ]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def study_summary(
    metrics: pd.DataFrame,
    points: pd.DataFrame,
    ceilings: Mapping[str, Mapping] | None = None,
    check: pd.DataFrame | None = None,
    comparison: pd.DataFrame | None = None,
    tolerance_pct: float | None = None,
) -> str:
    """The at-a-glance table, then lines on a busy machine (``ceilings``: each env's
    ceilings.json), on the runs that failed, the model's error per point (``check``:
    results/prediction_check.csv, where the study has one), and the comparison with a
    baseline with the regression gate's verdict at ``tolerance_pct`` (``comparison``:
    results/compare.csv, where the study has one)."""
    rows = glance_rows(metrics, points)
    m = data.prepare_metrics(metrics)
    failed = data.failed_runs(m)
    lines = [text_table(HEADER, rows) if rows else "no roofline point: no configuration ran ok"]
    if any(r[4].endswith(NOISY) for r in rows):
        lines.append(
            f"{NOISY.strip()}: a step-time CV or a spread of images/s over repeats above "
            f"{data.NOISY_CV:.0%}"
        )
    lines += busy_machine_lines(data.throughput_table(m), ceilings or {})
    lines.append(
        f"{len(m)} timed runs: {len(m) - len(failed)} ok, {len(failed)} failed"
        + (" (the report's Failed runs table says why)" if len(failed) else "")
    )
    lines += model_error_lines(check)
    lines += compare_lines(comparison, tolerance_pct)
    return "\n".join(lines)


def compare_lines(comparison: pd.DataFrame | None, tolerance_pct: float | None) -> list[str]:
    """The comparison with a baseline (results/compare.csv), slower points first, then
    the regression gate's verdict line at ``tolerance_pct`` (regression_gate.py's rule)."""
    if comparison is None:
        return []
    rows = verdict_rows(comparison)
    if not rows:
        return ["compared with the baseline: no point in common (results/compare_unmatched.csv)"]
    table = [
        (
            str(r["verdict"]).upper() if r["verdict"] == "slower" else str(r["verdict"]),
            str(r["env"]),
            str(r["model"]),
            str(r["precision"]),
            str(int(r["batch"])),
            sig(r["baseline_images_per_s"]),
            sig(r["images_per_s"]),
            signed_pct(r["change_pct"]),
            f"{signed_pct(r['ci_low_pct'])} .. {signed_pct(r['ci_high_pct'])}",
            str(r.get("note") or ""),
        )
        for r in rows
    ]
    counts = {v: sum(r["verdict"] == v for r in rows) for v in ("slower", "faster", "same")}
    lines = [
        "compared with the baseline (results/compare.csv; the report's page says what "
        "else changed):",
        text_table(COMPARE_HEADER, table),
        f"{len(rows)} point(s): {counts['slower']} slower, {counts['faster']} faster, "
        f"{counts['same']} the same within the noise",
    ]
    if tolerance_pct is not None:
        lines.append(gate_line(rows, tolerance_pct))
    return lines


def gate_line(rows: list[dict], tolerance_pct: float) -> str:
    """The regression gate's verdict: pass, or fail with the regressed points."""
    regressed = regressions(rows, tolerance_pct)
    rule = f"slower by more than {tolerance_pct:g}% with an interval below 0"
    if not regressed:
        return f"regression gate (tolerance {tolerance_pct:g}%): PASS, no point {rule}"
    named = "; ".join(describe(r) for r in regressed)
    return (
        f"regression gate (tolerance {tolerance_pct:g}%): FAIL, {len(regressed)} point(s) "
        f"{rule}: {named}"
    )


def model_error_lines(check: pd.DataFrame | None) -> list[str]:
    """The model's error per measured point (results/prediction_check.csv), on step time
    and on images/s, then each method's MAPE over the points in both: the check, every
    time the study is summarized."""
    if check is None or not len(check) or "method" not in check:
        return []
    rows = check.to_dict("records")
    model = [r for r in rows if r["method"] == "model" and isnum(r.get("error_pct"))]
    if not model:
        return ["the model: no measured point checked (results/prediction_check.csv)"]
    table = [
        (
            str(r["env"]),
            str(r["model"]),
            str(r["precision"]),
            str(int(r["batch"])),
            fmt_time(r["predicted_step_s"]),
            fmt_time(r["measured_step_s"]),
            f"{float(r['error_pct']):+.1f}%",
            sig(r["predicted_images_per_s"]),
            sig(r["measured_images_per_s"]),
            signed_pct(r.get("images_per_s_error_pct")),
        )
        for r in model
    ]
    summary = sorted(check_summary(rows), key=lambda s: s["method"] != "model")  # model first
    step = ", ".join(f"{s['method']} {s['mape_pct']:.1f}%" for s in summary)
    ips = ", ".join(f"{s['method']} {signed_pct(s['images_per_s_mape_pct'], '')}" for s in summary)
    energy = [
        f"the model's joules per image: MAPE {s['joules_per_image_mape_pct']:.1f}%, max "
        f"|error| {s['joules_per_image_max_abs_error_pct']:.1f}% over "
        f"{s['joules_per_image_n']} points"
        for s in summary
        if s["method"] == "model" and s["joules_per_image_n"]
    ]
    return [
        "the model's prediction of each point (step time and images/s; no point predicted "
        "from its own runs):",
        text_table(MODEL_HEADER, table),
        f"MAPE over the points, step time: {step}",
        f"MAPE over the points, images/s: {ips}",
        *energy,
    ]


def signed_pct(x: object, sign: str = "+") -> str:
    """``+12.3%`` (``sign`` "": ``12.3%``), or ``–`` for no number."""
    return f"{float(x):{sign}.1f}%" if isnum(x) else "–"


def busy_machine_lines(tp: pd.DataFrame, ceilings: Mapping[str, Mapping]) -> list[str]:
    """What other processes took from the measurements, where it was enough to matter."""
    lines = []
    for env, ceil in sorted(ceilings.items()):
        taken = contention.contended_cpus(ceil.get("other_load"))
        if taken is not None:
            lines.append(
                f"{env}: the ceilings ran while other processes kept {taken:.2f} CPUs busy: "
                "its roofs may be low (points above them); re-run them alone on its machine "
                "(copied results: there, then copy the folder again): snakemake --forcerun ceilings"
            )
    busy = tp[tp["contention_cpus_max"] >= contention.CONTENDED_CPUS] if len(tp) else tp
    if len(busy):
        worst = float(busy["contention_cpus_max"].max())
        lines.append(
            f"{len(busy)} configuration(s) were timed while other processes kept up to "
            f"{worst:.2f} CPUs busy: slower than on a quiet machine"
        )
    return lines
