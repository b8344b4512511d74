#!/usr/bin/env python
"""Write the report page of the comparison with a baseline (dnnroofline.report.before_after).

    python workflow/scripts/write_compare_section.py --config results/study_config.json \
        --compare results/compare.csv --unmatched results/compare_unmatched.csv \
        --fingerprints results/compare_fingerprints.csv --ops results/compare_ops.csv \
        --kernels results/compare_kernels.csv --roofs results/compare_roofs.csv \
        [--plot results/plots/compare_roofline.svg] [--label LABEL] \
        --out results/report_sections/before_after.html

The tables are compare_studies.py's; the plot is embedded in the page.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from dnnroofline.errors import InputError
from dnnroofline.io import read_json, write_text_atomic
from dnnroofline.report.before_after import before_after_section


def read_table(path: str | None, flag: str) -> pd.DataFrame | None:
    """A comparison CSV (None where not given); one with a header alone is an empty table."""
    if path is None:
        return None
    try:
        return pd.read_csv(path, keep_default_na=True)
    except pd.errors.EmptyDataError:
        return pd.DataFrame()
    except (OSError, pd.errors.ParserError) as exc:
        raise InputError(f"{flag}: cannot read {path}: {exc}") from exc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", required=True, help="results/study_config.json")
    ap.add_argument("--compare", required=True, help="results/compare.csv")
    for name in ("unmatched", "fingerprints", "ops", "kernels", "roofs"):
        ap.add_argument(f"--{name}", help=f"results/compare_{name}.csv")
    ap.add_argument("--plot", help="results/plots/compare_roofline.svg")
    ap.add_argument("--label", help="the baseline's name (default: compare.label)")
    ap.add_argument("--out", required=True, help="HTML page to write")
    args = ap.parse_args(argv)
    try:
        config = read_json(args.config)
        tables = {
            name: read_table(getattr(args, name), f"--{name}")
            for name in ("compare", "unmatched", "fingerprints", "ops", "kernels", "roofs")
        }
        try:
            plot = Path(args.plot).read_text() if args.plot else None
        except OSError as exc:
            raise InputError(f"--plot: cannot read {args.plot}: {exc}") from exc
    except InputError as exc:
        print(f"write_compare_section: error: {exc}", file=sys.stderr)
        return 2
    page = before_after_section(config, **tables, plot_svg=plot, label=args.label)
    write_text_atomic(args.out, page)
    return 0


if __name__ == "__main__":
    sys.exit(main())
