"""Aggregation: run JSONs -> metrics table -> roofline points table.

No file I/O here: callers load JSON/CSV and pass dicts and DataFrames in.

``metrics_frame`` builds ``results/metrics.csv``: one row per run, failed runs
included (their status and message, NaN step timings and throughput).

``roofline_points_frame`` builds ``results/roofline_points.csv``: one row per
(env, model, precision, batch) seen in the metrics. Groups with no ``ok`` run
stay in the table as rows with ``runs_ok == 0`` and NaN numbers (``ai_source``,
``roof_source`` and ``bound`` empty, ``above_roof`` False), so the report can
list every failed configuration from one file; plots draw only rows with
``runs_ok > 0`` (see :func:`plottable_points`). Such rows never need a
complexity, ncu or ceilings entry, so a complexity JSON with ``status: "error"``
(a model that cannot train at the image size) is fine there; for a group with an
ok run it is an error naming the file.

FLOPs and bytes per step:
  * ``ai_source = "ncu"`` when the group's parsed ncu JSON exists, has no
    ``status`` or ``status == "ok"``, and non-null ``totals.flop.total`` and
    ``totals.bytes.dram``. The ncu totals are taken to cover exactly one
    training step at the run's batch size (the profile stage captures one step).
  * else ``ai_source = "perf"`` when the group's perf JSON (``results/{env}/perf/``,
    CPU counters through ``perf stat``) has ``status == "ok"`` and the precision's
    FLOPs are counted by the events (fp32): FLOPs and DRAM bytes per step from perf.
  * otherwise ``ai_source = "analytic"``: ``flops.train_step`` of the complexity
    JSON, and ``by_precision[precision].min_dram_bytes_per_step`` (falling back
    to the top-level ``min_dram_bytes_per_step``).

AI range (``ai_low``, ``ai_high``), from the complexity JSON whatever the source:
``ai_high`` = FLOPs / minimum DRAM bytes (a true lower bound on traffic, so an upper
bound on AI), ``ai_low`` = FLOPs / the per-op traffic model's upper estimate
(:mod:`dnnroofline.model.traffic`; every access counted: no measurement shows cache reuse,
on a GPU or a CPU). For an ``analytic`` point ``ai`` is
``ai_high`` (the plotted value, as before) and ``bound`` is ``memory`` or ``compute``
only when the whole range is on one side of the ridge, else ``inconclusive``. A
measured point (``ncu``, ``perf``) keeps its own AI and bound, with the analytic range
beside it for comparison. NaN where the complexity JSON has no traffic table.

Data-parallel envs (``nproc`` > 1): a point is one rank's, the roofline way of
multi-GPU studies: FLOPs and bytes of one rank's step (the complexity at the per-process
batch, the perf counts of all ranks / nproc; ncu does not profile them) over the slowest
rank's median step, against the roof of one rank's share of the machine (the ceilings
job measures with the env's threads per process; one GPU on CUDA). ``images_per_s``
counts every rank.

Peaks: the env's ceilings ``roofs``; compute roof selected by the *pipeline*
precision name (fp32, tf32, amp, bf16; ``fp16`` accepted for amp), measured
preferred over datasheet (see :mod:`dnnroofline.model.roofline`). A missing peak
raises :class:`InputError` naming env, precision and ceilings file: the
pipeline never plots against a guessed peak.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from pathlib import PurePath

import numpy as np
import pandas as pd

from dnnroofline.aggregate.inputs import (
    ceilings_path,
    check_roof_threads,
    check_runs_match_complexity,
    ncu_stem,
)
from dnnroofline.errors import InputError
from dnnroofline.measure.perf import PERF_PRECISIONS
from dnnroofline.model import busy_share, roofline, traffic

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
    "contention_cpus",
    "wall_s",
    "user_s",
    "sys_s",
    "max_rss_bytes",
    "peak_device_memory_bytes",
    "start_time",
    "end_time",
]
#: Performance figures forced to NaN for a failed run, whatever the JSON holds.
_RUN_PERF_COLUMNS = [
    "images_per_s",
    "step_median_s",
    "step_p5_s",
    "step_p95_s",
    "step_cv",
    "data_wait_median_s",
    "contention_cpus",
]
_METRICS_FLOAT = _RUN_PERF_COLUMNS + ["wall_s", "user_s", "sys_s", "start_time", "end_time"]
_METRICS_INT_NULLABLE = [
    "image_size",
    "num_classes",
    "threads",
    "max_rss_bytes",
    "peak_device_memory_bytes",
]
_METRICS_INT = ["batch_size", "run", "nproc"]

POINTS_COLUMNS = [
    "env",
    "model",
    "precision",
    "batch_size",
    "runs_ok",
    "runs_failed",
    "flop_per_step",
    "bytes_per_step",
    "ai",
    "ai_low",
    "ai_high",
    "ai_source",
    "step_median_s",
    "step_spread_s",
    "images_per_s",
    "images_per_s_min",
    "images_per_s_max",
    "attained_flops",
    "roof_flops",
    "roof_source",
    "peak_flops",
    "peak_bandwidth",
    "ridge_ai",
    "efficiency",
    "bound",
    "above_roof",
    # issue 8: the two FLOP rates, and why a GPU point's AI is analytic
    "executed_flops",
    "useful_flops",
    "ai_note",
    # issue 11: data-parallel processes; a point with nproc > 1 is one rank's
    "nproc",
    # issue 26: where the step waits (dnnroofline.model.busy_share)
    "kernel_busy_share",
    "kernel_time_source",
    "host_wait_cause",
]
_POINTS_FLOAT = [
    "flop_per_step",
    "bytes_per_step",
    "ai",
    "ai_low",
    "ai_high",
    "step_median_s",
    "step_spread_s",
    "images_per_s",
    "images_per_s_min",
    "images_per_s_max",
    "attained_flops",
    "roof_flops",
    "peak_flops",
    "peak_bandwidth",
    "ridge_ai",
    "efficiency",
    "executed_flops",
    "useful_flops",
    "kernel_busy_share",
]

#: ``dtype=`` for ``pd.read_csv`` of the two tables: names stay strings.
METRICS_DTYPES = {
    "run_id": "str",
    "env": "str",
    "model": "str",
    "precision": "str",
    "status": "str",
    "message": "str",
    "device": "str",
}
POINTS_DTYPES = {
    "env": "str",
    "model": "str",
    "precision": "str",
    "ai_source": "str",
    "roof_source": "str",
    "bound": "str",
    "ai_note": "str",
    "kernel_time_source": "str",
    "host_wait_cause": "str",
}

_RUN_SUFFIX = re.compile(r"_run(\d+)$")


# --------------------------------------------------------------------------- helpers


def _get(d: object, *keys: str) -> object:
    """Nested ``d[k1][k2]...``; None where any level is missing or null."""
    for k in keys:
        if not isinstance(d, Mapping):
            return None
        d = d.get(k)
    return d


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
    expected = f"{ncu_stem(env, model, precision, batch)}_run{n}"
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
        "step_median_s": _num(_get(run, "step_time_s", "median"), f"{where}: step_time_s.median"),
        "step_p5_s": _num(_get(run, "step_time_s", "p5"), f"{where}: step_time_s.p5"),
        "step_p95_s": _num(_get(run, "step_time_s", "p95"), f"{where}: step_time_s.p95"),
        "step_cv": _num(_get(run, "step_time_s", "cv"), f"{where}: step_time_s.cv"),
        "data_wait_median_s": _num(
            _get(run, "data_wait_s", "median"), f"{where}: data_wait_s.median"
        ),
        "contention_cpus": _contention_cpus(run, where),
    }
    for key in ["wall_s", "user_s", "sys_s", "max_rss_bytes", "peak_device_memory_bytes"]:
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
    others = _num(_get(run, *key, "other_processes_cpus"), f"{where}: other_processes_cpus")
    steal = _num(_get(run, *key, "steal_cpus"), f"{where}: steal_cpus")
    return others + (0.0 if math.isnan(steal) else steal)


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


def _sorted_frame(rows: list[dict], columns: list[str], keys: list[str]) -> pd.DataFrame:
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
    df = _sorted_frame(rows, METRICS_COLUMNS, GROUP_KEYS + ["run"])
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


# --------------------------------------------------------------------------- points


def ncu_counts(ncu: Mapping | None, where: str) -> tuple[float, float] | None:
    """(FLOP total, DRAM bytes) of a parsed ncu JSON, or None when it cannot give an AI.

    None: no file, ``status`` other than ``ok``, DRAM bytes not from the step pass (a
    bare parse_ncu.py table: isolated kernels, cold caches), or a null FLOP or DRAM
    total. A total that is present but not positive is a broken capture: InputError.
    """
    if ncu is None:
        return None
    if not isinstance(ncu, Mapping):
        raise InputError(f"{where}: parsed ncu JSON must be an object")
    if ncu.get("status", "ok") != "ok" or not bytes_from_the_step(ncu):
        return None
    flop = _get(ncu, "totals", "flop", "total")
    dram = _get(ncu, "totals", "bytes", "dram")
    if flop is None or dram is None:
        return None
    return (
        roofline.check_positive(f"{where}: totals.flop.total", flop),
        roofline.check_positive(f"{where}: totals.bytes.dram", dram),
    )


def bytes_from_the_step(ncu: Mapping) -> bool:
    """Whether a capture's DRAM bytes are the step's as it runs (the ncu stage's step
    pass), not kernels replayed one by one with flushed caches."""
    return _get(ncu, "provenance", "totals.bytes") == "step"


def ncu_note(ncu: Mapping | None) -> str | None:
    """Why a capture gave no AI, or what its AI leaves out; None for a whole, usable one."""
    if not isinstance(ncu, Mapping):
        return None
    if ncu.get("status", "ok") != "ok":
        message = ncu.get("message") or ncu.get("reason") or "no message"
        return f"ncu {ncu.get('status')}: {message}"
    if not bytes_from_the_step(ncu):
        return (
            "ncu capture without the step pass: its DRAM bytes are of kernels replayed "
            "alone with flushed caches, not the step's, so the AI is analytic"
        )
    nulls = [
        name
        for name, path in (("FLOP total", ("flop", "total")), ("DRAM bytes", ("bytes", "dram")))
        if _get(ncu, "totals", *path) is None
    ]
    if nulls:
        return f"ncu capture without {' or '.join(nulls)}: the AI is analytic"
    gaps = _get(ncu, "totals", "incomplete") or {}
    short = [f"{gaps[k]} kernel(s) without {name}" for k, name in INCOMPLETE_TOTALS if gaps.get(k)]
    if short:
        return f"ncu: {', '.join(short)} (n/a): the AI leaves them out"
    return None


#: How far under the analytic minimum ncu's DRAM bytes may read before the point says so.
BELOW_MINIMUM_RTOL = 0.05


def dram_below_minimum(
    dram_bytes: float, complexity: Mapping | None, precision: str, where: str
) -> str | None:
    """What a point whose ncu DRAM bytes are under the analytic minimum must say: its AI is
    above the analytic range's top. The minimum moves each weight, gradient, optimizer
    state and input once per step; a cache that holds some of them across kernels or
    steps (an H100's 50 MB L2) reads under it, and so does a capture that missed kernels."""
    if not isinstance(complexity, Mapping) or complexity.get("status", "ok") != "ok":
        return None
    _, minimum = analytic_counts(complexity, precision, where)
    if dram_bytes >= minimum * (1 - BELOW_MINIMUM_RTOL):
        return None
    return (
        f"ncu's DRAM bytes ({dram_bytes:.3g}) are {1 - dram_bytes / minimum:.0%} under the "
        f"analytic minimum ({minimum:.3g}), so its AI is above the analytic range: the cache "
        "kept data the minimum moves once per step, or the capture missed kernels"
    )


#: The totals a capture's AI sums over kernels, with their names (totals.incomplete keys).
INCOMPLETE_TOTALS = (("flop.total", "FLOP counters"), ("bytes.dram", "DRAM counters"))


def flop_rates(
    ncu_counts_: tuple[float, float] | None, complexity: Mapping | None, step_s: float
) -> tuple[float, float]:
    """(executed FLOP/s, useful FLOP/s) of a point; NaN where the count is missing.

    Executed: ncu's FLOPs (padding, recomputation and all) over the median step.
    Useful: the analytic model FLOPs over the median step (the MFU convention).
    """
    executed = ncu_counts_[0] / step_s if ncu_counts_ is not None else math.nan
    useful = math.nan
    if complexity is not None and complexity.get("status", "ok") == "ok":
        flop = _get(complexity, "flops", "train_step")
        if isinstance(flop, (int, float)) and flop > 0:
            useful = flop / step_s
    return executed, useful


def perf_counts(doc: Mapping | None, precision: str, where: str) -> tuple[float, float] | None:
    """(FLOPs, DRAM bytes) per step from a perf counter JSON, or None.

    None: no file, ``status`` other than ``ok`` (``unavailable`` where the kernel has no
    counters), or a precision whose FLOPs the events do not count (bf16 dot products).
    """
    if doc is None:
        return None
    if not isinstance(doc, Mapping):
        raise InputError(f"{where}: perf JSON must be an object")
    if doc.get("status") != "ok" or precision not in PERF_PRECISIONS:
        return None
    return (
        roofline.check_positive(f"{where}: flop_per_step", doc.get("flop_per_step")),
        roofline.check_positive(f"{where}: dram_bytes_per_step", doc.get("dram_bytes_per_step")),
    )


def analytic_counts(complexity: Mapping, precision: str, where: str) -> tuple[float, float]:
    """(train-step FLOPs, minimum DRAM bytes per step) from a complexity JSON.

    A complexity JSON with ``status`` other than ``ok`` (the model could not be traced
    at this image size) has no counts: InputError naming the file and its reason.
    """
    status = complexity.get("status", "ok")
    if status != "ok":
        raise InputError(
            f"{where}: complexity has status {status!r} ({complexity.get('message')}), so it "
            "has no FLOP or byte counts, yet this (model, batch) has ok runs; the model runs "
            "in the driver but not in the complexity trace. Check the message, fix or drop "
            "the model, and rerun"
        )
    flop = _get(complexity, "flops", "train_step")
    nbytes = _get(complexity, "by_precision", precision, "min_dram_bytes_per_step")
    key = f"by_precision.{precision}.min_dram_bytes_per_step"
    if nbytes is None:
        nbytes, key = complexity.get("min_dram_bytes_per_step"), "min_dram_bytes_per_step"
    return (
        roofline.check_positive(f"{where}: flops.train_step", flop),
        roofline.check_positive(f"{where}: {key}", nbytes),
    )


def analytic_ai_range(complexity: Mapping | None, precision: str) -> tuple[float, float]:
    """``(ai_low, ai_high)`` of a complexity JSON at ``precision`` (NaN, NaN without one):
    train-step FLOPs over the per-op traffic model's bytes and over the minimum bytes
    (:func:`dnnroofline.model.traffic.point_ai_range`, the range the ncu page shows too)."""
    if not isinstance(complexity, Mapping) or complexity.get("status", "ok") != "ok":
        return math.nan, math.nan
    if not isinstance(complexity.get("traffic"), Mapping):
        return math.nan, math.nan  # a complexity JSON from before the traffic model
    where = f"results/complexity/{complexity.get('arch')}_bs{complexity.get('batch_size')}.json"
    flop, min_bytes = analytic_counts(complexity, precision, where)
    return traffic.point_ai_range(
        complexity, precision, flop=flop, min_bytes=min_bytes, where=where
    )


def _peaks(
    env: str, precision: str, ceilings: Mapping, sources: Mapping[str, str]
) -> tuple[roofline.Roof, roofline.Roof]:
    where = sources.get(env, ceilings_path(env))
    if env not in ceilings:
        raise InputError(
            f"no ceilings for env {env!r} (expected {where}); "
            "refusing to place its points against a guessed peak"
        )
    roofs = roofline.parse_roofs(ceilings[env], where)
    compute = roofline.select_roof(roofs, "compute", precision)
    if compute is None:
        have = sorted({r.precision for r in roofs if r.kind == "compute"})
        raise InputError(
            f"{where}: env {env!r} has no compute peak for precision {precision!r} "
            f"(accepted names {list(roofline.precision_aliases(precision))}, file has {have}); "
            "add a measured or datasheet roof - the pipeline never plots against a guess"
        )
    memory = roofline.select_roof(roofs, "memory")
    if memory is None:
        raise InputError(
            f"{where}: env {env!r} has no memory-bandwidth roof (needed for precision "
            f"{precision!r}); add a measured or datasheet roof"
        )
    return compute, memory


def roofline_points_frame(
    metrics: pd.DataFrame,
    complexity: Mapping[tuple[str, int], Mapping],
    ceilings: Mapping[str, Mapping],
    ncu: Mapping[tuple[str, str, str, int], Mapping | None] | None = None,
    *,
    ceilings_sources: Mapping[str, str] | None = None,
    ncu_sources: Mapping[tuple[str, str, str, int], str] | None = None,
    rel_tol: float = roofline.ABOVE_ROOF_RTOL,
    perf: Mapping[tuple[str, str, str, int], Mapping | None] | None = None,
    perf_sources: Mapping[tuple[str, str, str, int], str] | None = None,
    traces: Mapping[tuple[str, str, str, int], Mapping | None] | None = None,
) -> pd.DataFrame:
    """One row per (env, model, precision, batch_size) with exactly :data:`POINTS_COLUMNS`.

    ``complexity`` is keyed by (model, batch_size), ``ceilings`` by env, ``ncu`` by
    (env, model, precision, batch_size) (value None or absent: no ncu data); ``traces``
    likewise, each the ``busy`` block of a trace table (:func:`busy_share.trace_summary`),
    which gives the kernel-busy share before ncu's kernel pass does (``host`` bound).
    ``*_sources`` name the files in error messages.
    """
    ncu = ncu or {}
    ceilings_sources = ceilings_sources or {}
    ncu_sources = ncu_sources or {}
    check_roof_threads(metrics, ceilings, ceilings_sources)
    check_runs_match_complexity(metrics, complexity)
    rows = []
    for g in group_summary(metrics).to_dict("records"):
        env, model, precision, batch = g["env"], g["model"], g["precision"], int(g["batch_size"])
        row = {c: math.nan for c in POINTS_COLUMNS}
        row.update(g)
        row.update(batch_size=batch, ai_source=None, roof_source=None, bound=None, above_roof=False)
        if g["runs_ok"] == 0:
            rows.append(row)
            continue
        key = (env, model, precision, batch)
        ncu_where = ncu_sources.get(key, f"results/{env}/ncu/{ncu_stem(*key)}.json")
        counts = ncu_counts(ncu.get(key), ncu_where)
        executed, useful = flop_rates(counts, complexity.get((model, batch)), g["step_median_s"])
        row.update(executed_flops=executed, useful_flops=useful, ai_note=ncu_note(ncu.get(key)))
        perf_where = (perf_sources or {}).get(key, f"results/{env}/perf/{ncu_stem(*key)}.json")
        perf_c = perf_counts((perf or {}).get(key), precision, perf_where)
        if perf_c is not None and g["nproc"] > 1:
            # perf stat counts the whole process tree: every rank; a point is one rank's
            perf_c = (perf_c[0] / g["nproc"], perf_c[1] / g["nproc"])
        cwhere = f"results/complexity/{model}_bs{batch}.json"
        comp = complexity.get((model, batch))
        if counts is not None:
            ai_source = "ncu"
            below = dram_below_minimum(counts[1], comp, precision, cwhere)
            row["ai_note"] = "; ".join(n for n in (row["ai_note"], below) if n) or None
        elif perf_c is not None:
            counts, ai_source = perf_c, "perf"
        else:
            ai_source = "analytic"
            if comp is None:
                raise InputError(
                    f"no complexity data for model {model!r} batch {batch} (expected {cwhere}) "
                    f"and no usable ncu counters ({ncu_where}) for env {env!r} {precision}"
                )
            counts = analytic_counts(comp, precision, cwhere)
        compute, memory = _peaks(env, precision, ceilings, ceilings_sources)
        p = roofline.evaluate_point(
            counts[0], counts[1], g["step_median_s"], compute.value, memory.value, rel_tol
        )
        ai_low, ai_high = analytic_ai_range(comp, precision)
        bound = p.bound
        if ai_source == "analytic" and math.isfinite(ai_low):
            bound = traffic.bound_of_range(ai_low, ai_high, p.ridge_ai)
        busy = busy_share.point_busy(
            (traces or {}).get(key), ncu.get(key), g["step_median_s"], ncu_stem(*key)
        )
        bound = roofline.bound_with_busy_share(bound, busy.share)
        row.update(
            kernel_busy_share=busy.share,
            kernel_time_source=busy.source,
            host_wait_cause=busy.cause,
        )
        roof_source = (
            compute.source
            if compute.source == memory.source
            else f"compute={compute.source};memory={memory.source}"
        )
        row.update(
            flop_per_step=p.flop_per_step,
            bytes_per_step=p.bytes_per_step,
            ai=p.ai,
            ai_low=ai_low,
            ai_high=ai_high,
            ai_source=ai_source,
            attained_flops=p.attained_flops,
            roof_flops=p.roof_flops,
            roof_source=roof_source,
            peak_flops=p.peak_flops,
            peak_bandwidth=p.peak_bandwidth,
            ridge_ai=p.ridge_ai,
            efficiency=p.efficiency,
            bound=bound,
            above_roof=p.above_roof,
        )
        rows.append(row)
    df = _sorted_frame(rows, POINTS_COLUMNS, GROUP_KEYS)
    df[_POINTS_FLOAT] = df[_POINTS_FLOAT].astype("float64")
    df[["batch_size", "runs_ok", "runs_failed", "nproc"]] = df[
        ["batch_size", "runs_ok", "runs_failed", "nproc"]
    ].astype("int64")
    df["above_roof"] = df["above_roof"].astype(bool)
    return df


def plottable_points(points: pd.DataFrame) -> pd.DataFrame:
    """Rows that are points on a roofline: at least one ok run and finite AI and FLOP/s."""
    if points.empty:
        return points
    keep = (
        (points["runs_ok"] > 0)
        & np.isfinite(points["ai"].astype(float))
        & np.isfinite(points["attained_flops"].astype(float))
    )
    return points[keep].reset_index(drop=True)


def failed_groups(points: pd.DataFrame) -> pd.DataFrame:
    """Rows of configurations without a single ok run (for the report)."""
    return points[points["runs_ok"] == 0].reset_index(drop=True)
