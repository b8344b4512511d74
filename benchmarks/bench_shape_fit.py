"""Issue 36: which fit reads an op's efficiency from its shape best, on a sweep's own rows.

    python benchmarks/bench_shape_fit.py --efficiency results/local/efficiency.json \\
        [--precision fp32] [--out shape_fit.json]

For each table of an env's op-class sweep (``make study`` writes one), every row's
time is predicted by each candidate fitted on the other rows (5-fold cross-validation,
seeded), from the features the model reads (:mod:`dnnroofline.perfmodel.shape_features`):

* ``ideal_time``: the first model's lookup, interpolation on log ideal time alone;
* ``extra_trees`` (the model's: :mod:`dnnroofline.perfmodel.shape_fit`), ``random_forest``,
  ``gradient_boosting``, ``gaussian_process`` (RBF with a length per feature, plus
  noise), ``knn`` (5 neighbours, distance-weighted, standardised features): scikit-learn.

Per table and candidate: the median and 90th percentile of |log(predicted / measured
time)|, and the mean |time error| in percent. The sweep's rows are its own held-out
shapes: no model of any study enters this choice. Prints a markdown table; writes JSON.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import warnings
from pathlib import Path

from dnnroofline.perfmodel import op_class_tables as oct_
from dnnroofline.perfmodel import shape_fit


def candidates() -> dict:
    from sklearn.ensemble import GradientBoostingRegressor, RandomForestRegressor
    from sklearn.gaussian_process import GaussianProcessRegressor
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel
    from sklearn.neighbors import KNeighborsRegressor
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    def gp(n):
        kernel = ConstantKernel() * RBF([1.0] * n) + WhiteKernel()
        return make_pipeline(StandardScaler(), GaussianProcessRegressor(kernel, normalize_y=True))

    return {
        "extra_trees": lambda n: shape_fit.regressor(),
        "random_forest": lambda n: RandomForestRegressor(200, min_samples_leaf=2, random_state=0),
        "gradient_boosting": lambda n: GradientBoostingRegressor(
            n_estimators=200, max_depth=3, learning_rate=0.05, subsample=0.8, random_state=0
        ),
        "gaussian_process": gp,
        "knn": lambda n: make_pipeline(
            StandardScaler(), KNeighborsRegressor(5, weights="distance")
        ),
    }


def errors(key: str, rows: list[dict], make) -> list[float]:
    """|log(predicted / measured time)| of each row, predicted by a fit on the others."""
    from sklearn.model_selection import KFold

    x = [shape_fit.features_of(key, r, key) for r in rows]
    y = [-math.log(r["efficiency"]) for r in rows]
    out = []
    for train, test in KFold(shape_fit.FOLDS, shuffle=True, random_state=0).split(x):
        if make is None:  # the ideal-time lookup
            points = shape_fit.ideal_time_points([rows[i] for i in train])
            preds = [-shape_fit.interpolate(points, math.log(rows[i]["ideal_s"])) for i in test]
        else:
            model = make(len(x[0]))
            model.fit([x[i] for i in train], [y[i] for i in train])
            preds = model.predict([x[i] for i in test])
        out += [abs(y[i] - float(p)) for i, p in zip(test, preds, strict=True)]
    return out


def summary(errs: list[float]) -> dict:
    errs = sorted(errs)
    return {
        "n": len(errs),
        "median_abs_log": statistics.median(errs),
        "p90_abs_log": errs[int(0.9 * (len(errs) - 1))],
        "mean_abs_time_error_pct": 100 * statistics.fmean(math.expm1(e) for e in errs),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--efficiency", required=True)
    ap.add_argument("--precision", default="fp32")
    ap.add_argument("--out", default="shape_fit.json")
    args = ap.parse_args()
    doc = json.loads(Path(args.efficiency).read_text())
    tables = oct_.load_tables(doc, args.efficiency)
    makers = {"ideal_time": None, **candidates()}
    report: dict[str, dict] = {}
    for key, rows in tables.rows[args.precision].items():
        if len(rows) < shape_fit.MIN_FIT_ROWS:
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the GP's convergence notes
            report[key] = {name: summary(errors(key, list(rows), m)) for name, m in makers.items()}
    names = list(makers)
    print("| table | rows | " + " | ".join(names) + " |")
    print("|---|---:|" + "---:|" * len(names))
    for key, by in report.items():
        cells = " | ".join(f"{by[n]['median_abs_log']:.2f}" for n in names)
        print(f"| {key} | {by[names[0]]['n']} | {cells} |")
    pooled = {n: statistics.fmean(by[n]["median_abs_log"] for by in report.values()) for n in names}
    print("| mean of tables | | " + " | ".join(f"{pooled[n]:.2f}" for n in names) + " |")
    Path(args.out).write_text(
        json.dumps(
            {
                "efficiency": args.efficiency,
                "precision": args.precision,
                "machine": doc.get("device_name"),
                "tables": report,
                "mean": pooled,
            },
            indent=1,
        )
        + "\n"  # fmt: skip
    )
    print(f"-> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
