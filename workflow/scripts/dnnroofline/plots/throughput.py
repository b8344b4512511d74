"""The throughput plot: images/s against batch size, per model, one curve per env and
precision (medians, min..max bars over repeats, a cross where every run of a batch
failed), drawn with the static figures' kit (:mod:`dnnroofline.plots.figure`). Its
artists' SVG ids:

- ``throughput-{env}-{model}-{precision}``           one throughput curve (markers: medians)
- ``errorbar-{env}-{model}-{precision}``             its min..max bars over repeats
- ``failed-{env}-{model}-{precision}-bs{batch}``     a batch where every run failed
"""

from __future__ import annotations

import math
import os

import numpy as np
import pandas as pd
from matplotlib import rc_context
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FixedLocator, NullLocator, ScalarFormatter
from matplotlib.transforms import blended_transform_factory

from dnnroofline.aggregate.metrics import group_summary
from dnnroofline.plots.figure import (
    ABOVE_ROOF_COLOR,
    SVG_RC,
    artist_gid,
    precision_color,
    save_figure,
)

ENV_LINESTYLES = ["-", "--", ":", "-."]


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
