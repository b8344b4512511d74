"""Envs that differ in how the step runs, compared: does compiling pay off, and how well
do data-parallel processes scale. The analysis section's facts; templates/parts/
env_compare.html words them.

Pure: the resolved config (study_config.json), run JSONs, the throughput table and the
envs' fingerprints in; plain data out.

Compile pays off. Over N steps (warm-up included) an env spends
``warmup_s + (N - W) x step``, i.e. ``overhead + N x step`` with
``overhead = warmup_s - W x step``: what the warm-up cost beyond W steady steps
(compilation, for a compiled env; allocator growth for both). Against the same
(model, precision, batch) in an eager env on the same machine, compiling pays off after
``(overhead_compiled - overhead_eager) / (step_eager - step_compiled)`` steps, rounded
up; never when compiled steps are not faster.

Scaling. A data-parallel env (nproc N, T threads each) against the ``nproc: 1`` env on
the same machine: speedup = images/s / baseline images/s, scaling efficiency = images/s /
(baseline images/s x the resources ratio), the resources being cores on CPU (N x T
against the baseline's threads) and GPUs on CUDA (N against 1). 100% is linear scaling.

Environment variables. An env with ``environment:`` (an allocator's settings, say)
against the env on the same machine and device that runs the step the same way without
them: speedup = images/s / the other env's images/s, with each one's page faults a step.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from dnnroofline.formatting import isnum
from dnnroofline.report.data import env_device, env_threads
from dnnroofline.report.data import envs_cfg as _envs
from dnnroofline.study import defaults

GROUP = ("model", "precision", "batch_size")


def _num(x: Any) -> float | None:
    return float(x) if isnum(x) else None


# --------------------------------------------------------------------------- envs


def env_options(config: Mapping | None, env: str) -> dict[str, Any]:
    """How the env runs the step: compile mode (False: eager), channels-last, nproc, its
    environment variables.

    A key the resolved config lacks (a study_config.json written before the key existed)
    is the schema's default (``dnnroofline.study.defaults``)."""
    e = _envs(config).get(env, {})
    study = (config or {}).get("study") or {}
    cl = e.get("channels_last")
    return {
        "compile": defaults.value(e, "envs.*.compile"),
        "channels_last": bool(defaults.value(study, "study.channels_last") if cl is None else cl),
        "nproc": int(defaults.value(e, "envs.*.nproc")),
        "device": str(e.get("device") or "auto"),
        "environment": {str(k): str(v) for k, v in (e.get("environment") or {}).items()},
    }


def describe(options: Mapping[str, Any], threads: Any = None) -> str:
    """A short phrase: ``torch.compile default, channels-last, DDP 2 processes x 1 thread
    (gloo)``; ``eager`` for the plain step."""
    parts = [f"torch.compile {options['compile']}" if options.get("compile") else "eager"]
    if options.get("channels_last"):
        parts.append("channels-last")
    n = int(options["nproc"])  # env_options gives it
    if n > 1:
        each = f" x {int(threads)} thread{'s' if int(threads) != 1 else ''}" if threads else ""
        backend = "NCCL" if options.get("device") == "cuda" else "gloo"
        parts.append(f"DDP {n} processes{each} ({backend})")
    parts += [f"{k}={v}" for k, v in (options.get("environment") or {}).items()]
    return ", ".join(parts)


def machine_key(env: str, env_infos: Mapping[str, Mapping]) -> tuple | None:
    """What makes two envs one machine: host, CPU and GPUs of its fingerprint."""
    info = env_infos.get(env)
    if not info:
        return None
    gpus = tuple(str(g.get("name")) for g in info.get("gpus") or [] if isinstance(g, Mapping))
    return (info.get("host"), info.get("cpu_model"), gpus)


def same_machine(a: str, b: str, env_infos: Mapping[str, Mapping]) -> bool:
    ka, kb = machine_key(a, env_infos), machine_key(b, env_infos)
    return ka is not None and ka == kb


def counterparts(env: str, config: Mapping | None, env_infos: Mapping[str, Mapping]) -> list[str]:
    """The other envs that run the step on the same machine and device: a cpu env on a GPU
    box is no counterpart of its cuda envs (the gap would read as compiling's, or scaling's)."""
    device = env_device(env, config, env_infos)
    return [
        e
        for e in _envs(config)
        if e != env
        and same_machine(e, env, env_infos)
        and env_device(e, config, env_infos) == device
    ]


def _pick(candidates: list[str], score: Any) -> str | None:
    """The best-scoring candidate (ties: config order)."""
    return max(candidates, key=score) if candidates else None


def eager_partner(env: str, config: Mapping | None, env_infos: Mapping) -> str | None:
    """The eager env on the same machine and device to hold a compiled env against: the
    one that shares most of its other options (nproc, threads, channels-last)."""
    mine = env_options(config, env)
    threads = env_threads(env, config, None)
    eager = [
        e for e in counterparts(env, config, env_infos) if not env_options(config, e)["compile"]
    ]

    def score(e: str) -> tuple:
        o = env_options(config, e)
        return (
            o["nproc"] == mine["nproc"],
            env_threads(e, config, None) == threads,
            o["channels_last"] == mine["channels_last"],
            o["environment"] == mine["environment"],
        )

    return _pick(eager, score)


def scaling_baseline(
    env: str, config: Mapping | None, env_infos: Mapping, metrics: pd.DataFrame | None
) -> str | None:
    """The ``nproc: 1`` env on the same machine and device to hold a data-parallel env against:
    the same compile mode and memory format first, then the same cores."""
    mine = env_options(config, env)
    threads = env_threads(env, config, metrics) or 1
    single = [
        e for e in counterparts(env, config, env_infos) if env_options(config, e)["nproc"] == 1
    ]

    def score(e: str) -> tuple:
        o = env_options(config, e)
        t = env_threads(e, config, metrics)
        return (
            o["compile"] == mine["compile"],
            o["channels_last"] == mine["channels_last"],
            t == mine["nproc"] * threads,
            t == threads,
            o["environment"] == mine["environment"],
        )

    return _pick(single, score)


def environment_baseline(
    env: str, config: Mapping | None, env_infos: Mapping, metrics: pd.DataFrame | None
) -> str | None:
    """The env on the same machine and device that runs the step as ``env`` does (compile,
    channels-last, processes, threads) without its environment variables: none first."""
    mine = env_options(config, env)
    threads = env_threads(env, config, metrics)
    options = {e: env_options(config, e) for e in counterparts(env, config, env_infos)}
    same = [
        e
        for e, o in options.items()
        if env_threads(e, config, metrics) == threads
        and all(o[k] == mine[k] for k in ("compile", "channels_last", "nproc"))
        and o["environment"] != mine["environment"]
    ]
    return _pick(same, lambda e: not options[e]["environment"])


# --------------------------------------------------------------------------- numbers


def warmup_overhead(warmup_s: float, warmup_iters: int, step_s: float) -> float:
    """What the warm-up cost beyond ``warmup_iters`` steady steps."""
    return warmup_s - warmup_iters * step_s


def break_even_steps(extra_s: float, eager_step_s: float, compiled_step_s: float) -> float:
    """Steps (from the first) after which the compiled env has spent no more time than
    the eager one: 0 when it never costs more, ``inf`` when its steps are not faster."""
    saving = eager_step_s - compiled_step_s
    if saving <= 0:
        return math.inf if extra_s > 0 or saving < 0 else 0.0
    return float(max(0, math.ceil(extra_s / saving)))


def scaling_share(ips: float, base_ips: float, resources: float, base_resources: float) -> float:
    """Throughput against linear scaling of the baseline's throughput per resource."""
    return ips / (base_ips * resources / base_resources)


def run_groups(runs: Sequence[Mapping] | None) -> dict[tuple, dict[str, float]]:
    """Per (env, model, precision, batch): medians over the ok runs of the step time,
    the warm-up, the first step and the warm-up overhead."""
    acc: dict[tuple, dict[str, list[float]]] = {}
    for run in runs or []:
        cfg = run.get("config") or {}
        step = _num((run.get("step_time_s") or {}).get("median"))
        warm = _num(run.get("warmup_s"))
        warmup_iters = cfg.get("warmup_iters")  # what the run did (its record says it)
        if run.get("status") != "ok" or step is None or warm is None:
            continue
        if not isinstance(warmup_iters, int):
            continue  # no record of its warm-up steps: its overhead is unknown
        key = (run.get("env"), cfg.get("arch"), cfg.get("precision"), cfg.get("batch_size"))
        g = acc.setdefault(
            key, {"step_s": [], "warmup_s": [], "first_step_s": [], "overhead_s": []}
        )
        g["step_s"].append(step)
        g["warmup_s"].append(warm)
        g["overhead_s"].append(warmup_overhead(warm, warmup_iters, step))
        first = _num(run.get("first_step_s"))
        if first is not None:
            g["first_step_s"].append(first)
    return {
        key: {name: statistics.median(v) if v else math.nan for name, v in g.items()}
        | {"runs": len(g["step_s"])}
        for key, g in acc.items()
    }


def compile_rows(
    config: Mapping | None, runs: Sequence[Mapping] | None, env_infos: Mapping
) -> list[dict[str, Any]]:
    """One row per compiled env and (model, precision, batch) it measured."""
    groups = run_groups(runs)
    rows = []
    for env in _envs(config):
        mode = env_options(config, env)["compile"]
        if not mode:
            continue
        eager = eager_partner(env, config, env_infos)
        for key in sorted(k for k in groups if k[0] == env):
            g = groups[key]
            row = dict(zip(("env", *GROUP), key, strict=True), mode=mode, eager_env=eager)
            row.update(
                first_step_s=g["first_step_s"],
                warmup_s=g["warmup_s"],
                overhead_s=g["overhead_s"],
                step_s=g["step_s"],
            )
            e = groups.get((eager, *key[1:])) if eager else None
            if e is not None:
                row.update(
                    eager_step_s=e["step_s"],
                    eager_overhead_s=e["overhead_s"],
                    speedup=e["step_s"] / g["step_s"],
                    break_even=break_even_steps(
                        g["overhead_s"] - e["overhead_s"], e["step_s"], g["step_s"]
                    ),
                )
            rows.append(row)
    return rows


def scaling_rows(
    config: Mapping | None,
    tp: pd.DataFrame,
    env_infos: Mapping,
    metrics: pd.DataFrame | None = None,
) -> list[dict[str, Any]]:
    """One row per data-parallel env and (model, precision, batch) it measured;
    ``tp`` is the report's throughput table (``ips_median`` per group)."""
    rows = []
    if tp is None or tp.empty:
        return rows
    ips = {
        (r["env"], r["model"], r["precision"], int(r["batch_size"])): float(r["ips_median"])
        for _, r in tp.iterrows()
    }
    for env in _envs(config):
        opts = env_options(config, env)
        if opts["nproc"] < 2:
            continue
        base = scaling_baseline(env, config, env_infos, metrics)
        threads = env_threads(env, config, metrics)
        base_threads = env_threads(base, config, metrics) if base else None
        cuda = opts["device"] == "cuda" or (env_infos.get(env) or {}).get("device") == "cuda"
        for key in sorted(k for k in ips if k[0] == env):
            row = dict(zip(("env", *GROUP), key, strict=True), nproc=opts["nproc"])
            row.update(threads=threads, base_env=base, images_per_s=ips[key])
            b = ips.get((base, *key[1:])) if base else None
            if b:
                if cuda:  # one GPU per process
                    res, base_res, unit = opts["nproc"], 1, "GPU"
                else:
                    res, base_res, unit = opts["nproc"] * (threads or 1), base_threads or 1, "core"
                row.update(
                    base_images_per_s=b,
                    base_threads=base_threads,
                    speedup=ips[key] / b,
                    resources=res,
                    base_resources=base_res,
                    unit=unit,
                    scaling=scaling_share(ips[key], b, res, base_res),
                )
            rows.append(row)
    return rows


def compile_facts(
    config: Mapping | None, runs: Sequence[Mapping] | None, env_infos: Mapping
) -> dict[str, Any]:
    """``{any, rows}``: whether an env compiles, and :func:`compile_rows`."""
    return {
        "any": any(env_options(config, e)["compile"] for e in _envs(config)),
        "rows": compile_rows(config, runs, env_infos),
    }


def scaling_facts(
    config: Mapping | None, tp: pd.DataFrame, env_infos: Mapping, metrics: pd.DataFrame | None
) -> dict[str, Any]:
    """``{any, rows}``: whether an env is data-parallel, and :func:`scaling_rows` with
    each row's env described."""
    rows = scaling_rows(config, tp, env_infos, metrics)
    for r in rows:
        r["how"] = describe(env_options(config, r["env"]), r["threads"])
    return {"any": any(env_options(config, e)["nproc"] > 1 for e in _envs(config)), "rows": rows}


def environment_facts(
    config: Mapping | None, tp: pd.DataFrame, env_infos: Mapping, metrics: pd.DataFrame | None
) -> dict[str, Any]:
    """``{any, rows}``: whether an env sets environment variables, and per such env and
    (model, precision, batch) it measured its images/s and page faults a step against
    :func:`environment_baseline`'s."""
    envs = [e for e in _envs(config) if env_options(config, e)["environment"]]
    rows: list[dict[str, Any]] = []
    by_key = {} if tp is None else {
        (r["env"], r["model"], r["precision"], int(r["batch_size"])): r for _, r in tp.iterrows()
    }  # fmt: skip
    for env in envs:
        base = environment_baseline(env, config, env_infos, metrics)
        for key in sorted(k for k in by_key if k[0] == env):
            mine, other = by_key[key], by_key.get((base, *key[1:])) if base else None
            row = dict(zip(("env", *GROUP), key, strict=True), base_env=base)
            row.update(
                how=describe(env_options(config, env)),
                images_per_s=float(mine["ips_median"]),
                fault_mib=_num(mine.get("fault_mib_per_step")),
            )
            if other is not None:
                row.update(
                    base_images_per_s=float(other["ips_median"]),
                    speedup=float(mine["ips_median"]) / float(other["ips_median"]),
                    base_fault_mib=_num(other.get("fault_mib_per_step")),
                )
            rows.append(row)
    return {"any": bool(envs), "rows": rows}
