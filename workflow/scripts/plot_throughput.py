#!/usr/bin/env python
"""Plot training throughput (images/s) against batch size, per model, as PNG and SVG.

    python workflow/scripts/plot_throughput.py --metrics results/metrics.csv \
        --png results/plots/throughput.png --svg results/plots/throughput.svg [--env local]
"""

from __future__ import annotations

import argparse
import sys

import pandas as pd

from dnnroofline.aggregate.metrics import METRICS_DTYPES
from dnnroofline.errors import InputError
from dnnroofline.plots.throughput import plot_throughput


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--metrics", required=True, help="metrics CSV (aggregate_metrics.py)")
    ap.add_argument("--env", help="plot only this env (default: all)")
    ap.add_argument("--png", required=True)
    ap.add_argument("--svg", required=True)
    ap.add_argument("--title", default="Training throughput")
    args = ap.parse_args(argv)
    try:
        try:
            metrics = pd.read_csv(args.metrics, dtype=METRICS_DTYPES)
        except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
            raise InputError(f"{args.metrics}: cannot read metrics CSV: {exc}") from exc
        if args.env is not None:
            metrics = metrics[metrics["env"] == args.env].reset_index(drop=True)
        info = plot_throughput(metrics, args.png, args.svg, args.title)
    except InputError as exc:
        print(f"plot_throughput: error: {exc}", file=sys.stderr)
        return 2
    print(
        f"plot_throughput: {info['lines']} curves, {info['failed']} failed batches "
        f"-> {args.png}, {args.svg}",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
