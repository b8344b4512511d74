"""ncu plots of one configuration: the hierarchical roofline and the per-kernel roofline.

Drawn with matplotlib (no pyplot state) and written as PNG and SVG atomically, like
:mod:`dnnroofline.plots.roofline`. Artists carry ``gid`` attributes (SVG ``id``):

- ``point-{env}-{model}-{precision}-bs{batch}-{level}``  the config's point at l1, l2, dram
- ``hier-{env}-{model}-{precision}-bs{batch}``            the line joining its levels
- ``kernel-{i}``                                          kernel ``i`` of ncu's ``kernels`` list
- ``above-roof-...``                                      red ring: above its roof
- ``roof-{env}-compute-{precision}-{source}``             compute roof
- ``roof-{env}-memory-{level}-{source}``                  bandwidth roof (level dram, l2, l1)

Measured roofs solid, datasheet roofs dashed. The data come from
:mod:`dnnroofline.ncu.kernels`.
"""

from __future__ import annotations

import math
import os
import textwrap
from collections.abc import Mapping, Sequence

from matplotlib import rc_context
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from dnnroofline.errors import InputError
from dnnroofline.estimate import roofline
from dnnroofline.ncu.above_roof import NAMED_ON_PLOT
from dnnroofline.ncu.kernels import (
    CACHE_LEVELS,
    KERNEL_PATHS,
    LEVEL_NAMES,
    LEVELS,
    NCU_THEORETICAL,
    PATH_LABELS,
    HierarchicalPoint,
    KernelSet,
    Roofs,
    compute_roofs_for,
    hierarchical_roof_at,
    kernel_roof_at,
    marker_area,
    short_name,
)
from dnnroofline.plots.figure import (
    SVG_RC,
    above_roof_handle,
    artist_gid,
    decade_limits,
    draw_above_roof_ring,
    log_axes,
    precision_color,
    save_figure,
    sectioned_legend,
)
from dnnroofline.plots.roof_artists import (
    BATCH_LABEL_PT,
    LINESTYLES,
    draw_compute_roof,
    draw_memory_roof,
    draw_point_label,
    marker_obstacles,
    place_compute_roof_labels,
    place_memory_roof_labels,
    place_point_labels_pt,
    text_width_pt,
)
from dnnroofline.plots.roof_labels import Box, Marker, compute_roof_labels, si
from dnnroofline.study.precisions import TENSOR_PRECISIONS

AXIS_Y_STEP = "Attained performance (FLOP/s): ncu FLOPs / timed median step"
AXIS_Y_KERNEL = "Kernel performance (FLOP/s): ncu FLOPs / ncu kernel time"
LEVEL_COLORS = {"l1": "tab:cyan", "l2": "tab:olive", "dram": "0.2"}
LEVEL_MARKERS = {"l1": "o", "l2": "s", "dram": "^"}
PATH_COLORS = {"fp32": "tab:blue", "fp16": "tab:cyan", "fp64": "tab:brown"}
#: Kernels labelled with their (short) name: the largest by time share.
LABEL_TOP = 5
KERNEL_LABEL_PT = 6
LEVEL_MARKER_PT = 8


def path_color(path: str, precision: str) -> str:
    """Colour of a kernel's FLOP path; tensor kernels take the colour of the run's
    tensor-core precision (its compute roof), fp32 runs' tensor kernels that of tf32."""
    if path == "tensor":
        return precision_color(precision if precision in TENSOR_PRECISIONS else "tf32")
    return PATH_COLORS.get(path, "tab:gray")


def _paired_dram(dram: Mapping[str, float], source: str) -> str:
    """The DRAM roof a compute roof of ``source`` meets: its own source's, else the
    preferred one there is (ncu's theoretical peak last)."""
    return roofline.paired_source(dram, source, (*roofline.ROOF_SOURCES, NCU_THEORETICAL))


def _roof_name(level: str, source: str) -> str:
    """A bandwidth roof's label: ncu's DRAM peak is the datasheet figure, said so."""
    if source == NCU_THEORETICAL:
        return f"{LEVEL_NAMES[level]} " + (
            "datasheet figure (ncu: bus width x memory clock)"
            if level == "dram"
            else "ncu theoretical peak"
        )
    return f"{LEVEL_NAMES[level]} {source}"


def _memory_roofs(ax, env, roofs: list[tuple[str, str, float, float]], obstacles) -> list[Box]:
    """Diagonal roofs ``(level, source, bandwidth, x_end)`` from the left edge, each
    labelled, the labels side by side across the diagonals and clear of ``obstacles``
    (place_memory_roof_labels): measured ones under their line, the others over it.
    Returns the boxes around the labels (points)."""
    xlo = ax.get_xlim()[0]
    texts = [f"{_roof_name(level, source)}: {si(bw, 'B/s')}" for level, source, bw, _ in roofs]
    diag = place_memory_roof_labels(
        ax,
        [
            (text, bw, x_end, source != "measured")
            for text, (_, source, bw, x_end) in zip(texts, roofs, strict=True)
        ],
        obstacles,
    )
    for text, (level, source, bw, x_end), dy in zip(texts, roofs, diag.dys, strict=True):
        draw_memory_roof(
            ax,
            bw,
            xlo,
            x_end,
            color=LEVEL_COLORS[level],
            source=source,
            gid=artist_gid("roof", env, "memory", level, source),
            label=text,
            label_x=diag.x,
            label_dy=dy,
        )
    return diag.bounds


def _compute_roofs(ax, env, roofs: list[tuple[str, str, float, float]], obstacles) -> list[Box]:
    """Horizontal roofs ``(precision, source, compute roof, ridge)`` from their ridge to the right
    edge, labelled there apart from each other; the right edge moves right until the
    labels clear ``obstacles``. Returns the labels' boxes (points)."""
    labels = compute_roof_labels(
        ((env, prec, source, compute_roof, ridge) for prec, source, compute_roof, ridge in roofs),
        combined=False,
    )
    xhi, dys, boxes = place_compute_roof_labels(
        ax, [(lab.text, key[2], lab.prefer_above) for key, lab in labels.items()], obstacles
    )
    label_dy = dict(zip(labels, dys, strict=True))
    for prec, source, compute_roof, ridge in roofs:
        draw_compute_roof(
            ax,
            compute_roof,
            min(ridge, xhi),
            xhi,
            color=precision_color(prec),
            source=source,
            gid=artist_gid("roof", env, "compute", prec, source),
            label=labels[(prec, source, compute_roof)].text,
            label_dy=label_dy[(prec, source, compute_roof)],
        )
    return boxes


def _note(text: str) -> Line2D:
    """A legend line with no handle: a remark."""
    return Line2D([], [], linestyle="none", marker="", label=text)


def _message(ax, text: str):
    ax.text(
        0.5,
        0.5,
        text,
        transform=ax.transAxes,
        ha="center",
        va="center",
        color="0.35",
        fontsize=9,
        wrap=True,
    )


# --------------------------------------------------------------------------- hierarchical


def _unmeasurable_note(ax, level: str, reason: str, row: int, gid: str) -> None:
    """A boxed remark in the lower right of the plot (below the compute roofs, right of
    the diagonals, where no point of a step lies): this level has no point, and why."""
    text = "\n".join(
        textwrap.wrap(f"{LEVEL_NAMES[level]}: not measurable by counters. {reason}", 62)
    )
    ax.text(
        0.985,
        0.03 + 0.2 * row,
        text,
        transform=ax.transAxes,
        ha="right",
        va="bottom",
        multialignment="left",
        fontsize=7,
        color="0.15",
        bbox={"boxstyle": "round,pad=0.4", "facecolor": "white", "edgecolor": LEVEL_COLORS[level]},
        gid=gid,
        zorder=6,
    )


def _hierarchical_frame(point: HierarchicalPoint, roofs: Roofs):
    """(the precision's compute roofs {source: FLOP/s}, each level's bandwidth roofs, axis
    limits); refuses a precision without a compute peak."""
    compute_roofs = compute_roofs_for(roofs, point.precision)
    if not compute_roofs:
        have = sorted({p for p, _ in roofs.compute})
        raise InputError(
            f"env {point.env!r} has no compute peak for precision {point.precision!r} "
            f"(ceilings have {have}); the roofline is never drawn against a guess"
        )
    top_roof = max(compute_roofs.values())
    # a level no counter can measure gets no roof either: nothing to hold against it
    mem = {lv: {} if lv in point.unmeasurable else roofs.memory.get(lv, {}) for lv in LEVELS}
    ridges = [top_roof / bw for lv in LEVELS for bw in mem[lv].values()]
    ais = [a for a in point.ai.values() if a is not None]
    ys = list(compute_roofs.values()) + ([point.attained_flops] if point.attained_flops else [])
    # keep the diagonal roofs inside the frame at the low end
    ys += [min(ais + ridges) / 4 * min(bw for lv in LEVELS for bw in mem[lv].values())]
    xlim, (ylo, yhi) = decade_limits(ais + ridges, ys)
    ylo = max(ylo, min(ys) / 10)
    return compute_roofs, mem, xlim, (10 ** math.floor(math.log10(ylo)), yhi)


def _level_markers(point: HierarchicalPoint) -> dict[str, tuple[float, float, Marker]]:
    """The point at each level with an AI, labelled with that AI (none without a timed step)."""
    if point.status != "ok" or point.attained_flops is None:
        return {}
    out = {}
    for lv in LEVELS:
        if point.ai[lv] is not None:
            text = f"{LEVEL_NAMES[lv]} AI {point.ai[lv]:.3g}"
            marker = Marker(
                0.0, 0.0, LEVEL_MARKER_PT / 2, text, text_width_pt(text, BATCH_LABEL_PT)
            )
            out[lv] = (point.ai[lv], point.attained_flops, marker)
    return out


def _hierarchical_roofs(ax, point: HierarchicalPoint, compute_roofs, mem, markers) -> list[Box]:
    """The precision's compute roofs and each level's bandwidth roofs; the labels' boxes."""
    top_roof = max(compute_roofs.values())
    dram = mem["dram"]
    boxes = _compute_roofs(
        ax,
        point.env,
        [
            (point.precision, source, compute_roof, compute_roof / dram[_paired_dram(dram, source)])
            for source, compute_roof in sorted(compute_roofs.items())
        ],
        marker_obstacles(ax, markers),
    )
    return boxes + _memory_roofs(
        ax,
        point.env,
        [
            (lv, source, bw, top_roof / bw)
            for lv in LEVELS
            for source, bw in sorted(mem[lv].items())
        ],
        marker_obstacles(ax, markers),
    )


def _draw_levels(ax, point: HierarchicalPoint, roofs: Roofs, markers, spots) -> tuple:
    """The point at each level, joined by a line, rings on those above their roof; a
    message instead where the capture failed or no run timed the step.
    Returns (levels drawn, number above their roof)."""
    tag = (point.env, point.model, point.precision, f"bs{point.batch}")
    if point.status != "ok":
        _message(ax, f"ncu capture {point.status}: {point.message or 'no message'}")
        return [], 0
    if point.attained_flops is None:
        lines = ", ".join(
            f"{LEVEL_NAMES[lv]} AI {point.ai[lv]:.3g}" for lv in LEVELS if point.ai[lv]
        )
        _message(ax, "no successful timed run: attained FLOP/s unknown\n" + lines)
        return [], 0
    y = point.attained_flops
    if len(markers) > 1:
        xs = [x for x, _, _ in markers.values()]
        ax.plot(
            xs, [y] * len(xs), color="0.5", linewidth=0.8, gid=artist_gid("hier", *tag), zorder=4
        )
    n_above = 0
    for lv, (ai, _, marker) in markers.items():
        ax.plot(
            [ai],
            [y],
            linestyle="none",
            marker=LEVEL_MARKERS[lv],
            markersize=LEVEL_MARKER_PT,
            color=LEVEL_COLORS[lv],
            markeredgecolor="0.1",
            markeredgewidth=0.6,
            gid=artist_gid("point", *tag, lv),
            zorder=5,
        )
        draw_point_label(ax, ai, y, marker, spots[lv])
        r = hierarchical_roof_at(roofs, point.precision, lv, ai)
        if r is not None and roofline.is_above_roof(y, r):
            n_above += 1
            draw_above_roof_ring(ax, ai, y, artist_gid("above-roof", *tag, lv))
    return list(markers), n_above


def _hierarchical_roof_items(mem, precision: str) -> list[Line2D]:
    """The legend's "Roofs" section: line styles, the levels' roofs, the precision."""
    items = [
        Line2D([], [], color="0.2", linestyle=LINESTYLES[s], label=f"{s} peak")
        for s in roofline.ROOF_SOURCES
    ]
    if any(NCU_THEORETICAL in mem[lv] for lv in LEVELS):
        items.append(
            Line2D(
                [],
                [],
                color="0.2",
                linestyle=LINESTYLES[NCU_THEORETICAL],
                label="ncu theoretical: peak/cycle x measured clock",
            )
        )
    items += [
        Line2D([], [], color=LEVEL_COLORS[lv], linewidth=2, label=f"{LEVEL_NAMES[lv]} roof")
        for lv in LEVELS
        if mem[lv]
    ]
    items.append(Line2D([], [], color=precision_color(precision), linewidth=3, label=precision))
    return items


def _hierarchical_notes(point: HierarchicalPoint, roofs: Roofs, mem, n_above: int) -> list:
    """The legend's "Notes": the roofs' counters, missing roofs and counters, the timing."""
    missing_roofs = [
        LEVEL_NAMES[lv] for lv in CACHE_LEVELS if not mem[lv] and lv not in point.unmeasurable
    ]
    notes = [
        _note(text)
        for key, text in sorted(roofs.notes.items())
        if key.split(":")[0] not in point.unmeasurable
    ]
    if missing_roofs:
        notes.append(_note(f"{' and '.join(missing_roofs)} bandwidth roofs: not measured"))
        notes.append(_note("  (no cache_roofs in ceilings.json)"))
    for lv in LEVELS:
        if point.status == "ok" and point.bytes[lv] is None and lv not in point.unmeasurable:
            notes.append(_note(f"{LEVEL_NAMES[lv]}: no {point.counters[lv]} in the capture"))
    notes.append(_note("counts: ncu (one step); time: timed runs' median"))
    if point.step_s:
        notes.append(_note(f"median step {point.step_s * 1e3:.4g} ms"))
    if n_above:
        notes.append(above_roof_handle())
    return notes


def _hierarchical_legend(ax, point: HierarchicalPoint, roofs: Roofs, mem, n_above: int):
    level_items = [
        Line2D(
            [],
            [],
            linestyle="none",
            marker=LEVEL_MARKERS[lv] if lv not in point.unmeasurable else "x",
            color=LEVEL_COLORS[lv],
            markeredgecolor="0.1",
            label=f"{LEVEL_NAMES[lv]}: "
            + (
                "not measurable by counters"
                if lv in point.unmeasurable
                else f"FLOPs / {point.counters.get(lv, '?')}"
            ),
        )
        for lv in LEVELS
    ]
    sectioned_legend(
        ax,
        [
            ("Memory level", level_items),
            ("Roofs", _hierarchical_roof_items(mem, point.precision)),
            ("Notes", _hierarchical_notes(point, roofs, mem, n_above)),
        ],
    )


def plot_hierarchical(
    point: HierarchicalPoint,
    roofs: Roofs,
    out_png: str | os.PathLike | None,
    out_svg: str | os.PathLike | None,
    title: str | None = None,
) -> dict:
    """The config's point at its L1, L2 and DRAM arithmetic intensities, one attained
    FLOP/s, under the precision's compute roofs and each level's bandwidth roofs.

    Returns ``{"points": n, "levels": [...], "above_roof": n, "cache_roofs": n}``.
    """
    compute_roofs, mem, xlim, ylim = _hierarchical_frame(point, roofs)
    title = title or (
        f"Hierarchical roofline: {point.env} {point.model} {point.precision} "
        f"bs{point.batch} (ncu counts)"
    )
    with rc_context(SVG_RC):
        fig = Figure(figsize=(10.5, 6.5))
        ax = log_axes(fig, title, AXIS_Y_STEP, xlim, ylim, fontsize=10)
        markers = _level_markers(point)
        boxes = _hierarchical_roofs(ax, point, compute_roofs, mem, list(markers.values()))
        spots = dict(
            zip(markers, place_point_labels_pt(ax, list(markers.values()), boxes), strict=True)
        )
        levels_drawn, n_above = _draw_levels(ax, point, roofs, markers, spots)
        tag = (point.env, point.model, point.precision, f"bs{point.batch}")
        for i, lv in enumerate(lv for lv in LEVELS if lv in point.unmeasurable):
            _unmeasurable_note(
                ax, lv, point.unmeasurable[lv], i, artist_gid("unmeasurable", *tag, lv)
            )
        _hierarchical_legend(ax, point, roofs, mem, n_above)
        save_figure(fig, out_png, out_svg)
    return {
        "points": len(levels_drawn),
        "levels": levels_drawn,
        "above_roof": n_above,
        "cache_roofs": sum(len(mem[lv]) for lv in CACHE_LEVELS),
    }


# --------------------------------------------------------------------------- per kernel

#: The ring of a kernel that beats its class's measured roof (that roof is too low).
_BEATS_MEASURED_RING = dict(
    linestyle="none",
    marker="s",
    markersize=13,
    markerfacecolor="none",
    markeredgecolor="darkorange",
    markeredgewidth=1.6,
)


def _beats_measured_notes(beats: Sequence[Mapping]) -> list[Line2D]:
    """Legend lines: the ring, the measured roof(s) beaten and the fastest kernels by name."""
    if not beats:
        return []
    roofs = ", ".join(
        f"{prec} {si(roof, 'FLOP/s')}"
        for prec, roof in dict.fromkeys((k["roof_precision"], k["roof"]) for k in beats)
    )
    lines = [
        Line2D(
            [],
            [],
            label=f"{len(beats)} above the measured roof ({roofs}): roof too low",
            **{**_BEATS_MEASURED_RING, "markersize": 9},
        )
    ]
    for k in beats[:NAMED_ON_PLOT]:
        lines.append(_note(f"  {short_name(k['name'], 34)}: {si(k['flops'], 'FLOP/s')}"))
    if len(beats) > NAMED_ON_PLOT:
        lines.append(_note(f"  and {len(beats) - NAMED_ON_PLOT} more (see the log)"))
    return lines


def _kernel_markers(pts) -> list[tuple[float, float, Marker]]:
    """Each kernel's marker; the largest by time share are labelled with their short name."""
    top = {p.index for p in sorted(pts, key=lambda p: -p.share)[:LABEL_TOP]}
    out = []
    for p in pts:
        text = f"{short_name(p.name, 36)} ({p.share:.0%})" if p.index in top else ""
        width = text_width_pt(text, KERNEL_LABEL_PT) if text else 0.0
        out.append((p.ai, p.flops_rate, Marker(0.0, 0.0, math.sqrt(p.area) / 2, text, width)))
    return out


def _draw_kernels(ax, pts, roofs: Roofs, precision: str, beats: set[int]) -> tuple:
    """Kernels largest first (small ones stay on top), red rings above their class's roof,
    orange ones above its measured roof. Returns ({gid: marker size}, number above)."""
    sizes: dict[str, float] = {}
    n_above = 0
    for p in sorted(pts, key=lambda p: -p.area):
        gid = artist_gid("kernel", p.index)
        (line,) = ax.plot(
            [p.ai],
            [p.flops_rate],
            linestyle="none",
            marker="o",
            markersize=math.sqrt(p.area),
            color=path_color(p.path, precision),
            alpha=0.7,
            markeredgecolor="0.15",
            markeredgewidth=0.4,
            gid=gid,
            zorder=5,
        )
        sizes[gid] = line.get_markersize()
        if roofline.is_above_roof(p.flops_rate, kernel_roof_at(roofs, p.ai, p.path, precision)):
            n_above += 1
            draw_above_roof_ring(
                ax, p.ai, p.flops_rate, artist_gid("above-roof", "kernel", p.index)
            )
        if p.index in beats:
            ax.plot(
                [p.ai],
                [p.flops_rate],
                gid=artist_gid("above-measured-roof", "kernel", p.index),
                zorder=6,
                **_BEATS_MEASURED_RING,
            )
    return sizes, n_above


def _kernel_notes(kset: KernelSet, n_above: int, drawn_beats) -> list[Line2D]:
    """The legend's "Kernels": how many are plotted, which are not and why, the timing."""
    skipped_time = sum(s["share"] for s in kset.skipped)
    notes = [_note(f"{len(kset.points)} kernels plotted")]
    if kset.skipped:
        why = ", ".join(f"{n} {r}" for r, n in kset.reasons.items() if n)
        notes.append(_note(f"{len(kset.skipped)} not plotted: {why}"))
        notes.append(_note(f"  ({skipped_time:.1%} of kernel time)"))
    notes.append(_note("time: ncu's per-kernel duration"))
    notes.append(_note("  (serialized, caches flushed)"))
    if n_above:
        notes.append(above_roof_handle())
    return notes + _beats_measured_notes(drawn_beats)


def _kernel_legend(ax, kset: KernelSet, precision: str, compute_precisions, notes) -> None:
    pts = kset.points
    path_items = [
        Line2D(
            [],
            [],
            linestyle="none",
            marker="o",
            color=path_color(p, precision),
            label=f"{PATH_LABELS[p]} ({sum(k.path == p for k in pts)})",
        )
        for p in KERNEL_PATHS
        if any(k.path == p for k in pts)
    ]
    size_items = [
        Line2D(
            [],
            [],
            linestyle="none",
            marker="o",
            color="0.6",
            markersize=math.sqrt(marker_area(s)),
            label=f"{s:.0%} of kernel time",
        )
        for s in (0.01, 0.05, 0.2)
    ]
    roof_items = [
        Line2D([], [], color="0.2", linestyle=LINESTYLES[s], label=f"{s} peak")
        for s in roofline.ROOF_SOURCES
    ]
    roof_items += [
        Line2D([], [], color=precision_color(pr), linewidth=3, label=f"{pr} compute")
        for pr in sorted(set(compute_precisions))
    ]
    roof_items.append(Line2D([], [], color=LEVEL_COLORS["dram"], linewidth=2, label="DRAM"))
    sectioned_legend(
        ax,
        [
            ("FLOP path (colour)", path_items),
            ("Share of time (area)", size_items),
            ("Roofs", roof_items),
            ("Kernels", notes),
        ],
        labelspacing=0.9,
    )


def plot_kernels(
    kset: KernelSet,
    roofs: Roofs,
    env: str,
    precision: str,
    out_png: str | os.PathLike | None,
    out_svg: str | os.PathLike | None,
    title: str,
    *,
    status: str = "ok",
    message: str | None = None,
    above_measured: Sequence[Mapping] = (),
) -> dict:
    """Each kernel's DRAM AI against its FLOP/s (ncu FLOPs / ncu kernel time), marker
    area proportional to its share of kernel time, colour = the path of most of its
    FLOPs; every compute roof of the env and the DRAM roofs. ``above_measured``: the
    kernels that beat their class's measured roof
    (:func:`dnnroofline.ncu.above_roof.kernels_above_measured_roof`), ringed in
    orange and the fastest named in the legend: that measured roof is too low.

    Returns ``{"points", "skipped", "above_roof", "above_measured", "markersize"}``.
    """
    pts = kset.points
    dram = roofs.memory["dram"]
    comp_specs = [
        (prec, source, compute_roof, compute_roof / dram[_paired_dram(dram, source)])
        for (prec, source), compute_roof in sorted(roofs.compute.items())
    ]
    top_roof = max(s[2] for s in comp_specs)
    ridges = [s[3] for s in comp_specs] + [top_roof / bw for bw in dram.values()]
    ys = [p.flops_rate for p in pts] + [s[2] for s in comp_specs]
    xlim, ylim = decade_limits([p.ai for p in pts] + ridges, ys)
    with rc_context(SVG_RC):
        fig = Figure(figsize=(10.5, 6.5))
        ax = log_axes(fig, title, AXIS_Y_KERNEL, xlim, ylim, fontsize=10)
        markers = _kernel_markers(pts)
        boxes = _compute_roofs(ax, env, comp_specs, marker_obstacles(ax, markers))
        boxes += _memory_roofs(
            ax,
            env,
            [("dram", source, bw, top_roof / bw) for source, bw in sorted(dram.items())],
            marker_obstacles(ax, markers),
        )
        sizes, n_above = _draw_kernels(
            ax, pts, roofs, precision, {k["index"] for k in above_measured}
        )
        spots = place_point_labels_pt(ax, markers, boxes)
        for (x, y, marker), spot in zip(markers, spots, strict=True):
            draw_point_label(ax, x, y, marker, spot, fontsize=KERNEL_LABEL_PT, color="0.15")
        drawn_beats = [k for k in above_measured if k["index"] in {p.index for p in pts}]
        if status != "ok":
            _message(ax, f"ncu capture {status}: {message or 'no message'}")
        elif not pts:
            _message(ax, "no kernel with FLOPs, DRAM bytes and a duration to plot")
        notes = _kernel_notes(kset, n_above, drawn_beats)
        _kernel_legend(ax, kset, precision, [s[0] for s in comp_specs], notes)
        save_figure(fig, out_png, out_svg)
    return {
        "points": len(pts),
        "skipped": len(kset.skipped),
        "above_roof": n_above,
        "above_measured": len(drawn_beats),
        "markersize": sizes,
    }
