"""Faults on a Slurm cluster (issue 39): a measuring job cancelled while it runs, and a
second study started into a results folder that a first one is filling.

The first part checks dnnroofline.study.cluster's reading of sacct on crafted output.
The second injects each fault with Slurm's own commands into the tiny study running on
the one-node Slurm of scripts/local_slurm.sh (tests/test_cluster.py's fixture: skipped
without root and the Slurm packages, failed instead in CI).
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
from test_cluster import (
    FAST_STATUS,
    MEASUREMENTS,
    PROFILE,
    finish,
    metrics_rows,
    sacct_jobs,
    slurm,  # noqa: F401 - the module's local Slurm (a pytest fixture)
    start_snakemake,
)
from workflow_helpers import write_config

from dnnroofline.report.analysis import analysis_section
from dnnroofline.study import cluster

# ---------------------------------------------------------------- pure logic

# `sacct -X -n -P -o SACCT_FORMAT` with SLURM_TIME_FORMAT=%s: the study's jobs from /w,
# another folder's, a job of no rule (sbatch by hand), and one still running
SACCT = """\
12|debug|CANCELLED by 0|1763895010|1763895014|4|/w|rule_train_wildcards_cpu_a_resnet18_fp32_2_1
10|debug|COMPLETED|1763895000|1763895009|9|/w|rule_env_info_wildcards_cpu_a
13|batch|TIMEOUT|1763895020|1763895080|60|/w|rule_ceilings_wildcards_cpu_a
14|debug|NODE_FAIL|1763895090|1763895095|5|/w|rule_complexity_wildcards_resnet18_2
15|debug|FAILED|1763895100|1763895101|1|/w/|rule_metrics
16|debug|CANCELLED by 0|1763895100|1763895101|1|/elsewhere|rule_train_wildcards_x_1
17|debug|CANCELLED by 0|1763895100|1763895101|1|/w|
18|debug|RUNNING|1763895100|Unknown|3|/w|rule_train_wildcards_cpu_a_resnet18_fp32_2_2
19|debug|REQUEUED|1763895100|1763895101|1|/w|rule_train_wildcards_cpu_a_resnet18_fp32_2_3
"""


def test_failed_attempts_are_the_folders_rule_jobs_that_did_not_complete():
    attempts = cluster.failed_attempts(cluster.parse_sacct(SACCT), "/w")
    assert [(a["job_id"], a["rule"], a["state"]) for a in attempts] == [
        (12, "train", "CANCELLED"),
        (13, "ceilings", "TIMEOUT"),
        (14, "complexity", "NODE_FAIL"),
        (15, "metrics", "FAILED"),
    ]
    assert set(attempts[0]) == set(cluster.ATTEMPT_COLUMNS)
    assert attempts[0]["wildcards"] == "cpu_a_resnet18_fp32_2_1"
    assert (attempts[0]["partition"], attempts[0]["start"], attempts[0]["end"]) == (
        "debug",
        1763895010,
        1763895014,
    )
    assert attempts[3]["wildcards"] == ""
    assert cluster.failed_attempts(cluster.parse_sacct(SACCT), "/nowhere") == []


def test_the_attempts_columns_are_the_documented_ones():
    from test_aggregate import contract_columns

    assert contract_columns("results/cluster_attempts.csv") == list(cluster.ATTEMPT_COLUMNS)


def test_cluster_attempts_runs_sacct_only_on_slurm():
    def no_sacct():
        raise AssertionError("sacct run off Slurm")

    assert cluster.cluster_attempts({"envs": {}}, "/w", sacct=no_sacct) is None
    found = cluster.cluster_attempts({"cluster": "slurm"}, "/w", sacct=lambda: SACCT)
    assert [a["job_id"] for a in found] == [12, 13, 14, 15]


def test_the_report_lists_the_jobs_that_did_not_complete():
    import pandas as pd

    attempts = pd.DataFrame(cluster.failed_attempts(cluster.parse_sacct(SACCT), "/w"))
    config = {"envs": {"cpu_a": {"device": "cpu"}}, "study": {}}
    page = analysis_section(config, pd.DataFrame(), pd.DataFrame(), cluster_attempts=attempts)
    table = page.split("Slurm jobs that did not complete")[1].split("<h2>Missing runs")[0]
    assert "4 Slurm job(s) of this study ended without completing" in table
    assert re.search(
        r"<td[^>]*>12</td><td>train</td><td>cpu_a_resnet18_fp32_2_1</td>"
        r"<td>CANCELLED</td>",
        table,
    ), table
    assert "<td>TIMEOUT</td>" in table and "<td>NODE_FAIL</td>" in table
    none = analysis_section(config, pd.DataFrame(), pd.DataFrame(), cluster_attempts=attempts[:0])
    assert "None: every Slurm job of this study completed" in none
    # off Slurm (no attempts file) the section has no such heading
    assert "Slurm jobs" not in analysis_section(config, pd.DataFrame(), pd.DataFrame())


# ---------------------------------------------------------------- a real Slurm

# one CPU env, two timed runs of one point: one is cancelled, the other must still run.
# 60 iterations and the job's start keep a run's job RUNNING for over 10 s, long enough to
# be caught there (polled every 0.2 s), short enough for the run to be measured twice.
ONE_ENV = {
    "envs": {"cpu_a": {"device": "cpu", "threads": 1, "slurm": {"partition": "debug"}}},
    "study": {
        "models": ["resnet18"],
        "precisions": ["fp32"],
        "batch_sizes": [2],
        "runs": 2,
        "warmup_iters": 1,
        "iters": 60,
        "image_size": 32,
        "data": "synthetic",
    },
    "ceilings": {"quick": True},
    "traces": {"enabled": False},
}


def squeue(workdir: Path) -> list[tuple[int, str, str]]:
    """(job id, state, comment) of the jobs that Slurm holds for the study in workdir."""
    out = subprocess.run(
        ["squeue", "-h", "-o", "%i|%T|%Z|%k"], capture_output=True, text=True, check=True
    ).stdout
    jobs = [line.split("|", 3) for line in out.splitlines()]
    return [(int(i), state, comment) for i, state, wd, comment in jobs if Path(wd) == workdir]


def wait_for_job(workdir: Path, proc: subprocess.Popen, rule: str, state: str) -> int:
    """The id of the first of the study's `rule` jobs that Slurm shows in `state`."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        for job_id, job_state, comment in squeue(workdir):
            if job_state == state and comment.startswith(f"rule_{rule}"):
                return job_id
        assert proc.poll() is None, finish(proc)[1][-3000:]
        time.sleep(0.2)
    raise AssertionError(f"no {rule} job of {workdir} was {state} within 120 s")


def job_counts(log: str) -> dict[str, int]:
    """Snakemake's "Job stats" table: jobs per rule of that invocation."""
    stats = log.split("Job stats:")[1].split("\n\n")[0]
    return {rule: int(n) for rule, n in re.findall(r"^(\w+)\s+(\d+)$", stats, re.M)}


@pytest.mark.slurm  # starts its daemons (munge, MariaDB, slurmctld, slurmd)
@pytest.mark.workflow
def test_a_cancelled_measuring_job_files_nothing_and_the_next_run_redoes_only_it(
    slurm,  # noqa: F811 - the fixture imported above
    tmp_path,
):
    write_config(tmp_path, ONE_ENV)
    first = start_snakemake(tmp_path, "--workflow-profile", PROFILE, *FAST_STATUS)
    victim = wait_for_job(tmp_path, first, "train", "RUNNING")
    subprocess.run(["scancel", str(victim)], check=True)
    rc, log = finish(first)

    # Snakemake says which job Slurm ended and how; --keep-going ran the other run
    assert rc != 0, log[-3000:]
    assert f"SLURM-job '{victim}' failed, SLURM status is: 'CANCELLED'" in log, log[-3000:]
    jobs = {j["id"]: j for j in sacct_jobs(tmp_path)}
    assert jobs[victim]["state"] == "CANCELLED" and jobs[victim]["rule"] == "train"
    others = [j for j in jobs.values() if j["id"] != victim]
    assert others and all(j["state"] == "COMPLETED" for j in others), others
    # the cancelled run is not filed: no JSON (nor a half-written one), no metrics row
    runs = tmp_path / "results" / "cpu_a" / "runs"
    kept = [p.name for p in runs.iterdir()]
    assert len(kept) == 1 and kept[0].endswith(".json"), kept
    [other] = [j for j in others if j["rule"] == "train"]
    assert kept[0].endswith(f"_run{other['wildcards'].rsplit('_', 1)[1]}.json"), (kept, other)
    assert json.loads((runs / kept[0]).read_text())["status"] == "ok"
    assert not (tmp_path / "results" / "metrics.csv").exists()

    # the next snakemake measures only the cancelled run, and the report lists the attempt
    again = start_snakemake(tmp_path, "--workflow-profile", PROFILE, *FAST_STATUS)
    rc, log = finish(again)
    assert rc == 0, log[-3000:]
    counts = job_counts(log)
    measured = {rule: n for rule, n in counts.items() if rule in MEASUREMENTS | {"env_info"}}
    assert measured == {"train": 1}, counts
    assert "complexity" not in counts, counts
    assert len(list(runs.glob("*.json"))) == 2
    assert [r[-1] for r in metrics_rows(tmp_path)] == ["ok", "ok"]
    attempts = (tmp_path / "results" / "cluster_attempts.csv").read_text().splitlines()
    assert attempts[0] == ",".join(cluster.ATTEMPT_COLUMNS)
    assert len(attempts) == 2 and attempts[1].startswith(f"{victim},train,"), attempts
    assert ",CANCELLED,debug," in attempts[1]
    page = (tmp_path / "results" / "report_sections" / "analysis.html").read_text()
    assert re.search(
        rf"<td[^>]*>{victim}</td><td>train</td><td>[^<]+</td><td>CANCELLED</td>", page
    ), page.split("Slurm jobs")[-1][:2000]

    # and then nothing is left to do
    done = start_snakemake(tmp_path, "--workflow-profile", PROFILE, *FAST_STATUS)
    rc, log = finish(done)
    assert rc == 0 and "Nothing to be done" in log, log[-3000:]


@pytest.mark.slurm  # starts its daemons (munge, MariaDB, slurmctld, slurmd)
@pytest.mark.workflow
def test_a_second_study_into_the_same_results_folder_is_refused_naming_it(
    slurm,  # noqa: F811 - the fixture imported above
    tmp_path,
):
    write_config(tmp_path, ONE_ENV)
    first = start_snakemake(tmp_path, "--workflow-profile", PROFILE, *FAST_STATUS)
    try:
        wait_for_job(tmp_path, first, "", "RUNNING")
        second = start_snakemake(tmp_path, "--workflow-profile", PROFILE, *FAST_STATUS)
        rc, log = finish(second)
        assert rc != 0 and "Directory cannot be locked" in log, log[-3000:]
        assert str(tmp_path) in log, log[-3000:]
        assert "has been submitted" not in log, log[-3000:]
        assert first.poll() is None  # the first study goes on
    finally:
        first.send_signal(signal.SIGINT)  # Ctrl-C: the executor cancels its jobs
        rc, log = finish(first)
    # every job of this folder is the first study's (the second submitted none)
    submitted = {int(i) for i in re.findall(r"SLURM jobid (\d+)", log)}
    assert submitted and {j["id"] for j in sacct_jobs(tmp_path)} == submitted, log[-3000:]
