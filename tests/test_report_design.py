"""The design section (dnnroofline.report.design): hypothesis, verdict, run matrix."""

from __future__ import annotations

import re

import pandas as pd
from report_fixtures import make_complexity, make_config, make_points, study_matrix, table_row

from dnnroofline.report.design import design_section
from dnnroofline.report.sections import all_sections


def test_hypothesis_and_verdict(sections):
    design = sections["design.html"]
    hyp = design[design.index("<strong>Hypothesis:</strong>") : design.index("<strong>Verdict:")]
    assert "2 threads" in hyp and "ridge point is 10.0 FLOP/B" in hyp
    # resnet50 (AI 40) compute-bound, mobilenet_v2 (AI 4) memory-bound, with its depthwise share
    assert re.search(r"resnet50</strong> \(analytic AI 40\.0 FLOP/B\) is compute-bound", hyp)
    assert re.search(r"mobilenet_v2</strong> \(analytic AI 4\.00 FLOP/B; depthwise", hyp)
    assert "sits lower, memory-bound" in hyp
    verdict = design[design.index("<strong>Verdict:") :]
    assert "held for 4 of 4 measured points" in verdict
    assert "does <em>not</em> follow AI" not in verdict
    assert "mobilenet_v2 bs 8 reaches under 30%" in verdict


def test_verdict_reports_a_broken_hypothesis(inputs):
    pts = make_points()
    # a GPU-like measurement where ncu AI puts resnet50 on the memory side
    pts.loc[0, ["ai", "bound"]] = [5.0, "memory"]
    pts.loc[0, "roof_flops"] = 50e9
    html = design_section(
        inputs["config"],
        inputs["env_infos"],
        inputs["metrics"],
        pts,
        inputs["complexity"],
        inputs["ceilings"],
    )
    assert "held for 3 of 4 measured points" in html
    assert "failed for resnet50 bs 8 is memory-bound" in html


def test_hypothesis_when_all_points_are_compute_bound(inputs):
    pts = make_points()
    pts = pts[pts["model"] == "resnet50"].copy()
    other = make_points()
    other = other[other["model"] == "mobilenet_v2"].copy()
    other["ai"], other["bound"] = 20.0, "compute"
    other["roof_flops"], other["attained_flops"] = 100e9, [20e9, 25e9]
    cx = make_complexity()
    for c in cx:
        if c["arch"] == "mobilenet_v2":
            c["flops"]["train_step"] = 20.0 * c["min_dram_bytes_per_step"]
    html = design_section(
        inputs["config"],
        inputs["env_infos"],
        inputs["metrics"],
        pd.concat([pts, other]),
        cx,
        inputs["ceilings"],
    )
    assert "are compute-bound" in html and "memory-bound" not in html
    assert "should attain similar GFLOP/s" in html
    assert "should follow AI" not in html
    # medians 91.25 vs 22.5 GFLOP/s: 4.06x apart, not similar
    assert "span 4.06× in attained GFLOP/s" in html
    assert "not similar, so kernel efficiency, not AI, separates them" in html


def test_models_at_their_own_batch_sizes_shape_the_matrix_and_the_commands(inputs):
    # study_config.json resolves each model's batch sizes (study.models' batch_sizes)
    inputs["config"]["envs"]["local"]["batch_sizes_by_model"] = {
        "resnet50": [8],
        "mobilenet_v2": [8, 16],
    }
    config = make_config()
    config["study"]["models"] = [
        {"name": "resnet50", "batch_sizes": [8]},
        {"name": "mobilenet_v2", "batch_sizes": [8, 16]},
    ]
    inputs["expected_runs"] = study_matrix(config)  # the matrix the rules expand
    sections = all_sections(**inputs)
    design = sections["design.html"]
    assert table_row(design, "batch sizes", "resnet50: 8; mobilenet_v2: 8, 16")
    assert "9 runs expected" in design
    assert "local_resnet50_fp32_bs16_run1" in design  # measured, now outside the matrix
    repro = sections["reproducibility.html"]
    assert "complexity.py --arch resnet50 --image-size 224 --batch-size 16" not in repro
    assert "complexity.py --arch resnet50 --image-size 224 --batch-size 8" in repro
    assert "complexity.py --arch mobilenet_v2 --image-size 224 --batch-size 16" in repro


def test_the_objective_says_when_each_env_has_its_own_precisions(inputs):
    one = design_section(inputs["config"], inputs["env_infos"], inputs["metrics"], inputs["points"])
    assert "each env its own subset" not in one
    config = make_config(
        envs={
            "local": {"device": "cpu", "threads": 2, "precisions": ["fp32"]},
            "h100": {"device": "cuda"},
        }
    )
    config["study"]["precisions"] = ["fp32", "bf16"]
    html = design_section(config, inputs["env_infos"], inputs["metrics"], inputs["points"])
    objective = re.sub(r"\s+", " ", html[html.index("<h2>Objective") : html.index("<h2>Hypo")])
    assert "in bf16 and fp32 at batch sizes 8 and 16 (each env its own subset" in objective
