"""The reproducibility section: each machine's env_info, and the exact commands that rebuild
every number (the whole study, each run, each complexity count)."""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from dnnroofline.formatting import fmt_bytes, isnum
from dnnroofline.lockfile import lock_match
from dnnroofline.report import data
from dnnroofline.report.render import section
from dnnroofline.study import defaults, environment
from dnnroofline.study.cost import study_cost
from dnnroofline.study.identity import complexity_path


def model_flags(study: Mapping, model: str) -> list[str]:
    """Driver/complexity flags that build ``model``: a torchvision name or a user's factory
    (``study.model_specs``, as study_config.json holds it), its image size and classes.

    A key the resolved config lacks (a study_config.json written before the key existed)
    is the schema's default, read through ``dnnroofline.study.defaults``, never restated."""
    spec = dict((study.get("model_specs") or {}).get(model) or {})
    flags = ["--arch", model]
    if spec.get("factory"):
        flags += ["--model-factory", str(spec["factory"])]
        if spec.get("kwargs"):
            flags += ["--model-kwargs", json.dumps(spec["kwargs"])]
    flags += [
        "--image-size",
        str(spec.get("image_size") or defaults.value(study, "study.image_size")),
    ]
    classes = spec.get("num_classes") or study.get("num_classes")
    if classes is not None:
        flags += ["--num-classes", str(classes)]
    return flags


def env_option_flags(envcfg: Mapping, study: Mapping) -> list[str]:
    """Driver flags of how an env runs the step: compile, channels-last, cuDNN, nproc,
    its environment variables."""
    flags = []
    if envcfg.get("compile"):
        flags += ["--compile", str(envcfg["compile"])]
    channels_last = envcfg.get("channels_last")
    if channels_last or (channels_last is None and study.get("channels_last")):
        flags.append("--channels-last")
    if envcfg.get("cudnn_benchmark") is not None:
        flags.append("--cudnn-benchmark" if envcfg["cudnn_benchmark"] else "--no-cudnn-benchmark")
    nproc = int(defaults.value(envcfg, "envs.*.nproc"))
    if nproc > 1:
        flags += ["--nproc", str(nproc)]
    for name, value in (envcfg.get("environment") or {}).items():
        flags += [environment.FLAG, f"{name}={value}"]
    return flags


def run_command(
    config: Mapping, run: Mapping, env_infos: Mapping | None = None, ran: Mapping | None = None
) -> str:
    """The ``run_train.py`` command line that reproduces one run of the config.

    ``ran``: the ``config`` its run JSON recorded, where there is one: its step counts,
    channels-last and compile mode win over this config's (a run copied from a machine
    whose config said otherwise)."""
    env_infos = env_infos or {}
    ran = ran or {}
    study = dict(data.study_cfg(config))
    study.update({k: ran[k] for k in ("warmup_iters", "iters") if isinstance(ran.get(k), int)})
    env = str(run.get("env") or "")
    envcfg = dict(data.envs_cfg(config).get(env, {}))
    envcfg.update({k: ran[k] for k in ("channels_last", "compile", "environment") if k in ran})
    device = str(envcfg.get("device") or "auto")
    info_dev = (env_infos.get(env) or {}).get("device")
    backend = info_dev if device == "auto" and info_dev else device
    args = [
        "python",
        "workflow/scripts/run_train.py",
        *model_flags(study, str(run["model"])),
        "--batch-size",
        str(int(run["batch_size"])),
        "--warmup-iters",
        str(defaults.value(study, "study.warmup_iters")),
        "--iters",
        str(defaults.value(study, "study.iters")),
        "--precision",
        str(run["precision"]),
        "--backend",
        backend,
    ]
    source = defaults.value(study, "study.data")
    args += ["--synthetic"] if str(source) == "synthetic" else ["--data", str(source)]
    if study.get("workers") is not None:  # the train rule passes it, synthetic or not
        args += ["--workers", str(study["workers"])]
    args += env_option_flags(envcfg, study)
    threads = envcfg.get("threads")
    rid = str(run["run_id"])
    args += ["--env", env]
    if isnum(threads):
        args += ["--expect-threads", str(int(threads))]
    args += ["--run-id", rid, "--out", f"results/{env}/runs/{rid}.json"]
    cmd = " ".join(shlex.quote(a) for a in args)
    if isnum(threads):  # the job's threads: every process's (the driver splits them)
        processes = int(defaults.value(envcfg, "envs.*.nproc"))
        cmd = f"OMP_NUM_THREADS={int(threads) * processes} {cmd}"
    return cmd


_ENV_FIELDS = (
    ("host", "host"),
    ("OS", "os"),
    ("kernel", "kernel"),
    ("device", "device"),
    ("CPU", "cpu_model"),
    ("physical cores", "cpu_cores_physical"),
    ("logical cores", "cpu_cores_logical"),
    ("CPU ISA flags", "cpu_flags"),
    ("RAM", "ram_bytes"),
    ("Python", "python"),
    ("torch", "torch"),
    ("torchvision", "torchvision"),
    ("CUDA", "cuda"),
    ("cuDNN", "cudnn"),
    ("driver", "driver"),
    ("GPUs", "gpus"),
    ("container", "container"),
    ("cloud zone", "cloud_zone"),
    ("date", "date"),
)


def _env_value(key: str, v: Any) -> str:
    if v is None or (isinstance(v, (list, str)) and len(v) == 0):
        return "–"
    if key == "ram_bytes":
        return fmt_bytes(v)
    if key == "cpu_flags" and isinstance(v, list):
        return ", ".join(str(x) for x in v)
    if key == "gpus" and isinstance(v, list):
        return "; ".join(
            f"{g.get('name')} ({fmt_bytes(g.get('memory_bytes'))}, "
            f"sm {g.get('compute_capability')})"
            if isinstance(g, Mapping)
            else str(g)
            for g in v
        )
    return str(v)


def facts(
    config: Mapping,
    env_infos: Mapping | Sequence | None,
    metrics: pd.DataFrame | None,
    expected_runs: Any = None,
    config_path: str | None = None,
    runs: Sequence[Mapping] | None = None,
    benchmarks: Sequence[Mapping] | None = None,
    lock: Mapping[str, str] | None = None,
) -> dict:
    """env_info per env, its versions against the lock (``lock``: requirements.lock's
    ``{package: version}``), the exact commands that rebuild every number, and what the
    study itself cost (``benchmarks``: read_benchmark() records; ``runs``: run JSONs)."""
    env_infos = data.keyed(env_infos)
    m = data.prepare_metrics(metrics)
    envs = list(data.envs_cfg(config))
    for e in list(env_infos) + [e for e in m["env"] if e]:
        if e not in envs:
            envs.append(e)
    known = [e for e in envs if e in env_infos]
    threads = [
        int(data.env_matrix(config, e)["threads"])
        for e in envs
        if isnum(data.env_matrix(config, e)["threads"])
    ]
    cfg = f" --configfile {shlex.quote(config_path)}" if config_path else ""
    cores = str(max(threads)) if threads else "all"
    expected = data.expected_run_table(expected_runs, m)
    ran = {str(r["run_id"]): r.get("config") for r in runs or [] if r.get("run_id")}
    cmds = [
        run_command(config, e, env_infos, ran.get(str(e.get("run_id"))))
        for e in expected
        if all(e.get(k) is not None for k in ("env", "model", "precision", "batch_size"))
    ]
    # runs in the ledger that are outside the expected matrix
    exp_ids = {e["run_id"] for e in expected}
    for _, r in m.iterrows():
        if r["run_id"] and r["run_id"] not in exp_ids and r["model"] and isnum(r["batch_size"]):
            cmds.append(run_command(config, r.to_dict(), env_infos, ran.get(str(r["run_id"]))))
    return {
        "machines": known,
        "fields": [
            [label] + [_env_value(key, env_infos[e].get(key)) for e in known]
            for label, key in _ENV_FIELDS
        ],
        "no_info": [e for e in envs if e not in env_infos],
        "lock": lock_match(env_infos, lock),
        "study_commands": [
            f"snakemake --cores {cores}{cfg}",
            f"snakemake --report results/report.html{cfg}",
        ],
        "run_commands": cmds,
        "complexity_commands": complexity_commands(config, envs),
        "cost": study_cost(benchmarks or [], runs or []),
    }


def complexity_commands(config: Mapping, envs: Sequence[str]) -> list[str]:
    """One complexity.py command per (model, batch) of the envs' matrices."""
    study = data.study_cfg(config)
    cmds, seen = [], set()
    for e in envs:
        mx = data.env_matrix(config, e)
        for model in mx["models"]:
            for b in mx["batch_sizes_by_model"][model]:
                if (model, b) in seen:
                    continue
                seen.add((model, b))
                args = [
                    "python",
                    "workflow/scripts/complexity.py",
                    *model_flags(study, str(model)),
                    "--batch-size",
                    str(b),
                    "--out",
                    complexity_path(str(model), b),
                ]
                cmds.append(" ".join(shlex.quote(a) for a in args))
    return cmds


reproducibility_section = section("reproducibility.html", facts)
