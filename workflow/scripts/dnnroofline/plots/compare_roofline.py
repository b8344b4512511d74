"""Before and after on the roofline: per env, this study's roofs, each baseline point and
an arrow from it to this study's point of the same (model, precision, batch), coloured
by the comparison's verdict (results/compare.csv).

A baseline point is matched through the config's env map (``compare.envs``: env of this
study -> env of the baseline; an env not listed keeps its name). A point in one study
only is drawn plain, and the legend says which study it is in.

SVG artists carry ``gid`` attributes, as in :mod:`dnnroofline.plots.roofline`:

- ``arrow-{env}-{model}-{precision}-bs{batch}``     the arrow, baseline -> this study
  (dashed where the two points' AIs come from different sources, ncu against analytic:
  its move along the AI axis is the method's)
- ``baseline-{env}-{model}-{precision}-bs{batch}``  a baseline point (hollow)
- ``current-{env}-{model}-{precision}-bs{batch}``   this study's point (filled)
- ``only-current-…`` / ``only-baseline-…``          a point in one study only
- ``roof-{env}-…``, ``ridge-{env}-…``               this study's roofs (roofline.draw_roofs)
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

import pandas as pd
from matplotlib import rc_context
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from dnnroofline.aggregate.inputs import ceilings_path
from dnnroofline.aggregate.points import plottable_points
from dnnroofline.errors import InputError
from dnnroofline.estimate import roofline
from dnnroofline.plots.figure import (
    AXIS_X,
    AXIS_Y,
    SVG_RC,
    decade_limits,
    save_figure,
    sectioned_legend,
)
from dnnroofline.plots.roof_artists import LINESTYLES
from dnnroofline.plots.roofline import (
    MODEL_MARKERS,
    POINT_MARKER_PT,
    batch_label_markers,
    draw_roofs,
)

#: the arrow's colour by the comparison's verdict; "unknown": a pair compare.csv gives none
VERDICT_COLORS = {
    "faster": "tab:green",
    "slower": "tab:red",
    "same": "0.45",
    "unknown": "tab:purple",
}
VERDICT_LABELS = {
    "faster": "faster (beyond the noise)",
    "slower": "slower (beyond the noise)",
    "same": "same (within the noise)",
    "unknown": "no verdict in compare.csv",
}
ONLY_COLOR = "0.6"
KEY = ["env", "model", "precision", "batch"]


@dataclass(frozen=True)
class Pairs:
    """The points of one env: matched pairs (with their verdicts) and the points in one
    study only. Each frame has ``env`` (this study's), model, precision, batch, ai and
    attained_flops (matched: ``ai_base``, ``flops_base``, ``verdict`` too)."""

    matched: pd.DataFrame
    current_only: pd.DataFrame
    baseline_only: pd.DataFrame


def point_frame(points: pd.DataFrame) -> pd.DataFrame:
    """Plottable roofline points, keyed (env, model, precision, batch), with where their
    AI comes from (``ai_source``: ncu, analytic ...; "" where the file does not say)."""
    pts = plottable_points(points)
    cols = ["env", "model", "precision", "batch", "ai", "attained_flops", "ai_source"]
    if pts.empty:
        return pd.DataFrame(columns=cols)
    source = pts["ai_source"].fillna("").astype(str) if "ai_source" in pts else ""
    out = pts.assign(batch=pts["batch_size"].astype(int), ai_source=source)[cols].copy()
    out["ai"] = out["ai"].astype(float)
    out["attained_flops"] = out["attained_flops"].astype(float)
    return out[(out["ai"] > 0) & (out["attained_flops"] > 0)].reset_index(drop=True)


def pair_points(
    compare: pd.DataFrame,
    points: pd.DataFrame,
    baseline_points: pd.DataFrame,
    env_map: Mapping[str, str] | None = None,
) -> dict[str, Pairs]:
    """``{env of this study: Pairs}``: each baseline point (its env mapped back through
    ``env_map``, this study's env -> the baseline's) matched with this study's point of the
    same key, with the verdict ``compare`` gives it. A baseline env that no env of this
    study maps to has no panel (compare_unmatched.csv names its points)."""
    env_map = dict(env_map or {})
    cur = point_frame(points)
    base = point_frame(baseline_points)
    back: dict[str, str] = {}
    for env in cur["env"].unique().tolist() + compare.get("env", pd.Series()).tolist():
        back.setdefault(env_map.get(env, env), env)
    base = base.assign(env=base["env"].map(back))
    base = base[base["env"].notna()]
    verdicts = compare[KEY + ["verdict"]].copy() if len(compare) else pd.DataFrame(columns=KEY)
    if len(verdicts):
        verdicts["batch"] = verdicts["batch"].astype(int)
    merged = cur.merge(
        base.rename(
            columns={"ai": "ai_base", "attained_flops": "flops_base", "ai_source": "source_base"}
        ),
        on=KEY,
        how="outer",
        indicator=True,
    )
    if len(verdicts):
        merged = merged.merge(verdicts, on=KEY, how="left")
    else:
        merged["verdict"] = None
    merged["verdict"] = merged["verdict"].where(
        merged["verdict"].isin(list(VERDICT_COLORS)), "unknown"
    )
    out = {}
    for env in sorted(set(merged["env"])):
        sub = merged[merged["env"] == env]
        out[env] = Pairs(
            matched=sub[sub["_merge"] == "both"].reset_index(drop=True),
            current_only=sub[sub["_merge"] == "left_only"].reset_index(drop=True),
            baseline_only=sub[sub["_merge"] == "right_only"]
            .drop(columns=["ai", "attained_flops", "ai_source"])
            .rename(
                columns={
                    "ai_base": "ai",
                    "flops_base": "attained_flops",
                    "source_base": "ai_source",
                }
            )
            .reset_index(drop=True),
        )
    return out


def _gid(kind: str, r) -> str:
    return "-".join(
        str(p).replace(" ", "_") for p in (kind, r.env, r.model, r.precision, f"bs{int(r.batch)}")
    )


def _marker(models: list[str], model: str) -> str:
    return MODEL_MARKERS[models.index(model) % len(MODEL_MARKERS)] if model in models else "o"


def _point(ax, ai: float, flops: float, marker: str, gid: str, zorder: int, **style) -> None:
    """One end of a pair, or a point in one study only: a marker at (ai, flops)."""
    ax.plot(
        [ai],
        [flops],
        linestyle="none",
        marker=marker,
        markersize=POINT_MARKER_PT,
        gid=gid,
        zorder=zorder,
        **style,
    )


def _key(label: str, **style) -> Line2D:
    """A legend entry for a kind of point: a round marker in ``style``."""
    return Line2D([], [], linestyle="none", marker="o", label=label, **style)


def other_ai_source(r) -> bool:
    """A pair whose two AIs come from different sources (ncu against analytic): its move
    along the AI axis is the method's, not the code's."""
    return bool(r.ai_source) and bool(r.source_base) and r.ai_source != r.source_base


def _draw_pairs(ax, pairs: Pairs, models: list[str]) -> dict[str, int]:
    """The arrows with both ends, then the points in one study only; counts by verdict,
    and of arrows between AIs of different sources (``ai-source``), drawn dashed."""
    counts: dict[str, int] = {}
    for r in pairs.matched.itertuples(index=False):
        color = VERDICT_COLORS[r.verdict]
        counts[r.verdict] = counts.get(r.verdict, 0) + 1
        method = other_ai_source(r)
        counts["ai-source"] = counts.get("ai-source", 0) + method
        marker = _marker(models, r.model)
        _point(
            ax, r.ai_base, r.flops_base, marker, _gid("baseline", r), 5,
            markerfacecolor="none", markeredgecolor=color, markeredgewidth=1.2,
        )  # fmt: skip
        arrow = ax.annotate(
            "",
            xy=(r.ai, r.attained_flops),
            xytext=(r.ai_base, r.flops_base),
            arrowprops=dict(
                arrowstyle="-|>",
                color=color,
                linewidth=1.4,
                linestyle="--" if method else "-",
                shrinkA=3,
                shrinkB=4,
            ),
            zorder=4,
        )
        # the patch, not the annotation: an empty text draws no group to carry the gid
        arrow.arrow_patch.set_gid(_gid("arrow", r))
        ax.annotate(
            f"bs{int(r.batch)}",
            (r.ai, r.attained_flops),
            xytext=(6, -3),
            textcoords="offset points",
            fontsize=6.5,
            color="0.3",
        )
        _point(
            ax, r.ai, r.attained_flops, marker, _gid("current", r), 6,
            color=color, markeredgecolor="0.15", markeredgewidth=0.6,
        )  # fmt: skip
    for kind, frame, face in (
        ("only-current", pairs.current_only, ONLY_COLOR),
        ("only-baseline", pairs.baseline_only, "none"),
    ):
        for r in frame.itertuples(index=False):
            _point(
                ax, r.ai, r.attained_flops, _marker(models, r.model), _gid(kind, r), 5,
                markerfacecolor=face, markeredgecolor=ONLY_COLOR, markeredgewidth=1.0,
            )  # fmt: skip
        counts[kind] = len(frame)
    return counts


def _legend(ax, models: list[str], counts: Mapping[str, int]) -> None:
    """Verdict (arrow colour), model (marker), the points' two ends, roofs."""
    verdicts = [
        Line2D([], [], color=VERDICT_COLORS[v], linewidth=2, label=VERDICT_LABELS[v])
        for v in VERDICT_COLORS
        if counts.get(v)
    ]
    model_items = [
        Line2D([], [], linestyle="none", marker=_marker(models, m), color="0.45", label=m)
        for m in models
    ]
    ends = [
        _key("baseline (arrow's tail)", markerfacecolor="none", markeredgecolor="0.3"),
        _key("this study (arrow's head)", color="0.3"),
    ]
    if counts.get("ai-source"):
        ends.append(
            Line2D(
                [],
                [],
                color="0.3",
                linestyle="--",
                label="AI of another source at each end\n(ncu / analytic): x moved by method",
            )
        )
    if counts.get("only-current"):
        ends.append(_key("in this study only (no baseline point)", color=ONLY_COLOR))
    if counts.get("only-baseline"):
        ends.append(
            _key("in the baseline only", markerfacecolor="none", markeredgecolor=ONLY_COLOR)
        )
    roofs = [
        Line2D([], [], color="0.2", linestyle=LINESTYLES[s], label=f"{s} peak (this study)")
        for s in roofline.ROOF_SOURCES
    ]
    sectioned_legend(
        ax,
        [
            ("Verdict (colour)", verdicts),
            ("Model", model_items),
            ("Points", ends),
            ("Roofs", roofs),
        ],
        fontsize=7.5,
    )


def _limits(pairs: Pairs, roof_pairs) -> tuple:
    xs, ys = [], []
    for frame, ai, fl in (
        (pairs.matched, "ai", "attained_flops"),
        (pairs.matched, "ai_base", "flops_base"),
        (pairs.current_only, "ai", "attained_flops"),
        (pairs.baseline_only, "ai", "attained_flops"),
    ):
        xs += [float(v) for v in frame[ai]] if len(frame) else []
        ys += [float(v) for v in frame[fl]] if len(frame) else []
    xs += [p.ridge for p in roof_pairs]
    ys += [p.compute.value for p in roof_pairs]
    return decade_limits(xs, ys)


def _panel(fig: Figure, n: int, i: int, env: str, pairs: Pairs, ceilings: Mapping, models):
    """One env's roofline with its arrows; its counts."""
    cur = pd.concat([pairs.matched, pairs.current_only], ignore_index=True)
    precisions = sorted(set(cur["precision"])) if len(cur) else []
    roof_pairs = roofline.roofs_to_draw(
        {env: ceilings}, {env: precisions}, {env: ceilings_path(env)}
    )
    ax = fig.add_subplot(n, 1, i + 1)
    ax.set_xscale("log")
    ax.set_yscale("log")
    xlim, ylim = _limits(pairs, roof_pairs)
    ax.set_xlim(*xlim)
    ax.set_ylim(*ylim)
    ax.set_xlabel(AXIS_X)
    ax.set_ylabel(AXIS_Y)
    ax.set_title(f"{env}: baseline -> this study", loc="left", fontsize=10)
    ax.grid(True, which="major", color="0.88", linewidth=0.6)
    ax.set_axisbelow(True)
    roof_pts = cur.rename(columns={"batch": "batch_size"})
    draw_roofs(ax, roof_pairs, False, roof_pts, batch_label_markers(roof_pts))
    counts = _draw_pairs(ax, pairs, models)
    _legend(ax, models, counts)
    return counts


def plot_compare_roofline(
    compare: pd.DataFrame,
    points: pd.DataFrame,
    baseline_points: pd.DataFrame,
    ceilings_by_env: Mapping[str, Mapping],
    out_png: str | os.PathLike | None,
    out_svg: str | os.PathLike | None,
    *,
    env_map: Mapping[str, str] | None = None,
    label: str = "baseline",
) -> dict:
    """The arrows plot, one panel per env of this study with ceilings; returns
    ``{"envs": [...], "arrows": n, "faster"/"slower"/"same": n, "only-current": n,
    "only-baseline": n, "ai-source": n}`` (``ai-source``: the dashed arrows, whose two AIs
    come from different sources)."""
    by_env = {
        env: p
        for env, p in pair_points(compare, points, baseline_points, env_map).items()
        if env in ceilings_by_env
    }
    if not ceilings_by_env:
        raise InputError("plot_compare_roofline needs the ceilings of at least one env")
    envs = sorted(by_env)
    models = sorted(
        {
            m
            for p in by_env.values()
            for f in (p.matched, p.current_only, p.baseline_only)
            for m in f["model"]
        }
    )
    totals: dict[str, int] = {}
    with rc_context(SVG_RC):
        fig = Figure(figsize=(10.5, 5.5 * max(1, len(envs))))
        fig.suptitle(f"Before and after: {label} -> this study", fontsize=11)
        for i, env in enumerate(envs):
            for k, v in _panel(
                fig, len(envs), i, env, by_env[env], ceilings_by_env[env], models
            ).items():
                totals[k] = totals.get(k, 0) + v
        if not envs:
            ax = fig.add_subplot()
            ax.set_axis_off()
            ax.text(0.5, 0.5, "no point of this study to compare", ha="center", va="center")
        save_figure(fig, out_png, out_svg)
    arrows = sum(totals.get(v, 0) for v in VERDICT_COLORS)
    return {"envs": envs, "arrows": arrows, **totals}
