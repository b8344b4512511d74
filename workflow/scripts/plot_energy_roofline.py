#!/usr/bin/env python
"""Draw the energy roofline (FLOP/J against AI) of every env, as PNG and SVG.

    python workflow/scripts/plot_energy_roofline.py --metrics results/metrics.csv \
        --points results/roofline_points.csv --ceilings results/*/ceilings.json \
        --png results/plots/energy_roofline.png --svg results/plots/energy_roofline.svg

Each env's roofs are its ceilings' fitted energy costs; each point's FLOP/J is its FLOPs
per step over the median joules per step of its ok runs. Without any energy data the
figure says so, with each env's reason.
"""

from __future__ import annotations

import argparse
import sys

from dnnroofline.aggregate.loaders import load_points_and_ceilings, read_csv
from dnnroofline.aggregate.metrics import METRICS_DTYPES
from dnnroofline.errors import InputError
from dnnroofline.plots.energy_roofline import plot_energy_roofline


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--metrics", required=True, help="metrics CSV (aggregate_metrics.py)")
    ap.add_argument("--points", required=True, help="roofline points CSV")
    ap.add_argument("--ceilings", nargs="+", required=True, help="ceilings JSON files")
    ap.add_argument("--png", required=True)
    ap.add_argument("--svg", required=True)
    ap.add_argument("--title", default="Energy roofline")
    args = ap.parse_args(argv)
    try:
        points, ceilings, _ = load_points_and_ceilings(args.points, args.ceilings)
        metrics = read_csv(args.metrics, "metrics", METRICS_DTYPES)
        info = plot_energy_roofline(ceilings, points, metrics, args.png, args.svg, args.title)
    except InputError as exc:
        print(f"plot_energy_roofline: error: {exc}", file=sys.stderr)
        return 2
    for line in info["left_out"]:
        print(f"plot_energy_roofline: not drawn: {line}", file=sys.stderr)
    print(
        f"plot_energy_roofline: {info['points']} points, {info['roofs']} compute-energy roofs "
        f"-> {args.png}, {args.svg}",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
