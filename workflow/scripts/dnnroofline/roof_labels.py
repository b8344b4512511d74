"""Roof labels for the static and the interactive rooflines (pure: no plotting library).

Two envs of one machine (an eager and a compiled env, say) have roofs that coincide
(the datasheet) or nearly so (two measurements). Their labels must stay legible: a
roof the envs share is labelled once, naming them all, and close roofs' labels are
placed apart, never over a line.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
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
    """One label per distinct compute roof, keyed (precision, source, peak), from
    ``(env, precision, source, peak, ridge)`` rows. Envs that share a roof share its
    label, the ridge shown as a range where their memory roofs differ. Of an env's roofs
    of one precision, the highest prefers its label above the line and the others below;
    a lone roof: measured below, datasheet above."""
    roofs = list(roofs)
    envs: dict[tuple[str, str, float], list[str]] = {}
    ridges: dict[tuple[str, str, float], list[float]] = {}
    for env, prec, source, peak, ridge in roofs:
        envs.setdefault((prec, source, peak), []).append(env)
        ridges.setdefault((prec, source, peak), []).append(ridge)
    labels = {}
    for (prec, source, peak), names in envs.items():
        lo, hi = (
            f"{min(ridges[(prec, source, peak)]):.3g}",
            f"{max(ridges[(prec, source, peak)]):.3g}",
        )
        peers = {r[3] for r in roofs if r[1] == prec and r[0] in names}
        labels[(prec, source, peak)] = RoofLabel(
            envs=names,
            text=f"{', '.join(names) + ' ' if combined else ''}{prec} {source}: "
            f"{si(peak, 'FLOP/s')} · ridge {lo if lo == hi else f'{lo}–{hi}'} FLOP/B",
            prefer_above=peak >= max(peers) if len(peers) > 1 else source != "measured",
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
