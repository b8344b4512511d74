"""The model's predictions and their check, from the study's files.

Two halves, kept apart on purpose:

* :func:`prediction_rows` -> ``results/predictions.csv``: every point of the study and
  every what-if, predicted from the op inventories, complexity JSONs, ceilings,
  efficiency tables and env infos. It takes no metrics and no runs: no point can
  predict itself from its own measurements.
* :func:`check_rows` -> ``results/prediction_check.csv``: each measured point against
  the model, ``model_loo`` (the model rescaled on other families' runs,
  :mod:`dnnroofline.model.loo`) and the baselines (:data:`METHODS`), its error on step
  time and on images/s (:mod:`dnnroofline.model.scoring`), and its measured peak
  memory; :func:`class_comparison_rows` sets the model's share of step time by op
  class beside ncu's kernel time by class.

No file I/O: the entry scripts (``predict.py``, ``check_predictions.py``) read and write.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import pandas as pd

from dnnroofline.aggregate.inputs import check_runs_match_complexity
from dnnroofline.errors import InputError
from dnnroofline.model import efficiency_tables as et
from dnnroofline.model import loo, scoring
from dnnroofline.model import predict as pr
from dnnroofline.model.op_classes import OP_CLASSES
from dnnroofline.model.roofline import parse_roofs, precision_aliases
from dnnroofline.ncu.kernel_classes import totals_by_kernel_class
from dnnroofline.study import datasheet
from dnnroofline.study.precisions import PRECISIONS
from dnnroofline.study.what_if import StudyEnv, WhatIf, check_predict

PREDICTION_COLUMNS = [
    "env",
    "model",
    "precision",
    "batch",
    "kind",
    "env_source",
    "method",
    "predicted_step_s",
    "predicted_images_per_s",
    "interval_low_images_per_s",
    "interval_high_images_per_s",
    "interval_level",
    "bound",
    "top_classes",
    "class_shares",
    "predicted_peak_memory_bytes",
    "device_memory_bytes",
    "fits",
    "notes",
]
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
    "note",
]
BASELINES = ("roofline_datasheet", "roofline_measured", "per_op_roofline")
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

Point = tuple[str, str, str, int]  # env, model, precision, batch


@dataclass(frozen=True)
class EnvFiles:
    """One study env's files as the model reads them (``efficiency`` None: derived from
    the ceilings, for an env measured before the sweep, like examples/h100)."""

    env: str
    ceilings: Mapping
    efficiency: Mapping | None = None
    env_info: Mapping | None = None
    where: str = ""  # the ceilings file
    efficiency_where: str = ""  # the efficiency file


# --------------------------------------------------------------------------- keying


def _identity(doc: object, keys: Sequence[str], where: str) -> tuple:
    if not isinstance(doc, Mapping):
        raise InputError(f"{where}: expected a JSON object")
    values = tuple(doc.get(k) for k in keys)
    for k, v in zip(keys, values, strict=True):
        ok = (
            isinstance(v, int) and not isinstance(v, bool)
            if k == "batch_size"
            else isinstance(v, str) and v
        )
        if not ok:
            raise InputError(f"{where}: needs {k!r}, got {v!r}")
    return values


def key_docs(
    docs: Iterable[tuple[str, Mapping]], keys: Sequence[str], what: str
) -> dict[tuple, tuple[str, Mapping]]:
    """{identity: (source, doc)} of JSON files keyed by their own ``keys``; twice is refused."""
    out: dict[tuple, tuple[str, Mapping]] = {}
    for where, doc in docs:
        key = _identity(doc, keys, where)
        if key in out:
            raise InputError(f"{what} for {key} given twice: {out[key][0]} and {where}")
        out[key] = (where, doc)
    return out


# --------------------------------------------------------------------------- machines


def env_tables_doc(files: EnvFiles) -> tuple[Mapping, str]:
    """(efficiency doc, where from) of an env: its sweep, else derived from its ceilings."""
    if files.efficiency is not None:
        where = files.efficiency_where or "efficiency.json"
        return files.efficiency, f"efficiency tables of env {files.env} ({where}, sweep)"
    where = files.where or "ceilings.json"
    return et.tables_from_ceilings(files.ceilings, where), (
        f"efficiency tables of env {files.env} derived from its ceilings.json ({where}, no sweep)"
    )


def machine_of(doc: Mapping, where: str) -> pr.Machine:
    """The model's view of one efficiency doc (``results/{env}/efficiency.json``): its
    roofs, dispatch costs, tables and the tables' leave-one-out residuals."""
    tables = et.load_tables(doc, where)
    residuals: dict[tuple[str, str], list[float]] = {}
    for r in et.loo_log_residuals(tables):
        residuals.setdefault((r["precision"], r["key"]), []).append(r["log_residual"])
    dispatch = tables.dispatch or {}

    def table_residuals(precision: str, key: str) -> list[float]:
        names = precision_aliases(precision)
        return [x for (p, k), rs in residuals.items() if p in names and k == key for x in rs]

    return pr.Machine(
        device=str(doc.get("device") or ""),
        compute=dict(tables.roofs["compute"]),
        memory=tables.roofs["memory"],
        host_s_per_op=dispatch.get("host_s_per_op"),
        launch_s_per_op=dispatch.get("launch_s_per_op"),
        tables=tables,
        residuals=table_residuals,
        source=where,
    )


def datasheet_row_of(files: EnvFiles) -> datasheet.GpuPeaks | None:
    """The datasheet GPU of a CUDA env: its env info's GPU name, else its ceilings' row."""
    gpus = (files.env_info or {}).get("gpus") or []
    row = datasheet.lookup_gpu(gpus[0].get("name")) if gpus else None
    if row is None:
        keys = {
            r.get("datasheet_row")
            for r in files.ceilings.get("roofs") or []
            if isinstance(r, Mapping)
        }
        rows = [datasheet.gpu_by_key(k) for k in keys if k]
        row = next((r for r in rows if r is not None), None)
    return row


def device_memory_bytes(files: EnvFiles) -> int | None:
    """The env's device memory: its GPU's (CUDA) or its RAM (CPU), from its env info."""
    info = files.env_info or {}
    if info.get("device") == "cuda" or files.ceilings.get("device") == "cuda":
        gpus = info.get("gpus") or []
        value = gpus[0].get("memory_bytes") if gpus else None
        if value is None and (row := datasheet_row_of(files)) is not None:
            value = row.memory_bytes
    else:
        value = info.get("ram_bytes")
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def study_env_of(files: EnvFiles) -> StudyEnv:
    """What the ``predict:`` check needs of an env, read from its files: its device, its
    GPU's architecture and the precisions it has compute roofs for."""
    device = str(files.ceilings.get("device") or (files.env_info or {}).get("device") or "")
    row = datasheet_row_of(files) if device == "cuda" else None
    where = files.where or f"ceilings of env {files.env}"
    roofs = parse_roofs(dict(files.ceilings), where)
    have = {r.precision for r in roofs if r.kind == "compute"}
    return StudyEnv(
        device=device,
        architecture=row.architecture if row else None,
        roof_precisions=tuple(p for p in PRECISIONS if set(precision_aliases(p)) & have),
    )


def resolve_what_ifs(entries: object, envs: Mapping[str, EnvFiles]) -> list[WhatIf]:
    """The config's ``predict:`` entries, checked and resolved against the envs' files
    (:func:`dnnroofline.study.what_if.check_predict`: the config check's own rules)."""
    return check_predict(entries, {e: study_env_of(f) for e, f in envs.items()}, [])


# --------------------------------------------------------------------------- predictions


def _unpredicted_row(point: Point, why: str) -> dict:
    """A measured point's row without figures, the reason in its notes."""
    row = _point_row(point, "measured", "study")
    row.update(method="model", notes=f"no prediction: {why}")
    return {c: row.get(c, math.nan) for c in PREDICTION_COLUMNS}


def _point_row(point: Point, kind: str, env_source: str) -> dict:
    env, model, precision, batch = point
    return {
        "env": env,
        "model": model,
        "precision": precision,
        "batch": int(batch),
        "kind": kind,
        "env_source": env_source,
    }


def peak_memory(complexity: Mapping | None, precision: str) -> int | None:
    """The complexity JSON's predicted peak memory of the step at ``precision``."""
    value = (
        ((complexity or {}).get("by_precision") or {}).get(precision, {}).get("peak_memory_bytes")
    )
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def format_shares(shares: Mapping[str, float]) -> str:
    """``"conv=0.6120;normalization=0.1810"`` in OP_CLASSES order (:func:`parse_shares`)."""
    return ";".join(f"{c}={shares[c]:.4f}" for c in OP_CLASSES if c in shares)


def parse_shares(text: object) -> dict[str, float]:
    """The inverse of :func:`format_shares`; {} for an empty cell."""
    if not isinstance(text, str) or not text.strip():
        return {}
    out = {}
    for part in text.split(";"):
        cls, _, value = part.partition("=")
        if cls not in OP_CLASSES:
            raise InputError(f"class_shares: unknown op class {cls!r} in {text!r}")
        out[cls] = float(value)
    return out


def predict_point(
    point: Point,
    inventory: Mapping,
    machine: pr.Machine,
    *,
    complexity: Mapping | None,
    device_memory: int | None,
    kind: str = "measured",
    env_source: str = "study",
    where: str = "op inventory",
) -> dict:
    """One row of predictions.csv: the model's prediction of one point. A model that
    cannot train at this size (its inventory's status ``error``) gets a row without
    figures, its reason in the notes, as its runs record theirs."""
    row = _point_row(point, kind, env_source)
    if isinstance(inventory, Mapping) and inventory.get("status") == "error":
        row.update(method="model", notes=f"no prediction: {where}: {inventory.get('message')}")
        return {c: row.get(c, math.nan) for c in PREDICTION_COLUMNS}
    p = pr.predict_step(inventory, machine, point[2], where)
    batch = int(point[3])
    peak = peak_memory(complexity, point[2])
    low, high = p.interval if p.interval else (math.nan, math.nan)
    row.update(
        method="model",
        predicted_step_s=p.step_s,
        predicted_images_per_s=p.images_per_s,
        interval_low_images_per_s=batch / high if p.interval else math.nan,
        interval_high_images_per_s=batch / low if p.interval else math.nan,
        interval_level=pr.INTERVAL_LEVEL if p.interval else math.nan,
        bound=p.bound,
        top_classes=pr.format_top_classes(p.top_classes),
        class_shares=format_shares(p.class_shares),
        predicted_peak_memory_bytes=peak,
        device_memory_bytes=device_memory,
        fits=None if peak is None or device_memory is None else peak <= device_memory,
        notes="; ".join([machine.source, *p.notes]),
    )
    return row


def _inventory(inventories: Mapping, model: str, precision: str, batch: int) -> tuple[str, Mapping]:
    found = inventories.get((model, precision, int(batch)))
    if found is None:
        raise InputError(
            f"no op inventory for {model} {precision} batch {batch} "
            f"(results/complexity/{model}_{precision}_bs{batch}_ops.json)"
        )
    return found


def _what_if_machine(w: WhatIf, envs: Mapping[str, EnvFiles]) -> tuple[pr.Machine, int | None]:
    files = envs.get(w.tables_env)
    if files is None:
        raise InputError(f"what-if {w.env} {w.model}: no files of env {w.tables_env!r} to borrow")
    doc, source = env_tables_doc(files)
    if w.gpu is None:
        return machine_of(doc, source), device_memory_bytes(files)
    target = datasheet.gpu_by_key(w.gpu)
    own = datasheet_row_of(files)
    if target is None or own is None:
        missing = w.gpu if target is None else f"the GPU of env {w.tables_env}"
        raise InputError(f"what-if {w.env} {w.model}: no datasheet row for {missing}")
    scaled = et.scaled_for_gpu(doc, own, target)
    where = f"{source}, scaled by datasheet peaks {own.key} -> {target.key}"
    return machine_of(scaled, where), target.memory_bytes


def prediction_rows(
    points: Iterable[Point],
    what_ifs: Iterable[WhatIf],
    inventories: Mapping[tuple[str, str, int], tuple[str, Mapping]],
    complexity: Mapping[tuple[str, int], tuple[str, Mapping]],
    envs: Mapping[str, EnvFiles],
) -> list[dict]:
    """Every row of predictions.csv: the study's points, then the what-ifs. No metrics in."""
    machines: dict[str, tuple[pr.Machine, int | None]] = {}
    rows = []
    for point in dict.fromkeys(tuple(p) for p in points):
        env, model, precision, batch = point
        if env not in envs:  # measured elsewhere, its results not copied in yet
            rows.append(_unpredicted_row(point, f"env {env} has no ceilings.json here"))
            continue
        try:  # an env copied in with too few benchmarks for its tables: said, not fatal
            if env not in machines:
                doc, source = env_tables_doc(envs[env])
                machines[env] = (machine_of(doc, source), device_memory_bytes(envs[env]))
            where, inventory = _inventory(inventories, model, precision, batch)
            comp = complexity.get((model, int(batch)), (None, None))[1]
            machine, memory = machines[env]
            rows.append(
                predict_point(
                    point, inventory, machine, complexity=comp, device_memory=memory, where=where
                )
            )
        except InputError as exc:
            rows.append(_unpredicted_row(point, str(exc)))
    for w in what_ifs:
        machine, memory = _what_if_machine(w, envs)
        where, inventory = _inventory(inventories, w.model, w.precision, w.batch)
        comp = complexity.get((w.model, int(w.batch)), (None, None))[1]
        point = (w.env, w.model, w.precision, int(w.batch))
        rows.append(
            predict_point(
                point,
                inventory,
                machine,
                complexity=comp,
                device_memory=memory,
                kind="what_if",
                env_source=w.env_source,
                where=where,
            )
        )
    return rows


# --------------------------------------------------------------------------- the check


class NoRoof(InputError):
    """A ceilings file without the roof a method needs (a CPU has no datasheet memory
    roof): that method's row is left without a prediction and says why."""


def roof_of(ceilings: Mapping, kind: str, source: str, precision: str | None, where: str) -> float:
    """The highest roof of ``kind`` and ``source`` (for ``precision``, compute roofs)."""
    names = precision_aliases(precision) if kind == "compute" else None
    values = [
        r.value
        for r in parse_roofs(dict(ceilings), where)
        if r.kind == kind and r.source == source and (names is None or r.precision in names)
    ]
    if not values:
        what = f"{kind} roof" + (f" for {precision}" if precision else "")
        raise NoRoof(f"{where}: no {source} {what}")
    return max(values)


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
    source = "datasheet" if method == "roofline_datasheet" else "measured"
    peak = roof_of(ceilings, "compute", source, precision, where)
    bw = roof_of(ceilings, "memory", source, None, where)
    if method == "per_op_roofline":
        if inventory is None:
            raise InputError(f"per_op_roofline of {point}: no op inventory")
        return pr.per_op_roofline_step_s(inventory, peak, bw)
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
    return pr.roofline_step_s(flops, nbytes, peak, bw)


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
        }
    return out


def model_loo_steps(
    measured: Mapping[Point, Mapping], model_rows: Mapping[Point, Mapping]
) -> dict[Point, tuple[float, str]]:
    """Per measured point, ``model_loo``'s (step seconds, note): the model's predicted
    device and host times (predictions.csv's ``predicted_device_s``,
    ``predicted_host_s``) scaled by factors fitted on the env's points of other model
    families (:func:`dnnroofline.model.loo.loo_step_s`). The runs enter only through
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
) -> dict:
    """One row of :data:`CHECK_COLUMNS`: a method's predicted step against the point's
    runs, scored on step time and on images/s; ``interval_ips`` is the method's
    (low, high) images/s, where it has one."""
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
        "note": "; ".join(filter(None, [note, measured.get("peak_memory_note", "")])),
    }


def check_rows(
    predictions: Iterable[Mapping],
    metrics: pd.DataFrame,
    complexity: Mapping[tuple[str, int], tuple[str, Mapping]],
    ceilings: Mapping[str, tuple[str, Mapping]],
    inventories: Mapping[tuple[str, str, int], tuple[str, Mapping]],
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
        inventory = inventories.get((model, precision, batch), (None, None))[1]
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
        rows.append(_check_row(point, "model", step, meas, peak, interval, why))
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
