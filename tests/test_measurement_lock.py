"""The machine-wide measurement lock: real processes taking one lock file."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from dnnroofline.measure.measurement_lock import HELD_ENV, PATH_ENV, lock_path

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "workflow" / "scripts"

# A measurement that holds the lock for HOLD seconds, saying when it has it.
HOLDER = textwrap.dedent(
    """
    import sys, time
    from dnnroofline.measure.measurement_lock import measurement_lock
    with measurement_lock("holder " + sys.argv[1]) as waited:
        print(f"held {time.time()} waited {waited:.2f}", flush=True)
        time.sleep(float(sys.argv[1]))
        print(f"released {time.time()}", flush=True)
    """
)


def lock_env(lock: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != HELD_ENV}
    return dict(env, **{PATH_ENV: str(lock)}, PYTHONPATH=str(SCRIPTS))


def start_holder(lock: Path, hold: float) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(hold)],
        env=lock_env(lock),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    line = proc.stdout.readline()  # returns once the lock is held
    assert line.startswith("held "), line + proc.stderr.read()
    return proc


def test_lock_file_from_the_environment():
    assert lock_path({}).name == "dnnroofline-measurement.lock"
    assert lock_path({PATH_ENV: "/run/x.lock"}) == Path("/run/x.lock")
    assert lock_path({PATH_ENV: "off"}) is None


def test_a_second_measurement_waits_for_the_first_and_names_it(tmp_path):
    lock = tmp_path / "m.lock"
    first = start_holder(lock, 1.5)
    second = subprocess.run(
        [sys.executable, "-c", HOLDER, "0"],
        env=lock_env(lock),
        capture_output=True,
        text=True,
        timeout=60,
    )
    first_out, _ = first.communicate(timeout=60)
    released = float(first_out.split()[1])
    held = second.stdout.split()
    assert float(held[1]) >= released  # never both at once
    assert float(held[3]) > 0.5  # it waited, and says how long
    waiting = f"waiting for the measurement lock {lock}: held by pid {first.pid} (holder 1.5,"
    assert waiting in second.stderr
    assert "took the measurement lock after" in second.stderr


def test_processes_a_measurement_starts_share_its_lock(tmp_path):
    # a data-parallel rank, or the driver under ncu or perf: no deadlock, no wait
    code = textwrap.dedent(
        """
        import subprocess, sys
        from dnnroofline.measure.measurement_lock import measurement_lock
        with measurement_lock("parent"):
            child = subprocess.run([sys.executable, "-c", sys.argv[1]], capture_output=True,
                                   text=True, timeout=30)
        print(child.stdout + child.stderr)
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, HOLDER.replace("sys.argv[1]", '"0"')],
        env=lock_env(tmp_path / "m.lock"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "waited 0.00" in proc.stdout and "waiting" not in proc.stdout


def test_a_killed_measurement_leaves_no_lock_behind(tmp_path):
    lock = tmp_path / "m.lock"
    holder = start_holder(lock, 60)
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait(timeout=30)
    after = subprocess.run(
        [sys.executable, "-c", HOLDER, "0"], env=lock_env(lock), capture_output=True, text=True
    )
    assert "waiting" not in after.stderr  # a wait says so (no timing assert: a loaded machine)
    assert json.loads(lock.read_text())["what"] == "holder 0"  # who held it last


def test_off_takes_no_lock(tmp_path):
    holder = start_holder(tmp_path / "m.lock", 30)
    try:
        env = dict(lock_env(tmp_path / "m.lock"), **{PATH_ENV: "off"})
        proc = subprocess.run(
            [sys.executable, "-c", HOLDER, "0"], env=env, capture_output=True, text=True
        )
        assert proc.stdout.startswith("held ") and "waiting" not in proc.stderr
    finally:
        holder.kill()
        holder.wait()


def test_a_timed_run_waits_for_another_snakemakes_measurement(tmp_path):
    """run_train.py, as a rule runs it, while another study's measurement holds the lock."""
    lock = tmp_path / "m.lock"
    holder = start_holder(lock, 2)
    out = tmp_path / "run.json"
    args = ["--arch", "resnet18", "--batch-size", "2", "--image-size", "32", "--backend", "cpu",
            "--warmup-iters", "1", "--iters", "2", "--synthetic", "--out", str(out)]  # fmt: skip
    proc = subprocess.run(
        [sys.executable, str(SCRIPTS / "run_train.py"), *args],
        env=dict(lock_env(lock), OMP_NUM_THREADS="1"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    released = float(holder.communicate(timeout=60)[0].split()[-1])
    assert proc.returncode == 0, proc.stderr
    assert f"held by pid {holder.pid} (holder 2" in proc.stderr
    record = json.loads(out.read_text())
    assert record["status"] == "ok" and record["start_time"] >= released
