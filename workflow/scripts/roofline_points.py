#!/usr/bin/env python
"""Place every (env, model, precision, batch) on its env's roofline: roofline_points.csv.

    python workflow/scripts/roofline_points.py --metrics results/metrics.csv \
        --complexity results/complexity/*.json \
        --ceilings results/*/ceilings.json \
        [--ncu results/*/ncu/*.json] [--perf results/*/perf/*.json] \
        [--traces results/*/traces/*.ops.json] --out results/roofline_points.csv

Complexity files are keyed by their ``arch`` and ``batch_size`` keys, ceilings
files by their ``env`` key, and parsed ncu files by their name
``{env}_{model}_{precision}_bs{batch}.json``, matched against the groups in the
metrics table (so underscores in env and model names are never split). An ncu
file that matches no group is reported and ignored. Trace tables (``.ops.json``) give
the kernel-busy share; one made before it was recorded (no ``busy`` block) has it
computed from the trace beside it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from dnnroofline.aggregate.inputs import key_ceilings, key_complexity, match_ncu_stems
from dnnroofline.aggregate.metrics import GROUP_KEYS, METRICS_DTYPES, roofline_points_frame
from dnnroofline.errors import InputError
from dnnroofline.io import atomic_path, read_json
from dnnroofline.model.busy_share import trace_summary


def read_metrics(path: str) -> pd.DataFrame:
    try:
        return pd.read_csv(path, dtype=METRICS_DTYPES)
    except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        raise InputError(f"{path}: cannot read metrics CSV: {exc}") from exc


def trace_busy(table_path: str) -> dict | None:
    """The ``busy`` block of a trace table; None for a failed trace job."""
    doc = read_json(table_path)
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
    by_stem = {Path(p).name.removesuffix(".json"): p for p in args.ncu}
    matched, unmatched = match_ncu_stems(by_stem, groups)
    for stem in unmatched:
        print(
            f"roofline_points: warning: {by_stem[stem]} matches no run group; ignored",
            file=sys.stderr,
        )
    ncu = {key: read_json(by_stem[stem]) for stem, key in matched.items()}
    ncu_sources = {key: by_stem[stem] for stem, key in matched.items()}
    perf_by_stem = {Path(p).name.removesuffix(".json"): p for p in args.perf}
    perf_matched, perf_unmatched = match_ncu_stems(perf_by_stem, groups)
    for stem in perf_unmatched:
        print(
            f"roofline_points: warning: {perf_by_stem[stem]} matches no run group; ignored",
            file=sys.stderr,
        )
    perf = {key: read_json(perf_by_stem[stem]) for stem, key in perf_matched.items()}
    trace_by_stem = {Path(p).name.removesuffix(".ops.json"): p for p in args.traces}
    trace_matched, _ = match_ncu_stems(trace_by_stem, groups)
    traces = {key: trace_busy(trace_by_stem[stem]) for stem, key in trace_matched.items()}
    return roofline_points_frame(
        metrics,
        complexity,
        ceilings,
        ncu,
        ceilings_sources=ceilings_sources,
        ncu_sources=ncu_sources,
        perf=perf,
        perf_sources={key: perf_by_stem[stem] for stem, key in perf_matched.items()},
        traces=traces,
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
