"""The measurement section (dnnroofline.report.measurement): throughput, noise, step times."""

from __future__ import annotations

import re

import pytest
from report_fixtures import block, table_row

from dnnroofline.report.data import throughput_table
from dnnroofline.report.measurement import measurement_section


def test_noisy_cv_flagged_only_above_5_percent(inputs, sections):
    tp = throughput_table(inputs["metrics"]).set_index(["model", "batch_size"])
    assert bool(tp.loc[("mobilenet_v2", 8), "noisy"]) is True
    assert bool(tp.loc[("resnet50", 8), "noisy"]) is False
    assert tp.loc[("mobilenet_v2", 8), "step_cv_max"] == pytest.approx(0.08)
    html = sections["measurement.html"]
    noisy = table_row(html, "mobilenet_v2", "8")
    quiet = table_row(html, "resnet50", "8")
    assert 'class="noisy"' in noisy and "8.0%" in noisy
    assert 'class="noisy"' not in quiet and ">noisy<" not in quiet
    # the analysis warns about the noisy point only
    analysis = sections["analysis.html"]
    assert "Noisy timing" in block(analysis, "local · mobilenet_v2 · fp32 · bs 8")
    assert "Noisy timing" not in block(analysis, "local · resnet50 · fp32 · bs 8")


def test_step_time_distribution_per_run(inputs):
    runs = []
    for _, r in inputs["metrics"].iterrows():
        if r["status"] != "ok":
            runs.append({"run_id": r["run_id"], "status": r["status"], "step_time_s": None})
            continue
        steps = [r["step_median_s"]] * 9
        if r["run_id"] == "local_resnet50_fp32_bs8_run1":
            steps = [0.38, 0.39, 0.40, 0.40, 0.41, 0.42, 0.40, 0.39, 1.2]  # one slow step
        runs.append({"run_id": r["run_id"], "status": "ok", "step_time_s": {"all": steps}})
    html = measurement_section(inputs["config"], inputs["env_infos"], inputs["metrics"], runs)
    dist = html[html.index("<h2>Step-time distribution per run") :]
    row = table_row(dist, "local_resnet50_fp32_bs8_run1")
    assert "<td class=num>9</td>" in row  # steps
    assert "1.20 s" in row or "1,200 ms" in row
    assert "<td class=num>1</td>" in row  # one Tukey outlier
    assert 'fill="#c0392b"' in row and "<svg class=box" in row
    assert "noisy" in row  # the slow step pushes the CV above 5%
    quiet = table_row(dist, "local_resnet50_fp32_bs8_run2")
    assert "<td class=num>0</td>" in quiet and "noisy" not in quiet
    assert "local_resnet50_fp32_bs16_run3" not in dist  # the failed run
    # without run JSONs: the ledger's p5 / median / p95
    html = measurement_section(inputs["config"], inputs["env_infos"], inputs["metrics"])
    dist = html[html.index("<h2>Step-time distribution per run") :]
    assert "400 ms" in table_row(dist, "local_resnet50_fp32_bs8_run1")


def test_an_env_whose_runs_took_other_step_counts_is_named_with_them(inputs):
    """Results copied from a machine whose config ran 5 + 30 steps, under a 3 + 10 config."""
    runs = [
        {"run_id": "a", "env": "h100", "config": {"warmup_iters": 5, "iters": 30}},
        {"run_id": "b", "env": "local", "config": {"warmup_iters": 3, "iters": 10}},
    ]
    html = measurement_section(inputs["config"], inputs["env_infos"], inputs["metrics"], runs)
    method = re.sub(r"\s+", " ", html[html.index("<h2>Method") : html.index("<h2>Throughput")])
    assert "Then a fixed 10 timed training steps" in method
    assert "h100's runs took 5 warm-up and 30 timed steps (the config they ran with" in method
    assert "local's runs" not in method
    runs[0]["config"] = {"warmup_iters": 3, "iters": 10}
    html = measurement_section(inputs["config"], inputs["env_infos"], inputs["metrics"], runs)
    assert "runs took" not in html
