"""The model on the five H100 points of examples/h100/ (issue 28, item 6), on a CPU.

Inputs: the example's ceilings.json (its tables derived from it: the H100 lease ran no
sweep) and env_info.json, and the op inventories and complexity of the two models
computed here at 224 px (batch 128 and 256). The runs are read only by the check. The
pipeline is asserted end to end, through the entry scripts: every point predicted, every
method checked with a finite error, a datasheet what-if (H200) predicted from the H100's
tables, and the model's share of step time by class beside the kernel time by class of
the committed ncu captures. About 50 s on two cores (inventories and complexity).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

import check_predictions
import predict
from dnnroofline.aggregate import check as ac
from dnnroofline.aggregate import predictions as ap
from dnnroofline.estimate import complexity as cx
from dnnroofline.estimate.op_inventory import op_inventory

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "h100"
RESULTS = EXAMPLE / "results" / "h100"
POINTS = [
    ("h100", "resnet18", "fp32", 128),
    ("h100", "resnet18", "amp", 128),
    ("h100", "resnet18", "bf16", 128),
    ("h100", "resnet50", "amp", 256),
    ("h100", "resnet50", "bf16", 256),
]
WHAT_IF = {"env": "h200_sxm", "model": "resnet50", "precision": "bf16", "batch": 256}


@pytest.fixture(scope="module")
def h100(tmp_path_factory):
    """The predictions, check and class comparison, made by the entry scripts."""
    tmp = tmp_path_factory.mktemp("h100_predict")
    inventories, complexity = [], []
    for _, model, precision, batch in POINTS:
        # the step as the H100 ran it: on CUDA, channels_last (examples/h100/config.yaml)
        path = tmp / f"{model}_{precision}_bs{batch}_cuda_cl_ops.json"
        doc = op_inventory(
            model,
            precision=precision,
            batch_size=batch,
            image_size=224,
            device="cuda",
            channels_last=True,
        )
        path.write_text(json.dumps(doc))
        inventories.append(str(path))
    for model, batch in sorted({(m, b) for _, m, _, b in POINTS}):
        path = tmp / f"{model}_bs{batch}.json"
        path.write_text(json.dumps(cx.complexity(model, batch, 224)))
        complexity.append(str(path))
    config = tmp / "study_config.json"
    envs = {"h100": {"device": "cuda", "channels_last": True}}
    config.write_text(json.dumps({"envs": envs, "predict": [WHAT_IF]}))
    points = [a for e, m, p, b in POINTS for a in ("--point", e, m, p, str(b))]
    ceilings = str(RESULTS / "ceilings.json")
    out = {k: tmp / f"{k}.csv" for k in ("predictions", "check", "classes")}
    assert (
        predict.main(
            [*points, "--config", str(config), "--inventories", *inventories,
             "--complexity", *complexity, "--ceilings", ceilings,
             "--env-info", str(RESULTS / "env_info.json"), "--out", str(out["predictions"])]
        )
        == 0
    )  # fmt: skip
    assert (
        check_predictions.main(
            ["--predictions", str(out["predictions"]), "--metrics", str(EXAMPLE / "metrics.csv"),
             "--inventories", *inventories, "--complexity", *complexity, "--ceilings", ceilings,
             "--ncu", *map(str, sorted((RESULTS / "ncu").glob("h100_*.json"))),
             "--classes-out", str(out["classes"]), "--out", str(out["check"])]
        )
        == 0
    )  # fmt: skip
    return {k: pd.read_csv(p) for k, p in out.items()}


def test_every_point_and_the_what_if_predicted(h100):
    pred = h100["predictions"]
    assert list(pred.columns) == ap.PREDICTION_COLUMNS
    measured = pred[pred["kind"] == "measured"]
    keys = [tuple(r) for r in measured[["env", "model", "precision", "batch"]].to_numpy()]
    assert keys == POINTS
    assert (pred["method"] == "model").all()
    assert (pred["predicted_images_per_s"] > 0).all() and (pred["fits"] == True).all()  # noqa: E712
    assert pred["notes"].str.contains("derived from its ceilings.json").all()
    (what_if,) = pred[pred["kind"] == "what_if"].to_dict("records")
    assert what_if["env"] == "h200_sxm" and "tables of env h100" in what_if["env_source"]
    assert "scaled by datasheet peaks h100_sxm5 -> h200_sxm" in what_if["notes"]
    h100_same = measured[(measured["model"] == "resnet50") & (measured["precision"] == "bf16")]
    # the same compute, 4.8 against 3.35 TB/s: faster, by at most the bandwidth ratio
    ratio = what_if["predicted_images_per_s"] / h100_same["predicted_images_per_s"].iloc[0]
    assert 1.0 < ratio <= 4800 / 3350 + 1e-9
    assert what_if["device_memory_bytes"] == 141 * 2**30


def test_every_method_checked_with_a_finite_error(h100):
    check = h100["check"]
    assert list(check.columns) == ac.CHECK_COLUMNS
    assert len(check) == len(POINTS) * len(ac.METHODS)
    for _, rows in check.groupby(["model", "precision", "batch"]):
        assert list(rows["method"]) == list(ac.METHODS)
    # model_loo learns from other model families: the H100 measured resnets alone
    loo = check["method"] == "model_loo"
    assert check.loc[~loo, "error_pct"].map(math.isfinite).all()
    assert check.loc[~loo, "images_per_s_error_pct"].map(math.isfinite).all()
    assert check.loc[loo, "error_pct"].isna().all()
    assert check.loc[loo, "note"].str.startswith("no prediction: ").all()
    # measured: the median of the three ok runs in metrics.csv, on CUDA its device memory
    metrics = pd.read_csv(EXAMPLE / "metrics.csv")
    r18 = metrics[(metrics["model"] == "resnet18") & (metrics["precision"] == "fp32")]
    row = check[(check["model"] == "resnet18") & (check["precision"] == "fp32")].iloc[0]
    assert row["measured_images_per_s"] == pytest.approx(r18["images_per_s"].median())
    assert row["measured_step_s"] == pytest.approx(r18["step_median_s"].median())
    assert row["measured_peak_memory_bytes"] == r18["peak_device_memory_bytes"].max()
    assert (check["measured_peak_memory_source"] == "peak_device_memory_bytes").all()
    # the H100 ran no sweep: its model is the model on tables derived from its ceilings
    steps = check.pivot_table("predicted_step_s", ["model", "precision", "batch"], "method")
    assert steps["model_ceilings"].to_numpy() == pytest.approx(steps["model"].to_numpy())


def test_class_shares_beside_ncu_kernel_time(h100):
    classes = h100["classes"]
    assert len(classes) == len(POINTS) * len(ac.CLASS_GROUPS)
    for _, rows in classes.groupby(["model", "precision", "batch"]):
        assert list(rows["group"]) == list(ac.CLASS_GROUPS)
        assert rows["model_share"].sum() == pytest.approx(1.0, abs=1e-3)  # 4-digit shares
        assert rows["ncu_share"].sum() == pytest.approx(1.0)
    # the captures' convolutions and GEMMs take a share of kernel time in each point
    conv = classes[classes["group"] == "conv/GEMM"]
    assert (conv["ncu_share"] > 0.2).all() and (conv["model_share"] > 0.2).all()
