#!/usr/bin/env python
"""Draw the ncu rooflines of one (env, model, precision, batch): per kernel or hierarchical.

    python workflow/scripts/plot_kernel_roofline.py --kind kernels \
        --ncu results/E/ncu/E_resnet50_amp_bs64.json --ceilings results/E/ceilings.json \
        --env E --model resnet50 --precision amp --batch 64 --png k.png --svg k.svg
    python workflow/scripts/plot_kernel_roofline.py --kind hierarchical \
        --points results/roofline_points.csv ... (same flags)

``kernels``: each kernel's FLOPs / DRAM bytes against its FLOPs / ncu kernel time.
``hierarchical``: the step's ncu FLOPs over its L1, L2 and DRAM bytes against ncu
FLOPs / the timed runs' median step time (from --points). A capture without
usable counters (ncu unavailable, no permission) still gives a figure that says so.
"""

from __future__ import annotations

import argparse
import sys

import pandas as pd

from dnnroofline.aggregate.points import POINTS_DTYPES
from dnnroofline.errors import InputError
from dnnroofline.io import read_json
from dnnroofline.ncu.above_roof import kernels_above_measured_roof
from dnnroofline.ncu.kernels import (
    hierarchical_point,
    kernel_points,
    level_roofs,
    ncu_status,
    short_name,
    step_time,
    with_ncu_memory_roofs,
)
from dnnroofline.plots.kernels import plot_hierarchical, plot_kernels


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kind", choices=("kernels", "hierarchical"), required=True)
    ap.add_argument("--ncu", required=True, help="parsed ncu JSON of the config")
    ap.add_argument("--ceilings", required=True, help="the env's ceilings JSON")
    ap.add_argument("--points", help="roofline points CSV (hierarchical: the timed step)")
    ap.add_argument("--env", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--precision", required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--png", required=True)
    ap.add_argument("--svg", required=True)
    ap.add_argument("--title")
    args = ap.parse_args(argv)
    label = f"{args.env} {args.model} {args.precision} bs{args.batch}"
    try:
        ncu = read_json(args.ncu)
        status, message = ncu_status(ncu)
        ceilings = read_json(args.ceilings)
        roofs = level_roofs(ceilings, args.ceilings)
        if args.kind == "kernels":
            kset = kernel_points(ncu if status == "ok" else {"kernels": []})
            # kernels faster than their class's measured roof: that roof is too low
            above = []
            if status == "ok":
                above = kernels_above_measured_roof(ncu, ceilings, args.precision, args.ceilings)
            info = plot_kernels(
                kset,
                roofs,
                args.env,
                args.precision,
                args.png,
                args.svg,
                args.title or f"Per-kernel roofline: {label} (ncu counts and kernel times)",
                status=status,
                message=message,
                above_measured=above,
            )
            for k in above:
                print(
                    f"plot_kernel_roofline: above the measured {k['roof_precision']} roof "
                    f"({k['roof'] / 1e12:.1f} TFLOP/s): kernel {k['id']} "
                    f"{short_name(k['name'], 80)} at {k['flops'] / 1e12:.1f} TFLOP/s",
                    file=sys.stderr,
                )
            for s in kset.skipped:
                print(
                    f"plot_kernel_roofline: not plotted ({s['reason']}): kernel {s['id']} "
                    f"{short_name(s['name'], 80)}",
                    file=sys.stderr,
                )
            summary = (
                f"{info['points']} kernels plotted, {info['skipped']} not plotted, "
                f"{info['above_measured']} above their measured roof"
            )
        else:
            if not args.points:
                raise InputError("--kind hierarchical needs --points (the timed step time)")
            try:
                points = pd.read_csv(args.points, dtype=POINTS_DTYPES)
            except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
                raise InputError(f"{args.points}: cannot read points CSV: {exc}") from exc
            step = step_time(points, args.env, args.model, args.precision, args.batch)
            point = hierarchical_point(ncu, step, args.env, args.model, args.precision, args.batch)
            # The capture's own L1/L2/DRAM roofs (peak per cycle x measured clock).
            roofs = with_ncu_memory_roofs(roofs, ncu)
            info = plot_hierarchical(point, roofs, args.png, args.svg, args.title)
            for note in point.notes:
                print(f"plot_kernel_roofline: {label}: {note}", file=sys.stderr)
            summary = f"{info['points']} level points ({', '.join(info['levels']) or 'none'})"
    except InputError as exc:
        print(f"plot_kernel_roofline: error: {exc}", file=sys.stderr)
        return 2
    if status != "ok":
        print(f"plot_kernel_roofline: ncu capture {status}: {message}", file=sys.stderr)
    print(
        f"plot_kernel_roofline: {label}: {summary}, {info['above_roof']} above roof "
        f"-> {args.png}, {args.svg}",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
