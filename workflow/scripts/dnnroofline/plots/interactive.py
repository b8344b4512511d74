"""Interactive rooflines: Vega-Lite charts (Altair) in self-contained HTML pages.

Pure logic: DataFrames and dicts in, an Altair chart or an HTML string out; no
file I/O. ``plot_interactive.py`` reads the files and writes the page. The rows come
from :mod:`dnnroofline.plots.interactive_data`, the roofs from
:func:`dnnroofline.estimate.roofline.roofs_to_draw`; the page is the Jinja template
``plots/templates/roofline_page.html``.

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

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import altair as alt
import numpy as np
import pandas as pd
from jinja2 import Environment, FileSystemLoader, StrictUndefined
from markupsafe import Markup

from dnnroofline.aggregate.inputs import ceilings_path
from dnnroofline.errors import InputError
from dnnroofline.estimate import roofline
from dnnroofline.formatting import isnum
from dnnroofline.install_cache import kept_per_install
from dnnroofline.plots.interactive_data import kernel_frame, point_frame
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
from dnnroofline.study.precisions import COMPUTE_DTYPE, PRECISIONS

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
PRECISION_COLORS = dict(zip(PRECISIONS, ["#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd"], strict=True))
PRECISION_COLORS |= {COMPUTE_DTYPE[p]: c for p, c in PRECISION_COLORS.items()}
PRECISION_COLORS |= {"fp64": "#8c564b"}
_SPARE = ["#17becf", "#e377c2", "#7f7f7f", "#bcbd22", "#000000"]
SOURCE_DASH = {"measured": [1, 0], "datasheet": [6, 4]}
SHAPES = ["circle", "square", "triangle-up", "diamond", "triangle-down", "cross", "wedge"]


def _color(precision: str, i: int = 0) -> str:
    return PRECISION_COLORS.get(str(precision).lower(), _SPARE[i % len(_SPARE)])


def _decade_range(values, lo_pad, hi_pad):
    vals = [float(v) for v in values if isnum(v) and float(v) > 0]
    lo = 10 ** math.floor(math.log10(min(vals) / lo_pad))
    hi = 10 ** math.ceil(math.log10(max(vals) * hi_pad))
    return lo, hi


# --------------------------------------------------------------------------- chart


@dataclass(frozen=True)
class _ChartData:
    """What one chart draws: points, kernels, roofs, and where the roof labels go."""

    pts: pd.DataFrame
    kern: pd.DataFrame
    pairs: list[roofline.RoofPair]
    combined: bool
    frame: PixelFrame  # the axis ranges, the right edge moved to clear the roof labels
    roof_labels: dict
    roof_layout: object

    def series(self, env: str, precision: str) -> str:
        return f"{env} · {precision}" if self.combined else precision


def _chart_data(points, ceilings_by_env, ncu_by_key, sources, max_kernels) -> _ChartData:
    """The chart's rows and axis ranges; refuses points of an env without ceilings and a
    precision without its compute peak."""
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
    pairs = roofline.roofs_to_draw(
        ceilings_by_env,
        pts.groupby("env")["precision"].unique().to_dict() if len(pts) else {},
        {env: (sources or {}).get(env, ceilings_path(env)) for env in envs},
    )
    xs = list(pts["ai"]) + list(kern["ai"]) + [p.ridge for p in pairs]
    for col in ("ai_low", "ai_high"):
        if col in pts:
            xs += [v for v in pts[col] if isnum(v) and v > 0]
    compute_roofs = [p.compute.value for p in pairs]
    ys = list(pts["flops"]) + list(kern["flops"]) + compute_roofs
    xlo, xhi = _decade_range(xs, 4, 4)
    ylo, yhi = _decade_range(ys + [min(compute_roofs) / 10], 5, 3)
    # one label per distinct roof, placed apart from close roofs' labels (roof_labels);
    # the right edge moves right until the labels clear the points (interactive_labels)
    roof_labels = compute_roof_labels(
        ((p.env, p.compute.precision, p.compute.source, p.compute.value, p.ridge) for p in pairs),
        combined,
    )
    layout = layout_roof_labels(roof_labels, PixelFrame(xlo, xhi, ylo, yhi), pts)
    frame = PixelFrame(xlo, layout.xhi, ylo, yhi)
    return _ChartData(pts, kern, pairs, combined, frame, roof_labels, layout)


def _color_encoding(data: _ChartData) -> alt.Color:
    """Colour by series: the precision, or "env · precision" when several envs share a
    chart; each once, since Vega pairs the deduplicated domain with the colours as given
    (a precision with a measured and a datasheet roof would shift every colour after)."""
    series = [data.series(p.env, p.compute.precision) for p in data.pairs]
    series += list(data.pts.get("series", [])) + list(data.kern["series"])
    series = list(dict.fromkeys(series))
    if data.combined:
        scheme = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf"]
        colors = [scheme[i % len(scheme)] for i in range(len(series))]
    else:
        colors = [_color(s, i) for i, s in enumerate(series)]
    return alt.Color(
        "series:N",
        scale=alt.Scale(domain=series, range=colors),
        title="env · precision" if data.combined else "precision",
    )


def _memory_roof_rows(data: _ChartData) -> tuple[list[dict], list[dict], list]:
    """(polyline rows of the memory roofs, their label rows, the labels' boxes).

    One label per distinct roof (roof_labels), written along the diagonals, side by side
    across them, at the first x where they clear the points."""
    mem = {(p.env, p.memory.source): p.memory for p in data.pairs}
    mem_labels = memory_roof_labels(
        ((env, msrc, r.value) for (env, msrc), r in sorted(mem.items())), data.combined
    )
    ends = {
        (msrc, bw): max(
            p.ridge for p in data.pairs if p.env in lab.envs and p.memory.source == msrc
        )
        for (msrc, bw), lab in mem_labels.items()
    }
    label_rows, boxes = memory_label_rows(mem_labels, ends, data.frame, data.pts)
    rows = []
    for (env, msrc), r in sorted(mem.items()):
        x_end = max(p.ridge for p in data.pairs if p.env == env and p.memory.source == msrc)
        x0 = max(data.frame.xlo, data.frame.ylo / r.value)
        label = f"{env + ' ' if data.combined else ''}memory {msrc}: {si(r.value, 'B/s')}"
        for x in (x0, x_end):
            rows.append(
                {
                    "roof_id": f"{env} memory {msrc}",
                    "kind": "memory",
                    "series": "memory",
                    "source": msrc,
                    "x": x,
                    "y": x * r.value,
                    "roof": label,
                    "how": r.note or "–",
                }
            )
    return rows, label_rows, boxes


def _compute_roof_rows(data: _ChartData) -> tuple[list[dict], list[dict], pd.DataFrame]:
    """(polyline rows of the compute roofs, ridge rows, label rows)."""
    rows, ridges = [], []
    for p in data.pairs:
        c, ser = p.compute, data.series(p.env, p.compute.precision)
        label = (
            f"{p.env + ' ' if data.combined else ''}{c.precision} {c.source}: "
            f"{si(c.value, 'FLOP/s')}"
        )
        for x in (p.ridge, data.frame.xhi):
            rows.append(
                {
                    "roof_id": f"{p.env} compute {c.precision} {c.source}",
                    "kind": "compute",
                    "series": ser,
                    "source": c.source,
                    "x": x,
                    "y": c.value,
                    "roof": label,
                    "how": c.note or "–",
                }
            )
        ridges.append(
            {
                "x": p.ridge,
                "y": c.value,
                "series": ser,
                "source": c.source,
                "ridge": f"{p.ridge:.3g} FLOP/B",
                "roof": label,
            }
        )
    labels = [
        {
            "x": data.frame.xhi,
            "y": compute_roof,
            "text": lab.text,
            "series": data.series(lab.envs[0], prec),
            "shared": len(lab.envs) > 1,
            "dy": -dy,  # Vega's y grows downwards
        }
        for ((prec, _source, compute_roof), lab), dy in zip(
            data.roof_labels.items(), data.roof_layout.dys, strict=True
        )
    ]
    return rows, ridges, pd.DataFrame(labels, columns=["x", "y", "text", "series", "shared", "dy"])


def _roof_layers(data: _ChartData, color_enc, mem_rows, mem_label_rows) -> list:
    """Memory and compute roofs, their labels and the ridge diamonds, on the log axes."""
    compute_rows, ridge_rows, labels = _compute_roof_rows(data)
    f = data.frame
    xscale = alt.Scale(type="log", domain=[f.xlo, f.xhi], nice=False)
    yscale = alt.Scale(type="log", domain=[f.ylo, f.yhi], nice=False)
    x_axis = alt.Axis(title="Arithmetic intensity (FLOP/byte)", format="~g", grid=True)
    y_axis = alt.Axis(title="Attained performance (FLOP/s)", format="~s", grid=True)
    dash = alt.Scale(domain=list(SOURCE_DASH), range=list(SOURCE_DASH.values()))
    roof_dash = alt.StrokeDash("source:N", scale=dash, title="roof source")
    roof_tip = [alt.Tooltip("roof:N", title="roof"), alt.Tooltip("how:N", title="method / source")]
    label_at = {"x": "x:Q", "y": "y:Q", "text": "text:N"}
    return [
        alt.Chart(pd.DataFrame(mem_rows), name="memory_roofs")
        .mark_line(color="#333333", strokeWidth=1.6, clip=True)
        .encode(
            x=alt.X("x:Q", scale=xscale, axis=x_axis),
            y=alt.Y("y:Q", scale=yscale, axis=y_axis),
            detail="roof_id:N",
            strokeDash=roof_dash,
            tooltip=roof_tip,
        ),
        alt.Chart(pd.DataFrame(compute_rows), name=ROOFS)
        .mark_line(strokeWidth=2, clip=True)
        .encode(
            x="x:Q",
            y="y:Q",
            detail="roof_id:N",
            color=color_enc,
            strokeDash=roof_dash,
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


def _kernel_layer(kern: pd.DataFrame, color_enc) -> alt.Chart:
    """Per-kernel points (ncu), behind the study's points, hidden by a checkbox."""
    show = alt.param(
        name="show_kernels",
        value=True,
        bind=alt.binding_checkbox(name=f"show the {len(kern)} per-kernel points (ncu) "),
    )
    return (
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


#: A study point's tooltip.
POINT_TOOLTIP = [
    ("env:N", None, None),
    ("model:N", None, None),
    ("precision:N", None, None),
    ("batch:Q", "batch", None),
    ("ai:Q", "AI (FLOP/byte)", ",.3r"),
    ("ai_source:N", "AI source", None),
    ("ai_low:Q", "AI range: low (per-layer model)", ",.3r"),
    ("ai_high:Q", "AI range: high (minimum bytes)", ",.3r"),
    ("gflops:Q", "GFLOP/s", ",.3r"),
    ("roof_gflops:Q", "roof (GFLOP/s)", ",.3r"),
    ("efficiency:Q", "efficiency (of roof)", ".1%"),
    ("bound:N", None, None),
    ("ridge_ai:Q", "ridge (FLOP/byte)", ",.3r"),
    ("images_per_s:Q", "images/s", ",.3r"),
    ("lever:N", "what would move it", None),
]


def _point_layers(data: _ChartData, color_enc, label_boxes) -> list:
    """The study's points: sweeps, AI ranges, points (pick a model in the legend, zoom),
    batch labels and red rings on points above their roof."""
    pts = data.pts
    tips = [
        alt.Tooltip(field, **{k: v for k, v in (("title", title), ("format", fmt)) if v})
        for field, title, fmt in POINT_TOOLTIP
    ]
    models = sorted(pts["model"].unique())
    shape_scale = alt.Scale(domain=models or ["-"], range=SHAPES[: max(1, len(models))])
    pick = alt.selection_point(fields=["model"], bind="legend", name="pick_model")
    zoom = alt.selection_interval(bind="scales", name="zoom")
    base = alt.Chart(pts, name="sweeps").encode(x="ai:Q", y="flops:Q", color=color_enc)
    layers = [
        base.mark_line(strokeWidth=0.8, opacity=0.45, clip=True).encode(
            detail=["env:N", "model:N", "precision:N"], order="batch:Q"
        )
    ]
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
        alt.Chart(batch_label_frame(pts, data.frame, label_boxes), name="batch_labels")
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
    return layers


def roofline_chart(
    points: pd.DataFrame,
    ceilings_by_env: Mapping[str, Mapping],
    ncu_by_key: Mapping[tuple, Mapping] | None = None,
    title: str = "Roofline",
    subtitle: str | None = None,
    ceilings_sources: Mapping[str, str] | None = None,
    max_kernels: int | None = None,
) -> alt.LayerChart:
    """A layered, zoomable roofline of ``points`` over the envs' measured and datasheet roofs
    (:func:`dnnroofline.estimate.roofline.roofs_to_draw` picks them)."""
    data = _chart_data(points, ceilings_by_env, ncu_by_key, ceilings_sources, max_kernels)
    color_enc = _color_encoding(data)
    mem_rows, mem_label_rows, mem_label_boxes = _memory_roof_rows(data)
    layers = _roof_layers(data, color_enc, mem_rows, mem_label_rows)
    if len(data.kern):
        layers.append(_kernel_layer(data.kern, color_enc))
    if len(data.pts):
        layers += _point_layers(data, color_enc, data.roof_layout.boxes + mem_label_boxes)
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
    """Vega, Vega-Lite and vega-embed as one script (vl-convert ships it; no network).

    vl-convert builds it in seconds, the same for each install: it is kept per install
    of vl-convert and Vega-Lite version (:func:`dnnroofline.install_cache.kept_per_install`)."""
    # the Vega-Lite version of Altair's schema, as vl-convert names it ("v6_4")
    vl_version = "_".join(alt.SCHEMA_VERSION.split(".")[:2])

    def build() -> str:
        import vl_convert as vlc

        return vlc.javascript_bundle(vl_version=vl_version)

    return kept_per_install("vega_bundle", "vl_convert", build, variant=vl_version)


def _script_safe_json(obj) -> str:
    # '<' only occurs inside JSON strings, where \u003c is the same character
    return json.dumps(obj, separators=(",", ":"), allow_nan=False).replace("<", "\\u003c")


#: The page's template (plots/templates/), autoescaped: only the inlined JavaScript and
#: JSON, made script-safe here, pass as they are.
PAGES = Environment(
    loader=FileSystemLoader(Path(__file__).resolve().parent / "templates"),
    autoescape=True,
    undefined=StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
    keep_trailing_newline=True,
)


def standalone_html(
    chart: alt.TopLevelMixin | Mapping,
    title: str,
    intro: str = "",
    notes: list[str] | None = None,
    bundle: str | None = None,
) -> str:
    """One HTML page with the chart's spec, its data and the Vega JavaScript inlined.

    ``intro`` and ``notes`` are plain text (escaped by the template). ``bundle`` is the
    JS (default: :func:`javascript_bundle`); no URL is loaded at view time.
    """
    spec = chart if isinstance(chart, Mapping) else chart.to_dict()
    js = (bundle if bundle is not None else javascript_bundle()).replace("</script", "<\\/script")
    embed_opts = {
        "renderer": "svg",
        "actions": {"export": True, "source": False, "compiled": False, "editor": False},
        "tooltip": {"theme": "light"},
    }
    return PAGES.get_template("roofline_page.html").render(
        title=title,
        intro=intro,
        notes=notes or [],
        js=Markup(js),
        spec=Markup(_script_safe_json(spec)),
        opts=Markup(_script_safe_json(embed_opts)),
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
