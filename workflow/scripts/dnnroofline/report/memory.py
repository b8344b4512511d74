"""The analysis section's memory footprint: estimated and measured peak memory of each
configuration against its device's, and the largest batch that would fit."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from dnnroofline.aggregate.metrics import group_nproc
from dnnroofline.formatting import isnum
from dnnroofline.report import data


def _device_capacity(env: str, info: Mapping) -> tuple[float, str]:
    """(bytes, what) of the memory a run of ``env`` must fit in."""
    gpus = [g for g in info.get("gpus") or [] if isinstance(g, Mapping)]
    if str(info.get("device")) == "cuda" and gpus and isnum(gpus[0].get("memory_bytes")):
        return float(gpus[0]["memory_bytes"]), f"GPU memory ({gpus[0].get('name')})"
    if isnum(info.get("ram_bytes")):
        return float(info["ram_bytes"]), "RAM"
    return math.nan, "unknown"


def _fit_largest_batch(batches: Sequence[float], peaks: Sequence[float], capacity: float):
    """Largest batch under ``capacity`` on the line peak = a + b·batch (None if not growing)."""
    pairs = [(float(b), float(p)) for b, p in zip(batches, peaks, strict=True) if isnum(p)]
    if len({b for b, _ in pairs}) < 2 or not isnum(capacity):
        return None
    slope, icpt = np.polyfit([b for b, _ in pairs], [p for _, p in pairs], 1)
    if slope <= 0:
        return None
    return max(0, int((capacity - icpt) // slope))


def _estimated_peak(c: Mapping, precision: str) -> float:
    by = (c.get("by_precision") or {}).get(precision) or {}
    v = by.get("peak_memory_bytes") if isinstance(by, Mapping) else None
    v = v if isnum(v) else c.get("peak_memory_bytes")
    return float(v) if isnum(v) else math.nan


def facts(config: Mapping | None, metrics: pd.DataFrame, cx: Mapping, env_infos: Mapping) -> dict:
    """Per (env, model, precision, batch): estimated and measured peak against the device's
    memory; per (env, model, precision): the largest batch that fits. On CPU the estimate
    counts every data-parallel process (they share the RAM; the measured peak is their sum);
    on CUDA each process has its own GPU."""
    m = data.prepare_metrics(metrics)
    keys = m.dropna(subset=["batch_size"]).groupby(data.GROUP, sort=True) if len(m) else []
    rows, fits = [], {}
    for (env, model, prec, b), g in keys:
        info = env_infos.get(env) or {}
        cap, what = _device_capacity(env, info)
        c = cx.get((model, int(b))) or {}
        est = _estimated_peak(c, prec) if c else math.nan
        dev = info.get("device")
        if not dev and g["device"].notna().any():
            dev = g["device"].dropna().iloc[0]
        ok = g[g["status"] == "ok"]
        on_gpu = str(dev or "") == "cuda"
        if not on_gpu:  # the estimate is one process's; data-parallel ranks share the RAM
            est *= group_nproc(g)
        meas = ok["peak_device_memory_bytes" if on_gpu else "max_rss_bytes"].max()
        n_oom = int((g["status"] == "oom").sum())
        rows.append(
            {
                "env": env,
                "model": model,
                "precision": prec,
                "batch": int(b),
                "estimated": est,
                "measured": meas,
                "on_gpu": on_gpu,
                "capacity": cap,
                "capacity_of": what,
                "share": (max(meas, est) if isnum(meas) else est) / cap if isnum(cap) else None,
                "n_oom": n_oom,
                "n_ok": len(ok),
            }
        )
        f = fits.setdefault((env, model, prec), {"b": [], "est": [], "meas": [], "oom": []})
        f["b"].append(float(b))
        f["est"].append(est)
        f["meas"].append(float(meas) if isnum(meas) else math.nan)
        if n_oom:
            f["oom"].append(int(b))
    largest = []
    for (env, model, prec), f in fits.items():
        cap, what = _device_capacity(env, env_infos.get(env) or {})
        if not isnum(cap):
            continue
        fit = {
            "env": env,
            "model": model,
            "precision": prec,
            "capacity": cap,
            "capacity_of": what,
            "by_estimate": _fit_largest_batch(f["b"], f["est"], cap),
            "by_measured": _fit_largest_batch(f["b"], f["meas"], cap),
            "oom": min(f["oom"]) if f["oom"] else None,
        }
        if any(fit[k] is not None for k in ("by_estimate", "by_measured", "oom")):
            largest.append(fit)
    return {"rows": rows, "largest": largest}
