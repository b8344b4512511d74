# dnn-roofline: the DNN training roofline study. See README.md and docs/contracts.md.
import sys
from pathlib import Path

from snakemake.utils import min_version, validate

min_version("8.0")

sys.path.insert(0, str(Path(workflow.basedir) / "workflow" / "scripts"))


configfile: "config/config.yaml"


validate(config, "config/schema.yaml")


report: "report/workflow.rst"


include: "rules/common.smk"
include: "rules/machine.smk"
include: "rules/complexity.smk"
include: "rules/train.smk"
include: "rules/ncu.smk"
include: "rules/aggregate.smk"
include: "rules/plots.smk"
include: "rules/report.smk"


rule all:
    default_target: True
    input:
        all_targets(),
