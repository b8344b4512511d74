"""The analysis section's comparisons: at a glance, across models, environments, precisions
and batch sizes, and the noisy configurations. Each function returns plain data that
templates/parts/compare.html words."""

from __future__ import annotations

import math
from collections.abc import Mapping

import pandas as pd

from dnnroofline.formatting import isnum
from dnnroofline.measure import contention
from dnnroofline.perfmodel.levers import short_lever
from dnnroofline.report import data
from dnnroofline.study.precisions import PRECISIONS


def baseline_env(config: Mapping | None, tp: pd.DataFrame) -> tuple[str | None, str | None]:
    """(baseline, note): ``report.baseline_env`` if it has results, else the first env that does."""
    have = set(tp["env"]) if len(tp) else set()
    order = [e for e in data.env_order(config, tp) if e in have]
    if not order:
        return None, None
    want = ((config or {}).get("report") or {}).get("baseline_env")
    if want and want in have:
        return str(want), None
    if want:
        return order[0], (
            f"report.baseline_env {want!r} has no successful runs; speedups are against "
            f"{order[0]} instead."
        )
    return order[0], None


def at_a_glance(pts: pd.DataFrame, tp: pd.DataFrame, devices: Mapping[str, str]) -> list[dict]:
    """One row per point: the five questions (speed, bound, distance from roof, lever).
    ``devices``: each env's device (:func:`data.env_devices`)."""
    out = []
    for r in data.records(pts):
        att, roof = r["attained_flops"], r["roof_flops"]
        out.append(
            {
                **r,
                "tp": data.find_row(tp, r),
                "headroom": roof / att if isnum(roof) and isnum(att) and att > 0 else None,
                "has_range": isnum(r.get("ai_low")) and isnum(r.get("ai_high")),
                "lever": short_lever(
                    r["bound_"], r["eff"], r["above"], devices.get(r["env"]), r["precision"]
                ),
            }
        )
    return out


def _ranked(g: pd.DataFrame, name: str) -> tuple[dict, list[dict]]:
    """The fastest row of ``g`` and how many times faster it is than each other one."""
    g = g.sort_values("ips_median", ascending=False)
    top = g.iloc[0].to_dict()
    rest = [
        {"name": r[name], "ratio": top["ips_median"] / r["ips_median"], "ips": r["ips_median"]}
        for r in data.records(g.iloc[1:])
        if r["ips_median"] > 0
    ]
    return top, rest


def across_models(tp: pd.DataFrame, pts: pd.DataFrame) -> list[dict]:
    out = []
    for (env, prec, b), g in tp.groupby(["env", "precision", "batch_size"], sort=True):
        if len(g) < 2:
            continue
        top, rest = _ranked(g, "model")
        p = pts[(pts["env"] == env) & (pts["precision"] == prec) & (pts["batch_size"] == b)]
        lead = None
        if len(p) > 1:
            lead = p.sort_values("attained_flops", ascending=False).iloc[0].to_dict()
        out.append(
            {"env": env, "precision": prec, "batch": int(b), "top": top, "rest": rest, "lead": lead}
        )
    return out


def across_envs(tp: pd.DataFrame) -> list[dict]:
    out = []
    for (model, prec, b), g in tp.groupby(["model", "precision", "batch_size"], sort=True):
        if g["env"].nunique() < 2:
            continue
        top, rest = _ranked(g, "env")
        out.append({"model": model, "precision": prec, "batch": int(b), "top": top, "rest": rest})
    return out


def fastest_env(tp: pd.DataFrame, config: Mapping | None) -> list[dict]:
    """Per model: the fastest env at its best configuration, and by how much."""
    out = []
    envs = data.env_order(config, tp)
    for model, g in tp.groupby("model", sort=True):
        best = [
            ge.loc[ge["ips_median"].idxmax()].to_dict()
            for env in envs
            for ge in [g[g["env"] == env]]
            if len(ge)
        ]
        best.sort(key=lambda r: -r["ips_median"])
        top = best[0]
        rest = [
            {**r, "ratio": top["ips_median"] / r["ips_median"]}
            for r in best[1:]
            if r["ips_median"] > 0
        ]
        out.append({"model": model, "top": top, "rest": rest, "only": len(best) == 1})
    return out


def speedups(tp: pd.DataFrame, pts: pd.DataFrame, config: Mapping | None) -> dict:
    """Throughput per (model, precision, batch) and env, with speedups against the baseline."""
    base, note = baseline_env(config, tp)
    envs = [e for e in data.env_order(config, tp) if e in set(tp["env"])]
    others = [e for e in envs if e != base]
    rows = []
    for (model, prec, b), _g in tp.groupby(["model", "precision", "batch_size"], sort=True):
        key = {"model": model, "precision": prec, "batch_size": b}
        cells = {env: data.find_row(tp, {**key, "env": env}) for env in envs}
        ref = cells.get(base)
        rows.append(
            {
                "model": model,
                "precision": prec,
                "batch": int(b),
                "ips": [cells[e] for e in envs],
                "speedup": [
                    cells[e]["ips_median"] / ref["ips_median"]
                    if cells[e] and ref and ref["ips_median"] > 0
                    else None
                    for e in others
                ],
                "points": [data.find_row(pts, {**key, "env": e}) for e in envs],
            }
        )
    return {"base": base, "note": note, "envs": envs, "others": others, "rows": rows}


def precision_effect(tp: pd.DataFrame) -> dict:
    """fp32 vs tf32 vs amp vs bf16 on the same env, model and batch."""
    order = {p: i for i, p in enumerate(PRECISIONS)}
    precs = sorted(set(tp["precision"]) if len(tp) else set(), key=lambda p: order.get(p, 9))
    rows = []
    for (env, model, b), g in tp.groupby(["env", "model", "batch_size"], sort=True):
        if g["precision"].nunique() < 2:
            continue
        by = {r["precision"]: r for r in data.records(g)}
        ref = "fp32" if "fp32" in by else sorted(by, key=lambda p: order.get(p, 9))[0]
        ref_ips = by[ref]["ips_median"]
        best = max(by.values(), key=lambda r: r["ips_median"])
        rows.append(
            {
                "env": env,
                "model": model,
                "batch": int(b),
                "ref": ref,
                "cells": [
                    None
                    if p not in by
                    else {
                        "ips": by[p]["ips_median"],
                        "ratio": by[p]["ips_median"] / ref_ips
                        if p != ref and ref_ips > 0
                        else None,
                    }
                    for p in precs
                ],
                "best": best["precision"] if best["precision"] != ref and ref_ips > 0 else None,
                "best_ratio": best["ips_median"] / ref_ips if ref_ips > 0 else None,
            }
        )
    return {"precisions": precs, "rows": rows}


def batch_scaling(tp: pd.DataFrame, pts: pd.DataFrame) -> dict:
    """Per (env, model, precision): throughput from the smallest to the largest batch."""
    batches = sorted({int(b) for b in tp["batch_size"]}) if len(tp) else []
    rows = []
    for (env, model, prec), g in tp.groupby(["env", "model", "precision"], sort=True):
        if g["batch_size"].nunique() < 2:
            continue
        g = g.sort_values("batch_size")
        lo, hi = g.iloc[0].to_dict(), g.iloc[-1].to_dict()
        by = {int(r["batch_size"]): r["ips_median"] for r in data.records(g)}
        p = pts[(pts["env"] == env) & (pts["model"] == model) & (pts["precision"] == prec)]
        p = p.sort_values("batch_size")
        rows.append(
            {
                "env": env,
                "model": model,
                "precision": prec,
                "lo": lo,
                "hi": hi,
                "gain": hi["ips_median"] / lo["ips_median"] - 1
                if lo["ips_median"] > 0
                else math.nan,
                "eff": (p["eff"].iloc[0], p["eff"].iloc[-1]) if len(p) > 1 else None,
                "by_batch": [by.get(b) for b in batches],
                "largest_over_smallest": by[max(by)] / by[min(by)] if by[min(by)] > 0 else None,
            }
        )
    return {"batches": batches, "rows": rows}


def noisy(tp: pd.DataFrame) -> dict:
    """The noisy configurations, each with the CPUs other processes took while it was
    timed when that was enough to matter (``contended``; else None)."""
    rows = data.records(tp[tp["noisy"]]) if len(tp) else []
    for r in rows:
        r["label"] = data.label(r)
        taken = r.get("contention_cpus_max")
        r["contended"] = taken if isnum(taken) and taken >= contention.CONTENDED_CPUS else None
    return {"n": len(tp), "rows": rows}


def facts(
    tp: pd.DataFrame, pts: pd.DataFrame, config: Mapping | None, devices: Mapping[str, str]
) -> dict:
    """Every comparison of the analysis section."""
    return {
        "glance": at_a_glance(pts, tp, devices),
        "across_models": across_models(tp, pts),
        "fastest_env": fastest_env(tp, config),
        "across_envs": across_envs(tp) if tp["env"].nunique() > 1 else None,
        "speedups": speedups(tp, pts, config) if len(tp) else None,
        "precision": precision_effect(tp),
        "batch": batch_scaling(tp, pts),
        "noisy": noisy(tp),
    }
