"""Static plots: rooflines and throughput curves (matplotlib, no pyplot state).

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
- ``throughput-{env}-{model}-{precision}``           one throughput curve (markers: medians)
- ``errorbar-{env}-{model}-{precision}``             its min..max bars over repeats
- ``failed-{env}-{model}-{precision}-bs{batch}``     a batch where every run failed

Measured roofs are solid, datasheet roofs dashed. Colour encodes precision,
marker shape the model; in a plot with several envs the marker fill style
encodes the env and roof labels name it.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping

import numpy as np
import pandas as pd
from matplotlib import rc_context, rcParams
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import FixedLocator, NullLocator, ScalarFormatter
from matplotlib.transforms import Bbox, blended_transform_factory

from dnnroofline.aggregate.inputs import ceilings_path
from dnnroofline.aggregate.metrics import group_summary
from dnnroofline.aggregate.points import plottable_points
from dnnroofline.errors import InputError
from dnnroofline.estimate import roofline
from dnnroofline.formatting import to_bool
from dnnroofline.io import atomic_path
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
from dnnroofline.study.precisions import COMPUTE_DTYPE, PRECISIONS

DPI = 150
AXIS_X = "Arithmetic intensity (FLOP/byte)"
AXIS_Y = "Attained performance (FLOP/s)"
ABOVE_ROOF_LABEL = "above roof: check peak"
ABOVE_ROOF_COLOR = "red"
AI_RANGE_LABEL = "analytic AI range (per-layer model .. minimum bytes)"
POINT_MARKER_PT = 7  # a roofline point's marker, which the labels keep clear of

PRECISION_COLORS = dict(
    zip(PRECISIONS, ["tab:blue", "tab:green", "tab:orange", "tab:purple"], strict=True)
)
# a roof named by its compute dtype (amp's fp16) takes its precision's colour
PRECISION_COLORS |= {COMPUTE_DTYPE[p]: c for p, c in PRECISION_COLORS.items()}
PRECISION_COLORS |= {"fp64": "tab:brown", "int8": "tab:olive"}
_SPARE_COLORS = ["tab:cyan", "tab:pink", "tab:gray", "black"]  # never red: red is the flag
MODEL_MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*", "<", ">", "h", "p"]
ENV_FILLSTYLES = ["full", "none", "left", "bottom", "right", "top"]
ENV_LINESTYLES = ["-", "--", ":", "-."]
#: rc settings every static plot draws under: SVG text stays text, and the SVG ids are the
#: same on every run (a fixed hash salt), so a plot rebuilt from the same data is unchanged.
SVG_RC = {"svg.fonttype": "none", "svg.hashsalt": "dnn-roofline"}


def precision_color(precision: str) -> str:
    p = str(precision).lower()
    if p in PRECISION_COLORS:
        return PRECISION_COLORS[p]
    return _SPARE_COLORS[sum(map(ord, p)) % len(_SPARE_COLORS)]


def artist_gid(*parts: object) -> str:
    """The SVG id of a plotted artist: its parts joined by '-', spaces made '_' (the ids
    listed at the top of this module, by which tests and browsers find an artist)."""
    return "-".join(str(p).replace(" ", "_") for p in parts)


def tight_box(fig: Figure) -> Bbox:
    """The figure's tight bounding box (inches, padded as savefig pads it), measured as
    ``savefig(bbox_inches="tight", dpi=DPI)`` measures it for a PNG. A layout engine's
    result is kept: the figure is not laid out again for each format."""
    dpi = fig.dpi
    fig.set_dpi(DPI)
    FigureCanvasAgg(fig)
    fig.draw_without_rendering()
    box = fig.get_tightbbox().padded(rcParams["savefig.pad_inches"])
    fig.set_layout_engine("none")
    fig.set_dpi(dpi)
    return box


def save_figure(fig: Figure, out_png: str | os.PathLike | None, out_svg: str | os.PathLike | None):
    """Render ``fig`` to PNG and SVG, each via a temporary file renamed into place.

    Both formats take one tight box, measured once: ``bbox_inches="tight"`` would draw
    each format twice (once to measure, once to save), and text extents measured by the
    SVG backend differ a little from Agg's, so the two crops differed by a few points."""
    box = tight_box(fig)
    for path, fmt, meta in ((out_png, "png", {}), (out_svg, "svg", {"Date": None})):
        if path is None:
            continue
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format=fmt, dpi=DPI, bbox_inches=box, metadata=meta)


# --------------------------------------------------------------------------- roofline


def log_axes(fig: Figure, title: str, ylabel: str, xlim, ylim, **title_kw):
    """Log-log roofline axes with a light grid behind the artists."""
    ax = fig.add_subplot()
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(*xlim)
    ax.set_ylim(*ylim)
    ax.set_xlabel(AXIS_X)
    ax.set_ylabel(ylabel)
    ax.set_title(title, **title_kw)
    ax.grid(True, which="major", color="0.88", linewidth=0.6)
    ax.grid(True, which="minor", color="0.95", linewidth=0.4)
    ax.set_axisbelow(True)
    return ax


def decade_limits(xs: list[float], ys: list[float]):
    """((xlo, xhi), (ylo, yhi)): whole decades that hold ``xs`` and ``ys`` with a margin."""
    xs = [x for x in xs if x and x > 0 and math.isfinite(x)] or [1.0]
    ys = [y for y in ys if y and y > 0 and math.isfinite(y)] or [1.0]
    xlo = 10 ** math.floor(math.log10(min(xs) / 4))
    xhi = 10 ** math.ceil(math.log10(max(xs) * 4))
    ylo = 10 ** math.floor(math.log10(min(ys) / 5))
    yhi = 10 ** math.ceil(math.log10(max(ys) * 3))
    return (xlo, xhi), (ylo, yhi)


# the red ring of a point above its roof (the legend's entry draws it smaller)
_ABOVE_ROOF_RING = dict(
    linestyle="none",
    marker="o",
    markerfacecolor="none",
    markeredgecolor=ABOVE_ROOF_COLOR,
    markeredgewidth=1.8,
)


def draw_above_roof_ring(ax, x: float, y: float, gid: str, *, zorder: float = 7):
    """A red ring around a point above its roof: the peak behind it needs checking."""
    ax.plot([x], [y], markersize=15, gid=gid, zorder=zorder, **_ABOVE_ROOF_RING)


def above_roof_handle() -> Line2D:
    """The legend entry of draw_above_roof_ring."""
    return Line2D([], [], markersize=11, label=ABOVE_ROOF_LABEL, **_ABOVE_ROOF_RING)


def sectioned_legend(
    ax, sections: list[tuple[str, list]], *, fontsize: float = 7.5, labelspacing: float = 0.5
):
    """A legend right of the axes: each non-empty (title, handles) section under a bold title."""
    handles, headers = [], []
    for title, items in sections:
        if not items:
            continue
        headers.append(len(handles))
        handles.append(Patch(visible=False, label=title))
        handles.extend(items)
    leg = ax.legend(
        handles=handles,
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
        fontsize=fontsize,
        frameon=False,
        handlelength=2.4,
        labelspacing=labelspacing,
    )
    for i, text in enumerate(leg.get_texts()):
        if i in headers:
            text.set_fontweight("bold")


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


def _throughput_line(ax, ok: pd.DataFrame, env: str, model: str, prec: str, linestyle: str):
    """Median images/s per batch size, bars from min to max over the ok repeats."""
    med = ok["images_per_s"].to_numpy(float)
    yerr = np.vstack(
        [
            med - ok["images_per_s_min"].to_numpy(float),
            ok["images_per_s_max"].to_numpy(float) - med,
        ]
    )
    cont = ax.errorbar(
        ok["batch_size"].to_numpy(float),
        med,
        yerr=yerr,
        color=precision_color(prec),
        linestyle=linestyle,
        marker="o",
        markersize=4.5,
        capsize=3,
        linewidth=1.5,
    )
    cont.lines[0].set_gid(artist_gid("throughput", env, model, prec))
    for coll in cont.lines[2]:
        coll.set_gid(artist_gid("errorbar", env, model, prec))


def _failed_marks(ax, batches, env: str, model: str, prec: str) -> int:
    """A red x at the bottom of the subplot for each batch where every run failed."""
    trans = blended_transform_factory(ax.transData, ax.transAxes)
    for b in batches:
        ax.plot(
            [float(b)],
            [0.04],
            transform=trans,
            marker="x",
            markersize=7,
            color=ABOVE_ROOF_COLOR,
            linestyle="none",
            gid=artist_gid("failed", env, model, prec, f"bs{int(b)}"),
            clip_on=False,
        )
    return len(batches)


def _batch_axis(ax, model: str, batches: list[int]) -> None:
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(batches))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(ScalarFormatter())
    if len(batches) == 1:
        ax.set_xlim(batches[0] / 1.5, batches[0] * 1.5)
    ax.set_ylim(bottom=0)
    ax.set_title(model)
    ax.set_xlabel("Batch size")
    ax.set_ylabel("Throughput (images/s)")
    ax.grid(True, color="0.9", linewidth=0.6)


def _throughput_panel(ax, sub: pd.DataFrame, model: str, env_ls, legend_handles) -> tuple:
    """One model's subplot: a line per (env, precision); returns (lines, failed batches)."""
    n_lines = n_failed = 0
    for (env, prec), g in sub.groupby(["env", "precision"], sort=True):
        g = g.sort_values("batch_size")
        ok = g[g["runs_ok"] > 0]
        label = f"{env} {prec}"
        if len(ok):
            _throughput_line(ax, ok, env, model, prec, env_ls[env])
            n_lines += 1
            legend_handles.setdefault(
                label,
                Line2D(
                    [],
                    [],
                    color=precision_color(prec),
                    linestyle=env_ls[env],
                    marker="o",
                    label=label,
                ),
            )
        n_failed += _failed_marks(
            ax, list(g.loc[g["runs_ok"] == 0, "batch_size"]), env, model, prec
        )
    _batch_axis(ax, model, sorted(int(b) for b in sub["batch_size"].unique()))
    return n_lines, n_failed


def plot_throughput(
    metrics: pd.DataFrame,
    out_png: str | os.PathLike | None,
    out_svg: str | os.PathLike | None,
    title: str = "Training throughput",
) -> dict:
    """Images/s vs batch size, one subplot per model, one line per (env, precision).

    The marker is the median over ok repeats, error bars span their min..max.
    A batch where every run failed (OOM, error) is marked by a red x at the
    bottom of the subplot. Returns ``{"lines": n, "failed": n}``.
    """
    summ = group_summary(metrics)
    models = sorted(summ["model"].unique()) if len(summ) else []
    envs = sorted(summ["env"].unique()) if len(summ) else []
    env_ls = {e: ENV_LINESTYLES[i % len(ENV_LINESTYLES)] for i, e in enumerate(envs)}
    ncols = max(1, min(3, len(models)))
    nrows = max(1, math.ceil(len(models) / ncols))
    n_lines = n_failed = 0
    with rc_context(SVG_RC):
        fig = Figure(figsize=(4.3 * ncols + 2.2, 3.5 * nrows + 0.6), layout="constrained")
        axes = np.atleast_1d(fig.subplots(nrows, ncols, squeeze=False)).ravel()
        legend_handles: dict[str, Line2D] = {}
        for ax, model in zip(axes, models, strict=False):
            sub = summ[summ["model"] == model]
            lines, failed = _throughput_panel(ax, sub, model, env_ls, legend_handles)
            n_lines, n_failed = n_lines + lines, n_failed + failed
        for ax in axes[len(models) :]:
            ax.set_visible(False)
        if not models:
            axes[0].set_visible(True)
            axes[0].text(0.5, 0.5, "no runs", ha="center", va="center", color="0.4")
            axes[0].set_axis_off()
        handles = [legend_handles[k] for k in sorted(legend_handles)]
        if n_failed:
            handles.append(
                Line2D(
                    [],
                    [],
                    marker="x",
                    color=ABOVE_ROOF_COLOR,
                    linestyle="none",
                    label="every run failed (oom/error)",
                )
            )
        if handles:
            fig.legend(handles=handles, loc="outside right upper", fontsize=8, frameon=False)
        fig.suptitle(title + "  (median over repeats; bars: min..max)")
        save_figure(fig, out_png, out_svg)
    return {"lines": n_lines, "failed": n_failed}
