# dnn-roofline: the DNN training roofline study. See README.md and docs/contracts.md.
import sys
from pathlib import Path

import yaml
from snakemake.utils import min_version, validate

min_version("9.19")

sys.path.insert(0, str(Path(workflow.basedir) / "workflow" / "scripts"))

from dnnroofline.errors import InputError
from dnnroofline.study.schema import check_integers, schema_error_message
from dnnroofline.study.config import check_config_files


configfile: "config/config.yaml"


# A bad config stops here, before any job, with one line naming the key and value.
try:
    check_config_files(workflow.configfiles, yaml.compose)
    validate(config, "config/schema.yaml")
    check_integers(
        config, yaml.safe_load(Path(workflow.basedir, "config/schema.yaml").read_text())
    )
except InputError as err:
    raise WorkflowError(f"Invalid config: {err}") from None
except WorkflowError as err:
    if err.__context__ is None or not hasattr(err.__context__, "absolute_path"):
        raise
    raise WorkflowError(schema_error_message(err.__context__)) from None


report: "report/workflow.rst"


include: "rules/cluster.smk"
include: "rules/common.smk"
include: "rules/machine.smk"
include: "rules/complexity.smk"
include: "rules/train.smk"
include: "rules/ncu.smk"
include: "rules/perf.smk"
include: "rules/traces.smk"
include: "rules/aggregate.smk"
include: "rules/plots.smk"
include: "rules/report.smk"


rule all:
    default_target: True
    input:
        all_targets() + ncu_targets() + perf_files() + trace_targets(),


# `snakemake measure`: the measurements alone (no complexity, analysis, plots or report),
# for a machine that only measures: its results/{env}/ copied next to a study elsewhere
# is read there as it is (make gpu-wheels PART=measure: the packages this needs).
rule measure:
    input:
        measure_targets(),
