#!/usr/bin/env python
"""Collect run JSONs into the study's timing ledger, results/metrics.csv.

    python workflow/scripts/aggregate_metrics.py --runs results/*/runs/*.json \
        --out results/metrics.csv

One row per run (failed runs included, with their status and message). Env,
model, precision, batch and repeat come from each JSON's env, run_id and
config, never from its file name.
"""

from __future__ import annotations

import argparse
import sys

from dnnroofline.aggregate.metrics import metrics_frame
from dnnroofline.errors import InputError
from dnnroofline.io import atomic_path, read_json


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", nargs="*", required=True, metavar="RUN_JSON", help="run JSON files")
    ap.add_argument("--out", required=True, help="metrics CSV to write")
    args = ap.parse_args(argv)
    try:
        runs = [read_json(p) for p in args.runs]
        df = metrics_frame(runs, sources=args.runs)
    except InputError as exc:
        print(f"aggregate_metrics: error: {exc}", file=sys.stderr)
        return 2
    with atomic_path(args.out) as tmp:
        df.to_csv(tmp, index=False)
    n_bad = int((df["status"] != "ok").sum())
    print(f"aggregate_metrics: {len(df)} runs ({n_bad} failed) -> {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
