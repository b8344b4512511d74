#!/usr/bin/env python
"""Fail (exit 1) when a point of compare.csv regressed: slower by more than the tolerance,
with its interval below 0. (issue 37)

    python workflow/scripts/regression_gate.py results/compare.csv [--tolerance-pct N] \
        [--config results/study_config.json]

The tolerance: --tolerance-pct, else the config's regression.tolerance_pct, else its
default in config/schema.yaml.
Exit 1 prints the regressed points only, one line each; exit 0 says how many passed;
exit 2 on a file that cannot be read.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping

from dnnroofline.aggregate import compare
from dnnroofline.aggregate.loaders import read_csv
from dnnroofline.errors import InputError
from dnnroofline.io import read_json
from dnnroofline.study.defaults import default

NEEDED = (
    "env",
    "model",
    "precision",
    "batch",
    "change_pct",
    "ci_low_pct",
    "ci_high_pct",
    "verdict",
)


def tolerance(args: argparse.Namespace) -> float:
    """--tolerance-pct, else the config's regression.tolerance_pct, else the schema's
    default (a study_config.json written before the regression block existed)."""
    if args.tolerance_pct is not None:
        return args.tolerance_pct
    if args.config:
        config = read_json(args.config)
        block = config.get("regression") if isinstance(config, Mapping) else None
        value = block.get("tolerance_pct") if isinstance(block, Mapping) else None
        if value is not None:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise InputError(
                    f"{args.config}: regression.tolerance_pct must be a number, got {value!r}"
                )
            return float(value)
    return float(default("regression.tolerance_pct"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("compare_csv", help="compare.csv of compare_studies.py")
    ap.add_argument("--tolerance-pct", type=float, default=None, help="slower by more fails")
    ap.add_argument(
        "--config", default=None, help="study_config.json with regression.tolerance_pct"
    )
    args = ap.parse_args(argv)
    try:
        tol = tolerance(args)
        frame = read_csv(args.compare_csv, "compare")
        missing = [c for c in NEEDED if c not in frame.columns]
        if missing:
            raise InputError(f"{args.compare_csv}: not a compare.csv: lacks {', '.join(missing)}")
        rows = frame.to_dict("records")
        failed = compare.regressions(rows, tol)
    except InputError as exc:
        print(f"regression_gate: error: {exc}", file=sys.stderr)
        return 2
    except (ValueError, TypeError) as exc:  # a cell that is not a number
        print(f"regression_gate: error: {args.compare_csv}: {exc}", file=sys.stderr)
        return 2
    if failed:
        for row in failed:
            print(compare.describe(row))
        return 1
    print(
        f"regression_gate: {len(rows)} point(s) passed (slower by more than {tol:g}% with "
        "an interval below 0 fails)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
