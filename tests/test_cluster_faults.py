"""Faults on a Slurm cluster (issue 39): a measuring job cancelled while it runs, a
second study started into a results folder that a first one is filling, a job requeued,
its node lost, its time limit hit, and its submitting snakemake killed.

The first part checks dnnroofline.study.cluster's reading of sacct and squeue on crafted
output and the time limits of the cost model (dnnroofline.study.cost).
The second injects each fault with Slurm's own commands into the tiny study running on
the one-node Slurm of scripts/local_slurm.sh (tests/test_cluster.py's fixture: skipped
without root and the Slurm packages, failed instead in CI).
"""

from __future__ import annotations

import csv
import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
from snakemake.iocontainers import Wildcards
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
from workflow_helpers import snakemake, write_config

from dnnroofline.errors import InputError
from dnnroofline.measure.measurement_lock import measurement_lock
from dnnroofline.report.analysis import analysis_section
from dnnroofline.study import cluster, cost, jobs

# ---------------------------------------------------------------- pure logic

# `sacct -X -D -n -P -o SACCT_FORMAT` with SLURM_TIME_FORMAT=%s: the study's jobs from /w,
# another folder's, a job of no rule (sbatch by hand), one still running, a ceilings job
# killed by its 1-minute limit after 65 s and its next attempt, which took 150 s, and a
# job requeued by Slurm (-D: its first run, REQUEUED, and its second, COMPLETED)
SACCT = """\
12|debug|CANCELLED by 0|1763895010|1763895014|4|60|/w|rule_train_wildcards_cpu_a_resnet18_fp32_2_1
10|debug|COMPLETED|1763895000|1763895009|9|60|/w|rule_env_info_wildcards_cpu_a
13|batch|TIMEOUT|1763895020|1763895085|65|1|/w|rule_ceilings_wildcards_cpu_a
14|debug|NODE_FAIL|1763895090|1763895095|5|60|/w|rule_complexity_wildcards_resnet18_2
15|debug|FAILED|1763895100|1763895101|1|60|/w/|rule_metrics
16|debug|CANCELLED by 0|1763895100|1763895101|1|60|/elsewhere|rule_train_wildcards_x_1
17|debug|CANCELLED by 0|1763895100|1763895101|1|60|/w|
18|debug|RUNNING|1763895100|Unknown|3|60|/w|rule_train_wildcards_cpu_a_resnet18_fp32_2_2
19|debug|COMPLETED|1763895110|1763895120|10|60|/w|rule_train_wildcards_cpu_a_resnet18_fp32_2_3
19|debug|REQUEUED|1763895100|1763895103|3|60|/w|rule_train_wildcards_cpu_a_resnet18_fp32_2_3
20|batch|COMPLETED|1763895200|1763895350|150|133|/w|rule_ceilings_wildcards_cpu_a
"""


def test_failed_attempts_are_the_folders_rule_jobs_that_did_not_complete():
    attempts = cluster.failed_attempts(cluster.parse_sacct(SACCT), "/w")
    assert [(a["job_id"], a["rule"], a["state"]) for a in attempts] == [
        (12, "train", "CANCELLED"),
        (13, "ceilings", "TIMEOUT"),
        (14, "complexity", "NODE_FAIL"),
        (15, "metrics", "FAILED"),
        (19, "train", "REQUEUED"),
    ]
    assert set(attempts[0]) == set(cluster.ATTEMPT_COLUMNS)
    assert attempts[0]["wildcards"] == "cpu_a_resnet18_fp32_2_1"
    assert (attempts[0]["partition"], attempts[0]["start"], attempts[0]["end"]) == (
        "debug",
        1763895010,
        1763895014,
    )
    assert attempts[3]["wildcards"] == ""
    # the timed-out job had 1 minute and needs the cost model's limit for the 150 s that
    # its next attempt took: 2 x 150 s = 5 min, plus 1
    assert (attempts[1]["elapsed_s"], attempts[1]["time_limit_min"]) == (65, 1)
    assert attempts[1]["needed_min"] == 6
    assert all(a["needed_min"] is None for a in attempts if a["state"] != "TIMEOUT")
    # without that attempt: at least the 65 s it ran before it was killed, 2 x 65 s + 1 min
    alone = [j for j in cluster.parse_sacct(SACCT) if j["id"] != 20]
    assert cluster.failed_attempts(alone, "/w")[1]["needed_min"] == 4
    assert cluster.failed_attempts(cluster.parse_sacct(SACCT), "/nowhere") == []


def test_a_measuring_jobs_time_limit_comes_from_the_cost_model(tmp_path, monkeypatch):
    """2 x the expected wall time plus 1 minute, x Snakemake's attempt; the expected
    time from the study's benchmark files (the job's point first), else a prior."""
    assert cost.time_limit_min(0) == 1
    assert cost.time_limit_min(30) == 2  # 60 s: 1 minute, plus 1
    assert cost.time_limit_min(31) == 3  # 62 s rounds up to 2 minutes, plus 1
    assert cost.time_limit_min(30, attempt=2) == 4
    assert cost.time_limit_min(cost.DEFAULT_PRIOR_S) == 61
    with pytest.raises(InputError, match=r"attempt >= 1, not 30 and 0"):
        cost.time_limit_min(30, attempt=0)
    walls = {"cpu_a_resnet18_fp32_bs2_run1": 20.0, "cpu_a_resnet50_fp32_bs2_run1": 90.0}
    assert cost.expected_job_s("train", walls, "cpu_a_resnet18_fp32_bs2") == (20.0, "measured")
    # bs2 is no prefix of bs24: another point
    other = cost.expected_job_s("train", walls, "cpu_a_resnet18_fp32_bs24")
    assert other == (90.0, "measured on other points")
    assert cost.expected_job_s("ncu", {}, "p") == (cost.PRIOR_S["ncu"], "prior")
    assert cost.expected_job_s("train", walls, "cpu_a_resnet18_fp32_bs2", 70.0)[0] == 70.0

    # the rule's benchmark files on disk, as Snakemake writes them, and sacct's attempts
    bench = "results/{menv}/benchmarks/runs/{menv}_{model}_{precision}_bs{batch}_run{run}.tsv"
    runs = tmp_path / "results" / "cpu_a" / "benchmarks" / "runs"
    runs.mkdir(parents=True)
    header = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"
    (runs / "cpu_a_resnet18_fp32_bs2_run1.tsv").write_text(
        header + "40.5\t0:00:40\t1\t1\t1\t1\t0\t0\t0\t30\n"
    )
    point = Wildcards(
        fromdict={
            "menv": "cpu_a",
            "model": "resnet18",
            "precision": "fp32",
            "batch": "2",
            "run": "2",
        }
    )
    monkeypatch.chdir(tmp_path)
    # a file that is no benchmark (cut short) leaves the others to decide
    (runs / "cpu_a_resnet18_fp32_bs2_run3.tsv").write_text("")
    assert jobs.benchmark_walls(bench, "cpu_a") == {"cpu_a_resnet18_fp32_bs2_run1": 40.5}
    assert jobs.time_limit("train", bench, point, 1, None) == 3  # 81 s: 2 min, plus 1
    # each version of a file is read once; a rewritten one is read again
    redone = runs / "cpu_a_resnet18_fp32_bs2_run3.tsv"
    redone.write_text(header + "70\t0:01:10\t1\t1\t1\t1\t0\t0\t0\t60\n")
    os.utime(redone, ns=(1, 2_000_000_000))
    assert jobs.benchmark_walls(bench, "cpu_a")["cpu_a_resnet18_fp32_bs2_run3"] == 70.0
    redone.unlink()
    assert jobs.time_limit("train", bench, point, 2, None) == 6
    attempt = {"rule": "train", "wildcards": "cpu_a_resnet18_fp32_2_2", "state": "TIMEOUT"}
    timed_out = [dict(attempt, elapsed_s=100)]
    assert jobs.time_limit("train", bench, point, 1, timed_out) == 5  # 200 s: 4 min, plus 1
    assert jobs.runtime_resource({"cluster": "local"}, "train", bench, None) == {}
    runtime = jobs.runtime_resource({"cluster": "slurm"}, "train", bench, timed_out)["runtime"]
    assert runtime(point, 1) == 5


# `squeue --me -h -o SQUEUE_FORMAT`: a killed snakemake's running and requeued jobs in
# /w, one that ended (squeue keeps it a while), another folder's and one of no rule
SQUEUE = """\
31|RUNNING|/w|rule_train_wildcards_cpu_a_resnet18_fp32_2_1
32|PENDING|/w|rule_train_wildcards_cpu_a_resnet18_fp32_2_2
30|COMPLETED|/w|rule_env_info_wildcards_cpu_a
33|RUNNING|/elsewhere|rule_train_wildcards_cpu_a_resnet18_fp32_2_1
34|RUNNING|/w|
"""


@pytest.mark.parametrize("mode", ["wait", "cancel"])
def test_an_earlier_snakemakes_jobs_are_waited_for_or_cancelled(tmp_path, mode):
    (tmp_path / "w").mkdir()
    workdir = tmp_path / "w"
    text = SQUEUE.replace("|/w|", f"|{workdir}|")
    assert [j["id"] for j in cluster.active_jobs(text, workdir)] == [31, 32]
    # squeue as Slurm answers it while the jobs end: both, then job 32, then none
    answers = iter([text, text, text.replace("31|RUNNING", "31|COMPLETED"), ""])
    said, cancelled, slept = [], [], []
    config = {"cluster": "slurm", "previous_jobs": mode}
    jobs = cluster.settle_previous_jobs(
        config, workdir, said.append, lambda: next(answers), cancelled.append, slept.append
    )
    assert [j["id"] for j in jobs] == [31, 32] and len(slept) == 2
    listing = "31 (train cpu_a_resnet18_fp32_2_1, RUNNING), 32 (train cpu_a_resnet18_fp32_2_2"
    assert listing in said[0]
    if mode == "cancel":
        assert cancelled == [[31, 32]] and said[0].startswith("Cancelling 2 Slurm job(s)")
    else:
        assert cancelled == [] and said[0].startswith("Waiting for 2 Slurm job(s)")
    # a dry run lists them, and neither waits nor cancels
    said, cancelled, slept = [], [], []
    listed = cluster.settle_previous_jobs(
        config, workdir, said.append, lambda: text, cancelled.append, slept.append, dry_run=True
    )
    assert [j["id"] for j in listed] == [31, 32] and cancelled == [] and slept == []
    assert said[0].startswith("2 Slurm job(s) of an earlier snakemake here still run: 31 (")
    # nothing to do off Slurm, or while a snakemake holds the folder's lock
    assert cluster.settle_previous_jobs({"cluster": "local"}, workdir, said.append) == []
    (workdir / ".snakemake" / "locks").mkdir(parents=True)
    (workdir / ".snakemake" / "locks" / "0.input.lock").write_text("")
    locked = cluster.settle_previous_jobs(config, workdir, said.append, lambda: text)
    assert locked == []


def test_the_attempts_columns_are_the_documented_ones():
    from test_aggregate import contract_columns

    assert contract_columns("results/cluster_attempts.csv") == list(cluster.ATTEMPT_COLUMNS)


def test_cluster_attempts_runs_sacct_only_on_slurm():
    def no_sacct():
        raise AssertionError("sacct run off Slurm")

    assert cluster.cluster_attempts({"envs": {}}, "/w", sacct=no_sacct) is None
    found = cluster.cluster_attempts({"cluster": "slurm"}, "/w", sacct=lambda: SACCT)
    assert [a["job_id"] for a in found] == [12, 13, 14, 15, 19]


def test_the_report_lists_the_jobs_that_did_not_complete():
    import pandas as pd

    attempts = pd.DataFrame(cluster.failed_attempts(cluster.parse_sacct(SACCT), "/w"))
    config = {"envs": {"cpu_a": {"device": "cpu"}}, "study": {}}
    page = analysis_section(config, pd.DataFrame(), pd.DataFrame(), cluster_attempts=attempts)
    table = page.split("Slurm jobs that did not complete")[1].split("<h2>Missing runs")[0]
    assert "5 Slurm job(s) of this study ended without completing" in table
    assert re.search(
        r"<td[^>]*>12</td><td>train</td><td>cpu_a_resnet18_fp32_2_1</td>"
        r"<td>CANCELLED</td>",
        table,
    ), table
    assert "<td>NODE_FAIL</td>" in table and "<td>REQUEUED</td>" in table
    # the timed-out job: how long it ran, the limit it had, and the one it needs
    assert re.search(
        r"<td>TIMEOUT</td><td>batch</td><td class=num>65</td><td class=num>1</td>"
        r"<td class=num>6</td>",
        table,
    ), table
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
        assert rc != 0 and "has been submitted" not in log, log[-3000:]
        if "IncompleteFilesException" in log:
            # a job of the first finished on its node before the first snakemake's next
            # status check (a loaded host): Snakemake checks for incomplete files before
            # its lock. What that refusal offers, --rerun-incomplete, meets the lock
            # (a job's old outputs are deleted only when it starts, under the lock).
            again = ["--rerun-incomplete", "--workflow-profile", PROFILE, *FAST_STATUS]
            rc, log = finish(start_snakemake(tmp_path, *again))
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


# ONE_ENV's two timed runs of one point: run A is requeued, then loses its node, then
# loses its submitting snakemake; run B waits for the measurement lock (another
# measurement on its node) until its time limit, cut to the minimum, kills it.
# 20 steps: the job's start (Snakemake, torch) keeps it RUNNING long enough to be caught
TWO_RUNS = json.loads(json.dumps(ONE_ENV))
TWO_RUNS["study"]["iters"] = 20
RUN_FILES = [f"results/cpu_a/runs/cpu_a_resnet18_fp32_bs2_run{n}.json" for n in (1, 2)]
POINT = "cpu_a_resnet18_fp32_2"


def train_job(workdir: Path, proc: subprocess.Popen, wildcards: str | None, state: str) -> int:
    """The id of the study's train job of these wildcards (any, if None) once Slurm shows
    it in `state` (a requeued job keeps its id); a job held back by its requeue's begin
    time (Slurm delays a requeued job 2 minutes) is let go at once."""
    wanted = f"rule_train_wildcards_{wildcards or ''}"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        out = subprocess.run(["squeue", "-h", "-o", "%i|%T|%r|%Z|%k"], capture_output=True)
        for line in out.stdout.decode().splitlines():
            job_id, job_state, reason, wd, comment = line.split("|", 4)
            if Path(wd) != workdir or not comment.startswith(wanted):
                continue
            if comment == wanted or wildcards is None:
                if job_state == state:
                    return int(job_id)
                if reason == "BeginTime":  # may start meanwhile: no check
                    subprocess.run(["scontrol", "update", f"JobId={job_id}", "StartTime=now"])
        assert proc.poll() is None, finish(proc)[1][-3000:]
        time.sleep(0.2)
    raise AssertionError(f"no train job {wildcards} of {workdir} was {state} within 180 s")


def squeue_state(job_id: int) -> str:
    out = subprocess.run(["squeue", "-h", "-j", str(job_id), "-o", "%T"], capture_output=True)
    return out.stdout.decode().strip()


def scontrol(*args: str) -> None:
    subprocess.run(["scontrol", *args], check=True, capture_output=True, text=True)


def cut_time_limit(job_id: int) -> None:
    """The running job's time limit cut to the minimum (1 minute) and its end to now,
    once its step runs (Slurm starts no step in a job past its end): slurmctld kills it
    at its next time-limit check (every 30 s)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        steps = subprocess.run(
            ["squeue", "-h", "-s", "-j", str(job_id), "-o", "%i"], capture_output=True, text=True
        )
        if f"{job_id}.0" in steps.stdout.split():
            scontrol("update", f"JobId={job_id}", "EndTime=now")
            return
        time.sleep(0.2)
    raise AssertionError(f"job {job_id} started no step within 60 s")


def lose_the_node() -> None:
    """The node goes DOWN, as when its slurmd stops answering, and comes back: slurmd
    registers again (ReturnToService=2), or an admin resumes it."""
    node = subprocess.run(["sinfo", "-h", "-N", "-o", "%N"], capture_output=True, text=True)
    name = node.stdout.split()[0]
    scontrol("update", f"NodeName={name}", "State=DOWN", "Reason=issue39-test")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        state = subprocess.run(["sinfo", "-h", "-n", name, "-o", "%T"], capture_output=True)
        if state.stdout.decode().split()[0].startswith("idle"):
            return
        time.sleep(0.5)
    scontrol("update", f"NodeName={name}", "State=RESUME")


@pytest.fixture
def started(tmp_path):
    """The snakemakes a test starts (append them): on the way out, a failed test's too,
    each still running is killed and the study's jobs are cancelled, so that nothing
    outlives the module's Slurm (a job's slurmstepd would)."""
    procs: list[subprocess.Popen] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            finish(proc)
    ids = [str(i) for i, state, _ in squeue(tmp_path) if state in cluster.ACTIVE_STATES]
    if ids:
        subprocess.run(["scancel", *ids], check=False)


def run_of(job_id: int) -> str:
    """The run number of a train job, from its comment (rule_train_wildcards_..._{run})."""
    out = subprocess.run(["squeue", "-h", "-j", str(job_id), "-o", "%k"], capture_output=True)
    return out.stdout.decode().strip().rsplit("_", 1)[1]


@pytest.mark.slurm  # starts its daemons (munge, MariaDB, slurmctld, slurmd)
@pytest.mark.workflow
def test_requeue_lost_node_time_limit_and_killed_snakemake_lose_nothing(
    slurm,  # noqa: F811 - the fixture imported above
    tmp_path,
    started,
):
    write_config(tmp_path, TWO_RUNS)
    profile = ["--workflow-profile", PROFILE, *FAST_STATUS]
    first = start_snakemake(tmp_path, *profile, *RUN_FILES)
    started.append(first)
    a = train_job(tmp_path, first, None, "RUNNING")
    a_run = run_of(a)
    run_a, run_b = f"{POINT}_{a_run}", f"{POINT}_{3 - int(a_run)}"
    scontrol("requeue", str(a))  # item 5, as a preemption does: A waits 2 minutes
    with measurement_lock("the test: another measurement on the node"):
        b = train_job(tmp_path, first, run_b, "RUNNING")  # B waits for the lock
        cut_time_limit(b)  # item 3: its limit 1 minute, its end now
        while squeue_state(b) == "RUNNING":
            time.sleep(0.5)
    assert train_job(tmp_path, first, run_a, "RUNNING") == a
    lose_the_node()  # item 2: NODE_FAIL; the profile's --requeue puts the job back
    assert train_job(tmp_path, first, run_a, "RUNNING") == a
    first.kill()  # item 4: the submitting snakemake dies (SIGKILL) while its job runs
    rc, log = finish(first)
    assert rc == -signal.SIGKILL, log[-3000:]

    # the next snakemake (after --unlock) waits for run A's job and keeps its run, then
    # submits run B alone, asking for a longer limit: the one it needs by the cost model
    snakemake(tmp_path, "--unlock")
    second = start_snakemake(tmp_path, *profile, *RUN_FILES, "results/cluster_attempts.csv")
    started.append(second)
    rc, log = finish(second)
    assert rc == 0, log[-3000:]
    if f"Waiting for 1 Slurm job(s) of an earlier snakemake here to end: {a}" not in log:
        # on a loaded host run A's job can end before the second snakemake looks: then
        # there is nothing to wait for, and it must still not be submitted again (below)
        assert squeue_state(a) in ("", "COMPLETED"), log[-3000:]
        assert (tmp_path / RUN_FILES[int(a_run) - 1]).exists()
    assert job_counts(log) == {"cluster_attempts": 1, "train": 1, "total": 2}, log[-3000:]

    # one run JSON per run; run A was one job that ran three times
    train = [j for j in sacct_jobs(tmp_path) if j["rule"] == "train"]
    assert [j["state"] for j in train if j["id"] == a] == ["REQUEUED", "NODE_FAIL", "COMPLETED"]
    assert [j["id"] for j in train if j["wildcards"] == run_a] == [a, a, a], train
    timed_out, again = sorted((j for j in train if j["wildcards"] == run_b), key=lambda j: j["id"])
    assert (timed_out["id"], timed_out["state"], timed_out["time_limit"]) == (b, "TIMEOUT", 1)
    # B's retry asked the cost model's limit for the longest of run A's wall time (its
    # benchmark file: the same point) and how long B ran before its limit killed it
    bench = tmp_path / f"results/cpu_a/benchmarks/runs/cpu_a_resnet18_fp32_bs2_run{a_run}.tsv"
    expected = max(cost.read_benchmark(str(bench))["wall_s"], timed_out["elapsed"])
    assert again["state"] == "COMPLETED", train
    assert again["time_limit"] == cost.time_limit_min(expected) > 1, train
    runs = sorted((tmp_path / "results" / "cpu_a" / "runs").iterdir())
    assert [p.name for p in runs] == [Path(f).name for f in RUN_FILES]
    for path in runs:
        run = json.loads(path.read_text())
        assert (run["status"], run["env"]) == ("ok", "cpu_a"), run

    # results/cluster_attempts.csv keeps each attempt with Slurm's state and time limit,
    # and the limit that the timed-out one needs (at least how long it ran)
    with open(tmp_path / "results" / "cluster_attempts.csv") as fh:
        rows = csv.DictReader(fh)
        attempts = [(r["job_id"], r["state"], r["time_limit_min"], r["needed_min"]) for r in rows]
    # run A asked for the prior's limit: nothing of its rule was measured yet
    prior = str(cost.time_limit_min(cost.DEFAULT_PRIOR_S))
    assert attempts == [
        (str(a), "REQUEUED", prior, ""),
        (str(a), "NODE_FAIL", prior, ""),
        (str(b), "TIMEOUT", "1", str(cost.time_limit_min(timed_out["elapsed"]))),
    ], attempts


@pytest.mark.slurm  # starts its daemons (munge, MariaDB, slurmctld, slurmd)
@pytest.mark.workflow
def test_a_killed_snakemakes_running_job_is_cancelled_when_the_config_says_so(
    slurm,  # noqa: F811 - the fixture imported above
    tmp_path,
    started,
):
    write_config(tmp_path, TWO_RUNS)
    profile = ["--workflow-profile", PROFILE, *FAST_STATUS]
    first = start_snakemake(tmp_path, *profile, RUN_FILES[0])
    started.append(first)
    orphan = train_job(tmp_path, first, None, "RUNNING")
    first.kill()
    finish(first)
    snakemake(tmp_path, "--unlock")
    # a --config on the command line replaces the profile's: cluster=slurm with it (last:
    # --config takes every argument after it)
    config = ["--config", "cluster=slurm", "previous_jobs=cancel"]
    run = snakemake(tmp_path, *profile, RUN_FILES[0], *config)
    log = run.stdout + run.stderr
    assert f"Cancelling 1 Slurm job(s) of an earlier snakemake here: {orphan}" in log
    train = [(j["id"], j["state"]) for j in sacct_jobs(tmp_path) if j["rule"] == "train"]
    if "Nothing to be done" in log:
        # a loaded host: the orphan finished its run between squeue and scancel; that run
        # is kept, and no train job is submitted again
        assert [job_id for job_id, _ in train] == [orphan], (train, log[-3000:])
    else:
        assert job_counts(log) == {"train": 1, "total": 1}, log[-3000:]
        assert train[0] == (orphan, "CANCELLED") and [s for _, s in train[1:]] == ["COMPLETED"]
    [run] = (tmp_path / "results" / "cpu_a" / "runs").iterdir()
    assert json.loads(run.read_text())["status"] == "ok"
