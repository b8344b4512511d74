#!/usr/bin/env python
"""Write the report page of the traces (dnnroofline.trace_report).

    python workflow/scripts/write_trace_section.py --tables results/*/traces/*.ops.json \
        --metrics results/metrics.csv --out results/report_sections/traces.html

Each table JSON is the trace job's; its trace file lies next to it. ``--metrics`` gives
the timed runs' median step, to set the traced steps against.
"""

from __future__ import annotations

import argparse
import os
import sys

import pandas as pd

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from dnnroofline.errors import InputError  # noqa: E402
from dnnroofline.io import write_text_atomic  # noqa: E402
from dnnroofline.trace_report import entry, read_table, traces_page, untraced_medians  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tables", nargs="*", default=[], help="results/*/traces/*.ops.json")
    ap.add_argument("--metrics", required=True, help="results/metrics.csv")
    ap.add_argument("--out", required=True, help="HTML page to write")
    args = ap.parse_args(argv)
    try:
        try:
            metrics = pd.read_csv(args.metrics)
        except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
            raise InputError(f"--metrics: cannot read {args.metrics}: {exc}") from exc
        untraced = untraced_medians(metrics)
        out_dir = os.path.dirname(args.out) or "."
        entries = [entry(read_table(p), p, out_dir, untraced) for p in args.tables]
    except InputError as exc:
        print(f"write_trace_section: error: {exc}", file=sys.stderr)
        return 2
    write_text_atomic(args.out, traces_page(entries))
    return 0


if __name__ == "__main__":
    sys.exit(main())
