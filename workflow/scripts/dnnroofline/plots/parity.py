"""The model's parity plot: predicted against measured step time of every checked point,
one marker per method (the model, model_loo, model_ceilings and the roofline baselines),
on log-log axes with the y = x line and a ±10% band around it. Step time, as the check
scores its errors (docs/model.md), drawn in milliseconds so that the ticks read as plain
numbers.

Reads the rows of ``results/prediction_check.csv``: ``method``, ``predicted_step_s``
and ``measured_step_s``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping

from matplotlib import rc_context
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from dnnroofline.aggregate.check import METHODS
from dnnroofline.plots.figure import SVG_RC, save_figure

#: The band drawn around y = x: predictions within ±10% of the measurement.
BAND = 0.10
#: The marker and colour of each method of the check (baselines first, the model last).
METHOD_STYLES: dict[str, tuple[str, str]] = dict(
    zip(
        METHODS,
        [
            ("v", "tab:gray"),
            ("^", "tab:orange"),
            ("s", "tab:purple"),
            ("P", "tab:green"),
            ("D", "tab:brown"),
            ("o", "tab:blue"),
        ],
        strict=True,
    )
)
_SPARE_MARKERS = ("X", "*", "h", "p")
IDENTITY_GID = "parity-identity"
BAND_GID = "parity-band"
AXIS_X = "Measured step time, ms (median of the ok runs)"
AXIS_Y = "Predicted step time, ms"
#: The columns drawn, in seconds; the axes show milliseconds.
COLUMNS = ("measured_step_s", "predicted_step_s")
MS = 1e3


def _positive(value: object) -> float | None:
    try:
        x = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) and x > 0 else None


def parity_pairs(rows: Iterable[Mapping]) -> dict[str, list[tuple[float, float]]]:
    """``{method: [(measured, predicted) step ms]}`` of the rows with both steps
    positive; methods in :data:`METHOD_STYLES` order, then any other in order seen."""
    found: dict[str, list[tuple[float, float]]] = {}
    for row in rows:
        measured, predicted = (_positive(row.get(c)) for c in COLUMNS)
        if measured is not None and predicted is not None:
            found.setdefault(str(row.get("method")), []).append((measured * MS, predicted * MS))
    order = [m for m in METHOD_STYLES if m in found] + [m for m in found if m not in METHOD_STYLES]
    return {m: found[m] for m in order}


def _limits(pairs: dict[str, list[tuple[float, float]]]) -> tuple[float, float]:
    """The same span on both axes (y = x is the diagonal), a margin around every step:
    tight, so that the ±10% band stays visible."""
    values = [v for pts in pairs.values() for pair in pts for v in pair] or [1.0, 10.0]
    return min(values) / 1.5, max(values) * 1.5


def parity_figure(rows: Iterable[Mapping], title: str = "Predicted against measured") -> Figure:
    """The parity plot of the check's rows."""
    pairs = parity_pairs(rows)
    lo, hi = _limits(pairs)
    fig = Figure(figsize=(8.4, 6.0))
    ax = fig.add_subplot()
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_aspect("equal")
    for axis in (ax.xaxis, ax.yaxis):  # 1-2-5 ticks in plain numbers: the span is short
        axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}" if v >= 10 else f"{v:g}"))
        axis.set_minor_formatter(NullFormatter())
    ax.set_xlabel(AXIS_X)
    ax.set_ylabel(AXIS_Y)
    ax.set_title(title)
    ax.grid(True, which="major", color="0.88", linewidth=0.6)
    ax.set_axisbelow(True)
    ax.fill_between(
        [lo, hi],
        [lo * (1 - BAND), hi * (1 - BAND)],
        [lo * (1 + BAND), hi * (1 + BAND)],
        color="tab:green",
        alpha=0.25,
        linewidth=0,
        gid=BAND_GID,
        label=f"±{BAND:.0%} of measured",
    )
    ax.plot([lo, hi], [lo, hi], color="black", linewidth=1.0, gid=IDENTITY_GID, label="y = x")
    spare = iter(_SPARE_MARKERS * 4)
    for method, pts in pairs.items():
        marker, color = METHOD_STYLES.get(method) or (next(spare), "tab:red")
        ax.plot(
            [m for m, _ in pts],
            [p for _, p in pts],
            linestyle="none",
            marker=marker,
            markersize=7,
            markerfacecolor="none" if method != "model" else color,
            markeredgecolor=color,
            gid=f"parity-{method}",
            label=f"{method} ({len(pts)})",
        )
    if not pairs:
        ax.text(0.5, 0.5, "no measured point checked yet", transform=ax.transAxes, ha="center")
    # outside the axes: no marker hides behind it
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize="small", frameon=False)
    return fig


def plot_parity(
    rows: Iterable[Mapping], out_svg: str | os.PathLike, out_png: str | os.PathLike | None = None
) -> dict[str, int]:
    """Write the parity plot (SVG, PNG where asked); ``{method: points drawn}``."""
    rows = list(rows)
    with rc_context(SVG_RC):
        fig = parity_figure(rows)
        save_figure(fig, out_png, out_svg)
    return {m: len(p) for m, p in parity_pairs(rows).items()}
