"""Ceilings: the CLI in quick mode, roof assembly, and peak selection."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from cpu_flags import CPU_FLAG_SETS, has_bf16
from fake_clock import FakeClock

from dnnroofline.errors import InputError
from dnnroofline.estimate import roofline
from dnnroofline.measure import ceiling_kernels as ck
from dnnroofline.measure import ceilings as cl
from dnnroofline.measure import gemm_sweep, timer
from dnnroofline.measure import memory_kernels as mk
from dnnroofline.study.config import CPU_FLAGS_ENV

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "workflow" / "scripts" / "ceilings.py"
HAS_CUDA = torch.cuda.is_available()


#: The CPU flags the quick CLI sees (DNNROOFLINE_CPU_FLAGS, tests/cpu_flags.py), so the
#: tests hold on a CPU with AVX512_BF16 and on one without, whatever this machine has.
WITHOUT_BF16 = CPU_FLAG_SETS["without_bf16"]
WITH_BF16 = CPU_FLAG_SETS["with_bf16"]
#: perf is probed on this binary, which no machine has: the probe's outcome is known
NO_PERF = "dnnroofline-test-no-such-perf"


def run_quick_ceilings(out: Path, flags: list[str]):
    """The ceilings CLI in quick mode on 1 thread, seeing ``flags`` as the CPU's."""
    cmd = [sys.executable, str(SCRIPT), "--env", "local"]
    cmd += ["--device", "cpu", "--precisions", "fp32", "bf16", "tf32", "--quick"]
    cmd += ["--expect-threads", "1", "--perf", NO_PERF, "--out", str(out)]
    env = dict(os.environ, OMP_NUM_THREADS="1", **{CPU_FLAGS_ENV: ",".join(flags)})
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(out.read_text()), proc.stderr, flags, out


@pytest.fixture(scope="module")
def quick_ceilings(tmp_path_factory):
    """On a CPU without AVX512_BF16: bf16 is skipped."""
    out = tmp_path_factory.mktemp("ceil") / "results" / "local" / "ceilings.json"
    return run_quick_ceilings(out, WITHOUT_BF16)


@pytest.fixture(scope="module")
def quick_ceilings_bf16(tmp_path_factory):
    """On a CPU with AVX512_BF16: bf16 is measured."""
    out = tmp_path_factory.mktemp("ceil_bf16") / "results" / "local" / "ceilings.json"
    return run_quick_ceilings(out, WITH_BF16)


def test_quick_cli_writes_contract(quick_ceilings):
    c, _, _, _ = quick_ceilings
    assert {"env", "device", "device_name", "threads", "roofs"} <= set(c)
    assert c["env"] == "local" and c["device"] == "cpu" and c["device_name"]
    assert c["threads"] == 1 and c["omp_num_threads"] == "1"  # from OMP_NUM_THREADS
    assert c["quick"] is True
    # perf probed once per env, on the env's binary: missing here, so unavailable, and why
    assert c["perf"]["status"] == "unavailable" and c["perf"]["executable"] == NO_PERF
    assert c["perf"]["reason"].startswith(f"perf not found ({NO_PERF!r} is not on PATH")
    assert f"perf counters unavailable: {c['perf']['reason']}" in c["notes"]
    assert c["llc_bytes"] is None or c["llc_bytes"] > 0
    assert c["start_time"] <= c["end_time"]
    # other processes' CPU use while it measured (the test suite's other worker among them)
    assert set(c["other_load"]) == {"other_processes_cpus", "steal_cpus", "wall_s"}
    assert c["other_load"]["wall_s"] > 0
    for r in c["roofs"]:
        assert r["kind"] in ("compute", "memory")
        assert r["source"] in ("measured", "datasheet")
        assert r["value"] > 0
        assert (r["precision"] is None) == (r["kind"] == "memory")
        note = r["method"] if r["source"] == "measured" else r["citation"]
        assert isinstance(note, str) and len(note) > 20


def test_cli_refuses_other_threads_than_the_env_declares(tmp_path):
    # Snakemake gives a job at most --cores threads: roofs of 1 thread are not the roofs
    # of runs on 2
    out = tmp_path / "ceilings.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--env", "local", "--device", "cpu", "--quick",
         "--expect-threads", "2", "--out", str(out)],
        capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"), timeout=120,
    )  # fmt: skip
    assert proc.returncode == 1
    assert "env declares 2 threads but this job got 1 (OMP_NUM_THREADS=1)" in proc.stderr
    assert "--cores >= 2" in proc.stderr
    assert not out.exists()


def test_quick_cli_measures_fp32_and_memory(quick_ceilings):
    c, _, _, _ = quick_ceilings
    fp32 = [r for r in c["roofs"] if r["source"] == "measured" and r["precision"] == "fp32"]
    assert len(fp32) == 1 and fp32[0]["value"] > 0
    assert fp32[0]["statistic"] == "best" and fp32[0]["value"] >= fp32[0]["median"]
    assert fp32[0]["method"].startswith("best of 4 microbenchmarks (2 GEMMs")
    assert "1 thread(s)" in fp32[0]["method"]
    mem = [r for r in c["roofs"] if r["kind"] == "memory" and r["source"] == "measured"]
    assert {r["benchmark"] for r in mem} == {"triad", "scale", "copy"}
    assert all(r["statistic"] == "best" and r["value"] >= r["median"] for r in mem)
    triad = next(r for r in mem if r["benchmark"] == "triad")
    assert "3 arrays" in triad["method"]


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_quick_roof_is_the_best_candidate(quick_ceilings_bf16, precision):
    """Every GEMM and convolution is recorded; the roof is the fastest, and it says so."""
    c, _, _, _ = quick_ceilings_bf16
    roof = next(r for r in c["roofs"] if r["source"] == "measured" and r["precision"] == precision)
    cands = roof["candidates"]
    assert [x["kind"] for x in cands] == ["gemm", "gemm", "conv", "conv"]
    assert all(x["flops_best"] > 0 and x["times_s"]["min"] > 0 for x in cands)
    assert [x["set_roof"] for x in cands].count(True) == 1
    win = next(x for x in cands if x["set_roof"])
    assert roof["value"] == win["flops_best"] == max(x["flops_best"] for x in cands)
    assert roof["set_by"] == win["method"] and win["method"] in roof["method"]
    gemm = cands[1]
    assert gemm["method"].startswith("torch.matmul 1024x64x576 (MxNxK)")
    assert gemm["flop"] == ck.gemm_flop(1024, 64, 576)
    conv, conv_bwd = cands[2], cands[3]
    assert conv["flop"] == ck.conv_flop(2, 16, 16, 16, 16, 3, 3)
    assert conv_bwd["flop"] == 3 * conv["flop"] and "forward+backward" in conv_bwd["method"]
    assert "oneDNN" in conv["method"] and "Winograd" in conv["method"]
    dtype = {"fp32": "float32", "bf16": "bfloat16"}[precision]
    assert all(dtype in x["method"] for x in cands)


def test_conv_flop_is_nominal_fma_two():
    # 1 image, 3->8 channels, 4x4 output, 3x3 kernel: 8*16 outputs x 27 MACs x 2
    assert ck.conv_flop(1, 3, 8, 4, 4, 3, 3) == 2 * 8 * 16 * 27
    assert ck.conv_flop(2, 32, 32, 7, 7, 3, 3, groups=32) == 2 * 2 * 32 * 49 * 9  # depthwise


def test_quick_fp32_below_derived_peak_or_flagged(quick_ceilings):
    c, _, _, _ = quick_ceilings
    meas = next(r for r in c["roofs"] if r["source"] == "measured" and r["precision"] == "fp32")
    ds = [r for r in c["roofs"] if r["source"] == "datasheet" and r["precision"] == "fp32"]
    if not ds:
        pytest.skip("no derived CPU peak (clock unknown)")
    assert ds[0]["inputs"]["cores"] == 1  # threads used, not all cores
    assert meas["percent_of_datasheet"] == pytest.approx(100 * meas["value"] / ds[0]["value"])
    # flagged exactly when above (both cases: test_annotate_explains_cpu_peak_with_implied_clock)
    above = meas["value"] > ds[0]["value"]
    assert meas["above_datasheet"] is above
    assert any("ABOVE the datasheet roof" in n for n in c["notes"]) is above


@pytest.mark.parametrize("cpu", ["quick_ceilings", "quick_ceilings_bf16"])
def test_quick_unsupported_precision_is_skipped_with_note(request, cpu):
    c, stderr, flags, _ = request.getfixturevalue(cpu)
    # Skipped in the order asked (fp32, bf16, tf32); bf16 only where the CPU lacks it.
    bf16 = [] if "avx512_bf16" in flags else ["bf16"]
    assert [s["precision"] for s in c["skipped"]] == bf16 + ["tf32"]
    tf32 = next(s for s in c["skipped"] if s["precision"] == "tf32")
    assert "TF32" in tf32["reason"]
    assert "skipped tf32" in stderr
    assert not [r for r in c["roofs"] if r["precision"] == "tf32"]


def test_bf16_is_measured_or_skipped_as_the_flag_detection_says(cpu_flags, monkeypatch):
    """In-process, under each set of flags (DNNROOFLINE_CPU_FLAGS), whatever this host
    has: the decision, with the timed kernels replaced (the quick CLI above times them)."""
    timed = []

    def fake_compute(device, precision, **_kw):
        timed.append(precision)
        return {"kind": "compute", "precision": precision, "source": "measured", "value": 1e9}

    monkeypatch.setattr(cl, "measure_compute", fake_compute)
    monkeypatch.setattr(cl, "measure_memory", lambda *_a, **_kw: [])
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    c = cl.build_ceilings("local", "cpu", ["fp32", "bf16"], quick=True, expect_threads=1)
    datasheet = [r for r in c["roofs"] if r["source"] == "datasheet"]
    if has_bf16(cpu_flags):
        assert timed == ["fp32", "bf16"] and c["skipped"] == []
        if datasheet:  # where the clock is known: bf16 at twice fp32's rate (AVX512_BF16)
            assert [r["inputs"]["isa"].startswith("avx512_bf16") for r in datasheet] == [
                False, True]  # fmt: skip
    else:
        assert timed == ["fp32"] and [s["precision"] for s in c["skipped"]] == ["bf16"]
        assert "AVX512_BF16 or AMX" in c["skipped"][0]["reason"]
        assert [r["precision"] for r in datasheet] in ([], ["fp32"])


def test_the_written_file_gives_the_pipeline_its_roofs(quick_ceilings):
    c, _, _, _ = quick_ceilings
    roofs = roofline.parse_roofs(c)
    fp32 = roofline.select_roof(roofs, "compute", "fp32")
    assert fp32.source == "measured" and fp32.value > 0
    mem = roofline.select_roof(roofs, "memory")
    assert mem.source == "measured"
    assert mem.value == max(r["value"] for r in c["roofs"] if r["kind"] == "memory")
    assert roofline.select_roof(roofs, "compute", "tf32") is None  # skipped on a CPU


def test_a_failed_gemm_keeps_the_precisions_datasheet_roof(monkeypatch):
    """Its runs may still run (the GEMM failed for its own reasons): without any roof for
    their precision, roofline_points would refuse the whole study."""
    memory = {"kind": "memory", "precision": None, "source": "measured", "value": 1e10}
    sheet = {"kind": "compute", "precision": "fp32", "source": "datasheet", "value": 2e11}
    asked = []

    def gemm_fails(device, precision, **kw):
        raise RuntimeError("CUBLAS_STATUS_EXECUTION_FAILED")

    def datasheet(device, name, precisions, **kw):
        asked.append(list(precisions))
        return [dict(sheet, citation="a datasheet")] if "fp32" in precisions else [], []

    monkeypatch.setattr(cl, "measure_compute", gemm_fails)
    monkeypatch.setattr(cl, "measure_memory", lambda *a, **kw: [memory])
    monkeypatch.setattr(cl, "datasheet_roofs", datasheet)
    c = cl.build_ceilings("x", "cpu", ["fp32"])
    assert c["skipped"] == [
        {"precision": "fp32", "reason": "cpu: GEMM failed: CUBLAS_STATUS_EXECUTION_FAILED"}
    ]
    assert asked == [["fp32"]]
    roof = roofline.select_roof(roofline.parse_roofs(c), "compute", "fp32")
    assert (roof.source, roof.value) == ("datasheet", 2e11)


# ----------------------------------------------------------------------------- pure pieces


def test_gemm_flop_counts_fma_as_two():
    assert ck.gemm_flop(2, 3, 4) == 48
    assert ck.gemm_flop(8192, 8192, 8192) == 2 * 8192**3


def test_gemm_size_for():
    # 2 n^3 = rate * t  ->  n = (1e11 * 0.6 / 2)^(1/3) = 3107 -> 3072
    assert ck.gemm_size_for(1e11, 0.6, lo=1024, hi=4096) == 3072
    assert ck.gemm_size_for(1e15, 0.6, lo=1024, hi=4096) == 4096
    assert ck.gemm_size_for(1e6, 0.6, lo=1024, hi=4096) == 1024


def test_stream_array_bytes():
    mib = 1024**2
    assert mk.stream_array_bytes(32 * mib, 64 * 1024 * mib)[0] == 128 * mib
    size, why = mk.stream_array_bytes(None, 64 * 1024 * mib)
    assert size == 64 * mib and "unknown" in why
    size, why = mk.stream_array_bytes(1024 * mib, 8 * 1024 * mib)  # RAM-capped
    assert size == 8 * 1024 * mib // 12 and "capped" in why
    assert mk.stream_array_bytes(32 * mib, None, quick=True)[0] == 4 * mib


def test_datasheet_roofs_for_gpu():
    roofs, notes = cl.datasheet_roofs("cuda", "NVIDIA H100 80GB HBM3", ["fp32", "bf16", "amp"])
    by = {(r["kind"], r["precision"]): r for r in roofs}
    assert by[("compute", "bf16")]["value"] == pytest.approx(989e12)
    assert by[("compute", "fp32")]["value"] == pytest.approx(67e12)
    assert by[("compute", "amp")]["datasheet_column"] == "fp16"
    assert by[("memory", None)]["value"] == pytest.approx(3.35e12)
    assert all("H100" in r["citation"] and "Datasheet" in r["citation"] for r in roofs)
    assert notes == []
    roofs, notes = cl.datasheet_roofs("cuda", "NVIDIA Mystery GPU", ["fp32"])
    assert roofs == [] and "NVIDIA Mystery GPU" in notes[0]


def test_datasheet_roofs_for_cpu_use_physical_cores_used():
    cpu = {
        "model": "Test",
        "cores_physical": 4,
        "max_clock_hz": 2e9,
        "clock_source": "test",
        "flags_all": ["avx2", "fma"],
        "arch": "x86_64",
        "vendor": "GenuineIntel",
        "family": 6,
        "model_number": 85,
    }
    roofs, _ = cl.datasheet_roofs("cpu", "Test", ["fp32"], cpu=cpu, threads=2)
    assert roofs[0]["value"] == pytest.approx(2 * 2e9 * 32)
    roofs, notes = cl.datasheet_roofs("cpu", "Test", ["fp32"], cpu=cpu, threads=8)
    assert roofs[0]["value"] == pytest.approx(4 * 2e9 * 32)
    assert any("physical cores" in n for n in notes)
    assert not [r for r in roofs if r["kind"] == "memory"]


def test_annotate_flags_measured_above_datasheet():
    roofs = [
        {"kind": "compute", "precision": "fp32", "source": "measured", "value": 120.0},
        {"kind": "compute", "precision": "fp32", "source": "datasheet", "value": 100.0},
        {"kind": "memory", "precision": None, "source": "measured", "value": 80.0},
        {"kind": "memory", "precision": None, "source": "datasheet", "value": 100.0},
        {"kind": "compute", "precision": "bf16", "source": "measured", "value": 5.0},
    ]
    warnings = cl.annotate_vs_datasheet(roofs)
    assert roofs[0]["percent_of_datasheet"] == pytest.approx(120.0)
    assert roofs[0]["above_datasheet"] is True
    assert roofs[2]["percent_of_datasheet"] == pytest.approx(80.0)
    assert roofs[2]["above_datasheet"] is False
    assert roofs[4]["percent_of_datasheet"] is None
    assert len(warnings) == 1 and "fp32" in warnings[0]


def test_build_ceilings_rejects_unknown_precision():
    with pytest.raises(InputError, match="fp8"):
        cl.build_ceilings("local", "cpu", ["fp8"], quick=True)


def test_cli_refuses_unavailable_device(tmp_path, capsys, monkeypatch):
    import ceilings as cli  # the thin CLI (pytest puts its folder on the path)
    from dnnroofline.measure import envinfo

    monkeypatch.setattr(envinfo, "available_devices", lambda: ["cpu"])  # a machine without

    out = tmp_path / "c.json"
    rc = cli.main(["--env", "gpu", "--device", "cuda", "--precisions", "bf16", "--out", str(out)])
    assert rc == 1 and not out.exists()
    assert "'cuda' is not available" in capsys.readouterr().err


# ----------------------------------------------------------------------------- CUDA only


@pytest.mark.cuda
@pytest.mark.skipif(not HAS_CUDA, reason="needs an NVIDIA GPU")
def test_cuda_quick_ceilings_below_datasheet():
    c = cl.build_ceilings("gpu", "cuda", ["fp32", "tf32", "amp", "bf16"], quick=True)
    assert c["device"] == "cuda" and c["device_name"] == torch.cuda.get_device_name()
    measured = {r["precision"]: r for r in c["roofs"] if r["source"] == "measured"}
    assert measured["fp32"]["value"] > 0 and "TF32 off" in measured["fp32"]["method"]
    for r in measured.values():
        if r.get("percent_of_datasheet") is not None:
            assert r["above_datasheet"] is False, r
    mem = [r for r in c["roofs"] if r["kind"] == "memory" and r["source"] == "measured"]
    assert {r["benchmark"] for r in mem} == {"triad", "scale", "d2d_copy"}
    for r in mem:  # every memory roof, not one per precision key
        assert r.get("above_datasheet") in (None, False), r


@pytest.mark.cuda
@pytest.mark.skipif(not HAS_CUDA, reason="needs an NVIDIA GPU")
def test_cuda_fp32_gemm_runs_with_tf32_off():
    torch.backends.cuda.matmul.allow_tf32 = True
    res = ck.bench_gemm("cuda", "fp32", 1024, warmup=1, reps=2, min_reps=1)
    assert res["flops_median"] > 0
    assert torch.backends.cuda.matmul.allow_tf32 is True  # restored afterwards


def test_annotate_explains_cpu_peak_with_implied_clock():
    roofs = [
        {"kind": "compute", "precision": "fp32", "source": "measured", "value": 180e9},
        {
            "kind": "compute",
            "precision": "fp32",
            "source": "datasheet",
            "value": 2 * 2.5e9 * 32,
            "inputs": {"cores": 2, "clock_hz": 2.5e9, "flop_per_cycle": 32, "clock_source": "x"},
        },
    ]
    (warning,) = cl.annotate_vs_datasheet(roofs)
    assert roofs[0]["implied_clock_hz"] == pytest.approx(180e9 / 64)
    assert "2.81 GHz" in warning and "2.50 GHz used (x)" in warning
    assert roofs[0]["above_datasheet"] is True


def test_annotate_leaves_a_roof_below_its_datasheet_unflagged():
    sheet = {"kind": "compute", "precision": "fp32", "source": "datasheet", "value": 160e9}
    roofs = [{"kind": "compute", "precision": "fp32", "source": "measured", "value": 100e9}, sheet]
    assert cl.annotate_vs_datasheet(roofs) == []
    assert roofs[0]["above_datasheet"] is False
    assert roofs[0]["percent_of_datasheet"] == pytest.approx(62.5)


def test_a_gpu_tries_several_gemm_shapes_and_cudnn_layouts():
    # cuBLAS peaks at different shapes per precision (an H100's fp16 near 4096^3, bf16
    # near 8192^3): one shape under-reads the roof
    cands = ck.compute_candidates("cuda", "bf16", quick=False, probe_flops=None)
    gemms = [kw for kind, kw in cands if kind == "gemm"]
    assert len(gemms) >= 3 and any(kw.get("k", 0) >= 16384 for kw in gemms)
    assert {"m": 4096, "n": 4096, "k": 4096, "library": "cublas"} in gemms
    convs = [kw for kind, kw in cands if kind == "conv"]
    assert any(kw.get("channels_last") for kw in convs) and any(kw.get("backward") for kw in convs)


def test_a_repeat_lasts_at_least_min_repeat_s_however_short_one_call_is(monkeypatch):
    """On a clock that moves one tick per call: the warm-up runs for min_warmup_s, one call
    sizes the repeats, and each repeat lasts min_repeat_s."""
    clock, tick = FakeClock(), 2.0**-10  # about 1 ms, exact in binary
    monkeypatch.setattr(timer, "time", clock.module())
    calls = []

    def one_tick():
        calls.append(clock.now)
        clock.advance(tick)

    times, inner = timer.time_repeats("cpu", one_tick, warmup=1, reps=3, min_reps=3,
                                   min_repeat_s=20 * tick, min_warmup_s=50 * tick)  # fmt: skip
    assert inner == 20  # a 20-tick repeat of 1-tick calls
    assert times == [tick] * 3  # seconds per call
    assert len(calls) == 50 + 1 + 3 * 20  # warm-up to min_warmup_s, the sizing call, repeats
    assert calls[50] == 50 * tick  # the sizing call came once the warm-up had lasted 50 ticks


def test_the_time_cap_counts_from_inside_the_timing_context(monkeypatch):
    """A meter entered as the timing context spans at least time_cap_s of repeats, however
    long its own start takes (the ceilings' energy windows: issue 40): the cap's clock
    starts once the context is entered, not before."""
    clock, tick = FakeClock(), 2.0**-10
    monkeypatch.setattr(timer, "time", clock.module())
    spans = []

    @contextlib.contextmanager
    def slow_meter():
        clock.advance(7 * tick)  # the meter's start: reading its counters
        t0 = clock.now
        yield
        spans.append(clock.now - t0)

    times, inner = timer.time_repeats("cpu", lambda: clock.advance(tick), warmup=1,
                                      reps=1000, min_reps=1, inner=4, time_cap_s=40 * tick,
                                      timing_context=slow_meter())  # fmt: skip
    assert inner == 4 and times == [tick] * len(times)
    assert spans == [len(times) * 4 * tick] and spans[0] > 40 * tick
    assert len(times) == 11  # the first repeat ending past the cap (44 ticks), no more


def test_gpu_memory_roofs_are_timed_over_repeats_long_enough_to_hide_the_launch_gap(
    monkeypatch,
):
    seen = {}

    def fake_stream(device, array_bytes, **kw):
        seen.update(kw, array_bytes=array_bytes)
        one = {"bytes": 1, "times_s": {"min": 1.0, "median": 1.0}, "bw_best": 1.0,
               "bw_median": 1.0, "reps": 3, "inner": 10}  # fmt: skip
        return {"dtype": "float64", "elements": 1, "array_bytes": array_bytes,
                "triad": one, "scale": one, "copy": one}  # fmt: skip

    monkeypatch.setattr(mk, "bench_stream", fake_stream)
    roofs = mk.measure_memory("cuda", free_device_bytes=80 * 2**30)
    assert seen["min_repeat_s"] >= 2e-3 and seen["min_warmup_s"] > 0
    assert seen["array_bytes"] >= 2**30
    assert [r["benchmark"] for r in roofs] == ["triad", "scale", "d2d_copy"]
    assert "repeats of 10 call(s)" in roofs[0]["method"]


H100_CEILINGS = ROOT / "examples" / "h100" / "results" / "h100" / "ceilings.json"
CONV_PARAMS = {"batch", "c_in", "hw", "c_out", "kernel", "channels_last", "backward"}


def _replay_key(kind: str, params: dict) -> tuple:
    if kind == "gemm":
        return kind, params.get("m", params["n"]), params["n"], params.get("k", params["n"])
    return kind, tuple(sorted(params.items()))


def replay_candidates(monkeypatch, precision: str) -> list[dict]:
    """bench_gemm and bench_conv answer with what an H100 measured for ``precision``
    (examples/h100: its GEMMs through cuBLAS, torch's default there, and its cuDNN
    convolutions); a shape or library it did not measure fails as a GEMM can."""
    roofs = json.loads(H100_CEILINGS.read_text())["roofs"]
    measured = next(
        r for r in roofs if r["source"] == "measured" and r.get("precision") == precision
    )
    recorded = {_replay_key(c["kind"], c["params"]): c for c in measured["candidates"]}

    def answer(kind, **kw):
        cand = recorded.get(_replay_key(kind, kw))
        library = str(torch.backends.cuda.preferred_blas_library()).lower()
        if cand is None or (kind == "gemm" and not library.endswith(".cublas")):
            raise RuntimeError(f"not measured on the H100 of examples/h100: {kind} {kw}")
        shape = {"m": kw.get("m", kw.get("n")), "n": kw.get("n"), "k": kw.get("k", kw.get("n"))}
        return {
            **{k: cand[k] for k in ("flop", "reps", "times_s", "flops_best", "flops_median")},
            "dtype": {"fp32": "float32"}.get(precision, precision),
            "shape": kw,
            "backward": kw.get("backward", False),
            "channels_last": kw.get("channels_last", False),
            **shape,
        }

    def bench_gemm(device, precision, n=None, m=None, k=None, **timing):
        return answer("gemm", **{key: v for key, v in (("m", m), ("n", n), ("k", k)) if v})

    def bench_conv(device, precision, **kw):
        return answer("conv", **{key: v for key, v in kw.items() if key in CONV_PARAMS})

    monkeypatch.setattr(ck, "bench_gemm", bench_gemm)
    monkeypatch.setattr(ck, "bench_conv", bench_conv)
    return measured["candidates"]


def test_a_gpus_roof_is_its_best_gemm_not_a_winograd_convolution(monkeypatch):
    # On an H100 a cuDNN fp32 3x3 convolution (TF32 off) ran at 97.5 TFLOP/s of nominal
    # FLOPs, 146% of the 67 TFLOP/s FP32 datasheet peak: fewer multiplications than the
    # direct count. The study's GPU FLOPs are what ncu counts executing, so that is no
    # roof; the GEMMs (52.8 TFLOP/s at best) set it, and the convolutions stay on record.
    cands = replay_candidates(monkeypatch, "fp32")
    fastest_conv = max(c["flops_best"] for c in cands if c["kind"] == "conv")
    best_gemm = max(c["flops_best"] for c in cands if c["kind"] == "gemm")
    assert fastest_conv > 67e12 > best_gemm  # the measurement this rule is for
    roof = ck.measure_compute("cuda", "fp32")
    assert roof["value"] == best_gemm and roof["set_by"].startswith("torch.matmul 16384x")
    assert roof["method"].startswith(
        f"best of 4 GEMMs through torch.matmul ({len(gemm_sweep.GPU_GEMM_SHAPES)} shapes x "
        "cuBLAS/cuBLASLt; 3 convolutions"
    )
    convs = [c for c in roof["candidates"] if c["kind"] == "conv"]
    assert len(convs) == 3 and not any(c["set_roof"] for c in convs)
    assert all(c["roof_eligible"] is False and "ncu counts" in c["why_not"] for c in convs)
    # On a CPU the study counts nominal FLOPs too, so the same convolution would be its roof.
    first_conv = roof["candidates"].index(convs[0])  # the NCHW 3x3: 97.5 TFLOP/s
    assert ck.roof_candidate("cpu", roof["candidates"]) == first_conv
    assert ck.roof_candidate("mps", roof["candidates"]) == first_conv


def test_the_h100s_bf16_roof_is_its_best_gemm_though_a_convolution_beat_it(monkeypatch):
    cands = replay_candidates(monkeypatch, "bf16")
    roof = ck.measure_compute("cuda", "bf16")
    assert roof["value"] == pytest.approx(716.6e12, rel=1e-3)  # 4096^3, its best repeat
    assert roof["value"] < max(c["flops_best"] for c in cands)  # channels-last conv: 734.4
    assert "4096x4096x4096" in roof["set_by"]


def test_no_eligible_microbenchmark_is_an_error_naming_the_device():
    only_convs = [{"kind": "conv", "flops_best": 1e12}, {"kind": "gemm", "error": "OOM"}]
    with pytest.raises(RuntimeError, match="no gemm microbenchmark succeeded on cuda"):
        ck.roof_candidate("cuda", only_convs)
