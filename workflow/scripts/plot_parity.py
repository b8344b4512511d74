#!/usr/bin/env python
"""Plot the model's check: predicted against measured step time, one marker per method.

    python workflow/scripts/plot_parity.py --check results/prediction_check.csv \
        --svg results/plots/prediction_parity.svg [--png prediction_parity.png]

Log-log in milliseconds, with the y = x line and a ±10% band (dnnroofline.plots.parity).
"""

from __future__ import annotations

import argparse
import sys

import pandas as pd

from dnnroofline.errors import InputError
from dnnroofline.plots.parity import COLUMNS, plot_parity


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", required=True, help="results/prediction_check.csv")
    ap.add_argument("--svg", required=True)
    ap.add_argument("--png", help="a PNG beside the SVG (optional)")
    args = ap.parse_args(argv)
    try:
        try:
            check = pd.read_csv(args.check)
        except pd.errors.EmptyDataError:
            check = pd.DataFrame()  # nothing measured yet: an empty frame says so
        except (OSError, pd.errors.ParserError) as exc:
            raise InputError(f"--check: cannot read {args.check}: {exc}") from exc
        missing = {"method", *COLUMNS} - set(check)
        if len(check) and missing:
            raise InputError(f"--check: {args.check} lacks column(s) {', '.join(sorted(missing))}")
        drawn = plot_parity(check.to_dict("records"), args.svg, args.png)
    except InputError as exc:
        print(f"plot_parity: error: {exc}", file=sys.stderr)
        return 2
    what = ", ".join(f"{m} {n}" for m, n in drawn.items()) or "no points"
    print(f"plot_parity: {what} -> {args.svg}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
