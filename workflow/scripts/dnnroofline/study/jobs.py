"""What the workflow gives its jobs: the Study as the Snakefile loads it (the users' models
checked), the config as this machine runs it, and the flags each job's command takes.

rules/common.smk wraps these in the functions of ``wildcards`` Snakemake calls.
"""

from __future__ import annotations

import contextlib
import functools
import glob
import os
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from dnnroofline.errors import InputError
from dnnroofline.study import cost
from dnnroofline.study.cluster import is_slurm, outlived_s
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


@functools.lru_cache(maxsize=65536)
def _benchmark_wall(path: str, mtime_ns: int) -> float | None:
    """One benchmark file's wall seconds, read once per version of the file: every job
    that Slurm is asked to time reads the files of its rule (None: an unreadable file,
    which only leaves the job to the other files or the prior)."""
    try:
        return cost.read_benchmark(path)["wall_s"]
    except InputError:
        return None


def benchmark_walls(benchmark: str, env: str) -> dict[str, float]:
    """Wall seconds of the study's finished jobs of one rule on ``env``, by benchmark file
    stem: the files of the rule's ``benchmark:`` pattern, its other wildcards any value."""
    pattern = re.sub(r"\{(?!menv\})[^}]*\}", "*", benchmark).replace("{menv}", env)
    walls = {}
    for path in sorted(glob.glob(pattern)):
        with contextlib.suppress(OSError):  # a file removed since the listing
            wall = _benchmark_wall(path, os.stat(path).st_mtime_ns)
            if wall is not None:
                walls[Path(path).stem] = wall
    return walls


def time_limit(
    rule: str, benchmark: str, wildcards: Any, attempt: int, attempts: list[dict] | None
) -> int:
    """The Slurm time limit (minutes) of a measuring job: the cost model's
    (dnnroofline.study.cost.time_limit_min) for what the study measured of its rule on its
    env (``benchmark``: the rule's benchmark pattern), at least how long an earlier attempt
    ran before its limit killed it (``attempts``: cluster_attempts rows), per attempt."""
    # Snakemake's Wildcards is a list: `in` would look among the values
    point = config_key(*point_of(wildcards)) if "model" in wildcards.keys() else None  # noqa: SIM118
    ran = outlived_s(attempts, rule, "_".join(wildcards))
    walls = benchmark_walls(benchmark, wildcards.menv)
    expected, _ = cost.expected_job_s(rule, walls, point, ran)
    return cost.time_limit_min(expected, attempt)


def runtime_resource(
    config: Mapping, rule: str, benchmark: str, attempts: list[dict] | None
) -> dict[str, Callable[[Any, int], int]]:
    """A measuring rule's ``runtime`` resource on a Slurm run (sbatch -t, minutes): a
    function of the job's wildcards and Snakemake's attempt giving :func:`time_limit`.
    Empty off Slurm, where no job has a time limit."""
    if not is_slurm(config):
        return {}

    def runtime(wildcards: Any, attempt: int) -> int:
        return time_limit(rule, benchmark, wildcards, attempt, attempts)

    return {"runtime": runtime}
