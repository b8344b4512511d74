"""Print the study at a glance: one line per roofline point, as `make study` ends.

    python workflow/scripts/summarize_study.py [--metrics results/metrics.csv] \\
        [--points results/roofline_points.csv] [--results results]

The rows of the report's "At a glance" table: images/s, GFLOP/s, AI and its source,
bound (``host (busy N%)`` where the device idles much of the step, with its kernel-busy
share), share of the roof and what would move the point. Then, where the study has
its ``prediction_check.csv`` (in ``--results``), the model's error per point and each
method's MAPE, on step time and on images/s. Where the study is compared with a
baseline (``compare.csv`` in ``--results``), its verdicts, slower points first, and the
regression gate's verdict line at the config's ``regression.tolerance_pct`` (from
``study_config.json``; the exit status stays 0: ``regression_gate.py`` is the gate). Exit 2
when a table cannot be read.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path

import pandas as pd

from dnnroofline.aggregate.metrics import METRICS_DTYPES
from dnnroofline.aggregate.points import POINTS_DTYPES
from dnnroofline.report.terminal import study_summary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--metrics", default="results/metrics.csv")
    ap.add_argument("--points", default="results/roofline_points.csv")
    ap.add_argument(
        "--results", default="results", help="where each env's ceilings.json and the check are"
    )
    args = ap.parse_args(argv)
    try:
        metrics = pd.read_csv(args.metrics, dtype=METRICS_DTYPES)
        points = pd.read_csv(args.points, dtype=POINTS_DTYPES)
    except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        print(f"summarize_study: error: {exc} (run the study first)", file=sys.stderr)
        return 2
    ceilings = {}
    for env in sorted(set(points["env"].dropna())):
        path = Path(args.results) / env / "ceilings.json"
        with contextlib.suppress(OSError, ValueError):  # the table stands without it
            ceilings[env] = json.loads(path.read_text())
    check = None
    check_path = Path(args.results) / "prediction_check.csv"
    if check_path.exists():  # a study made before the model has none
        try:
            check = pd.read_csv(check_path)
        except (pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
            print(f"summarize_study: error: {check_path}: {exc}", file=sys.stderr)
            return 2
    try:
        comparison, tolerance = read_comparison(Path(args.results))
    except (pd.errors.ParserError, pd.errors.EmptyDataError, ValueError) as exc:
        print(f"summarize_study: error: {exc}", file=sys.stderr)
        return 2
    print(study_summary(metrics, points, ceilings, check, comparison, tolerance))
    return 0


def read_comparison(results: Path) -> tuple[pd.DataFrame | None, float | None]:
    """results/compare.csv (None in a study not compared with a baseline) and the gate's
    tolerance from results/study_config.json (None where it does not say)."""
    path = results / "compare.csv"
    if not path.exists():
        return None, None
    try:
        comparison = pd.read_csv(path)
    except (pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        raise ValueError(f"{path}: {exc}") from exc
    tolerance = None
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        config = json.loads((results / "study_config.json").read_text())
        tolerance = float(config["regression"]["tolerance_pct"])
    return comparison, tolerance


if __name__ == "__main__":
    sys.exit(main())
