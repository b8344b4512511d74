"""Energy over the timed steps (dnnroofline.measure.energy): RAPL against a fake sysfs tree,
NVML against a fake library, a run's record and a data-parallel run's merge, the hook's
window, and one real CPU run through the driver with a counter that moves."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest
import torch

from dnnroofline.measure import energy, step_hooks, train, train_config
from dnnroofline.measure.ddp import merge_records

MAX_UJ = 262_143_328_850  # a package's max_energy_range_uj on a real Xeon


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def zone(folder: Path, name: str, uj: int, max_uj: int = MAX_UJ) -> Path:
    folder.mkdir(parents=True)
    (folder / "name").write_text(name + "\n")
    (folder / "energy_uj").write_text(f"{uj}\n")
    (folder / "max_energy_range_uj").write_text(f"{max_uj}\n")
    return folder


def fake_powercap(tmp_path: Path, pkg_uj: int = 1_000_000, dram_uj: int = 500_000) -> Path:
    """A powercap tree as sysfs lays it out: the zones' folders under devices/, each
    (subzones too) linked from the class folder; a package with core and dram subzones,
    psys, and the intel-rapl-mmio copy of the package's counter."""
    dev = tmp_path / "devices"
    pkg = zone(dev / "intel-rapl" / "intel-rapl:0", "package-0", pkg_uj)
    zone(pkg / "intel-rapl:0:0", "core", 7_000_000)
    zone(pkg / "intel-rapl:0:1", "dram", dram_uj)
    zone(dev / "intel-rapl" / "intel-rapl:1", "psys", 9_000_000)
    zone(dev / "intel-rapl-mmio" / "intel-rapl-mmio:0", "package-0", 3_000_000)
    root = tmp_path / "powercap"
    root.mkdir()
    (root / "intel-rapl").symlink_to(dev / "intel-rapl")
    for name, target in [
        ("intel-rapl:0", pkg),
        ("intel-rapl:0:0", pkg / "intel-rapl:0:0"),
        ("intel-rapl:0:1", pkg / "intel-rapl:0:1"),
        ("intel-rapl:1", dev / "intel-rapl" / "intel-rapl:1"),
        ("intel-rapl-mmio:0", dev / "intel-rapl-mmio" / "intel-rapl-mmio:0"),
    ]:
        (root / name).symlink_to(target)
    return root


def set_uj(folder: Path, uj: int) -> None:
    """Write a counter as the kernel does: a reader never sees half a number."""
    tmp = folder / "energy_uj.tmp"
    tmp.write_text(f"{uj}\n")
    os.replace(tmp, folder / "energy_uj")


# --------------------------------------------------------------------------- RAPL


def test_rapl_counts_packages_and_dram_only_each_once(tmp_path):
    root = fake_powercap(tmp_path)
    zones, error = energy.rapl_zones(str(root))
    assert error is None
    assert [z.name for z in zones] == ["package-0", "dram (intel-rapl:0:1)"]
    clock = Clock()
    meter = energy.RaplMeter(str(root), clock)
    assert meter.start() is True
    pkg = tmp_path / "devices" / "intel-rapl" / "intel-rapl:0"
    set_uj(pkg, 1_000_000 + 30_000_000)  # +30 J
    set_uj(pkg / "intel-rapl:0:1", 500_000 + 6_000_000)  # +6 J
    set_uj(pkg / "intel-rapl:0:0", 99_000_000)  # core: part of the package, not counted
    set_uj(tmp_path / "devices" / "intel-rapl" / "intel-rapl:1", 99_000_000)  # psys
    clock.now = 2.0
    rec = meter.stop()
    assert rec["available"] is True and rec["source"] == "rapl" and rec["reason"] is None
    assert rec["domains"] == {"package-0": 30.0, "dram (intel-rapl:0:1)": 6.0}
    assert rec["joules"] == 36.0 and rec["seconds"] == 2.0 and rec["mean_power_w"] == 18.0
    assert rec["counter"] == "powercap energy_uj: package-0, dram (intel-rapl:0:1)"


def test_rapl_counter_wraps_at_its_max_range(tmp_path):
    root = fake_powercap(tmp_path, pkg_uj=MAX_UJ - 1_000_000)
    meter = energy.RaplMeter(str(root), Clock())
    assert meter.start()
    set_uj(tmp_path / "devices" / "intel-rapl" / "intel-rapl:0", 2_000_000)  # wrapped
    rec = meter.stop()
    # 1 J up to the max, 1 µJ to wrap to 0, then 2 J
    assert rec["domains"]["package-0"] == pytest.approx(3.000001)
    assert rec["domains"]["dram (intel-rapl:0:1)"] == 0.0


def test_unreadable_energy_uj_is_unavailable_naming_the_file(tmp_path, monkeypatch):
    root = fake_powercap(tmp_path)
    meter = energy.RaplMeter(str(root))
    path = os.path.join(meter.zones[0].path, "energy_uj")

    def denied(_zone):  # root reads any file: chmod 000 would not stop this test
        raise PermissionError(13, "Permission denied", path)

    monkeypatch.setattr(energy.RaplZone, "read_uj", denied)
    assert meter.start() is False
    rec = meter.stop()
    assert rec["available"] is False and rec["joules"] is None and rec["source"] == "rapl"
    assert path in rec["reason"] and "root-only since Linux 5.10" in rec["reason"]


def test_no_powercap_root_or_no_rapl_zone_says_why(tmp_path):
    rec = energy.RaplMeter(str(tmp_path / "nowhere"))
    assert rec.start() is False
    assert "nowhere does not exist" in rec.stop()["reason"]
    (tmp_path / "empty").mkdir()
    assert (
        "no RAPL package or dram zone" in energy.RaplMeter(str(tmp_path / "empty")).stop()["reason"]
    )


def test_energy_meter_reads_the_root_from_the_environment(tmp_path, monkeypatch):
    root = fake_powercap(tmp_path)
    monkeypatch.setenv(energy.POWERCAP_ENV, str(root))
    meter = energy.energy_meter("cpu")
    assert isinstance(meter, energy.RaplMeter) and meter.root == str(root)
    assert energy.energy_meter("cpu", powercap_root="/x").root == "/x"  # an argument wins
    monkeypatch.delenv(energy.POWERCAP_ENV)
    assert energy.energy_meter("cpu").root == energy.POWERCAP_ROOT
    mps = energy.energy_meter("mps")
    assert mps.start() is False and "backend 'mps'" in mps.stop()["reason"]


# --------------------------------------------------------------------------- NVML


class NVMLError(Exception):
    """Like pynvml.NVMLError."""


class FakeNvml:
    def __init__(self, readings_mj, fail_at=None):
        self.readings = list(readings_mj)
        self.fail_at = fail_at
        self.reads = 0
        self.index = None
        self.shutdown = False

    def nvmlInit(self):
        pass

    def nvmlDeviceGetHandleByIndex(self, index):
        self.index = index
        return ("handle", index)

    def nvmlDeviceGetTotalEnergyConsumption(self, handle):
        assert handle == ("handle", self.index)
        self.reads += 1
        if self.fail_at == self.reads:
            raise NVMLError("Not Supported")
        return self.readings[self.reads - 1]

    def nvmlShutdown(self):
        self.shutdown = True


def test_nvml_counter_in_millijoules_gives_joules():
    nvml, clock = FakeNvml([5_000_000, 5_250_500]), Clock()
    meter = energy.energy_meter("cuda", 3, nvml=nvml)
    meter.clock = clock
    assert meter.start() is True and nvml.index == 3
    clock.now = 0.5
    rec = meter.stop()
    assert rec["available"] is True and rec["source"] == "nvml"
    assert rec["counter"] == "nvmlDeviceGetTotalEnergyConsumption"
    assert rec["joules"] == pytest.approx(250.5) and rec["mean_power_w"] == pytest.approx(501.0)
    assert nvml.shutdown is True


@pytest.mark.parametrize("fail_at", [1, 2])
def test_nvml_counter_that_raises_is_unavailable_with_the_reason(fail_at):
    meter = energy.NvmlEnergyMeter(0, FakeNvml([1, 2], fail_at=fail_at))
    assert meter.start() is (fail_at != 1)
    rec = meter.stop()
    assert rec["available"] is False and rec["source"] == "nvml" and rec["joules"] is None
    assert rec["reason"] == "NVML nvmlDeviceGetTotalEnergyConsumption: NVMLError: Not Supported"


# --------------------------------------------------------------------------- a run's record

TELEMETRY = {
    "available": True,
    "power_w": {"median": 600.0, "min": 450.0, "max": 690.0},
    "sm_mhz": {"median": 1755.0, "min": 1500, "max": 1980},
    "mem_mhz": {"median": 2619.0, "min": 2619, "max": 2619},
}


def test_run_energy_adds_per_work_and_the_gpu_peak_and_clocks():
    meter_rec = energy.energy_record("nvml", energy.NVML_COUNTER, 120.0, 0.2)
    rec = energy.run_energy(meter_rec, TELEMETRY, steps=10, images=640)
    assert rec["joules_per_step"] == 12.0 and rec["joules_per_image"] == 120.0 / 640
    assert rec["peak_power_w"] == 690.0
    assert rec["sm_clock_mhz"] == 1755.0 and rec["mem_clock_mhz"] == 2619.0
    assert rec["mean_power_w"] == 600.0 and rec["domains"] == {}
    assert set(rec) == {"available", "reason", "source", *energy.RUN_ENERGY_NUMBERS}


def test_run_energy_without_telemetry_unavailable_or_nothing_timed():
    cpu = energy.run_energy(energy.energy_record("rapl", "c", 8.0, 1.0), None, 4, 8)
    assert cpu["joules_per_image"] == 1.0 and cpu["peak_power_w"] is None
    assert cpu["sm_clock_mhz"] is None and cpu["mem_clock_mhz"] is None
    off = energy.run_energy(energy.unavailable("no NVML", "nvml"), TELEMETRY, 4, 8)
    assert off["available"] is False and off["reason"] == "no NVML" and off["source"] == "nvml"
    assert all(off[key] is None for key in energy.RUN_ENERGY_NUMBERS)
    assert energy.run_energy(None, TELEMETRY, 4, 8) is None


def rank_energy(source, joules, seconds=1.0, peak=None, sm=None):
    rec = energy.energy_record(source, "c", joules, seconds, {"package-0": joules})
    tele = {"available": True, "power_w": {"max": peak}, "sm_mhz": {"median": sm}} if peak else None
    return energy.run_energy(rec, tele, 5, 10)


def test_merge_sums_gpus_and_counts_every_ranks_images():
    parts = [
        rank_energy("nvml", 100.0, 1.0, 400.0, 1700.0),
        rank_energy("nvml", 110.0, 1.1, 420.0, 1800.0),
    ]
    rec = energy.merge_rank_energy(parts, steps=5, images=20)
    assert rec["joules"] == 210.0 and rec["seconds"] == 1.1
    assert rec["joules_per_step"] == 42.0 and rec["joules_per_image"] == 10.5
    assert rec["mean_power_w"] == pytest.approx(210.0 / 1.1)
    assert rec["peak_power_w"] == 820.0 and rec["sm_clock_mhz"] == 1750.0
    assert rec["mem_clock_mhz"] is None  # not every rank sampled it


def test_merge_takes_the_largest_rapl_reading_not_the_sum():
    rec = energy.merge_rank_energy([rank_energy("rapl", 30.0), rank_energy("rapl", 32.0)], 5, 20)
    assert rec["joules"] == 32.0 and rec["domains"] == {"package-0": 32.0}
    assert rec["joules_per_image"] == 32.0 / 20 and rec["peak_power_w"] is None


def test_merge_is_unavailable_with_the_ranks_reason():
    off = energy.run_energy(energy.unavailable("/sys/x is not readable", "rapl"), None, 5, 10)
    rec = energy.merge_rank_energy([rank_energy("rapl", 30.0), off], 5, 20)
    assert rec["available"] is False and rec["reason"] == "rank 1: /sys/x is not readable"
    assert rec["source"] == "rapl" and rec["joules_per_image"] is None
    missing = energy.merge_rank_energy([None, rank_energy("rapl", 30.0)], 5, 20)
    assert missing["reason"] == "rank 0 recorded no energy"
    assert energy.merge_rank_energy([None, None], 5, 20) is None


def test_merge_records_merges_the_ranks_energy_and_keeps_each():
    def part(joules):
        return {
            "status": "ok",
            "step_time_s": {"median": 0.1, "all": [0.1] * 5},
            "data_wait_s": {"median": 0.0, "total": 0.0, "all": [0.0] * 5},
            "compute_s": {"median": 0.1, "total": 0.5},
            "energy": rank_energy("nvml", joules),
        }

    base = {"config": {"batch_size": 2, "iters": 5, "nproc": 2}}
    rec = merge_records(base, [part(10.0), part(12.0)], [0, 0], [1, 2])
    assert rec["energy"]["joules"] == 22.0
    assert rec["energy"]["joules_per_image"] == 22.0 / (2 * 5 * 2)
    assert [r["energy"]["joules"] for r in rec["ranks"]] == [10.0, 12.0]


# --------------------------------------------------------------------------- the driver


class RecordingMeter:
    def __init__(self, calls):
        self.calls = calls

    def start(self):
        self.calls.append("start")
        return True

    def stop(self):
        self.calls.append("stop")
        return energy.energy_record("rapl", "c", 1.0, 1.0)


def test_the_meter_spans_exactly_the_timed_steps():
    calls: list[str] = []
    record: dict = {}
    start, stop = step_hooks.with_energy(
        RecordingMeter(calls), lambda: calls.append("before"), lambda: calls.append("after"), record
    )
    resolved = train_config.Resolved(
        cfg=train_config.TrainConfig(arch="resnet18", batch_size=2, image_size=32, backend="cpu"),
        backend="cpu",
        device="cpu",
        threads=1,
        settings=train_config.precision_settings("fp32", "cpu"),
    )
    setup = train.Setup(
        resolved=resolved,
        model=None,
        optimizer=None,
        step=lambda _x, _y: calls.append("step"),
        next_batch=lambda: (None, None),
        numerics={},
    )
    train.timed_loop(setup, warmup_iters=2, iters=3, before_timed=start, after_timed=stop)
    assert calls == ["step", "step", "before", "start", "step", "step", "step", "stop", "after"]
    assert record["energy"]["joules"] == 1.0


def test_a_cpu_run_records_the_joules_of_its_timed_steps(tmp_path, monkeypatch):
    root = fake_powercap(tmp_path)
    pkg = tmp_path / "devices" / "intel-rapl" / "intel-rapl:0"
    monkeypatch.setenv(energy.POWERCAP_ENV, str(root))
    done = threading.Event()

    def burn():  # the package draws 1 mJ each millisecond
        uj = 1_000_000
        while not done.is_set():
            uj += 1000
            set_uj(pkg, uj)
            time.sleep(0.001)

    cfg = train_config.TrainConfig(
        arch="resnet18", batch_size=2, image_size=32, warmup_iters=1, iters=3, backend="cpu"
    )
    resolved = train_config.Resolved(
        cfg=cfg,
        backend="cpu",
        device="cpu",
        threads=torch.get_num_threads(),
        settings=train_config.precision_settings("fp32", "cpu"),
    )
    thread = threading.Thread(target=burn, daemon=True)
    thread.start()
    try:
        rec = train.run(resolved, progress=None)
    finally:
        done.set()
        thread.join()
    assert rec["status"] == "ok", rec["message"]
    e = rec["energy"]
    assert e["available"] is True and e["source"] == "rapl", e
    assert e["joules"] > 0 and e["domains"]["package-0"] == e["joules"]
    assert e["joules_per_image"] == pytest.approx(e["joules"] / (3 * 2))
    assert e["joules_per_step"] == pytest.approx(e["joules"] / 3)
    assert e["peak_power_w"] is None and e["sm_clock_mhz"] is None
    # over the timed steps alone: no more than the counter moved over the whole run
    assert e["seconds"] <= rec["wall_s"]


def test_a_run_that_times_nothing_records_no_energy(monkeypatch, tmp_path):
    monkeypatch.setenv(energy.POWERCAP_ENV, str(fake_powercap(tmp_path)))
    cfg = train_config.TrainConfig(
        arch="resnet18", batch_size=2, image_size=32, warmup_iters=1, iters=3, backend="cpu",
        profile_step=True,
    )  # fmt: skip
    resolved = train_config.Resolved(
        cfg=cfg,
        backend="cpu",
        device="cpu",
        threads=torch.get_num_threads(),
        settings=train_config.precision_settings("fp32", "cpu"),
    )
    rec = train.run(resolved, progress=None)
    assert rec["status"] == "ok" and rec["energy"] is None
