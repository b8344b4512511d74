"""Data-parallel runs (dnnroofline.measure.ddp): 2 gloo processes of 1 thread each, for real.

A tiny conv net (tests/data/models/tiny_models.py) at 8 px; ``rank_fault`` fails one
rank on purpose (an exception, a SIGKILL, a hang) to check that the run records that
rank's message and that no process is left behind.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dnnroofline.errors import InputError
from dnnroofline.measure import ddp

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "workflow" / "scripts" / "run_train.py"
MODELS = ROOT / "tests" / "data" / "models"
TINY = [
    "--arch", "tiny", "--model-factory", "tiny_models:tiny_cnn", "--image-size", "8",
    "--num-classes", "10", "--batch-size", "2", "--backend", "cpu", "--synthetic",
    "--warmup-iters", "1", "--iters", "3",
]  # fmt: skip


def fault(how: str) -> list[str]:
    args = [a if a != "tiny_models:tiny_cnn" else "tiny_models:rank_fault" for a in TINY]
    return args + ["--model-kwargs", json.dumps({"how": how, "rank": 1})]


def env_for(threads: str | None, tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    env["PYTHONPATH"] = str(MODELS)
    env["TMPDIR"] = str(tmp_path)  # the launcher's rendezvous folder (left by a SIGKILL)
    if threads is not None:
        env["OMP_NUM_THREADS"] = threads
    return env


def run_cli(tmp_path, *args, threads="2"):
    out = tmp_path / "run.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), *args, "--out", str(out)],
        capture_output=True,
        text=True,
        env=env_for(threads, tmp_path),
        timeout=300,
    )
    return proc, (json.loads(out.read_text()) if out.exists() else None)


def alive(pid: int) -> bool:
    """The process exists and is not a zombie waiting for its parent."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def assert_all_gone(pids, within=10.0):
    deadline = time.monotonic() + within
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [p for p in pids if alive(p)], f"processes left behind: {pids}"


# --------------------------------------------------------------------------- pure pieces


def part(rank, median, *, status="ok", message=None, end=100.0, rss=1000, warm=0.5):
    steps = [median * 0.9, median, median * 1.2]
    return {
        "status": status,
        "message": message,
        "end_time": end,
        "step_time_s": {"median": median, "all": steps} if status == "ok" else None,
        "data_wait_s": {"median": 0.0, "total": 0.0, "all": [0.0] * 3},
        "compute_s": {"median": median, "total": sum(steps)},
        "images_per_s": 4 / median,
        "warmup_s": warm,
        "first_step_s": warm * 0.9,
        "max_rss_bytes": rss,
        "peak_device_memory_bytes": None,
        "device_name": "CPU X",
        "rank": rank,
    }


BASE = {"config": {"batch_size": 4, "nproc": 2}, "status": None, "start_time": 1.0}


def test_merge_takes_the_slowest_rank_and_counts_every_rank():
    rec = ddp.merge_records(
        BASE, [part(0, 0.10, warm=2.0, rss=700), part(1, 0.125, rss=800)], [0, 0], [11, 12]
    )
    assert rec["status"] == "ok" and rec["slowest_rank"] == 1
    assert rec["step_time_s"]["median"] == 0.125
    assert rec["images_per_s"] == pytest.approx(2 * 4 / 0.125)  # N x batch / slowest median
    assert rec["warmup_s"] == 2.0 and rec["first_step_s"] == pytest.approx(1.8)
    assert rec["max_rss_bytes"] == 1500  # the job's footprint: every rank's
    assert [r["pid"] for r in rec["ranks"]] == [11, 12]
    assert [r["step_time_s"]["all"] for r in rec["ranks"]] == [
        pytest.approx([0.09, 0.10, 0.12]),
        pytest.approx([0.1125, 0.125, 0.15]),
    ]


def test_the_rank_that_failed_first_is_the_cause_and_killed_ranks_are_not():
    parts = [
        part(0, 0.1, status="error", message="RuntimeError: Connection closed by peer", end=9.0),
        part(1, 0.1, status="oom", message="RuntimeError: can't allocate memory", end=5.0),
        None,
    ]
    rec = ddp.merge_records(BASE, parts, [3, 3, -9], [1, 2, 3], killed={2})
    assert rec["status"] == "oom" and rec["failed_rank"] == 1
    assert rec["message"] == "rank 1: RuntimeError: can't allocate memory"
    assert rec["step_time_s"] is None and rec["images_per_s"] is None
    assert [r["exit_code"] for r in rec["ranks"]] == [3, 3, -9]


def test_a_rank_that_died_without_a_record_gives_its_signal_and_log_tail():
    rec = ddp.merge_records(
        BASE,
        [None, None],
        [-9, -9],
        [1, 2],
        exit_times=[5.0, 6.0],
        killed={1},
        logs=["setup done\nwarm-up: 1 untimed steps\n", ""],
    )
    assert rec["status"] == "error"
    assert rec["message"].startswith("rank 0: was killed by SIGKILL")
    assert "last log lines: setup done | warm-up: 1 untimed steps" in rec["message"]


@pytest.mark.parametrize(
    "budget, nproc, expect, expected",
    [(4, 2, 2, 2), (2, 2, None, 1), (5, 2, None, 2)],
)
def test_rank_threads_split_the_job(budget, nproc, expect, expected):
    assert ddp.rank_threads(budget, nproc, expect, str(budget)) == expected


@pytest.mark.parametrize(
    "budget, nproc, expect, message",
    [
        (1, 2, 1, "env declares 2 processes x 1 thread = 2 threads but this job got 1"),
        (1, 2, None, "--nproc 2: needs at least one thread per process but this job has 1"),
    ],
)
def test_rank_threads_refuse_too_few(budget, nproc, expect, message):
    with pytest.raises(InputError, match=message):
        ddp.rank_threads(budget, nproc, expect, str(budget))


# --------------------------------------------------------------------------- real runs


def test_two_gloo_processes_of_one_thread_each(tmp_path):
    proc, rec = run_cli(tmp_path, *TINY, "--nproc", "2", "--expect-threads", "1")
    assert proc.returncode == 0, proc.stderr
    assert rec["status"] == "ok", rec["message"]
    cfg = rec["config"]
    assert (cfg["nproc"], cfg["dist_backend"], cfg["threads"]) == (2, "gloo", 1)
    assert cfg["global_batch_size"] == 4
    ranks = rec["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1]
    for r in ranks:
        assert r["status"] == "ok" and r["exit_code"] == 0
        assert len(r["step_time_s"]["all"]) == 3
    slowest = max(ranks, key=lambda r: r["step_time_s"]["median"])
    assert rec["step_time_s"] == slowest["step_time_s"]
    assert rec["images_per_s"] == pytest.approx(2 * 2 / slowest["step_time_s"]["median"])
    assert "[rank 1] [run_train] done: median step" in proc.stderr
    assert_all_gone([r["pid"] for r in ranks])


@pytest.mark.parametrize(
    "how, message",
    [
        ("raise", "rank 1: RuntimeError: fault injected on rank 1"),
        ("kill", "rank 1: was killed by SIGKILL"),
    ],
)
def test_a_failing_rank_fails_the_run_with_its_message(tmp_path, how, message):
    proc, rec = run_cli(tmp_path, *fault(how), "--nproc", "2", "--expect-threads", "1")
    assert proc.returncode == 0, proc.stderr  # recorded, like any crashed run
    assert rec["status"] == "error" and rec["failed_rank"] == 1
    assert rec["message"].startswith(message), rec["message"]
    assert rec["images_per_s"] is None
    assert_all_gone([r["pid"] for r in rec["ranks"]])


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_no_rank_outlives_a_killed_launcher(tmp_path, sig):
    launcher = subprocess.Popen(
        [sys.executable, str(SCRIPT), *fault("hang"), "--nproc", "2", "--out", "x.json"],
        cwd=tmp_path,
        stderr=subprocess.PIPE,
        text=True,
        env=env_for("2", tmp_path),
    )
    pids = []
    for line in launcher.stderr:
        if "ranks started" in line:
            pids = [int(p) for p in line.rsplit("pids", 1)[1].split()]
            break
    try:
        assert len(pids) == 2
        time.sleep(1.0)
        launcher.send_signal(sig)
        assert launcher.wait(timeout=30) in (128 + sig, -sig)
        assert_all_gone(pids)
        assert not (tmp_path / "x.json").exists()
    finally:  # a failed check must not leave the hanging rank behind for 10 minutes
        for pid in [launcher.pid, *pids]:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        launcher.wait(timeout=30)


def test_too_few_threads_for_the_processes_is_refused(tmp_path):
    proc, rec = run_cli(tmp_path, *TINY, "--nproc", "2", "--expect-threads", "1", threads="1")
    assert proc.returncode == 2 and rec is None
    assert "env declares 2 processes x 1 thread = 2 threads but this job got 1" in proc.stderr


def test_bad_nproc_is_refused(tmp_path):
    proc, rec = run_cli(tmp_path, *TINY, "--nproc", "0")
    assert proc.returncode == 2 and rec is None
    assert "--nproc 0: must be >= 1" in proc.stderr
