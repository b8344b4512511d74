"""The static figures' common kit (matplotlib, no pyplot state): the roofline axes and
their log-decade limits, a precision's colour, the above-roof flag, the sectioned
legend, SVG ids, and saving a figure as PNG and SVG atomically and reproducibly (SVG
text stays text, a fixed hash salt). The study's roofline and throughput plots, the
per-kernel plots, the comparison and the parity plot all draw with it.
"""

from __future__ import annotations

import math
import os

from matplotlib import rcParams
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.transforms import Bbox

from dnnroofline.io import atomic_path
from dnnroofline.study.precisions import COMPUTE_DTYPE, PRECISIONS

DPI = 150

AXIS_X = "Arithmetic intensity (FLOP/byte)"

AXIS_Y = "Attained performance (FLOP/s)"

ABOVE_ROOF_LABEL = "above roof: check peak"

ABOVE_ROOF_COLOR = "red"

PRECISION_COLORS = dict(
    zip(PRECISIONS, ["tab:blue", "tab:green", "tab:orange", "tab:purple"], strict=True)
)

# a roof named by its compute dtype (amp's fp16) takes its precision's colour
PRECISION_COLORS |= {COMPUTE_DTYPE[p]: c for p, c in PRECISION_COLORS.items()}

PRECISION_COLORS |= {"fp64": "tab:brown", "int8": "tab:olive"}

_SPARE_COLORS = ["tab:cyan", "tab:pink", "tab:gray", "black"]  # never red: red is the flag

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
    listed at the top of :mod:`~dnnroofline.plots.roofline` and
    :mod:`~dnnroofline.plots.throughput`, by which tests and browsers find an artist)."""
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
