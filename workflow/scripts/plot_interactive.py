#!/usr/bin/env python
"""Write an interactive roofline (Vega-Lite, data and JavaScript inlined) as one HTML file.

    python workflow/scripts/plot_interactive.py --points results/roofline_points.csv \
        --ceilings results/*/ceilings.json [--env local] [--ncu results/*/ncu/*.json] \
        --out results/plots/roofline_local.html

With --env only that env's points, roofs and kernels are drawn; without it every
env whose ceilings are given. Parsed ncu JSONs (matched to the points by the run
identity they hold) add one point per profiled kernel.
The page loads nothing from the network: open it in any browser, offline.
"""

from __future__ import annotations

import argparse
import sys

import pandas as pd

from dnnroofline.aggregate.inputs import key_by_identity
from dnnroofline.aggregate.loaders import load_points_and_ceilings
from dnnroofline.aggregate.metrics import GROUP_KEYS
from dnnroofline.errors import InputError
from dnnroofline.io import read_json, write_text_atomic
from dnnroofline.plots.interactive import roofline_page


def load_ncu(paths: list[str], points: pd.DataFrame) -> dict[tuple, dict]:
    """{(env, model, precision, batch): parsed ncu JSON} for files that match a point."""
    groups = [tuple(k) for k in points[GROUP_KEYS].drop_duplicates().itertuples(index=False)]
    matched, unmatched = key_by_identity(((p, read_json(p)) for p in paths), groups)
    for where in unmatched:
        print(f"plot_interactive: warning: {where} matches no point; ignored", file=sys.stderr)
    return {
        key: doc
        for key, (_, doc) in matched.items()
        if isinstance(doc, dict) and doc.get("status", "ok") == "ok"
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", required=True, help="roofline points CSV")
    ap.add_argument("--ceilings", nargs="+", required=True, help="ceilings JSON files")
    ap.add_argument("--env", help="draw only this env (default: all envs given)")
    ap.add_argument("--ncu", nargs="*", default=[], help="parsed ncu JSON files (optional)")
    ap.add_argument("--out", required=True, help="HTML file to write")
    ap.add_argument("--title", help="chart title")
    args = ap.parse_args(argv)
    try:
        points, ceilings, sources = load_points_and_ceilings(args.points, args.ceilings, args.env)
        ncu = load_ncu(args.ncu, points)
        envs = sorted(ceilings)
        title = args.title or (
            f"Roofline: {args.env}" if args.env else f"Roofline: {', '.join(envs)}"
        )
        devices = [
            str(ceilings[e].get("device_name") or ceilings[e].get("device") or "") for e in envs
        ]
        subtitle = "; ".join(f"{e}: {d}" for e, d in zip(envs, devices, strict=True) if d)
        html = roofline_page(
            points, ceilings, ncu, title=title, subtitle=subtitle, ceilings_sources=sources
        )
    except InputError as exc:
        print(f"plot_interactive: error: {exc}", file=sys.stderr)
        return 2
    write_text_atomic(args.out, html)
    print(
        f"plot_interactive: {len(points)} point rows, {len(ncu)} ncu profiles -> {args.out}",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
