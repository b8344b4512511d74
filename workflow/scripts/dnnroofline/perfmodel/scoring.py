"""How wrong each prediction was: the arithmetic of the model's check.

Errors are scored on step time, ``(predicted - measured) / measured`` seconds per step,
as Habitat and NeuSight score theirs: a step predicted twice too long is +100% and one
predicted at half is -50%, where an images/s error would be -50% and +100%, flattering a
prediction that is too fast. The images/s error is kept beside it, so that both read.

Pure arithmetic on the rows of ``results/prediction_check.csv`` (docs/model.md; the
rows are made by ``dnnroofline.aggregate.predictions.check_rows`` and, for another GPU,
``dnnroofline.perfmodel.transfer.check_rows``); no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from numbers import Real

from scipy.stats import kendalltau

#: The two units a method is scored in: (prefix of the summary's keys, the rows'
#: predicted, measured, error and in-interval columns). Step time first: the headline.
UNITS = {
    "step": ("", "predicted_step_s", "measured_step_s", "error_pct", "in_interval"),
    "images_per_s": (
        "images_per_s_",
        "predicted_images_per_s",
        "measured_images_per_s",
        "images_per_s_error_pct",
        "images_per_s_in_interval",
    ),
    # energy has no interval: its coverage is NaN
    "joules_per_image": (
        "joules_per_image_",
        "predicted_joules_per_image",
        "measured_joules_per_image",
        "joules_per_image_error_pct",
        None,
    ),
}


def finite(x: object) -> bool:
    """A real number that is not NaN or infinite (numpy's included; a bool is none)."""
    return isinstance(x, Real) and not isinstance(x, bool) and math.isfinite(x)


def number(x: object) -> float:
    """A cell as a float; NaN where it holds no finite number (empty, text, None)."""
    return float(x) if finite(x) else math.nan  # type: ignore[arg-type]


def error_pct(predicted: object, measured: object) -> float:
    """100 x (predicted - measured) / measured; NaN unless both are finite and measured
    is positive."""
    p, m = number(predicted), number(measured)
    return 100.0 * (p - m) / m if math.isfinite(p) and m > 0 else math.nan


def per_step(batch: object, rate: object) -> float:
    """Seconds per step of ``rate`` images/s at ``batch`` images per step (NaN unless
    the rate is positive): the one conversion between the two units."""
    r = number(rate)
    return number(batch) / r if r > 0 else math.nan


def step_interval(batch: object, low_ips: object, high_ips: object) -> tuple[float, float] | None:
    """An images/s interval as a step-time interval: the slow end of the rate is the
    long end of the step. None where either end is missing."""
    low, high = per_step(batch, high_ips), per_step(batch, low_ips)
    return (low, high) if math.isfinite(low) and math.isfinite(high) else None


def inside(value: object, interval: tuple[float, float] | None) -> bool | None:
    """Whether ``value`` lies in ``interval`` (ends included); None without an interval
    or a value."""
    if interval is None or not finite(value):
        return None
    return bool(interval[0] <= float(value) <= interval[1])  # type: ignore[arg-type]


def kendall_tau(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Kendall's tau-b of two paired samples (:func:`scipy.stats.kendalltau`, ties
    counted as neither); NaN under 2 pairs or where one side is constant (no order)."""
    if len(xs) != len(ys):
        raise ValueError(f"kendall_tau: {len(xs)} x values, {len(ys)} y values")
    if len(xs) < 2 or len(set(xs)) < 2 or len(set(ys)) < 2:
        return math.nan
    return float(kendalltau(xs, ys).statistic)


def flag(x: object) -> bool | None:
    """A yes/no cell as a bool (a bool, numpy's, or "True"/"False" from a CSV); None else."""
    if isinstance(x, str):
        return {"True": True, "False": False}.get(x)
    if isinstance(x, bool) or type(x).__name__ == "bool_":
        return bool(x)
    return None


def unit_scores(rows: Sequence[Mapping], unit: str) -> dict:
    """MAPE, max |error|, Kendall tau and coverage of one method's rows in one unit of
    :data:`UNITS`, the keys prefixed as there; over the rows with a finite error."""
    prefix, predicted, measured, error, in_interval = UNITS[unit]
    scored = [r for r in rows if finite(r.get(error))]
    errors = [abs(float(r[error])) for r in scored]
    flags = [f for f in (flag(r.get(in_interval)) for r in scored) if f is not None]
    return {
        f"{prefix}n": len(scored),
        f"{prefix}mape_pct": sum(errors) / len(errors) if errors else math.nan,
        f"{prefix}max_abs_error_pct": max(errors) if errors else math.nan,
        f"{prefix}kendall_tau": kendall_tau(
            [float(r[predicted]) for r in scored], [float(r[measured]) for r in scored]
        ),
        f"{prefix}coverage": sum(flags) / len(flags) if flags else math.nan,
    }


def check_summary(rows: Iterable[Mapping]) -> list[dict]:
    """Per method with a finite step-time error: ``n``, ``mape_pct`` (mean |error_pct|),
    ``max_abs_error_pct``, ``kendall_tau`` (predicted against measured step time over the
    points) and ``coverage`` (share of its rows whose measured step lies in the interval;
    NaN for a method without one), on step time; the same five keys prefixed
    ``images_per_s_`` on images/s, and ``joules_per_image_`` on energy per image (``n``
    0 where the method or the runs have none). Methods in order of first appearance."""
    by_method: dict[str, list[Mapping]] = {}
    for row in rows:
        if finite(row.get("error_pct")):
            by_method.setdefault(str(row["method"]), []).append(row)
    return [
        {"method": method, **{k: v for unit in UNITS for k, v in unit_scores(rs, unit).items()}}
        for method, rs in by_method.items()
    ]


def text(x: object) -> str:
    """A text cell; an empty one read back from a CSV is NaN."""
    return x if isinstance(x, str) else ""
