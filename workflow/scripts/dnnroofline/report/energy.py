"""The energy section: per env where its joules came from (NVML, RAPL) or why it has none,
each point's images/s beside its joules per image and per step, power and SM clock, the
energy costs fitted to the env's microbenchmarks (docs/contracts.md), the energy roofline
and, where the model predicted them, the predicted against the measured joules per image.

Inputs: metrics.csv (its energy columns, read as they are: ``energy_source`` is text),
the run JSONs' ``energy`` records (the reason a run could not read a counter, the SM
clock), the ceilings by env (``energy``), prediction_check.csv and the energy
roofline's SVG text.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from dnnroofline.aggregate.energy_points import env_energy
from dnnroofline.aggregate.metrics import GROUP_KEYS, group_nproc, images_per_s_at
from dnnroofline.formatting import finite_number, missing
from dnnroofline.perfmodel.scoring import error_pct
from dnnroofline.report import data
from dnnroofline.report.perfmodel import parity_uri
from dnnroofline.report.render import section

#: prediction_check.csv's energy columns (docs/contracts.md); absent before the model
#: predicted joules, and then the page shows no prediction.
PREDICTION_COLUMNS = ("predicted_joules_per_image", "measured_joules_per_image")
ERROR_COLUMN = "joules_per_image_error_pct"


def energy_by_run(runs: Sequence[Mapping] | None) -> dict[str, dict]:
    """``{run_id: energy record}`` of the run JSONs that have one."""
    return {
        str(r["run_id"]): dict(r["energy"])
        for r in runs or []
        if isinstance(r, Mapping) and r.get("run_id") and isinstance(r.get("energy"), Mapping)
    }


def _median(values) -> float | None:
    vals = [v for v in (finite_number(x) for x in values) if v is not None]
    return float(np.median(vals)) if vals else None


def point_rows(env: str, metrics: pd.DataFrame, energy: Mapping[str, Mapping]) -> list[dict]:
    """One row per point of ``env`` with joules: images/s, and over its ok runs the
    median J/image, J/step, mean power and SM clock and the highest peak power."""
    if "joules_per_step" not in metrics:
        return []
    m = metrics[metrics["env"] == env]
    m = m[(m["status"].astype(str).str.lower() == "ok")]
    m = m[pd.to_numeric(m["joules_per_step"], errors="coerce") > 0]
    rows = []
    for key, g in m.groupby(GROUP_KEYS, sort=True):
        step = float(pd.to_numeric(g["step_median_s"], errors="coerce").median())
        recs = [energy.get(str(rid), {}) for rid in g["run_id"]]
        peaks = [v for v in map(finite_number, g.get("peak_power_w", [])) if v is not None]
        rows.append(
            {
                **dict(zip(GROUP_KEYS, key, strict=True)),
                "runs": len(g),
                "images_per_s": images_per_s_at(step, int(key[3]), group_nproc(g)),
                "joules_per_image": _median(g.get("joules_per_image", [])),
                "joules_per_step": _median(g["joules_per_step"]),
                "mean_power_w": _median(g.get("mean_power_w", [])),
                "peak_power_w": max(peaks) if peaks else None,
                "sm_clock_mhz": _median(r.get("sm_clock_mhz") for r in recs),
            }
        )
    return rows


def run_sources(env: str, metrics: pd.DataFrame, energy: Mapping[str, Mapping]) -> dict:
    """Where the env's runs' joules came from (``sources``: source -> counter) and why
    some could not read one (``reasons``), from the run JSONs, else metrics.csv."""
    ids = [str(r) for r in metrics.loc[metrics["env"] == env, "run_id"]] if len(metrics) else []
    recs = [energy[i] for i in ids if i in energy]
    sources = {str(r["source"]): r.get("counter") for r in recs if r.get("available")}
    reasons = sorted({str(r.get("reason")) for r in recs if not r.get("available")})
    if not recs and "energy_source" in metrics:
        col = metrics.loc[metrics["env"] == env, "energy_source"]
        named = {str(s) for s in col if not missing(s) and s}
        sources = {s: None for s in sorted(named - {"unavailable"})}
        reasons = ["unavailable (metrics.csv names no reason)"] if "unavailable" in named else []
    return {"sources": sources, "reasons": reasons}


def _costs(energy: Mapping) -> dict | None:
    """The fitted costs as the page prints them (pJ), None where none were fitted."""
    costs = energy.get("costs")
    if not isinstance(costs, Mapping):
        return None
    per_flop = costs.get("pj_per_flop") if isinstance(costs.get("pj_per_flop"), Mapping) else {}
    return {
        "pj_per_flop": [(str(p), finite_number(v)) for p, v in sorted(per_flop.items())],
        "pj_per_byte": finite_number(costs.get("pj_per_byte")),
        "static_power_w": finite_number(costs.get("static_power_w")),
        "method": costs.get("method"),
        "max_residual_pct": finite_number(costs.get("max_residual_pct")),
    }


def ceilings_energy(ceil: Mapping | None) -> dict | None:
    """An env's ceilings' energy: source, window, costs and kernels (None: no record)."""
    energy = (ceil or {}).get("energy")
    if not isinstance(energy, Mapping) or not energy.get("available"):
        return None
    kernels = [dict(k) for k in energy.get("kernels") or [] if isinstance(k, Mapping)]
    return {
        "source": energy.get("source"),
        "window_s": finite_number(energy.get("window_s")),
        "costs": _costs(energy),
        "costs_reason": energy.get("costs_reason"),
        "kernels": kernels,
    }


def prediction_rows(check: pd.DataFrame | None) -> list[dict]:
    """prediction_check.csv's rows with both a predicted and a measured J/image."""
    if check is None or not all(c in check for c in PREDICTION_COLUMNS):
        return []
    rows = []
    for r in check.to_dict("records"):
        pred, meas = (finite_number(r.get(c)) for c in PREDICTION_COLUMNS)
        if pred is None or meas is None:
            continue
        err = finite_number(r.get(ERROR_COLUMN))
        rows.append({**r, "error_pct": err if err is not None else error_pct(pred, meas)})
    order = ("env", "model", "precision", "batch", "method")
    return sorted(rows, key=lambda r: tuple(str(r.get(k)) for k in order))


def facts(
    metrics: pd.DataFrame | None,
    ceilings: Mapping | Sequence | None,
    runs: Sequence[Mapping] | None = None,
    prediction_check: pd.DataFrame | None = None,
    energy_svg: str | None = None,
) -> dict:
    """Per env: where its joules came from or why none, its points' energy and its
    ceilings' fitted costs; the energy roofline; the predicted J/image beside the measured."""
    ceilings = data.keyed(ceilings)
    m = metrics if metrics is not None and "env" in metrics else None
    m = pd.DataFrame(columns=["env", "run_id", "status"]) if m is None else m
    energy = energy_by_run(runs)
    envs = []
    for e in env_energy(ceilings, m):
        envs.append(
            {
                "env": e.env,
                "runs": run_sources(e.env, m, energy),
                "points": point_rows(e.env, m, energy),
                "ceilings": ceilings_energy(ceilings.get(e.env)),
                "reason": e.reason,
                "runs_reason": e.runs_reason,
            }
        )
    return {
        "envs": envs,
        "has_energy": any(e["points"] or e["ceilings"] for e in envs),
        "figure": parity_uri(energy_svg),  # any SVG as a data: URI
        "predictions": prediction_rows(prediction_check),
    }


energy_section = section("energy.html", facts)
