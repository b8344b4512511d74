"""Roofs and their labels on a matplotlib axes, for the static rooflines
(:mod:`dnnroofline.plots.roofline`, :mod:`dnnroofline.plots.kernels`).

Where each label goes is decided by :mod:`dnnroofline.plots.roof_labels` (pure geometry);
this module measures the texts, turns data coordinates into on-screen points (1/72
inch, the unit of label offsets) and draws. Compute roof labels sit apart from each
other, right-aligned at the AI axis' right edge, which moves right until they clear the
points; memory roof labels run along their diagonals, side by side, where they clear
the points; a point's label takes a free spot around its marker.
"""

from __future__ import annotations

import math
from dataclasses import replace

from matplotlib.font_manager import FontProperties
from matplotlib.textpath import TextToPath

from dnnroofline.plots.roof_labels import (
    LABEL_HEIGHT_PT,
    Box,
    DiagonalLabels,
    LabelGaps,
    Marker,
    Obstacle,
    Spot,
    label_offset,
    place_diagonal_labels,
    place_labels,
    place_point_labels,
    right_edge_clear_of,
)

LINESTYLES = {"measured": "-", "datasheet": "--", "ncu-theoretical": ":"}
ROOF_LABEL_PT = 7
ROOF_LABEL_GAP_PT = 3  # between a roof label's right end and the axis' right edge
MEMORY_LABEL_PT = 6.5
MEMORY_LABEL_DX_PT = 2  # a memory roof label starts this far along its line
BATCH_LABEL_PT = 6.5
#: A point label's near corner 3.5 pt beyond its marker's edge and 5 pt above or below
#: its centre (more for a marker larger than 3.5 pt), in a box of its font size + 1 pt.
POINT_LABEL_GAPS = LabelGaps(x=3.5, y=5.0, height=BATCH_LABEL_PT + 1, radius_y=3.5)


def to_points(ax, x: float, y: float) -> tuple[float, float]:
    """Data coordinates to on-screen points (1/72 inch), the unit of label offsets."""
    px, py = ax.transData.transform((x, y))
    scale = 72 / ax.figure.dpi
    return px * scale, py * scale


def diagonal_angle(ax, x: float, bw: float) -> float:
    """The on-screen angle (degrees) of a memory roof of bandwidth ``bw`` at ``x``."""
    p0 = ax.transData.transform((x, x * bw))
    p1 = ax.transData.transform((x * 10, x * 10 * bw))
    return math.degrees(math.atan2(p1[1] - p0[1], p1[0] - p0[0]))


def text_width_pt(text: str, size: float) -> float:
    """The width of ``text`` at font ``size`` (points) in the default font."""
    width, _, _ = TextToPath().get_text_width_height_descent(
        text, FontProperties(size=size), ismath=False
    )
    return width


# --------------------------------------------------------------------------- roofs


def draw_compute_roof(ax, compute_roof, x_start, x_end, *, color, source, gid, label, label_dy=0.0):
    """A horizontal compute roof, labelled at its right end, the label's centre
    ``label_dy`` points above the line (place_compute_roof_labels). ``label=None``
    draws the line alone."""
    ax.plot(
        [x_start, x_end],
        [compute_roof, compute_roof],
        color=color,
        linestyle=LINESTYLES[source],
        linewidth=1.6,
        gid=gid,
        zorder=2,
    )
    if label is None:
        return
    ax.annotate(
        label,
        (x_end, compute_roof),
        xytext=(-ROOF_LABEL_GAP_PT, label_dy),
        textcoords="offset points",
        ha="right",
        va="center",
        fontsize=ROOF_LABEL_PT,
        color=color,
    )


def draw_memory_roof(ax, bw, x_start, x_end, *, color, source, gid, label, label_x, label_dy):
    """A diagonal memory roof, labelled along the line at ``label_x`` if that lies left
    of the roof's end, the label's centre ``label_dy`` points across the line, up-left
    positive (place_memory_roof_labels). ``label=None`` draws the line alone."""
    ax.plot(
        [x_start, x_end],
        [x_start * bw, x_end * bw],
        color=color,
        linestyle=LINESTYLES[source],
        linewidth=1.4,
        gid=gid,
        zorder=2,
    )
    if label is None or label_x >= x_end:
        return
    angle = diagonal_angle(ax, label_x, bw)
    a = math.radians(angle)
    ax.annotate(
        label,
        (label_x, label_x * bw),
        xytext=(
            MEMORY_LABEL_DX_PT * math.cos(a) - label_dy * math.sin(a),
            MEMORY_LABEL_DX_PT * math.sin(a) + label_dy * math.cos(a),
        ),
        textcoords="offset points",
        rotation=angle,
        rotation_mode="anchor",
        va="center",
        fontsize=MEMORY_LABEL_PT,
        color=color,
    )


# --------------------------------------------------------------------------- placement


def place_compute_roof_labels(
    ax, labels: list[tuple[str, float, bool]], obstacles: list[Obstacle]
) -> tuple[float, list[float], list[Box]]:
    """Compute roof labels ``(text, compute roof, prefers above)``, right-aligned at the axis'
    right edge: placed apart from each other and from the lines (place_labels), and the
    right edge moved right, and set, until they clear ``obstacles`` (right_edge_clear_of).
    Returns the right edge, each label's centre offset from its line and their boxes
    (points, as :func:`to_points` gives them)."""
    (xlo, xhi), dpi = ax.get_xlim(), ax.figure.dpi
    heights = [to_points(ax, xhi, compute_roof)[1] for _, compute_roof, _ in labels]
    placed = place_labels(heights, [above for *_, above in labels])
    spans = [
        (text_width_pt(text, ROOF_LABEL_PT), c - LABEL_HEIGHT_PT / 2, c + LABEL_HEIGHT_PT / 2)
        for (text, _, _), c in zip(labels, placed, strict=True)
    ]
    width = ax.get_window_extent().width * 72 / dpi
    xhi = right_edge_clear_of(xlo, xhi, width, spans, obstacles, gap=ROOF_LABEL_GAP_PT)
    ax.set_xlim(xlo, xhi)
    right = to_points(ax, xhi, 1.0)[0] - ROOF_LABEL_GAP_PT
    boxes = [Box(right - w, lo, right, hi) for w, lo, hi in spans]
    return xhi, [c - y for y, c in zip(heights, placed, strict=True)], boxes


def place_memory_roof_labels(
    ax, roofs: list[tuple[str, float, float, bool]], obstacles: list[Obstacle] = ()
) -> DiagonalLabels:
    """Memory roof labels ``(text, bandwidth, the line's end x, prefers above)``, side
    by side across the diagonals where they clear ``obstacles`` (a point with room for
    its label): see place_diagonal_labels (points, as :func:`to_points` gives them)."""
    (xlo, _), (ylo, _) = ax.get_xlim(), ax.get_ylim()
    return place_diagonal_labels(
        (xlo, ylo),
        lambda x, y: to_points(ax, x, y),
        [(bw, text_width_pt(text, MEMORY_LABEL_PT), end, above) for text, bw, end, above in roofs],
        math.radians(diagonal_angle(ax, xlo, 1.0)),  # one angle: log-log diagonals are parallel
        [obstacle_box(ax, o) for o in obstacles],
        height=LABEL_HEIGHT_PT,
        along=MEMORY_LABEL_DX_PT,
    )


def obstacle_box(ax, o: Obstacle) -> Box:
    """An obstacle as a box in points, as :func:`to_points` gives them."""
    return Box(
        to_points(ax, o.x_lo, 1.0)[0] - o.pad_left,
        o.y_lo,
        to_points(ax, o.x_hi, 1.0)[0] + o.pad_right,
        o.y_hi,
    )


def marker_obstacles(ax, labelled: list[tuple[float, float, Marker]]) -> list[Obstacle]:
    """Each marker at data ``(x, y)``, with room for its label on its right (above or
    below: both are kept clear), as what a roof label must not cover (in points)."""
    out = []
    for x, y, m in labelled:
        py = to_points(ax, x, y)[1]
        reach = max(m.radius, POINT_LABEL_GAPS.y + POINT_LABEL_GAPS.height)
        right = m.radius + (POINT_LABEL_GAPS.x + m.width if m.text else 0.0)
        out.append(Obstacle(x, x, m.radius, right, py - reach, py + reach))
    return out


def place_point_labels_pt(ax, labelled: list[tuple[float, float, Marker]], blocked: list[Box]):
    """:func:`place_point_labels` for markers given at data coordinates ``(x, y,
    marker)`` (the marker's own x and y are ignored): their spots, in points."""
    markers = [replace(m, x=px, y=py) for (x, y, m) in labelled for px, py in [to_points(ax, x, y)]]
    return place_point_labels(markers, blocked, gaps=POINT_LABEL_GAPS)


def draw_point_label(ax, x: float, y: float, marker: Marker, spot: Spot | None, **text_kw):
    """A point's label at its spot (place_point_labels); None: none, or it shares
    another's. A label moved away from its point to stay clear is joined to it by a thin
    line."""
    if spot is None:
        return
    dx, dy = label_offset(marker, spot, POINT_LABEL_GAPS)
    leader = {"arrowstyle": "-", "color": "0.55", "linewidth": 0.5, "shrinkA": 0}
    ax.annotate(
        marker.text,
        (x, y),
        xytext=(dx, dy),
        textcoords="offset points",
        ha="left" if dx > 0 else "right",
        va="bottom" if dy > 0 else "top",
        arrowprops={**leader, "shrinkB": marker.radius} if spot[2] else None,
        **{"fontsize": BATCH_LABEL_PT, "color": "0.2", "zorder": 6, **text_kw},
    )
