"""Predicting one GPU from another's runs (dnnroofline.perfmodel.transfer, transfer_gpu.py):
Habitat's gamma and wave scaling, the anchors, the calibration, the check, and the real
H100 captures and ledgers of examples/h100/."""

from __future__ import annotations

import csv
import glob
import math
import subprocess
import sys
from pathlib import Path

import pytest

from dnnroofline.aggregate.predictions import PREDICTION_COLUMNS
from dnnroofline.errors import InputError
from dnnroofline.perfmodel import transfer
from dnnroofline.study.datasheet import gpu_by_key

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "workflow" / "scripts" / "transfer_gpu.py"
H100 = ROOT / "examples" / "h100"
H200 = ROOT / "examples" / "h200"
H100_GPU = gpu_by_key("h100_sxm5")
H200_GPU = gpu_by_key("h200_sxm")


def kernel(time_s, flop, dram, tensor=0):
    return {"time_s": time_s, "flop": {"total": flop, "tensor": tensor}, "bytes": {"dram": dram}}


def test_habitat_gamma_follows_the_papers_two_pieces():
    assert transfer.habitat_gamma(0.0, 10.0) == 1.0
    assert transfer.habitat_gamma(5.0, 10.0) == pytest.approx(0.75)
    assert transfer.habitat_gamma(10.0, 10.0) == pytest.approx(0.5)
    assert transfer.habitat_gamma(40.0, 10.0) == pytest.approx(0.125)
    assert transfer.habitat_gamma(math.inf, 10.0) == 0.0
    with pytest.raises(ValueError, match="ridge"):
        transfer.habitat_gamma(1.0, 0.0)


def test_habitat_scales_only_what_memory_bounds():
    scale = H100_GPU.mem_bw / H200_GPU.mem_bw
    copy = kernel(1.0, 0, 10**9)  # no FLOPs: gamma 1, the whole bandwidth ratio
    gemm = kernel(1.0, 10**15, 1, tensor=10**15)  # AI far over the ridge: gamma ~0
    ratio, info = transfer.habitat_step_ratio([copy], "amp", H100_GPU, H200_GPU, "t")
    assert ratio == pytest.approx(scale)
    assert info["gamma_mean"] == 1.0
    ratio, _ = transfer.habitat_step_ratio([gemm], "amp", H100_GPU, H200_GPU, "t")
    assert ratio == pytest.approx(1.0, abs=1e-6)
    ratio, info = transfer.habitat_step_ratio([copy, gemm], "amp", H100_GPU, H200_GPU, "t")
    assert ratio == pytest.approx((scale + 1.0) / 2, rel=1e-6)
    # a tensor kernel's ridge is the tensor peak's; the same AI on CUDA cores is past it
    ridge_tensor = transfer.kernel_ridge(H200_GPU, "bf16", 1.0)
    ridge_simt = transfer.kernel_ridge(H200_GPU, "bf16", 0.0)
    assert ridge_tensor == pytest.approx(989e12 / 4.8e12)
    assert ridge_simt == pytest.approx(67e12 / 4.8e12)
    assert transfer.kernel_ridge(H200_GPU, "fp32", 1.0) == pytest.approx(495e12 / 4.8e12)


def test_a_kernel_without_its_counters_is_named():
    with pytest.raises(InputError, match=r"cap: kernel 7 lacks 'bytes'"):
        bad = {"id": 7, "time_s": 1.0, "flop": {"total": 1}}
        transfer.habitat_step_ratio([bad], "amp", H100_GPU, H200_GPU, "cap")


def test_anchor_prefers_the_point_then_its_model_then_its_precision():
    measured = [("r18", "amp", 128), ("r50", "amp", 256), ("r18", "fp32", 128)]
    assert transfer.choose_anchor(("r18", "amp", 128), measured) == (
        ("r18", "amp", 128),
        "this point",
    )
    assert transfer.choose_anchor(("r50", "amp", 128), measured)[0] == ("r50", "amp", 256)
    assert transfer.choose_anchor(("r50", "fp32", 256), measured) == (
        ("r18", "fp32", 128),
        "r18 fp32 at batch 128",
    )
    assert transfer.choose_anchor(("r50", "bf16", 256), measured) == (
        None,
        "the origin measured nothing in bf16",
    )


def model_row(step_s, batch):
    ips = batch / step_s
    return {
        "predicted_step_s": step_s,
        "interval_low_images_per_s": 0.8 * ips,
        "interval_high_images_per_s": 1.2 * ips,
        "predicted_peak_memory_bytes": 10**9,
        "device_memory_bytes": 141 * 2**30,
        "fits": True,
    }


def test_every_method_starts_from_the_origins_measured_step():
    point, other = ("r18", "amp", 128), ("r18", "amp", 256)
    rows = transfer.transfer_rows(
        [point, other],
        origin_env="h100",
        target_env="h200",
        origin_model={point: model_row(0.004, 128), other: model_row(0.008, 256)},
        target_model={point: model_row(0.003, 128), other: model_row(0.006, 256)},
        origin_measured_s={point: 0.010},  # the model is 2.5x too fast on the origin
        captures={point: [kernel(1.0, 0, 10**9)]},
        origin=H100_GPU,
        target=H200_GPU,
    )
    got = {(r["batch"], r["method"]): r for r in rows}
    assert got[(128, "no_change")]["predicted_step_s"] == pytest.approx(0.010)
    assert got[(128, "model")]["predicted_step_s"] == pytest.approx(0.0075)  # 0.010 x 3/4
    assert got[(128, "model_uncalibrated")]["predicted_step_s"] == pytest.approx(0.003)
    bw = H100_GPU.mem_bw / H200_GPU.mem_bw
    assert got[(128, "bandwidth_ratio")]["predicted_step_s"] == pytest.approx(0.010 * bw)
    assert got[(128, "habitat")]["predicted_step_s"] == pytest.approx(0.010 * bw)
    # batch 256 was not measured: anchored on 128 through the model's batch scaling
    assert got[(256, "no_change")]["predicted_step_s"] == pytest.approx(0.020)
    assert got[(256, "model")]["anchor"] == "r18 amp at batch 128"
    assert got[(256, "habitat")]["capture"] == "r18 amp at batch 128"
    # the interval moves with the calibration: images/s divided by 2.5
    assert got[(128, "model")]["interval_low_images_per_s"] == pytest.approx(
        0.8 * 128 / 0.003 / 2.5
    )


def test_the_check_has_prediction_checks_columns_and_names_what_was_not_measured():
    from dnnroofline.aggregate.check import CHECK_COLUMNS

    predicted = [
        {
            "env": "h200",
            "model": "r18",
            "precision": "amp",
            "batch": 128,
            "method": "model",
            "predicted_step_s": 1.6,  # 80 images/s
            "predicted_images_per_s": 80.0,
            "interval_low_images_per_s": 60.0,  # a step of 2.133 s
            "interval_high_images_per_s": 120.0,  # 1.067 s
            "predicted_peak_memory_bytes": 5,
            "notes": "",
        },
        {
            "env": "h200",
            "model": "r18",
            "precision": "amp",
            "batch": 256,
            "method": "model",
            "predicted_step_s": 5.12,
            "predicted_images_per_s": 50.0,
            "interval_low_images_per_s": math.nan,
            "interval_high_images_per_s": math.nan,
            "notes": "",
        },
    ]
    measured = {
        ("r18", "amp", 128): {
            "step_s": 0.8,  # twice as fast as predicted
            "images_per_s": 160.0,
            "peak_memory": 7,
            "peak_memory_source": "peak_device_memory_bytes",
        }
    }
    rows = transfer.check_rows(predicted, measured)
    assert list(rows[0]) == [*CHECK_COLUMNS, "anchor"]
    # a step twice too long: +100% on step time, -50% on images/s
    assert rows[0]["error_pct"] == pytest.approx(100.0)
    assert rows[0]["images_per_s_error_pct"] == pytest.approx(-50.0)
    assert rows[0]["measured_step_s"] == 0.8 and rows[0]["predicted_step_s"] == 1.6
    # 0.8 s is under the interval's 1.067 s, as 160 images/s is over its 120
    assert rows[0]["in_interval"] is False and rows[0]["images_per_s_in_interval"] is False
    assert rows[0]["measured_peak_memory_bytes"] == 7
    assert math.isnan(rows[1]["error_pct"]) and math.isnan(rows[1]["images_per_s_error_pct"])
    assert rows[1]["note"] == "not measured on the target"
    measured[("r18", "amp", 128)] |= {"step_s": 1.5, "images_per_s": 128 / 1.5}
    (inside, _) = transfer.check_rows(predicted, measured)
    assert inside["in_interval"] is True and inside["images_per_s_in_interval"] is True


def h100_predictions(tmp_path):
    """A predictions.csv with the model's rows for three points on the h100 and the
    h200_sxm (its values are the model's order of magnitude, not its output)."""
    path = tmp_path / "predictions.csv"
    points = [("resnet50", "amp", 256), ("resnet18", "fp32", 128), ("resnet50", "fp32", 256)]
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=PREDICTION_COLUMNS, restval="")
        w.writeheader()
        for env, factor in (("h100", 1.0), ("h200_sxm", 0.8)):
            for m, p, b in points:
                step = factor * b / 5000
                w.writerow({
                    "env": env, "model": m, "precision": p, "batch": b, "method": "model",
                    "predicted_step_s": step, "predicted_images_per_s": b / step,
                    "interval_low_images_per_s": 0.9 * b / step,
                    "interval_high_images_per_s": 1.1 * b / step,
                    "predicted_peak_memory_bytes": 10**9, "device_memory_bytes": 80 * 2**30,
                    "fits": True,
                })  # fmt: skip
    return path


def run_script(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True)


def test_predict_reads_the_real_h100_ledger_and_captures(tmp_path):
    out = tmp_path / "predicted.csv"
    proc = run_script(
        "predict", "--predictions", str(h100_predictions(tmp_path)), "--origin-env", "h100",
        "--origin-metrics", str(H100 / "metrics.csv"),
        "--origin-env-info", str(H100 / "results/h100/env_info.json"),
        "--captures", *glob.glob(str(H100 / "results/h100/ncu/h100_*.json")),
        "--target", "h200_sxm", "--target-env", "h200", "--out", str(out),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    with open(out, newline="") as fh:
        rows = {(r["model"], r["precision"], r["method"]): r for r in csv.DictReader(fh)}
    assert len(rows) == 3 * len(transfer.METHODS)
    # measured on the H100 (examples/h100/metrics.csv: median of 3 runs, 4560.2 img/s)
    assert float(rows[("resnet50", "amp", "no_change")]["predicted_images_per_s"]) == (
        pytest.approx(4560.15, rel=1e-4)
    )
    amp = float(rows[("resnet50", "amp", "habitat")]["notes"].split("x ")[1].split()[0])
    fp32 = float(rows[("resnet18", "fp32", "habitat")]["notes"].split("x ")[1].split()[0])
    floor = H100_GPU.mem_bw / H200_GPU.mem_bw
    # a half-precision step spends more of its kernel time memory-bound than an fp32 one
    assert floor < amp < fp32 < 1.0
    # resnet50 fp32 was not measured on the H100: calibrated on resnet18 fp32
    assert rows[("resnet50", "fp32", "model")]["anchor"] == "resnet18 fp32 at batch 128"


def test_predict_refuses_a_target_the_predictions_do_not_hold(tmp_path):
    proc = run_script(
        "predict", "--predictions", str(h100_predictions(tmp_path)), "--origin-env", "h100",
        "--origin-metrics", str(H100 / "metrics.csv"),
        "--origin-env-info", str(H100 / "results/h100/env_info.json"),
        "--target", "a100_sxm_80gb", "--target-env", "a100", "--out", str(tmp_path / "p.csv"),
    )  # fmt: skip
    assert proc.returncode == 2
    assert "no model rows for --target a100_sxm_80gb" in proc.stderr
