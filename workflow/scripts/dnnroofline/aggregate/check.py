"""The model's check against the runs, from the study's files:
``results/prediction_check.csv``.

:func:`check_rows`: each measured point against the model, ``model_loo`` (the model
rescaled on other families' runs, :mod:`dnnroofline.perfmodel.loo`) and the baselines
(:data:`METHODS`), its error on step time and on images/s
(:mod:`dnnroofline.perfmodel.scoring`), and its measured peak memory;
:func:`class_comparison_rows` sets the model's share of step time by op class beside
ncu's kernel time by class. The predictions it checks are made without any run
(:mod:`dnnroofline.aggregate.predictions`).

No file I/O: the entry script (``check_predictions.py``) reads and writes.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

import pandas as pd

from dnnroofline.aggregate.inputs import check_runs_match_complexity
from dnnroofline.aggregate.perfmodel_files import (
    Point,
    inventory_on_device,
    parse_shares,
    peak_memory,
)
from dnnroofline.errors import InputError
from dnnroofline.estimate.roofline import parse_roofs, select_roof
from dnnroofline.ncu.kernel_classes import totals_by_kernel_class
from dnnroofline.perfmodel import loo, scoring
from dnnroofline.perfmodel import predict as pr

CHECK_COLUMNS = [
    "env",
    "model",
    "precision",
    "batch",
    "method",
    "predicted_step_s",
    "measured_step_s",
    "error_pct",
    "predicted_images_per_s",
    "measured_images_per_s",
    "images_per_s_error_pct",
    "predicted_peak_memory_bytes",
    "measured_peak_memory_bytes",
    "measured_peak_memory_source",
    "in_interval",
    "images_per_s_in_interval",
    "predicted_joules_per_image",
    "measured_joules_per_image",
    "joules_per_image_error_pct",
    "note",
]
#: The model itself on op-class tables derived from the env's ceilings.json alone (its
#: roof GEMMs, convolutions and STREAM; no dispatch cost): what the efficiency sweep adds
#: is the model's gain over it. The same as the model on an env that ran no sweep.
CEILINGS_MODEL = "model_ceilings"
BASELINES = ("roofline_datasheet", "roofline_measured", "per_op_roofline", CEILINGS_MODEL)
#: Baselines first, then the model rescaled on other families' runs, the model last.
METHODS = (*BASELINES, loo.NAME, "model")
#: The measured peak on a CPU: the process's max RSS less its RSS before the model was
#: built (the Python and torch runtime), to set beside the predicted tensors' peak.
RSS_ABOVE_RUNTIME = "max_rss_bytes-rss_before_model"
#: The groups op classes and kernel classes are compared in: a kernel's name tells its
#: op class only this finely (a reduction and an elementwise kernel share names).
CLASS_GROUPS = {
    "conv/GEMM": (
        ("gemm", "conv", "conv_depthwise"),
        ("convolution/GEMM", "FFT/Winograd convolution"),
    ),
    "normalization": (("normalization",), ("batch norm",)),
    "pooling": (("pooling",), ("pooling",)),
    "optimizer": (("optimizer",), ("optimizer",)),
    "elementwise, reduction, copy": (
        ("elementwise", "reduction", "copy"),
        ("elementwise and other", "fill", "layout transform"),
    ),
}


# --------------------------------------------------------------------------- the check


class NoRoof(InputError):
    """A ceilings file without the roof a method needs (a CPU has no datasheet memory
    roof): that method's row is left without a prediction and says why."""


def roof_of(ceilings: Mapping, kind: str, source: str, precision: str | None, where: str) -> float:
    """The roof of ``kind`` from ``source`` alone (for ``precision``, compute roofs), as
    :func:`dnnroofline.estimate.roofline.select_roof` picks it."""
    roof = select_roof(parse_roofs(dict(ceilings), where), kind, precision, sources=(source,))
    if roof is None:
        what = f"{kind} roof" + (f" for {precision}" if precision else "")
        raise NoRoof(f"{where}: no {source} {what}")
    return roof.value


def baseline_step_s(
    method: str,
    point: Point,
    complexity: Mapping,
    ceilings: Mapping,
    inventory: Mapping | None,
    where: str,
) -> float:
    """The step time one baseline predicts for a point (:data:`BASELINES`)."""
    precision = point[2]
    if method == CEILINGS_MODEL:
        return ceilings_model_step_s(point, ceilings, inventory, where)
    source = "datasheet" if method == "roofline_datasheet" else "measured"
    compute_roof = roof_of(ceilings, "compute", source, precision, where)
    bw = roof_of(ceilings, "memory", source, None, where)
    if method == "per_op_roofline":
        if inventory is None:
            raise InputError(f"per_op_roofline of {point}: no op inventory")
        return pr.per_op_roofline_step_s(inventory, compute_roof, bw)
    flops = ((complexity.get("flops") or {}).get("train_step")) if complexity else None
    nbytes = None
    if complexity:
        nbytes = ((complexity.get("by_precision") or {}).get(precision) or {}).get(
            "traffic_bytes_per_step"
        )
    if flops is None or nbytes is None:
        raise InputError(
            f"{method} of {point}: the complexity JSON has no train_step FLOPs or "
            f"by_precision.{precision}.traffic_bytes_per_step"
        )
    return pr.roofline_step_s(flops, nbytes, compute_roof, bw)


def ceilings_model_step_s(
    point: Point, ceilings: Mapping, inventory: Mapping | None, where: str
) -> float:
    """The model's step for a point on tables derived from its env's ceilings alone
    (:data:`CEILINGS_MODEL`); a ceilings file too thin for the tables (no roof GEMM of
    the precision, say) leaves the row without a prediction, saying why."""
    # imported here: the report and the parity plot import this module for METHODS alone,
    # and the tables' shape fit would bring scikit-learn into their envs
    from dnnroofline.aggregate.predictions import machine_of
    from dnnroofline.perfmodel import op_class_tables as oct_

    if inventory is None:
        raise NoRoof(f"{CEILINGS_MODEL} of {point}: no op inventory")
    source = f"op-class tables derived from {where} (no sweep)"
    try:
        machine = machine_of(oct_.tables_from_ceilings(ceilings, where), source)
        return pr.predict_step(inventory, machine, point[2], where, with_interval=False).step_s
    except InputError as exc:
        raise NoRoof(f"{CEILINGS_MODEL}: {exc}") from None


def measured_peak_memory(runs: pd.DataFrame, device: str) -> tuple[int | None, str, str]:
    """(highest peak over the runs, what it is, a note) of one point's ok runs. CUDA:
    peak device memory. Elsewhere: max RSS less the RSS before the model was built
    (:data:`RSS_ABOVE_RUNTIME`), or, for runs recorded before that field, max RSS with
    the runtime in it, and a note saying so."""

    def column(name: str) -> pd.Series:
        values = runs[name] if name in runs else pd.Series(math.nan, index=runs.index)
        return pd.to_numeric(values, errors="coerce")

    if device.startswith("cuda"):
        peak, source, note = (
            column("peak_device_memory_bytes").max(),
            "peak_device_memory_bytes",
            "",
        )
    elif len(above := (column("max_rss_bytes") - column("rss_before_model_bytes")).dropna()):
        peak, source, note = above.max(), RSS_ABOVE_RUNTIME, ""
    else:
        peak, source = column("max_rss_bytes").max(), "max_rss_bytes"
        note = (
            "runs without rss_before_model_bytes: measured peak memory is the process's "
            "max RSS, the Python and torch runtime in it"
        )
    return (None if pd.isna(peak) else int(peak)), source, note


def measured_points(metrics: pd.DataFrame) -> dict[Point, dict]:
    """Per point with an ok run: the median over its ok runs of their median step
    (``step_s``) and of their images/s, the runs' device, and their highest peak memory
    with the column read (:func:`measured_peak_memory`)."""
    ok = metrics[metrics["status"] == "ok"]
    out: dict[Point, dict] = {}
    for (env, model, precision, batch), runs in ok.groupby(
        ["env", "model", "precision", "batch_size"], sort=True
    ):
        device = str(runs["device"].iloc[0]) if "device" in runs else ""
        peak, source, note = measured_peak_memory(runs, device)
        out[(env, model, precision, int(batch))] = {
            "step_s": float(pd.to_numeric(runs["step_median_s"], errors="coerce").median()),
            "images_per_s": float(runs["images_per_s"].median()),
            "device": device,
            "peak_memory": peak,
            "peak_memory_source": source,
            "peak_memory_note": note,
            "joules_per_image": _median_joules_per_image(runs),
        }
    return out


def _median_joules_per_image(runs: pd.DataFrame) -> float:
    """The median joules per image over the runs that recorded it (NaN: none did, or the
    ledger predates energy)."""
    if "joules_per_image" not in runs:
        return math.nan
    values = pd.to_numeric(runs["joules_per_image"], errors="coerce").dropna()
    return float(values.median()) if len(values) else math.nan


def model_loo_steps(
    measured: Mapping[Point, Mapping], model_rows: Mapping[Point, Mapping]
) -> dict[Point, tuple[float, str]]:
    """Per measured point, ``model_loo``'s (step seconds, note): the model's predicted
    device and host times (predictions.csv's ``predicted_device_s``,
    ``predicted_host_s``) scaled by factors fitted on the env's points of other model
    families (:func:`dnnroofline.perfmodel.loo.loo_step_s`). The runs enter only through
    ``measured``, and only those of other families."""
    by_env: dict[str, dict[tuple, loo.LooPoint]] = {}
    gpu: dict[str, bool] = {}
    for point, meas in measured.items():
        pred = model_rows.get(point) or {}
        by_env.setdefault(point[0], {})[point[1:]] = loo.LooPoint(
            model=point[1],
            device_s=scoring.number(pred.get("predicted_device_s")),
            host_s=scoring.number(pred.get("predicted_host_s")),
            measured_s=meas["step_s"],
        )
        gpu[point[0]] = not str(meas.get("device") or "cpu").startswith("cpu")
    return {
        (env, *key): loo.loo_step_s(key, points, gpu[env])
        for env, points in by_env.items()
        for key in points
    }


def _check_row(
    point: Point,
    method: str,
    step: float,
    measured: Mapping,
    peak: object,
    interval_ips: tuple[object, object] | None = None,
    note: str = "",
    joules_per_image: object = math.nan,
) -> dict:
    """One row of :data:`CHECK_COLUMNS`: a method's predicted step against the point's
    runs, scored on step time and on images/s; ``interval_ips`` is the method's
    (low, high) images/s, where it has one; ``joules_per_image`` its energy per image,
    where it predicts one (the model)."""
    env, model, precision, batch = point
    ips = scoring.per_step(batch, step)  # batch / step: the same conversion both ways
    steps = scoring.step_interval(batch, *interval_ips) if interval_ips else None
    return {
        "env": env,
        "model": model,
        "precision": precision,
        "batch": batch,
        "method": method,
        "predicted_step_s": step,
        "measured_step_s": measured["step_s"],
        "error_pct": scoring.error_pct(step, measured["step_s"]),
        "predicted_images_per_s": ips,
        "measured_images_per_s": measured["images_per_s"],
        "images_per_s_error_pct": scoring.error_pct(ips, measured["images_per_s"]),
        "predicted_peak_memory_bytes": peak,
        "measured_peak_memory_bytes": measured["peak_memory"],
        "measured_peak_memory_source": measured["peak_memory_source"],
        "in_interval": scoring.inside(measured["step_s"], steps),
        "images_per_s_in_interval": scoring.inside(
            measured["images_per_s"],
            (batch / steps[1], batch / steps[0]) if steps else None,
        ),
        "predicted_joules_per_image": scoring.number(joules_per_image),
        "measured_joules_per_image": measured.get("joules_per_image", math.nan),
        "joules_per_image_error_pct": scoring.error_pct(
            joules_per_image, measured.get("joules_per_image", math.nan)
        ),
        "note": "; ".join(filter(None, [note, measured.get("peak_memory_note", "")])),
    }


def check_rows(
    predictions: Iterable[Mapping],
    metrics: pd.DataFrame,
    complexity: Mapping[tuple[str, int], tuple[str, Mapping]],
    ceilings: Mapping[str, tuple[str, Mapping]],
    inventories: Mapping[tuple[str, str, int, str], tuple[str, Mapping]],
) -> list[dict]:
    """One row per measured point and method (:data:`METHODS`), in point order. Runs of
    another image size or class count than their complexity JSON are refused."""
    check_runs_match_complexity(metrics, {k: doc for k, (_, doc) in complexity.items()})
    measured = measured_points(metrics)
    model_rows = {
        (r["env"], r["model"], r["precision"], int(r["batch"])): r
        for r in predictions
        if r.get("kind") == "measured" and r.get("method") == "model"
    }
    missing = [p for p in measured if p not in model_rows]
    if missing:
        raise InputError(
            f"point {missing[0]} was measured but predictions.csv has no model row for it"
        )
    loo_steps = model_loo_steps(measured, model_rows)
    rows = []
    for point, meas in measured.items():
        env, model, precision, batch = point
        where, ceil = ceilings.get(env, (None, None))
        if ceil is None:
            raise InputError(f"point {point}: no ceilings for env {env!r}")
        comp = complexity.get((model, batch), (None, None))[1]
        device = str(ceil.get("device") or "cpu")
        found = inventory_on_device(inventories, model, precision, batch, device)
        inventory = found[1] if found else None
        peak = peak_memory(comp, precision)
        for method in BASELINES:
            try:
                step = baseline_step_s(method, point, comp, ceil, inventory, where)
            except NoRoof as exc:  # e.g. a CPU's datasheet: a compute roof, no memory roof
                rows.append(_check_row(point, method, math.nan, meas, peak, note=str(exc)))
                continue
            rows.append(_check_row(point, method, step, meas, peak))
        step, note = loo_steps[point]
        rows.append(_check_row(point, loo.NAME, step, meas, peak, note=note))
        pred = model_rows[point]
        step = scoring.number(pred.get("predicted_step_s"))
        interval = (pred.get("interval_low_images_per_s"), pred.get("interval_high_images_per_s"))
        why = "" if math.isfinite(step) else scoring.text(pred.get("notes"))
        joules = pred.get("predicted_joules_per_image", math.nan)
        rows.append(_check_row(point, "model", step, meas, peak, interval, why, joules))
    return rows


def class_comparison_rows(
    predictions: Iterable[Mapping], ncu: Mapping[Point, Mapping]
) -> list[dict]:
    """Per captured point and class group (:data:`CLASS_GROUPS`): the model's share of
    device time against the capture's share of kernel time (kernel pass durations)."""
    rows = []
    for r in predictions:
        point = (r["env"], r["model"], r["precision"], int(r["batch"]))
        doc = ncu.get(point)
        if doc is None or r.get("method") != "model" or r.get("kind") != "measured":
            continue
        model_shares = parse_shares(r.get("class_shares"))
        kernels = totals_by_kernel_class(doc)
        kernel_total = sum(t["time_s"] for t in kernels.values())
        if kernel_total <= 0:
            continue
        for group, (op_classes, kernel_classes) in CLASS_GROUPS.items():
            rows.append(
                {
                    "env": point[0],
                    "model": point[1],
                    "precision": point[2],
                    "batch": point[3],
                    "group": group,
                    "model_share": sum(model_shares.get(c, 0.0) for c in op_classes),
                    "ncu_share": sum(kernels.get(c, {}).get("time_s", 0.0) for c in kernel_classes)
                    / kernel_total,
                }
            )
    return rows
