#!/usr/bin/env python
"""Compare this study with a baseline study: did the change make it slower? (issue 37)

    python workflow/scripts/compare_studies.py --config results/study_config.json \
        --metrics results/metrics.csv --runs results/*/runs/*.json \
        [--env-info results/*/env_info.json] [--ceilings results/*/ceilings.json] \
        [--traces results/*/traces/*.ops.json] [--ncu results/*/ncu/*_bs*.json] \
        --outdir results

The baseline is the config's ``compare`` block (``baseline``: a finished study's folder
or its results/, relative to the current directory; ``label``; ``envs``: {this study's
env: the baseline's}). Writes compare.csv, compare_unmatched.csv,
compare_fingerprints.csv, compare_ops.csv, compare_kernels.csv and compare_roofs.csv
into --outdir (a header alone where there is nothing). The baseline is read, never
written.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from pathlib import Path

from dnnroofline.aggregate import compare, compare_files
from dnnroofline.errors import InputError
from dnnroofline.io import read_json
from dnnroofline.study.baseline import check_env_map, resolve_baseline


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", required=True, help="this study's resolved study_config.json")
    ap.add_argument("--metrics", required=True, help="this study's metrics.csv")
    ap.add_argument("--runs", nargs="*", default=[], metavar="RUN_JSON", help="this study's runs")
    ap.add_argument("--env-info", nargs="*", default=[], metavar="JSON")
    ap.add_argument("--ceilings", nargs="*", default=[], metavar="JSON")
    ap.add_argument("--traces", nargs="*", default=[], metavar="OPS_JSON")
    ap.add_argument("--ncu", nargs="*", default=[], metavar="NCU_JSON")
    ap.add_argument("--outdir", required=True, help="folder for the six compare CSVs")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        config = read_json(args.config)
        spec = config.get("compare") if isinstance(config, Mapping) else None
        if not spec:
            raise InputError(f"{args.config}: no compare block (compare.baseline: a study folder)")
        baseline = resolve_baseline(spec, cwd=Path.cwd())
        compare_files.check_outdir(Path(args.outdir), baseline)
        current = compare_files.load_study(
            runs=args.runs,
            metrics=args.metrics,
            env_info=args.env_info,
            ceilings=args.ceilings,
            traces=args.traces,
            ncu=args.ncu,
            config=config,
        )
        env_map = check_env_map(spec, current.envs, baseline)
        tables = compare_files.compare_tables(
            compare_files.baseline_study(baseline), current, env_map
        )
    except InputError as exc:
        print(f"compare_studies: error: {exc}", file=sys.stderr)
        return 2
    compare_files.write_tables(args.outdir, tables)
    print(f"compare_studies: against {baseline.label} ({baseline.root})")
    print(compare.summary(tables["compare.csv"], tables["compare_unmatched.csv"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
