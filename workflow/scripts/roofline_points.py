#!/usr/bin/env python
"""Place every (env, model, precision, batch) on its env's roofline: roofline_points.csv.

    python workflow/scripts/roofline_points.py --metrics results/metrics.csv \
        --complexity results/complexity/*.json \
        --ceilings results/*/ceilings.json \
        [--ncu results/*/ncu/*.json] [--perf results/*/perf/*.json] \
        [--traces results/*/traces/*.ops.json] --out results/roofline_points.csv

Complexity files are keyed by their ``arch`` and ``batch_size`` keys, ceilings
files by their ``env`` key, and parsed ncu and perf files and trace tables by the run
identity they hold (``env`` and the driver's ``config``), never by their name. A file
that matches no group in the metrics table is reported and ignored. Trace tables
(``.ops.json``) give the kernel-busy share; one made before it was recorded (no
``busy`` block) has it computed from the trace beside it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from dnnroofline.aggregate.inputs import key_by_identity, key_ceilings, key_complexity
from dnnroofline.aggregate.metrics import GROUP_KEYS, METRICS_DTYPES
from dnnroofline.aggregate.points import roofline_points_frame
from dnnroofline.errors import InputError
from dnnroofline.io import atomic_path, read_json
from dnnroofline.measure.busy_share import trace_summary


def read_metrics(path: str) -> pd.DataFrame:
    try:
        return pd.read_csv(path, dtype=METRICS_DTYPES)
    except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        raise InputError(f"{path}: cannot read metrics CSV: {exc}") from exc


def trace_busy(table_path: str, doc: object) -> dict | None:
    """The ``busy`` block of a trace table (``doc``, read from ``table_path``); None for a
    failed trace job."""
    if not isinstance(doc, dict) or doc.get("status") != "ok":
        return None
    if isinstance(doc.get("busy"), dict):
        return doc["busy"]
    trace = Path(table_path).with_name(Path(str((doc.get("trace") or {}).get("file"))).name)
    if not trace.exists():  # copied in without its trace: no share from it
        return None
    cuda = "cuda" in ((doc.get("trace") or {}).get("activities") or [])
    return trace_summary(read_json(str(trace)), cuda, str(trace))


def build(args: argparse.Namespace) -> pd.DataFrame:
    metrics = read_metrics(args.metrics)
    complexity = key_complexity((p, read_json(p)) for p in args.complexity)
    ceilings, ceilings_sources = key_ceilings((p, read_json(p)) for p in args.ceilings)
    groups = [tuple(k) for k in metrics[GROUP_KEYS].drop_duplicates().itertuples(index=False)]
    ncu, ncu_unmatched = key_by_identity(((p, read_json(p)) for p in args.ncu), groups)
    perf, perf_unmatched = key_by_identity(((p, read_json(p)) for p in args.perf), groups)
    for where in ncu_unmatched + perf_unmatched:
        print(f"roofline_points: warning: {where} matches no run group; ignored", file=sys.stderr)
    traces, _ = key_by_identity(((p, read_json(p)) for p in args.traces), groups)
    return roofline_points_frame(
        metrics,
        complexity,
        ceilings,
        {key: doc for key, (_, doc) in ncu.items()},
        ceilings_sources=ceilings_sources,
        ncu_sources={key: where for key, (where, _) in ncu.items()},
        perf={key: doc for key, (_, doc) in perf.items()},
        perf_sources={key: where for key, (where, _) in perf.items()},
        traces={key: trace_busy(where, doc) for key, (where, doc) in traces.items()},
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--metrics", required=True, help="metrics CSV (aggregate_metrics.py)")
    ap.add_argument("--complexity", nargs="*", default=[], help="complexity JSON files")
    ap.add_argument("--ceilings", nargs="+", required=True, help="ceilings JSON files")
    ap.add_argument("--ncu", nargs="*", default=[], help="parsed ncu JSON files (GPU envs)")
    ap.add_argument("--perf", nargs="*", default=[], help="perf counter JSON files (CPU envs)")
    ap.add_argument("--traces", nargs="*", default=[], help="trace tables (*.ops.json)")
    ap.add_argument("--out", required=True, help="roofline points CSV to write")
    args = ap.parse_args(argv)
    try:
        df = build(args)
    except InputError as exc:
        print(f"roofline_points: error: {exc}", file=sys.stderr)
        return 2
    with atomic_path(args.out) as tmp:
        df.to_csv(tmp, index=False)
    n_above = int(df["above_roof"].sum())
    n_empty = int((df["runs_ok"] == 0).sum())
    print(
        f"roofline_points: {len(df)} points ({n_empty} without an ok run, "
        f"{n_above} above their roof) -> {args.out}",
        file=sys.stderr,
    )
    if n_above:
        for r in df[df["above_roof"]].itertuples(index=False):
            print(
                f"roofline_points: WARNING: {r.env} {r.model} {r.precision} bs{r.batch_size} "
                f"is above its roof ({r.attained_flops:.4g} > {r.roof_flops:.4g} FLOP/s): "
                "a bug or a wrong peak",
                file=sys.stderr,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
