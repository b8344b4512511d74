"""The design section: objective, hypothesis and verdict, environments, the run matrix."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pandas as pd

from dnnroofline.formatting import fmt_batches, isnum, join, sig
from dnnroofline.perfmodel.levers import LOW_EFFICIENCY
from dnnroofline.report import data, env_compare
from dnnroofline.report.render import section


def facts(
    config: Mapping,
    env_infos: Mapping | Sequence | None,
    metrics: pd.DataFrame | None,
    points: pd.DataFrame | None,
    complexity: Any = None,
    ceilings: Mapping | Sequence | None = None,
    expected_runs: Any = None,
) -> dict:
    """Objective, hypothesis and verdict, envs, the run matrix and its completion."""
    m, pts, cx, env_infos, ceilings = data.prepared(
        metrics, points, complexity, env_infos, ceilings
    )
    study = data.study_cfg(config)
    envs = list(data.envs_cfg(config)) or sorted({e for e in m["env"] if e})
    expected = data.expected_run_table(expected_runs, m)
    miss = data.missing_runs(expected, m)
    expected_ids = {e["run_id"] for e in expected}
    ok = data.ok_runs(m)
    failed = data.failed_runs(m)
    matrices = {env: data.env_matrix(config, env) for env in envs}
    return {
        "models": list(study.get("models") or []),
        "envs": envs,
        "precisions": sorted({p for mx in matrices.values() for p in mx["precisions"]}),
        "batches": sorted({b for mx in matrices.values() for b in mx["batch_sizes"]}),
        "batches_by_model": batches_by_model(matrices.values()),
        # envs with their own precisions or batch sizes (a CPU env without tf32/amp)
        "per_env_matrix": len(
            {(tuple(mx["precisions"]), tuple(mx["batch_sizes"])) for mx in matrices.values()}
        )
        > 1,
        "hypotheses": [
            hypothesis(config, env, prec, env_infos, m, pts, cx, ceilings)
            for env in envs
            for prec in matrices[env]["precisions"]
        ],
        "environments": [
            _environment(config, env, env_infos, ceilings, m, matrices[env]) for env in envs
        ],
        "study": study,
        "n_expected": len(expected),
        "n_ok": int(ok["run_id"].isin(expected_ids).sum()) if expected else len(ok),
        "n_failed": int(failed["run_id"].isin(expected_ids).sum()) if expected else len(failed),
        "n_missing": len(miss),
        "outside_matrix": sorted({r for r in m["run_id"] if r} - expected_ids) if expected else [],
        "matrix": [
            {
                "env": env,
                "mx": matrices[env],
                "expected": len(ids),
                "ok": int(ok["run_id"].isin(ids).sum()),
                "failed": int(failed["run_id"].isin(ids).sum()),
                "missing": sum(1 for e in miss if e.get("env") == env),
            }
            for env in envs
            for ids in [{e["run_id"] for e in expected if e.get("env") == env}]
        ],
    }


def batches_by_model(matrices: Iterable[Mapping]) -> str | None:
    """``resnet50: 64, 256; resnet18 and mobilenet_v2: 128`` where models run at their
    own batch sizes (study.models' batch_sizes); None where all share one list."""
    per_model: dict[str, list[int]] = {}
    for mx in matrices:
        for model, sizes in mx["batch_sizes_by_model"].items():
            per_model.setdefault(model, [])
            per_model[model] += [b for b in sizes if b not in per_model[model]]
    groups: dict[tuple[int, ...], list[str]] = {}
    for model, sizes in per_model.items():
        groups.setdefault(tuple(sorted(sizes)), []).append(model)
    if len(groups) < 2:
        return None
    return "; ".join(
        f"{join(models)}: {', '.join(map(str, sizes))}" for sizes, models in groups.items()
    )


def _environment(config, env, env_infos, ceilings, m, mx) -> dict:
    info = env_infos.get(env) or {}
    cpu = info.get("cpu_model") or (
        (ceilings.get(env) or {}).get("device_name")
        if data.env_device(env, config, env_infos) == "cpu"
        else None
    )
    return {
        "env": env,
        "mx": mx,
        "detected": info.get("device"),
        "gpus": [str(g.get("name")) for g in info.get("gpus") or [] if isinstance(g, Mapping)],
        "cpu": cpu,
        "threads": data.env_threads(env, config, m),
        "nproc": env_compare.env_options(config, env)["nproc"],
        "step": env_compare.describe(env_compare.env_options(config, env)),
        "cores": info.get("cpu_cores_physical"),
        "here": data.measured_here(env, {}, config, env_infos),
        "has_info": bool(info),
    }


def hypothesis(config, env, prec, env_infos, m, pts, cx, ceilings) -> dict:
    """The predicted bound of each model from its analytic AI against the ridge, and the verdict."""
    mx = data.env_matrix(config, env)
    rg = data.ridge_for(env, prec, pts, ceilings)
    preds = []
    for model in mx["models"]:
        ais = [
            data.analytic_ai(cx[(model, b)], prec)
            for b in mx["batch_sizes_by_model"][model]
            if (model, b) in cx
        ]
        ais = [a for a in ais if isnum(a)]
        if not ais:
            continue
        bound = None
        if rg:
            n_mem = sum(a < rg["ridge"] for a in ais)
            bound = "memory" if n_mem == len(ais) else "compute" if n_mem == 0 else "mixed"
        key = next((k for k in cx if k[0] == model), None)
        preds.append(
            {
                "model": model,
                "lo": min(ais),
                "hi": max(ais),
                "one_ai": sig(min(ais)) == sig(max(ais)),
                "bound": bound,
                "depthwise": data.depthwise_share(cx[key]) if key else 0.0,
            }
        )
    preds.sort(key=lambda p: -p["hi"])
    dev = data.env_device(env, config, env_infos)
    return {
        "env": env,
        "precision": prec,
        "batches": fmt_batches(mx["batch_sizes"]),
        "device": dev.upper() if dev in ("cpu", "mps") else dev,
        "hardware": data.env_hw(env, env_infos, ceilings),
        "threads": data.env_threads(env, config, m) if dev == "cpu" else None,
        "ridge": rg,
        "preds": preds,
        "compute": [p for p in preds if p["bound"] == "compute"],
        "memory": [p for p in preds if p["bound"] == "memory"],
        "mixed": [p for p in preds if p["bound"] not in ("compute", "memory")],
        "verdict": verdict(env, prec, preds, pts) if preds and rg else None,
    }


def verdict(env: str, prec: str, preds: list[dict], pts: pd.DataFrame) -> dict | None:
    """How the measured points bear the hypothesis out (None without points)."""
    p = pts[(pts["env"] == env) & (pts["precision"] == prec)] if len(pts) else pts
    if p is None or not len(p):
        return None
    pred = {x["model"]: x["bound"] for x in preds}
    held, broke = 0, []
    for _, r in p.iterrows():
        exp = pred.get(r["model"])
        if exp in ("memory", "compute"):
            if exp == r["bound_"]:
                held += 1
            else:
                broke.append(
                    {
                        "model": r["model"],
                        "batch": int(r["batch_size"]),
                        "bound": r["bound_"],
                        "ai": r["ai"],
                        "ai_source": r["ai_source"],
                    }
                )
    by_model = p.groupby("model")["attained_flops"].median().sort_values(ascending=False)
    measured = list(by_model.index)
    low = p[p["eff"] < LOW_EFFICIENCY]
    out = {
        "held": held,
        "checked": held + len(broke),
        "broke": broke,
        "ranking": [{"model": mm, "flops": float(by_model[mm])} for mm in measured],
        "all_compute": all(x["bound"] == "compute" for x in preds),
        "follows_ai": measured == [x["model"] for x in preds if x["model"] in measured],
        "spread": math.nan,
        "low": sorted({f"{r['model']} bs {int(r['batch_size'])}" for _, r in low.iterrows()}),
        "lowest": low["eff"].min(),
        "n_above": int(p["above"].sum()),
    }
    if len(measured) > 1:
        lo, hi = by_model.iloc[-1], by_model.iloc[0]
        out["spread"] = hi / lo if lo > 0 else math.nan
    return out


design_section = section("design.html", facts)
