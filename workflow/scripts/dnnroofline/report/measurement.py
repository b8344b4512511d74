"""The measurement section: how the timing was done, throughput per configuration (ok runs
only), GPU clocks while timing, and the step-time distribution of every run."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from dnnroofline.formatting import isnum
from dnnroofline.report import data
from dnnroofline.report.render import section


def facts(
    config: Mapping,
    env_infos: Mapping | Sequence | None,
    metrics: pd.DataFrame | None,
    runs: Sequence[Mapping] | None = None,
) -> dict:
    """How the timing was done, then throughput per configuration (ok runs only)."""
    env_infos = data.keyed(env_infos)
    m = data.prepare_metrics(metrics)
    envs = list(data.envs_cfg(config)) or sorted({e for e in m["env"] if e})
    devs = {env: data.env_device(env, config, env_infos) for env in envs}
    tp = data.throughput_table(m)
    return {
        "study": data.study_cfg(config),
        "cuda_envs": [e for e, d in devs.items() if d == "cuda"],
        "threads": [(env, data.env_threads(env, config, m)) for env in envs],
        "throughput": [
            {"env": env, "precision": prec, "device": devs.get(env, ""), "rows": data.records(g)}
            for (env, prec), g in tp.groupby(["env", "precision"], sort=True)
        ],
        "n_failed": len(data.failed_runs(m)),
        "other_steps": other_step_counts(data.study_cfg(config), runs),
        "clocks": gpu_clocks(runs),
        "distribution": step_distribution(m, runs),
    }


def other_step_counts(study: Mapping, runs: Sequence[Mapping] | None) -> list[dict]:
    """The envs whose runs took other warm-up or timed step counts than this config's
    study (results copied from a machine whose config said otherwise), with theirs."""
    want = (study.get("warmup_iters"), study.get("iters"))
    seen: dict[str, set] = {}
    for run in runs or []:
        cfg = run.get("config") or {}
        steps = (cfg.get("warmup_iters"), cfg.get("iters"))
        if run.get("env") and None not in steps and steps != want:
            seen.setdefault(str(run["env"]), set()).add(steps)
    return [{"env": env, "steps": sorted(steps)} for env, steps in sorted(seen.items())]


def gpu_clocks(runs: Sequence[Mapping] | None) -> list[dict]:
    """Per sampled CUDA run: median clocks, power and temperature, and whether it throttled."""
    sampled = [r for r in runs or [] if isinstance(r.get("gpu_telemetry"), Mapping)]
    out = []
    for r in sorted(sampled, key=lambda x: str(x.get("run_id"))):
        t = r["gpu_telemetry"]

        def med(key, t=t):
            v = t.get(key)
            return v["median"] if isinstance(v, Mapping) else None

        out.append(
            {
                "run_id": r.get("run_id") or "?",
                "available": bool(t.get("available")),
                "reason": t.get("reason") or "?",
                "sm": med("sm_mhz"),
                "sm_max": (t.get("limits") or {}).get("sm_max_mhz"),
                "mem": med("mem_mhz"),
                "power": med("power_w"),
                "temperature": med("temperature_c"),
                "throttled": bool(t.get("available") and t.get("throttled")),
                "reasons": list(t.get("limiting_reasons") or []),
                "fraction": t.get("throttled_fraction"),
            }
        )
    return out


def box(values: Sequence[float], lo: float, hi: float, w: int = 180, h: int = 16) -> dict | None:
    """A tiny horizontal box plot (Tukey whiskers, outliers) on the scale lo..hi, as geometry."""
    v = np.asarray([x for x in values if isnum(x)], dtype=float)
    if not len(v) or not (hi > lo):
        return None
    q1, med, q3 = np.percentile(v, [25, 50, 75])
    iqr = q3 - q1
    inl = v[(v >= q1 - 1.5 * iqr) & (v <= q3 + 1.5 * iqr)]
    wlo, whi = (inl.min(), inl.max()) if len(inl) else (q1, q3)
    out = v[(v < q1 - 1.5 * iqr) | (v > q3 + 1.5 * iqr)]

    def x(t):
        return 2 + (float(t) - lo) / (hi - lo) * (w - 4)

    return {
        "w": w,
        "h": h,
        "y": h / 2,
        "median": float(med),
        "q1": float(q1),
        "q3": float(q3),
        "x_whiskers": (x(wlo), x(whi)),
        "x_box": x(q1),
        "box_width": max(x(q3) - x(q1), 1),
        "x_median": x(med),
        "x_outliers": [x(t) for t in out],
    }


def run_step_stats(run: Mapping) -> dict | None:
    """Per-step time statistics of one run JSON (None for a failed run)."""
    st = run.get("step_time_s") or {}
    vals = [float(x) for x in st.get("all") or [] if isnum(x)]
    if not vals:
        return None
    v = np.asarray(vals)
    q1, q3 = np.percentile(v, [25, 75])
    iqr = q3 - q1
    n_out = int(((v < q1 - 1.5 * iqr) | (v > q3 + 1.5 * iqr)).sum())
    cv = float(v.std(ddof=1) / v.mean()) if len(v) > 1 and v.mean() > 0 else math.nan
    return {
        "all": vals,
        "n": len(v),
        "min": float(v.min()),
        "p5": float(np.percentile(v, 5)),
        "median": float(np.median(v)),
        "p95": float(np.percentile(v, 95)),
        "max": float(v.max()),
        "cv": cv,
        "outliers": n_out,
    }


def step_distribution(metrics: pd.DataFrame, runs: Sequence[Mapping] | None) -> dict | None:
    """Per ok run: its step-time statistics (from the run JSON, else the ledger) and box plot.

    Runs of one configuration share the box plots' scale. None without ok runs.
    """
    ok = data.ok_runs(metrics)
    if ok.empty:
        return None
    by_id = {
        str(run["run_id"]): run
        for run in runs or []
        if isinstance(run, Mapping) and run.get("run_id")
    }
    rows, n_out = [], 0
    for _key, g in ok.sort_values("run_id").groupby(data.GROUP, sort=True):
        stats = {rid: run_step_stats(by_id[rid]) if rid in by_id else None for rid in g["run_id"]}
        vals = [x for s in stats.values() if s for x in s["all"]]
        lo, hi = (min(vals), max(vals)) if vals else (math.nan, math.nan)
        for _, r in g.iterrows():
            s = stats.get(r["run_id"])
            if s:
                n_out += s["outliers"]
                row = {**s, "box": box(s["all"], lo, hi)}
            else:  # no run JSON given: the ledger's summary
                row = {
                    "n": None,
                    "p5": r["step_p5_s"],
                    "median": r["step_median_s"],
                    "p95": r["step_p95_s"],
                    "cv": r["step_cv"],
                }
            row["run_id"] = r["run_id"]
            row["noisy"] = isnum(row["cv"]) and row["cv"] > data.NOISY_CV
            rows.append(row)
    return {"rows": rows, "n_outliers": n_out}


measurement_section = section("measurement.html", facts)
