#!/usr/bin/env python
"""Check the model and the baselines against the measured points: prediction_check.csv.

    python workflow/scripts/check_predictions.py --predictions results/predictions.csv \
        --metrics results/metrics.csv --complexity results/complexity/*_bs*.json \
        --ceilings results/*/ceilings.json --inventories results/complexity/*_ops.json \
        [--ncu results/*/ncu/*.json --classes-out results/prediction_classes.csv] \
        --out results/prediction_check.csv

One row per measured point (an ok run in metrics.csv) and method: roofline_datasheet,
roofline_measured, per_op_roofline, model_ceilings (the model on tables derived from the
ceilings alone; from the complexity JSONs, ceilings and inventories), model (from
predictions.csv) and model_loo (the model's device and host times rescaled
on the env's runs of other model families). Measured: the medians over the point's ok
runs of their median step and of their images/s; errors on step time, and on images/s
beside them. With ``--ncu``, ``--classes-out`` gets the model's share of device time by
class group beside each capture's kernel time by class. The summary per method (MAPE,
max error, Kendall tau, coverage) is printed.
"""

from __future__ import annotations

import argparse
import sys

import pandas as pd

from dnnroofline.aggregate import check as ac
from dnnroofline.aggregate import perfmodel_files as mf
from dnnroofline.aggregate.inputs import key_by_identity
from dnnroofline.aggregate.loaders import read_csv
from dnnroofline.aggregate.metrics import METRICS_DTYPES
from dnnroofline.errors import InputError
from dnnroofline.io import atomic_path, read_json
from dnnroofline.perfmodel.scoring import check_summary

CLASS_COLUMNS = ["env", "model", "precision", "batch", "group", "model_share", "ncu_share"]


def read(paths: list[str]) -> list[tuple[str, object]]:
    return [(p, read_json(p)) for p in paths]


def build(args: argparse.Namespace) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    metrics = read_csv(args.metrics, "metrics", METRICS_DTYPES)
    predictions = read_csv(args.predictions, "predictions", {"env": str, "model": str})
    pred_rows = predictions.to_dict("records")
    complexity = mf.key_docs(read(args.complexity), ("arch", "batch_size"), "complexity")
    ceilings = {e: v for (e,), v in mf.key_docs(read(args.ceilings), ("env",), "ceilings").items()}
    inventories = mf.key_inventories(read(args.inventories))
    rows = ac.check_rows(pred_rows, metrics, complexity, ceilings, inventories)
    check = pd.DataFrame(rows, columns=ac.CHECK_COLUMNS)
    if not args.ncu:
        return check, None
    groups = [(r["env"], r["model"], r["precision"], int(r["batch"])) for r in pred_rows]
    ncu, _ = key_by_identity(read(args.ncu), groups)
    by_point = {tuple(k): doc for k, (_, doc) in ncu.items()}
    classes = ac.class_comparison_rows(pred_rows, by_point)
    return check, pd.DataFrame(classes, columns=CLASS_COLUMNS)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--predictions", required=True, help="predictions CSV (predict.py)")
    p.add_argument("--metrics", required=True, help="metrics CSV (aggregate_metrics.py)")
    p.add_argument("--complexity", nargs="*", default=[], help="complexity JSON files")
    p.add_argument("--ceilings", nargs="+", required=True, help="ceilings JSON files")
    p.add_argument("--inventories", nargs="*", default=[], help="op inventory JSON files")
    p.add_argument("--ncu", nargs="*", default=[], help="parsed ncu JSON files (GPU envs)")
    p.add_argument("--classes-out", help="per-class comparison CSV (needs --ncu)")
    p.add_argument("--out", required=True, help="prediction check CSV to write")
    args = p.parse_args(argv)
    if args.ncu and not args.classes_out:
        p.error("--ncu needs --classes-out")
    try:
        check, classes = build(args)
    except InputError as exc:
        print(f"check_predictions: error: {exc}", file=sys.stderr)
        return 2
    with atomic_path(args.out) as tmp:
        check.to_csv(tmp, index=False)
    if args.classes_out:
        with atomic_path(args.classes_out) as tmp:
            (classes if classes is not None else pd.DataFrame(columns=CLASS_COLUMNS)).to_csv(
                tmp, index=False
            )
    for s in check_summary(check.to_dict("records")):
        print(
            f"check_predictions: {s['method']}: n {s['n']}, step time: MAPE "
            f"{s['mape_pct']:.1f}%, max |error| {s['max_abs_error_pct']:.1f}%, Kendall tau "
            f"{s['kendall_tau']:.2f}, coverage {s['coverage']:.2f}; images/s: MAPE "
            f"{s['images_per_s_mape_pct']:.1f}%, max |error| "
            f"{s['images_per_s_max_abs_error_pct']:.1f}%"
            + (
                f"; J/image: MAPE {s['joules_per_image_mape_pct']:.1f}%, max |error| "
                f"{s['joules_per_image_max_abs_error_pct']:.1f}%"
                if s["joules_per_image_n"]
                else ""
            ),
            file=sys.stderr,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
