#!/usr/bin/env python
"""Predict every point of the study and every what-if: results/predictions.csv.

    python workflow/scripts/predict.py \
        --matrix results/study_matrix.json [--config results/study_config.json] \
        [--point ENV MODEL PRECISION BATCH ...] \
        --inventories results/complexity/*_ops.json \
        --complexity results/complexity/*_bs*.json \
        --ceilings results/*/ceilings.json [--efficiency results/*/efficiency.json] \
        [--env-info results/*/env_info.json] --out results/predictions.csv

Points: the (env, model, precision, batch) of the runs in ``--matrix`` (the study_matrix
rule's list), plus any ``--point``. What-ifs: the ``predict:`` entries of ``--config``,
resolved against the envs' files by the config check's own rules (a datasheet GPU
borrows the tables of a measured CUDA env of its architecture, scaled by the datasheet
peaks, and ``env_source`` says so). Every file is keyed by its
content: inventories by ``arch, precision, batch_size`` and the step variant they record
(device and memory format: each env's points read the inventory of its own variant, a
datasheet GPU's cuda in the layout of the env it borrows from), complexity by ``arch,
batch_size``, ceilings, efficiency and env info by ``env``. An env without an
efficiency file has its tables derived from its ceilings (said in the notes). No
metrics and no runs are read: a point is never predicted from its own measurements.
"""

from __future__ import annotations

import argparse
import sys

import pandas as pd

from dnnroofline.aggregate import perfmodel_files as mf
from dnnroofline.aggregate import predictions as ap
from dnnroofline.errors import InputError
from dnnroofline.io import atomic_path, read_json


def matrix_points(path: str) -> list[mf.Point]:
    runs = read_json(path)
    if not isinstance(runs, list):
        raise InputError(f"{path}: expected a list of runs")
    try:
        return [(r["env"], r["model"], r["precision"], int(r["batch_size"])) for r in runs]
    except (KeyError, TypeError, ValueError) as exc:
        raise InputError(
            f"{path}: a run lacks env, model, precision or batch_size ({exc})"
        ) from None


def read(paths: list[str]) -> list[tuple[str, object]]:
    return [(p, read_json(p)) for p in paths]


def channels_last_of(config: dict, env: str) -> bool | None:
    """The env's channels_last as the resolved config gives it (None: not given)."""
    spec = (config.get("envs") or {}).get(env)
    value = spec.get("channels_last") if isinstance(spec, dict) else None
    return None if value is None else bool(value)


def build(args: argparse.Namespace) -> pd.DataFrame:
    points = matrix_points(args.matrix) if args.matrix else []
    points += [(e, m, p, int(b)) for e, m, p, b in args.point]
    inventories = mf.key_inventories(read(args.inventories))
    config = read_json(args.config) if args.config else {}
    if not isinstance(config, dict):
        raise InputError(f"{args.config}: expected the study config as a JSON object")
    complexity = mf.key_docs(read(args.complexity), ("arch", "batch_size"), "complexity")
    ceilings = mf.key_docs(read(args.ceilings), ("env",), "ceilings")
    efficiency = mf.key_docs(read(args.efficiency), ("env",), "op-class tables")
    env_info = mf.key_docs(read(args.env_info), ("env",), "env info")
    envs = {}
    for (env,), (where, doc) in ceilings.items():
        eff_where, eff = efficiency.get((env,), ("", None))
        info = env_info.get((env,), (None, None))[1]
        layout = channels_last_of(config, env)
        envs[env] = ap.EnvFiles(env, doc, eff, info, where, eff_where, channels_last=layout)
    what_ifs = ap.resolve_what_ifs(config.get("predict"), envs)
    rows = ap.prediction_rows(points, what_ifs, inventories, complexity, envs)
    return pd.DataFrame(rows, columns=ap.PREDICTION_COLUMNS)


def main(argv: list[str] | None = None) -> int:
    ap_ = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap_.add_argument("--matrix", help="results/study_matrix.json: the study's runs")
    ap_.add_argument(
        "--point",
        nargs=4,
        action="append",
        default=[],
        metavar=("ENV", "MODEL", "PRECISION", "BATCH"),
        help="a point to predict (repeatable), besides the matrix's",
    )
    ap_.add_argument(
        "--config", help="results/study_config.json: its predict: block gives the what-ifs"
    )
    ap_.add_argument("--inventories", nargs="*", default=[], help="op inventory JSON files")
    ap_.add_argument("--complexity", nargs="*", default=[], help="complexity JSON files")
    ap_.add_argument("--ceilings", nargs="+", required=True, help="ceilings JSON files")
    ap_.add_argument("--efficiency", nargs="*", default=[], help="efficiency JSON files")
    ap_.add_argument("--env-info", nargs="*", default=[], help="env_info JSON files")
    ap_.add_argument("--out", required=True, help="predictions CSV to write")
    args = ap_.parse_args(argv)
    try:
        df = build(args)
    except InputError as exc:
        print(f"predict: error: {exc}", file=sys.stderr)
        return 2
    with atomic_path(args.out) as tmp:
        df.to_csv(tmp, index=False)
    n_what_if = int((df["kind"] == "what_if").sum())
    print(
        f"predict: {len(df) - n_what_if} study points, {n_what_if} what-ifs -> {args.out}",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
