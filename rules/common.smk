# The rules' glue, included first by the Snakefile: what needs Snakemake (config, workflow,
# wildcards, the logger, WorkflowError) around the package's logic, which is tested without
# it: the targets and result paths (dnnroofline.study.targets, .identity), copied results
# (.copied), the Slurm checks (.cluster), per-job values (.jobs).
import os
import shlex

from snakemake.logging import logger

from dnnroofline.errors import InputError
from dnnroofline.measure.envinfo import check_copied_env
from dnnroofline.estimate.op_classes import STEP_VARIANTS, step_variant
from dnnroofline.report import COMPARE_CATEGORY, COMPARE_SECTION, SECTION_FILES
from dnnroofline.report import SECTION_NAMES, section_file
from dnnroofline.report import SECTIONS as REPORT_SECTIONS
from dnnroofline.study import cluster as slurm, environment, jobs, targets
from dnnroofline.study.config import alternation
from dnnroofline.study.copied import find_copied_envs
from dnnroofline.study.identity import CONFIG_KEY_PATTERN, config_file, config_key
from dnnroofline.study.identity import inventory_path
from dnnroofline.study.precisions import PRECISIONS
from dnnroofline.study.targets import COMPARE_FILES, COMPARE_PLOT

# A config's file stem as a wildcard pattern: {env} in the rules that read any env's
# results, {menv} in those that measure here.
CONFIG_KEY = CONFIG_KEY_PATTERN
MEASURED_KEY = CONFIG_KEY_PATTERN.replace("{env}", "{menv}")


def measured_path(folder, suffix):
    """results/{menv}/<folder>/<config key><suffix>: a measuring rule's file pattern."""
    return config_file("{menv}", folder, MEASURED_KEY, suffix)


def env_path(folder, suffix):
    """results/{env}/<folder>/<config key><suffix>: a config's file in any env's results."""
    return config_file("{env}", folder, CONFIG_KEY, suffix)


# Errors of the package name the key, file or value: Snakemake shows them as one line.
try:
    # Slurm: profiles/slurm sets config cluster: slurm; only then is sinfo run, and the
    # envs' slurm blocks checked against it before any job is submitted
    CLUSTER_CPUS = slurm.cluster_cpus(config)
    if CLUSTER_CPUS is None and slurm.ignored_blocks_warning(config):
        logger.warning(slurm.ignored_blocks_warning(config))
    # a cluster job re-reads this file on its node: the submitting host checked the models
    on_node = workflow.remote_exec or workflow.subprocess_exec
    if not on_node:  # an earlier, killed snakemake's jobs: waited for or cancelled
        slurm.settle_previous_jobs(
            config, os.getcwd(), logger.warning, dry_run=workflow.dryrun
        )
    STUDY = jobs.load_study(config, check_models=not on_node, cluster_cpus=CLUSTER_CPUS)
    # the study's Slurm jobs that did not complete, from sacct (the report lists them)
    ATTEMPTS = None if on_node else slurm.cluster_attempts(config, os.getcwd())
    COPIED = find_copied_envs(config["envs"], STUDY.measure_envs, check_copied_env)
except InputError as err:
    raise WorkflowError(str(err)) from None

MEASURED = STUDY.measure_envs
ENVS = list(config["envs"])
TARGETS = targets.Targets(
    STUDY,
    tuple(COPIED),
    report_pages=SECTION_FILES,
    compare_page=section_file(COMPARE_SECTION),
    step_variant=step_variant,
    step_variants=STEP_VARIANTS,
)
INVENTORY_STEPS = TARGETS.inventory_steps()
for warning in TARGETS.copied_runs_warnings():
    logger.warning(warning)


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


# ---- Before and after (config compare:): the baseline's files are inputs of the
# comparison alone, and no rule writes into the baseline's folder.
def compare_category():
    """The report category of the comparison's page and plot: "Compared with <label>"."""
    label = STUDY.baseline.label if STUDY.baseline is not None else "a baseline"
    return f"{COMPARE_CATEGORY} {label}"


def study_baseline():
    """The config's baseline, or an error naming the key for a comparison asked of a
    study without one (results/compare.csv as a target)."""
    if STUDY.baseline is None:
        raise WorkflowError(
            "results/compare.csv compares this study with a baseline, and the config has no "
            "compare: block; add compare: {baseline: DIR} (see docs/compare.md)"
        )
    return STUDY.baseline


def baseline_files(wildcards):
    return targets.baseline_inputs(study_baseline())


def baseline_label(wildcards):
    """--label of the comparison's plot and page, quoted for the shell."""
    return shlex.quote(study_baseline().label)


def baseline_points(wildcards):
    """The baseline's roofline_points.csv, none where the baseline lacks it."""
    return targets.existing_paths(study_baseline().roofline_points())


# ---- Per-job values: named functions rather than lambdas, as the Snakemake workflow
# catalog asks, so each is named, documented and reused.
def env_threads(wildcards):
    """The measured env's declared threads (every measurement runs with them)."""
    return STUDY.threads(wildcards.menv)


def job_threads(wildcards):
    """The cores a measured env's run holds: every process's threads (nproc x threads)."""
    return STUDY.job_threads(wildcards.menv)


def envs_measured_now():
    """Envs with a measurement to run that holds the env's threads (not env_info).

    Snakemake has no public API for the jobs about to run, and a check at each job
    (its threads function) would come after env_info had run: this is the one use of
    the DAG's needrun_jobs(), kept so a short --cores stops the study before any job.
    """
    return {
        job.wildcards_dict["menv"]
        for job in workflow.dag.needrun_jobs()
        if job.rule.name in jobs.HOLD_ENV_THREADS
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


def run_args(wildcards):
    """Driver flags shared by timed runs, traces, ncu and perf."""
    return jobs.driver_flags(STUDY, *jobs.point_of(wildcards))


def trace_file(wildcards):
    """--trace-out of the trace job (a data-parallel env's ranks write beside it)."""
    return TARGETS.trace_out(wildcards.menv, config_key(*jobs.point_of(wildcards)))


def env_device(wildcards):
    return STUDY.device(wildcards.menv)


def env_precisions(wildcards):
    """The precisions of the env's roofs and ncu self-test (ceilings.precisions added)."""
    return " ".join(STUDY.roof_precisions(wildcards.menv))


def env_declared_flags(wildcards):
    return jobs.declared_machine_flags(config["envs"][wildcards.menv])


def env_measurement_flags(wildcards):
    """What the env declares, as the flags of its ceilings and sweep: its machine (the
    check of dnnroofline.measure.machine_check) and its environment variables."""
    spec = config["envs"][wildcards.menv]
    machine = jobs.declared_machine_flags(spec, device_flag="--declared-device")
    return " ".join([machine, *environment.flags(STUDY.environment(wildcards.menv))])


def env_layout_flag(wildcards):
    """The op-class sweep's layout flag: the memory format the env's runs use."""
    return "--channels-last" if STUDY.channels_last(wildcards.menv) else ""


def model_flags(wildcards):
    """The model's flags for complexity.py and the driver (torchvision name or factory)."""
    return " ".join(STUDY.model_args(wildcards.model))


def inventory_flags(wildcards, output):
    return jobs.inventory_flags(INVENTORY_STEPS, output.inventories)


def env_ncu_files(wildcards):
    return TARGETS.env_ncu_files(wildcards.env)


def optional_files_flag(name):
    """A params function giving `--{name} <files>` when input `name` has files, else ''
    (an underscore of the name a hyphen in the flag).

    Scripts take an absent flag as "none of these", e.g. a CPU-only study has no ncu.
    """

    def flag(wildcards, input):
        files = input.get(name)
        return f"--{name.replace('_', '-')} {files}" if files else ""

    flag.__name__ = f"{name}_flag"
    return flag


def output_dir(name):
    """A params function giving the folder of output `name`."""

    def folder(wildcards, output):
        return os.path.dirname(output.get(name))

    folder.__name__ = f"{name}_dir"
    return folder
