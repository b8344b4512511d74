"""What a GPU run records, without a GPU (issue 8): NVML clocks, power, temperature
and throttle reasons against a faked NVML; cuDNN autotuning on by default for
CUDA; the GradScaler's verdict on the profiled step; the ncu step's warm-up."""

from __future__ import annotations

import time

import pytest

from dnnroofline.errors import InputError
from dnnroofline.measure import run_record, step_hooks, train, train_config
from dnnroofline.measure.nvml_sampler import (
    LIMITING_REASONS,
    NvmlSampler,
    decode_reasons,
    summarize,
)

POWER_CAP, IDLE, HW_THERMAL = 0x4, 0x1, 0x40


class FakeNvml:
    """The pynvml functions the sampler calls, with readings that change per call."""

    NVML_CLOCK_SM = 0
    NVML_CLOCK_MEM = 1
    NVML_TEMPERATURE_GPU = 0

    def __init__(self, reasons=(0,), fail_init=False):
        self.reasons = list(reasons)
        self.fail_init = fail_init
        self.calls = 0
        self.shutdown = False

    def nvmlInit(self):
        if self.fail_init:
            raise RuntimeError("NVML Shared Library Not Found")

    def nvmlShutdown(self):
        self.shutdown = True

    def nvmlDeviceGetHandleByIndex(self, index):
        return ("gpu", index)

    def nvmlDeviceGetClockInfo(self, _h, clock):
        return 1980 - 10 * (self.calls % 3) if clock == self.NVML_CLOCK_SM else 2619

    def nvmlDeviceGetMaxClockInfo(self, _h, clock):
        return 1980 if clock == self.NVML_CLOCK_SM else 2619

    def nvmlDeviceGetPowerUsage(self, _h):
        return 650_000 + 1000 * (self.calls % 5)  # milliwatts

    def nvmlDeviceGetEnforcedPowerLimit(self, _h):
        return 700_000

    def nvmlDeviceGetTemperature(self, _h, _sensor):
        raise RuntimeError("not supported")  # one missing reading: None, not a crash

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, _h):
        value = self.reasons[min(self.calls, len(self.reasons) - 1)]
        self.calls += 1
        return value


def test_decode_reasons():
    assert decode_reasons(0) == []
    assert decode_reasons(POWER_CAP | IDLE) == ["gpu_idle", "sw_power_cap"]
    assert decode_reasons(0x1000) == ["bit_0x1000"]
    assert "sw_power_cap" in LIMITING_REASONS and "gpu_idle" not in LIMITING_REASONS


def test_summary_flags_a_power_capped_run():
    samples = [
        {"sm_mhz": 1980, "mem_mhz": 2619, "power_w": 690.0, "temperature_c": 60, "reasons": 0},
        {"sm_mhz": 1755, "mem_mhz": 2619, "power_w": 700.0, "temperature_c": 62, "reasons": 4},
        {"sm_mhz": 1800, "mem_mhz": 2619, "power_w": 699.0, "temperature_c": 63, "reasons": 4},
        {"sm_mhz": 1980, "mem_mhz": 2619, "power_w": 500.0, "temperature_c": 63, "reasons": 1},
    ]
    s = summarize(samples, 0.1, {"sm_max_mhz": 1980})
    assert s["throttled"] is True and s["throttled_fraction"] == 0.5
    assert s["limiting_reasons"] == ["sw_power_cap"]
    assert s["throttle_reasons"] == {"gpu_idle": 0.25, "sw_power_cap": 0.5}
    assert s["sm_mhz"] == {"median": 1890.0, "min": 1755, "max": 1980}
    assert s["power_w"]["max"] == 700.0 and s["limits"] == {"sm_max_mhz": 1980}
    idle_only = summarize([{"reasons": IDLE}], 0.1)
    assert idle_only["throttled"] is False and idle_only["sm_mhz"] is None


def test_sampler_against_a_faked_nvml_records_the_timed_region():
    nvml = FakeNvml(reasons=[0, 0, HW_THERMAL, HW_THERMAL, 0])
    sampler = NvmlSampler(0, interval_s=0.005, nvml=nvml)
    assert sampler.start() is True
    time.sleep(0.06)
    rec = sampler.stop()
    assert nvml.shutdown is True
    assert rec["available"] is True and rec["samples"] >= 3
    assert rec["throttled"] is True and rec["limiting_reasons"] == ["hw_thermal_slowdown"]
    assert rec["limits"] == {"sm_max_mhz": 1980, "mem_max_mhz": 2619, "power_limit_w": 700.0}
    assert rec["mem_mhz"]["median"] == 2619 and 650.0 <= rec["power_w"]["min"] <= 654.0
    assert rec["temperature_c"] is None  # the fake GPU has no temperature sensor


def test_sampler_without_nvml_says_why():
    sampler = NvmlSampler(0, nvml=FakeNvml(fail_init=True))
    assert sampler.start() is False
    rec = sampler.stop()
    assert rec["available"] is False and "NVML Shared Library Not Found" in rec["reason"]


def _fake_setup():
    def step(_x, _y):
        time.sleep(0.01)

    resolved = train_config.Resolved(
        cfg=train_config.TrainConfig(arch="resnet18", batch_size=2, image_size=32, backend="cpu"),
        backend="cpu",
        device="cpu",
        threads=1,
        settings=train_config.precision_settings("fp32", "cpu"),
    )
    return train.Setup(
        resolved=resolved,
        model=None,
        optimizer=None,
        step=step,
        next_batch=lambda: (None, None),
        numerics={},
    )


def test_sampling_covers_exactly_the_timed_steps():
    nvml = FakeNvml(reasons=[POWER_CAP])
    sampler = NvmlSampler(0, interval_s=0.002, nvml=nvml)
    record: dict = {}
    start, stop = step_hooks.with_sampler(sampler, None, None, record)
    calls_before_timing = []

    def step(_x, _y):
        calls_before_timing.append(nvml.calls)
        time.sleep(0.01)

    setup = _fake_setup()
    setup.step = step
    train.timed_loop(setup, warmup_iters=2, iters=4, before_timed=start, after_timed=stop)
    assert calls_before_timing[:2] == [0, 0]  # the warm-up is not sampled
    tele = record["gpu_telemetry"]
    assert tele["samples"] >= 4 and tele["throttled"] is True


# --------------------------------------------------------------------------- driver settings


def test_cudnn_autotuning_is_on_by_default_for_cuda_only():
    assert train_config.cudnn_benchmark_setting(None, "cuda") is True
    assert train_config.cudnn_benchmark_setting(None, "cpu") is False
    assert train_config.cudnn_benchmark_setting(False, "cuda") is False
    args = train_config.arg_parser().parse_args(
        ["--arch", "resnet18", "--batch-size", "2", "--out", "x"]
    )
    assert train_config.config_from_args(args).cudnn_benchmark is None
    off = train_config.arg_parser().parse_args(
        ["--arch", "resnet18", "--batch-size", "2", "--out", "x", "--no-cudnn-benchmark"]
    )
    assert train_config.config_from_args(off).cudnn_benchmark is False
    resolved = _fake_setup().resolved
    rec = run_record.config_record(resolved)
    assert rec["cudnn_benchmark"] is False and rec["cudnn_benchmark_source"].startswith("default")
    resolved.backend = "cuda"
    assert run_record.config_record(resolved)["cudnn_benchmark"] is True


def test_profiled_step_needs_two_warmup_steps():
    cfg = train_config.TrainConfig(
        arch="resnet18", batch_size=2, image_size=32, backend="cpu", warmup_iters=1
    )
    cfg.profile_step = True
    with pytest.raises(InputError, match="--warmup-iters >= 2"):
        train_config.validate(cfg)


class FakeScaler:
    def __init__(self, scales):
        self.scales = list(scales)

    def get_scale(self):
        return self.scales.pop(0)


def test_grad_scaler_says_whether_the_profiled_step_was_skipped():
    probe: dict = {}
    order = []
    start, stop = step_hooks.with_scale_probe(
        FakeScaler([65536.0, 32768.0]),
        lambda: order.append("start"),
        lambda: order.append("stop"),
        probe,
    )
    start()
    stop()
    assert order == ["start", "stop"] and probe == {"before": 65536.0, "after": 32768.0}
    skipped = step_hooks.grad_scaler_record(probe["before"], probe["after"], 1, profiled=True)
    assert skipped["profiled_step_skipped"] is True and skipped["scale_decreased"] is True
    clean = step_hooks.grad_scaler_record(65536.0, 65536.0, 1, profiled=True)
    assert clean["profiled_step_skipped"] is False
    timed = step_hooks.grad_scaler_record(65536.0, 32768.0, 20, profiled=False)
    assert timed["profiled_step_skipped"] is None and timed["scale_decreased"] is True


# --------------------------------------------------------------------------- in the report


def test_report_flags_throttled_runs_and_shows_both_flop_rates():
    import pandas as pd

    from dnnroofline.report.measurement import measurement_section
    from dnnroofline.report.roofline import roofline_section

    capped = summarize(
        [{"sm_mhz": 1755, "mem_mhz": 2619, "power_w": 700.0, "reasons": POWER_CAP}] * 3,
        0.1,
        {"sm_max_mhz": 1980},
    )
    cool = summarize([{"sm_mhz": 1980, "mem_mhz": 2619, "power_w": 500.0, "reasons": 0}], 0.1)
    runs = [
        {"run_id": "gpu_resnet50_amp_bs64_run1", "gpu_telemetry": capped},
        {"run_id": "gpu_resnet50_amp_bs64_run2", "gpu_telemetry": cool},
        {"run_id": "gpu_resnet50_amp_bs64_run3", "gpu_telemetry": {"available": False,
                                                                  "reason": "NVML: no GPU"}},
        {"run_id": "local_resnet18_fp32_bs8_run1", "gpu_telemetry": None},
    ]  # fmt: skip
    page = measurement_section({}, None, None, runs)
    html = page[page.index("<h2>GPU clocks while timing") : page.index("<h2>Step-time")]
    assert "1 throttled run(s): gpu_resnet50_amp_bs64_run1." in html
    assert "THROTTLED (sw_power_cap, 100.0% of samples)" in html
    assert "1,755 / 1980" in html and "not throttled" in html and "NVML: no GPU" in html
    assert "local_resnet18" not in html
    # no sampled CUDA run: the page has no clocks table at all
    assert "GPU clocks" not in measurement_section({}, None, None, [{"run_id": "x"}])
    points = pd.DataFrame(
        [
            {
                "env": "gpu", "model": "resnet50", "precision": "amp", "batch_size": 64,
                "runs_ok": 3, "runs_failed": 0, "flop_per_step": 1.6e12, "bytes_per_step": 3e10,
                "ai": 53.3, "ai_source": "analytic", "step_median_s": 0.1,
                "attained_flops": 1.6e13, "roof_flops": 1e14, "roof_source": "datasheet",
                "peak_flops": 9.9e14, "peak_bandwidth": 3.35e12, "ridge_ai": 295.0,
                "efficiency": 0.16, "bound": "memory", "above_roof": False,
                "executed_flops": 1.8e13, "useful_flops": 1.6e13,
                "ai_note": "ncu untrusted_counters: the counter self-test failed for amp",
            }
        ]
    )  # fmt: skip
    page = roofline_section([], points)
    assert "executed GFLOP/s (ncu)" in page and "useful GFLOP/s (analytic)" in page
    assert "<td class=num>18,000</td><td class=num>16,000</td>" in page
    assert "ncu untrusted_counters: the counter self-test failed for amp" in page
