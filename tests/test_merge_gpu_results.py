"""A GPU machine's results merged into a CPU study, as issue 9's H100 example will be.

The copied results/h100/ is made by the real stage scripts where they run on a CPU:
env_info.py and run_train.py (then given the CUDA facts a GPU machine records), and
ncu_selftest.py and profile_ncu.py against the fake ncu with the H100 fixtures (a
bf16 self-test that passes, an fp16 one 10% low: amp's counters are untrusted). Its
ceilings.json holds measured roofs and the H100 datasheet's. The study measures a CPU
env here with the same model, batch and fp32, then merges: every copied file is read,
none re-run or rewritten; the H100's points take ncu's AI where its self-test passed;
roofline_all, the kernel plots, the speedup table and the report include it.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import sys
from pathlib import Path

import pytest
from test_ncu_command import make_fake_ncu
from workflow_helpers import (
    SCRIPTS,
    job_counts,
    read_csv,
    run_env,
    script,
    snakemake,
    snapshot,
    text_of,
    write_config,
)

from dnnroofline.formatting import sig
from dnnroofline.measure.ceilings import datasheet_roofs
from dnnroofline.ncu.parse import parse_ncu_csv

pytestmark = pytest.mark.workflow

NCU_DATA = Path(__file__).resolve().parent / "data" / "ncu"
KERNEL_CSV = NCU_DATA / "handmade_h100_raw_tensor.csv"  # every capture's kernel pass
STEP_CSV = NCU_DATA / "handmade_step_range_raw.csv"  # and its step pass
SELFTEST_CASES = {
    "gemm_bf16.kernel.csv": NCU_DATA / "handmade_selftest_gemm_bf16_raw.csv",
    "gemm_fp16.kernel.csv": NCU_DATA / "handmade_selftest_gemm_fp16_low_raw.csv",  # -10%
    "copy.step.csv": NCU_DATA / "handmade_selftest_copy_step_raw.csv",
}
GPU = "NVIDIA H100 80GB HBM3"
PRECISIONS = ["fp32", "tf32", "amp", "bf16"]
CAPTURED = ["amp", "bf16"]  # ncu's precisions on the H100 (fp32/tf32: analytic AI)
MEASURED_ROOFS = {"fp32": 51e12, "tf32": 378e12, "amp": 720e12, "bf16": 760e12}
GPU_SPEEDUP = 50  # the copied steps are the CPU's, 50x shorter
# 3 timed steps where this study's config says 2: the H100's config was its own
RUN_FLAGS = ["--batch-size", "2", "--image-size", "32", "--warmup-iters", "1", "--iters", "3"]
RUN_FLAGS += ["--synthetic", "--workers", "0", "--arch", "resnet18"]

CONFIG = {
    "envs": {
        "local": {"device": "cpu", "threads": 1, "precisions": ["fp32"]},
        "h100": {"device": "cuda", "gpu_name": "H100"},
    },
    "measure_envs": ["local"],
    "study": {
        "models": ["resnet18"],
        "precisions": PRECISIONS,
        "batch_sizes": [2],
        "runs": 1,
        "warmup_iters": 1,
        "iters": 2,
        "image_size": 32,
        "data": "synthetic",
    },
    "ceilings": {"quick": True},
    "traces": {"enabled": False},
}


def cuda_fingerprint(folder: Path) -> None:
    """env_info.json as the H100 machine would record it (taken here, CUDA facts set)."""
    script("env_info.py", "--env", "h100", "--device", "cpu", "--out", folder / "env_info.json")
    info = json.loads((folder / "env_info.json").read_text())
    info.update(
        device="cuda",
        device_requested="cuda",
        devices_available=["cpu", "cuda"],
        cuda_available=True,
        host="h100-node",
        cpu_model="Intel(R) Xeon(R) Platinum 8480+",
        cuda="12.8",
        cudnn=91002,
        driver="570.124.06",
        gpus=[{"name": GPU, "memory_bytes": 85_520_809_984, "compute_capability": "9.0"}],
    )
    (folder / "env_info.json").write_text(json.dumps(info, indent=1))


def gpu_ceilings(folder: Path) -> None:
    roofs = [
        {
            "kind": "compute",
            "precision": p,
            "source": "measured",
            "value": value,
            "method": "torch.matmul 8192x8192x8192",
            "statistic": "best",
            "median": 0.98 * value,
            "candidates": [],
        }
        for p, value in MEASURED_ROOFS.items()
    ]
    roofs.append(
        {
            "kind": "memory",
            "precision": None,
            "source": "measured",
            "value": 3.0e12,
            "method": "device-to-device copy",
        }
    )
    datasheet, notes = datasheet_roofs("cuda", GPU, PRECISIONS)
    doc = {
        "schema_version": 1,
        "env": "h100",
        "device": "cuda",
        "device_name": GPU,
        "threads": 16,
        "llc_bytes": 52_428_800,
        "quick": False,
        "roofs": roofs + datasheet,
        "skipped": [],
        "notes": notes,
        "other_load": None,
    }
    (folder / "ceilings.json").write_text(json.dumps(doc, indent=1))


def gpu_runs(folder: Path) -> None:
    """A timed run of the driver here, filed as the H100's in every precision: CUDA, steps
    50x shorter (one run: the copies differ in their config and run id alone)."""
    measured = folder / "measured_here.json"
    script("run_train.py", *RUN_FLAGS, "--backend", "cpu", "--env", "h100", "--run-id", "here",
           "--out", measured)  # fmt: skip
    for precision in PRECISIONS:
        run = json.loads(measured.read_text())
        run["run_id"] = f"h100_resnet18_{precision}_bs2_run1"
        run["config"].update(
            precision=precision, backend="cuda", device="cuda", cudnn_benchmark=True
        )
        steps = run["step_time_s"]
        for key in ("median", "mean", "p5", "p95", "min", "max", "std"):
            steps[key] /= GPU_SPEEDUP
        steps["all"] = [t / GPU_SPEEDUP for t in steps["all"]]
        run.update(
            device_name=GPU,
            images_per_s=run["config"]["batch_size"] / steps["median"],  # as the driver has it
            peak_device_memory_bytes=2_000_000_000,
        )
        (folder / "runs" / f"{run['run_id']}.json").write_text(json.dumps(run, indent=1))
    measured.unlink()


def gpu_captures(machine: Path, folder: Path) -> None:
    """The counter self-test and the study's captures, by the real ncu stages."""
    cases = machine / "selftest_cases"
    cases.mkdir()
    for name, fixture in SELFTEST_CASES.items():
        shutil.copy(fixture, cases / name)
    env = run_env(
        FAKE_NCU_MODE="ok",
        FAKE_NCU_CSV=str(KERNEL_CSV),
        FAKE_NCU_STEP_CSV=str(STEP_CSV),
        FAKE_NCU_CASE_DIR=str(cases),
    )
    ncu, out = make_fake_ncu(machine), folder / "ncu"
    selftest = ["--ncu", ncu, "--env", "h100", "--compute-capability", "9.0", "--precisions"]
    script("ncu_selftest.py", *selftest, *CAPTURED, "--work-dir", out / "selftest",
           "--out", out / "selftest.json", env=env)  # fmt: skip
    for precision in CAPTURED:
        key = f"h100_resnet18_{precision}_bs2"
        script("profile_ncu.py", "--ncu", ncu, "--no-query", "--compute-capability", "9.0",
               "--csv-out", out / f"{key}.csv", "--json-out", out / f"{key}.json",
               "--driver-run-out", out / "driver" / f"{key}.json",
               "--selftest", out / "selftest.json", "--precision", precision,
               "--", sys.executable, SCRIPTS / "run_train.py", *RUN_FLAGS,
               "--precision", precision, "--env", "h100", env=env)  # fmt: skip


def make_h100_results(machine: Path) -> Path:
    folder = machine / "results" / "h100"
    (folder / "runs").mkdir(parents=True)
    cuda_fingerprint(folder)
    gpu_ceilings(folder)
    gpu_runs(folder)
    gpu_captures(machine, folder)
    return folder


@pytest.fixture(scope="module")
def merged(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("cpu_study")
    write_config(workdir, CONFIG)
    copied = workdir / "results" / "h100"
    shutil.copytree(make_h100_results(tmp_path_factory.mktemp("h100_machine")), copied)
    before = snapshot(sorted(p for p in copied.rglob("*") if p.is_file()))
    run = snakemake(workdir, "--cores", "2")
    snakemake(workdir, "--report", "results/report.html")
    after = snapshot(sorted(p for p in copied.rglob("*") if p.is_file()))
    return {"workdir": workdir, "run": run, "before": before, "after": after}


def points_of(merged) -> dict[tuple[str, str], dict]:
    rows = read_csv(merged["workdir"] / "results" / "roofline_points.csv")
    return {(r["env"], r["precision"]): r for r in rows}


def test_the_copied_gpu_results_are_read_never_rerun_or_rewritten(merged):
    counts = job_counts(merged["run"].stdout + merged["run"].stderr)
    assert counts["train"] == 1 and counts["ceilings"] == 1  # the local env's, measured here
    for rule in ("ncu", "ncu_selftest", "env_info"):
        assert counts.get(rule, 0) == (rule == "env_info"), (rule, counts)
    assert merged["after"] == merged["before"]  # no file added, changed or touched
    assert len(merged["before"]) > 20


def test_gpu_points_take_ncus_ai_where_its_counters_are_trusted(merged):
    points = points_of(merged)
    kernel, step = parse_ncu_csv(KERNEL_CSV)["totals"], parse_ncu_csv(STEP_CSV)["totals"]
    bf16 = points[("h100", "bf16")]
    assert bf16["ai_source"] == "ncu"
    # the fixture step's DRAM bytes are not this resnet18 bs2's: under its analytic minimum
    assert bf16["ai_note"].startswith("ncu's DRAM bytes (3.02e+08) are 24% under")
    assert math.isclose(float(bf16["ai"]), kernel["flop"]["total"] / step["bytes"]["dram"])
    attained = kernel["flop"]["total"] / float(bf16["step_median_s"])
    assert math.isclose(float(bf16["attained_flops"]), attained, rel_tol=1e-9)
    assert float(bf16["peak_flops"]) == MEASURED_ROOFS["bf16"]
    assert bf16["roof_source"] == "measured" and float(bf16["peak_bandwidth"]) == 3.0e12
    # amp's self-test GEMM read 10% low: its capture is kept, its point is analytic.
    amp = points[("h100", "amp")]
    assert amp["ai_source"] == "analytic"
    assert amp["ai_note"].startswith("ncu untrusted_counters") and "-10.0%" in amp["ai_note"]
    for precision in ("fp32", "tf32"):  # no capture: analytic, with nothing to explain
        assert points[("h100", precision)]["ai_source"] == "analytic"
        assert float(points[("h100", precision)]["peak_flops"]) == MEASURED_ROOFS[precision]
    assert points[("local", "fp32")]["ai_source"] == "analytic"


def test_plots_and_report_include_both_machines(merged):
    results = merged["workdir"] / "results"
    ids = (results / "plots" / "roofline_all.svg").read_text()
    for point in ["local-resnet18-fp32"] + [f"h100-resnet18-{p}" for p in PRECISIONS]:
        assert f'id="point-{point}-bs2"' in ids, point
    assert (results / "plots" / "roofline_h100.svg").exists()
    key = "h100_resnet18"
    for precision in CAPTURED:
        for kind in ("kernels", "hierarchical"):
            svg = results / "plots" / "kernels" / f"roofline_{kind}_{key}_{precision}_bs2.svg"
            assert svg.stat().st_size > 10_000, svg

    # The speedup against the CPU env, from the two envs' runs.
    metrics = {(r["env"], r["precision"]): r for r in read_csv(results / "metrics.csv")}
    speedup = float(metrics[("h100", "fp32")]["images_per_s"]) / float(
        metrics[("local", "fp32")]["images_per_s"]
    )
    analysis = text_of(results / "report_sections" / "analysis.html")
    assert "h100 vs local" in analysis
    # the table's own 3-significant-digit format: a slow host's 8.26 images/s reads "8.26"
    assert f"resnet18 fp32 2 {sig(metrics[('local', 'fp32')]['images_per_s'])}" in analysis
    assert f"{speedup:.2f}×" in analysis

    # The H100's self-test verdicts and its captures against the analytic counts.
    page = text_of(results / "report_sections" / "ncu_vs_analytic.html")
    assert "h100: known kernels" in page
    assert "bf16 : counters trusted" in page and "amp : not trusted , analytic AI" in page
    assert "h100 resnet18 bf16 2 ok" in page  # its counts against the analytic ones
    assert "h100 resnet18 amp bs2: untrusted_counters" in page
    roofline = text_of(results / "report_sections" / "roofline.html")
    assert GPU in roofline and "NVIDIA H100 SXM5 80GB" in roofline  # its datasheet roofs
    h100_points = roofline.split("Points")[-1].split(" local ")[0]
    assert h100_points.count("analytic AI: no ncu capture of this configuration") == 2  # fp32, tf32
    measurement = text_of(results / "report_sections" / "measurement.html")
    assert "h100's runs took 1 warm-up and 3 timed steps (the config they ran with" in measurement
    assert (results / "report.html").stat().st_size > 100_000
    assert os.path.getsize(results / "plots" / "roofline_all.png") > 10_000
