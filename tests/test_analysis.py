"""Report sections (dnnroofline.analysis) and the write_report_sections.py CLI."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from dnnroofline import analysis as an

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "workflow" / "scripts" / "write_report_sections.py"

EVIL = "CUDA out of memory <script>alert(1)</script>"


# --------------------------------------------------------------------------- fixtures


def make_config(runs: int = 3, envs: dict | None = None) -> dict:
    return {
        "envs": envs or {"local": {"device": "cpu", "threads": 2}},
        "study": {
            "models": ["resnet50", "mobilenet_v2"],
            "precisions": ["fp32"],
            "batch_sizes": [8, 16],
            "runs": runs,
            "warmup_iters": 3,
            "iters": 10,
            "image_size": 224,
            "data": "synthetic",
        },
    }


def _row(env, model, bs, run, ips, cv=0.01, status="ok", message=None, wait=0.0):
    step = bs / ips if ips and status == "ok" else None
    return {
        "run_id": f"{env}_{model}_fp32_bs{bs}_run{run}",
        "env": env,
        "model": model,
        "precision": "fp32",
        "batch_size": bs,
        "run": run,
        "status": status,
        "message": message,
        "device": "cpu",
        "threads": 2,
        "images_per_s": ips,
        "step_median_s": step,
        "step_p5_s": step * 0.98 if step else None,
        "step_p95_s": step * 1.05 if step else None,
        "step_cv": cv if status == "ok" else None,
        "data_wait_median_s": wait * step if step else None,
        "wall_s": 5.0,
        "user_s": 9.0,
        "sys_s": 0.5,
        "max_rss_bytes": 2_000_000_000,
        "peak_device_memory_bytes": None,
        "start_time": 1.7e9,
        "end_time": 1.7e9 + 5,
    }


def make_metrics(env: str = "local", scale: float = 1.0) -> pd.DataFrame:
    rows = [
        _row(env, "resnet50", 8, 1, 20.0 * scale),
        _row(env, "resnet50", 8, 2, 21.0 * scale),
        _row(env, "resnet50", 8, 3, 20.5 * scale),
        _row(env, "resnet50", 16, 1, 24.0 * scale),
        _row(env, "resnet50", 16, 2, 24.0 * scale),
        # failed run: its stray images/s must never reach a table
        _row(env, "resnet50", 16, 3, 999.0, status="oom", message=EVIL),
        _row(env, "mobilenet_v2", 8, 1, 50.0 * scale, cv=0.08),  # noisy within the run
        _row(env, "mobilenet_v2", 8, 2, 52.0 * scale, cv=0.02),
        _row(env, "mobilenet_v2", 8, 3, 51.0 * scale, cv=0.02),
        _row(env, "mobilenet_v2", 16, 1, 60.0 * scale),
        _row(env, "mobilenet_v2", 16, 2, 60.0 * scale),
        # mobilenet_v2 bs16 run3 is missing
    ]
    return pd.DataFrame(rows)


def _point(env, model, bs, ai, attained, above=False, ips=None, runs_ok=2):
    peak, bw = 100e9, 10e9
    roof = min(peak, ai * bw)
    return {
        "env": env,
        "model": model,
        "precision": "fp32",
        "batch_size": bs,
        "runs_ok": runs_ok,
        "runs_failed": 0,
        "flop_per_step": ai * 1e9,
        "bytes_per_step": 1e9,
        "ai": ai,
        "ai_source": "analytic",
        "step_median_s": 0.5,
        "step_spread_s": 0.01,
        "images_per_s": ips or 10.0,
        "images_per_s_min": ips or 10.0,
        "images_per_s_max": ips or 10.0,
        "attained_flops": attained,
        "roof_flops": roof,
        "roof_source": "measured",
        "peak_flops": peak,
        "peak_bandwidth": bw,
        "ridge_ai": peak / bw,
        "efficiency": attained / roof,
        "bound": "memory" if ai < peak / bw else "compute",
        "above_roof": above,
    }


def make_points(env: str = "local") -> pd.DataFrame:
    return pd.DataFrame(
        [
            _point(env, "resnet50", 8, 40.0, 62.5e9),  # compute-bound, 62.5%
            _point(env, "resnet50", 16, 42.0, 120e9, above=True),  # above the roof
            _point(env, "mobilenet_v2", 8, 4.0, 10e9),  # memory-bound, roof 40 -> 25%
            _point(env, "mobilenet_v2", 16, 4.5, 30e9),  # memory-bound, roof 45 -> 66.7%
        ]
    )


def make_complexity() -> list[dict]:
    out = []
    for model, ai in (("resnet50", 40.0), ("mobilenet_v2", 4.0)):
        for bs in (8, 16):
            dram = 2e9 * bs / 8
            fwd = ai * dram / 3.0
            by = (
                {
                    "conv": {"forward": fwd * 0.9, "backward": 1.8 * fwd},
                    "linear": {"forward": fwd * 0.1, "backward": 0.2 * fwd},
                }
                if model == "resnet50"
                else {
                    "conv": {"forward": fwd * 0.7, "backward": 1.4 * fwd},
                    "conv_depthwise": {"forward": fwd * 0.3, "backward": 0.6 * fwd},
                }
            )
            out.append(
                {
                    "arch": model,
                    "batch_size": bs,
                    "image_size": 224,
                    "params": 25_557_032 if model == "resnet50" else 3_504_872,
                    "bytes": {
                        "params": 1e8,
                        "grads": 1e8,
                        "optimizer_state": 1e8,
                        "activations": 5e8,
                    },
                    "flops": {
                        "forward": fwd,
                        "backward": 2 * fwd,
                        "optimizer": 1.5e8,
                        "train_step": ai * dram,
                        "by_layer_type": by,
                    },
                    "min_dram_bytes_per_step": dram,
                    "peak_memory_bytes": 3e9,
                    "by_precision": {
                        "fp32": {
                            "activation_bytes": 5e8,
                            "min_dram_bytes_per_step": dram,
                            "peak_memory_bytes": 3e9,
                        },
                        "bf16": {
                            "activation_bytes": 2.5e8,
                            "min_dram_bytes_per_step": dram * 0.6,
                            "peak_memory_bytes": 2e9,
                        },
                    },
                    "method": "per-layer hooks; FMA = 2 FLOPs",
                }
            )
    return out


def make_ceilings(env: str = "local") -> dict:
    return {
        env: {
            "env": env,
            "device": "cpu",
            "device_name": "Test CPU",
            "threads": 2,
            "roofs": [
                {
                    "kind": "compute",
                    "precision": "fp32",
                    "source": "measured",
                    "value": 100e9,
                    "method": "sgemm 4096^3",
                },
                {
                    "kind": "compute",
                    "precision": "fp32",
                    "source": "datasheet",
                    "value": 200e9,
                    "citation": "cores x clock x 32",
                },
                {
                    "kind": "memory",
                    "precision": None,
                    "source": "measured",
                    "value": 10e9,
                    "method": "STREAM triad",
                },
                {
                    "kind": "memory",
                    "precision": None,
                    "source": "datasheet",
                    "value": 20e9,
                    "citation": "2 channels DDR4",
                },
            ],
        }
    }


def make_env_infos(env: str = "local") -> dict:
    return {
        env: {
            "env": env,
            "device": "cpu",
            "date": "2025-01-01T00:00:00",
            "host": "box<1>",
            "os": "Linux",
            "kernel": "6.1",
            "cpu_model": "Test CPU @ 3 GHz",
            "cpu_cores_physical": 8,
            "cpu_cores_logical": 16,
            "cpu_flags": ["avx2", "fma"],
            "ram_bytes": 32_000_000_000,
            "python": "3.11.4",
            "torch": "2.3.0",
            "torchvision": "0.18.0",
            "cuda": None,
            "cudnn": None,
            "driver": None,
            "gpus": [],
            "container": None,
            "cloud_zone": None,
        }
    }


@pytest.fixture
def inputs():
    return {
        "config": make_config(),
        "metrics": make_metrics(),
        "points": make_points(),
        "complexity": make_complexity(),
        "ceilings": make_ceilings(),
        "env_infos": make_env_infos(),
    }


@pytest.fixture
def sections(inputs):
    return an.all_sections(**inputs)


def block(html: str, heading: str) -> str:
    """The text from the <h3> whose text is ``heading`` to the next heading."""
    start = html.index(f"<h3>{heading}</h3>")
    nxt = re.search(r"<h[23]>", html[start + 4 :])
    return html[start : start + 4 + nxt.start()] if nxt else html[start:]


def table_row(html: str, *cells: str) -> str:
    """The <tr> whose first cells are ``cells``."""
    for tr in re.findall(r"<tr[^>]*>.*?</tr>", html, flags=re.S):
        tds = re.findall(r"<td[^>]*>(.*?)</td>", tr, flags=re.S)
        if tds[: len(cells)] == list(cells):
            return tr
    raise AssertionError(f"no row starting with {cells}")


# --------------------------------------------------------------------------- tests


def test_all_six_sections_are_pages(sections):
    assert list(sections) == list(an.SECTION_FILES)
    for name, html in sections.items():
        assert html.startswith("<!DOCTYPE html>"), name
        assert html.rstrip().endswith("</html>"), name


def test_bound_named_per_point(sections):
    html = sections["analysis.html"]
    compute = block(html, "local · resnet50 · fp32 · bs 8")
    memory = block(html, "local · mobilenet_v2 · fp32 · bs 8")
    assert "<strong>Compute-bound</strong>" in compute
    assert "Memory-bound" not in compute
    assert "<strong>Memory-bound</strong>" in memory
    assert "Compute-bound" not in memory
    # the levers match the bound
    assert "larger batch" in memory and "lower-precision activations" in memory
    assert "more threads: this env uses 2 of 8 physical cores" in compute
    assert "lower-precision activations" not in compute


def test_efficiency_and_gap(sections):
    html = sections["analysis.html"]
    compute = block(html, "local · resnet50 · fp32 · bs 8")
    assert "<strong>62.5%</strong> of its roof" in compute
    assert "37.5 GFLOP/s short" in compute
    memory = block(html, "local · mobilenet_v2 · fp32 · bs 8")
    assert "<strong>25.0%</strong> of its roof" in memory
    assert "30.0 GFLOP/s short" in memory
    # 25% < 30%: far below both roofs, overheads named; 62.5% is not
    assert "far below both roofs" in memory and "overheads first" in memory
    assert "far below both roofs" not in compute
    # roofline table carries the same efficiency
    row = table_row(sections["roofline.html"], "resnet50", "fp32", "8")
    assert "62.5%" in row and "compute" in row


def test_fastest_model_ratio(sections):
    html = sections["analysis.html"]
    across = html[html.index("<h2>Across models</h2>") : html.index("<h2>Across environments")]
    # bs16: mobilenet_v2 60 img/s vs resnet50 24 img/s (the failed run excluded)
    assert "mobilenet_v2 is fastest at 60.0 img/s, 2.50× resnet50 (24.0 img/s)" in across
    # bs8: medians 51 vs 20.5
    assert "mobilenet_v2 is fastest at 51.0 img/s, 2.49× resnet50 (20.5 img/s)" in across


def test_batch_scaling_gain(sections):
    html = sections["analysis.html"]
    scaling = html[html.index("<h2>Batch-size scaling") : html.index("<h2>Failed runs")]
    assert "51.0 → 60.0 img/s from bs 8 to 16" in scaling
    assert "+17.6%" in scaling  # 60 / 51 - 1


def test_noisy_cv_flagged_only_above_5_percent(inputs, sections):
    tp = an.throughput_table(inputs["metrics"]).set_index(["model", "batch_size"])
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


def test_repeat_cv_flags_noise_between_runs():
    m = pd.DataFrame([_row("local", "resnet50", 8, 1, 20.0), _row("local", "resnet50", 8, 2, 30.0)])
    tp = an.throughput_table(m)
    assert tp.loc[0, "repeat_cv"] > 0.05
    assert bool(tp.loc[0, "noisy"]) is True


def test_failed_run_listed_with_message_and_excluded(inputs, sections):
    tp = an.throughput_table(inputs["metrics"]).set_index(["model", "batch_size"])
    assert tp.loc[("resnet50", 16), "n_ok"] == 2
    assert tp.loc[("resnet50", 16), "ips_max"] == pytest.approx(24.0)
    measurement = sections["measurement.html"]
    assert "999" not in measurement
    row = table_row(measurement, "resnet50", "16")
    assert "<td class=num>2</td>" in row  # two ok runs, not three
    analysis = sections["analysis.html"]
    failed = analysis[analysis.index("<h2>Failed runs") : analysis.index("<h2>Missing runs")]
    row = table_row(failed, "local_resnet50_fp32_bs16_run3")
    assert "oom" in row
    assert "CUDA out of memory &lt;script&gt;alert(1)&lt;/script&gt;" in row
    assert "999" not in analysis


def test_html_is_escaped(sections):
    for name, html in sections.items():
        assert "<script>" not in html, name
    assert "&lt;script&gt;" in sections["analysis.html"]
    assert "box&lt;1&gt;" in sections["reproducibility.html"]


def test_above_roof_point_flagged(sections):
    roof = sections["roofline.html"]
    flagged = table_row(roof, "resnet50", "fp32", "16")
    ok = table_row(roof, "resnet50", "fp32", "8")
    assert 'class="flag"' in flagged
    assert "ABOVE ROOF: check the peak or the FLOP count" in flagged
    assert "ABOVE ROOF" not in ok and 'class="flag"' not in ok
    assert "ABOVE THE ROOF — check the peak or the FLOP count" in roof
    analysis = sections["analysis.html"]
    assert "check the peak or the FLOP count" in block(analysis, "local · resnet50 · fp32 · bs 16")
    assert "check the peak or the FLOP count" not in block(
        analysis, "local · resnet50 · fp32 · bs 8"
    )


def test_above_roof_detected_even_when_column_says_false():
    pts = pd.DataFrame([_point("local", "resnet50", 8, 40.0, 150e9, above=False)])
    prepared = an.prepare_points(pts)
    assert bool(prepared.loc[0, "above"]) is True
    pts = pd.DataFrame([_point("local", "resnet50", 8, 40.0, 50e9, above="False")])
    assert bool(an.prepare_points(pts).loc[0, "above"]) is False
    # the stage's own flag (as read back from CSV) is never dropped
    pts = pd.DataFrame([_point("local", "resnet50", 8, 40.0, 100e9, above="True")])
    assert bool(an.prepare_points(pts).loc[0, "above"]) is True


def test_points_without_ok_runs_are_dropped():
    pts = pd.DataFrame(
        [
            _point("local", "resnet50", 8, 40.0, 50e9),
            _point("local", "resnet50", 16, 40.0, 50e9, runs_ok=0),
        ]
    )
    assert list(an.prepare_points(pts)["batch_size"]) == [8]


def test_missing_runs_listed(inputs, sections):
    analysis = sections["analysis.html"]
    missing = analysis[analysis.index("<h2>Missing runs") :]
    row = table_row(missing, "local_mobilenet_v2_fp32_bs16_run3")
    assert "snakemake --cores all results/local/runs/local_mobilenet_v2_fp32_bs16_run3.json" in row
    assert "1 of 12 expected runs are absent" in missing
    # a run that is present is not listed
    assert "local_mobilenet_v2_fp32_bs16_run2" not in missing
    design = sections["design.html"]
    assert "12 runs expected" in design
    assert "10 ok</span>" in design and "1 failed</span>" in design
    assert "1 missing</span>" in design


def test_missing_runs_from_expected_list(inputs):
    expected = [
        {"run_id": "local_resnet50_fp32_bs8_run1", "env": "local"},
        {"run_id": "gcp_l4_resnet50_fp32_bs8_run1", "env": "gcp_l4"},
        "local_resnet50_fp32_bs32_run1",
    ]
    html = an.analysis_section(
        inputs["config"],
        inputs["metrics"],
        inputs["points"],
        inputs["env_infos"],
        expected_runs=expected,
    )
    missing = html[html.index("<h2>Missing runs") :]
    assert "2 of 3 expected runs are absent" in missing
    remote = table_row(missing, "gcp_l4_resnet50_fp32_bs8_run1", "gcp_l4")
    assert "copy that machine&#x27;s results/gcp_l4/ here" in remote
    assert "snakemake --cores all results/" not in remote
    assert "local_resnet50_fp32_bs32_run1" in missing
    assert "local_resnet50_fp32_bs8_run1</td>" not in missing


def test_missing_runs_with_study_matrix_flags(inputs):
    """study_matrix.json marks runs measured here; others come from another machine."""
    cfg = make_config(envs={"local": {"device": "cpu", "threads": 2}, "gcp_l4": {"device": "cuda"}})
    expected = [
        {"run_id": "local_resnet50_fp32_bs8_run4", "env": "local", "measured_here": True},
        {"run_id": "gcp_l4_resnet50_fp32_bs8_run1", "env": "gcp_l4", "measured_here": False},
    ]
    html = an.analysis_section(cfg, inputs["metrics"], inputs["points"], expected_runs=expected)
    missing = html[html.index("<h2>Missing runs") :]
    here = table_row(missing, "local_resnet50_fp32_bs8_run4", "local")
    assert "snakemake --cores all results/local/runs/local_resnet50_fp32_bs8_run4.json" in here
    remote = table_row(missing, "gcp_l4_resnet50_fp32_bs8_run1", "gcp_l4")
    assert "on a cuda machine (env gcp_l4)" in remote
    cfg["measure_envs"] = ["local"]  # the resolved config names the envs measured here
    design = an.design_section(cfg, inputs["env_infos"], inputs["metrics"], inputs["points"])
    assert "another machine (no results yet)" in table_row(design, "gcp_l4")
    assert "on this machine" in table_row(design, "local")


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
    html = an.design_section(
        inputs["config"],
        inputs["env_infos"],
        inputs["metrics"],
        pts,
        inputs["complexity"],
        inputs["ceilings"],
    )
    assert "held for 3 of 4 measured points" in html
    assert "failed for resnet50 bs 8 is memory-bound" in html


def test_roofline_ceilings_measured_vs_datasheet(sections):
    roof = sections["roofline.html"]
    compute = table_row(roof, "compute", "fp32")
    assert "100 GFLOP/s" in compute and "200 GFLOP/s" in compute and "50.0%" in compute
    assert "sgemm 4096^3" in compute and "cores x clock x 32" in compute
    memory = table_row(roof, "memory", "(all)")
    assert "10.0 GB/s" in memory and "20.0 GB/s" in memory and "STREAM triad" in memory
    assert "10.0 FLOP/B" in table_row(roof, "fp32", "measured")


def test_measured_far_below_datasheet_warns(inputs, sections):
    assert "class=warn>The measured" not in sections["roofline.html"]  # 50%: plausible
    ceil = make_ceilings()
    ceil["local"]["roofs"][0]["value"] = 2e9  # a quick-mode GEMM: 1% of the datasheet
    html = an.roofline_section(ceil, inputs["points"], inputs["config"])
    assert "The measured compute roof (fp32) is only 1.0% of the datasheet" in html
    assert "The measured memory roof" not in html


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
    html = an.design_section(
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


def test_complexity_table(sections):
    html = sections["complexity.html"]
    row = table_row(html, "mobilenet_v2", "8")
    assert "3.50 M" in row  # params
    assert "conv_depthwise 30%" in row
    assert "4.00 FLOP/B" in row  # analytic AI = 8 GFLOP / 2 GB
    assert "2.00 GB" in row  # min DRAM bytes, decimal
    assert "2.00</td>" in row  # bwd/fwd ratio
    assert "not MACs" in html


def test_run_command_reproduces_run():
    cfg = make_config()
    cmd = an.run_command(
        cfg,
        {
            "run_id": "local_resnet50_fp32_bs8_run1",
            "env": "local",
            "model": "resnet50",
            "precision": "fp32",
            "batch_size": 8,
        },
    )
    assert cmd == (
        "OMP_NUM_THREADS=2 python workflow/scripts/run_train.py --arch resnet50 "
        "--image-size 224 --batch-size 8 --warmup-iters 3 --iters 10 --precision fp32 "
        "--backend cpu --synthetic --env local --expect-threads 2 "
        "--run-id local_resnet50_fp32_bs8_run1 "
        "--out results/local/runs/local_resnet50_fp32_bs8_run1.json"
    )
    cfg["study"]["data"] = "/data/my imagenet"
    cfg["envs"]["local"] = {"device": "auto"}
    cmd = an.run_command(
        cfg,
        {
            "run_id": "local_resnet50_fp32_bs8_run1",
            "env": "local",
            "model": "resnet50",
            "precision": "fp32",
            "batch_size": 8,
        },
        {"local": {"device": "cuda"}},
    )
    assert "--backend cuda --data '/data/my imagenet'" in cmd
    assert "OMP_NUM_THREADS" not in cmd and "--expect-threads" not in cmd
    # the resolved config's defaults reach the command as the train rule passes them
    cfg["study"].update(num_classes=10, workers=4, channels_last=True)
    cmd = an.run_command(
        cfg,
        {"run_id": "r", "env": "local", "model": "resnet50", "precision": "bf16", "batch_size": 8},
    )
    assert "--precision bf16" in cmd
    assert "--arch resnet50 --image-size 224 --num-classes 10 --batch-size 8 " in cmd
    assert "--data '/data/my imagenet' --workers 4 --channels-last" in cmd
    # a data-parallel env: its processes, and the threads of all of them for the launcher
    cfg["envs"]["ddp"] = {"device": "cpu", "nproc": 2, "threads": 3}
    cmd = an.run_command(
        cfg,
        {"run_id": "r", "env": "ddp", "model": "resnet50", "precision": "fp32", "batch_size": 8},
    )
    assert cmd.startswith("OMP_NUM_THREADS=6 python workflow/scripts/run_train.py")
    assert "--channels-last --nproc 2 --env ddp --expect-threads 3" in cmd


def test_reproducibility_lists_commands(sections):
    html = sections["reproducibility.html"]
    assert "snakemake --cores 2" in html
    assert "snakemake --report results/report.html" in html
    assert html.count("workflow/scripts/run_train.py") == 12
    assert "--out results/local/runs/local_mobilenet_v2_fp32_bs16_run3.json" in html
    assert (
        "python workflow/scripts/complexity.py --arch mobilenet_v2 --image-size 224 "
        "--batch-size 16 --out results/complexity/mobilenet_v2_bs16.json" in html
    )
    assert "32.0 GB" in html  # RAM, decimal


def test_cross_env_comparison():
    envs = {"local": {"device": "cpu", "threads": 2}, "gcp_l4": {"device": "cuda"}}
    cfg = make_config(envs=envs)
    metrics = pd.concat([make_metrics("local"), make_metrics("gcp_l4", scale=4.0)])
    html = an.analysis_section(cfg, metrics, make_points())
    cross = html[html.index("<h2>Across environments") : html.index("<h2>Batch-size")]
    assert "fastest on gcp_l4 at 240 img/s, 4.00× local (60.0 img/s)" in cross


def test_parse_run_id_with_underscores():
    d = an.parse_run_id(
        "gcp_l4_mobilenet_v2_bf16_bs32_run2", ["gcp_l4", "gcp"], ["mobilenet_v2", "mobilenet"]
    )
    assert d == {
        "env": "gcp_l4",
        "model": "mobilenet_v2",
        "precision": "bf16",
        "batch_size": 32,
        "run": 2,
        "run_id": "gcp_l4_mobilenet_v2_bf16_bs32_run2",
    }
    assert an.parse_run_id("other_resnet50_fp32_bs8_run1", ["gcp_l4"], ["resnet50"]) is None


def test_formatting_units():
    assert an.fmt_bytes(1_500_000) == "1.50 MB"  # decimal, not 1024
    assert an.fmt_bytes(999) == "999 B"
    assert an.fmt_time(0.0123) == "12.3 ms"
    assert an.fmt_time(0.0004) == "400 µs"
    assert an.fmt_flops_rate(1.234e12) == "1,234 GFLOP/s"  # integers keep all digits
    assert an.fmt_pct(0.625) == "62.5%"


def test_empty_inputs_do_not_crash():
    cfg = make_config()
    sections = an.all_sections(cfg, pd.DataFrame(), pd.DataFrame())
    assert "No successful runs yet" in sections["measurement.html"]
    assert "No roofline points yet" in sections["roofline.html"]
    assert "12 of 12 expected runs are absent" in sections["analysis.html"]


# --------------------------------------------------------------------------- CLI


def test_cli_writes_all_six_files(tmp_path):
    res = tmp_path / "results"
    (res / "complexity").mkdir(parents=True)
    (res / "local").mkdir()
    cfg = tmp_path / "config.yaml"
    cfg.write_text(yaml.safe_dump(make_config()))
    make_metrics().to_csv(res / "metrics.csv", index=False)
    make_points().to_csv(res / "roofline_points.csv", index=False)
    cx_paths = []
    for c in make_complexity():
        p = res / "complexity" / f"{c['arch']}_bs{c['batch_size']}.json"
        p.write_text(json.dumps(c))
        cx_paths.append(str(p))
    ceil = make_ceilings()["local"]
    del ceil["env"]  # the env comes from the folder name then
    (res / "local" / "ceilings.json").write_text(json.dumps(ceil))
    (res / "local" / "env_info.json").write_text(json.dumps(make_env_infos()["local"]))
    expected = tmp_path / "expected.json"
    expected.write_text(
        json.dumps(["local_resnet50_fp32_bs8_run1", "local_resnet50_fp32_bs8_run9"])
    )
    out = tmp_path / "sections"
    proc = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--config",
            str(cfg),
            "--metrics",
            str(res / "metrics.csv"),
            "--points",
            str(res / "roofline_points.csv"),
            "--complexity",
            *cx_paths,
            "--ceilings",
            str(res / "local" / "ceilings.json"),
            "--env-info",
            str(res / "local" / "env_info.json"),
            "--expected-runs",
            str(expected),
            "--outdir",
            str(out),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in out.iterdir()) == sorted(an.SECTION_FILES)
    for name in an.SECTION_FILES:
        assert (out / name).read_text().startswith("<!DOCTYPE html>")
    roof = (out / "roofline.html").read_text()
    assert "sgemm 4096^3" in roof  # ceilings filed under env "local" from the folder
    analysis = (out / "analysis.html").read_text()
    assert "1 of 2 expected runs are absent" in analysis
    assert "local_resnet50_fp32_bs8_run9" in analysis


def test_cli_reports_bad_input(tmp_path):
    cfg = tmp_path / "config.yaml"
    cfg.write_text(yaml.safe_dump(make_config()))
    bad = tmp_path / "ceilings.json"
    bad.write_text("{not json")
    make_metrics().to_csv(tmp_path / "m.csv", index=False)
    proc = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--config",
            str(cfg),
            "--metrics",
            str(tmp_path / "m.csv"),
            "--points",
            str(tmp_path / "nope.csv"),
            "--outdir",
            str(tmp_path / "o"),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert "--points: no such file" in proc.stderr and "nope.csv" in proc.stderr
    proc = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--config",
            str(cfg),
            "--metrics",
            str(tmp_path / "m.csv"),
            "--points",
            str(tmp_path / "m.csv"),
            "--ceilings",
            str(bad),
            "--outdir",
            str(tmp_path / "o"),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert "ceilings.json line 1" in proc.stderr
    assert not (tmp_path / "o").exists()


# --------------------------------------------------------------------------- comparisons


def two_env_inputs(baseline=None):
    envs = {"local": {"device": "cpu", "threads": 2}, "gcp_l4": {"device": "cuda"}}
    cfg = make_config(envs=envs)
    if baseline:
        cfg["report"] = {"baseline_env": baseline}
    metrics = pd.concat([make_metrics("local"), make_metrics("gcp_l4", scale=4.0)])
    points = pd.concat([make_points("local"), make_points("gcp_l4")])
    return cfg, metrics, points


def section_text(html: str, start: str, end: str) -> str:
    return html[html.index(start) : html.index(end)]


def test_at_a_glance_answers_the_five_questions(sections):
    glance = section_text(sections["analysis.html"], "<h2>At a glance", "<h2>Across models")
    row = table_row(glance, "local", "resnet50", "fp32", "8")
    # speed with spread, GFLOP/s, AI and source, bound, efficiency, distance, lever
    assert "20.5 (20.0–21.0)" in row and "62.5" in row and "40.0 (analytic)" in row
    assert "compute" in row and "62.5%" in row and "1.6× below" in row
    assert "better kernels" in row
    above = table_row(glance, "local", "resnet50", "fp32", "16")
    assert "above roof" in above and 'class="flag"' in above
    noisy = table_row(glance, "local", "mobilenet_v2", "fp32", "8")
    assert "⚠" in noisy and 'class="noisy"' in noisy


def test_speedup_against_default_and_chosen_baseline():
    cfg, metrics, points = two_env_inputs()
    html = an.analysis_section(cfg, metrics, points)
    envs = section_text(html, "<h2>Across environments", "<h2>Precision effect")
    row = table_row(envs, "mobilenet_v2", "fp32", "16")
    # the first configured env with results is the baseline: gcp_l4 runs 4x faster
    assert "gcp_l4 vs local" in envs and "4.00×" in row
    assert "240 (240–240)" in row and "60.0 (60.0–60.0)" in row
    # efficiency per env, with the bound
    assert "66.7% (memory)" in table_row(envs.split("Efficiency:")[1], "mobilenet_v2", "fp32", "16")
    fastest = section_text(envs, "Fastest env per model", "Per configuration")
    assert (
        "<strong>mobilenet_v2</strong>: fastest on <strong>gcp_l4</strong> "
        "(fp32, bs 16: 240 img/s), 4.00× local (fp32, bs 16: 60.0 img/s)" in fastest
    )
    cfg, metrics, points = two_env_inputs(baseline="gcp_l4")
    envs = section_text(an.analysis_section(cfg, metrics, points), "<h2>Across env", "<h2>Prec")
    assert "local vs gcp_l4" in envs and "0.25×" in table_row(envs, "mobilenet_v2", "fp32", "16")
    cfg, metrics, points = two_env_inputs(baseline="nowhere")
    envs = section_text(an.analysis_section(cfg, metrics, points), "<h2>Across env", "<h2>Prec")
    assert "report.baseline_env &#x27;nowhere&#x27; has no successful runs" in envs


def test_single_env_says_there_is_nothing_to_compare(sections):
    envs = section_text(sections["analysis.html"], "<h2>Across environments", "<h2>Precision")
    assert "Only local has results: no speedups yet" in envs
    assert "measured on local only; its best configuration is fp32, bs 16: 60.0 img/s" in envs


def test_precision_effect():
    bf16 = make_metrics().assign(
        precision="bf16",
        images_per_s=lambda d: d["images_per_s"] * 2,
        run_id=lambda d: d["run_id"].str.replace("_fp32_", "_bf16_"),
    )
    metrics = pd.concat([make_metrics(), bf16])
    html = an.analysis_section(make_config(), metrics, make_points())
    prec = section_text(html, "<h2>Precision effect", "<h2>Batch-size")
    row = table_row(prec, "local", "resnet50", "8")
    assert "20.5" in row and "41.0 (2.00×)" in row
    assert "local · resnet50 · bs 8: bf16 is 2.00× fp32" in prec
    only = section_text(
        an.analysis_section(make_config(), make_metrics(), make_points()),
        "<h2>Precision effect",
        "<h2>Batch-size",
    )
    assert "Only one precision per env, model and batch was measured (fp32)" in only


def test_batch_table_and_noisy_list(sections):
    html = sections["analysis.html"]
    scaling = section_text(html, "<h2>Batch-size scaling", "<h2>Noisy")
    row = table_row(scaling, "local", "mobilenet_v2", "fp32")
    assert "51.0" in row and "60.0" in row and "1.18×" in row
    noisy = section_text(html, "<h2>Noisy configurations", "<h2>Memory")
    assert "1 of 4 configurations are noisy" in noisy
    assert "local · mobilenet_v2 · fp32 · bs 8</strong>: step-time CV up to 8.0%" in noisy


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
    html = an.measurement_section(inputs["config"], inputs["env_infos"], inputs["metrics"], runs)
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
    html = an.measurement_section(inputs["config"], inputs["env_infos"], inputs["metrics"])
    dist = html[html.index("<h2>Step-time distribution per run") :]
    assert "400 ms" in table_row(dist, "local_resnet50_fp32_bs8_run1")


def test_memory_footprint_and_largest_batch(inputs):
    cx = make_complexity()
    for c in cx:
        if c["arch"] == "resnet50":
            peak = 3e9 if c["batch_size"] == 8 else 5e9  # 1 GB fixed + 0.25 GB per image
            c["by_precision"]["fp32"]["peak_memory_bytes"] = peak
    html = an.analysis_section(
        inputs["config"], inputs["metrics"], inputs["points"], inputs["env_infos"], cx
    )
    mem = section_text(html, "<h2>Memory footprint", "<h2>Per point")
    row = table_row(mem, "local", "resnet50", "fp32", "16")
    assert "5.00 GB" in row and "2.00 GB (max RSS (process))" in row and "32.0 GB RAM" in row
    assert "15.6%" in row and "1 OOM" in row
    # (32e9 - 1e9) / 0.25e9 = 124 images
    assert "largest batch that fits 32.0 GB of RAM: ≈ 124 by the estimate" in mem
    assert "bs 16 ran out of memory" in mem


def test_memory_capacity_is_gpu_memory_on_cuda(inputs):
    info = make_env_infos()
    info["local"].update(device="cuda", gpus=[{"name": "L4", "memory_bytes": 24e9}])
    m = inputs["metrics"].assign(device="cuda", peak_device_memory_bytes=4e9)
    html = an.analysis_section(inputs["config"], m, inputs["points"], info, make_complexity())
    mem = section_text(html, "<h2>Memory footprint", "<h2>Per point")
    row = table_row(mem, "local", "resnet50", "fp32", "8")
    assert "4.00 GB (peak device memory)" in row and "24.0 GB GPU memory (L4)" in row


def test_roof_selection_is_the_roofline_modules():
    roofs = an._roofs(
        {
            "roofs": [
                {"kind": "compute", "precision": "fp16", "source": "datasheet", "value": 8e12},
                {"kind": "compute", "precision": "fp32", "source": "measured", "value": 1e12},
                {"kind": "compute", "precision": "fp32", "source": "bogus", "value": 9e12},
                {"kind": "memory", "precision": None, "source": "measured", "value": 1e11},
            ]
        }
    )
    assert len(roofs) == 3  # the invalid entry is skipped, not fatal
    assert an._pick_roof(roofs, "compute", "amp").value == 8e12  # amp is fp16 autocast
    assert an._pick_roof(roofs, "compute", "tf32") is None  # never an fp32 peak for tf32
    assert an._pick_roof(roofs, "compute", "fp32", sources=("datasheet",)) is None
    assert not hasattr(an, "PRECISION_ALIASES")


def test_schema_accepts_report_baseline_env():
    import jsonschema

    schema = yaml.safe_load((REPO / "config" / "schema.yaml").read_text())
    cfg = make_config()
    cfg["report"] = {"baseline_env": "local"}
    jsonschema.validate(cfg, schema)
    cfg["report"] = {"baseline": "local"}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(cfg, schema)


def test_ai_range_explained_and_inconclusive_bound(inputs):
    pts = inputs["points"]
    pts["ai_low"] = pts["ai"] / 4
    pts["ai_high"] = pts["ai"]
    first = pts.index[(pts["model"] == "resnet50") & (pts["batch_size"] == 8)][0]
    pts.loc[first, "bound"] = "inconclusive"
    sections = an.all_sections(**inputs)
    assert an.AI_RANGE_SENTENCE in sections["roofline.html"]
    html = sections["analysis.html"]
    point = block(html, "local · resnet50 · fp32 · bs 8")
    head = "<strong>Bound inconclusive</strong>: its analytic AI range"
    assert f"{head} 10.0 FLOP/B – 40.0 FLOP/B" in point
    assert "straddles the ridge" in point
    memory = block(html, "local · mobilenet_v2 · fp32 · bs 8")
    assert "<strong>Memory-bound</strong>" in memory
    assert "analytic AI range 1.00 FLOP/B – 4.00" in memory
    assert "40.0 (analytic) [10.0–40.0]" in html  # the at-a-glance table shows the range
