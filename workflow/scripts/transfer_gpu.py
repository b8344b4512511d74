#!/usr/bin/env python
"""Predict a GPU from another GPU's runs, then check the prediction against its runs.

    python workflow/scripts/transfer_gpu.py predict --predictions results/predictions.csv \
        --origin-env h100 --origin-metrics examples/h100/metrics.csv \
        --origin-env-info results/h100/env_info.json --captures results/h100/ncu/h100_*.json \
        --target h200_sxm --target-env h200 --out examples/h200/predicted.csv
    python workflow/scripts/transfer_gpu.py check --predicted examples/h200/predicted.csv \
        --metrics examples/h200/metrics.csv --out examples/h200/prediction_check.csv

``predict``: every point that predictions.csv predicts on the datasheet GPU ``--target``
(its ``predict:`` what-ifs), by the model calibrated on the origin's runs and by three
baselines (``dnnroofline.perfmodel.transfer``). It reads no run of the target. ``check``: one
row per point and method with the columns of prediction_check.csv and the point's anchor;
each method's MAPE, maximum error (on step time, on images/s in brackets) and Kendall tau
printed over every point and over the points the origin measured itself (anchor "this
point": the transfer alone).
"""

from __future__ import annotations

import argparse
import sys

import pandas as pd

from dnnroofline.aggregate.check import measured_points
from dnnroofline.aggregate.loaders import read_csv
from dnnroofline.aggregate.metrics import METRICS_DTYPES
from dnnroofline.errors import InputError
from dnnroofline.io import atomic_path, read_json
from dnnroofline.perfmodel import transfer
from dnnroofline.study import datasheet


def model_rows(predictions: pd.DataFrame, env: str) -> dict[transfer.Point, dict]:
    rows = predictions[(predictions["env"] == env) & (predictions["method"] == "model")]
    return {(r["model"], r["precision"], int(r["batch"])): r for r in rows.to_dict("records")}


def measured(metrics_path: str, env: str) -> dict[transfer.Point, dict]:
    points = measured_points(read_csv(metrics_path, "metrics", METRICS_DTYPES))
    return {(m, p, b): v for (e, m, p, b), v in points.items() if e == env}


def read_captures(paths: list[str]) -> dict[transfer.Point, list]:
    out = {}
    for path in paths:
        doc = read_json(path)
        if doc.get("status") != "ok" or not doc.get("kernels"):
            continue  # a capture that failed has no kernels to scale
        config = (doc.get("driver_run") or {}).get("config") or {}
        try:
            point = (config["arch"], config["precision"], int(config["batch_size"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise InputError(f"{path}: driver_run.config lacks {exc}") from exc
        out[point] = doc["kernels"]
    return out


def gpu_of(key_or_name: str, what: str) -> datasheet.GpuPeaks:
    gpu = datasheet.gpu_by_key(key_or_name) or datasheet.lookup_gpu(key_or_name)
    if gpu is None:
        raise InputError(f"{what}: {key_or_name!r} is no GPU of the datasheet table")
    return gpu


def predict(args: argparse.Namespace) -> pd.DataFrame:
    predictions = read_csv(args.predictions, "predictions", {"env": str, "model": str})
    target_model = model_rows(predictions, args.target)
    if not target_model:
        raise InputError(
            f"{args.predictions}: no model rows for --target {args.target} (add it to the "
            "config's predict: block)"
        )
    env_info = read_json(args.origin_env_info)
    gpus = env_info.get("gpus") or [{}]
    origin = gpu_of(gpus[0].get("name") or "", f"{args.origin_env_info} gpus[0].name")
    rows = transfer.transfer_rows(
        sorted(target_model),
        origin_env=args.origin_env,
        target_env=args.target_env,
        origin_model=model_rows(predictions, args.origin_env),
        target_model=target_model,
        origin_measured_s={
            p: p[2] / v["images_per_s"]
            for p, v in measured(args.origin_metrics, args.origin_env).items()
        },
        captures=read_captures(args.captures),
        origin=origin,
        target=gpu_of(args.target, "--target"),
    )
    return pd.DataFrame(rows, columns=transfer.COLUMNS)


def check(args: argparse.Namespace) -> pd.DataFrame:
    predicted = read_csv(args.predicted, "predicted", {"env": str, "model": str})
    envs = set(predicted["env"])
    if len(envs) != 1:
        raise InputError(f"{args.predicted}: expected one target env, found {sorted(envs)}")
    rows = transfer.check_rows(predicted.to_dict("records"), measured(args.metrics, envs.pop()))
    return pd.DataFrame(rows)


def scored(s: dict) -> str:
    """One method's scores (dnnroofline.perfmodel.scoring.check_summary) on one line."""
    return (
        f"n={s['n']} MAPE {s['mape_pct']:.1f}% ({s['images_per_s_mape_pct']:.1f}%) "
        f"max {s['max_abs_error_pct']:.1f}% ({s['images_per_s_max_abs_error_pct']:.1f}%) "
        f"tau {s['kendall_tau']:.2f}"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    pp = sub.add_parser("predict", help="predict the target GPU's points")
    pp.add_argument("--predictions", required=True, help="predictions CSV (rule predictions)")
    pp.add_argument("--origin-env", required=True, help="the measured GPU env")
    pp.add_argument("--origin-metrics", required=True, help="metrics CSV with its runs")
    pp.add_argument("--origin-env-info", required=True, help="its env_info.json")
    pp.add_argument("--captures", nargs="*", default=[], help="its parsed ncu JSONs")
    pp.add_argument("--target", required=True, help="datasheet key of the target GPU")
    pp.add_argument("--target-env", required=True, help="the env the target is measured as")
    pc = sub.add_parser("check", help="check predictions against the target's runs")
    pc.add_argument("--predicted", required=True, help="CSV written by predict")
    pc.add_argument("--metrics", required=True, help="metrics CSV with the target's runs")
    for sp in (pp, pc):
        sp.add_argument("--out", required=True, help="CSV to write")
    args = p.parse_args(argv)
    try:
        table = predict(args) if args.command == "predict" else check(args)
    except InputError as exc:
        print(f"transfer_gpu: error: {exc}", file=sys.stderr)
        return 2
    with atomic_path(args.out) as tmp:
        table.to_csv(tmp, index=False)
    if args.command == "check":
        print(
            "method: errors on step time (on images/s) over every point | over the points "
            "the origin measured"
        )
        for entry in transfer.summary(table.to_dict("records")):
            scores = (scored(s) for s in (entry["all"], entry["same"]) if s)
            print(f"{entry['method']:>20}: " + " | ".join(scores))
    print(f"transfer_gpu: {len(table)} rows -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
