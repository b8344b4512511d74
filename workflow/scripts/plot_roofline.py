#!/usr/bin/env python
"""Draw the roofline of one env, or of all envs together, as PNG and SVG.

    python workflow/scripts/plot_roofline.py --points results/roofline_points.csv \
        --ceilings results/*/ceilings.json [--env local] \
        --png results/plots/roofline_local.png --svg results/plots/roofline_local.svg

With --env only that env's points and roofs are drawn; without it every env
whose ceilings are given (each point's env must be among them).
"""

from __future__ import annotations

import argparse
import sys

from dnnroofline.aggregate.loaders import load_points_and_ceilings
from dnnroofline.errors import InputError
from dnnroofline.plots.roofline import plot_roofline


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", required=True, help="roofline points CSV")
    ap.add_argument("--ceilings", nargs="+", required=True, help="ceilings JSON files")
    ap.add_argument("--env", help="draw only this env (default: all envs given)")
    ap.add_argument("--png", required=True)
    ap.add_argument("--svg", required=True)
    ap.add_argument("--title", help="figure title")
    args = ap.parse_args(argv)
    try:
        points, ceilings, sources = load_points_and_ceilings(args.points, args.ceilings, args.env)
        title = args.title or (
            f"Roofline: {args.env}" if args.env else f"Roofline: {', '.join(sorted(ceilings))}"
        )
        info = plot_roofline(points, ceilings, args.png, args.svg, title, ceilings_sources=sources)
    except InputError as exc:
        print(f"plot_roofline: error: {exc}", file=sys.stderr)
        return 2
    print(
        f"plot_roofline: {info['points']} points ({info['above_roof']} above roof), "
        f"{info['roofs']} compute roofs -> {args.png}, {args.svg}",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
