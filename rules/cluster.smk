# Slurm: where each env's jobs go. profiles/slurm sets config cluster: slurm; the envs'
# slurm blocks are then checked against sinfo before any job is submitted, and each
# measurement job gets its env's partition, gres and constraint, and its node alone.
# The logic lives in dnnroofline.study.cluster; this file only runs sinfo and wires it in.
import subprocess

from snakemake.logging import logger

from dnnroofline.study import cluster as slurm


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
