"""The analysis section: a summary, the comparisons (compare.py), the memory footprint
(memory.py), what bounds each point and what would move it, and the failed and missing runs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from dnnroofline.formatting import isnum
from dnnroofline.model.levers import LOW_EFFICIENCY
from dnnroofline.report import compare, data, env_compare, memory
from dnnroofline.report.render import section
from dnnroofline.study.precisions import HALF_PRECISIONS, PRECISIONS, TENSOR_PRECISIONS


def facts(
    config: Mapping,
    metrics: pd.DataFrame | None,
    points: pd.DataFrame | None,
    env_infos: Mapping | Sequence | None = None,
    complexity: Any = None,
    ceilings: Mapping | Sequence | None = None,
    expected_runs: Any = None,
    runs: Sequence[Mapping] | None = None,
) -> dict:
    """Per-point diagnosis, cross-model/env/batch comparisons (compiled and data-parallel
    envs against their counterparts included), failed and missing runs."""
    m, pts, cx, env_infos, ceilings = data.prepared(
        metrics, points, complexity, env_infos, ceilings
    )
    tp = data.throughput_table(m)
    expected = data.expected_run_table(expected_runs, m)
    failed = data.failed_runs(m).sort_values("run_id", na_position="last")
    return {
        "summary": summary(pts),
        **compare.facts(tp, pts, config, data.env_devices(m)),
        "compiled": env_compare.compile_facts(config, runs, env_infos),
        "scaling": env_compare.scaling_facts(config, tp, env_infos, m),
        "memory": memory.facts(config, m, cx, env_infos),
        "points": [point(r, pts, tp, cx, config, env_infos, ceilings) for r in data.records(pts)],
        "failed": data.records(failed),
        "n_expected": len(expected),
        "missing": [
            {**e, "here": data.measured_here(e.get("env") or "?", e, config, env_infos)}
            | {"device": data.env_matrix(config, e.get("env") or "?")["device"]}
            for e in data.missing_runs(expected, m)
        ],
    }


def summary(pts: pd.DataFrame) -> dict | None:
    """How many points are memory- or compute-bound, and the one closest to its roof."""
    if not len(pts):
        return None
    under = pts[~pts["above"].astype(bool) & pts["eff"].notna()]
    best = under.loc[under["eff"].idxmax()].to_dict() if len(under) else None
    return {
        "n": len(pts),
        "memory": int((pts["bound_"] == "memory").sum()),
        "compute": int((pts["bound_"] == "compute").sum()),
        "host": int((pts["bound_"] == "host").sum()),
        "low": int((pts["eff"] < LOW_EFFICIENCY).sum()),
        "best": dict(best, label=data.label(best)) if best else None,
        "median_eff": under["eff"].median(),
        "above": int(pts["above"].sum()),
    }


def other_precision_peaks(env: str, prec: str, ceilings: Mapping) -> list[dict]:
    """Compute peaks of the env's other precisions that are higher than ``prec``'s."""
    roofs = data.valid_roofs(ceilings.get(env))
    cur = data.pick_roof(roofs, "compute", prec)
    out = []
    for p in PRECISIONS:
        r = data.pick_roof(roofs, "compute", p) if p != prec else None
        if r and (not cur or r.value > cur.value * 1.05):
            out.append({"precision": p, "peak": r.value})
    return out


def _cc_float(s: str) -> float | None:
    try:
        return float(s)
    except ValueError:
        return None


def levers(r: Mapping, pts, tp_row, cx, config, env_infos, ceilings) -> list[dict]:
    """What would move a point, most pressing first: ``{"kind": ..., facts}`` each, worded by
    templates/parts/point.html."""
    env, model, prec, b = r["env"], r["model"], r["precision"], int(r["batch_size"])
    info = env_infos.get(env) or {}
    dev = data.env_device(env, config, env_infos)
    study = data.study_cfg(config)
    envcfg = data.envs_cfg(config).get(env, {})
    low_prec = prec in HALF_PRECISIONS
    eff = r["eff"]
    moves: list[dict] = []
    if r["above"]:
        moves.append({"kind": "fix_numbers", "roof_source": r["roof_source"]})
    if r["bound_"] == "host":  # the device waits on the host: no roof move helps first
        share = r.get("kernel_busy_share")
        moves.append({"kind": "host", "share": share, "cuda": dev == "cuda"})
    if r["bound_"] == "memory":
        same = pts[(pts["env"] == env) & (pts["model"] == model) & (pts["precision"] == prec)]
        same = same.sort_values("batch_size")
        span = len(same) > 1 and isnum(same["ai"].iloc[0]) and isnum(same["ai"].iloc[-1])
        moves.append(
            {
                "kind": "larger_batch",
                "span": [
                    {"ai": same["ai"].iloc[i], "batch": int(same["batch_size"].iloc[i])}
                    for i in (0, -1)
                ]
                if span
                else None,
            }
        )
        if not envcfg.get("compile", study.get("compile", False)):
            moves.append({"kind": "fusion"})
        if not envcfg.get("channels_last", study.get("channels_last", False)):
            moves.append({"kind": "channels_last"})
        if not low_prec:
            c = cx.get((model, b)) or {}
            by = c.get("by_precision") or {}
            lo = next((by[p] for p in HALF_PRECISIONS if isinstance(by.get(p), Mapping)), None)
            pair = (c.get("min_dram_bytes_per_step"), (lo or {}).get("min_dram_bytes_per_step"))
            counted = all(isnum(v) for v in pair)
            # where weights, gradients and optimizer state dominate (small batches) the
            # fp32 master copy makes amp/bf16 move more bytes, not fewer: no lever then
            if not counted or pair[1] < pair[0]:
                moves.append({"kind": "lower_precision", "bytes": pair if counted else None})
    elif r["bound_"] == "compute":
        if dev == "cuda":
            ccs = [
                str(g.get("compute_capability"))
                for g in info.get("gpus") or []
                if isinstance(g, Mapping) and g.get("compute_capability")
            ]
            cc = _cc_float(ccs[0]) if ccs else None
            if not low_prec and (cc is None or cc >= 8.0):
                # fp32 can move to tf32/bf16/amp tensor cores, tf32 to bf16/amp ones
                options = [p for p in TENSOR_PRECISIONS if p != prec]
                moves.append(
                    {
                        "kind": "tensor_cores",
                        "options": options,
                        "peaks": other_precision_peaks(env, prec, ceilings),
                    }
                )
            elif prec == "fp32" and cc is not None and cc >= 7.0:
                moves.append({"kind": "amp_only"})
            moves.append({"kind": "gpu_kernels"})
        else:
            threads = data.env_threads(env, config, env_infos)
            if isnum(threads):  # a data-parallel env's processes use threads each
                threads = int(threads) * env_compare.env_options(config, env)["nproc"]
            cores = info.get("cpu_cores_physical")
            if isnum(threads) and isnum(cores) and int(threads) < int(cores):
                moves.append({"kind": "more_threads", "threads": int(threads), "cores": int(cores)})
            elif threads is None and not cores:
                moves.append({"kind": "more_cores"})
            flags = {str(f).lower() for f in info.get("cpu_flags") or []}
            bf = sorted(flags & {"amx_bf16", "avx512_bf16", "amx_tile"})
            if not low_prec and bf:
                moves.append({"kind": "cpu_bf16", "flags": bf})
            elif not low_prec and flags:
                moves.append({"kind": "no_cpu_bf16"})
            moves.append({"kind": "cpu_kernels"})
    # no roof explains it: the first lever (a host-bound point has its own)
    if isnum(eff) and eff < LOW_EFFICIENCY and r["bound_"] != "host":
        first = 1 if r["above"] else 0
        moves.insert(first, {"kind": "overheads", "eff": eff, "cuda": dev == "cuda"})
    wait = tp_row["data_wait_share"] if tp_row else None
    if isnum(wait) and wait > data.HIGH_DATA_WAIT:
        moves.append({"kind": "data_loading", "share": wait})
    return moves


def point(r: Mapping, pts, tp, cx, config, env_infos, ceilings) -> dict:
    """One point: its bound and why, its distance from the roof, its spread, its levers."""
    tp_row = data.find_row(tp, r)
    ai, ridge = r["ai"], r["ridge_ai"]
    return {
        **r,
        "label": data.label(r),
        "ai_ratio": ai / ridge if isnum(ai) and isnum(ridge) and ridge > 0 else None,
        "has_range": isnum(r.get("ai_low")) and isnum(r.get("ai_high")),
        "ai_low": r.get("ai_low"),
        "ai_high": r.get("ai_high"),
        "tp": tp_row,
        "levers": levers(r, pts, tp_row, cx, config, env_infos, ceilings),
    }


analysis_section = section("analysis.html", facts)
