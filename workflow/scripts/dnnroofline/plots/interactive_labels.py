"""Where the interactive roofline's labels go, in pixels of the chart as first drawn
(up positive; Vega's y grows downwards, so rows carry ``dy`` negated). A zoom keeps
each label at its offset from its anchor.

The geometry is :mod:`dnnroofline.plots.roof_labels`', as in the static plots: compute roof
labels apart, right-aligned at the right edge, which moves right until they clear the
points; memory roof labels along their diagonals, side by side, where they clear the
points; a point's batch label at a free spot, shared by points of one batch that
coincide. Text widths are estimated from the character count (no font metrics here).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import pandas as pd

from dnnroofline.formatting import isnum
from dnnroofline.plots.roof_labels import (
    Box,
    LabelGaps,
    Marker,
    Obstacle,
    RoofLabel,
    label_offset,
    place_diagonal_labels,
    place_labels,
    place_point_labels,
    right_edge_clear_of,
)

WIDTH = 720
HEIGHT = 440
LABEL_FONT_PX = 10  # roof labels
LABEL_DX_PX = 4  # a compute roof label's right end short of the right edge
LABEL_HEIGHT_PX = 13.0  # a 10 px label's box, with a little air
LABEL_CHAR_PX = 5.2  # a 10 px sans-serif label's mean character width, a little over
POINT_RADIUS_PX = 6.0  # a point mark of area 110 px², with its stroke
MEMORY_LABEL_ALONG_PX = 4.0  # a memory roof label starts this far along its line
BATCH_LABEL_PX = 9  # a point's batch label: its font size, and where it sits
BATCH_LABEL_GAPS = LabelGaps(x=2.0, y=6.0, height=11.0, radius_y=POINT_RADIUS_PX)
BATCH_CHAR_PX = LABEL_CHAR_PX * BATCH_LABEL_PX / LABEL_FONT_PX


@dataclass(frozen=True)
class PixelFrame:
    """The chart's log-log axes: data to pixels."""

    xlo: float
    xhi: float
    ylo: float
    yhi: float

    def x(self, v: float) -> float:
        return WIDTH * math.log10(v / self.xlo) / math.log10(self.xhi / self.xlo)

    def y(self, v: float) -> float:
        return HEIGHT * math.log10(v / self.ylo) / math.log10(self.yhi / self.ylo)

    @property
    def diagonal_angle(self) -> float:
        """The angle (radians) of every memory roof: log-log diagonals are parallel."""
        return math.atan2(
            HEIGHT / math.log10(self.yhi / self.ylo), WIDTH / math.log10(self.xhi / self.xlo)
        )


@dataclass(frozen=True)
class RoofLabelLayout:
    xhi: float  # the right edge, moved right until the labels clear the points
    dys: list[float]  # each label's centre above its line
    boxes: list[Box]


def _batch_text(batch) -> str:
    return f"bs{int(batch)}"


def layout_roof_labels(
    roof_labels: Mapping[tuple, RoofLabel], frame: PixelFrame, pts: pd.DataFrame
) -> RoofLabelLayout:
    """Compute roof labels (keyed (precision, source, peak)) placed apart from each
    other and from the lines, and the right edge that clears the points and their AI
    bars (``frame.xhi`` or up to 3 decades beyond)."""
    heights = [frame.y(peak) for *_, peak in roof_labels]
    placed = place_labels(
        heights, [lab.prefer_above for lab in roof_labels.values()], height=LABEL_HEIGHT_PX
    )
    spans = [
        (LABEL_CHAR_PX * len(lab.text), c - LABEL_HEIGHT_PX / 2, c + LABEL_HEIGHT_PX / 2)
        for lab, c in zip(roof_labels.values(), placed, strict=True)
    ]
    obstacles = [
        Obstacle(
            min(r.ai, r.ai_low) if isnum(r.ai_low) else r.ai,
            max(r.ai, r.ai_high) if isnum(r.ai_high) else r.ai,
            POINT_RADIUS_PX,
            POINT_RADIUS_PX,
            frame.y(r.flops) - POINT_RADIUS_PX,
            frame.y(r.flops) + POINT_RADIUS_PX,
        )
        for r in pts.itertuples(index=False)
    ]
    xhi = right_edge_clear_of(frame.xlo, frame.xhi, WIDTH, spans, obstacles, gap=LABEL_DX_PX)
    right = WIDTH - LABEL_DX_PX
    boxes = [Box(right - w, lo, right, hi) for w, lo, hi in spans]
    return RoofLabelLayout(xhi, [c - y for y, c in zip(heights, placed, strict=True)], boxes)


def point_boxes(pts: pd.DataFrame, frame: PixelFrame) -> list[Box]:
    """Each point's mark with room for its batch label on its right: what a memory roof
    label must not cover."""
    reach = max(POINT_RADIUS_PX, BATCH_LABEL_GAPS.y + BATCH_LABEL_GAPS.height)
    boxes = []
    for ai, f, b in zip(pts.get("ai", []), pts.get("flops", []), pts.get("batch", []), strict=True):
        x, y = frame.x(ai), frame.y(f)
        right = POINT_RADIUS_PX + BATCH_LABEL_GAPS.x + BATCH_CHAR_PX * len(_batch_text(b))
        boxes.append(Box(x - POINT_RADIUS_PX, y - reach, x + right, y + reach))
    return boxes


def memory_label_rows(
    mem_labels: Mapping[tuple[str, float], RoofLabel],
    ends: Mapping[tuple[str, float], float],
    frame: PixelFrame,
    pts: pd.DataFrame,
) -> tuple[list[dict], list[Box]]:
    """One row per memory roof label (keyed (source, bandwidth); ``ends``: the x where
    its line ends), written along its diagonal at the x where the labels clear the
    points, with its pixel offset and angle; and the boxes that cover the labels."""
    angle = frame.diagonal_angle
    diag = place_diagonal_labels(
        (frame.xlo, frame.ylo),
        lambda x, y: (frame.x(x), frame.y(y)),
        [
            (bw, LABEL_CHAR_PX * len(lab.text), ends[key], lab.prefer_above)
            for key, lab in mem_labels.items()
            for bw in [key[1]]
        ],
        angle,
        point_boxes(pts, frame),
        height=LABEL_HEIGHT_PX,
        along=MEMORY_LABEL_ALONG_PX,
    )
    along = MEMORY_LABEL_ALONG_PX
    rows = [
        {
            "x": diag.x,
            "y": diag.x * bw,
            "text": lab.text,
            "dx": along * math.cos(angle) - up * math.sin(angle),
            "dy": -(along * math.sin(angle) + up * math.cos(angle)),  # Vega: down
            "angle": -math.degrees(angle),  # Vega: clockwise
        }
        for ((_, bw), lab), up in zip(mem_labels.items(), diag.dys, strict=True)
    ]
    return rows, diag.bounds


def batch_label_frame(pts: pd.DataFrame, frame: PixelFrame, blocked: list[Box]) -> pd.DataFrame:
    """One row per batch label to draw (``bs{batch}`` at its point, with its pixel
    offsets and alignment): each at a spot clear of the points, the other labels and
    ``blocked`` (the roof labels); points of one batch that coincide share one label."""
    markers = [
        Marker(
            frame.x(ai),
            frame.y(f),
            POINT_RADIUS_PX,
            _batch_text(b),
            BATCH_CHAR_PX * len(_batch_text(b)) + 2,
        )
        for ai, f, b in zip(pts["ai"], pts["flops"], pts["batch"], strict=True)
    ]
    spots = place_point_labels(markers, blocked, gaps=BATCH_LABEL_GAPS)
    rows = []
    for ai, f, m, spot in zip(pts["ai"], pts["flops"], markers, spots, strict=True):
        if spot is None:
            continue
        dx, dy = label_offset(m, spot, BATCH_LABEL_GAPS)
        rows.append(
            {
                "ai": ai,
                "flops": f,
                "label": m.text,
                "align": "left" if dx > 0 else "right",
                "dx": dx,
                "baseline": "bottom" if dy > 0 else "top",
                "dy": -dy,  # Vega's y grows downwards
            }
        )
    return pd.DataFrame(rows, columns=["ai", "flops", "label", "align", "dx", "baseline", "dy"])
