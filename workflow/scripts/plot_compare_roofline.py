#!/usr/bin/env python
"""Draw the comparison with a baseline on the roofline, as PNG and SVG.

    python workflow/scripts/plot_compare_roofline.py --compare results/compare.csv \
        --config results/study_config.json --points results/roofline_points.csv \
        [--baseline-points BASELINE/roofline_points.csv] --ceilings results/*/ceilings.json \
        [--label LABEL] --png results/plots/compare_roofline.png \
        --svg results/plots/compare_roofline.svg

Per env of this study: its roofs, each baseline point and an arrow to this study's point of
the same (model, precision, batch), coloured by its verdict in compare.csv. The config's
``compare.envs`` maps an env of this study to the baseline's env it is compared with.
"""

from __future__ import annotations

import argparse
import sys

from dnnroofline.aggregate.loaders import load_points_and_ceilings, read_csv
from dnnroofline.aggregate.points import POINTS_DTYPES
from dnnroofline.errors import InputError
from dnnroofline.io import read_json
from dnnroofline.plots.compare_roofline import plot_compare_roofline


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--compare", required=True, help="results/compare.csv")
    ap.add_argument("--config", required=True, help="results/study_config.json (compare.envs)")
    ap.add_argument("--points", required=True, help="this study's roofline_points.csv")
    ap.add_argument(
        "--baseline-points", help="the baseline's roofline_points.csv (none: no arrows)"
    )
    ap.add_argument("--ceilings", nargs="+", required=True, help="this study's ceilings JSONs")
    ap.add_argument("--label", default="baseline", help="the baseline's name in the title")
    ap.add_argument("--png", required=True)
    ap.add_argument("--svg", required=True)
    args = ap.parse_args(argv)
    try:
        points, ceilings, _ = load_points_and_ceilings(args.points, args.ceilings)
        baseline = (
            read_csv(args.baseline_points, "the baseline's roofline points", POINTS_DTYPES)
            if args.baseline_points
            else points.iloc[0:0]
        )
        compare = read_csv(args.compare, "comparison")
        env_map = (read_json(args.config).get("compare") or {}).get("envs") or {}
        info = plot_compare_roofline(
            compare,
            points,
            baseline,
            ceilings,
            args.png,
            args.svg,
            env_map=env_map,
            label=args.label,
        )
    except InputError as exc:
        print(f"plot_compare_roofline: error: {exc}", file=sys.stderr)
        return 2
    print(
        f"plot_compare_roofline: {info['arrows']} arrows in {len(info['envs'])} env(s), "
        f"{info.get('only-current', 0)} point(s) in this study only, "
        f"{info.get('only-baseline', 0)} in the baseline only, {info.get('ai-source', 0)} "
        f"arrow(s) between AIs of different sources -> {args.png}, {args.svg}",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
