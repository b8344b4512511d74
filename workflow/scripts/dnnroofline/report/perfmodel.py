"""The model section: how well the per-op roofline model predicted the measured points,
beside its baselines, and what it predicts for the points nobody measured (What if).

Inputs: ``results/predictions.csv`` (one row per point predicted, measured points and
what-ifs alike) and ``results/prediction_check.csv`` (one row per measured point and
method, its error on step time and on images/s), as DataFrames; the parity plot's SVG
text (``results/plots/prediction_parity.svg``), embedded in the page so that it reads
alone. Columns: docs/model.md.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping

import pandas as pd

from dnnroofline.aggregate.check import METHODS
from dnnroofline.formatting import isnum, missing, to_bool
from dnnroofline.perfmodel.predict import INTERVAL_LEVEL, METHOD
from dnnroofline.perfmodel.scoring import check_summary
from dnnroofline.report.render import section

KEYS = ["env", "model", "precision", "batch"]
#: The method whose per-point errors the page lists (the others are its baselines).
MODEL = "model"


def _records(df: pd.DataFrame | None) -> list[dict]:
    """A CSV's rows as dicts, missing cells as None."""
    if df is None or not len(df):
        return []
    return [{k: (None if missing(v) else v) for k, v in r.items()} for r in df.to_dict("records")]


def _interval_flag(value: object) -> bool | None:
    """A row's ``in_interval``: None where the method has no interval (an empty cell)."""
    return None if missing(value) or value == "" else to_bool(value)


#: The check's yes/no columns: whether the measurement fell in the interval, per unit.
FLAGS = ("in_interval", "images_per_s_in_interval")


def check_rows(check: pd.DataFrame | None) -> list[dict]:
    """The check's rows, sorted by point then method, :data:`FLAGS` as a bool or None."""
    rows = [dict(r, **{f: _interval_flag(r.get(f)) for f in FLAGS}) for r in _records(check)]
    order = {m: i for i, m in enumerate(METHODS)}
    return sorted(
        rows,
        key=lambda r: (*(str(r.get(k)) for k in KEYS[:3]), int(r.get("batch") or 0),
                       order.get(str(r.get("method")), len(order))),
    )  # fmt: skip


def method_table(rows: list[dict]) -> list[dict]:
    """Per method (baselines first, the model last): n, MAPE, max |error|, Kendall tau
    and interval coverage on step time and on images/s, as
    :func:`dnnroofline.perfmodel.scoring.check_summary` gives them."""
    summary = {s["method"]: s for s in check_summary(rows)}
    order = [m for m in METHODS if m in summary] + [m for m in summary if m not in METHODS]
    return [summary[m] for m in order]


def what_if_rows(predictions: pd.DataFrame | None) -> list[dict]:
    """The predictions of kind ``what_if``, with ``fits`` as a bool (None: not known)."""
    rows = [r for r in _records(predictions) if r.get("kind") == "what_if"]
    for r in rows:
        r["fits"] = None if r.get("fits") is None else to_bool(r["fits"])
    return rows


def parity_uri(svg: str | None) -> str | None:
    """The parity plot as a data: URI, so that the page holds its figure."""
    if not svg:
        return None
    return "data:image/svg+xml;base64," + base64.b64encode(svg.encode()).decode("ascii")


def facts(
    predictions: pd.DataFrame | None,
    check: pd.DataFrame | None,
    parity_svg: str | None = None,
) -> dict:
    """The page's facts: the methods' errors, the model's error per point, the what-ifs."""
    rows = check_rows(check)
    measured = [r for r in _records(predictions) if r.get("kind") == "measured"]
    return {
        "methods": method_table(rows),
        "points": [r for r in rows if r.get("method") == MODEL],
        "what_ifs": what_if_rows(predictions),
        "n_predicted": len(measured),
        "has_predictions": predictions is not None and "kind" in predictions,
        "parity": parity_uri(parity_svg),
        "interval_level": INTERVAL_LEVEL,
        "method_text": METHOD,
        "worst": worst_point(rows),
    }


def worst_point(rows: list[Mapping]) -> dict | None:
    """The model's largest |error| on step time among the points, to name in the summary."""
    errors = [r for r in rows if r.get("method") == MODEL and isnum(r.get("error_pct"))]
    return dict(max(errors, key=lambda r: abs(float(r["error_pct"])))) if errors else None


perfmodel_section = section("model.html", facts)
