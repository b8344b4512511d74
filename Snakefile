# dnn-roofline: the DNN training roofline study. See README.md and docs/contracts.md.
import sys
from pathlib import Path

from snakemake.utils import min_version

min_version("9.19")

# The rules' helpers import the package, which runs from the checkout (not installed).
sys.path.insert(0, str(Path(workflow.basedir) / "workflow" / "scripts"))

from dnnroofline.errors import InputError
from dnnroofline.study.schema import checked_config


configfile: "config/config.yaml"


# A bad config stops here, before any job, with one line naming the file or key and the
# value; the schema's defaults, which the rules read, are then filled in.
try:
    checked_config(
        config, Path(workflow.basedir, "config/schema.yaml"), workflow.configfiles
    )
except InputError as err:
    raise WorkflowError(f"Invalid config: {err}") from None


report: "report/workflow.rst"


# Every helper of the rules is in common.smk, included first: the glue that needs Snakemake
# (config, workflow, wildcards) around the logic, which lives in dnnroofline.study (targets,
# copied, jobs, cluster) and is tested without Snakemake. The rule files define rules only,
# so their order does not matter.
include: "rules/common.smk"
include: "rules/machine.smk"
include: "rules/complexity.smk"
include: "rules/train.smk"
include: "rules/ncu.smk"
include: "rules/perf.smk"
include: "rules/traces.smk"
include: "rules/aggregate.smk"
include: "rules/perfmodel.smk"
include: "rules/compare.smk"
include: "rules/plots.smk"
include: "rules/report.smk"


# On a Slurm cluster these run on the submitting host, not as jobs: each reads small files
# and takes seconds, where a job can wait in the queue for minutes (and every Slurm job
# starts Snakemake again on its node). Measurements, env_info and complexity (a model
# built at full batch) stay Slurm jobs.
localrules:
    all,
    measure,
    study_matrix,
    metrics,
    roofline_points,
    predictions,
    prediction_check,
    ncu_vs_analytic,
    trace_section,
    report_sections,
    cluster_attempts,
    plot_roofline_env,
    plot_roofline_all,
    plot_interactive_env,
    plot_interactive_all,
    plot_throughput,
    plot_energy_roofline,
    plot_parity,
    plot_kernel_roofline,
    plot_hierarchical_roofline,
    compare,
    plot_compare_roofline,
    compare_section,


rule all:
    default_target: True
    input:
        TARGETS.all_targets(),


# `snakemake measure`: the measurements alone (no complexity, analysis, plots or report),
# for a machine that only measures: its results/{env}/ copied next to a study elsewhere
# is read there as it is (make gpu-wheels PART=measure: the packages this needs).
rule measure:
    input:
        TARGETS.measure_targets(),
