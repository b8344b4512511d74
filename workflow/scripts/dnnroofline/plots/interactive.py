"""Interactive rooflines: Vega-Lite charts (Altair) in self-contained HTML pages.

Pure logic: DataFrames and dicts in, an Altair chart or an HTML string out; no
file I/O. ``plot_interactive.py`` reads the files and writes the page.

A page holds one layered chart:

- ``roofs``: one compute roof per (env, precision, source), horizontal from its
  ridge point; one memory roof per (env, source), diagonal up to its farthest
  ridge. Measured roofs solid, datasheet roofs dashed (as in the static plots).
- ``ridges``: a diamond at each ridge point.
- ``points``: one mark per roofline point (roofline_points.csv rows with an ok
  run); hovering shows env, model, precision, batch, AI and its source, attained
  GFLOP/s, roof, efficiency, bound and what would move it.
- ``ai_ranges``: a horizontal bar through each point from ``ai_low`` to
  ``ai_high``, its analytic AI range (per-layer traffic model .. minimum bytes).
- ``above_roof``: a red ring around a point above its roof (a bug or a wrong
  peak: flagged, never hidden).
- ``kernels``: one small mark per profiled kernel where parsed ncu JSONs exist
  (AI = kernel FLOPs / kernel DRAM bytes, FLOP/s = kernel FLOPs / kernel time
  under ncu); a checkbox under the chart hides them.

The Vega, Vega-Lite and vega-embed JavaScript is inlined (from vl-convert), so
a page works offline and inside the Snakemake report's iframe. The page renders
with the SVG renderer and sets ``window.rooflineView`` (the Vega view) and
``document.body.dataset.rendered = "true"`` once drawn, so tests and users can
query it: ``rooflineView.data("points")`` returns the point rows.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Mapping

import altair as alt
import numpy as np
import pandas as pd

from dnnroofline.aggregate.metrics import plottable_points
from dnnroofline.errors import InputError
from dnnroofline.model import roofline
from dnnroofline.plots.interactive_labels import (
    BATCH_LABEL_PX,
    HEIGHT,
    LABEL_DX_PX,
    LABEL_FONT_PX,
    WIDTH,
    PixelFrame,
    batch_label_frame,
    layout_roof_labels,
    memory_label_rows,
)
from dnnroofline.plots.roof_labels import compute_roof_labels, memory_roof_labels, si
from dnnroofline.report.compare import short_lever as lever

# a roof label, right-aligned at the chart's right edge, its row's pixel offset ("dy")
LABEL_MARK = dict(
    align="right",
    baseline="middle",
    dx=-LABEL_DX_PX,
    dy=alt.expr("datum.dy"),
    fontSize=LABEL_FONT_PX,
    clip=True,
)
#: Mark names: Vega data sets and SVG groups (``g.{name}_marks``) carry them.
POINTS = "points"
AI_RANGES = "ai_ranges"  # the horizontal bar of each point's analytic AI range
KERNELS = "kernels"
ROOFS = "roofs"
#: Same colours as the static plots (matplotlib tab10), per precision.
PRECISION_COLORS = {
    "fp32": "#1f77b4",
    "tf32": "#2ca02c",
    "amp": "#ff7f0e",
    "fp16": "#ff7f0e",
    "bf16": "#9467bd",
    "fp64": "#8c564b",
}
_SPARE = ["#17becf", "#e377c2", "#7f7f7f", "#bcbd22", "#000000"]
SOURCE_DASH = {"measured": [1, 0], "datasheet": [6, 4]}
SHAPES = ["circle", "square", "triangle-up", "diamond", "triangle-down", "cross", "wedge"]
#: Kernels with fewer FLOPs than this are data movement (copies, fills): no AI to plot.
MIN_KERNEL_FLOP = 1.0


def _isnum(x) -> bool:
    try:
        return x is not None and not isinstance(x, bool) and math.isfinite(float(x))
    except (TypeError, ValueError):
        return False


def _color(precision: str, i: int = 0) -> str:
    return PRECISION_COLORS.get(str(precision).lower(), _SPARE[i % len(_SPARE)])


def _as_bool(v) -> bool:
    if isinstance(v, str):
        return v.strip().lower() in ("true", "1", "yes")
    try:
        return bool(v) and not pd.isna(v)
    except (TypeError, ValueError):
        return bool(v)


# --------------------------------------------------------------------------- data


def env_roofs(env: str, ceilings: Mapping, where: str | None = None):
    """({(precision, source): (value, note)}, {source: (value, note)}) of one env."""
    where = where or f"results/{env}/ceilings.json"
    compute: dict[tuple[str, str], tuple[float, str]] = {}
    memory: dict[str, tuple[float, str]] = {}
    for r in roofline.parse_roofs(dict(ceilings), where):
        if r.kind == "compute":
            k = (r.precision, r.source)
            if r.value > compute.get(k, (0.0, ""))[0]:
                compute[k] = (r.value, r.note)
        elif r.value > memory.get(r.source, (0.0, ""))[0]:
            memory[r.source] = (r.value, r.note)
    if not memory:
        raise InputError(f"{where}: env {env!r} has no memory-bandwidth roof to draw")
    if not compute:
        raise InputError(f"{where}: env {env!r} has no compute roof to draw")
    return compute, memory


def point_frame(
    points: pd.DataFrame, combined: bool, devices: Mapping[str, str] | None = None
) -> pd.DataFrame:
    """Plottable points with the fields the tooltips show (``devices``: each env's device,
    which words the lever)."""
    pts = plottable_points(points.copy()) if len(points) else points.copy()
    out = pd.DataFrame(
        {
            "env": pts.get("env", pd.Series(dtype=str)).astype(str),
            "model": pts.get("model", pd.Series(dtype=str)).astype(str),
            "precision": pts.get("precision", pd.Series(dtype=str)).astype(str),
            "batch": pts.get("batch_size", pd.Series(dtype=float)).astype(int),
        }
    )
    if not len(pts):
        return out.assign(ai=[], flops=[])
    out["ai"] = pts["ai"].astype(float)
    out["ai_source"] = pts["ai_source"].fillna("").astype(str)
    for col in ("ai_low", "ai_high"):  # the analytic AI range (NaN where unknown)
        out[col] = pts[col].astype(float) if col in pts else math.nan
    out["flops"] = pts["attained_flops"].astype(float)
    out["gflops"] = out["flops"] / 1e9
    out["roof_gflops"] = pts["roof_flops"].astype(float) / 1e9
    out["roof_source"] = pts["roof_source"].fillna("").astype(str)
    out["ridge_ai"] = pts["ridge_ai"].astype(float)
    eff = pts["attained_flops"].astype(float) / pts["roof_flops"].astype(float)
    out["efficiency"] = eff.where(np.isfinite(eff), pts["efficiency"].astype(float))
    out["bound"] = pts["bound"].fillna("").astype(str)
    out["images_per_s"] = pts["images_per_s"].astype(float)
    out["above_roof"] = [
        _as_bool(v) or (_isnum(e) and e > 1 + 1e-9)
        for v, e in zip(pts["above_roof"], out["efficiency"], strict=True)
    ]
    devices = devices or {}
    out["lever"] = [
        lever(b, e, a, devices.get(env), prec)
        for b, e, a, env, prec in zip(
            out["bound"],
            out["efficiency"],
            out["above_roof"],
            out["env"],
            out["precision"],
            strict=True,
        )
    ]
    out["series"] = (out["env"] + " · " + out["precision"]) if combined else out["precision"]
    return out.sort_values(["env", "model", "precision", "batch"]).reset_index(drop=True)


def kernel_frame(
    ncu_by_key: Mapping[tuple, Mapping] | None, combined: bool, max_kernels: int | None = None
) -> pd.DataFrame:
    """One row per profiled kernel with FLOPs, DRAM bytes and time (others are skipped).

    ``ncu_by_key`` maps ``(env, model, precision, batch)`` to a parsed ncu JSON.
    The frame's ``attrs["skipped"]`` counts kernels without FLOPs, bytes or time.
    With ``max_kernels`` only the longest-running kernels are kept;
    ``attrs["dropped"]`` counts the others and ``attrs["kept_time_share"]`` is the
    share of the drawable kernels' time that the kept ones cover.
    """
    rows, skipped = [], 0
    for key, doc in sorted((ncu_by_key or {}).items()):
        env, model, prec, batch = key
        kernels = (doc or {}).get("kernels") or []
        total_t = sum(float(k.get("time_s") or 0) for k in kernels if _isnum(k.get("time_s")))
        for k in kernels:
            flop = (k.get("flop") or {}).get("total")
            dram = (k.get("bytes") or {}).get("dram")
            t = k.get("time_s")
            if not (_isnum(flop) and _isnum(dram) and _isnum(t)):
                skipped += 1
                continue
            flop, dram, t = float(flop), float(dram), float(t)
            if flop < MIN_KERNEL_FLOP or dram <= 0 or t <= 0:
                skipped += 1
                continue
            name = str(k.get("name") or k.get("id") or "?")
            rows.append(
                {
                    "env": env,
                    "model": model,
                    "precision": prec,
                    "batch": int(batch),
                    "kernel": name if len(name) <= 90 else name[:87] + "…",
                    "ai": flop / dram,
                    "flops": flop / t,
                    "gflops": flop / t / 1e9,
                    "time_us": t * 1e6,
                    "time_share": t / total_t if total_t > 0 else math.nan,
                    "series": f"{env} · {prec}" if combined else prec,
                }
            )
    df = pd.DataFrame(
        rows,
        columns=[
            "env",
            "model",
            "precision",
            "batch",
            "kernel",
            "ai",
            "flops",
            "gflops",
            "time_us",
            "time_share",
            "series",
        ],
    )
    df.attrs["skipped"] = skipped
    df.attrs["dropped"] = 0
    df.attrs["kept_time_share"] = 1.0
    if max_kernels is not None and len(df) > max_kernels:
        total = df["time_us"].sum()
        kept = df.sort_values("time_us", ascending=False, kind="stable").head(max_kernels)
        kept = kept.sort_index().reset_index(drop=True)
        kept.attrs.update(
            skipped=skipped,
            dropped=len(df) - len(kept),
            kept_time_share=float(kept["time_us"].sum() / total) if total > 0 else 1.0,
        )
        return kept
    return df


def roof_frames(
    ceilings_by_env: Mapping[str, Mapping],
    pts: pd.DataFrame,
    combined: bool,
    sources: Mapping[str, str] | None = None,
):
    """(roof specs, memory specs) to draw, refusing a point without its compute peak."""
    specs, mem = [], {}
    for env in sorted(ceilings_by_env):
        compute, memory = env_roofs(env, ceilings_by_env[env], (sources or {}).get(env))
        env_pts = pts[pts["env"] == env] if len(pts) else pts
        wanted = None
        if combined and len(env_pts):
            wanted = set()
            for p in env_pts["precision"].unique():
                wanted.update(roofline.precision_aliases(p))
        for p in env_pts["precision"].unique() if len(env_pts) else []:
            if not any(cp in roofline.precision_aliases(p) for cp, _ in compute):
                where = (sources or {}).get(env, f"results/{env}/ceilings.json")
                raise InputError(f"{where}: env {env!r} has no compute peak for precision {p!r}")
        for (prec, source), (peak, note) in sorted(compute.items()):
            if wanted is not None and prec not in wanted:
                continue
            msrc = (
                source
                if source in memory
                else next(s for s in roofline.ROOF_SOURCES if s in memory)
            )
            bw, mnote = memory[msrc]
            specs.append(
                {
                    "env": env,
                    "precision": prec,
                    "source": source,
                    "peak": peak,
                    "note": note,
                    "mem_source": msrc,
                    "bw": bw,
                    "ridge": peak / bw,
                }
            )
            mem[(env, msrc)] = (bw, mnote)
    return specs, mem


def _decade_range(values, lo_pad, hi_pad):
    vals = [float(v) for v in values if _isnum(v) and float(v) > 0]
    lo = 10 ** math.floor(math.log10(min(vals) / lo_pad))
    hi = 10 ** math.ceil(math.log10(max(vals) * hi_pad))
    return lo, hi


# --------------------------------------------------------------------------- chart


def roofline_chart(
    points: pd.DataFrame,
    ceilings_by_env: Mapping[str, Mapping],
    ncu_by_key: Mapping[tuple, Mapping] | None = None,
    title: str = "Roofline",
    subtitle: str | None = None,
    ceilings_sources: Mapping[str, str] | None = None,
    max_kernels: int | None = None,
) -> alt.LayerChart:
    """A layered, zoomable roofline of ``points`` over the envs' measured and datasheet roofs."""
    envs = sorted(ceilings_by_env)
    if not envs:
        raise InputError("an interactive roofline needs the ceilings of at least one env")
    combined = len(envs) > 1
    devices = {env: str(ceil.get("device")) for env, ceil in ceilings_by_env.items()}
    pts = point_frame(points, combined, devices)
    stray = sorted(set(pts["env"]) - set(envs)) if len(pts) else []
    if stray:
        raise InputError(f"points of env(s) {stray} but no ceilings given for them")
    kern = kernel_frame(
        {k: v for k, v in (ncu_by_key or {}).items() if k[0] in envs}, combined, max_kernels
    )
    specs, mem = roof_frames(ceilings_by_env, pts, combined, ceilings_sources)

    ridges = [s["ridge"] for s in specs]
    peaks = [s["peak"] for s in specs]
    xs = list(pts["ai"]) + list(kern["ai"]) + ridges
    for col in ("ai_low", "ai_high"):
        if col in pts:
            xs += [v for v in pts[col] if _isnum(v) and v > 0]
    ys = list(pts["flops"]) + list(kern["flops"]) + peaks
    xlo, xhi = _decade_range(xs, 4, 4)
    ylo, yhi = _decade_range(ys + [min(peaks) / 10], 5, 3)

    # one label per distinct roof, placed apart from close roofs' labels (roof_labels);
    # the right edge moves right until the labels clear the points (interactive_labels)
    roof_labels = compute_roof_labels(
        ((s["env"], s["precision"], s["source"], s["peak"], s["ridge"]) for s in specs), combined
    )
    roof_layout = layout_roof_labels(roof_labels, PixelFrame(xlo, xhi, ylo, yhi), pts)
    xhi = roof_layout.xhi
    frame = PixelFrame(xlo, xhi, ylo, yhi)

    # series (colour): the precision, or "env · precision" when several envs share a chart
    # once each: a precision has a measured and a datasheet roof, and Vega pairs the
    # deduplicated domain with the colour list as given, shifting every colour after
    series = [f"{s['env']} · {s['precision']}" if combined else s["precision"] for s in specs]
    series += list(pts.get("series", [])) + list(kern["series"])
    series = list(dict.fromkeys(series))
    if combined:
        scheme = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf"]
        colors = [scheme[i % len(scheme)] for i in range(len(series))]
    else:
        colors = [_color(s, i) for i, s in enumerate(series)]
    color_scale = alt.Scale(domain=series, range=colors)
    color_enc = alt.Color(
        "series:N", scale=color_scale, title="env · precision" if combined else "precision"
    )
    models = sorted(pts["model"].unique()) if len(pts) else []
    shape_scale = alt.Scale(domain=models or ["-"], range=SHAPES[: max(1, len(models))])
    xscale = alt.Scale(type="log", domain=[xlo, xhi], nice=False)
    yscale = alt.Scale(type="log", domain=[ylo, yhi], nice=False)
    x_axis = alt.Axis(title="Arithmetic intensity (FLOP/byte)", format="~g", grid=True)
    y_axis = alt.Axis(title="Attained performance (FLOP/s)", format="~s", grid=True)
    dash = alt.Scale(domain=list(SOURCE_DASH), range=list(SOURCE_DASH.values()))

    # ---- roofs: polylines (x, y) with one id each
    roof_rows, label_rows, ridge_rows = [], [], []
    # memory roofs: one label per distinct roof (roof_labels), written along the
    # diagonals, side by side across them, at the first x where they clear the points
    mem_labels = memory_roof_labels(
        ((env, msrc, bw) for (env, msrc), (bw, _) in sorted(mem.items())), combined
    )
    ends = {
        (msrc, bw): max(
            s["ridge"] for s in specs if s["env"] in lab.envs and s["mem_source"] == msrc
        )
        for (msrc, bw), lab in mem_labels.items()
    }
    mem_label_rows, mem_label_boxes = memory_label_rows(mem_labels, ends, frame, pts)
    for (env, msrc), (bw, note) in sorted(mem.items()):
        x_end = max(s["ridge"] for s in specs if s["env"] == env and s["mem_source"] == msrc)
        x0 = max(xlo, ylo / bw)
        rid = f"{env} memory {msrc}"
        label = f"{env + ' ' if combined else ''}memory {msrc}: {si(bw, 'B/s')}"
        for x in (x0, x_end):
            roof_rows.append(
                {
                    "roof_id": rid,
                    "kind": "memory",
                    "series": "memory",
                    "source": msrc,
                    "x": x,
                    "y": x * bw,
                    "roof": label,
                    "how": note or "–",
                }
            )
    for s in specs:
        ser = f"{s['env']} · {s['precision']}" if combined else s["precision"]
        rid = f"{s['env']} compute {s['precision']} {s['source']}"
        label = (
            f"{s['env'] + ' ' if combined else ''}{s['precision']} {s['source']}: "
            f"{si(s['peak'], 'FLOP/s')}"
        )
        for x in (s["ridge"], xhi):
            roof_rows.append(
                {
                    "roof_id": rid,
                    "kind": "compute",
                    "series": ser,
                    "source": s["source"],
                    "x": x,
                    "y": s["peak"],
                    "roof": label,
                    "how": s["note"] or "–",
                }
            )
        ridge_rows.append(
            {
                "x": s["ridge"],
                "y": s["peak"],
                "series": ser,
                "source": s["source"],
                "ridge": f"{s['ridge']:.3g} FLOP/B",
                "roof": label,
            }
        )
    for ((prec, _source, peak), lab), dy in zip(roof_labels.items(), roof_layout.dys, strict=True):
        label_rows.append(
            {
                "x": xhi,
                "y": peak,
                "text": lab.text,
                "series": f"{lab.envs[0]} · {prec}" if combined else prec,
                "shared": len(lab.envs) > 1,
                "dy": -dy,  # Vega's y grows downwards
            }
        )
    roofs_df = pd.DataFrame(roof_rows)
    labels = pd.DataFrame(label_rows, columns=["x", "y", "text", "series", "shared", "dy"])
    label_at = {"x": "x:Q", "y": "y:Q", "text": "text:N"}
    compute_roofs = roofs_df[roofs_df["kind"] == "compute"]
    memory_roofs = roofs_df[roofs_df["kind"] == "memory"]

    roof_tip = [alt.Tooltip("roof:N", title="roof"), alt.Tooltip("how:N", title="method / source")]
    layers = [
        alt.Chart(memory_roofs, name="memory_roofs")
        .mark_line(color="#333333", strokeWidth=1.6, clip=True)
        .encode(
            x=alt.X("x:Q", scale=xscale, axis=x_axis),
            y=alt.Y("y:Q", scale=yscale, axis=y_axis),
            detail="roof_id:N",
            strokeDash=alt.StrokeDash("source:N", scale=dash, title="roof source"),
            tooltip=roof_tip,
        ),
        alt.Chart(compute_roofs, name=ROOFS)
        .mark_line(strokeWidth=2, clip=True)
        .encode(
            x="x:Q",
            y="y:Q",
            detail="roof_id:N",
            color=color_enc,
            strokeDash=alt.StrokeDash("source:N", scale=dash, title="roof source"),
            tooltip=roof_tip,
        ),
        alt.Chart(labels[~labels["shared"]], name="roof_labels")
        .mark_text(**LABEL_MARK)
        .encode(**label_at, color=color_enc),
        # a roof several envs share: its label in grey, since it is no one env's colour
        alt.Chart(labels[labels["shared"]], name="shared_roof_labels")
        .mark_text(**LABEL_MARK)
        .encode(**label_at, color=alt.value("#555555")),
        alt.Chart(
            pd.DataFrame(mem_label_rows, columns=["x", "y", "text", "dx", "dy", "angle"]),
            name="memory_labels",
        )
        .mark_text(
            align="left",
            baseline="middle",
            dx=alt.expr("datum.dx"),
            dy=alt.expr("datum.dy"),
            angle=alt.expr("datum.angle"),
            fontSize=10,
            clip=True,
        )
        .encode(x="x:Q", y="y:Q", text="text:N", color=alt.value("#333333")),
        alt.Chart(pd.DataFrame(ridge_rows), name="ridges")
        .mark_point(shape="diamond", filled=True, size=50, stroke="#333333", strokeWidth=0.6)
        .encode(
            x="x:Q",
            y="y:Q",
            color=color_enc,
            tooltip=[alt.Tooltip("roof:N"), alt.Tooltip("ridge:N", title="ridge point")],
        ),
    ]

    # ---- per-kernel points (ncu), behind the study's points, hidden by a checkbox
    if len(kern):
        show = alt.param(
            name="show_kernels",
            value=True,
            bind=alt.binding_checkbox(name=f"show the {len(kern)} per-kernel points (ncu) "),
        )
        layers.append(
            alt.Chart(kern, name=KERNELS)
            .mark_circle(size=22, opacity=0.35, clip=True)
            .encode(
                x="ai:Q",
                y="flops:Q",
                color=color_enc,
                tooltip=[
                    alt.Tooltip("kernel:N"),
                    alt.Tooltip("env:N"),
                    alt.Tooltip("model:N"),
                    alt.Tooltip("precision:N"),
                    alt.Tooltip("batch:Q"),
                    alt.Tooltip("ai:Q", title="AI (FLOP/byte, ncu)", format=",.3r"),
                    alt.Tooltip("gflops:Q", title="GFLOP/s (kernel time under ncu)", format=",.3r"),
                    alt.Tooltip("time_us:Q", title="time (µs)", format=",.3r"),
                    alt.Tooltip("time_share:Q", title="share of profiled step", format=".1%"),
                ],
            )
            .transform_filter("show_kernels")
            .add_params(show)
        )

    # ---- the study's points
    if len(pts):
        batch_labels = batch_label_frame(pts, frame, roof_layout.boxes + mem_label_boxes)
        pick = alt.selection_point(fields=["model"], bind="legend", name="pick_model")
        zoom = alt.selection_interval(bind="scales", name="zoom")
        tips = [
            alt.Tooltip("env:N"),
            alt.Tooltip("model:N"),
            alt.Tooltip("precision:N"),
            alt.Tooltip("batch:Q", title="batch"),
            alt.Tooltip("ai:Q", title="AI (FLOP/byte)", format=",.3r"),
            alt.Tooltip("ai_source:N", title="AI source"),
            alt.Tooltip("ai_low:Q", title="AI range: low (per-layer model)", format=",.3r"),
            alt.Tooltip("ai_high:Q", title="AI range: high (minimum bytes)", format=",.3r"),
            alt.Tooltip("gflops:Q", title="GFLOP/s", format=",.3r"),
            alt.Tooltip("roof_gflops:Q", title="roof (GFLOP/s)", format=",.3r"),
            alt.Tooltip("efficiency:Q", title="efficiency (of roof)", format=".1%"),
            alt.Tooltip("bound:N"),
            alt.Tooltip("ridge_ai:Q", title="ridge (FLOP/byte)", format=",.3r"),
            alt.Tooltip("images_per_s:Q", title="images/s", format=",.3r"),
            alt.Tooltip("lever:N", title="what would move it"),
        ]
        base = alt.Chart(pts, name="sweeps").encode(
            x="ai:Q",
            y="flops:Q",
            color=color_enc,
        )
        layers.append(
            base.mark_line(strokeWidth=0.8, opacity=0.45, clip=True).encode(
                detail=["env:N", "model:N", "precision:N"], order="batch:Q"
            )
        )
        ranged = pts[np.isfinite(pts["ai_low"]) & np.isfinite(pts["ai_high"])]
        if len(ranged):
            layers.append(
                alt.Chart(ranged, name=AI_RANGES)
                .mark_rule(strokeWidth=3, opacity=0.45, clip=True)
                .encode(x="ai_low:Q", x2="ai_high:Q", y="flops:Q", color=color_enc, tooltip=tips)
            )
        layers.append(
            alt.Chart(pts, name=POINTS)
            .mark_point(filled=True, size=110, stroke="#222222", strokeWidth=0.7, clip=True)
            .encode(
                x="ai:Q",
                y="flops:Q",
                color=color_enc,
                shape=alt.Shape("model:N", scale=shape_scale, title="model (click to pick)"),
                opacity=alt.when(pick).then(alt.value(0.95)).otherwise(alt.value(0.15)),
                tooltip=tips,
            )
            .add_params(pick, zoom)
        )
        layers.append(
            alt.Chart(batch_labels, name="batch_labels")
            .mark_text(
                align=alt.expr("datum.align"),
                baseline=alt.expr("datum.baseline"),
                dx=alt.expr("datum.dx"),
                dy=alt.expr("datum.dy"),
                fontSize=BATCH_LABEL_PX,
                color="#333333",
                clip=True,
            )
            .encode(x="ai:Q", y="flops:Q", text="label:N")
        )
        above = pts[pts["above_roof"]]
        if len(above):
            layers.append(
                alt.Chart(above, name="above_roof")
                .mark_point(shape="circle", size=420, filled=False, stroke="red", strokeWidth=2)
                .encode(x="ai:Q", y="flops:Q", tooltip=tips)
            )
    chart = alt.layer(*layers).properties(
        width=WIDTH,
        height=HEIGHT,
        title=alt.Title(title, subtitle=subtitle or "", anchor="start"),
    )
    return (
        chart.resolve_scale(color="shared")
        .configure_legend(orient="right", labelLimit=220)
        .configure_view(stroke="#dddddd")
    )


# --------------------------------------------------------------------------- html


def javascript_bundle() -> str:
    """Vega, Vega-Lite and vega-embed as one script (vl-convert ships it; no network)."""
    import vl_convert as vlc

    # the Vega-Lite version of Altair's schema, as vl-convert names it ("v6_4")
    vl_version = "_".join(alt.SCHEMA_VERSION.split(".")[:2])
    return vlc.javascript_bundle(vl_version=vl_version)


def _script_safe_json(obj) -> str:
    # '<' only occurs inside JSON strings, where \u003c is the same character
    return json.dumps(obj, separators=(",", ":"), allow_nan=False).replace("<", "\\u003c")


_PAGE_STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;font-size:14px;
color:#1d1d1f;margin:1em;max-width:80em}h1{font-size:1.4em;margin:.2em 0 .4em}
p{margin:.3em 0 .6em;line-height:1.45}.note{color:#555}#vis{margin:.5em 0}
#vg-tooltip-element td.key{font-weight:600}
.vega-bindings{font-size:13px;margin:.3em 0}
"""


def standalone_html(
    chart: alt.TopLevelMixin | Mapping,
    title: str,
    intro: str = "",
    notes: list[str] | None = None,
    bundle: str | None = None,
) -> str:
    """One HTML page with the chart's spec, its data and the Vega JavaScript inlined.

    ``intro`` and ``notes`` are plain text (escaped here). ``bundle`` is the JS
    (default: :func:`javascript_bundle`); no URL is loaded at view time.
    """
    spec = chart if isinstance(chart, Mapping) else chart.to_dict()
    js = (bundle if bundle is not None else javascript_bundle()).replace("</script", "<\\/script")
    note_html = "".join(f"<p class=note>{html.escape(n)}</p>\n" for n in notes or [])
    embed_opts = {
        "renderer": "svg",
        "actions": {"export": True, "source": False, "compiled": False, "editor": False},
        "tooltip": {"theme": "light"},
    }
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{html.escape(title)}</title>\n<style>{_PAGE_STYLE}</style>\n"
        f"<script>\n{js}\n</script>\n</head>\n<body>\n"
        f"<h1>{html.escape(title)}</h1>\n"
        + (f"<p>{html.escape(intro)}</p>\n" if intro else "")
        + '<div id="vis"></div>\n'
        + note_html
        + "<script>\n(function () {\n"
        + f"  var spec = {_script_safe_json(spec)};\n"
        + f"  var opts = {_script_safe_json(embed_opts)};\n"
        + "  vegaEmbed('#vis', spec, opts).then(function (result) {\n"
        + "    window.rooflineView = result.view;\n"
        + "    document.body.dataset.rendered = 'true';\n"
        + "  }).catch(function (err) {\n"
        + "    document.getElementById('vis').textContent = 'The chart failed to render: ' + err;\n"
        + "    console.error(err);\n"
        + "  });\n})();\n</script>\n</body>\n</html>\n"
    )


HOW_TO_READ = (
    "Log-log roofline. Hover a point for its model, precision, batch, arithmetic intensity, "
    "attained GFLOP/s, efficiency (share of its roof), bound and what would move it. Roofs: "
    "measured solid, datasheet dashed; diamonds mark ridge points (left of a ridge a point is "
    "memory-bound, right of it compute-bound). Scroll to zoom, drag to pan, double-click to "
    "reset; click a model in the legend to pick it (shift-click for more)."
)


def page_notes(
    points: pd.DataFrame,
    ncu_by_key: Mapping | None,
    combined: bool,
    max_kernels: int | None = None,
) -> list[str]:
    """Plain-text notes under the chart: AI source, kernels shown and skipped, flags."""
    pts = point_frame(points, combined)
    notes = []
    if len(pts):
        src = sorted(set(pts["ai_source"]) - {""})
        if src == ["analytic"]:
            notes.append(
                "AI is analytic here (FLOPs / minimum DRAM bytes per step): no DRAM counters on "
                "CPU/MPS, so it is an upper bound on the real AI."
            )
        n_above = int(pts["above_roof"].sum())
        if n_above:
            notes.append(
                f"{n_above} point(s) above their roof (red rings): check the peak or the "
                "FLOP count."
            )
    else:
        notes.append("No successful runs yet: only the roofs are drawn.")
    kern = kernel_frame(ncu_by_key, combined, max_kernels)
    if len(kern) or kern.attrs.get("skipped"):
        notes.append(
            f"Per-kernel points: {len(kern)} ncu kernels with FLOPs, DRAM bytes and a time; "
            f"{kern.attrs.get('skipped', 0)} without FLOPs or DRAM bytes (copies, fills) are "
            "not drawn. Kernel FLOP/s use the kernel time under ncu (serialized, caches "
            "flushed), not the uninstrumented step time."
        )
    if kern.attrs.get("dropped"):
        notes.append(
            f"To keep this page small enough for the report (browsers refuse embedded pages "
            f"over 2 MB), only the {len(kern)} longest kernels are drawn, "
            f"{kern.attrs['kept_time_share']:.0%} of the profiled kernel time; the other "
            f"{kern.attrs['dropped']} are in the parsed ncu JSONs (results/<env>/ncu/)."
        )
    return notes


#: Largest page, in bytes, that still opens inside the Snakemake report: it embeds
#: results as base64 data URLs, and Chromium blocks data URLs over 2 MiB.
MAX_PAGE_BYTES = 1_500_000


def roofline_page(
    points: pd.DataFrame,
    ceilings_by_env: Mapping[str, Mapping],
    ncu_by_key: Mapping[tuple, Mapping] | None = None,
    title: str = "Roofline",
    subtitle: str | None = None,
    ceilings_sources: Mapping[str, str] | None = None,
    bundle: str | None = None,
    max_bytes: int = MAX_PAGE_BYTES,
) -> str:
    """The whole page: chart, how to read it, and notes, within ``max_bytes`` if it can be.

    Over the budget, per-kernel points are thinned to the longest-running kernels
    (halving their number until the page fits); the study's points are never dropped.
    """
    bundle = bundle if bundle is not None else javascript_bundle()
    combined = len(ceilings_by_env) > 1
    ncu_by_key = {k: v for k, v in (ncu_by_key or {}).items() if k[0] in ceilings_by_env}
    cap = None
    while True:
        chart = roofline_chart(
            points, ceilings_by_env, ncu_by_key, title, subtitle, ceilings_sources, cap
        )
        notes = page_notes(points, ncu_by_key, combined, cap)
        html = standalone_html(chart, title, HOW_TO_READ, notes, bundle)
        n_kernels = len(kernel_frame(ncu_by_key, combined, cap))
        if len(html.encode()) <= max_bytes or n_kernels == 0:
            return html
        cap = n_kernels // 2
