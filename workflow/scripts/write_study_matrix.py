"""The study as resolved here: results/study_config.json and results/study_matrix.json.

Run by the study_matrix rule's ``script:`` directive, which hands over the resolved
config and the run matrix as ``snakemake.params``. Neither a ``run:`` block nor a command
line will do: Snakemake (9.27) runs a ``run:`` job in a fresh process that reads the
Snakefile again without ``--replace-workflow-config`` (config/config.yaml's ``local`` env
came back into a GPU-only config, which was refused), and one command-line argument holds
at most 128 KiB (a 2,000-run matrix as JSON is 170 KiB).
"""

from pathlib import Path

from dnnroofline.io import write_json_atomic

job = snakemake  # noqa: F821 - the object Snakemake's script directive defines
runs = job.params.runs
write_json_atomic(job.output.config, job.params.config)
write_json_atomic(job.output.matrix, runs)
measured = sum(1 for r in runs if r["measured_here"])
Path(job.log[0]).write_text(f"{len(runs)} runs in the matrix, {measured} measured here\n")
