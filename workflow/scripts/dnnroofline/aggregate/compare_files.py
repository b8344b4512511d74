"""Before and after, the files (issue 37): read the two studies, build the six tables,
write them. compare_studies.py calls :func:`load_study`, :func:`baseline_study`,
:func:`compare_tables` and :func:`write_tables`.

Run timings come from the run JSONs (``step_time_s.all``); a run that metrics.csv lists
and no run JSON holds is read from its row (its median step, no per-step times).
"""

from __future__ import annotations

import math
import os
import statistics
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from dnnroofline.aggregate import compare, compare_where
from dnnroofline.aggregate.metrics import METRICS_DTYPES, run_row
from dnnroofline.errors import InputError
from dnnroofline.io import atomic_path, dig, read_json
from dnnroofline.study.baseline import Baseline, check_run_schema, metrics_header

#: The six files compare_studies.py writes into --outdir, with their columns.
TABLES = {
    "compare.csv": compare.COMPARE_COLUMNS,
    "compare_unmatched.csv": compare.UNMATCHED_COLUMNS,
    "compare_fingerprints.csv": compare_where.FINGERPRINT_COLUMNS,
    "compare_ops.csv": compare_where.OP_COLUMNS,
    "compare_kernels.csv": compare_where.KERNEL_COLUMNS,
    "compare_roofs.csv": compare_where.ROOF_COLUMNS,
}


@dataclass
class Study:
    """One side of a comparison, read: its runs and the documents that say where."""

    runs: list[compare.RunTiming]
    clocks: dict[str, dict] = field(default_factory=dict)
    env_info: dict[str, Mapping] = field(default_factory=dict)
    ceilings: dict[str, Mapping] = field(default_factory=dict)
    traces: list[Mapping] = field(default_factory=list)
    ncu: list[Mapping] = field(default_factory=list)
    config: Mapping | None = None

    @property
    def envs(self) -> list[str]:
        return sorted({r.env for r in self.runs})


# --------------------------------------------------------------------------- runs


def run_timing(doc: Mapping, where: str) -> compare.RunTiming:
    """A run JSON's timing (its schema checked: a newer one is refused)."""
    check_run_schema(doc, where)
    row = run_row(doc, where)
    steps = dig(doc, "step_time_s", "all") if row["status"] == "ok" else None
    has_steps = isinstance(steps, list) and len(steps) > 0
    if has_steps and not all(_positive(s) for s in steps):
        raise InputError(f"{where}: step_time_s.all of an ok run must hold positive numbers")
    if row["status"] == "ok" and not has_steps:
        steps = [row["step_median_s"]]
    return compare.RunTiming(
        env=row["env"],
        model=row["model"],
        precision=row["precision"],
        batch=row["batch_size"],
        run=row["run"],
        status=row["status"],
        steps=tuple(float(s) for s in steps or ()),
        images_per_s=row["images_per_s"],
        nproc=row["nproc"],
        has_steps=has_steps,
        message=row["message"],
    )


def _positive(value: object) -> bool:
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value > 0
    )


def run_clocks(docs: Iterable[Mapping]) -> dict[str, dict]:
    """{env: {gpu_sm_max_mhz, gpu_mem_max_mhz, gpu_power_limit_w, gpu_sm_mhz_median}} from
    the ok runs' NVML telemetry, where recorded (medians over the runs)."""
    seen: dict[str, dict[str, list]] = {}
    keys = {
        "gpu_sm_max_mhz": ("gpu_telemetry", "limits", "sm_max_mhz"),
        "gpu_mem_max_mhz": ("gpu_telemetry", "limits", "mem_max_mhz"),
        "gpu_power_limit_w": ("gpu_telemetry", "limits", "power_limit_w"),
        "gpu_sm_mhz_median": ("gpu_telemetry", "sm_mhz", "median"),
    }
    for doc in docs:
        if doc.get("status") != "ok" or not isinstance(doc.get("env"), str):
            continue
        for key, path in keys.items():
            value = dig(doc, *path)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                seen.setdefault(doc["env"], {}).setdefault(key, []).append(float(value))
    return {env: {k: statistics.median(v) for k, v in found.items()} for env, found in seen.items()}


def runs_from_metrics(path: Path, where: str) -> list[compare.RunTiming]:
    """The runs of a metrics.csv (older files without later columns are read)."""
    header = metrics_header(path, where)
    try:
        frame = pd.read_csv(path, dtype={k: v for k, v in METRICS_DTYPES.items() if k in header})
    except (OSError, ValueError) as exc:
        raise InputError(f"{where}: {path}: cannot read metrics.csv: {exc}") from exc
    out = []
    for i, r in enumerate(frame.to_dict("records")):
        nproc = r.get("nproc")
        nproc = int(nproc) if isinstance(nproc, (int, float)) and nproc == nproc else 1
        try:
            step, batch, run = float(r["step_median_s"]), int(r["batch_size"]), int(r["run"])
            if not _positive(step):  # the run's images/s, where the median step is missing
                step = nproc * batch / float(r["images_per_s"])
        except (TypeError, ValueError, ZeroDivisionError) as exc:
            raise InputError(f"{where}: {path}: row {i + 2}: {exc}") from exc
        ok = r["status"] == "ok" and _positive(step)
        out.append(
            compare.RunTiming(
                env=str(r["env"]),
                model=str(r["model"]),
                precision=str(r["precision"]),
                batch=batch,
                run=run,
                status=str(r["status"]) if ok or r["status"] != "ok" else "error",
                steps=(step,) if ok else (),
                images_per_s=float(r["images_per_s"]) if ok else math.nan,
                nproc=nproc,
                has_steps=False,
                message=None if pd.isna(r.get("message")) else str(r.get("message")),
            )
        )
    return out


#: The run settings that change the numbers, each an env's or the study's (the run
#: JSON's config holds them under the same names).
_SETTINGS = {
    "threads": "env",
    "channels_last": "env",
    "compile": "env",
    "cudnn_benchmark": "env",
    "nproc": "env",
    "environment": "env",
    "warmup_iters": "study",
    "iters": "study",
    "image_size": "study",
    "data": "study",
    "workers": "study",
}


def _most_common(values: list) -> object:
    """The value met most often (the first of a tie), compared by repr (lists, dicts)."""
    best = Counter(repr(v) for v in values).most_common(1)[0][0]
    return next(v for v in values if repr(v) == best)


def run_settings(docs: Iterable[Mapping]) -> dict:
    """A config-shaped ``{envs: {env: {...}}, study: {...}}`` of the settings the ok runs
    ran with (each the most common value), for the keys a study_config lacks."""
    env_vals: dict[str, dict[str, list]] = {}
    study_vals: dict[str, list] = {}
    for doc in docs:
        config = doc.get("config")
        if doc.get("status") != "ok" or not isinstance(config, Mapping):
            continue
        for key, level in _SETTINGS.items():
            if key not in config:
                continue
            if level == "env":
                env_vals.setdefault(str(doc.get("env")), {}).setdefault(key, []).append(config[key])
            else:
                study_vals.setdefault(key, []).append(config[key])

    def pick(found: Mapping[str, list]) -> dict:
        return {key: _most_common(values) for key, values in found.items()}

    return {"envs": {env: pick(v) for env, v in env_vals.items()}, "study": pick(study_vals)}


def with_fallback(config: Mapping | None, fallback: Mapping) -> dict:
    """``config`` with the keys it lacks (per env and in ``study``) from ``fallback``."""
    config = dict(config or {})
    envs = {k: dict(v) for k, v in (config.get("envs") or {}).items() if isinstance(v, Mapping)}
    for env, values in fallback.get("envs", {}).items():
        envs[env] = {**values, **envs.get(env, {})}
    study = {**fallback.get("study", {}), **(config.get("study") or {})}
    return {**config, "envs": envs, "study": study}


def read_runs(
    run_paths: Sequence[os.PathLike | str], metrics: Path | None, where: str
) -> tuple[list[compare.RunTiming], list[Mapping]]:
    """(run timings, run JSONs): every run JSON, plus each metrics.csv run that no run
    JSON holds."""
    docs = [(str(p), read_json(p)) for p in run_paths]
    timings = [run_timing(doc, f"{where}: {p}") for p, doc in docs]
    have = {(*t.point, t.run) for t in timings}
    if metrics is not None and Path(metrics).is_file():
        timings += [
            t for t in runs_from_metrics(Path(metrics), where) if (*t.point, t.run) not in have
        ]
    return timings, [doc for _, doc in docs]


def by_env(paths: Iterable[os.PathLike | str]) -> dict[str, Mapping]:
    """{env: document} of env_info.json or ceilings.json files (``env`` in the file, else
    the folder's name)."""
    out = {}
    for p in paths:
        doc = read_json(p)
        env = doc.get("env") if isinstance(doc, Mapping) else None
        out[str(env or Path(p).parent.name)] = doc
    return out


def load_study(
    *,
    runs: Sequence[os.PathLike | str],
    metrics: os.PathLike | str | None = None,
    env_info: Iterable = (),
    ceilings: Iterable = (),
    traces: Iterable = (),
    ncu: Iterable = (),
    config: Mapping | None = None,
    where: str = "current study",
) -> Study:
    """This study's files, read. The settings its study_config lacks (an older baseline,
    or one without study_config.json) are the runs' own."""
    if metrics:
        metrics_header(Path(metrics), where)
    timings, docs = read_runs(runs, Path(metrics) if metrics else None, where)
    return Study(
        runs=timings,
        clocks=run_clocks(docs),
        env_info=by_env(env_info),
        ceilings=by_env(ceilings),
        traces=[read_json(p) for p in traces],
        ncu=[read_json(p) for p in ncu],
        config=with_fallback(config, run_settings(docs)),
    )


def baseline_study(baseline: Baseline) -> Study:
    """The baseline's files, read (never written)."""
    envs = baseline.envs
    config_path = baseline.study_config()
    return load_study(
        runs=[p for env in envs for p in baseline.run_files(env)],
        metrics=baseline.metrics() if baseline.metrics().is_file() else None,
        env_info=[p for env in envs if (p := baseline.env_info(env))],
        ceilings=[p for env in envs if (p := baseline.ceilings(env))],
        traces=[p for env in envs for p in baseline.trace_ops(env)],
        ncu=[p for env in envs for p in baseline.ncu_files(env)],
        config=read_json(config_path) if config_path else None,
        where=f"compare.baseline {baseline.root}",
    )


# --------------------------------------------------------------------------- tables


def compare_tables(
    baseline: Study, current: Study, env_map: Mapping[str, str] | None = None
) -> dict[str, list[dict]]:
    """{file name: rows} of the six :data:`TABLES`."""
    rows, unmatched = compare.compare_points(baseline.runs, current.runs, env_map)
    where = compare_where
    return {
        "compare.csv": rows,
        "compare_unmatched.csv": unmatched,
        "compare_fingerprints.csv": where.fingerprint_diff(
            baseline.env_info,
            current.env_info,
            baseline.config,
            current.config,
            env_map,
            baseline_clocks=baseline.clocks,
            current_clocks=current.clocks,
        ),
        "compare_ops.csv": where.op_diffs(baseline.traces, current.traces, env_map),
        "compare_kernels.csv": where.kernel_diffs(baseline.ncu, current.ncu, env_map),
        "compare_roofs.csv": where.roof_diffs(baseline.ceilings, current.ceilings, env_map),
    }


def check_outdir(outdir: Path, baseline: Baseline) -> None:
    """Refuse an output folder inside the baseline: the baseline is read, never written."""
    out, root = outdir.resolve(), baseline.root.resolve()
    study_folder = root.parent if root.name == "results" else root
    if out in (root, study_folder) or root in out.parents:
        raise InputError(
            f"--outdir {outdir}: inside the baseline {baseline.root}; the baseline is read, "
            "never written (write the comparison into this study's results/)"
        )


def write_tables(outdir: os.PathLike | str, tables: Mapping[str, list[dict]]) -> list[Path]:
    """Each table as ``outdir/name``, atomically; an empty one as its header alone."""
    paths = []
    for name, columns in TABLES.items():
        path = Path(outdir) / name
        frame = pd.DataFrame(tables.get(name) or [], columns=columns)
        with atomic_path(path) as tmp:
            frame.to_csv(tmp, index=False)
        paths.append(path)
    return paths
