# Config helpers and target functions. The study logic lives in dnnroofline.study.config.
import glob
import json
import os

from snakemake.logging import logger

from dnnroofline.measure.envinfo import check_copied_env
from dnnroofline.errors import InputError
from dnnroofline.study.config import (
    Study,
    alternation,
    detect_cpu_flags,
    detect_device,
    detect_gpu_count,
)


def known_models():
    # torchvision's registry; imported here only, so a dry run stays fast.
    import torchvision.models

    return torchvision.models.list_models(module=torchvision.models)


def check_custom_models(study):
    """A user's model entry must import, build an nn.Module and run forward at its size."""
    if not study.custom_models():
        return
    from dnnroofline.study.models import check_factory

    for spec in study.custom_models():
        check_factory(
            spec.name,
            spec.factory,
            dict(spec.kwargs),
            study.image_size(spec.name),
            study.num_classes(spec.name),
        )


# A cluster job re-reads this file on its node to run one job: the submitting host has
# checked the models already, and importing torchvision costs seconds in every job.
CHECK_MODELS = not (workflow.remote_exec or workflow.subprocess_exec)

try:
    STUDY = Study(
        config,
        machine_device=detect_device(),
        known_models=known_models() if CHECK_MODELS else None,
        cpu_flags=detect_cpu_flags(),
        cluster_cpus=CLUSTER_CPUS,
        gpu_count=detect_gpu_count(),
    )
    if CHECK_MODELS:
        check_custom_models(STUDY)
except InputError as err:
    raise WorkflowError(str(err)) from None

MEASURED = STUDY.measure_envs
ENVS = list(config["envs"])
ncu_settings = config.get("ncu", {})


wildcard_constraints:
    env=alternation(ENVS),
    menv=alternation(MEASURED),
    model=alternation(STUDY.models),
    precision="fp32|tf32|amp|bf16",
    batch=r"\d+",
    run=r"\d+",


def entry_script(name):
    """A stage's entry script, relative to the working directory: params are part of a
    job's provenance, and the checkout's location is not, so a moved checkout re-runs
    no finished measurement (an absolute path did, at the second snakemake after the move).
    Not named ``script``: that would hide the function behind Snakemake's script: directive.
    """
    return os.path.relpath(os.path.join(workflow.basedir, "workflow", "scripts", name))


def log_path(env, name):
    return f"results/{env}/logs/{name}.log"


def run_path(r):
    return f"results/{r.env}/runs/{r.run_id}.json"


def find_copied_envs():
    """Envs not measured here whose results were copied into results/{env}/.

    A copied folder must be whole (env_info.json and ceilings.json) and come from the
    machine its env declares; otherwise the study stops here, before any job, rather
    than ignore those results or file them under the wrong machine.
    """
    found = []
    for env in ENVS:
        folder = f"results/{env}"
        if env in MEASURED or not os.path.isdir(folder):
            continue
        runs = glob.glob(f"{folder}/runs/*.json")
        have = [
            n
            for n in ("env_info.json", "ceilings.json")
            if os.path.exists(f"{folder}/{n}")
        ]
        if not have and not runs:
            continue
        lacking = [n for n in ("env_info.json", "ceilings.json") if n not in have]
        if lacking:
            raise WorkflowError(
                f"{folder}/ holds results of env {env!r}, which this machine does not "
                f"measure, but lacks {' and '.join(lacking)}: copy the whole results/{env}/ "
                f"folder from env {env!r}'s machine (after its env_info and ceilings jobs ran)"
            )
        where = f"{folder}/env_info.json"
        try:
            with open(where) as fh:
                fingerprint = json.load(fh)
            check_copied_env(env, config["envs"][env], fingerprint, where)
        except (OSError, ValueError) as err:
            raise WorkflowError(
                f"{where}: cannot read the copied fingerprint: {err}"
            ) from None
        except InputError as err:
            raise WorkflowError(str(err)) from None
        found.append(env)
    return found


COPIED = find_copied_envs()


def copied_envs():
    """Envs not measured here whose (checked) results were copied into results/{env}/."""
    return list(COPIED)


def reported_envs():
    return MEASURED + copied_envs()


def run_files():
    """Runs measured here, plus the study's runs copied in from other machines.

    A copied run enters when its id is in the study's matrix for its env; a copied run
    outside it (a batch size or model this config does not list) is left out, and named.
    """
    files = [run_path(r) for r in STUDY.runs(MEASURED)]
    for env in copied_envs():
        present = set(glob.glob(f"results/{env}/runs/*.json"))
        wanted = [run_path(r) for r in STUDY.runs([env])]
        files += [f for f in wanted if f in present]
        extra = sorted(present - set(wanted))
        if extra:
            logger.warning(
                f"{len(extra)} copied run(s) of env {env!r} are outside this study's matrix "
                f"and left out of metrics.csv (add their model/batch/precision/repeat to the "
                f"config to include them): {', '.join(os.path.basename(f) for f in extra[:5])}"
                + (" ..." if len(extra) > 5 else "")
            )
    return files


def ncu_files():
    files = [
        f"results/{c.env}/ncu/{c.config_key}.json" for c in STUDY.profiled_configs()
    ]
    for env in copied_envs():
        found = sorted(glob.glob(f"results/{env}/ncu/*.json"))
        files += [f for f in found if os.path.basename(f) != "selftest.json"]
    return files


def complexity_files():
    return [f"results/complexity/{m}_bs{b}.json" for m, b in STUDY.complexity_keys()]


def ceilings_files():
    return [f"results/{env}/ceilings.json" for env in reported_envs()]


def benchmark_files():
    """Benchmark TSVs of the measuring jobs run here, for "what the study itself cost"."""
    files = [
        f"results/benchmarks/complexity/{m}_bs{b}.tsv"
        for m, b in STUDY.complexity_keys()
    ]
    files += [f"results/{env}/benchmarks/ceilings.tsv" for env in MEASURED]
    for env in STUDY.cuda_envs_measured():
        files.append(f"results/{env}/benchmarks/ncu/selftest.tsv")
    files += [
        f"results/{c.env}/benchmarks/ncu/{c.config_key}.tsv"
        for c in STUDY.profiled_configs()
    ]
    return files + trace_benchmark_files()  # rules/traces_common.smk


def env_info_files():
    return [f"results/{env}/env_info.json" for env in reported_envs()]


def run_args(wildcards):
    """Driver flags shared by timed runs and the ncu step."""
    study = config["study"]
    data = "--synthetic" if STUDY.data == "synthetic" else f"--data {STUDY.data!r}"
    flags = STUDY.model_args(wildcards.model) + [
        f"--batch-size {wildcards.batch}",
        f"--precision {wildcards.precision}",
        f"--backend {STUDY.device(wildcards.menv)}",
        data,
        f"--workers {study['workers']}",
    ]
    # how the env runs the step: compile, channels_last, cudnn_benchmark, nproc
    return " ".join(flags + STUDY.option_flags(wildcards.menv))


SECTIONS = [
    "design",
    "complexity",
    "measurement",
    "roofline",
    "analysis",
    "reproducibility",
]


def plot_files():
    files = []
    for name in [f"roofline_{env}" for env in reported_envs()] + [
        "roofline_all",
        "throughput",
    ]:
        files += [f"results/plots/{name}.png", f"results/plots/{name}.svg"]
    # interactive rooflines (Vega-Lite, self-contained HTML)
    files += [f"results/plots/roofline_{e}.html" for e in reported_envs() + ["all"]]
    return files


def all_targets():
    return (
        ["results/metrics.csv", "results/roofline_points.csv"]
        + plot_files()
        + expand("results/report_sections/{section}.html", section=SECTIONS)
    )


def measure_targets():
    """Every measurement of the envs measured here, and nothing made from them: the
    fingerprint, roofs, timed runs, traces, the ncu self-test and captures, perf counts.
    """
    files = [
        f"results/{env}/{name}.json"
        for env in MEASURED
        for name in ("env_info", "ceilings")
    ]
    files += [run_path(r) for r in STUDY.runs(MEASURED)]
    files += [f"results/{env}/ncu/selftest.json" for env in STUDY.cuda_envs_measured()]
    files += [
        f"results/{c.env}/ncu/{c.config_key}.json" for c in STUDY.profiled_configs()
    ]
    return files + trace_files() + perf_files()  # traces_common.smk, perf_common.smk


def declared_machine_flags(env):
    """What the env declares about its machine, as env_info.py flags."""
    spec = config["envs"][env]
    flags = [f"--device {spec['device']}"]
    for key in ("gpu_name", "cpu_name"):
        if spec.get(key):
            flags.append(f"--{key.replace('_', '-')} {spec[key]!r}")
    return " ".join(flags)


def resolved_config():
    """The config as this machine runs it: defaults filled, devices and threads resolved."""
    envs = {
        env: dict(
            spec,
            device=STUDY.device(env),
            threads=STUDY.threads(env),
            precisions=STUDY.precisions(env),
            batch_sizes=STUDY.batch_sizes(env),
            batch_sizes_by_model={m: STUDY.batch_sizes(env, m) for m in STUDY.models},
            **STUDY.options(env),
        )
        for env, spec in config["envs"].items()
    }
    # models by name (the {model} of run ids); a user's factory entries kept apart
    study = dict(config["study"], models=STUDY.models)
    study["model_specs"] = {
        m: {
            "factory": s.factory,
            "image_size": STUDY.image_size(m),
            "num_classes": STUDY.num_classes(m),
            "kwargs": dict(s.kwargs),
            "batch_sizes": list(s.batch_sizes) or None,
        }
        for m, s in STUDY.model_specs.items()
    }
    return dict(config, envs=envs, study=study, measure_envs=MEASURED)


# Per-job values for the rules: named functions rather than lambdas, as the
# Snakemake workflow catalog asks, so each is named, documented and reused.
def env_threads(wildcards):
    """The measured env's declared threads (every measurement runs with them)."""
    return STUDY.threads(wildcards.menv)


def job_threads(wildcards):
    """The cores a measured env's run holds: every process's threads (nproc x threads)."""
    return STUDY.job_threads(wildcards.menv)


def envs_measured_now():
    """Envs with a measurement to run that holds the env's threads (not env_info)."""
    return {
        job.wildcards_dict["menv"]
        for job in workflow.dag.needrun_jobs()
        if job.rule.resources.get("_cores") in (env_threads, job_threads)
    }


# The executor and --cores are known only when the jobs start (a dry run has neither):
# refuse a Slurm run without the profile's cluster: slurm (a --config on the command
# line replaces it) and the reverse, and a --cores below a measurement's threads.
onstart:
    problems = [slurm.executor_mismatch(workflow.executor_plugin.name, config)]
    if workflow.local_exec and not workflow.touch:  # --touch runs no job
        problems.append(STUDY.cores_shortfall(envs_measured_now(), workflow.cores))
    for problem in problems:
        if problem:
            raise WorkflowError(problem)


def env_device(wildcards):
    return STUDY.device(wildcards.menv)


def env_precisions(wildcards):
    """The precisions of the env's roofs and ncu self-test (ceilings.precisions added)."""
    return " ".join(STUDY.roof_precisions(wildcards.menv))


def env_declared_flags(wildcards):
    return declared_machine_flags(wildcards.menv)


def model_flags(wildcards):
    """The model's flags for complexity.py and the driver (torchvision name or factory)."""
    return " ".join(STUDY.model_args(wildcards.model))


def env_ncu_files(wildcards):
    """The ncu captures of one env (its interactive roofline draws their kernels)."""
    return [f for f in ncu_files() if f.startswith(f"results/{wildcards.env}/ncu/")]


def optional_files_flag(name):
    """A params function giving `--{name} <files>` when input `name` has files, else ''.

    Scripts take an absent flag as "none of these", e.g. a CPU-only study has no ncu.
    """

    def flag(wildcards, input):
        files = input.get(name)
        return f"--{name} {files}" if files else ""

    flag.__name__ = f"{name}_flag"
    return flag


def output_dir(name):
    """A params function giving the folder of output `name`."""

    def folder(wildcards, output):
        return os.path.dirname(output.get(name))

    folder.__name__ = f"{name}_dir"
    return folder
