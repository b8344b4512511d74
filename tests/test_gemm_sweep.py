"""The GPU GEMM sweep (issue 26, section 4), without a GPU: a fake CUDA timing layer
(bench_gemm/bench_conv answer from a table of rates per precision, shape and library)
and a fake NVML; and the study's kernels that beat a measured roof, on the committed
H100 captures."""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path

import pytest
import torch

from dnnroofline.measure import ceiling_kernels as ck
from dnnroofline.measure import gemm_sweep, timer
from dnnroofline.ncu.above_roof import (
    class_precision,
    kernels_above_measured_roof,
    summary_line,
)
from dnnroofline.study import datasheet

ROOT = Path(__file__).resolve().parents[1]
H100 = ROOT / "examples" / "h100" / "results" / "h100"
T = 1e12


class FakeNvml:
    """The pynvml functions NvmlSampler calls; the clock and power are set per candidate."""

    NVML_CLOCK_SM = 0
    NVML_CLOCK_MEM = 1
    NVML_TEMPERATURE_GPU = 0

    def __init__(self, fail_init: bool = False):
        self.fail_init = fail_init
        self.sm_mhz = 1980
        self.power_mw = 500_000

    def nvmlInit(self):
        if self.fail_init:
            raise RuntimeError("NVML Shared Library Not Found")

    def nvmlShutdown(self):
        pass

    def nvmlDeviceGetHandleByIndex(self, index):
        return ("gpu", index)

    def nvmlDeviceGetClockInfo(self, _h, clock):
        return self.sm_mhz if clock == self.NVML_CLOCK_SM else 2619

    def nvmlDeviceGetMaxClockInfo(self, _h, clock):
        return 1980 if clock == self.NVML_CLOCK_SM else 2619

    def nvmlDeviceGetPowerUsage(self, _h):
        return self.power_mw

    def nvmlDeviceGetEnforcedPowerLimit(self, _h):
        return 700_000

    def nvmlDeviceGetTemperature(self, _h, _sensor):
        return 60

    def nvmlDeviceGetCurrentClocksEventReasons(self, _h):
        return 0


def library_in_effect() -> str:
    """The library torch routes torch.matmul through now (the sweep sets it); cuBLAS
    where torch has no choice."""
    choose = getattr(torch.backends.cuda, "preferred_blas_library", None)
    return str(choose() if choose else "cublas").rsplit(".", 1)[-1].lower()


class FakeGpu:
    """bench_gemm and bench_conv of a made-up GPU: ``rates[(precision, m, n, k, library)]``
    = (TFLOP/s, SM MHz, W); other GEMMs run at ``base`` TFLOP/s, 1980 MHz and 500 W.
    Each call holds its timing context (the NVML sampling) over a short sleep, as the
    real timer holds it over the timed repeats."""

    def __init__(self, monkeypatch, nvml: FakeNvml, rates: dict, base: float = 100.0):
        self.nvml, self.rates, self.base = nvml, rates, base
        self.calls: list[tuple] = []
        monkeypatch.setattr(ck, "bench_gemm", self.bench_gemm)
        monkeypatch.setattr(ck, "bench_conv", self.bench_conv)

    def _timed(self, flop: float, tflops: float, mhz: float, watts: float, timing_context):
        self.nvml.sm_mhz, self.nvml.power_mw = mhz, watts * 1000
        with timing_context or contextlib.nullcontext():
            time.sleep(0.03)
        t = flop / (tflops * T)
        return {
            "flop": flop,
            "times_s": {"min": t, "median": t * 1.01},
            "flops_best": flop / t,
            "flops_median": flop / (t * 1.01),
            "reps": 10,
        }

    def bench_gemm(self, device, precision, n, *, m=None, k=None, timing_context=None, **timing):
        m, k = m or n, k or n
        lib = library_in_effect()
        self.calls.append((precision, m, n, k, lib))
        tflops, mhz, watts = self.rates.get((precision, m, n, k, lib), (self.base, 1980, 500))
        res = self._timed(2 * m * n * k, tflops, mhz, watts, timing_context)
        return {**res, "m": m, "n": n, "k": k, "dtype": precision}

    def bench_conv(self, device, precision, batch, c_in, hw, c_out, kernel, **kw):
        flop = ck.conv_flop(batch, c_in, c_out, hw, hw, kernel, kernel)
        res = self._timed(flop, self.base * 3, 1900, 600, kw.get("timing_context"))
        shape = {"batch": batch, "c_in": c_in, "hw": hw, "c_out": c_out, "kernel": kernel}
        return {
            **res,
            "shape": shape,
            "dtype": precision,
            "backward": kw.get("backward", False),
            "channels_last": kw.get("channels_last", False),
        }


def gemms(roof: dict) -> list[dict]:
    return [c for c in roof["candidates"] if c["kind"] == "gemm"]


# ----------------------------------------------------------------------------- the sweep


def test_every_shape_goes_through_cublas_and_cublaslt_with_its_clock_and_power(monkeypatch):
    nvml = FakeNvml()
    gpu = FakeGpu(monkeypatch, nvml, {("bf16", 4096, 4096, 4096, "cublaslt"): (716.6, 1755, 699)})
    roof = ck.measure_compute("cuda", "bf16", nvml=nvml)
    shapes = [(m, n, k) for _, m, n, k in gemm_sweep.GPU_GEMM_SHAPES]
    assert len(shapes) >= 8 and (2048, 2048, 2048) in shapes and (16384, 16384, 16384) in shapes
    assert any(k >= 4 * max(m, n) for m, n, k in shapes)  # long-K shapes (issue 40)
    assert any(m != n for m, n, _ in shapes)  # transformer- and convolution-like shapes too
    tried = [(m, n, k, lib) for _, m, n, k, lib in gpu.calls]
    assert tried == [(*s, lib) for s in shapes for lib in ("cublas", "cublaslt")]
    for cand, (m, n, k, lib) in zip(gemms(roof), tried, strict=True):
        assert cand["status"] == "ok"
        assert {key: cand["shape"][key] for key in "mnk"} == {"m": m, "n": n, "k": k}
        assert cand["shape"]["what"] == gemm_sweep.shape_label(m, n, k)
        assert cand["library"] == cand["library_in_effect"] == lib
        assert f"{m}x{n}x{k}" in cand["method"]
        assert gemm_sweep.LIBRARY_NAMES[lib] in cand["method"]
        tele = cand["telemetry"]
        assert tele["available"] is True and tele["samples"] >= 2
        expected = (
            (1755, 699.0) if (m, n, k, lib) == (4096, 4096, 4096, "cublaslt") else (1980, 500)
        )
        assert (cand["sm_clock_mhz"], cand["power_w"]) == expected
    convs = [c for c in roof["candidates"] if c["kind"] == "conv"]
    assert len(convs) == 3 and all(c["library"] == "cuDNN" for c in convs)
    assert all((c["sm_clock_mhz"], c["power_w"]) == (1900, 600.0) for c in convs)
    # the roof says what it ran at
    assert roof["value"] == pytest.approx(716.6 * T)
    assert (roof["sm_clock_mhz"], roof["power_w"]) == (1755, 699.0)
    assert "4096x4096x4096 (MxNxK) bf16 through cuBLASLt" in roof["set_by"]
    assert "at 1755 MHz SM clock, 699 W" in roof["method"]
    assert torch.backends.cuda.preferred_blas_library() == torch._C._BlasBackend.Cublas


def test_the_roof_is_the_best_candidate_across_shapes_and_libraries(monkeypatch):
    # The H100 of examples/h100 ran fp16 fastest at 8192^3 (681 TFLOP/s) and bf16 at
    # 4096^3 (716.6) through cuBLAS: one shape per precision set each roof, and amp sat
    # below bf16 on the same tensor cores. Here the made-up GPU runs both at 716.6 at
    # 4096^3 through cuBLAS, and amp faster still through cuBLASLt at a transformer
    # shape that the four square-ish GEMMs never tried.
    recorded = {
        ("amp", 4096, 4096, 4096, "cublas"): (673.9, 1980, 690),
        ("amp", 8192, 8192, 8192, "cublas"): (681.1, 1980, 695),
        ("bf16", 4096, 4096, 4096, "cublas"): (716.6, 1980, 690),
        ("amp", 16384, 16384, 4096, "cublas"): (702.0, 1980, 699),
        ("amp", 16384, 16384, 4096, "cublaslt"): (731.5, 1965, 700),
        ("amp", 12544, 2048, 512, "cublaslt"): (650.0, 1980, 640),
    }
    FakeGpu(monkeypatch, FakeNvml(), recorded)
    amp = ck.measure_compute("cuda", "amp", nvml=FakeNvml())
    bf16 = ck.measure_compute("cuda", "bf16", nvml=FakeNvml())
    for roof in (amp, bf16):
        best = max(gemms(roof), key=lambda c: c["flops_best"])
        assert roof["value"] == best["flops_best"] and best["set_roof"] is True
        assert [c["set_roof"] for c in roof["candidates"]].count(True) == 1
    assert amp["value"] == pytest.approx(731.5 * T)
    assert "16384x16384x4096 (MxNxK) amp through cuBLASLt" in amp["set_by"]
    assert amp["value"] > bf16["value"] == pytest.approx(716.6 * T)
    n = len(gemm_sweep.GPU_GEMM_SHAPES)
    assert amp["method"].startswith(
        f"best of {2 * n} GEMMs through torch.matmul ({n} shapes x cuBLAS/cuBLASLt; 3 convolutions"
    )


def test_without_cublaslt_the_candidate_says_unavailable_and_why(monkeypatch):
    FakeGpu(monkeypatch, FakeNvml(), {})
    monkeypatch.delattr(torch.backends.cuda, "preferred_blas_library")
    roof = ck.measure_compute("cuda", "amp", nvml=FakeNvml())
    lt = [c for c in gemms(roof) if c["library"] == "cublaslt"]
    assert len(lt) == len(gemm_sweep.GPU_GEMM_SHAPES)
    for cand in lt:
        assert cand["status"] == "unavailable" and "flops_best" not in cand
        assert (
            "no torch.backends.cuda.preferred_blas_library (added in torch 2.3)" in cand["reason"]
        )
        assert set(cand["shape"]) == {"m", "n", "k", "what"}
    blas = [c for c in gemms(roof) if c["library"] == "cublas"]
    assert all(c["status"] == "ok" for c in blas) and len(blas) == len(lt)
    assert f"; {len(lt)} unavailable: torch " in roof["method"]


def test_a_library_torch_does_not_put_in_effect_is_unavailable(monkeypatch):
    # a torch whose switch answers with another library than the one asked for
    FakeGpu(monkeypatch, FakeNvml(), {})
    monkeypatch.setattr(
        torch.backends.cuda, "preferred_blas_library", lambda backend=None: "_BlasBackend.Cublas"
    )
    roof = ck.measure_compute("cuda", "fp32", nvml=FakeNvml())
    lt = [c for c in gemms(roof) if c["library"] == "cublaslt"]
    assert all(c["status"] == "unavailable" for c in lt)
    assert lt[0]["reason"] == "asked torch for cublaslt, it reports cublas in effect"


def test_without_nvml_clock_and_power_are_null_with_the_reason(monkeypatch):
    FakeGpu(monkeypatch, FakeNvml(), {})
    roof = ck.measure_compute("cuda", "tf32", nvml=FakeNvml(fail_init=True))
    for cand in roof["candidates"]:
        assert cand["sm_clock_mhz"] is None and cand["power_w"] is None
        assert cand["telemetry"]["available"] is False
        assert "NVML Shared Library Not Found" in cand["telemetry"]["reason"]
    assert roof["sm_clock_mhz"] is None and roof["power_w"] is None
    assert "SM clock and power not recorded: NVML: RuntimeError" in roof["method"]


def test_quick_mode_on_a_gpu_keeps_torchs_default_library_and_samples_nvml(monkeypatch):
    FakeGpu(monkeypatch, FakeNvml(), {})
    roof = ck.measure_compute("cuda", "fp32", quick=True, nvml=FakeNvml())
    assert [c["library"] for c in gemms(roof)] == ["default", "default"]
    assert [c["shape"]["m"] for c in gemms(roof)] == [256, 1024]
    assert all(c["sm_clock_mhz"] == 1980 for c in roof["candidates"])
    assert "(2 shapes x default;" in roof["method"] and "QUICK mode" in roof["method"]


def test_the_real_gemm_timer_carries_its_candidates_library_and_sampling():
    record: dict = {}
    params = {"m": 96, "n": 64, "k": 32, "library": "cublaslt"}
    with gemm_sweep.cuda_conditions("gemm", params, record, FakeNvml()) as timing_context:
        assert library_in_effect() == "cublaslt"
        res = ck.bench_gemm(
            "cpu", "fp32", 64, m=96, k=32, reps=3, min_reps=3, min_repeat_s=0.1,
            timing_context=timing_context,
        )  # fmt: skip
    assert res["flops_best"] > 0 and library_in_effect() != "cublaslt"  # restored after
    assert record["shape"] == {"m": 96, "n": 64, "k": 32, "what": None}
    assert record["library_in_effect"] == "cublaslt"
    # sampled during the repeats (how often depends on the host's load), and at their end
    assert record["telemetry"]["samples"] >= 1 and record["sm_clock_mhz"] == 1980


def test_the_timing_context_covers_the_timed_repeats_only():
    calls, entered = [], []

    @contextlib.contextmanager
    def sampling():
        entered.append(len(calls))
        yield
        entered.append(len(calls))

    _, inner = timer.time_repeats(
        "cpu", lambda: calls.append(1), warmup=3, reps=4, min_reps=4, timing_context=sampling()
    )
    assert inner == 1 and entered == [3, 3 + 4]  # after the warm-up, around the repeats


def test_the_sweep_fits_about_two_minutes_on_an_h100():
    # 13 shapes x 2 libraries x 4 precisions, each warmed up for 0.5 s and timed over 10
    # repeats of >= 5 ms: about 72 s at the datasheet peaks, 90 s at half of them
    row = datasheet.lookup_gpu("NVIDIA H100 80GB HBM3")
    peaks = {p: row.flops(p) for p in ("fp32", "tf32", "amp", "bf16")}
    at_peak = gemm_sweep.sweep_seconds(peaks, timer.GPU_TIMING)
    at_half = gemm_sweep.sweep_seconds(peaks, timer.GPU_TIMING, efficiency=0.5)
    n = len(gemm_sweep.GPU_GEMM_SHAPES) * len(gemm_sweep.BLAS_LIBRARIES) * len(peaks)
    assert n * timer.GPU_MIN_WARMUP_S < at_peak < at_half < 120


# ----------------------------------------------------------------------------- kernels above


def h100(name: str) -> dict:
    return json.loads((H100 / name).read_text())


def test_resnet50_amp_kernels_beat_the_h100s_measured_amp_roof():
    # The measured amp roof (681 TFLOP/s, one GEMM at 8192^3) is below ResNet-50's own
    # cuDNN convolutions in ncu's replay (up to 756 TFLOP/s): that roof is wrong.
    ceilings = h100("ceilings.json")
    ncu = h100("ncu/h100_resnet50_amp_bs256.json")
    above = kernels_above_measured_roof(ncu, ceilings, "amp")
    assert len(above) == 14
    assert {k["roof_precision"] for k in above} == {"amp"}
    assert above[0]["roof"] == pytest.approx(681.05 * T, rel=1e-4)
    top = above[0]
    assert top["id"] == 271 and top["flops"] == pytest.approx(755.9 * T, rel=1e-3)
    assert top["name"].startswith(
        "sm90_xmma_fprop_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc_tilesize128x128x64"
    )
    names = [k["name"] for k in above]
    assert sum("xmma_dgrad_implicit_gemm" in n for n in names) == 2  # input gradients too
    assert sum(n.startswith("nvjet_sm90_hsh") for n in names) == 3  # and cuBLAS's own GEMMs
    assert [k["flops"] for k in above] == sorted((k["flops"] for k in above), reverse=True)
    assert all(k["flops"] > k["roof"] and k["above_by"] > 0 for k in above)
    kernel = ncu["kernels"][top["index"]]
    assert top["flops"] == kernel["flop"]["tensor"] / kernel["time_s"]
    line = summary_line(above, "amp")
    assert line.startswith("14 kernel(s) of this amp capture beat the measured roof (amp 681.1")
    assert "755.9 TFLOP/s" in line


def test_resnet50_bf16_kernels_beat_the_h100s_measured_bf16_roof_too():
    above = kernels_above_measured_roof(
        h100("ncu/h100_resnet50_bf16_bs256.json"), h100("ceilings.json"), "bf16"
    )
    assert len(above) == 18 and above[0]["flops"] == pytest.approx(769.4 * T, rel=1e-3)
    assert above[0]["roof"] == pytest.approx(716.62 * T, rel=1e-4)


def test_a_kernel_is_held_to_its_own_classs_measured_roof():
    assert class_precision("tensor", "amp") == "amp"
    assert class_precision("tensor", "fp32") == "tf32"
    assert class_precision("fp32", "bf16") == "fp32"
    assert class_precision("fp16", "amp") is None  # no microbenchmark measures it
    ceilings = {
        "roofs": [
            {"kind": "compute", "precision": "fp32", "source": "measured", "value": 50 * T},
            {"kind": "compute", "precision": "fp16", "source": "measured", "value": 600 * T},
            {"kind": "compute", "precision": "amp", "source": "datasheet", "value": 900 * T},
            {"kind": "memory", "precision": None, "source": "measured", "value": 3 * T},
        ]
    }

    def kernel(path: str, tflop: float) -> dict:
        flop = {"fp64": 0, "fp32": 0, "fp16": 0, "tensor": 0, path: tflop * T}
        return {"id": path, "name": f"void {path}_kernel<1>(int)", "time_s": 1.0, "flop": flop}

    ncu = {"kernels": [kernel("tensor", 650), kernel("fp32", 60), kernel("fp16", 9000)]}
    above = kernels_above_measured_roof(ncu, ceilings, "amp")
    # the tensor kernel beats the measured fp16 roof (an alias of amp), not the datasheet
    assert [(k["id"], k["roof"]) for k in above] == [("tensor", 600 * T), ("fp32", 50 * T)]
    assert above[0]["short_name"] == "tensor_kernel"
    assert kernels_above_measured_roof(ncu, ceilings, "amp")[0]["above_by"] == pytest.approx(
        650 / 600 - 1
    )
    assert summary_line([], "amp").startswith("No kernel")


def test_the_per_kernel_plot_rings_and_names_the_kernels_above_the_measured_roof(tmp_path):
    from xml.etree import ElementTree as ET

    from dnnroofline.ncu.kernels import kernel_points, level_roofs
    from dnnroofline.plots.kernels import plot_kernels

    ceilings, ncu = h100("ceilings.json"), h100("ncu/h100_resnet50_amp_bs256.json")
    above = kernels_above_measured_roof(ncu, ceilings, "amp")
    svg = tmp_path / "k.svg"
    info = plot_kernels(
        kernel_points(ncu), level_roofs(ceilings), "h100", "amp", None, svg, "t",
        above_measured=above,
    )  # fmt: skip
    assert info["above_measured"] == 14
    root = ET.parse(svg).getroot()
    ids = {e.get("id") for e in root.iter() if e.get("id")}
    assert {f"above-measured-roof-kernel-{k['index']}" for k in above} <= ids
    text = " ".join("".join(e.itertext()) for e in root.iter() if e.tag.endswith("text"))
    assert "14 above the measured roof (amp 681 TFLOP/s): roof too low" in text
    assert "sm90_xmma_fprop_implicit_gemm" in text and "756 TFLOP/s" in text


# ----------------------------------------------------------------------------- make gpu-check


def test_gpu_check_lists_every_sweep_candidate_with_its_clock_and_power(monkeypatch):
    from dnnroofline.report.gpu_summary import summary_markdown, sweep_rows

    nvml = FakeNvml()
    FakeGpu(monkeypatch, nvml, {("bf16", 4096, 4096, 4096, "cublaslt"): (716.6, 1755, 699)})
    monkeypatch.setattr(gemm_sweep, "BLAS_LIBRARIES", ("cublas", "cublaslt", "no_such_lib"))
    roof = ck.measure_compute("cuda", "bf16", nvml=nvml)
    rows = sweep_rows({"roofs": [roof]})
    assert len(rows) == 3 * len(gemm_sweep.GPU_GEMM_SHAPES)
    assert rows[0] == [
        "bf16", "4096x4096x4096", "cublaslt", "716.6 TFLOP/s", "1755 MHz", "699 W", "roof"
    ]  # fmt: skip
    assert rows[1][4:] == ["1980 MHz", "500 W", ""]
    gone = [r for r in rows if r[2] == "no_such_lib"]
    assert len(gone) == len(gemm_sweep.GPU_GEMM_SHAPES)
    assert gone[0][3].startswith("unavailable: torch ")
    assert "preferred_blas_library does not offer 'no_such_lib'" in gone[0][3]
    text = summary_markdown("local", "GPU", {"roofs": [roof]}, None, [], {})
    assert "## GEMM sweep: every candidate of the measured roofs, with its clock and power" in text


def test_gpu_check_names_the_h100_kernels_above_the_measured_roof():
    from dnnroofline.report.gpu_summary import kernels_above_rows, summary_markdown, sweep_rows

    ceilings = h100("ceilings.json")
    point = {"env": "h100", "model": "resnet50", "precision": "amp", "batch_size": 256.0,
             "images_per_s": 3000.0}  # fmt: skip
    captures = {"h100_resnet50_amp_bs256": h100("ncu/h100_resnet50_amp_bs256.json")}
    rows = kernels_above_rows([point], captures, ceilings)
    assert len(rows) == 14
    assert rows[0][0] == "h100 resnet50 amp bs256"
    assert rows[0][1].startswith("271: sm90_xmma_fprop_implicit_gemm_f16f16_f16f32_f32")
    assert rows[0][2:] == ["amp 681.1 TFLOP/s", "755.9 TFLOP/s", "11.0%"]
    # the H100's file predates the sweep: its GEMMs show, with what it did not record
    amp = [r for r in sweep_rows(ceilings) if r[0] == "amp"]
    assert amp[0] == [
        "amp", "8192x8192x8192", "not recorded", "681.1 TFLOP/s", "not recorded",
        "not recorded", "roof",
    ]  # fmt: skip
    text = summary_markdown("h100", "NVIDIA H100 80GB HBM3", ceilings, None, [point], captures)
    assert "## Kernels above their measured roof (that roof is too low)" in text


def test_the_ncu_report_page_names_the_kernels_above_the_measured_roof(tmp_path):
    import subprocess
    import sys

    capture = H100 / "ncu" / "h100_resnet50_amp_bs256.json"
    # the page keys captures by the complexity files' models and batches
    complexity = tmp_path / "resnet50_bs256.json"
    complexity.write_text(json.dumps({"arch": "resnet50", "batch_size": 256}))
    out = tmp_path / "ncu_vs_analytic.html"
    script = ROOT / "workflow" / "scripts" / "write_ncu_comparison.py"
    args = ["--ncu", str(capture), "--complexity", str(complexity), "--envs", "h100"]
    for ceilings in ([], [str(H100 / "ceilings.json")]):
        proc = subprocess.run(
            [sys.executable, str(script), *args, "--ceilings", *ceilings, "--out", str(out)],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        html = out.read_text()
        assert ("Measured roof." in html) == bool(ceilings)  # said only where it is known
    assert "14 kernel(s) of this amp capture beat the measured roof (amp 681.1 TFLOP/s)" in html
    assert "(kernel 271) 755.9 TFLOP/s" in html and "and 9 more" in html
