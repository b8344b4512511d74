"""One study across a Slurm cluster (dnnroofline.study.cluster, rules/common.smk, profiles/slurm).

The first part checks the pure logic against sinfo text as real clusters print it. The
second runs a real Slurm: scripts/local_slurm.sh starts a one-node cluster on localhost
(munge, MariaDB + slurmdbd for sacct, slurmctld, slurmd; partitions debug and batch),
and the tiny study with two CPU envs, one per partition, runs through profiles/slurm.
That part needs root and Debian's slurm-wlm, slurmdbd, munge and mariadb-server (plus
snakemake-executor-plugin-slurm); without them it is skipped with the reason, except in
CI (CI set), where .ci/run installs them and a missing piece fails the test.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from workflow_helpers import BIN, ROOT, snakemake, write_config

from dnnroofline.errors import InputError
from dnnroofline.study import cluster
from dnnroofline.study.config import Study

# ---------------------------------------------------------------- pure logic

# `sinfo -h -N -o "%R|%c|%G|%f"` of a GPU cluster: two A100 nodes (GRES bound to
# sockets), an H100 node with two GRES, and CPU nodes of two sizes.
SINFO = """\
gpu-a100|64|gpu:a100:4(S:0-1)|a100,ib
gpu-a100|64|gpu:a100:4(S:0-1)|a100,ib
gpu-h100|96|gpu:h100:8(S:0,1),nvme:1|h100
cpu|32|(null)|(null)
cpu|128|(null)|bigmem
"""
PARTS = cluster.parse_sinfo(SINFO)
FORBIDDEN = {r"--partition[=\s]|-p\s": "partition", r"--mem[=\s]": "memory"}


def slurm_config(**envs):
    return {"cluster": "slurm", "envs": envs, "study": {}}


def refused(config, match, forbidden=FORBIDDEN):
    with pytest.raises(InputError, match=match):
        cluster.check_envs(config, PARTS, forbidden)


def test_parse_sinfo_reads_partitions_cpus_gres_and_features():
    assert sorted(PARTS) == ["cpu", "gpu-a100", "gpu-h100"]
    assert PARTS["gpu-a100"].cpus == [64, 64]
    assert PARTS["gpu-a100"].gres[0] == ("gpu", "a100", 4)
    assert set(PARTS["gpu-h100"].gres) == {("gpu", "h100", 8), ("nvme", None, 1)}
    assert PARTS["cpu"].gres == [] and PARTS["cpu"].features == {"bigmem"}
    assert cluster.parse_gres("gpu:2") == ("gpu", None, 2)
    assert cluster.parse_gres("gpu:a100") == ("gpu", "a100", 1)
    assert cluster.parse_gres("bw:10G") == ("bw", None, 10 * 1024**3)


def test_a_valid_study_passes_and_gets_node_cpus_and_job_resources():
    config = slurm_config(
        a100={
            "device": "cuda",
            "gpu_name": "A100",
            "slurm": {"partition": "gpu-a100", "gres": "gpu:a100:1", "constraint": "a100&ib"},
        },
        cpu={"device": "cpu", "threads": 16, "slurm": {"partition": "cpu", "extra": "--qos=hi"}},
        laptop={"device": "cpu"},  # no slurm block: copied in, not measured on the cluster
    )
    cluster.check_envs(config, PARTS, FORBIDDEN)
    assert cluster.node_cpus(config, PARTS) == {"a100": 64, "cpu": 32}
    measure = cluster.job_resources(config["envs"]["a100"]["slurm"], measurement=True)
    assert measure == {
        "slurm_partition": "gpu-a100",
        "gres": "gpu:a100:1",
        "constraint": "a100&ib",
        "slurm_extra": "--exclusive",
    }
    info = cluster.job_resources(config["envs"]["cpu"]["slurm"], measurement=False)
    assert info["slurm_extra"] == "--qos=hi" and info["gres"] is None
    assert cluster.job_resources(None, True)["slurm_extra"] == "--exclusive"


def test_unknown_partition_is_refused_with_what_sinfo_lists():
    refused(
        slurm_config(x={"device": "cpu", "slurm": {"partition": "gpu-a10"}}),
        r"envs\.x\.slurm\.partition: unknown partition 'gpu-a10' \(did you mean 'gpu-a100'.*"
        r"sinfo lists cpu, gpu-a100, gpu-h100",
    )


@pytest.mark.parametrize(
    "gres, match",
    [
        ('"gpu:1"', r"'\"gpu:1\"' is not a GRES Slurm accepts"),
        ("gpu:a100:1,nvme:1", r"'gpu:a100:1,nvme:1' is not a GRES"),
        ("gpu:a100:1:2", r"'gpu:a100:1:2' is not a GRES"),
        ("gpu:v100:1", r"'gpu:v100:1': no node of partition 'gpu-a100'.*gpu:a100:4"),
        ("gpu:a100:5", r"'gpu:a100:5': no node of partition 'gpu-a100'"),
        ("fpga:1", r"'fpga:1': no node"),
    ],
)
def test_a_gres_slurm_would_reject_is_refused(gres, match):
    env = {"device": "cuda", "slurm": {"partition": "gpu-a100", "gres": gres}}
    refused(slurm_config(g=env), r"envs\.g\.slurm\.gres: " + match)


def test_other_bad_slurm_blocks_are_refused_naming_key_and_value():
    cpu = {"partition": "cpu"}
    refused(
        slurm_config(c={"device": "auto", "slurm": cpu}),
        r"envs\.c\.device: 'auto' on an env that runs through Slurm",
    )
    refused(
        slurm_config(g={"device": "cuda", "slurm": {"partition": "gpu-a100"}}),
        r"envs\.g\.slurm\.gres: missing on a cuda env",
    )
    refused(
        slurm_config(c={"device": "cpu", "slurm": dict(cpu, constraint="bigmem&fast")}),
        r"envs\.c\.slurm\.constraint: 'bigmem&fast': 'fast' is not a feature of partition "
        r"'cpu' \(sinfo lists bigmem\)",
    )
    refused(
        slurm_config(c={"device": "cpu", "threads": 200, "slurm": cpu}),
        r"envs\.c\.threads: 200 is more than any node of partition 'cpu' has \(at most 128",
    )
    refused(
        slurm_config(c={"device": "cpu", "slurm": dict(cpu, extra="--mem=4G")}),
        r"envs\.c\.slurm\.extra: '--mem=4G' sets the memory, which the Slurm executor sets",
    )
    refused(
        slurm_config(c={"device": "cpu", "slurm": dict(cpu, extra="--oversubscribe")}),
        r"envs\.c\.slurm\.extra: '--oversubscribe' would let other jobs share",
    )
    refused(
        slurm_config(c={"device": "cpu", "slurm": dict(cpu, extra="--comment 'x")}),
        r"envs\.c\.slurm\.extra: .* does not parse",
    )
    refused(slurm_config(c={"device": "cpu"}), r"no env has a slurm block")


def test_extra_is_checked_against_the_executor_plugins_own_options():
    if importlib.util.find_spec("snakemake_executor_plugin_slurm") is None:
        pytest.skip("snakemake-executor-plugin-slurm is not installed (requirements-dev.txt)")
    from snakemake_executor_plugin_slurm.validation import get_forbidden_slurm_options

    env = {"device": "cpu", "slurm": {"partition": "cpu", "extra": "--gres=gpu:1"}}
    cluster.check_envs(slurm_config(c=env), PARTS, {})  # the refusal comes from the plugin's list
    refused(
        slurm_config(c=env),
        r"'--gres=gpu:1' sets the generic resources \(GRES\)",
        get_forbidden_slurm_options(),
    )


def test_parse_sacct_reads_the_executors_comments():
    text = (
        "7|batch|COMPLETED|1763895000|1763895009|9|60|/w/slurm|"
        "rule_train_wildcards_cpu_b_resnet18_fp32_2_1\n"
        "8|debug|CANCELLED by 0|1763895010|Unknown|0|60|/w/slurm|rule_metrics\n"
        "9|debug|PENDING|Unknown|Unknown|0|60|/w|\n"
    )
    train, metrics, pending = cluster.parse_sacct(text)
    assert (train["rule"], train["wildcards"]) == ("train", "cpu_b_resnet18_fp32_2_1")
    assert (train["start"], train["end"], train["elapsed"]) == (1763895000, 1763895009, 9)
    assert (metrics["rule"], metrics["wildcards"], metrics["state"]) == ("metrics", "", "CANCELLED")
    assert metrics["end"] is None and pending["start"] is None and pending["rule"] == ""


def test_warning_and_executor_mismatch():
    envs = {"a": {"device": "cpu", "slurm": {"partition": "cpu"}}, "b": {"device": "cpu"}}
    local = {"envs": envs}
    assert "envs.a.slurm ignored" in cluster.ignored_blocks_warning(local)
    assert cluster.ignored_blocks_warning(dict(local, cluster="slurm")) is None
    assert cluster.ignored_blocks_warning({"envs": {"b": envs["b"]}}) is None
    assert "add cluster=slurm" in cluster.executor_mismatch("slurm", local)
    assert "the executor is 'local'" in cluster.executor_mismatch("local", {"cluster": "slurm"})
    assert cluster.executor_mismatch("slurm", {"cluster": "slurm"}) is None
    assert cluster.executor_mismatch("local", local) is None


def test_study_on_slurm_measures_the_slurm_envs_with_their_nodes_cpus():
    config = {
        "envs": {
            "a100": {"device": "cuda", "slurm": {"partition": "gpu-a100", "gres": "gpu:1"}},
            "cpu": {"device": "cpu", "precisions": ["bf16"], "slurm": {"partition": "cpu"}},
            "laptop": {"device": "cpu", "threads": 4},
        },
        "study": {"models": ["resnet18"], "precisions": ["fp32"], "batch_sizes": [8]},
    }
    cpus = cluster.node_cpus(config, PARTS)
    # this host (no GPU, a CPU without bf16) is not the nodes: neither matters on Slurm
    study = Study(config, machine_device="cpu", cpu_count=2, cpu_flags=[], cluster_cpus=cpus)
    assert study.measure_envs == ["a100", "cpu"]
    assert study.threads("a100") == 64 and study.threads("cpu") == 32
    local = Study(config, machine_device="cpu", cpu_count=2, cpu_flags=["avx512_bf16"])
    assert local.measure_envs == ["cpu", "laptop"] and local.threads("cpu") == 2


def local_rules() -> set[str]:
    """The Snakefile's localrules: on a cluster they run on the submitting host."""
    block = re.search(r"^localrules:\n((?:    \w+,\n)+)", (ROOT / "Snakefile").read_text(), re.M)
    return {name.strip(",") for name in block.group(1).split()}


def test_every_rule_is_a_slurm_job_or_runs_on_the_submitting_host():
    """A new analysis rule must be listed in localrules; a measurement, env_info (which
    reads the node) and complexity (a model at full batch) must not."""
    from test_conda_envs import rule_blocks

    local = local_rules()
    assert local >= {"all", "measure", "metrics", "report_sections", "plot_roofline_all"}
    assert not local & (MEASUREMENTS | {"env_info", "complexity"})
    every_rule = {name for _, name, _ in rule_blocks()} | {"all", "measure"}
    assert every_rule - local == MEASUREMENTS | {"env_info", "complexity"}


# ---------------------------------------------------------------- a real Slurm

SCRIPT = ROOT / "scripts" / "local_slurm.sh"
IN_CI = bool(os.environ.get("CI"))
TOOLS = ["munged", "mariadbd", "slurmdbd", "slurmctld", "slurmd", "sinfo", "sacct", "sbatch"]
PROFILE = str(ROOT / "profiles" / "slurm")
WRONG_TARGET = "results/cpu_b/env_info.json"
# the executor's status polling: 1 s instead of 40 s before the first check
FAST_STATUS = ["--slurm-init-seconds-before-status-checks", "1"]


def measurement_rules() -> set[str]:
    """The rules that hold the measurement resource (they time something): read from the
    rules themselves, so a new measurement is checked without editing this list."""
    from test_conda_envs import rule_blocks

    return {name for _, name, body in rule_blocks() if re.search(r"^\s+measurement=1,", body, re.M)}


MEASUREMENTS = measurement_rules()
# the tiny study, two CPU envs, one per partition of the one node
TWO_ENVS = {
    "envs": {
        "cpu_a": {"device": "cpu", "threads": 1, "slurm": {"partition": "debug"}},
        "cpu_b": {"device": "cpu", "threads": 1, "slurm": {"partition": "batch"}},
    },
    "study": {
        "models": ["resnet18"],
        "precisions": ["fp32"],
        "batch_sizes": [2],
        "runs": 1,
        "warmup_iters": 1,
        "iters": 3,
        "image_size": 32,
        "data": "synthetic",
    },
    "ceilings": {"quick": True},
    # traces are measurements like the runs (tests/test_traces.py): left out, two fewer
    # torch starts per env on each of the two machines this test runs the study on
    "traces": {"enabled": False},
}


def why_no_slurm() -> str | None:
    if os.geteuid() != 0:
        return "the local Slurm needs root"
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        return f"no {', '.join(missing)} (apt-get install slurm-wlm slurmdbd munge mariadb-server)"
    if importlib.util.find_spec("snakemake_executor_plugin_slurm") is None:
        return "no snakemake-executor-plugin-slurm (pip install -r requirements-dev.txt)"
    return None


def test_every_file_that_starts_the_local_slurm_is_one_work_unit():
    """make test's workers must never run two of these clusters at once (conftest.py)."""
    from conftest import LOCAL_SLURM_FILES, tests_taking, work_unit

    files = [path.name for path in Path(__file__).parent.glob("test_*.py")]
    users = tests_taking("slurm", files)
    for name, test in users:
        assert work_unit(f"tests/{name}::{test}") == "local_slurm"
    assert {name for name, _ in users} == LOCAL_SLURM_FILES


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    """A one-node Slurm on localhost for this module, stopped even when a test fails."""
    reason = why_no_slurm()
    if reason:
        if IN_CI:
            pytest.fail(f"CI must run the Slurm test, but {reason}: .ci/run installs it")
        pytest.skip(reason)
    env = dict(os.environ, LOCAL_SLURM_DIR=str(tmp_path_factory.mktemp("slurm")))
    start = subprocess.run([str(SCRIPT), "start"], env=env, capture_output=True, text=True)
    try:
        assert start.returncode == 0, start.stdout + start.stderr
        yield env
    finally:
        subprocess.run([str(SCRIPT), "stop"], env=env, capture_output=True, timeout=120)


def sacct_jobs(workdir: Path | None = None) -> list[dict]:
    """The cluster's jobs (those run from workdir), as dnnroofline.study.cluster.parse_sacct."""
    out = subprocess.run(
        ["sacct", "-a", "-X", "-D", "-n", "-P", "-S", "2000-01-01", "-o", cluster.SACCT_FORMAT],
        env=dict(os.environ, SLURM_TIME_FORMAT="%s"),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    jobs = cluster.parse_sacct(out)
    return [j for j in jobs if workdir is None or Path(j["workdir"]) == workdir]


def outputs(workdir: Path) -> list[str]:
    """The study's result files, logs and Snakemake's benchmarks aside."""
    results = workdir / "results"
    return sorted(
        str(p.relative_to(results))
        for p in results.rglob("*")
        if p.is_file() and "logs" not in p.parts and "benchmarks" not in p.parts
    )


def metrics_rows(workdir: Path) -> list[tuple]:
    with open(workdir / "results" / "metrics.csv") as fh:
        keys = ("run_id", "env", "model", "precision", "batch_size", "status")
        return sorted(tuple(row[k] for k in keys) for row in csv.DictReader(fh))


def start_snakemake(workdir: Path, *args) -> subprocess.Popen:
    """workflow_helpers.snakemake, in the background. Its output goes to a file, not a
    pipe: a pipe that nobody reads while the test waits fills, and blocks Snakemake."""
    cmd = [str(BIN / "snakemake"), "-s", str(ROOT / "Snakefile"), "-d", str(workdir), *args]
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}", MPLBACKEND="Agg")
    log = tempfile.TemporaryFile("w+")  # noqa: SIM115 - closed by finish()
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, text=True)
    proc.log = log
    return proc


def finish(proc: subprocess.Popen) -> tuple[int, str]:
    """Wait for start_snakemake's process: its exit status and output."""
    proc.wait(timeout=600)
    with proc.log:
        proc.log.seek(0)
        return proc.returncode, proc.log.read()


@pytest.mark.slurm  # starts its daemons (munge, MariaDB, slurmctld, slurmd)
@pytest.mark.workflow
def test_the_study_runs_through_slurm_as_it_runs_here(slurm, tmp_path):
    """The tiny study through profiles/slurm; meanwhile (the Slurm run mostly waits on its
    jobs) the same config runs here, and an env whose nodes are not what it declares is
    sent to the cluster."""
    on_slurm, here, wrong = tmp_path / "slurm", tmp_path / "local", tmp_path / "wrong"
    for workdir in (on_slurm, here):
        write_config(workdir, TWO_ENVS)
    misdeclared = json.loads(json.dumps(TWO_ENVS))
    misdeclared["envs"]["cpu_b"]["cpu_name"] = "No Such CPU 9000"
    write_config(wrong, misdeclared)
    local = start_snakemake(here, "--cores", "2")
    refused = start_snakemake(wrong, "--workflow-profile", PROFILE, *FAST_STATUS, WRONG_TARGET)
    try:
        snakemake(on_slurm, "--workflow-profile", PROFILE, *FAST_STATUS, timeout=600)
    finally:
        (local_rc, local_log), (wrong_rc, wrong_log) = finish(local), finish(refused)
    assert local_rc == 0, local_log[-3000:]
    jobs = sacct_jobs(on_slurm)
    assert jobs and all(j["state"] == "COMPLETED" for j in jobs), jobs

    # every timed run was a Slurm job in its env's partition; env_info and ceilings too
    config = TWO_ENVS["envs"]
    runs = [j["wildcards"] for j in jobs if j["rule"] == "train"]
    assert sorted(runs) == ["cpu_a_resnet18_fp32_2_1", "cpu_b_resnet18_fp32_2_1"]
    for job in jobs:
        env = next((e for e in config if job["wildcards"].startswith(e + "_")), job["wildcards"])
        if job["rule"] in MEASUREMENTS | {"env_info"}:
            assert job["partition"] == config[env]["slurm"]["partition"], job
        else:  # complexity: the profile's default partition (unset: the cluster's, debug)
            assert (job["rule"], job["partition"]) == ("complexity", "debug"), job
    # the analysis ran on the submitting host: its localrules are no Slurm jobs
    slurm_rules = {"env_info", "ceilings", "efficiency", "train", "complexity"}
    assert {j["rule"] for j in jobs} == slurm_rules

    # no two measurements overlapped: neither their Slurm jobs nor their timed steps
    measured = sorted((j for j in jobs if j["rule"] in MEASUREMENTS), key=lambda j: j["start"])
    # per env: a timed run, the ceilings and the op-class sweep
    assert len(measured) == 6, [j["rule"] for j in measured]
    for first, then in zip(measured, measured[1:], strict=False):
        assert then["start"] >= first["end"], (first, then)
    spans = sorted(
        (r["start_time"], r["end_time"])
        for r in (json.loads(p.read_text()) for p in on_slurm.glob("results/*/runs/*.json"))
    )
    assert len(spans) == 2 and spans[0][1] <= spans[1][0], spans

    # the same files and rows as the same config run here, and the report builds
    # and on Slurm the list of jobs that did not complete: none
    assert outputs(on_slurm) == sorted([*outputs(here), "cluster_attempts.csv"])
    attempts = (on_slurm / "results" / "cluster_attempts.csv").read_text()
    assert attempts == ",".join(cluster.ATTEMPT_COLUMNS) + "\n"
    assert metrics_rows(on_slurm) == metrics_rows(here)
    assert {r[-1] for r in metrics_rows(on_slurm)} == {"ok"}
    snakemake(on_slurm, "--workflow-profile", PROFILE, "--report", "results/report.html")
    assert (on_slurm / "results" / "report.html").stat().st_size > 100_000
    # Slurm's own log of each job sits beside the study's logs
    assert list(on_slurm.glob("results/logs/slurm/rule_train/cpu_b_*/*.log"))

    # the node is not what env cpu_b declares: its job refuses there, and files nothing
    assert wrong_rc != 0, wrong_log[-3000:]
    [job] = sacct_jobs(wrong)
    assert (job["rule"], job["state"], job["partition"]) == ("env_info", "FAILED", "batch")
    log = wrong / f"results/logs/slurm/rule_env_info/cpu_b/{job['id']}.log"
    assert "Refusing to file results under the wrong machine" in log.read_text()
    assert not (wrong / WRONG_TARGET).exists()


@pytest.mark.slurm  # starts its daemons (munge, MariaDB, slurmctld, slurmd)
@pytest.mark.workflow
def test_bad_slurm_input_is_refused_before_any_job(slurm, tmp_path):
    before = len(sacct_jobs())
    cases = [
        ({"partition": "gpu"}, "envs.cpu_b.slurm.partition: unknown partition 'gpu'"),
        ({"partition": "batch", "gres": "gpu:a100:1"}, "envs.cpu_b.slurm.gres: 'gpu:a100:1'"),
        ({"partition": "batch", "gres": "gpu::1"}, "'gpu::1' is not a GRES Slurm accepts"),
    ]
    for block, message in cases:
        config = json.loads(json.dumps(TWO_ENVS))
        config["envs"]["cpu_b"]["slurm"] = block
        write_config(tmp_path, config)
        run = snakemake(tmp_path, "--workflow-profile", PROFILE, *FAST_STATUS, check=False)
        assert run.returncode != 0 and message in run.stderr + run.stdout, run.stderr[-2000:]
    # the Slurm executor without the profile's cluster: slurm is refused too
    write_config(tmp_path, TWO_ENVS)
    run = snakemake(tmp_path, "--executor", "slurm", "--jobs", "2", check=False)
    assert run.returncode != 0 and "add cluster=slurm" in run.stderr + run.stdout
    assert len(sacct_jobs()) == before
    assert not (tmp_path / "results").exists()


@pytest.mark.slurm  # starts its daemons (munge, MariaDB, slurmctld, slurmd)
@pytest.mark.workflow
def test_the_one_machine_example_plans_on_the_local_slurm(slurm, tmp_path):
    """docs/cluster.md's try-it-on-one-machine lines: the default config plus the example."""
    shutil.copytree(ROOT / "config", tmp_path / "config")
    example = str(ROOT / "config" / "examples" / "local_slurm.yaml")
    out = snakemake(tmp_path, "--workflow-profile", PROFILE, "--configfile", example, "-n").stdout
    counts = dict(re.findall(r"^(\w+)\s+(\d+)$", out.split("Job stats:")[1], re.M))
    assert (counts["train"], counts["env_info"], counts["ceilings"]) == ("4", "2", "2")
