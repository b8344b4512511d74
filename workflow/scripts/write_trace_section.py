#!/usr/bin/env python
"""Write the report page of the traces (dnnroofline.report.traces).

    python workflow/scripts/write_trace_section.py --tables results/*/traces/*.ops.json \
        --metrics results/metrics.csv --out results/report_sections/traces.html

Each table JSON is the trace job's; its trace file lies next to it (a data-parallel job's
rank traces in the folder that each rank's ``trace.path_from_table`` names). ``--metrics``
gives the timed runs' median step, to set the traced steps against.
"""

from __future__ import annotations

import argparse
import os
import sys

import pandas as pd

from dnnroofline.errors import InputError
from dnnroofline.io import read_json, write_text_atomic
from dnnroofline.report.traces import traces_section


def read_table(path: str) -> dict:
    """A table JSON of the trace job; InputError naming the file otherwise."""
    doc = read_json(path)
    if not isinstance(doc, dict) or doc.get("kind") != "trace" or "status" not in doc:
        raise InputError(f"{path}: not a trace table (no 'kind': 'trace' and 'status')")
    return doc


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
        tables = [(p, read_table(p)) for p in args.tables]
    except InputError as exc:
        print(f"write_trace_section: error: {exc}", file=sys.stderr)
        return 2
    page = traces_section(tables, metrics, os.path.dirname(args.out) or ".")
    write_text_atomic(args.out, page)
    return 0


if __name__ == "__main__":
    sys.exit(main())
