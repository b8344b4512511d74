"""Other processes' CPU use while measuring (dnnroofline.measure.contention) and where it shows."""

from __future__ import annotations

import math
import shlex
import subprocess
import sys
import time

import psutil
import pytest
from report_fixtures import make_metrics, make_points
from test_aggregate import make_run

from dnnroofline.aggregate import metrics as aggregate
from dnnroofline.errors import InputError
from dnnroofline.measure import contention
from dnnroofline.measure.ceilings import contended_note
from dnnroofline.measure.contention import CpuSnapshot
from dnnroofline.report import compare, data
from dnnroofline.report.terminal import study_summary

MARK = "dnnroofline-contention-test-spinner"
SPIN = [
    sys.executable,
    "-c",
    f"import time\nt = time.time()\nwhile time.time() - t < 30: pass  # {MARK}",
]


def test_other_load_is_the_busy_time_that_is_not_ours():
    before = CpuSnapshot(monotonic_s=10.0, busy_s=100.0, steal_s=5.0, own_s=40.0)
    after = CpuSnapshot(monotonic_s=12.0, busy_s=106.0, steal_s=5.5, own_s=43.0)
    # 6 s busy over 2 s of wall, 3 of them ours: others kept 1.5 CPUs busy
    assert contention.other_load(before, after) == {
        "other_processes_cpus": 1.5,
        "steal_cpus": 0.25,
        "wall_s": 2.0,
    }
    assert contention.other_load(None, after) is None
    assert contention.other_load(after, after) is None  # no time passed
    assert contention.contended_cpus({"other_processes_cpus": 0.2, "steal_cpus": 0.1}) == (
        pytest.approx(0.3)
    )
    assert contention.contended_cpus({"other_processes_cpus": 0.2, "steal_cpus": 0.0}) is None
    assert contention.contended_cpus(None) is None


def cpu_s(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


TICK_S = 0.02  # /proc counts CPU time in 10 ms ticks: two readings, one tick each


def spun_for(pid: int, cpu_seconds: float = 0.3, timeout_s: float = 120.0) -> float:
    """Waits until process ``pid`` has run ``cpu_seconds`` of CPU from now, however loaded
    the machine (a fixed second of wall once gave it 0.17 CPU-s); the CPU time it ran."""
    start = cpu_s(pid)
    deadline = time.monotonic() + timeout_s
    while cpu_s(pid) - start < cpu_seconds:
        assert time.monotonic() < deadline, f"pid {pid} got no {cpu_seconds} CPU-s in {timeout_s} s"
        time.sleep(0.05)
    return cpu_s(pid) - start


def test_a_busy_process_beside_the_measurement_is_seen_and_our_children_are_ours():
    # Held against what the spinner itself was given, not a fixed share of the wall time:
    # on a loaded 2-core machine it got 0.59999 CPU-s of its second once.
    spinner = subprocess.Popen(SPIN)  # our own child: its CPU time is ours
    try:
        before = contention.snapshot()
        spun = spun_for(spinner.pid)
        after = contention.snapshot()
    finally:
        spinner.kill()
        spinner.wait()
    assert after.own_s - before.own_s >= spun - TICK_S
    # started by another process, the spinner is someone else's (a grandchild of ours
    # would still be ours: run it detached through a shell that exits at once)
    # that shell prints its pid: this test's spinner is killed, no other process of that name
    shell = ["sh", "-c", f"{shlex.join(SPIN)} >/dev/null 2>&1 & echo $!"]
    stranger = psutil.Process(int(subprocess.run(shell, capture_output=True, check=True).stdout))
    try:
        before = contention.snapshot()
        spun = spun_for(stranger.pid)
        load = contention.other_load(before, contention.snapshot())
    finally:
        stranger.kill()  # psutil checks that the pid is still that process (its start time)
    assert load["other_processes_cpus"] >= (spun - TICK_S) / load["wall_s"]
    assert contention.contended_cpus(load) is not None


def test_a_run_records_the_contention_of_its_timed_steps_in_metrics_csv():
    run = make_run("local", "resnet18", "fp32", 8, 1)
    run["timed_region"] = {"other_load": {"other_processes_cpus": 0.75, "steal_cpus": 0.25}}
    assert aggregate.run_row(run)["contention_cpus"] == 1.0
    unrecorded = aggregate.run_row(make_run("local", "resnet18", "fp32", 8, 2))
    assert math.isnan(unrecorded["contention_cpus"])
    run["timed_region"]["other_load"]["other_processes_cpus"] = "lots"
    with pytest.raises(InputError, match="other_processes_cpus must be a number"):
        aggregate.run_row(run, "results/local/runs/x.json")


def test_report_and_terminal_say_when_the_machine_was_busy():
    metrics = make_metrics()
    noisy_run = (metrics["model"] == "mobilenet_v2") & (metrics["batch_size"] == 8)
    metrics.loc[noisy_run, "contention_cpus"] = [1.2, 0.1, 0.0]
    rows = compare.noisy(data.throughput_table(data.prepare_metrics(metrics)))["rows"]
    assert [r["contended"] for r in rows] == [1.2]
    ceilings = {"local": {"other_load": {"other_processes_cpus": 0.9, "steal_cpus": 0.0}}}
    text = study_summary(metrics, make_points(), ceilings)
    assert (
        "local: the ceilings ran while other processes kept 0.90 CPUs busy: its roofs may be "
        "low (points above them); re-run them alone on its machine (copied results: there, "
        "then copy the folder again): snakemake --forcerun ceilings"
    ) in text
    assert "1 configuration(s) were timed while other processes kept up to 1.20 CPUs busy" in text
    quiet = study_summary(make_metrics(), make_points(), {"local": {"other_load": None}})
    assert "busy" not in quiet
    assert "other processes kept 0.90 of its 2 logical CPUs busy" in contended_note(0.9, 2)


def test_a_run_records_the_pages_its_timed_steps_faulted_in_and_their_kernel_time():
    run = make_run("local", "resnet18", "fp32", 8, 1)
    run["step_time_s"]["all"] = [0.1] * 4
    run["timed_region"] = {"minor_faults": 2048, "page_bytes": 4096, "user_s": 0.3, "sys_s": 0.1}
    row = aggregate.run_row(run)
    assert row["fault_mib_per_step"] == 2.0  # 2048 pages of 4 KiB over 4 steps
    assert row["timed_sys_share"] == 0.25
    unrecorded = aggregate.run_row(make_run("local", "resnet18", "fp32", 8, 2))
    assert math.isnan(unrecorded["fault_mib_per_step"])
    assert math.isnan(unrecorded["timed_sys_share"])
    run["timed_region"]["minor_faults"] = "many"
    with pytest.raises(InputError, match="timed_region.minor_faults must be a number"):
        aggregate.run_row(run, "results/local/runs/x.json")
