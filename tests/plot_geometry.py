"""Where a drawn figure's texts and markers lie: for tests that labels stay legible."""

from __future__ import annotations

import math
import re

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.text import Text


def drawn_figure(monkeypatch, module, plot, *args):
    """Draw with ``plot`` and return its figure, rendered, instead of writing files."""
    figures = []
    monkeypatch.setattr(module, "save_figure", lambda fig, *_: figures.append(fig))
    plot(*args)
    (fig,) = figures
    FigureCanvasAgg(fig).draw()
    return fig


def text_outline(text, renderer) -> list[tuple[float, float]]:
    """The corners of a drawn text, turned with it (memory roof labels run along their
    diagonal; their upright bounding boxes would overlap where the texts do not)."""
    angle = text.get_rotation()
    text.set_rotation(0)
    box = Text.get_window_extent(text, renderer)  # the text alone, not a label's leader
    text.set_rotation(angle)
    corners = [(box.x0, box.y0), (box.x1, box.y0), (box.x1, box.y1), (box.x0, box.y1)]
    if not angle:
        return corners
    ox, oy = box.x0, (box.y0 + box.y1) / 2  # turned about its anchor: left, centre
    c, s = math.cos(math.radians(angle)), math.sin(math.radians(angle))
    return [
        (ox + (x - ox) * c - (y - oy) * s, oy + (x - ox) * s + (y - oy) * c) for x, y in corners
    ]


def outlines_meet(a, b) -> bool:
    """Whether two convex outlines overlap (no separating axis among their edges')."""
    for poly in (a, b):
        for (x0, y0), (x1, y1) in zip(poly, poly[1:] + poly[:1], strict=True):
            nx, ny = y0 - y1, x1 - x0
            pa = [x * nx + y * ny for x, y in a]
            pb = [x * nx + y * ny for x, y in b]
            if max(pa) <= min(pb) or max(pb) <= min(pa):
                return False
    return True


def label_clashes(fig, marker_gid: str) -> list[str]:
    """Pairs of the axes' texts that overlap, and texts over a marker (``marker_gid``:
    the gid pattern of the point markers)."""
    ax = fig.axes[0]
    renderer = fig.canvas.get_renderer()
    texts = [(t.get_text(), text_outline(t, renderer)) for t in ax.texts if t.get_text()]
    clashes = [
        f"{a!r} over {b!r}"
        for i, (a, outline_a) in enumerate(texts)
        for b, outline_b in texts[i + 1 :]
        if outlines_meet(outline_a, outline_b)
    ]
    for line in ax.lines:
        if not re.fullmatch(marker_gid, line.get_gid() or ""):
            continue
        cx, cy = ax.transData.transform((line.get_xdata()[0], line.get_ydata()[0]))
        r = line.get_markersize() / 2 * fig.dpi / 72 * 0.8  # the disc, not its corners
        marker = [(cx - r, cy - r), (cx + r, cy - r), (cx + r, cy + r), (cx - r, cy + r)]
        clashes += [f"{a!r} over {line.get_gid()}" for a, o in texts if outlines_meet(o, marker)]
    return clashes
