"""The study's inputs as the report reads them: the ledgers prepared, each env's part of
the config, the expected runs, per-configuration throughput, roofs and ridge points.

Pure logic, shared by every section; no HTML here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from dnnroofline.aggregate.metrics import METRICS_COLUMNS, group_nproc, images_per_s_at
from dnnroofline.aggregate.points import POINTS_COLUMNS
from dnnroofline.errors import InputError
from dnnroofline.estimate import roofline
from dnnroofline.formatting import isnum, missing, to_bool
from dnnroofline.perfmodel import levers
from dnnroofline.study import defaults, identity

# The ledgers' columns are defined once, where they are written.
METRIC_COLUMNS = tuple(METRICS_COLUMNS)
METRIC_TEXT = (
    "run_id",
    "env",
    "model",
    "precision",
    "status",
    "message",
    "device",
    "energy_source",
)

POINT_COLUMNS = tuple(POINTS_COLUMNS)
POINT_TEXT = (
    "env",
    "model",
    "precision",
    "ai_source",
    "roof_source",
    "bound",
    "ai_note",
    "kernel_time_source",
    "host_wait_cause",
)
#: ``host``: the device idles much of the step (dnnroofline.measure.busy_share), whatever the AI
BOUNDS = ("memory", "compute", "inconclusive", "host")

#: A configuration whose per-step CV (or CV of images/s over repeats) exceeds
#: this is flagged as noisy.
NOISY_CV = 0.05
#: A data-wait share of the step above this is worth fixing (a lever of the one engine).
HIGH_DATA_WAIT = levers.HIGH_DATA_WAIT

GROUP = ["env", "model", "precision", "batch_size"]


def _text_or_none(v: Any) -> str | None:
    if missing(v):
        return None
    return str(v)


def prepare_frame(df: pd.DataFrame | None, columns: Sequence[str], text: Sequence[str]):
    """Copy with every contract column present; text as str/None, the rest numeric."""
    out = pd.DataFrame(columns=list(columns)) if df is None else df.copy()
    for c in columns:
        if c not in out.columns:
            out[c] = np.nan
    for c in out.columns:
        if c in text:
            out[c] = pd.Series([_text_or_none(v) for v in out[c]], index=out.index, dtype=object)
        elif c in columns and c not in ("above_roof",):
            out[c] = pd.to_numeric(out[c], errors="coerce")
    return out.reset_index(drop=True)


def prepare_metrics(metrics: pd.DataFrame | None) -> pd.DataFrame:
    df = prepare_frame(metrics, METRIC_COLUMNS, METRIC_TEXT)
    df["status"] = [(s or "unknown").strip().lower() for s in df["status"]]
    return df


def ok_runs(metrics: pd.DataFrame) -> pd.DataFrame:
    """Runs that count: status ok and a positive throughput."""
    m = prepare_metrics(metrics)
    return m[(m["status"] == "ok") & (m["images_per_s"] > 0)]


def failed_runs(metrics: pd.DataFrame) -> pd.DataFrame:
    """Runs that did not produce a timing: status other than ok, or ok without timings."""
    m = prepare_metrics(metrics)
    return m[(m["status"] != "ok") | ~(m["images_per_s"] > 0)]


def prepare_points(points: pd.DataFrame | None) -> pd.DataFrame:
    """Valid roofline points, with ``eff`` (attained/roof), ``bound_`` and ``above``."""
    df = prepare_frame(points, POINT_COLUMNS, POINT_TEXT)
    if df.empty:
        for c in ("eff", "bound_", "above", "gap"):
            df[c] = pd.Series(dtype=object)
        return df
    # a point needs at least one ok run and an attained rate; failed runs never plot
    keep = (df["attained_flops"] > 0) & ~(df["runs_ok"] <= 0)
    df = df[keep].reset_index(drop=True)
    effs, bounds, aboves = [], [], []
    for _, r in df.iterrows():
        att, roof = r["attained_flops"], r["roof_flops"]
        eff = att / roof if isnum(att) and isnum(roof) and roof > 0 else r["efficiency"]
        effs.append(float(eff) if isnum(eff) else math.nan)
        b = (r["bound"] or "").strip().lower()
        if b not in BOUNDS and isnum(r["ai"]) and isnum(r["ridge_ai"]):
            b = "memory" if r["ai"] < r["ridge_ai"] else "compute"
        bounds.append(b if b in BOUNDS else None)
        above = to_bool(r["above_roof"]) or (isnum(eff) and eff > 1.0 + 1e-9)
        aboves.append(above)
    df["eff"] = effs
    df["bound_"] = pd.Series(bounds, dtype=object)
    df["above"] = aboves
    df["gap"] = df["roof_flops"] - df["attained_flops"]
    return df.sort_values(GROUP, kind="stable").reset_index(drop=True)


def prepared(metrics, points, complexity=None, env_infos=None, ceilings=None) -> tuple:
    """The inputs as the sections read them: (metrics, points, complexity index,
    env_infos by env, ceilings by env)."""
    return (
        prepare_metrics(metrics),
        prepare_points(points),
        complexity_index(complexity),
        keyed(env_infos),
        keyed(ceilings),
    )


def keyed(objs: Any, key: str = "env") -> dict[str, dict]:
    """``{env: obj}`` from a dict of them, or a list of dicts carrying ``env``."""
    if objs is None:
        return {}
    if isinstance(objs, Mapping):
        if key in objs and not isinstance(objs.get(key), Mapping):
            return {str(objs[key]): dict(objs)}
        return {str(k): dict(v) for k, v in objs.items() if isinstance(v, Mapping)}
    out: dict[str, dict] = {}
    for o in objs:
        if isinstance(o, Mapping) and o.get(key) is not None:
            out[str(o[key])] = dict(o)
    return out


def complexity_index(complexity: Any) -> dict[tuple[str, int], dict]:
    """``{(arch, batch_size): complexity JSON}``."""
    if complexity is None:
        return {}
    items = complexity.values() if isinstance(complexity, Mapping) else complexity
    if isinstance(complexity, Mapping) and "arch" in complexity:
        items = [complexity]
    out = {}
    for c in items:
        if isinstance(c, Mapping) and c.get("arch") is not None and isnum(c.get("batch_size")):
            out[(str(c["arch"]), int(c["batch_size"]))] = dict(c)
    return out


def study_cfg(config: Mapping | None) -> dict:
    return dict((config or {}).get("study") or {})


def envs_cfg(config: Mapping | None) -> dict[str, dict]:
    envs = (config or {}).get("envs") or {}
    return {str(k): dict(v or {}) for k, v in envs.items()}


def env_matrix(config: Mapping | None, env: str) -> dict:
    """The env's resolved matrix: models, precisions, batch sizes (all, and per model as
    ``batch_sizes_by_model`` resolves them), runs, threads, device."""
    study = study_cfg(config)
    e = envs_cfg(config).get(env, {})
    models = list(study.get("models") or [])
    default = [int(b) for b in (e.get("batch_sizes") or study.get("batch_sizes") or [])]
    resolved = e.get("batch_sizes_by_model") or {}
    by_model = {m: [int(b) for b in resolved.get(m) or default] for m in models}
    return {
        "models": models,
        "precisions": list(e.get("precisions") or study.get("precisions") or []),
        "batch_sizes": list(dict.fromkeys(b for bs in by_model.values() for b in bs)) or default,
        "batch_sizes_by_model": by_model,
        "runs": int(defaults.value(study, "study.runs")),  # an older study_config may lack it
        "threads": e.get("threads"),
        "device": e.get("device", "auto"),
    }


def env_order(config: Mapping | None, *frames: pd.DataFrame) -> list[str]:
    envs = list(envs_cfg(config))
    for f in frames:
        for e in f["env"] if len(f) else []:
            if e and e not in envs:
                envs.append(e)
    return envs


EXPECTED_KEYS = ("env", "model", "precision", "batch_size", "run")


def expected_run_table(
    expected_runs: Any = None, metrics: pd.DataFrame | None = None
) -> list[dict]:
    """Expected runs as dicts ``{run_id, env, model, precision, batch_size, run, ...}``.

    ``expected_runs`` is the study's matrix as the rules expanded it
    (``results/study_matrix.json``: one object per run, with its identity). Without it
    the runs in the ledger are the runs expected: none can be called missing.
    """
    if expected_runs is None:
        if metrics is None or metrics.empty:
            return []
        keys = ["run_id", *EXPECTED_KEYS]
        return [dict(zip(keys, row, strict=True)) for row in metrics[keys].itertuples(index=False)]
    out = []
    for i, item in enumerate(expected_runs):
        lacking = [k for k in EXPECTED_KEYS if not isinstance(item, Mapping) or item.get(k) is None]
        if lacking:
            raise InputError(
                f"expected run {i} ({item!r}) lacks {', '.join(lacking)}: each must be an "
                "object with env, model, precision, batch_size and run (results/study_matrix.json)"
            )
        rid = identity.run_id(*(item[k] for k in EXPECTED_KEYS))
        if item.get("run_id") not in (None, rid):
            raise InputError(
                f"expected run {i}: run_id {item['run_id']!r} is not its identity's ({rid!r})"
            )
        out.append(
            {**item, "batch_size": int(item["batch_size"]), "run": int(item["run"]), "run_id": rid}
        )
    return out


def missing_runs(expected: list[dict], metrics: pd.DataFrame) -> list[dict]:
    present = {r for r in metrics["run_id"] if r}
    return [e for e in expected if e["run_id"] not in present]


def throughput_table(metrics: pd.DataFrame) -> pd.DataFrame:
    """Per (env, model, precision, batch) over ok runs only: images/s (at the median of
    the runs' median steps, as roofline_points.csv), the step-time spread, and the runs'
    median page faults per step and kernel share of CPU time."""
    m = ok_runs(metrics)
    cols = GROUP + [
        "n_ok",
        "ips_median",
        "ips_min",
        "ips_max",
        "step_median",
        "step_p5",
        "step_p95",
        "step_cv_max",
        "repeat_cv",
        "data_wait_share",
        "noisy",
        "contention_cpus_max",
        "fault_mib_per_step",
        "timed_sys_share",
    ]
    if m.empty:
        return pd.DataFrame(columns=cols)
    rows = []
    for key, g in m.groupby(GROUP, sort=True, dropna=False):
        ips = g["images_per_s"].astype(float)
        step = float(g["step_median_s"].median())
        repeat_cv = float(ips.std(ddof=1) / ips.mean()) if len(ips) > 1 else math.nan
        step_cv = g["step_cv"].max()
        share = (g["data_wait_median_s"] / g["step_median_s"]).median()
        noisy = (isnum(step_cv) and step_cv > NOISY_CV) or (
            isnum(repeat_cv) and repeat_cv > NOISY_CV
        )
        rows.append(
            [
                *key,
                len(g),
                images_per_s_at(step, int(key[GROUP.index("batch_size")]), group_nproc(g)),
                float(ips.min()),
                float(ips.max()),
                step,
                g["step_p5_s"].min(),
                g["step_p95_s"].max(),
                step_cv,
                repeat_cv,
                share,
                bool(noisy),
                g["contention_cpus"].max(),  # NaN when no run recorded it
                g["fault_mib_per_step"].median(),
                g["timed_sys_share"].median(),
            ]
        )
    return pd.DataFrame(rows, columns=cols)


def valid_roofs(ceil: Mapping | None) -> list[roofline.Roof]:
    """The valid roofs of a ceilings JSON (the rules of :mod:`dnnroofline.estimate.roofline`;
    bad entries skipped).

    The roofline stage already refused invalid ceilings; the report still renders
    whatever is valid, so one bad entry never hides the rest.
    """
    entries = (ceil or {}).get("roofs") or []
    try:
        return roofline.parse_roofs({"roofs": list(entries)})
    except InputError:
        out = []
        for e in entries:
            try:
                out += roofline.parse_roofs({"roofs": [e]})
            except InputError:
                continue
        return out


def pick_roof(
    roofs: list[roofline.Roof],
    kind: str,
    precision: str | None,
    sources: Sequence[str] = roofline.ROOF_SOURCES,
) -> roofline.Roof | None:
    """The roof the roofline stage uses (:func:`roofline.select_roof`), from ``sources`` only."""
    return roofline.select_roof(roofs, kind, precision, sources)


def ridge_for(env: str, precision: str, points: pd.DataFrame, ceilings: Mapping) -> dict | None:
    """The ridge the points used for (env, precision), else from ceilings (measured first)."""
    p = points[(points["env"] == env) & (points["precision"] == precision)] if len(points) else []
    if len(p) and p["ridge_ai"].notna().any():
        src = next((s for s in p["roof_source"] if s), None)
        return {
            "ridge": float(p["ridge_ai"].median()),
            "peak": float(p["peak_flops"].median()),
            "bw": float(p["peak_bandwidth"].median()),
            "source": src or "as in roofline_points.csv",
        }
    roofs = valid_roofs(ceilings.get(env))
    c = pick_roof(roofs, "compute", precision)
    m = pick_roof(roofs, "memory", None)
    if not c or not m:
        return None
    src = c.source if c.source == m.source else f"compute={c.source};memory={m.source}"
    return {
        "ridge": c.value / m.value,
        "peak": c.value,
        "bw": m.value,
        "source": src,
    }


def analytic_ai(cx: Mapping, precision: str | None = None) -> float:
    """Training FLOPs per step / analytic minimum DRAM bytes per step."""
    flops = (cx.get("flops") or {}).get("train_step")
    by = (cx.get("by_precision") or {}).get(precision or "fp32") or {}
    dram = by.get("min_dram_bytes_per_step") or cx.get("min_dram_bytes_per_step")
    if isnum(flops) and isnum(dram) and float(dram) > 0:
        return float(flops) / float(dram)
    return math.nan


def depthwise_share(cx: Mapping) -> float:
    by = (cx.get("flops") or {}).get("by_layer_type") or {}
    total = sum(layer_total(v) for v in by.values())
    dw = sum(layer_total(v) for k, v in by.items() if "depthwise" in str(k).lower())
    return dw / total if total > 0 else 0.0


def layer_total(v: Any) -> float:
    if isinstance(v, Mapping):
        return sum(float(x) for x in (v.get("forward"), v.get("backward")) if isnum(x))
    return float(v) if isnum(v) else 0.0


def env_device(env: str, config: Mapping | None, env_infos: Mapping) -> str:
    """The device the env's step ran on: its fingerprint's (auto resolved), else its config's."""
    info = env_infos.get(env) or {}
    dev = info.get("device") or env_matrix(config, env)["device"] or "auto"
    return str(dev)


def env_devices(metrics: pd.DataFrame) -> dict[str, str]:
    """Each env's device as its runs recorded it (cuda, cpu, mps)."""
    m = metrics.dropna(subset=["device"]) if len(metrics) else metrics
    return {str(e): str(d) for e, d in zip(m.get("env", []), m.get("device", []), strict=True)}


def env_threads(env: str, config: Mapping | None, metrics: pd.DataFrame | None = None):
    """Threads per process the env's runs recorded, else its config's (None: neither)."""
    if metrics is not None and len(metrics) and "threads" in metrics:
        recorded = pd.to_numeric(metrics.loc[metrics["env"] == env, "threads"], errors="coerce")
        recorded = recorded.dropna()
        if len(recorded):
            return int(recorded.iloc[0])
    t = env_matrix(config, env)["threads"]
    return int(t) if isnum(t) else None


def env_hw(env: str, env_infos: Mapping, ceilings: Mapping | None = None) -> str:
    info = env_infos.get(env) or {}
    gpus = info.get("gpus") or []
    if gpus:
        return ", ".join(str(g.get("name")) for g in gpus if isinstance(g, Mapping))
    if info.get("cpu_model"):
        return str(info["cpu_model"])
    return str(((ceilings or {}).get(env) or {}).get("device_name") or "unknown hardware")


def label(r: Mapping) -> str:
    return f"{r['env']} · {r['model']} · {r['precision']} · bs {int(r['batch_size'])}"


def measured_here(env: str, run: Mapping, config: Mapping | None, env_infos: Mapping) -> bool:
    """Whether this machine measures ``env``: the matrix's flag, else the config, else env_info."""
    flag = run.get("measured_here")
    if isinstance(flag, bool):
        return flag
    measure = (config or {}).get("measure_envs")
    if isinstance(measure, (list, tuple)):
        return env in measure
    return not env_infos or env in env_infos


def find_row(df: pd.DataFrame, r: Mapping, keys: Sequence[str] = GROUP) -> dict | None:
    """The row of ``df`` with ``r``'s values in ``keys`` (as a dict), or None."""
    if not len(df):
        return None
    sel = np.ones(len(df), dtype=bool)
    for k in keys:
        sel &= (df[k] == r[k]).to_numpy()
    return df[sel].iloc[0].to_dict() if sel.any() else None


def records(df: pd.DataFrame) -> list[dict]:
    """The rows of ``df`` as plain dicts."""
    return [r.to_dict() for _, r in df.iterrows()]
