"""The analysis section: a summary, the comparisons (compare.py), the memory footprint
(memory.py), what bounds each point and what would move it, and the failed and missing runs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from dnnroofline.errors import InputError
from dnnroofline.estimate import roofline
from dnnroofline.formatting import isnum
from dnnroofline.ncu.command import parse_compute_capability
from dnnroofline.perfmodel import levers
from dnnroofline.perfmodel.levers import LOW_EFFICIENCY
from dnnroofline.report import compare, data, env_compare, memory
from dnnroofline.report.render import section
from dnnroofline.study.precisions import HALF_PRECISIONS


def facts(
    config: Mapping,
    metrics: pd.DataFrame | None,
    points: pd.DataFrame | None,
    env_infos: Mapping | Sequence | None = None,
    complexity: Any = None,
    ceilings: Mapping | Sequence | None = None,
    expected_runs: Any = None,
    runs: Sequence[Mapping] | None = None,
    cluster_attempts: pd.DataFrame | None = None,
) -> dict:
    """Per-point diagnosis, cross-model/env/batch comparisons (compiled and data-parallel
    envs against their counterparts included), failed and missing runs, and on Slurm the
    jobs that did not complete (``cluster_attempts``; None: not a Slurm study)."""
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
        "environment": env_compare.environment_facts(config, tp, env_infos, m),
        "memory": memory.facts(config, m, cx, env_infos),
        "points": [point(r, pts, tp, cx, config, env_infos, ceilings) for r in data.records(pts)],
        "failed": [{**r, "not_counted": not_counted(r, cx)} for r in data.records(failed)],
        "attempts": None if cluster_attempts is None else data.records(cluster_attempts),
        "n_expected": len(expected),
        "missing": [
            {**e, "here": data.measured_here(e.get("env") or "?", e, config, env_infos)}
            | {"device": data.env_matrix(config, e.get("env") or "?")["device"]}
            for e in data.missing_runs(expected, m)
        ],
    }


def not_counted(run: Mapping, cx: Mapping) -> str | None:
    """The complexity stage's reason where it could not record a training step of this
    run's (model, batch) either: often the cause of the run's own failure (an image too
    small for the model), said more plainly than the run's raw exception."""
    batch = run.get("batch_size")
    c = cx.get((str(run.get("model")), int(batch))) if isnum(batch) else None
    return c.get("message") if c and c.get("status") == "error" else None


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


def _cuda_cc(info: Mapping) -> tuple[int, int] | None:
    """The env's first GPU's compute capability, None where env_info has none it can read."""
    for g in info.get("gpus") or []:
        if isinstance(g, Mapping) and g.get("compute_capability"):
            try:
                return parse_compute_capability(g["compute_capability"])
            except InputError:
                return None
    return None


def lever_facts(r: Mapping, pts, tp_row, cx, config, env_infos, ceilings) -> levers.PointFacts:
    """What the lever engine (:func:`dnnroofline.perfmodel.levers.levers`) needs of one point,
    from the study's files: its env's machine and options, its batch span, its bytes."""
    env, model, prec, b = r["env"], r["model"], r["precision"], int(r["batch_size"])
    info = env_infos.get(env) or {}
    dev = data.env_device(env, config, env_infos)
    options = env_compare.env_options(config, env)  # the env's, else the study's/schema's
    same = pts[(pts["env"] == env) & (pts["model"] == model) & (pts["precision"] == prec)]
    same = same.sort_values("batch_size")
    span = None
    if len(same) > 1 and isnum(same["ai"].iloc[0]) and isnum(same["ai"].iloc[-1]):
        span = [
            {"ai": same["ai"].iloc[i], "batch": int(same["batch_size"].iloc[i])} for i in (0, -1)
        ]
    c = cx.get((model, b)) or {}
    by = c.get("by_precision") or {}
    half = next((by[p] for p in HALF_PRECISIONS if isinstance(by.get(p), Mapping)), None)
    pair = (c.get("min_dram_bytes_per_step"), (half or {}).get("min_dram_bytes_per_step"))
    threads = data.env_threads(env, config)
    if isnum(threads):  # a data-parallel env's processes use threads each
        threads = int(threads) * env_compare.env_options(config, env)["nproc"]
    cores = info.get("cpu_cores_physical")
    flags = info.get("cpu_flags")
    wait = tp_row["data_wait_share"] if tp_row else None
    paging = (tp_row.get("fault_mib_per_step"), tp_row.get("timed_sys_share")) if tp_row else None
    higher = roofline.higher_compute_roofs(data.valid_roofs(ceilings.get(env)), prec)
    return levers.PointFacts(
        bound=r["bound_"],
        efficiency=r["eff"],
        above=bool(r["above"]),
        device=dev,
        precision=prec,
        roof_source=r["roof_source"],
        busy_share=r.get("kernel_busy_share"),
        cuda_cc=_cuda_cc(info),
        cpu_flags=[str(f) for f in flags] if flags else None,
        threads=threads,
        cores=int(cores) if isnum(cores) else None,
        compiled=bool(options["compile"]),
        channels_last=options["channels_last"],
        ai_span=span,
        min_bytes=pair if all(isnum(v) for v in pair) else None,
        higher_roofs=[{"precision": p, "roof": roof.value} for p, roof in higher],
        data_wait_share=wait if isnum(wait) else None,
        paging=paging if paging and all(isnum(v) for v in paging) else None,
    )


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
        "levers": levers.levers(lever_facts(r, pts, tp_row, cx, config, env_infos, ceilings)),
    }


analysis_section = section("analysis.html", facts)
