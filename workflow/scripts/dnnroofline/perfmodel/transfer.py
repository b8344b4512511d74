"""Predict a GPU from another GPU's runs: the model and three baselines, per point.

The model alone (``predictions.csv``) predicts a datasheet GPU from the tables of a
measured one, and on the H100 its absolute error is large (its tables are derived from
the ceilings). Moving to a GPU of the same chip, what matters is the *change*: here the
model is calibrated on the origin's runs, and every method starts from the same origin
step time, so that the methods differ only in how they move it to the target.

For a point p with an anchor a (p itself when the origin measured p; else the nearest
measured point, see :func:`choose_anchor`), calibration c = measured(a) / model_origin(a):

* ``model``: model_target(p) x c (the model's per-op change from origin to target);
* ``model_uncalibrated``: model_target(p), the what-if as ``predictions.csv`` has it;
* ``no_change``: the origin's step, model_origin(p) x c (= measured(p) when a = p);
* ``bandwidth_ratio``: that step x origin / target DRAM bandwidth (the whole step scales);
* ``habitat``: that step x Habitat's per-kernel roofline wave scaling over the origin's
  ncu capture (:func:`habitat_step_ratio`).

No file I/O: ``workflow/scripts/predict_transfer.py`` reads and writes.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

from dnnroofline.errors import InputError
from dnnroofline.perfmodel.scoring import (
    check_summary,
    error_pct,
    inside,
    number,
    step_interval,
    text,
)
from dnnroofline.study.datasheet import GpuPeaks
from dnnroofline.study.precisions import tensor_core_precision

Point = tuple[str, str, int]  # (model, precision, batch)

METHODS = ("model", "model_uncalibrated", "no_change", "bandwidth_ratio", "habitat")
COLUMNS = [
    "env",
    "model",
    "precision",
    "batch",
    "method",
    "predicted_step_s",
    "predicted_images_per_s",
    "interval_low_images_per_s",
    "interval_high_images_per_s",
    "predicted_peak_memory_bytes",
    "device_memory_bytes",
    "fits",
    "origin_env",
    "anchor",
    "calibration",
    "capture",
    "notes",
]


def habitat_gamma(ai: float, ridge: float) -> float:
    """Habitat's memory-boundedness of a kernel (Yu et al., USENIX ATC'21, roofline wave
    scaling): 1 - 0.5 x AI / R up to the target's ridge point R, then 0.5 x R / AI.
    A kernel without FLOPs is memory-bound (1); one without DRAM bytes compute-bound (0)."""
    if ridge <= 0:
        raise ValueError(f"ridge point must be positive, got {ridge}")
    if ai <= 0:
        return 1.0
    if math.isinf(ai):
        return 0.0
    return 1.0 - 0.5 * ai / ridge if ai <= ridge else 0.5 * ridge / ai


def kernel_ridge(gpu: GpuPeaks, precision: str, tensor_flop: float) -> float:
    """The datasheet ridge point of the unit a kernel ran on: the precision's tensor-core
    peak (tf32 for an fp32 step) for a kernel with tensor-core FLOPs, the CUDA cores' fp32
    peak otherwise (elementwise, normalization, and the fp32 convolutions of this study,
    which ncu counts on the CUDA cores)."""
    unit = tensor_core_precision(precision) if tensor_flop > 0 else "fp32"
    peak = gpu.flops(unit)
    if not peak:
        raise InputError(f"datasheet {gpu.key}: no {unit} peak for a kernel's ridge point")
    return peak / gpu.mem_bw


def habitat_step_ratio(
    kernels: Sequence[Mapping], precision: str, origin: GpuPeaks, target: GpuPeaks, where: str
) -> tuple[float, dict]:
    """Target over origin device time for one captured step: each kernel's time scaled by
    (origin / target bandwidth) ** gamma, gamma from its AI (ncu FLOPs over DRAM bytes,
    kernel replay) against the target's ridge. Both GPUs here have the same SMs and
    clocks, so Habitat's wave and clock factors are 1 and only the bandwidth term moves;
    its branch for a kernel smaller than one wave needs the grid size, which the captures
    do not hold, and is not applied. Returns the ratio and a summary of the kernels."""
    scale = origin.mem_bw / target.mem_bw
    before = after = memory_s = 0.0
    for k in kernels:
        try:
            t = float(k["time_s"])
            flop = float(k["flop"]["total"])
            tensor = float(k["flop"].get("tensor") or 0)
            dram = float(k["bytes"]["dram"])
        except (KeyError, TypeError, ValueError) as exc:
            raise InputError(f"{where}: kernel {k.get('id', '?')} lacks {exc}") from exc
        ai = flop / dram if dram > 0 else (math.inf if flop > 0 else 0.0)
        gamma = habitat_gamma(ai, kernel_ridge(target, precision, tensor))
        before += t
        after += t * scale**gamma
        memory_s += t * gamma
    if before <= 0:
        raise InputError(f"{where}: no kernel time to scale")
    return after / before, {
        "kernels": len(kernels),
        "kernel_s": before,
        "gamma_mean": memory_s / before,
    }


def choose_anchor(point: Point, measured: Iterable[Point]) -> tuple[Point | None, str]:
    """The measured origin point a prediction of ``point`` is calibrated on: the point
    itself; else the same model and precision at the nearest batch (log distance); else
    the same precision and batch in another model; else the same precision at the
    nearest batch. None when the origin measured nothing in that precision."""
    model, precision, batch = point
    pool = sorted(p for p in measured if p[1] == precision)
    if point in pool:
        return point, "this point"

    def nearest(candidates):
        return min(candidates, key=lambda p: (abs(math.log(p[2] / batch)), p))

    same_model = [p for p in pool if p[0] == model]
    if same_model:
        a = nearest(same_model)
        return a, f"{model} {precision} at batch {a[2]}"
    if pool:
        a = nearest(pool)
        return a, f"{a[0]} {precision} at batch {a[2]}"
    return None, f"the origin measured nothing in {precision}"


def transfer_rows(
    points: Sequence[Point],
    *,
    origin_env: str,
    target_env: str,
    origin_model: Mapping[Point, Mapping],
    target_model: Mapping[Point, Mapping],
    origin_measured_s: Mapping[Point, float],
    captures: Mapping[Point, Sequence[Mapping]],
    origin: GpuPeaks,
    target: GpuPeaks,
) -> list[dict]:
    """One row per point and :data:`METHODS`. ``origin_model``/``target_model``: the
    model's rows of ``predictions.csv`` per point (``predicted_step_s``, interval,
    memory); ``origin_measured_s``: the origin's median measured step per point;
    ``captures``: each captured origin point's ncu kernels."""
    bandwidth_ratio = origin.mem_bw / target.mem_bw
    habitat: dict[Point, tuple[float, str]] = {}  # per capture: its ratio and note

    def habitat_of(cap: Point, precision: str) -> tuple[float, str]:
        if cap not in habitat:
            where = f"capture {origin_env}_{cap[0]}_{cap[1]}_bs{cap[2]}"
            ratio, info = habitat_step_ratio(captures[cap], precision, origin, target, where)
            habitat[cap] = (
                ratio,
                (
                    f"{info['kernels']} kernels, device time x {ratio:.4f} "
                    f"(time-weighted gamma {info['gamma_mean']:.2f})"
                ),
            )
        return habitat[cap]

    rows = []
    for point in points:
        model, precision, batch = point
        for side, table in (("origin", origin_model), ("target", target_model)):
            if point not in table:
                raise InputError(
                    f"predictions: no model row for {side} {model} {precision} bs{batch}"
                )
        t_rows = target_model[point]
        base = {
            "env": target_env,
            "model": model,
            "precision": precision,
            "batch": batch,
            "predicted_peak_memory_bytes": t_rows.get("predicted_peak_memory_bytes"),
            "device_memory_bytes": t_rows.get("device_memory_bytes"),
            "fits": t_rows.get("fits"),
            "origin_env": origin_env,
        }
        uncalibrated = float(t_rows["predicted_step_s"])
        rows.append(_row(base, "model_uncalibrated", uncalibrated, model_row=t_rows, c=1.0))
        anchor, anchor_text = choose_anchor(point, origin_measured_s)
        if anchor is None:
            for method in ("model", "no_change", "bandwidth_ratio", "habitat"):
                rows.append(_row(base, method, math.nan, c=math.nan, notes=anchor_text))
            continue
        c = origin_measured_s[anchor] / float(origin_model[anchor]["predicted_step_s"])
        origin_step = float(origin_model[point]["predicted_step_s"]) * c
        calibrated = {"c": c, "anchor": anchor_text}
        rows.append(_row(base, "model", uncalibrated * c, model_row=t_rows, **calibrated))
        rows.append(_row(base, "no_change", origin_step, **calibrated))
        rows.append(_row(base, "bandwidth_ratio", origin_step * bandwidth_ratio, **calibrated))
        cap, cap_text = choose_anchor(point, captures)
        if cap is None:
            rows.append(_row(base, "habitat", math.nan, notes=cap_text, **calibrated))
            continue
        ratio, note = habitat_of(cap, precision)
        rows.append(
            _row(base, "habitat", origin_step * ratio, capture=cap_text, notes=note, **calibrated)
        )
    return rows


def _row(
    base: dict,
    method: str,
    step_s: float,
    *,
    c: float,
    model_row: Mapping | None = None,
    anchor: str = "",
    capture: str = "",
    notes: str = "",
) -> dict:
    """One row of :data:`COLUMNS`; the model's interval (from ``model_row``) moves with
    the calibration ``c``: images/s divide by it as the step time multiplies."""
    low = high = math.nan
    if model_row is not None and math.isfinite(c):
        low = float(model_row.get("interval_low_images_per_s", math.nan)) / c
        high = float(model_row.get("interval_high_images_per_s", math.nan)) / c
    return dict(
        base,
        method=method,
        predicted_step_s=step_s,
        predicted_images_per_s=base["batch"] / step_s if step_s > 0 else math.nan,
        interval_low_images_per_s=low,
        interval_high_images_per_s=high,
        anchor=anchor,
        capture=capture,
        calibration=c,
        notes=notes,
    )


def check_rows(predicted: Iterable[Mapping], measured: Mapping[Point, Mapping]) -> list[dict]:
    """The check of a transfer's predictions against the target's runs, with the columns
    of ``prediction_check.csv`` (errors on step time, and on images/s beside them) and
    the point's ``anchor``: one row per predicted point and method. ``measured``: per
    point, ``step_s`` and ``images_per_s`` (medians of the ok runs), ``peak_memory`` and
    ``peak_memory_source`` (``aggregate.predictions.measured_points``). A point the
    target did not measure keeps its prediction and says so in ``note``."""
    out = []
    for r in predicted:
        point = _point(r)
        runs = measured.get(point) or {}
        step, ips = number(r.get("predicted_step_s")), number(r.get("predicted_images_per_s"))
        measured_step, measured_ips = number(runs.get("step_s")), number(runs.get("images_per_s"))
        low, high = r.get("interval_low_images_per_s"), r.get("interval_high_images_per_s")
        steps = step_interval(point[2], low, high)
        note = text(r.get("notes"))
        if not math.isfinite(measured_step):
            note = "; ".join(filter(None, [note, "not measured on the target"]))
        out.append(
            {
                "env": r["env"],
                "model": point[0],
                "precision": point[1],
                "batch": point[2],
                "method": r["method"],
                "predicted_step_s": step,
                "measured_step_s": measured_step,
                "error_pct": error_pct(step, measured_step),
                "predicted_images_per_s": ips,
                "measured_images_per_s": measured_ips,
                "images_per_s_error_pct": error_pct(ips, measured_ips),
                "predicted_peak_memory_bytes": r.get("predicted_peak_memory_bytes"),
                "measured_peak_memory_bytes": runs.get("peak_memory", math.nan),
                "measured_peak_memory_source": runs.get("peak_memory_source", ""),
                "in_interval": inside(measured_step, steps),
                "images_per_s_in_interval": inside(
                    measured_ips, (number(low), number(high)) if steps else None
                ),
                # a transfer predicts no energy: the target's costs are its own to measure
                "predicted_joules_per_image": math.nan,
                "measured_joules_per_image": number(runs.get("joules_per_image")),
                "joules_per_image_error_pct": math.nan,
                "note": note,
                "anchor": text(r.get("anchor")),
            }
        )
    return out


def _point(row: Mapping) -> Point:
    return (str(row["model"]), str(row["precision"]), int(row["batch"]))


def summary(check: Sequence[Mapping]) -> list[dict]:
    """Per method, :func:`check_summary` over every point (``all``) and over the points
    the origin measured itself (``same``: the model's anchor is "this point", so the
    transfer alone is judged, not the batch or model scaling the other anchors add)."""
    same_points = {
        _point(r) for r in check if r["method"] == "model" and r.get("anchor") == "this point"
    }
    same = {s["method"]: s for s in check_summary([r for r in check if _point(r) in same_points])}
    return [
        {"method": s["method"], "all": s, "same": same.get(s["method"])}
        for s in check_summary(check)
    ]
