"""The model's joules per image and their check (issue 40, item 4), on hand-checked
cases: the energy of a step is its FLOPs at each op's precision's pJ/FLOP, plus its
bytes at pJ/B, plus the static power over the predicted step (Choi et al. 2013)."""

from __future__ import annotations

import math

import pytest
from test_predict import (
    CEILINGS,
    COMPLEXITY,
    ENV_INFO,
    INVENTORY,
    POINT,
    check_of,
    efficiency_doc,
    metrics_frame,
    model_prediction,
    model_row,
)

from dnnroofline.aggregate import predictions as ap
from dnnroofline.errors import InputError
from dnnroofline.perfmodel import energy as en
from dnnroofline.study.what_if import WhatIf

# 10 pJ/FLOP in fp32, 2 pJ/FLOP in fp16 (amp), 50 pJ/B, 100 W whatever runs
COSTS = {"pj_per_flop": {"fp32": 10.0, "amp": 2.0}, "pj_per_byte": 50.0, "static_power_w": 100.0}
ENERGY = {"available": True, "reason": None, "source": "rapl", "costs": COSTS}


def costs(**over):
    doc = {"energy": {**ENERGY, "costs": {**COSTS, **over}}}
    found, why = en.costs_from_ceilings(doc, "ceilings.json")
    assert why == ""
    return found


def op(dtype, cls="gemm", flops=1_000_000, nbytes=(100, 100), count=1):
    return {"dtype": dtype, "class": cls, "flops": flops, "bytes_read": nbytes[0],
            "bytes_written": nbytes[1], "count": count}  # fmt: skip


def test_a_step_s_joules_are_flops_bytes_and_static_power():
    # 2 calls x 1 MFLOP x 10 pJ = 20 uJ; 2 x 200 B x 50 pJ = 20 nJ; 100 W x 1 ms = 0.1 J
    e = en.step_energy([op("float32", count=2)], costs(), "fp32", 1e-3)
    assert e.flop_joules == pytest.approx(20e-6)
    assert e.byte_joules == pytest.approx(20e-9)
    assert e.static_joules == pytest.approx(0.1)
    assert e.joules == pytest.approx(0.1 + 20e-6 + 20e-9)
    assert e.shares_text() == "energy: static 100%, FLOPs 0%, bytes 0%"


def test_each_op_pays_the_energy_of_the_precision_it_computes_in():
    c = costs()
    # an amp step: its fp16 matmul at the amp cost, its fp32 elementwise op at fp32's
    assert c.flop_cost("float16", "gemm", "amp") == (pytest.approx(2e-12), "amp")
    assert c.flop_cost("float32", "elementwise", "amp") == (pytest.approx(10e-12), "fp32")
    # a tf32 step's float32 matmuls run on TF32 tensor cores: tf32's cost where measured
    c = costs(pj_per_flop={"fp32": 10.0, "tf32": 3.0})
    assert c.flop_cost("float32", "conv", "tf32") == (pytest.approx(3e-12), "tf32")
    assert c.flop_cost("float32", "elementwise", "tf32") == (pytest.approx(10e-12), "fp32")
    # no cost of the op's own precision: the step's
    c = costs(pj_per_flop={"bf16": 1.0})
    assert c.flop_cost("float32", "elementwise", "bf16") == (pytest.approx(1e-12), "bf16")
    with pytest.raises(
        InputError, match=r"no energy per FLOP for a float64 op of a fp32 step \(costs for bf16\)"
    ):
        costs(pj_per_flop={"bf16": 1.0}).flop_cost("float64", "gemm", "fp32")


def test_ceilings_without_costs_say_why_and_bad_costs_are_refused():
    assert en.costs_from_ceilings({}, "c.json") == (
        None,
        "c.json records no energy (measured before energy was)",
    )
    off = {"energy": {"available": False, "reason": "RAPL unreadable"}}
    assert en.costs_from_ceilings(off, "c.json")[1] == "c.json: energy unavailable: RAPL unreadable"
    unfitted = {"energy": {"available": True, "costs": None, "costs_reason": "no idle window"}}
    assert (
        en.costs_from_ceilings(unfitted, "c.json")[1] == "c.json: no energy costs: no idle window"
    )
    with pytest.raises(InputError, match=r"c.json: energy.costs.pj_per_byte must be a number"):
        en.costs_from_ceilings(
            {"energy": {**ENERGY, "costs": {**COSTS, "pj_per_byte": -1}}}, "c.json"
        )
    with pytest.raises(InputError, match=r"unknown precisions \['int8'\]"):
        en.costs_from_ceilings(
            {"energy": {**ENERGY, "costs": {**COSTS, "pj_per_flop": {"int8": 1}}}}, "c.json"
        )


def predicted(ceilings, what_ifs=()):
    envs = {"local": ap.EnvFiles("local", ceilings, efficiency_doc(), ENV_INFO)}
    inventories = {("toy", "fp32", 8, "cpu"): ("toy_fp32_bs8_cpu_ops.json", INVENTORY)}
    complexity = {("toy", 8): ("toy_bs8.json", COMPLEXITY)}
    return ap.prediction_rows([POINT], list(what_ifs), inventories, complexity, envs)


def test_the_model_predicts_joules_per_image_beside_images_per_s():
    (row,) = predicted({**CEILINGS, "energy": ENERGY})
    # the toy step: conv 2 x 4 GFLOP and relu 3 x 1 MFLOP, all float32 (10 pJ/FLOP);
    # bytes 2 x 20 MB + 3 x 40 MB = 160 MB (50 pJ/B); 100 W over the predicted step
    flop_j = (2 * 4e9 + 3 * 1e6) * 10e-12
    byte_j = 160e6 * 50e-12
    step_j = flop_j + byte_j + 100.0 * row["predicted_step_s"]
    assert row["predicted_joules_per_image"] == pytest.approx(step_j / 8)
    assert "energy: static " in row["notes"]


def test_no_costs_no_joules_and_the_notes_say_why():
    (row,) = predicted(CEILINGS)
    assert math.isnan(row["predicted_joules_per_image"])
    assert "no energy prediction: ceilings of env local records no energy" in row["notes"]
    assert math.isfinite(row["predicted_step_s"])  # the time is predicted all the same


def test_a_what_if_on_another_gpu_predicts_no_joules_from_this_machine_s_costs():
    w = WhatIf("local", "toy", "fp32", 8, "local")
    other = WhatIf("h100_sxm", "toy", "fp32", 8, "local", "h100_sxm")
    assert ap._what_if_energy(w, {"local": (costs(), "")})[0] is not None
    assert ap._what_if_energy(other, {"local": (costs(), "")}) == (
        None,
        "the energy costs of h100_sxm are not measured here",
    )


def test_the_check_scores_joules_per_image_against_the_runs():
    metrics = metrics_frame([("ok", 100.0), ("ok", 100.0), ("ok", 100.0)])
    metrics["joules_per_image"] = [2.0, 3.0, 2.5]  # median 2.5
    pred = {**model_prediction(), "predicted_joules_per_image": 2.0}
    row = model_row(check_of(metrics, [pred]))
    assert row["measured_joules_per_image"] == pytest.approx(2.5)
    assert row["predicted_joules_per_image"] == pytest.approx(2.0)
    assert row["joules_per_image_error_pct"] == pytest.approx(-20.0)
    # the baselines predict no energy; the runs' joules are there to compare with
    base = [r for r in check_of(metrics, [pred]) if r["method"] == "roofline_measured"][0]
    assert math.isnan(base["predicted_joules_per_image"])
    assert base["measured_joules_per_image"] == pytest.approx(2.5)


def test_a_ledger_without_energy_checks_time_and_leaves_joules_empty():
    row = model_row(check_of(metrics_frame([("ok", 100.0)])))
    assert math.isnan(row["measured_joules_per_image"])
    assert math.isnan(row["joules_per_image_error_pct"])


def test_the_check_summary_scores_joules_per_image_where_there_are_any():
    from dnnroofline.perfmodel import scoring

    STEP = {"predicted_step_s": 1.0, "measured_step_s": 1.0}
    rows = [
        {"method": "model", "error_pct": 5.0, **STEP, "predicted_joules_per_image": 1.1,
         "measured_joules_per_image": 1.0, "joules_per_image_error_pct": 10.0},
        {"method": "model", "error_pct": -5.0, **STEP, "predicted_joules_per_image": 1.5,
         "measured_joules_per_image": 2.0, "joules_per_image_error_pct": -25.0},
        {"method": "roofline_measured", "error_pct": 50.0, **STEP},
    ]  # fmt: skip
    model, roof = scoring.check_summary(rows)
    assert model["joules_per_image_n"] == 2
    assert model["joules_per_image_mape_pct"] == pytest.approx(17.5)
    assert model["joules_per_image_max_abs_error_pct"] == pytest.approx(25.0)
    assert math.isnan(model["joules_per_image_coverage"])  # no interval on energy
    assert roof["joules_per_image_n"] == 0 and math.isnan(roof["joules_per_image_mape_pct"])
