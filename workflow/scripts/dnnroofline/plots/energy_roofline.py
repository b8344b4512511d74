"""The energy roofline (Choi et al. 2013): FLOP per joule against arithmetic intensity,
every env's fitted costs as its roofs, every point with joules on it, drawn with the
static figures' kit (:mod:`dnnroofline.plots.figure`). The data is
:func:`energy_roofline_data`; :mod:`dnnroofline.aggregate.energy_points` holds the costs
and the points. Its artists' SVG ids:

- ``energy-roof-{env}-compute-{precision}``     horizontal compute-energy roof, 1/eps_flop
- ``energy-roof-{env}-memory``                  diagonal memory-energy roof, AI/eps_mem
- ``energy-combined-{env}-{precision}``         Choi's curve, 1/(eps_flop + eps_mem/AI)
- ``point-{env}-{model}-{precision}-bs{batch}`` one point: flop_per_step / joules_per_step
- ``energy-note``                               the envs left out, each with its reason
- ``no-energy-data``                            the text of a figure with nothing to draw

Colour encodes precision, marker shape the model, line style (and marker fill) the env.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import numpy as np
import pandas as pd
from matplotlib import rc_context
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from dnnroofline.aggregate.energy_points import EnvEnergy, env_energy, point_energy
from dnnroofline.formatting import sig
from dnnroofline.perfmodel.energy import EnergyCosts
from dnnroofline.plots.figure import (
    SVG_RC,
    artist_gid,
    decade_limits,
    log_axes,
    precision_color,
    save_figure,
    sectioned_legend,
)
from dnnroofline.plots.roof_artists import draw_point_label, place_point_labels_pt
from dnnroofline.plots.roofline import (
    ENV_FILLSTYLES,
    MODEL_MARKERS,
    POINT_MARKER_PT,
    batch_label_markers,
)
from dnnroofline.plots.throughput import ENV_LINESTYLES

AXIS_Y = "Energy efficiency (FLOP/J)"
NO_DATA = "No energy data to plot"
CURVE_SAMPLES = 200  # log-spaced AIs along each curve


def energy_roofline_data(
    ceilings: Mapping[str, Mapping], points: pd.DataFrame | None, metrics: pd.DataFrame | None
) -> dict:
    """What the figure draws: ``envs`` (each env's costs and reasons,
    :class:`~dnnroofline.aggregate.energy_points.EnvEnergy`), ``points`` (the points with
    ``flop_per_joule``) and ``roofs``: one row per (env, precision) with costs, its
    compute-energy roof, the memory-energy roof's slope 1/eps_mem and the AI where the two
    meet (NaN where the fit gave one cost only)."""
    envs = env_energy(ceilings, metrics)
    roofs = []
    for e in envs:
        if e.costs is None:
            continue
        per_byte = e.costs.joules_per_byte
        slope = 1.0 / per_byte if per_byte else np.nan
        for prec in _costed_precisions(e.costs) or [None]:
            compute = e.costs.compute_roof(prec) if prec else None
            ridge = e.costs.balance(prec) if prec else None
            roofs.append(
                {
                    "env": e.env,
                    "precision": prec,
                    "compute_flop_per_joule": compute if compute else np.nan,
                    "memory_flop_per_joule_per_ai": slope,
                    "ridge_ai": ridge if ridge else np.nan,
                }
            )
    cols = [
        "env",
        "precision",
        "compute_flop_per_joule",
        "memory_flop_per_joule_per_ai",
        "ridge_ai",
    ]
    return {
        "envs": envs,
        "points": point_energy(points, metrics),
        "roofs": pd.DataFrame(roofs, columns=cols),
    }


def _costed_precisions(costs: EnergyCosts) -> list[str]:
    """The precisions with a compute-energy roof (a cost the fit set to zero has none)."""
    return sorted(p for p, eps in costs.joules_per_flop.items() if eps > 0)


def _limits(data: dict):
    """Decades that hold the points, the roofs and where they meet."""
    pts, roofs = data["points"], data["roofs"]
    xs = list(pts["ai"].astype(float)) + list(roofs["ridge_ai"])
    ys = list(pts["flop_per_joule"].astype(float)) + list(roofs["compute_flop_per_joule"])
    if not len(pts):  # no points: a decade each side of the ridges, up to the roofs
        xs += [x * f for x in roofs["ridge_ai"] for f in (0.1, 10)]
        ys += [y / 100 for y in roofs["compute_flop_per_joule"]]
    if not any(np.isfinite(xs)) and len(roofs):  # a memory roof alone: AI 1 .. 100
        xs += [1.0, 100.0]
        ys += list(100 * roofs["memory_flop_per_joule_per_ai"])
    return decade_limits(xs, ys)


def _draw_env_roofs(ax, e: EnvEnergy, linestyle: str) -> list[Line2D]:
    """An env's roofs and Choi curves; returns its legend entries (costs in pJ)."""
    costs, (xlo, xhi) = e.costs, ax.get_xlim()
    ais = np.geomspace(xlo, xhi, CURVE_SAMPLES)
    items = []
    if costs.joules_per_byte:
        ax.plot(
            ais,
            costs.memory_roof(ais),
            color="0.35",
            linestyle=linestyle,
            linewidth=0.9,
            gid=artist_gid("energy-roof", e.env, "memory"),
            zorder=2,
        )
        items.append(
            Line2D(
                [],
                [],
                color="0.35",
                linestyle=linestyle,
                linewidth=0.9,
                label=f"{e.env} DRAM: {sig(costs.joules_per_byte / 1e-12)} pJ/B",
            )
        )
    for prec in _costed_precisions(costs):
        color = precision_color(prec)
        roof = costs.compute_roof(prec)
        ax.plot(
            [xlo, xhi],
            [roof, roof],
            color=color,
            linestyle=linestyle,
            linewidth=0.9,
            alpha=0.6,
            gid=artist_gid("energy-roof", e.env, "compute", prec),
            zorder=2,
        )
        ax.plot(
            ais,
            costs.combined(prec, ais),
            color=color,
            linestyle=linestyle,
            linewidth=2.0,
            gid=artist_gid("energy-combined", e.env, prec),
            zorder=3,
        )
        pj = sig(costs.joules_per_flop[prec] / 1e-12)
        items.append(
            Line2D(
                [],
                [],
                color=color,
                linestyle=linestyle,
                linewidth=2.0,
                label=f"{e.env} {prec}: {pj} pJ/FLOP",
            )
        )
    return items


def _draw_points(ax, pts: pd.DataFrame, env_fill: dict, model_marker: dict) -> None:
    """The points, each labelled with its batch as on the roofline."""
    # the roofline's batch labels, with FLOP/J where it reads attained FLOP/s
    markers = batch_label_markers(pts.assign(attained_flops=pts["flop_per_joule"]))
    spots = place_point_labels_pt(ax, markers, [])
    for spot, (*_, marker), r in zip(spots, markers, pts.itertuples(index=False), strict=True):
        color, fill = precision_color(r.precision), env_fill.get(r.env, "full")
        ax.plot(
            [r.ai],
            [r.flop_per_joule],
            linestyle="none",
            marker=model_marker[r.model],
            markersize=POINT_MARKER_PT,
            color=color,
            fillstyle=fill,
            markerfacecolor=color if fill != "none" else "none",
            markerfacecoloralt="white",
            markeredgecolor=color if fill == "none" else "0.15",
            markeredgewidth=0.8,
            gid=artist_gid("point", r.env, r.model, r.precision, f"bs{int(r.batch_size)}"),
            zorder=5,
        )
        draw_point_label(ax, r.ai, r.flop_per_joule, marker, spot)


def left_out(envs: list[EnvEnergy], pts: pd.DataFrame) -> list[str]:
    """``env: reason`` for each env with no roofs, or no points, and why."""
    with_points = set(pts["env"]) if len(pts) else set()
    lines = []
    for e in envs:
        why = [e.reason] if e.costs is None and e.reason else []
        if e.env not in with_points and e.runs_reason:
            why.append(e.runs_reason)
        if why:
            lines.append(f"{e.env}: " + "; ".join(why))
    return lines


def _no_data_figure(envs: list[EnvEnergy], title: str) -> Figure:
    """A figure that says there is nothing to plot, and why, env by env."""
    fig = Figure(figsize=(8.0, 2.0 + 0.3 * len(envs)))
    ax = fig.add_subplot()
    ax.set_axis_off()
    ax.set_title(title)
    lines = [f"{NO_DATA}:"] + [f"{e.env}: {e.why_none()}" for e in envs]
    if not envs:
        lines = [f"{NO_DATA}: no envs"]
    ax.text(
        0.0,
        0.5,
        "\n".join(lines),
        transform=ax.transAxes,
        ha="left",
        va="center",
        fontsize=9,
        color="0.25",
        gid="no-energy-data",
        wrap=True,
    )
    return fig


def _legend(ax, roof_items, model_marker, precs, env_fill) -> None:
    models = [
        Line2D([], [], linestyle="none", marker=k, color="0.45", label=m)
        for m, k in model_marker.items()
    ]
    colours = [Line2D([], [], color=precision_color(p), linewidth=3, label=p) for p in precs]
    envs = [
        Line2D(
            [],
            [],
            linestyle=ENV_LINESTYLES[i % len(ENV_LINESTYLES)],
            marker="o",
            color="0.45",
            fillstyle=fill,
            markerfacecoloralt="white",
            label=e,
        )
        for i, (e, fill) in enumerate(env_fill.items())
    ]
    kinds = [
        Line2D([], [], color="0.35", linewidth=0.9, label="memory-energy roof, AI/eps_mem"),
        Line2D(
            [], [], color="0.5", alpha=0.6, linewidth=0.9, label="compute-energy roof, 1/eps_flop"
        ),
        Line2D([], [], color="0.5", linewidth=2.0, label="both, 1/(eps_flop + eps_mem/AI)"),
    ]
    sections = [("Model", models), ("Precision (colour)", colours)]
    sections += [("Env (line style, marker fill)", envs if len(env_fill) > 1 else [])]
    sectioned_legend(ax, sections + [("Roofs", kinds if roof_items else []), ("Costs", roof_items)])


def plot_energy_roofline(
    ceilings: Mapping[str, Mapping],
    points: pd.DataFrame | None,
    metrics: pd.DataFrame | None,
    out_png: str | os.PathLike | None,
    out_svg: str | os.PathLike | None,
    title: str = "Energy roofline",
) -> dict:
    """Draw the energy roofline of every env in ``ceilings`` (and ``metrics``); without
    a roof or a point to draw, a figure saying so with each env's reason. Returns
    ``{"points": n, "roofs": n (env, precision), "left_out": ["env: reason", ...]}``."""
    data = energy_roofline_data(ceilings, points, metrics)
    envs, pts = data["envs"], data["points"]
    costed = [e for e in envs if e.costs is not None]
    notes = left_out(envs, pts)
    with rc_context(SVG_RC):
        if not costed and not len(pts):
            fig = _no_data_figure(envs, title)
        else:
            drawn = sorted({e.env for e in costed} | set(pts["env"]))
            env_ls = {e: ENV_LINESTYLES[i % len(ENV_LINESTYLES)] for i, e in enumerate(drawn)}
            env_fill = {e: ENV_FILLSTYLES[i % len(ENV_FILLSTYLES)] for i, e in enumerate(drawn)}
            env_fill = env_fill if len(drawn) > 1 else {}
            models = sorted(pts["model"].unique())
            model_marker = {m: MODEL_MARKERS[i % len(MODEL_MARKERS)] for i, m in enumerate(models)}
            fig = Figure(figsize=(10.5, 6.5))
            ax = log_axes(fig, title, AXIS_Y, *_limits(data))
            roof_items = [i for e in costed for i in _draw_env_roofs(ax, e, env_ls[e.env])]
            _draw_points(ax, pts, env_fill, model_marker)
            precs = sorted(
                {p for e in costed for p in _costed_precisions(e.costs)} | set(pts["precision"])
            )
            _legend(ax, roof_items, model_marker, precs, env_fill)
            if notes:
                ax.text(
                    0.0,
                    -0.13,
                    "\n".join(["Not drawn:", *notes]),
                    transform=ax.transAxes,
                    ha="left",
                    va="top",
                    fontsize=7.5,
                    color="0.3",
                    gid="energy-note",
                )
        save_figure(fig, out_png, out_svg)
    return {"points": len(pts), "roofs": len(data["roofs"]), "left_out": notes}
