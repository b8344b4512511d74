"""An op's efficiency from its shape: one fit per op-class table, from the sweep's rows.

A table's rows are microbenchmarked ops with their shape, FLOPs, bytes, device seconds
and ideal seconds on the env's roofs. The fit predicts ``log(device seconds / ideal
seconds)``, the log of the op's time over its roofline time, from the table's features
(:func:`dnnroofline.perfmodel.shape_features.feature_vector`: a convolution's batch,
channels, spatial size, kernel, stride and groups; a GEMM's m, n, k; ...), so a
depthwise 3x3 and a dense 1x1 of one ideal time are told apart.

The regressor is scikit-learn's ``ExtraTreesRegressor`` (an average of randomised
trees, seeded). Why: with a few dozen rows per table and features that interact (the
same kernel is fast at one channel count and slow at another), on a sweep's own rows
held out five-fold its median error was 0.32 in log time over the tables, against 0.36
for a random forest, gradient boosting or a Gaussian process, 0.37 for nearest
neighbours and 0.61 for the lookup by ideal time alone (``benchmarks/bench_shape_fit.py``,
``benchmarks/results/shape_fit.json``); and its prediction is an average of measured
rows, so it never strays outside what the sweep saw: beyond the sweep's ranges it holds
the nearest rows' efficiency. A table of fewer than :data:`MIN_FIT_ROWS` rows (a
ceilings file's few benchmarks) is interpolated on log ideal time alone, the median of
each row and its neighbours, clamped at its ends.

Every efficiency is bounded by the roofline: an op never runs faster than its ideal
time, unless the table itself measured rows above the roof (a cache that held the
inputs, a Winograd convolution counted at its nominal FLOPs), and then no faster than
the fastest such row. Pure: no I/O; scikit-learn is imported on the first fit.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dnnroofline.errors import InputError
from dnnroofline.perfmodel.shape_features import feature_vector

#: Below this many rows a table is interpolated on ideal time (too few shapes to fit).
MIN_FIT_ROWS = 6
#: Folds of the cross-validation that gives a fit's residuals (the interval's width).
FOLDS = 5
#: Trees of the fit, and of each fold's (its residuals vary little beyond a few dozen).
TREES, FOLD_TREES = 120, 40
MIN_LEAF = 2


def interpolate(points: Sequence[tuple[float, float]], x: float) -> float:
    """Linear interpolation of ``points`` ((x, y) sorted by x) at ``x``, clamped to the
    end values outside them."""
    if x <= points[0][0]:
        return points[0][1]
    if x >= points[-1][0]:
        return points[-1][1]
    for (x0, y0), (x1, y1) in zip(points, points[1:], strict=False):
        if x <= x1:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return points[-1][1]


def _running_median(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Each point's y replaced by the median of it and its neighbours (two at the ends):
    one microbenchmark disturbed by another process must not set its size alone."""
    if len(points) < 3:
        return points
    ys = [y for _, y in points]
    return [(x, statistics.median(ys[max(0, i - 1) : i + 2])) for i, (x, _) in enumerate(points)]


def ideal_time_points(rows: Sequence[Mapping]) -> tuple[tuple[float, float], ...]:
    """(log ideal_s, log efficiency) per distinct ideal time, sorted, smoothed; rows of
    one ideal time merged by their geometric mean."""
    by_ideal: dict[float, list[float]] = {}
    for r in rows:
        by_ideal.setdefault(math.log(r["ideal_s"]), []).append(math.log(r["efficiency"]))
    merged = [(x, sum(v) / len(v)) for x, v in sorted(by_ideal.items())]
    return tuple(_running_median(merged))


def features_of(key: str, item: Mapping, at: str) -> list[float]:
    return feature_vector(
        key, item.get("shape") or {}, str(item.get("phase", "forward")), float(item["ideal_s"]),
        float(item.get("flops", 0)), float(item.get("bytes", 1)), at,
    )  # fmt: skip


@dataclass
class Fit:
    """One table's fit: the trees (None: ideal-time interpolation), the bound."""

    key: str
    model: Any
    points: tuple[tuple[float, float], ...]
    log_bound: float  # the highest log efficiency allowed: 0 (the roof) or the best row's

    def log_efficiency(self, items: Sequence[Mapping], at: str) -> tuple[list[float], int]:
        """Log efficiency of each op (``shape``, ``phase``, ``ideal_s``, ``flops``,
        ``bytes``), bounded; and how many were read by their ideal time alone, their
        shape lacking the table's features (an inventory of the first schema)."""
        values = [interpolate(self.points, math.log(i["ideal_s"])) for i in items]
        by_ideal = len(items)
        if self.model is not None:
            rows, x = [], []
            for j, item in enumerate(items):
                try:
                    x.append(features_of(self.key, item, at))
                except InputError:
                    continue
                rows.append(j)
            for j, v in zip(rows, self.model.predict(x) if x else [], strict=True):
                values[j] = -float(v)
            by_ideal -= len(rows)
        return [min(v, self.log_bound) for v in values], by_ideal if self.model else 0


def regressor(seed: int = 0, trees: int = TREES) -> Any:
    from sklearn.ensemble import ExtraTreesRegressor

    return ExtraTreesRegressor(n_estimators=trees, min_samples_leaf=MIN_LEAF, random_state=seed)


def fit_table(key: str, rows: Sequence[Mapping], at: str) -> Fit:
    """The fit of table ``key`` from its rows (each with ``efficiency`` and ``ideal_s``:
    the device time is ``ideal_s / efficiency``)."""
    log_eff = [math.log(r["efficiency"]) for r in rows]
    bound = max(0.0, max(log_eff))
    points = ideal_time_points(rows)
    if len(rows) < MIN_FIT_ROWS:
        return Fit(key, None, points, bound)
    model = regressor()
    model.fit([features_of(key, r, at) for r in rows], [-v for v in log_eff])
    return Fit(key, model, points, bound)


def cross_validated_residuals(key: str, rows: Sequence[Mapping], at: str) -> list[float]:
    """``log(measured / predicted time)`` of each row, predicted by a fit on the other
    folds (leave-one-out where the table is interpolated); none under 3 rows."""
    if len(rows) < 3:
        return []
    if len(rows) < MIN_FIT_ROWS:
        out = []
        for i, row in enumerate(rows):
            rest = ideal_time_points([r for j, r in enumerate(rows) if j != i])
            pred = interpolate(rest, math.log(row["ideal_s"]))
            out.append(pred - math.log(row["efficiency"]))
        return out
    from sklearn.model_selection import KFold

    x = [features_of(key, r, at) for r in rows]
    y = [-math.log(r["efficiency"]) for r in rows]
    out = [0.0] * len(rows)
    for train, test in KFold(FOLDS, shuffle=True, random_state=0).split(x):
        model = regressor(trees=FOLD_TREES)
        model.fit([x[i] for i in train], [y[i] for i in train])
        for i, pred in zip(test, model.predict([x[i] for i in test]), strict=True):
            out[i] = y[i] - float(pred)  # log measured time - log predicted time
    return out
