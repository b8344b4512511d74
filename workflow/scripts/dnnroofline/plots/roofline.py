"""The study's static roofline (matplotlib, no pyplot state), drawn with the figures'
kit (:mod:`dnnroofline.plots.figure`).

Each figure is written as PNG (150 dpi) and SVG, atomically. SVG text stays
text (``svg.fonttype = none``) and artists carry ``gid`` attributes, so tests
and browsers can find them:

- ``point-{env}-{model}-{precision}-bs{batch}``      one per roofline point
- ``above-roof-{env}-{model}-{precision}-bs{batch}`` red ring on a point above its roof
- ``ai-range-{env}-{model}-{precision}-bs{batch}``   horizontal bar: its analytic AI range
- ``roof-{env}-compute-{precision}-{source}``        horizontal compute roof
- ``roof-{env}-memory-{source}``                     diagonal memory roof
- ``ridge-{env}-{precision}-{source}``               ridge-point marker
- ``sweep-{env}-{model}-{precision}``                thin line joining its batch sizes

Measured roofs are solid, datasheet roofs dashed. Colour encodes precision,
marker shape the model; in a plot with several envs the marker fill style
encodes the env and roof labels name it.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping

import pandas as pd
from matplotlib import rc_context
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from dnnroofline.aggregate.inputs import ceilings_path
from dnnroofline.aggregate.points import plottable_points
from dnnroofline.errors import InputError
from dnnroofline.estimate import roofline
from dnnroofline.formatting import to_bool
from dnnroofline.plots.figure import (
    AXIS_Y,
    SVG_RC,
    above_roof_handle,
    artist_gid,
    decade_limits,
    draw_above_roof_ring,
    log_axes,
    precision_color,
    save_figure,
    sectioned_legend,
)
from dnnroofline.plots.roof_artists import (
    BATCH_LABEL_PT,
    LINESTYLES,
    draw_compute_roof,
    draw_memory_roof,
    draw_point_label,
    marker_obstacles,
    place_compute_roof_labels,
    place_memory_roof_labels,
    place_point_labels_pt,
    text_width_pt,
    to_points,
)
from dnnroofline.plots.roof_labels import Marker, Obstacle, compute_roof_labels, memory_roof_labels

AI_RANGE_LABEL = "analytic AI range (per-layer model .. minimum bytes)"
POINT_MARKER_PT = 7  # a roofline point's marker, which the labels keep clear of

MODEL_MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*", "<", ">", "h", "p"]
ENV_FILLSTYLES = ["full", "none", "left", "bottom", "right", "top"]


# --------------------------------------------------------------------------- roofline


def _ai_range(r) -> tuple[float, float] | None:
    """A point's analytic AI range (low, high), None where it has none."""
    lo, hi = getattr(r, "ai_low", math.nan), getattr(r, "ai_high", math.nan)
    return (lo, hi) if math.isfinite(lo) and math.isfinite(hi) and hi > lo > 0 else None


def _range_obstacles(ax, pts: pd.DataFrame) -> list[Obstacle]:
    """Each point's analytic AI range bar, as what a roof label must not cover."""
    out, half = [], POINT_MARKER_PT / 2
    for r in pts.itertuples(index=False):
        if (span := _ai_range(r)) is not None:
            y = to_points(ax, r.ai, r.attained_flops)[1]
            out.append(Obstacle(*span, half, half, y - half, y + half))
    return out


def _roofline_limits(pts: pd.DataFrame, pairs: list[roofline.RoofPair]):
    """Axis ranges that hold every point, AI range, ridge and roof."""
    ais = list(pts["ai"].astype(float)) if len(pts) else []
    for col in ("ai_low", "ai_high"):
        if col in pts:
            ais += [v for v in pts[col].astype(float) if math.isfinite(v) and v > 0]
    att = list(pts["attained_flops"].astype(float)) if len(pts) else []
    return decade_limits(ais + [p.ridge for p in pairs], att + [p.compute.value for p in pairs])


def batch_label_markers(pts: pd.DataFrame) -> list[tuple[float, float, Marker]]:
    """Each point's marker with its batch label; a sweep's labels alternate above and
    below, so that neighbours' do not collide."""
    label_below: dict[int, bool] = {}
    for _, g in pts.groupby(["env", "model", "precision"], sort=True) if len(pts) else []:
        for i, idx in enumerate(g.sort_values("batch_size").index):
            label_below[idx] = i % 2 == 1
    out = []
    for idx, r in zip(pts.index, pts.itertuples(index=False), strict=True):
        text = f"bs{int(r.batch_size)}"
        width = text_width_pt(text, BATCH_LABEL_PT)
        marker = Marker(0.0, 0.0, POINT_MARKER_PT / 2, text, width, label_below.get(idx, False))
        out.append((r.ai, r.attained_flops, marker))
    return out


def draw_roofs(ax, pairs, combined: bool, pts: pd.DataFrame, batch_markers) -> tuple:
    """Memory and compute roofs with their labels and ridge markers.

    Roofs are drawn per env (their gids name it), labels once per distinct roof
    (roof_labels). Compute roof labels sit right-aligned at the right edge, which moves
    right until they clear the points; memory roofs run diagonally from the left edge to
    the farthest ridge they join, labelled side by side across the diagonals at one x.
    Returns (the right edge, the labels' boxes).
    """
    roof_labels = compute_roof_labels(
        ((p.env, p.compute.precision, p.compute.source, p.compute.value, p.ridge) for p in pairs),
        combined,
    )
    xhi, dys, roof_label_boxes = place_compute_roof_labels(
        ax,
        [(lab.text, key[2], lab.prefer_above) for key, lab in roof_labels.items()],
        marker_obstacles(ax, batch_markers) + _range_obstacles(ax, pts),
    )
    roof_dy = dict(zip(roof_labels, dys, strict=True))
    mem_specs = {(p.env, p.memory.source): p.memory.value for p in pairs}
    mem_labels = memory_roof_labels(
        ((env, msrc, bw) for (env, msrc), bw in sorted(mem_specs.items())), combined
    )
    ends = {  # a memory roof runs to the farthest ridge it joins
        key: max(p.ridge for p in pairs if (p.memory.source, p.memory.value) == key)
        for key in mem_labels
    }
    diag = place_memory_roof_labels(
        ax,
        [(lab.text, key[1], ends[key], lab.prefer_above) for key, lab in mem_labels.items()],
        marker_obstacles(ax, batch_markers),
    )
    mem_dy = dict(zip(mem_labels, diag.dys, strict=True))
    for (env, msrc), bw in sorted(mem_specs.items()):
        x_end = max(p.ridge for p in pairs if p.env == env and p.memory.source == msrc)
        label = mem_labels[(msrc, bw)]
        draw_memory_roof(
            ax,
            bw,
            ax.get_xlim()[0],
            x_end,
            color="0.2",
            source=msrc,
            gid=artist_gid("roof", env, "memory", msrc),
            label=label.text if env == label.envs[0] else None,
            label_x=diag.x,
            label_dy=mem_dy[(msrc, bw)],
        )
    for p in pairs:  # horizontal from their ridge to the right edge, ridge marked
        prec, source, compute_roof = p.compute.precision, p.compute.source, p.compute.value
        key = (prec, source, compute_roof)
        color = precision_color(prec)
        draw_compute_roof(
            ax,
            compute_roof,
            p.ridge,
            xhi,
            color=color,
            source=source,
            gid=artist_gid("roof", p.env, "compute", prec, source),
            label=roof_labels[key].text if p.env == roof_labels[key].envs[0] else None,
            label_dy=roof_dy[key],
        )
        ax.plot(
            [p.ridge],
            [compute_roof],
            marker="D",
            markersize=4.5,
            color=color,
            markeredgecolor="0.2",
            linestyle="none",
            gid=artist_gid("ridge", p.env, prec, source),
            zorder=3,
        )
    return xhi, roof_label_boxes + diag.bounds


def _draw_sweeps(ax, pts: pd.DataFrame) -> None:
    """A thin line joining the batch sizes of one (env, model, precision)."""
    for (env, model, prec), g in pts.groupby(["env", "model", "precision"], sort=True):
        g = g.sort_values("batch_size")
        if len(g) > 1:
            ax.plot(
                g["ai"].astype(float),
                g["attained_flops"].astype(float),
                color=precision_color(prec),
                linewidth=0.8,
                alpha=0.4,
                gid=artist_gid("sweep", env, model, prec),
                zorder=4,
            )


def _draw_point(ax, r, marker: str, fill: str, color: str) -> None:
    """One roofline point: its marker, filled by env."""
    ax.plot(
        [r.ai],
        [r.attained_flops],
        linestyle="none",
        marker=marker,
        markersize=POINT_MARKER_PT,
        color=color,
        markerfacecolor=color if fill != "none" else "none",
        markerfacecoloralt="white",
        markeredgecolor=color if fill == "none" else "0.15",
        markeredgewidth=1.2 if fill == "none" else 0.6,
        fillstyle=fill,
        gid=artist_gid("point", r.env, r.model, r.precision, f"bs{int(r.batch_size)}"),
        zorder=5,
    )


def _draw_points(ax, pts, batch_markers, label_boxes, env_fill, model_marker) -> tuple[int, int]:
    """Sweeps, AI ranges, points, batch labels and above-roof rings; (n_above, n_ranges)."""
    n_above = n_ranges = 0
    if len(pts):
        _draw_sweeps(ax, pts)
    spots = place_point_labels_pt(ax, batch_markers, label_boxes)
    for spot, (*_, marker), r in zip(
        spots, batch_markers, pts.itertuples(index=False), strict=True
    ):
        color = precision_color(r.precision)
        tag = (r.env, r.model, r.precision, f"bs{int(r.batch_size)}")
        if (span := _ai_range(r)) is not None:
            n_ranges += 1
            ax.plot(
                list(span),
                [r.attained_flops, r.attained_flops],
                color=color,
                linewidth=2.2,
                alpha=0.45,
                solid_capstyle="butt",
                marker="|",
                markersize=7,
                gid=artist_gid("ai-range", *tag),
                zorder=4.5,
            )
        _draw_point(ax, r, model_marker[r.model], env_fill.get(r.env, "full"), color)
        draw_point_label(ax, r.ai, r.attained_flops, marker, spot)
        if to_bool(r.above_roof):
            n_above += 1
            draw_above_roof_ring(
                ax, r.ai, r.attained_flops, artist_gid("above-roof", *tag), zorder=6
            )
    if not len(pts):
        ax.text(
            0.5,
            0.5,
            "no successful runs to plot",
            transform=ax.transAxes,
            ha="center",
            va="center",
            color="0.4",
        )
    return n_above, n_ranges


def _roof_items(n_ranges: int, n_above: int) -> list[Line2D]:
    """The legend's "Roofs" section: line styles, ridge marker, AI range, above-roof ring."""
    items = [
        Line2D([], [], color="0.2", linestyle=LINESTYLES[source], label=f"{source} peak")
        for source in roofline.ROOF_SOURCES
    ]
    items.append(
        Line2D(
            [],
            [],
            linestyle="none",
            marker="D",
            color="0.6",
            markeredgecolor="0.2",
            markersize=4.5,
            label="ridge point (FLOP/byte)",
        )
    )
    if n_ranges:
        items.append(
            Line2D(
                [],
                [],
                color="0.45",
                linewidth=2.2,
                alpha=0.45,
                marker="|",
                markersize=7,
                label=AI_RANGE_LABEL,
            )
        )
    if n_above:
        items.append(above_roof_handle())
    return items


def _roofline_legend(ax, model_marker, precs, env_fill, n_ranges: int, n_above: int) -> None:
    """Model (marker), precision (colour), env (marker fill, when several) and roofs."""
    model_items = [
        Line2D([], [], linestyle="none", marker=marker, color="0.45", label=m)
        for m, marker in model_marker.items()
    ]
    precision_items = [
        Line2D([], [], color=precision_color(p), linewidth=3, label=p) for p in precs
    ]
    env_items = [
        Line2D(
            [],
            [],
            linestyle="none",
            marker="o",
            color="0.45",
            markerfacecolor="0.45" if fill != "none" else "none",
            markerfacecoloralt="white",
            markeredgecolor="0.15",
            fillstyle=fill,
            label=e,
        )
        for e, fill in env_fill.items()
    ]
    sectioned_legend(
        ax,
        [
            ("Model", model_items),
            ("Precision (colour)", precision_items),
            ("Env (marker fill)", env_items),
            ("Roofs", _roof_items(n_ranges, n_above)),
        ],
        fontsize=8,
    )


def plot_roofline(
    points: pd.DataFrame,
    ceilings_by_env: Mapping[str, Mapping],
    out_png: str | os.PathLike | None,
    out_svg: str | os.PathLike | None,
    title: str,
    *,
    ceilings_sources: Mapping[str, str] | None = None,
) -> dict:
    """Roofline plot of ``points`` (roofline_points rows) over the envs' ceilings.

    Every env in ``ceilings_by_env`` gets its roofs; every plottable point (runs_ok
    > 0) must belong to one of them. With one env all its compute roofs are
    drawn; with several, only those of precisions that have points in that env
    (all of them for an env without points), each labelled with its env
    (:func:`dnnroofline.estimate.roofline.roofs_to_draw`).
    Returns counts, ``{"points": n, "above_roof": n, "roofs": n, "ai_ranges": n}``, and
    ``x_max``: the AI axis' right edge (moved right until the roof labels clear the points).
    """
    ceilings_sources = ceilings_sources or {}
    pts = plottable_points(points)
    envs = sorted(ceilings_by_env)
    if not envs:
        raise InputError("plot_roofline needs the ceilings of at least one env")
    stray = sorted(set(pts["env"]) - set(envs)) if len(pts) else []
    if stray:
        raise InputError(f"points of env(s) {stray} but no ceilings given for them")
    combined = len(envs) > 1
    pairs = roofline.roofs_to_draw(
        ceilings_by_env,
        pts.groupby("env")["precision"].unique().to_dict() if len(pts) else {},
        {env: ceilings_sources.get(env, ceilings_path(env)) for env in envs},
    )
    xlim, ylim = _roofline_limits(pts, pairs)
    # in a plot of several envs the marker's fill style tells the env
    env_fill = {e: ENV_FILLSTYLES[i % len(ENV_FILLSTYLES)] for i, e in enumerate(envs)}
    env_fill = env_fill if combined else {}
    models = sorted(pts["model"].unique()) if len(pts) else []
    model_marker = {m: MODEL_MARKERS[i % len(MODEL_MARKERS)] for i, m in enumerate(models)}
    with rc_context(SVG_RC):
        fig = Figure(figsize=(10.5, 6.5))
        ax = log_axes(fig, title, AXIS_Y, xlim, ylim)
        batch_markers = batch_label_markers(pts)
        xhi, label_boxes = draw_roofs(ax, pairs, combined, pts, batch_markers)
        n_above, n_ranges = _draw_points(
            ax, pts, batch_markers, label_boxes, env_fill, model_marker
        )
        precs = sorted(
            {p.compute.precision for p in pairs} | set(pts["precision"] if len(pts) else [])
        )
        _roofline_legend(ax, model_marker, precs, env_fill, n_ranges, n_above)
        save_figure(fig, out_png, out_svg)
    return {
        "points": len(pts),
        "above_roof": n_above,
        "roofs": len(pairs),
        "ai_ranges": n_ranges,
        "x_max": xhi,
    }


# --------------------------------------------------------------------------- throughput
