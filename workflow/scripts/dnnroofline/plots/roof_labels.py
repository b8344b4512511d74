"""Roof and point labels for the static and the interactive rooflines (pure: no
plotting library).

Two envs of one machine (an eager and a compiled env, say) have roofs that coincide
(the datasheet) or nearly so (two measurements). Their labels must stay legible: a
roof the envs share is labelled once, naming them all, and close roofs' labels are
placed apart, never over a line. Roof labels keep clear of the points, and a point's
batch label keeps clear of the other points, their labels and the roof labels.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

#: A 7 pt label's box, with a little air (points; the interactive chart scales it).
LABEL_HEIGHT_PT = 8.0


def si(value: float, unit: str) -> str:
    """Decimal-prefixed value, e.g. ``si(1.23e12, "FLOP/s") == "1.23 TFLOP/s"``."""
    if not math.isfinite(value) or value == 0:
        return f"{value:g} {unit}"
    for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


@dataclass(frozen=True)
class RoofLabel:
    envs: list[str]  # the envs whose roof this is; the first one draws the label
    text: str
    prefer_above: bool


def compute_roof_labels(
    roofs: Iterable[tuple[str, str, str, float, float]], combined: bool
) -> dict[tuple[str, str, float], RoofLabel]:
    """One label per distinct compute roof, keyed (precision, source, compute roof), from
    ``(env, precision, source, compute roof, ridge)`` rows. Envs that share a roof share its
    label, the ridge shown as a range where their memory roofs differ. Of an env's roofs
    of one precision, the highest prefers its label above the line and the others below;
    a lone roof: measured below, datasheet above."""
    roofs = list(roofs)
    envs: dict[tuple[str, str, float], list[str]] = {}
    ridges: dict[tuple[str, str, float], list[float]] = {}
    for env, prec, source, compute_roof, ridge in roofs:
        envs.setdefault((prec, source, compute_roof), []).append(env)
        ridges.setdefault((prec, source, compute_roof), []).append(ridge)
    labels = {}
    for (prec, source, compute_roof), names in envs.items():
        lo, hi = (
            f"{min(ridges[(prec, source, compute_roof)]):.3g}",
            f"{max(ridges[(prec, source, compute_roof)]):.3g}",
        )
        peers = {r[3] for r in roofs if r[1] == prec and r[0] in names}
        labels[(prec, source, compute_roof)] = RoofLabel(
            envs=names,
            text=f"{', '.join(names) + ' ' if combined else ''}{prec} {source}: "
            f"{si(compute_roof, 'FLOP/s')} · ridge {lo if lo == hi else f'{lo}–{hi}'} FLOP/B",
            prefer_above=compute_roof >= max(peers) if len(peers) > 1 else source != "measured",
        )
    return labels


def memory_roof_labels(
    roofs: Iterable[tuple[str, str, float]], combined: bool
) -> dict[tuple[str, float], RoofLabel]:
    """One label per distinct memory roof, keyed (source, bandwidth), from
    ``(env, source, bandwidth)`` rows; above its diagonal, where no point can be."""
    envs: dict[tuple[str, float], list[str]] = {}
    for env, source, bw in roofs:
        envs.setdefault((source, bw), []).append(env)
    return {
        (source, bw): RoofLabel(
            envs=names,
            text=f"{', '.join(names) + ' ' if combined else ''}memory {source}: {si(bw, 'B/s')}",
            prefer_above=True,
        )
        for (source, bw), names in envs.items()
    }


def place_labels(
    lines: list[float], prefer_above: list[bool], height: float = LABEL_HEIGHT_PT
) -> list[float]:
    """Where to put each line's label (its centre, across the lines, in the lines' unit)
    so that no label overlaps another label or crosses a line. ``lines`` are parallel
    lines' positions (up is positive). Each label tries its preferred side first, right
    next to its line, then moves away from it half a label's height at a time."""
    half, clear = height / 2, height / 8
    placed: list[float] = []

    def free(c: float) -> bool:
        lo, hi = c - half, c + half
        return all(not (lo - clear < y < hi + clear) for y in lines) and all(
            abs(c - p) >= height for p in placed
        )

    out = [0.0] * len(lines)
    for i in sorted(range(len(lines)), key=lambda i: -lines[i]):
        sides = (1, -1) if prefer_above[i] else (-1, 1)
        candidates = (
            lines[i] + side * (half + clear + step * height / 2)
            for step in range(64)
            for side in sides
        )
        out[i] = next((c for c in candidates if free(c)), lines[i] + half + clear)
        placed.append(out[i])
    # The same free slots, handed out in the lines' order: a stack reads top to bottom
    # like the roofs it labels, and each label stays as close to its line as it can.
    by_line = sorted(range(len(lines)), key=lambda i: (-lines[i], i))
    for i, c in zip(by_line, sorted(out, reverse=True), strict=True):
        out[i] = c
    return out


@dataclass(frozen=True)
class Obstacle:
    """What a roof label must not cover: a marker with room for its label, or an AI
    range bar. x in data units (AI, a log axis), the rest in the plot's units (up positive)."""

    x_lo: float
    x_hi: float
    pad_left: float  # beyond x_lo: the marker's radius
    pad_right: float  # beyond x_hi: the marker's radius and its label
    y_lo: float
    y_hi: float


def right_edge_clear_of(
    xlo: float,
    xhi: float,
    width: float,
    labels: Iterable[tuple[float, float, float]],
    obstacles: Iterable[Obstacle],
    *,
    gap: float = 3.0,
    max_decades: int = 3,
) -> float:
    """The log x axis' right edge at which no compute roof label covers a point.

    Roof labels are right-aligned ``gap`` short of the right edge, so a point of high AI
    sits under them (an H100's AI of 100–300 FLOP/B under its fp32 and tf32 labels).
    ``labels``: ``(width, y_lo, y_hi)`` of each, in the plot's units; ``width`` is the
    axis' length in them. Widening the axis a decade moves the points left of the labels:
    the edge is ``xhi`` or the nearest decade beyond it (at most ``max_decades``) that
    clears every point, else the one that covers fewest."""
    labels, obstacles = list(labels), list(obstacles)
    best: tuple[int, float] | None = None
    for extra in range(max_decades + 1):
        hi = xhi * 10**extra
        scale = width / (math.log10(hi) - math.log10(xlo))

        def at(x: float, scale: float = scale) -> float:
            return (math.log10(x) - math.log10(xlo)) * scale

        covered = sum(
            1
            for w, lab_lo, lab_hi in labels
            for o in obstacles
            if at(o.x_lo) - o.pad_left < width - gap
            and at(o.x_hi) + o.pad_right > width - gap - w
            and o.y_lo < lab_hi
            and o.y_hi > lab_lo
        )
        if covered == 0:
            return hi
        if best is None or covered < best[0]:
            best = (covered, hi)
    assert best is not None
    return best[1]


@dataclass(frozen=True)
class Box:
    """An axis-aligned box in the plot's units (up positive)."""

    x0: float
    y0: float
    x1: float
    y1: float

    def overlaps(self, other: Box) -> bool:
        return (
            self.x0 < other.x1 and other.x0 < self.x1 and self.y0 < other.y1 and other.y0 < self.y1
        )


def meets_rotated(
    box: Box,
    origin: tuple[float, float],
    angle: float,
    along: tuple[float, float],
    across: tuple[float, float],
) -> bool:
    """Whether ``box`` meets the rectangle ``along`` x ``across`` of the frame turned by
    ``angle`` (radians) about ``origin``: a label written along a diagonal roof. The
    box is taken whole in the turned frame, so a near miss counts as a meeting."""
    ox, oy = origin
    c, s = math.cos(angle), math.sin(angle)
    corners = [(x - ox, y - oy) for x in (box.x0, box.x1) for y in (box.y0, box.y1)]
    us = [x * c + y * s for x, y in corners]
    vs = [-x * s + y * c for x, y in corners]
    return min(us) < along[1] and max(us) > along[0] and min(vs) < across[1] and max(vs) > across[0]


def rotated_boxes(
    origin: tuple[float, float],
    angle: float,
    along: tuple[float, float],
    across: tuple[float, float],
) -> list[Box]:
    """Axis-aligned boxes that cover the rectangle ``along`` x ``across`` of the frame
    turned by ``angle`` about ``origin``, a piece as long as it is wide at a time: one
    box around a long slanted label would block the whole square it spans."""
    ox, oy = origin
    c, s = math.cos(angle), math.sin(angle)
    (u0, u1), (v0, v1) = along, across
    n = max(1, math.ceil((u1 - u0) / max(v1 - v0, 1e-9)))
    boxes = []
    for k in range(n):
        a, b = u0 + (u1 - u0) * k / n, u0 + (u1 - u0) * (k + 1) / n
        pts = [(ox + u * c - v * s, oy + u * s + v * c) for u in (a, b) for v in (v0, v1)]
        xs, ys = [x for x, _ in pts], [y for _, y in pts]
        boxes.append(Box(min(xs), min(ys), max(xs), max(ys)))
    return boxes


@dataclass(frozen=True)
class DiagonalLabels:
    """Where the memory roofs' labels go: at ``x`` (data) on each diagonal, ``dys``
    across it, and boxes that cover them (plot units: see rotated_boxes)."""

    x: float
    dys: list[float]
    bounds: list[Box]


def place_diagonal_labels(
    frame: tuple[float, float],
    at: Callable[[float, float], tuple[float, float]],
    roofs: list[tuple[float, float, float, bool]],
    angle: float,
    obstacles: Iterable[Box],
    *,
    height: float,
    along: float,
) -> DiagonalLabels:
    """Labels of diagonal roofs ``(bandwidth, label width, the line's end x, prefers
    above)``, side by side across the diagonals (place_labels: log-log diagonals are
    parallel, ``angle`` on the plot) at one x: from where every diagonal is inside the
    frame (its lower-left corner, data) and doubling while a quarter of the shortest
    line is left, the first x at which no label meets an obstacle, else the first.
    ``at`` maps data (x, y) to the plot; a label starts ``along`` its line."""
    xlo, ylo = frame
    first = max(max(xlo * 1.25, ylo * 2.5 / bw) for bw, *_ in roofs)
    last = min(end for _, _, end, _ in roofs) / 4  # room left for the labels
    candidates = [first] + [first * 2**k for k in range(1, 12) if first * 2**k < last]
    obstacles = list(obstacles)
    c, s = math.cos(angle), math.sin(angle)
    across = [-x * s + y * c for x, y in (at(first, first * bw) for bw, *_ in roofs)]
    placed = place_labels(across, [above for *_, above in roofs], height)
    dys = [p - a for a, p in zip(across, placed, strict=True)]

    def spans(x: float):
        return [
            (at(x, x * bw), (along, along + w), (dy - height / 2, dy + height / 2))
            for (bw, w, *_), dy in zip(roofs, dys, strict=True)
        ]

    label_x = next(
        (
            x
            for x in candidates
            if not any(
                meets_rotated(b, origin, angle, a, acr)
                for origin, a, acr in spans(x)
                for b in obstacles
            )
        ),
        first,
    )
    bounds = [b for origin, a, acr in spans(label_x) for b in rotated_boxes(origin, angle, a, acr)]
    return DiagonalLabels(label_x, dys, bounds)


#: A point label's spots around its marker, as (side, level, step): nearest first; a step
#: moves the label one label height further up or down. Its own level on the right first.
POINT_LABEL_SPOTS = tuple(
    (side, level, step)
    for step in range(3)
    for side in ("right", "left")
    for level in ("above", "below")
)
Spot = tuple[str, str, int]


@dataclass(frozen=True)
class Marker:
    """A point's marker (centre and radius) and its label, in the plot's units (up
    positive); ``text=""``: a marker that is not labelled but must stay uncovered."""

    x: float
    y: float
    radius: float
    text: str = ""
    width: float = 0.0  # the label's
    below: bool = False  # its label prefers to go below it


@dataclass(frozen=True)
class LabelGaps:
    """Where a point label sits: its near corner ``x`` beyond the marker's edge and
    ``y`` beyond its centre (plus the radius past ``radius_y``), ``height`` tall."""

    x: float
    y: float
    height: float
    radius_y: float = 0.0  # markers larger than this push the label out vertically too


def label_offset(marker: Marker, spot: Spot, gaps: LabelGaps) -> tuple[float, float]:
    """The offset of the label's near corner from the marker's centre: (dx, dy), the
    near corner's alignment being left/right and bottom/top by ``spot``."""
    side, level, step = spot
    dx = marker.radius + gaps.x
    dy = gaps.y + max(0.0, marker.radius - gaps.radius_y) + step * gaps.height
    return (dx if side == "right" else -dx, dy if level == "above" else -dy)


def point_label_box(marker: Marker, spot: Spot, gaps: LabelGaps) -> Box:
    """The box of ``marker``'s label at ``spot``."""
    dx, dy = label_offset(marker, spot, gaps)
    x0 = marker.x + dx if dx > 0 else marker.x + dx - marker.width
    y0 = marker.y + dy if dy > 0 else marker.y + dy - gaps.height
    return Box(x0, y0, x0 + marker.width, y0 + gaps.height)


def _overlap(a: Box, b: Box) -> float:
    return max(0.0, min(a.x1, b.x1) - max(a.x0, b.x0)) * max(0.0, min(a.y1, b.y1) - max(a.y0, b.y0))


def place_point_labels(
    markers: list[Marker], blocked: Iterable[Box] = (), *, gaps: LabelGaps
) -> list[Spot | None]:
    """The spot of each marker's label: the first spot, its preferred level on the right
    first, that covers no marker, no label placed before it and no ``blocked`` box (the
    roof labels); where none is free, the one that covers least. None for a marker
    without a label, and for one that overlaps a labelled marker with the same label
    (two precisions of one batch that run alike share it). Labels are placed left to
    right, so a sweep's labels alternate as its batch sizes do."""
    boxes_of = [
        Box(m.x - m.radius, m.y - m.radius, m.x + m.radius, m.y + m.radius) for m in markers
    ]
    taken = list(blocked)
    spots: list[Spot | None] = [None] * len(markers)
    labelled: list[int] = []
    for i in sorted(range(len(markers)), key=lambda i: (markers[i].x, -markers[i].y)):
        m = markers[i]
        if not m.text or any(
            markers[j].text == m.text and boxes_of[j].overlaps(boxes_of[i]) for j in labelled
        ):
            continue
        preferred = ("right", "below" if m.below else "above", 0)
        order = [preferred, *(s for s in POINT_LABEL_SPOTS if s != preferred)]
        boxes = [point_label_box(m, s, gaps) for s in order]
        covered = [sum(_overlap(box, o) for o in (*boxes_of, *taken)) for box in boxes]
        k = covered.index(min(covered))  # the first free spot, if any is
        spots[i] = order[k]
        taken.append(boxes[k])
        labelled.append(i)
    return spots
