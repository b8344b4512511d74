# Every helper of the rules, in one file that the Snakefile includes before the rules:
# the study and its targets, the Slurm wiring, per-job values and the one way a rule runs
# an entry script. The study logic itself lives in dnnroofline.study.
import glob
import json
import os
import shlex
import subprocess

from snakemake.logging import logger

from dnnroofline.study import cluster as slurm
from dnnroofline.measure.envinfo import check_copied_env
from dnnroofline.errors import InputError
from dnnroofline.report import (
    COMPARE_CATEGORY,
    COMPARE_SECTION,
    SECTION_NAMES,
    section_file,
)
from dnnroofline.report import SECTIONS as REPORT_SECTIONS
from dnnroofline.study.precisions import PRECISIONS
from dnnroofline.model.op_classes import STEP_VARIANTS, step_variant
from dnnroofline.study.config import Study, alternation
from dnnroofline.study.identity import (
    CONFIG_KEY_PATTERN,
    complexity_path,
    config_key,
    run_id,
)

# A config's file stem as a wildcard pattern, spelled once (dnnroofline.study.identity):
# {env} in the rules that read any env's results, {menv} in those that measure here.
CONFIG_KEY = CONFIG_KEY_PATTERN
MEASURED_KEY = CONFIG_KEY_PATTERN.replace("{env}", "{menv}")


def measured_path(folder, suffix):
    """results/{menv}/<folder>/<config key><suffix>: a measuring rule's file pattern."""
    return f"results/{{menv}}/{folder}/{MEASURED_KEY}{suffix}"


def env_path(folder, suffix):
    """results/{env}/<folder>/<config key><suffix>: a config's file in any env's results."""
    return f"results/{{env}}/{folder}/{CONFIG_KEY}{suffix}"


def driver_run_id(kind):
    """A params function giving --run-id of a measuring job's driver: the run's id for a
    timed run (kind "run"), else the config key and the job's kind (_ncu, _perf, _trace).
    """

    def run_id_of(wildcards):
        key = (wildcards.menv, wildcards.model, wildcards.precision, wildcards.batch)
        return (
            run_id(*key, wildcards.run)
            if kind == "run"
            else f"{config_key(*key)}_{kind}"
        )

    run_id_of.__name__ = f"{kind}_run_id"
    return run_id_of


# ---- Slurm: where each env's jobs go. profiles/slurm sets config cluster: slurm; the
# envs' slurm blocks are then checked against sinfo before any job is submitted, and each
# measurement job gets its env's partition, gres and constraint, and its node alone.
def slurm_partitions():
    """This cluster's partitions, as sinfo lists them."""
    cmd = ["sinfo", "-h", "-N", "-o", slurm.SINFO_FORMAT]
    try:
        out = subprocess.run(
            cmd, capture_output=True, text=True, check=True, timeout=60
        )
    except FileNotFoundError:
        raise WorkflowError(
            "config cluster: slurm, but this host has no sinfo: run the study from a "
            "host of the Slurm cluster (a login node)"
        ) from None
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as err:
        detail = (getattr(err, "stderr", None) or str(err)).strip()
        raise WorkflowError(
            f"config cluster: slurm, but sinfo failed: {detail}"
        ) from None
    return slurm.parse_sinfo(out.stdout)


def executor_forbidden_options():
    """The sbatch options the executor plugin sets itself (refused in slurm.extra)."""
    try:
        from snakemake_executor_plugin_slurm.validation import (
            get_forbidden_slurm_options,
        )
    except ImportError:
        raise WorkflowError(
            "config cluster: slurm needs Snakemake's Slurm executor plugin: "
            "pip install snakemake-executor-plugin-slurm"
        ) from None
    return get_forbidden_slurm_options()


if slurm.is_slurm(config):
    SLURM_PARTITIONS = slurm_partitions()
    try:
        slurm.check_envs(config, SLURM_PARTITIONS, executor_forbidden_options())
    except InputError as err:
        raise WorkflowError(f"Invalid config: {err}") from None
    CLUSTER_CPUS = slurm.node_cpus(config, SLURM_PARTITIONS)
else:
    CLUSTER_CPUS = None
    if slurm.ignored_blocks_warning(config):
        logger.warning(slurm.ignored_blocks_warning(config))


def on_env_nodes(exclusive):
    """Resources that send a job of env {menv} to its partition with its gres and
    constraint; an exclusive job (a measurement) holds its node alone. Empty off Slurm.
    """
    if CLUSTER_CPUS is None:
        return {}

    def resource(key):
        def value(wildcards):
            block = config["envs"][wildcards.menv].get("slurm")
            return slurm.job_resources(block, exclusive)[key]

        return value

    keys = ("slurm_partition", "gres", "constraint", "slurm_extra")
    return {key: resource(key) for key in keys}


# ---- The study


def known_models():
    # torchvision's registry, kept per install: importing torchvision costs seconds.
    from dnnroofline.study.models import torchvision_classifiers

    return torchvision_classifiers()


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
    STUDY = Study.here(
        config,
        known_models=known_models() if CHECK_MODELS else None,
        cluster_cpus=CLUSTER_CPUS,
    )
    if CHECK_MODELS:
        check_custom_models(STUDY)
except InputError as err:
    raise WorkflowError(str(err)) from None

MEASURED = STUDY.measure_envs
ENVS = list(config["envs"])


wildcard_constraints:
    env=alternation(ENVS),
    menv=alternation(MEASURED),
    # a model the predict: block alone names has an op inventory and a complexity file
    model=alternation(STUDY.models + STUDY.what_if_models),
    precision=alternation(PRECISIONS),
    batch=r"\d+",
    run=r"\d+",


def entry_script(name):
    """A stage's entry script, relative to the working directory: params are part of a
    job's provenance, and the checkout's location is not, so a moved checkout re-runs
    no finished measurement (an absolute path did, at the second snakemake after the move).
    Not named ``script``: that would hide the function behind Snakemake's script: directive.
    """
    return os.path.relpath(os.path.join(workflow.basedir, "workflow", "scripts", name))


def logged(command):
    """The shell command of a rule: its entry script writes to the job's log; a failure
    shows the log's last lines on the terminal too (the log keeps the rest)."""
    return f"{command} > {{log}} 2>&1 || (tail -n 5 {{log}} >&2; exit 1)"


def ncu_timeout_flag():
    """--timeout of the ncu stages: ncu.pass_timeout_s, unset: each stage's own default."""
    seconds = config["ncu"].get("pass_timeout_s")
    return "" if seconds is None else f"--timeout {seconds}"


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
    return [complexity_path(m, b) for m, b in STUDY.complexity_keys()]


def ceilings_files():
    return [f"results/{env}/ceilings.json" for env in reported_envs()]


def benchmark_files():
    """Benchmark TSVs read by the report's "what the study itself cost".

    Not the TSVs of the timed runs (their run JSONs give that stage), env_info or perf:
    a finished job whose TSV is missing (results made before it had one) would re-run
    to write it, a measurement re-run for a report figure.
    """
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
    return files + trace_benchmark_files()


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
        + [f"results/report_sections/{section_file(name)}" for name in SECTION_NAMES]
        + efficiency_files()
        + [
            "results/predictions.csv",
            "results/prediction_check.csv",
            "results/plots/prediction_parity.svg",
        ]
        + compare_targets()
    )


# ---- Before and after: this study compared with a baseline (config compare:). The
# baseline's files are inputs of the comparison alone: a baseline changed since its outputs
# re-runs the comparison (and its plot and page), never a measurement or any other file of
# this study, and no rule writes into the baseline's folder.

COMPARE_FILES = {
    name: f"results/{name}.csv"
    for name in (
        "compare",
        "compare_unmatched",
        "compare_fingerprints",
        "compare_ops",
        "compare_kernels",
        "compare_roofs",
    )
}
COMPARE_PLOT = "results/plots/compare_roofline"


def compare_targets():
    """The comparison's tables, its arrows plot and its report page: only with a compare:
    block."""
    if STUDY.baseline is None:
        return []
    return (
        list(COMPARE_FILES.values())
        + [f"{COMPARE_PLOT}.png", f"{COMPARE_PLOT}.svg"]
        + [f"results/report_sections/{section_file(COMPARE_SECTION)}"]
    )


def compare_category():
    """The report category of the comparison's page and plot: "Compared with <label>"."""
    label = STUDY.baseline.label if STUDY.baseline is not None else "a baseline"
    return f"{COMPARE_CATEGORY} {label}"


def study_baseline():
    """The config's baseline (dnnroofline.study.baseline), or an error naming the key
    for a comparison asked of a study without one (results/compare.csv as a target)."""
    if STUDY.baseline is None:
        raise WorkflowError(
            "results/compare.csv compares this study with a baseline, and the config has no "
            "compare: block; add compare: {baseline: DIR} (see docs/compare.md)"
        )
    return STUDY.baseline


def here_or_absolute(path):
    """A baseline file as an input of the comparison: relative to the working directory
    where it lies under it (a baseline kept in the checkout, as CI's baseline/results/),
    absolute elsewhere."""
    path = os.path.abspath(path)
    rel = os.path.relpath(path)
    return path if rel.startswith(os.pardir) else rel


def flat_paths(*found):
    """The files among ``found`` that exist: each None (a file the baseline lacks), one
    path or a list of them."""
    out = []
    for item in found:
        if item is None:
            continue
        if isinstance(item, (str, os.PathLike)):
            if os.path.isfile(item):
                out.append(here_or_absolute(item))
        else:
            out += flat_paths(*item)
    return out


def baseline_files(wildcards):
    """Every file of the baseline that the comparison reads: its ledgers and resolved
    config, and per env its runs, fingerprint, roofs, trace tables and ncu captures."""
    b = study_baseline()
    files = flat_paths(b.metrics(), b.roofline_points(), b.study_config())
    for env in b.envs:
        files += flat_paths(
            b.run_files(env),
            b.env_info(env),
            b.ceilings(env),
            b.trace_ops(env),
            b.ncu_files(env),
        )
    return sorted(set(files))


def baseline_label(wildcards):
    """--label of the comparison's plot and page: compare.label, else the baseline's
    folder name (as dnnroofline.study.baseline resolves it), quoted for the shell."""
    return shlex.quote(study_baseline().label)


def baseline_points(wildcards):
    """The baseline's roofline_points.csv (the arrows plot starts from its points), none
    where the baseline lacks it."""
    return flat_paths(study_baseline().roofline_points())


def baseline_points_flag(wildcards, input):
    """--baseline-points of the arrows plot, '' without the file (its points drawn plain)."""
    files = input.get("baseline_points")
    return f"--baseline-points {files}" if files else ""


# ---- The model's inputs: microbenchmarks and op inventories, never a timed run


def efficiency_files():
    """The efficiency tables of every env: made here for the envs measured here, read
    where a copied env has one (one without: its ceilings.json gives the tables)."""
    files = [f"results/{env}/efficiency.json" for env in MEASURED]
    for env in copied_envs():
        path = f"results/{env}/efficiency.json"
        if os.path.exists(path):
            files.append(path)
    return files


def env_step_variant(env):
    """The step variant of an env's op inventories (dnnroofline.model.op_classes): its
    device (mps, whose kernels the recorder cannot dispatch, is recorded as cpu) and its
    channels_last."""
    return step_variant(STUDY.device(env), STUDY.channels_last(env))


def what_if_step_variant(w):
    """A what-if's step variant: its env's, or on a datasheet GPU cuda, in the memory
    format of the env whose tables it borrows."""
    if w.gpu is None:
        return env_step_variant(w.env)
    return step_variant("cuda", STUDY.channels_last(w.tables_env))


def predicted_points():
    """(model, precision, batch, step variant) of every point predicted: the study's
    and the what-ifs'."""
    points = {
        (c.model, c.precision, c.batch, env_step_variant(c.env))
        for c in STUDY.configs()
    }
    points |= {
        (w.model, w.precision, w.batch, what_if_step_variant(w)) for w in STUDY.what_ifs
    }
    return sorted(points)


def inventory_steps():
    """Every (precision, step variant) some predicted point is in, in their orders: each
    complexity job writes the inventories of them all."""
    predicted = {(precision, step) for _, precision, _, step in predicted_points()}
    return [(p, s) for p in PRECISIONS for s in STEP_VARIANTS if (p, s) in predicted]


INVENTORY_STEPS = inventory_steps()


def inventory_path(model, precision, batch, step):
    return f"results/complexity/{model}_{precision}_bs{batch}_{step}_ops.json"


def inventory_flags(wildcards, output):
    """complexity.py's --inventory PRECISION:STEP=PATH for each inventory the job writes."""
    pairs = zip(INVENTORY_STEPS, output.inventories, strict=True)
    return " ".join(f"--inventory {p}:{step}={path}" for (p, step), path in pairs)


def inventory_files():
    """The op inventory of every point predicted, in the step variant of its env."""
    return sorted({inventory_path(*point) for point in predicted_points()})


def predicted_complexity_files():
    """The complexity JSON of every point predicted (what-ifs included)."""
    keys = {(model, batch) for model, _, batch, _ in predicted_points()}
    return [complexity_path(m, b) for m, b in sorted(keys)]


def measure_targets():
    """Every measurement of the envs measured here, and nothing made from them: the
    fingerprint, roofs, efficiency tables, timed runs, traces, the ncu self-test and
    captures, perf counts.
    """
    files = [
        f"results/{env}/{name}.json"
        for env in MEASURED
        for name in ("env_info", "ceilings")
    ]
    files += [f"results/{env}/efficiency.json" for env in MEASURED]
    files += [run_path(r) for r in STUDY.runs(MEASURED)]
    files += [f"results/{env}/ncu/selftest.json" for env in STUDY.cuda_envs_measured()]
    files += [
        f"results/{c.env}/ncu/{c.config_key}.json" for c in STUDY.profiled_configs()
    ]
    return files + trace_files() + perf_files()


# ---- Targets of the ncu, perf and trace rules


def ncu_configs():
    """Every config with an ncu capture: CUDA envs measured here, and captures
    copied in from other machines (results/{env}/ncu/*.json of a copied env)."""
    configs = STUDY.profiled_configs()
    for env in copied_envs():
        by_key = {c.config_key: c for c in STUDY.configs([env])}
        for path in sorted(glob.glob(f"results/{env}/ncu/*.json")):
            key = os.path.basename(path).removesuffix(".json")
            if key in by_key:
                configs.append(by_key[key])
    return configs


def ncu_targets():
    files = []
    for c in ncu_configs():
        for kind in ("kernels", "hierarchical"):
            files += [
                f"results/plots/kernels/roofline_{kind}_{c.config_key}.{ext}"
                for ext in ("png", "svg")
            ]
    return files + ["results/report_sections/ncu_vs_analytic.html"]


def selftest_files():
    """The counter self-test of each CUDA env measured here, and of copied envs that have one."""
    files = [f"results/{env}/ncu/selftest.json" for env in STUDY.cuda_envs_measured()]
    for env in copied_envs():
        path = f"results/{env}/ncu/selftest.json"
        if os.path.exists(path):
            files.append(path)
    return files


def perf_configs():
    """Configs with CPU counters (perf.enabled): those of the CPU envs measured here."""
    if not config["perf"]["enabled"]:
        return []
    return STUDY.configs([e for e in MEASURED if STUDY.device(e) == "cpu"])


def perf_files():
    return [f"results/{c.env}/perf/{c.config_key}.json" for c in perf_configs()]


def single_process_envs():
    """Envs measured here that run the step in one process: one trace file."""
    return [e for e in MEASURED if STUDY.nproc(e) == 1]


def data_parallel_envs():
    """Envs measured here with nproc > 1: a folder of traces, one per rank."""
    return [e for e in MEASURED if STUDY.nproc(e) > 1]


def trace_path(c):
    """A config's trace output: its trace file, or a data-parallel env's folder of them."""
    stem = f"results/{c.env}/traces/{c.config_key}"
    return f"{stem}.ranks" if STUDY.nproc(c.env) > 1 else f"{stem}.json"


def trace_file(wildcards):
    """--trace-out of the trace job: X.json, in a data-parallel env's folder, where rank
    i writes X.rank{i}.json (the run identity and the rank in each name)."""
    key = config_key(
        wildcards.menv, wildcards.model, wildcards.precision, wildcards.batch
    )
    stem = f"results/{wildcards.menv}/traces/{key}"
    return (
        f"{stem}.ranks/{key}.json"
        if STUDY.nproc(wildcards.menv) > 1
        else f"{stem}.json"
    )


def trace_configs():
    """Configs with a trace: every config measured here, and the traces copied in with
    another machine's results/{env}/traces/."""
    if not config["traces"]["enabled"]:
        return []
    configs = STUDY.configs(MEASURED)
    for env in copied_envs():
        for c in STUDY.configs([env]):
            if os.path.exists(f"results/{env}/traces/{c.config_key}.ops.json"):
                configs.append(c)
    return configs


def trace_tables():
    return [f"results/{c.env}/traces/{c.config_key}.ops.json" for c in trace_configs()]


def trace_files():
    """Trace files of the configs measured here (copied ones are read, never made)."""
    if not config["traces"]["enabled"]:
        return []
    files = []
    for c in STUDY.configs(MEASURED):
        stem = f"results/{c.env}/traces/{c.config_key}"
        files += [trace_path(c), f"{stem}.ops.json", f"{stem}.ops.csv"]
    return files


def trace_targets():
    """The trace files, and the report section made of them."""
    if not config["traces"]["enabled"]:
        return []
    return trace_files() + ["results/report_sections/traces.html"]


def trace_benchmark_files():
    """Benchmark TSVs of the trace jobs run here (the report's "what the study cost")."""
    if not config["traces"]["enabled"]:
        return []
    return [
        f"results/{c.env}/benchmarks/traces/{c.config_key}.tsv"
        for c in STUDY.configs(MEASURED)
    ]


# ---- Per-job values and the way a rule runs its entry scripts


def declared_machine_flags(env, device_flag="--device"):
    """What the env declares about its machine, as env_info.py flags (the measurements'
    machine check takes the device as --declared-device)."""
    spec = config["envs"][env]
    flags = [f"{device_flag} {spec['device']}"]
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


# The rules whose jobs hold their env's threads (threads: env_threads or job_threads).
HOLD_ENV_THREADS = {
    "ceilings",
    "efficiency",
    "train",
    "ncu",
    "perf",
    "trace",
    "trace_data_parallel",
}


def envs_measured_now():
    """Envs with a measurement to run that holds the env's threads (not env_info).

    Snakemake has no public API for the jobs about to run, and a check at each job
    (its threads function) would come after env_info had run: this is the one use of
    the DAG's needrun_jobs(), kept so a short --cores stops the study before any job.
    """
    return {
        job.wildcards_dict["menv"]
        for job in workflow.dag.needrun_jobs()
        if job.rule.name in HOLD_ENV_THREADS
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


def env_check_flags(wildcards):
    """The machine check's flags of a measurement (dnnroofline.measure.machine_check)."""
    return declared_machine_flags(wildcards.menv, device_flag="--declared-device")


def env_layout_flag(wildcards):
    """The efficiency sweep's layout flag: the memory format the env's runs use."""
    return "--channels-last" if STUDY.channels_last(wildcards.menv) else ""


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
