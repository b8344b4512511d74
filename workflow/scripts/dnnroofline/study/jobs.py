"""What the workflow gives its jobs: the Study as the Snakefile loads it (the users' models
checked), the config as this machine runs it, and the flags each job's command takes.

rules/common.smk wraps these in the functions of ``wildcards`` Snakemake calls.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from dnnroofline.study.config import Study
from dnnroofline.study.identity import config_key, run_id

#: The rules whose jobs hold their env's threads (threads: env_threads or job_threads in
#: rules/*.smk): the cores check before any job counts the envs these jobs measure.
HOLD_ENV_THREADS = frozenset(
    {"ceilings", "efficiency", "train", "ncu", "perf", "trace", "trace_data_parallel"}
)


def check_custom_models(study: Study) -> None:
    """A user's model entry must import, build an nn.Module and run forward at its size
    (InputError otherwise, naming the entry)."""
    if not study.custom_models():
        return
    # imported here: the check's module imports the users' factories, and torch with them
    from dnnroofline.study.models import check_factory

    for spec in study.custom_models():
        check_factory(
            spec.name,
            spec.factory,
            dict(spec.kwargs),
            study.image_size(spec.name),
            study.num_classes(spec.name),
        )


def load_study(
    config: dict, *, check_models: bool, cluster_cpus: Mapping[str, int | None] | None
) -> Study:
    """The study on this machine. ``check_models``: check the model names against
    torchvision's and build each user's model; a cluster job, whose submitting host did
    that already, skips it (importing torchvision costs seconds in every job)."""
    known = None
    if check_models:
        from dnnroofline.study.models import torchvision_classifiers

        known = torchvision_classifiers()
    study = Study.here(config, known_models=known, cluster_cpus=cluster_cpus)
    if check_models:
        check_custom_models(study)
    return study


def resolved_config(study: Study) -> dict[str, Any]:
    """The config as this machine runs it: defaults filled, devices and threads resolved,
    models by name (the {model} of run ids) with a user's factory entries kept apart."""
    config = study.config
    envs = {
        env: dict(
            spec,
            device=study.device(env),
            threads=study.threads(env),
            precisions=study.precisions(env),
            batch_sizes=study.batch_sizes(env),
            batch_sizes_by_model={m: study.batch_sizes(env, m) for m in study.models},
            **study.options(env),
        )
        for env, spec in config["envs"].items()
    }
    study_block = dict(config["study"], models=study.models)
    study_block["model_specs"] = {
        m: {
            "factory": s.factory,
            "image_size": study.image_size(m),
            "num_classes": study.num_classes(m),
            "kwargs": dict(s.kwargs),
            "batch_sizes": list(s.batch_sizes) or None,
        }
        for m, s in study.model_specs.items()
    }
    return dict(config, envs=envs, study=study_block, measure_envs=study.measure_envs)


def driver_flags(study: Study, env: str, model: str, precision: str, batch: int | str) -> str:
    """The training driver's flags shared by timed runs, traces, ncu and perf: the model,
    batch, precision, backend, data and workers, then how the env runs the step (compile,
    channels_last, cudnn_benchmark, nproc)."""
    data = "--synthetic" if study.data == "synthetic" else f"--data {study.data!r}"
    flags = study.model_args(model) + [
        f"--batch-size {batch}",
        f"--precision {precision}",
        f"--backend {study.device(env)}",
        data,
        f"--workers {study.config['study']['workers']}",
    ]
    return " ".join(flags + study.option_flags(env))


def declared_machine_flags(spec: Mapping, device_flag: str = "--device") -> str:
    """What an env (its config block ``spec``) declares about its machine, as env_info.py
    flags (the measurements' machine check takes the device as --declared-device)."""
    flags = [f"{device_flag} {spec['device']}"]
    for key in ("gpu_name", "cpu_name"):
        if spec.get(key):
            flags.append(f"--{key.replace('_', '-')} {spec[key]!r}")
    return " ".join(flags)


def ncu_timeout_flag(config: Mapping) -> str:
    """--timeout of the ncu stages: ncu.pass_timeout_s; unset, each stage's own default."""
    seconds = config["ncu"].get("pass_timeout_s")
    return "" if seconds is None else f"--timeout {seconds}"


def inventory_flags(steps: Iterable[tuple[str, str]], paths: Iterable[str]) -> str:
    """complexity.py's --inventory PRECISION:STEP=PATH for each inventory a job writes, the
    (precision, step variant) pairs in the order of its outputs."""
    pairs = zip(list(steps), list(paths), strict=True)
    return " ".join(f"--inventory {p}:{step}={path}" for (p, step), path in pairs)


def point_of(wildcards: Any) -> tuple[str, str, str, str]:
    """(env, model, precision, batch) of a measuring job, from its wildcards."""
    return (wildcards.menv, wildcards.model, wildcards.precision, wildcards.batch)


def driver_run_id(kind: str) -> Callable[[Any], str]:
    """A params function giving --run-id of a measuring job's driver: the run's id for a
    timed run (kind "run"), else the config key and the job's kind (_ncu, _perf, _trace)."""

    def run_id_of(wildcards: Any) -> str:
        if kind == "run":
            return run_id(*point_of(wildcards), wildcards.run)
        return f"{config_key(*point_of(wildcards))}_{kind}"

    run_id_of.__name__ = f"{kind}_run_id"
    return run_id_of
