"""results/cluster_attempts.csv: the study's Slurm jobs that did not complete.

Run by the cluster_attempts rule's ``script:`` directive on the submitting host. The
rows (dnnroofline.study.cluster.cluster_attempts, read from sacct when the Snakefile is
parsed) come as ``snakemake.params.attempts``: a new failure changes them, and so
re-runs this rule and the report at the next ``snakemake``.
"""

import csv
import io
from pathlib import Path

from dnnroofline.io import write_text_atomic

job = snakemake  # noqa: F821 - the object Snakemake's script directive defines
rows = job.params.attempts
text = io.StringIO()
# the columns come as a param (dnnroofline.study.cluster.ATTEMPT_COLUMNS): importing that
# module here would bring the Slurm plugin's imports into this rule's env
writer = csv.DictWriter(text, fieldnames=list(job.params.columns), lineterminator="\n")
writer.writeheader()
writer.writerows(rows)
write_text_atomic(job.output[0], text.getvalue())
Path(job.log[0]).write_text(f"{len(rows)} Slurm job(s) of this study did not complete\n")
