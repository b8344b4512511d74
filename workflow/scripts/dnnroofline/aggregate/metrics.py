"""Aggregation, first half: run JSONs -> ``results/metrics.csv`` and the run groups.

No file I/O here: callers load JSON and pass dicts in.

``metrics_frame`` builds ``results/metrics.csv``: one row per run, failed runs
included (their status and message, NaN step timings, throughput and energy).
``group_summary`` gathers the runs of one (env, model, precision, batch): run counts and
timing statistics over the ok runs, the timing of a roofline point
(:mod:`dnnroofline.aggregate.points` places it).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from pathlib import PurePath

import numpy as np
import pandas as pd

from dnnroofline.errors import InputError
from dnnroofline.estimate import roofline
from dnnroofline.io import dig
from dnnroofline.study.identity import run_id as make_run_id

RUN_STATUSES = ("ok", "oom", "error")
GROUP_KEYS = ["env", "model", "precision", "batch_size"]

METRICS_COLUMNS = [
    "run_id",
    "env",
    "model",
    "precision",
    "batch_size",
    "image_size",
    "num_classes",
    "run",
    "status",
    "message",
    "device",
    "threads",
    "nproc",
    "images_per_s",
    "step_median_s",
    "step_p5_s",
    "step_p95_s",
    "step_cv",
    "data_wait_median_s",
    "joules_per_step",
    "joules_per_image",
    "mean_power_w",
    "peak_power_w",
    "energy_source",
    "contention_cpus",
    "fault_mib_per_step",
    "timed_sys_share",
    "wall_s",
    "user_s",
    "sys_s",
    "max_rss_bytes",
    "rss_before_model_bytes",
    "peak_device_memory_bytes",
    "start_time",
    "end_time",
]
#: The run's ``energy`` record's figures (docs/contracts.md).
ENERGY_COLUMNS = ["joules_per_step", "joules_per_image", "mean_power_w", "peak_power_w"]
#: Performance figures forced to NaN for a failed run, whatever the JSON holds.
_RUN_PERF_COLUMNS = [
    "images_per_s",
    "step_median_s",
    "step_p5_s",
    "step_p95_s",
    "step_cv",
    "data_wait_median_s",
    *ENERGY_COLUMNS,
    "contention_cpus",
    "fault_mib_per_step",
    "timed_sys_share",
]
_METRICS_FLOAT = _RUN_PERF_COLUMNS + ["wall_s", "user_s", "sys_s", "start_time", "end_time"]
_METRICS_INT_NULLABLE = [
    "image_size",
    "num_classes",
    "threads",
    "max_rss_bytes",
    "rss_before_model_bytes",
    "peak_device_memory_bytes",
]
_METRICS_INT = ["batch_size", "run", "nproc"]

#: ``dtype=`` for ``pd.read_csv`` of metrics.csv: names stay strings.
METRICS_DTYPES = {
    "run_id": "str",
    "env": "str",
    "model": "str",
    "precision": "str",
    "status": "str",
    "message": "str",
    "device": "str",
    "energy_source": "str",
}

_RUN_SUFFIX = re.compile(r"_run(\d+)$")


# --------------------------------------------------------------------------- helpers


def _num(value: object, what: str) -> float:
    """A JSON number as float; null -> NaN; anything else -> InputError."""
    if value is None:
        return math.nan
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise InputError(f"{what} must be a number or null, got {value!r}")
    return float(value)


# --------------------------------------------------------------------------- metrics


def run_row(run: Mapping, where: str = "run") -> dict:
    """One metrics.csv row from one run JSON (``where`` names it in errors)."""
    if not isinstance(run, Mapping):
        raise InputError(f"{where}: a run JSON must be an object, got {type(run).__name__}")
    status = run.get("status")
    if status not in RUN_STATUSES:
        raise InputError(f"{where}: status must be one of {RUN_STATUSES}, got {status!r}")
    run_id, env = run.get("run_id"), run.get("env")
    if not isinstance(run_id, str) or not run_id or not isinstance(env, str) or not env:
        raise InputError(
            f"{where}: run_id and env must be set (got run_id={run_id!r}, env={env!r}); "
            "runs made by hand need --run-id and --env to enter the study"
        )
    config = run.get("config")
    if not isinstance(config, Mapping):
        raise InputError(f"{where}: missing 'config' object")
    model, precision, batch = config.get("arch"), config.get("precision"), config.get("batch_size")
    if not isinstance(model, str) or not isinstance(precision, str):
        raise InputError(
            f"{where}: config.arch and config.precision must be strings, "
            f"got {model!r} and {precision!r}"
        )
    if isinstance(batch, bool) or not isinstance(batch, int) or batch <= 0:
        raise InputError(f"{where}: config.batch_size must be a positive integer, got {batch!r}")
    n = run.get("run")
    if n is None:
        m = _RUN_SUFFIX.search(run_id)
        if not m:
            raise InputError(f"{where}: run_id {run_id!r} does not end in _run<N>")
        n = int(m.group(1))
    expected = make_run_id(env, model, precision, batch, n)
    if run_id != expected:
        raise InputError(
            f"{where}: run_id {run_id!r} does not match its env and config "
            f"(expected {expected!r}); refusing to file it under the wrong point"
        )

    row = {
        "run_id": run_id,
        "env": env,
        "model": model,
        "precision": precision,
        "batch_size": int(batch),
        "image_size": _num(config.get("image_size"), f"{where}: config.image_size"),
        "num_classes": _num(config.get("num_classes"), f"{where}: config.num_classes"),
        "run": int(n),
        "status": status,
        "message": run.get("message"),
        "device": config.get("device") if config.get("device") is not None else run.get("device"),
        "threads": _num(config.get("threads"), f"{where}: config.threads"),
        "nproc": _nproc(config.get("nproc"), f"{where}: config.nproc"),
        "images_per_s": _num(run.get("images_per_s"), f"{where}: images_per_s"),
        "step_median_s": _num(dig(run, "step_time_s", "median"), f"{where}: step_time_s.median"),
        "step_p5_s": _num(dig(run, "step_time_s", "p5"), f"{where}: step_time_s.p5"),
        "step_p95_s": _num(dig(run, "step_time_s", "p95"), f"{where}: step_time_s.p95"),
        "step_cv": _num(dig(run, "step_time_s", "cv"), f"{where}: step_time_s.cv"),
        "data_wait_median_s": _num(
            dig(run, "data_wait_s", "median"), f"{where}: data_wait_s.median"
        ),
        **_energy_fields(run, where),
        "contention_cpus": _contention_cpus(run, where),
        **_paging_fields(run, where),
    }
    # rss_before_model_bytes: the runtime's RSS before the model was built (null in runs
    # recorded before it was, and in a data-parallel run's merged record)
    for key in [
        "wall_s",
        "user_s",
        "sys_s",
        "max_rss_bytes",
        "rss_before_model_bytes",
        "peak_device_memory_bytes",
    ]:
        row[key] = _num(run.get(key), f"{where}: {key}")
    for key in ["start_time", "end_time"]:
        row[key] = _num(run.get(key), f"{where}: {key}")

    if status == "ok":
        for key in ("step_median_s", "images_per_s"):
            roofline.check_positive(f"{where}: {key} of an ok run", row[key])
    else:
        for key in _RUN_PERF_COLUMNS:
            row[key] = math.nan
    return row


def _contention_cpus(run: Mapping, where: str) -> float:
    """CPUs other processes and the hypervisor took during the timed steps (NaN: not
    recorded, as in runs from before it was)."""
    key = ("timed_region", "other_load")
    others = _num(dig(run, *key, "other_processes_cpus"), f"{where}: other_processes_cpus")
    steal = _num(dig(run, *key, "steal_cpus"), f"{where}: steal_cpus")
    return others + (0.0 if math.isnan(steal) else steal)


def _paging_fields(run: Mapping, where: str) -> dict:
    """The timed steps' memory new from the OS per step (minor page faults x page size:
    at least that much, a huge page faulting 2 MiB at once) and their share of CPU time
    in the kernel, where zeroing those pages is spent (NaN: not recorded, as in runs from
    before it was)."""
    region = run.get("timed_region") or {}
    faults = _num(dig(region, "minor_faults"), f"{where}: timed_region.minor_faults")
    page = _num(dig(region, "page_bytes"), f"{where}: timed_region.page_bytes")
    steps = dig(run, "step_time_s", "all")
    per_step = (
        faults * page / len(steps) / 2**20
        if isinstance(steps, list) and steps and not math.isnan(faults + page)
        else math.nan
    )
    user = _num(dig(region, "user_s"), f"{where}: timed_region.user_s")
    sys_s = _num(dig(region, "sys_s"), f"{where}: timed_region.sys_s")
    cpu = user + sys_s
    return {"fault_mib_per_step": per_step, "timed_sys_share": sys_s / cpu if cpu > 0 else math.nan}


def _energy_fields(run: Mapping, where: str) -> dict:
    """The run's joules per step and per image, mean and peak power, and their source:
    the counter's ("nvml", "rapl"), "unavailable" where the run could not read one, ""
    where it recorded none (runs from before energy was, and runs that timed nothing)."""
    nan = dict.fromkeys(ENERGY_COLUMNS, math.nan)
    energy = run.get("energy")
    if energy is None:
        return {**nan, "energy_source": ""}
    if not isinstance(energy, Mapping):
        raise InputError(f"{where}: energy must be an object or null, got {energy!r}")
    available = energy.get("available")
    if not isinstance(available, bool):
        raise InputError(f"{where}: energy.available must be true or false, got {available!r}")
    if not available:
        return {**nan, "energy_source": "unavailable"}
    source = energy.get("source")
    if not isinstance(source, str) or not source:
        raise InputError(f"{where}: energy.source must name the counter, got {source!r}")
    figures = {key: _num(energy.get(key), f"{where}: energy.{key}") for key in ENERGY_COLUMNS}
    return {**figures, "energy_source": source}


def _nproc(value: object, where: str) -> int:
    """A run's data-parallel process count; runs from before issue 11 had one."""
    if value is None:
        return 1
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError(f"{where} must be a positive integer, got {value!r}")
    return value


def check_run_path(row: Mapping, where: str) -> None:
    """A run file at ``.../{env}/runs/{name}.json`` must be ``{env}``'s run ``{name}``.

    Results copied in from another machine keep their folder's env: a run whose JSON
    names another env or run id than its path would be filed under the wrong machine.
    Sources that are not such paths (tests, hand-made lists) are not checked.
    """
    path = PurePath(str(where))
    if path.suffix != ".json" or path.parent.name != "runs" or not path.parent.parent.name:
        return
    folder = path.parent.parent.name
    if folder != row["env"] or path.stem != row["run_id"]:
        raise InputError(
            f"{where}: this file holds run {row['run_id']!r} of env {row['env']!r}, but its "
            f"path says run {path.stem!r} of env {folder!r}; refusing to file it under the "
            f"wrong machine. Put it back at results/{row['env']}/runs/{row['run_id']}.json "
            "(copy a machine's whole results/{env}/ folder, unrenamed)"
        )


def sorted_frame(rows: list[dict], columns: list[str], keys: list[str]) -> pd.DataFrame:
    """``rows`` as a frame of ``columns``, sorted by ``keys`` (stable)."""
    df = pd.DataFrame(rows, columns=columns)
    if len(df):
        df = df.sort_values(keys, kind="stable").reset_index(drop=True)
    return df


def metrics_frame(runs: Sequence[Mapping], sources: Sequence[str] | None = None) -> pd.DataFrame:
    """One row per run with exactly :data:`METRICS_COLUMNS`, sorted by env, model,
    precision, batch_size, run. ``sources`` (e.g. file paths) name runs in errors."""
    if sources is not None and len(sources) != len(runs):
        raise ValueError("sources must name every run")
    rows = []
    seen: dict[str, str] = {}
    machines: dict[str, dict[str, str]] = {}  # env -> {device_name: first run file}
    for i, run in enumerate(runs):
        where = sources[i] if sources is not None else f"run #{i}"
        row = run_row(run, where)
        check_run_path(row, where)
        name = run.get("device_name")
        if isinstance(name, str) and name:
            machines.setdefault(row["env"], {}).setdefault(name, where)
        if row["run_id"] in seen:
            first = seen[row["run_id"]]
            raise InputError(f"duplicate run_id {row['run_id']!r} in {first} and {where}")
        seen[row["run_id"]] = where
        rows.append(row)
    for env, names in machines.items():
        if len(names) > 1:
            seen_on = "; ".join(f"{name!r} (e.g. {src})" for name, src in names.items())
            raise InputError(
                f"env {env!r} has runs measured on different devices: {seen_on}. Refusing to "
                "mix machines under one env: move the runs of the other machine to an env of "
                "its own (results/{env}/ per machine)"
            )
    df = sorted_frame(rows, METRICS_COLUMNS, GROUP_KEYS + ["run"])
    df[_METRICS_FLOAT] = df[_METRICS_FLOAT].astype("float64")
    for col in _METRICS_INT_NULLABLE:
        df[col] = pd.array(df[col].astype("float64"), dtype="Int64")
    df[_METRICS_INT] = df[_METRICS_INT].astype("int64")
    return df


# --------------------------------------------------------------------------- groups


def group_nproc(runs: pd.DataFrame) -> int:
    """The data-parallel processes of a group's runs (1 for runs that predate nproc)."""
    return int(runs["nproc"].max()) if "nproc" in runs and runs["nproc"].notna().any() else 1


def images_per_s_at(step_median_s: float, batch_size: int, nproc: int = 1) -> float:
    """A point's images/s: every rank's batch over its median step, the step that attained
    FLOP/s uses. Never a median of the runs' rates: of an even count of runs, that is the
    mean of the middle two rates, and it disagrees with the point's own step time."""
    return nproc * batch_size / step_median_s


def group_summary(metrics: pd.DataFrame) -> pd.DataFrame:
    """Per (env, model, precision, batch_size): run counts and timing statistics over ok runs.

    Columns: GROUP_KEYS, nproc (data-parallel processes; 1 where metrics lack it),
    runs_ok, runs_failed, step_median_s (median of the run
    medians), step_spread_s (max - min of the run medians), images_per_s
    (nproc x batch / step_median_s), images_per_s_min, images_per_s_max. NaN where runs_ok == 0.
    """
    missing = [
        c
        for c in GROUP_KEYS + ["run_id", "status", "step_median_s", "images_per_s"]
        if c not in metrics.columns
    ]
    if missing:
        raise InputError(f"metrics table lacks columns {missing}")
    rows = []
    for key, g in metrics.groupby(GROUP_KEYS, sort=True):
        ok = g[g["status"] == "ok"]
        for _, r in ok.iterrows():
            for col in ("step_median_s", "images_per_s"):
                v = r[col]
                if pd.isna(v) or not math.isfinite(float(v)) or float(v) <= 0:
                    raise InputError(f"metrics: ok run {r['run_id']!r} has {col} = {v!r}")
        steps = ok["step_median_s"].astype(float)
        ips = ok["images_per_s"].astype(float)
        n_ok = len(ok)
        nproc = group_nproc(g)
        step = float(steps.median()) if n_ok else math.nan
        group = dict(zip(GROUP_KEYS, key, strict=True))
        rows.append(
            dict(
                group,
                nproc=nproc,
                runs_ok=n_ok,
                runs_failed=len(g) - n_ok,
                step_median_s=step,
                step_spread_s=float(steps.max() - steps.min()) if n_ok else math.nan,
                images_per_s=images_per_s_at(step, int(group["batch_size"]), nproc),
                images_per_s_min=float(ips.min()) if n_ok else math.nan,
                images_per_s_max=float(ips.max()) if n_ok else math.nan,
            )
        )
    cols = GROUP_KEYS + [
        "nproc",
        "runs_ok",
        "runs_failed",
        "step_median_s",
        "step_spread_s",
        "images_per_s",
        "images_per_s_min",
        "images_per_s_max",
    ]
    df = pd.DataFrame(rows, columns=cols)
    df[["batch_size", "nproc", "runs_ok", "runs_failed"]] = df[
        ["batch_size", "nproc", "runs_ok", "runs_failed"]
    ].astype("int64")
    return df
