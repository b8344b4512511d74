"""model_loo (issue 36, item 5): the model's device and host times rescaled by two
factors fitted on the env's runs of other model families. The fit recovers known
factors, and no point's own runs, nor its family's, ever enter its prediction."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from test_predict import CEILINGS, COMPLEXITY, INVENTORY

from dnnroofline.aggregate import check as ac
from dnnroofline.perfmodel import loo

# (device_s, host_s) the model predicts per model: two resnets, two mobilenets, and
# three families of one model each
TIMES = {
    "resnet18": (0.020, 0.010),
    "resnet50": (0.060, 0.012),
    "mobilenet_v2": (0.015, 0.030),
    "mobilenet_v3_large": (0.012, 0.040),
    "vgg16": (0.090, 0.005),
    "densenet121": (0.040, 0.050),
    "regnet_x_400mf": (0.010, 0.020),
}
A, B = 2.0, 0.5  # the crafted truth on a CPU: step = 2 x device + 0.5 x host


def test_the_fit_recovers_known_factors_on_a_cpu():
    rng = np.random.default_rng(1)
    device, host = rng.uniform(0.01, 0.1, 8), rng.uniform(0.005, 0.08, 8)
    a, b = loo.fit_scales(device, host, 2.0 * device + 0.5 * host, gpu=False)
    assert (a, b) == pytest.approx((2.0, 0.5), rel=1e-6)


def test_the_fit_recovers_known_factors_on_a_gpu():
    # max(3 x device, 0.7 x host): some points device-bound, some host-bound
    device = np.array([0.010, 0.020, 0.030, 0.005, 0.002, 0.040])
    host = np.array([0.020, 0.030, 0.010, 0.060, 0.050, 0.020])
    measured = np.maximum(3.0 * device, 0.7 * host)
    assert (3.0 * device > 0.7 * host).any() and (3.0 * device < 0.7 * host).any()
    a, b = loo.fit_scales(device, host, measured, gpu=True)
    assert (a, b) == pytest.approx((3.0, 0.7), rel=1e-6)


def test_the_factors_stay_in_their_bounds():
    device, host = np.array([0.01, 0.02, 0.03]), np.array([0.001, 0.002, 0.001])
    a, b = loo.fit_scales(device, host, 50 * device, gpu=False)  # 50x: past the bound
    assert a == pytest.approx(loo.SCALE_BOUNDS[1]) and loo.SCALE_BOUNDS[0] <= b


def predictions(times=TIMES, precision="fp32", batch=8):
    rows = []
    for model, (device_s, host_s) in times.items():
        step = device_s + host_s
        rows.append(
            {"env": "local", "model": model, "precision": precision, "batch": batch,
             "kind": "measured", "method": "model", "predicted_step_s": step,
             "predicted_images_per_s": batch / step, "predicted_device_s": device_s,
             "predicted_host_s": host_s, "interval_low_images_per_s": math.nan,
             "interval_high_images_per_s": math.nan}
        )  # fmt: skip
    return rows


def metrics(slower=None, batch=8):
    """Two ok runs per model at the crafted truth; ``slower``: {model: factor} on its step."""
    rows = []
    for model, (device_s, host_s) in TIMES.items():
        step = (A * device_s + B * host_s) * (slower or {}).get(model, 1.0)
        for run in (1, 2):
            rows.append(
                {"env": "local", "model": model, "precision": "fp32", "batch_size": batch,
                 "run": run, "status": "ok", "device": "cpu", "step_median_s": step,
                 "images_per_s": batch / step, "max_rss_bytes": 10**9}
            )  # fmt: skip
    return pd.DataFrame(rows)


def loo_rows(metrics_df, preds=None):
    models = list(TIMES)
    rows = ac.check_rows(
        predictions() if preds is None else preds,
        metrics_df,
        {(m, 8): ("c.json", COMPLEXITY) for m in models},
        {"local": ("ceilings.json", CEILINGS)},
        {(m, "fp32", 8, "cpu"): ("i.json", INVENTORY) for m in models},
    )
    return {r["model"]: r for r in rows if r["method"] == loo.NAME}


def test_a_points_own_runs_and_its_familys_never_enter_its_prediction():
    before = loo_rows(metrics())
    device_s, host_s = TIMES["resnet18"]
    # fitted on the 5 points of mobilenet, vgg, densenet and regnet: the truth, exactly
    assert before["resnet18"]["predicted_step_s"] == pytest.approx(A * device_s + B * host_s)
    assert before["resnet18"]["error_pct"] == pytest.approx(0.0, abs=1e-6)
    assert "not resnet" in before["resnet18"]["note"] and "mobilenet" in before["resnet18"]["note"]
    # resnet18's runs and resnet50's (its family) five times slower: its prediction is the
    # same to the last bit, and its error says the runs moved
    after = loo_rows(metrics(slower={"resnet18": 5.0, "resnet50": 5.0}))
    assert after["resnet18"]["predicted_step_s"] == before["resnet18"]["predicted_step_s"]
    assert after["resnet18"]["error_pct"] == pytest.approx(-80.0)
    # ... while every other family's prediction learnt from them
    assert after["vgg16"]["predicted_step_s"] != pytest.approx(
        before["vgg16"]["predicted_step_s"], rel=1e-3
    )
    # and a run of another family does move resnet18's: the test could see a leak
    other = loo_rows(metrics(slower={"mobilenet_v2": 5.0}))
    assert other["resnet18"]["predicted_step_s"] != pytest.approx(
        before["resnet18"]["predicted_step_s"], rel=1e-3
    )


def test_without_the_models_device_and_host_times_model_loo_says_why():
    preds = [
        {k: v for k, v in r.items() if k not in ("predicted_device_s", "predicted_host_s")}
        for r in predictions()
    ]
    rows = loo_rows(metrics(), preds)
    assert all(math.isnan(r["predicted_step_s"]) for r in rows.values())
    assert all("no predicted_device_s and predicted_host_s" in r["note"] for r in rows.values())
    # NaN in one other point: that point is left out of the fits, the rest still fit
    preds = predictions()
    preds[4]["predicted_device_s"] = math.nan  # vgg16
    rows = loo_rows(metrics(), preds)
    assert math.isnan(rows["vgg16"]["predicted_step_s"])
    assert rows["resnet18"]["predicted_step_s"] == pytest.approx(
        A * TIMES["resnet18"][0] + B * TIMES["resnet18"][1]
    )


def test_under_three_points_of_other_families_no_fit():
    points = {
        ("resnet18", "fp32", 8): loo.LooPoint("resnet18", 0.02, 0.01, 0.05),
        ("resnet50", "fp32", 8): loo.LooPoint("resnet50", 0.06, 0.01, 0.13),
        ("vgg16", "fp32", 8): loo.LooPoint("vgg16", 0.09, 0.005, 0.2),
        ("mobilenet_v2", "fp32", 8): loo.LooPoint("mobilenet_v2", 0.015, 0.03, 0.05),
    }
    step, note = loo.loo_step_s(("resnet18", "fp32", 8), points, gpu=False)
    assert math.isnan(step)
    assert "2 measured point(s) of other families than resnet" in note
    step, note = loo.loo_step_s(("vgg16", "fp32", 8), points, gpu=False)
    assert math.isfinite(step) and "3 points" in note  # the resnets and the mobilenet
