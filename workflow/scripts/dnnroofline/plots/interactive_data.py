"""The interactive roofline's rows: the study's points with what their tooltips show,
and the profiled kernels (:mod:`dnnroofline.plots.interactive` charts them).

Pure logic: roofline_points rows and parsed ncu JSONs in, DataFrames out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import pandas as pd

from dnnroofline.aggregate.points import plottable_points
from dnnroofline.formatting import isnum, to_bool
from dnnroofline.perfmodel.levers import short_lever

#: Kernels with fewer FLOPs than this are data movement (copies, fills): no AI to plot.
MIN_KERNEL_FLOP = 1.0


def point_frame(
    points: pd.DataFrame, combined: bool, devices: Mapping[str, str] | None = None
) -> pd.DataFrame:
    """Plottable points with the fields the tooltips show (``devices``: each env's device,
    which words the lever)."""
    pts = plottable_points(points.copy()) if len(points) else points.copy()
    out = pd.DataFrame(
        {
            "env": pts.get("env", pd.Series(dtype=str)).astype(str),
            "model": pts.get("model", pd.Series(dtype=str)).astype(str),
            "precision": pts.get("precision", pd.Series(dtype=str)).astype(str),
            "batch": pts.get("batch_size", pd.Series(dtype=float)).astype(int),
        }
    )
    if not len(pts):
        return out.assign(ai=[], flops=[])
    out["ai"] = pts["ai"].astype(float)
    out["ai_source"] = pts["ai_source"].fillna("").astype(str)
    for col in ("ai_low", "ai_high"):  # the analytic AI range (NaN where unknown)
        out[col] = pts[col].astype(float) if col in pts else math.nan
    out["flops"] = pts["attained_flops"].astype(float)
    out["gflops"] = out["flops"] / 1e9
    out["roof_gflops"] = pts["roof_flops"].astype(float) / 1e9
    out["roof_source"] = pts["roof_source"].fillna("").astype(str)
    out["ridge_ai"] = pts["ridge_ai"].astype(float)
    eff = pts["attained_flops"].astype(float) / pts["roof_flops"].astype(float)
    out["efficiency"] = eff.where(np.isfinite(eff), pts["efficiency"].astype(float))
    out["bound"] = pts["bound"].fillna("").astype(str)
    out["images_per_s"] = pts["images_per_s"].astype(float)
    out["above_roof"] = [
        to_bool(v) or (isnum(e) and e > 1 + 1e-9)
        for v, e in zip(pts["above_roof"], out["efficiency"], strict=True)
    ]
    devices = devices or {}
    out["lever"] = [
        short_lever(b, e, a, devices.get(env), prec)
        for b, e, a, env, prec in zip(
            out["bound"],
            out["efficiency"],
            out["above_roof"],
            out["env"],
            out["precision"],
            strict=True,
        )
    ]
    out["series"] = (out["env"] + " · " + out["precision"]) if combined else out["precision"]
    return out.sort_values(["env", "model", "precision", "batch"]).reset_index(drop=True)


def kernel_frame(
    ncu_by_key: Mapping[tuple, Mapping] | None, combined: bool, max_kernels: int | None = None
) -> pd.DataFrame:
    """One row per profiled kernel with FLOPs, DRAM bytes and time (others are skipped).

    ``ncu_by_key`` maps ``(env, model, precision, batch)`` to a parsed ncu JSON.
    The frame's ``attrs["skipped"]`` counts kernels without FLOPs, bytes or time.
    With ``max_kernels`` only the longest-running kernels are kept;
    ``attrs["dropped"]`` counts the others and ``attrs["kept_time_share"]`` is the
    share of the drawable kernels' time that the kept ones cover.
    """
    rows, skipped = [], 0
    for key, doc in sorted((ncu_by_key or {}).items()):
        env, model, prec, batch = key
        kernels = (doc or {}).get("kernels") or []
        total_t = sum(float(k.get("time_s") or 0) for k in kernels if isnum(k.get("time_s")))
        for k in kernels:
            flop = (k.get("flop") or {}).get("total")
            dram = (k.get("bytes") or {}).get("dram")
            t = k.get("time_s")
            if not (isnum(flop) and isnum(dram) and isnum(t)):
                skipped += 1
                continue
            flop, dram, t = float(flop), float(dram), float(t)
            if flop < MIN_KERNEL_FLOP or dram <= 0 or t <= 0:
                skipped += 1
                continue
            name = str(k.get("name") or k.get("id") or "?")
            rows.append(
                {
                    "env": env,
                    "model": model,
                    "precision": prec,
                    "batch": int(batch),
                    "kernel": name if len(name) <= 90 else name[:87] + "…",
                    "ai": flop / dram,
                    "flops": flop / t,
                    "gflops": flop / t / 1e9,
                    "time_us": t * 1e6,
                    "time_share": t / total_t if total_t > 0 else math.nan,
                    "series": f"{env} · {prec}" if combined else prec,
                }
            )
    df = pd.DataFrame(
        rows,
        columns=[
            "env",
            "model",
            "precision",
            "batch",
            "kernel",
            "ai",
            "flops",
            "gflops",
            "time_us",
            "time_share",
            "series",
        ],
    )
    df.attrs["skipped"] = skipped
    df.attrs["dropped"] = 0
    df.attrs["kept_time_share"] = 1.0
    if max_kernels is not None and len(df) > max_kernels:
        total = df["time_us"].sum()
        kept = df.sort_values("time_us", ascending=False, kind="stable").head(max_kernels)
        kept = kept.sort_index().reset_index(drop=True)
        kept.attrs.update(
            skipped=skipped,
            dropped=len(df) - len(kept),
            kept_time_share=float(kept["time_us"].sum() / total) if total > 0 else 1.0,
        )
        return kept
    return df
