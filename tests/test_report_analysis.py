"""The analysis section (dnnroofline.report.analysis, .compare, .memory)."""

from __future__ import annotations

import re

import pandas as pd
import pytest
from report_fixtures import (
    block,
    make_complexity,
    make_config,
    make_env_infos,
    make_metrics,
    make_points,
    section_text,
    table_row,
    two_env_inputs,
)

from dnnroofline.perfmodel.levers import short_lever
from dnnroofline.report import data, memory
from dnnroofline.report.analysis import analysis_section, point
from dnnroofline.report.complexity import complexity_section
from dnnroofline.report.data import throughput_table
from dnnroofline.report.design import design_section
from dnnroofline.report.render import ENV


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


@pytest.mark.parametrize("threads, lever", [(2, "uses 4 of 8 physical cores"), (4, None)])
def test_more_threads_counts_every_process_of_a_data_parallel_env(inputs, threads, lever):
    inputs["config"]["envs"]["local"].update(nproc=2, threads=threads)
    html = analysis_section(**{k: v for k, v in inputs.items() if k != "config"},
                            config=inputs["config"])  # fmt: skip
    compute = block(html, "local · resnet50 · fp32 · bs 8")
    if lever:
        assert f"more threads: this env {lever}" in compute
    else:
        assert "more threads" not in compute


def test_a_cpu_point_whose_steps_fault_in_their_memory_names_the_allocator(inputs):
    m = inputs["metrics"]
    sel = (m["model"] == "resnet50") & (m["batch_size"] == 8)
    m.loc[sel, "fault_mib_per_step"], m.loc[sel, "timed_sys_share"] = 42.0, 0.12
    html = analysis_section(**{k: v for k, v in inputs.items() if k != "config"},
                            config=inputs["config"])  # fmt: skip
    words = re.sub(r"\s+", " ", block(html, "local · resnet50 · fp32 · bs 8"))
    assert "the timed steps faulted in 42.0 MiB a step, and 12.0% of their CPU time" in words
    assert "MALLOC_TRIM_THRESHOLD_" in words
    assert "faulted in" not in block(html, "local · mobilenet_v2 · fp32 · bs 8")  # not recorded


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


def test_failed_run_listed_with_message_and_excluded(inputs, sections):
    tp = throughput_table(inputs["metrics"]).set_index(["model", "batch_size"])
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


def test_a_failed_run_gives_the_complexity_stage_s_reason_where_it_has_one(inputs):
    # resnet50 bs16 could not be counted either (as an image too small for it makes the
    # complexity stage record); mobilenet_v2's counts are fine
    for c in inputs["complexity"]:
        if (c["arch"], c["batch_size"]) == ("resnet50", 16):
            c.clear()
            c.update(arch="resnet50", batch_size=16, status="error", flops=None,
                     message="--arch 'resnet50' cannot train on 8x8 images <b>")  # fmt: skip
    failed_mobilenet = {"run_id": "local_mobilenet_v2_fp32_bs8_run9", "env": "local",
                        "model": "mobilenet_v2", "precision": "fp32", "batch_size": 8,
                        "status": "error", "message": "RuntimeError: boom"}  # fmt: skip
    inputs["metrics"] = pd.concat([inputs["metrics"], pd.DataFrame([failed_mobilenet])])
    html = analysis_section(**{k: v for k, v in inputs.items() if k != "expected_runs"})
    failed = html[html.index("<h2>Failed runs") : html.index("<h2>Missing runs")]
    row = table_row(failed, "local_resnet50_fp32_bs16_run3")
    assert "CUDA out of memory" in row
    assert (
        "<br>The complexity stage could not record this model's step either: "
        "--arch &#39;resnet50&#39; cannot train on 8x8 images &lt;b&gt;" in row
    )
    assert "complexity stage" not in table_row(failed, "local_mobilenet_v2_fp32_bs8_run9")
    # the complexity section lists the pair apart, with the reason, and counts the rest
    html = complexity_section(inputs["complexity"])
    caption = html.index("<caption>Not counted</caption>")
    not_counted = html[caption : html.index("</table>", caption)]
    assert "resnet50" in table_row(not_counted, "resnet50", "16")
    assert "cannot train on 8x8 images &lt;b&gt;" in not_counted
    assert "mobilenet_v2" not in not_counted
    counted = html[html.index("</table>", caption) :]
    assert table_row(counted, "mobilenet_v2", "16") and table_row(counted, "resnet50", "8")
    assert "<td>resnet50</td><td class=num>16</td>" not in counted


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
    run = {"model": "resnet50", "precision": "fp32", "run": 1}
    expected = [
        {**run, "env": "local", "batch_size": 8},
        {**run, "env": "gcp_l4", "batch_size": 8},
        {**run, "env": "local", "batch_size": 32},
    ]
    html = analysis_section(
        inputs["config"],
        inputs["metrics"],
        inputs["points"],
        inputs["env_infos"],
        expected_runs=expected,
    )
    missing = html[html.index("<h2>Missing runs") :]
    assert "2 of 3 expected runs are absent" in missing
    remote = table_row(missing, "gcp_l4_resnet50_fp32_bs8_run1", "gcp_l4")
    assert "copy that machine&#39;s results/gcp_l4/ here" in remote
    assert "snakemake --cores all results/" not in remote
    assert "local_resnet50_fp32_bs32_run1" in missing
    assert "local_resnet50_fp32_bs8_run1</td>" not in missing


def test_missing_runs_with_study_matrix_flags(inputs):
    """study_matrix.json marks runs measured here; others come from another machine."""
    cfg = make_config(envs={"local": {"device": "cpu", "threads": 2}, "gcp_l4": {"device": "cuda"}})
    run = {"model": "resnet50", "precision": "fp32", "batch_size": 8}
    expected = [
        {**run, "env": "local", "run": 4, "measured_here": True},
        {**run, "env": "gcp_l4", "run": 1, "measured_here": False},
    ]
    html = analysis_section(cfg, inputs["metrics"], inputs["points"], expected_runs=expected)
    missing = html[html.index("<h2>Missing runs") :]
    here = table_row(missing, "local_resnet50_fp32_bs8_run4", "local")
    assert "snakemake --cores all results/local/runs/local_resnet50_fp32_bs8_run4.json" in here
    remote = table_row(missing, "gcp_l4_resnet50_fp32_bs8_run1", "gcp_l4")
    assert "on a cuda machine (env gcp_l4)" in remote
    cfg["measure_envs"] = ["local"]  # the resolved config names the envs measured here
    design = design_section(cfg, inputs["env_infos"], inputs["metrics"], inputs["points"])
    assert "another machine (no results yet)" in table_row(design, "gcp_l4")
    assert "on this machine" in table_row(design, "local")


def test_cross_env_comparison():
    envs = {"local": {"device": "cpu", "threads": 2}, "gcp_l4": {"device": "cuda"}}
    cfg = make_config(envs=envs)
    metrics = pd.concat([make_metrics("local"), make_metrics("gcp_l4", scale=4.0)])
    html = analysis_section(cfg, metrics, make_points())
    cross = html[html.index("<h2>Across environments") : html.index("<h2>Batch-size")]
    assert "fastest on gcp_l4 at 240 img/s, 4.00× local (60.0 img/s)" in cross


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
    html = analysis_section(cfg, metrics, points)
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
    envs = section_text(analysis_section(cfg, metrics, points), "<h2>Across env", "<h2>Prec")
    assert "local vs gcp_l4" in envs and "0.25×" in table_row(envs, "mobilenet_v2", "fp32", "16")
    cfg, metrics, points = two_env_inputs(baseline="nowhere")
    envs = section_text(analysis_section(cfg, metrics, points), "<h2>Across env", "<h2>Prec")
    assert "report.baseline_env &#39;nowhere&#39; has no successful runs" in envs


def test_single_env_says_there_is_nothing_to_compare(sections):
    envs = section_text(sections["analysis.html"], "<h2>Across environments", "<h2>Precision")
    assert "Only local has results: no speedups yet" in envs
    assert "measured on local only; its best configuration is fp32, bs 16: 60.0 img/s" in envs


def test_precision_effect():
    bf16 = make_metrics().assign(  # twice as fast: half the step, twice the images/s
        precision="bf16",
        images_per_s=lambda d: d["images_per_s"] * 2,
        step_median_s=lambda d: d["step_median_s"] / 2,
        run_id=lambda d: d["run_id"].str.replace("_fp32_", "_bf16_"),
    )
    metrics = pd.concat([make_metrics(), bf16])
    html = analysis_section(make_config(), metrics, make_points())
    prec = section_text(html, "<h2>Precision effect", "<h2>Batch-size")
    row = table_row(prec, "local", "resnet50", "8")
    assert "20.5" in row and "41.0 (2.00×)" in row
    assert "local · resnet50 · bs 8: bf16 is 2.00× fp32" in prec
    only = section_text(
        analysis_section(make_config(), make_metrics(), make_points()),
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


def test_memory_footprint_and_largest_batch(inputs):
    cx = make_complexity()
    for c in cx:
        if c["arch"] == "resnet50":
            peak = 3e9 if c["batch_size"] == 8 else 5e9  # 1 GB fixed + 0.25 GB per image
            c["by_precision"]["fp32"]["peak_memory_bytes"] = peak
    html = analysis_section(
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
    html = analysis_section(inputs["config"], m, inputs["points"], info, make_complexity())
    mem = section_text(html, "<h2>Memory footprint", "<h2>Per point")
    row = table_row(mem, "local", "resnet50", "fp32", "8")
    assert "4.00 GB (peak device memory)" in row and "24.0 GB GPU memory (L4)" in row


def test_largest_batch_of_a_cpu_data_parallel_env_counts_every_process():
    # 4 ranks share 32 GB of RAM, each 1 GB + 0.1 GB per image: 4 x (1 + 0.1 b) <= 32
    # gives b = 70 per process, by the estimate as by the measured peak (the ranks' sum)
    gb = 1e9
    rows = [
        {
            "run_id": f"ddp4_m_fp32_bs{b}_run1",
            "env": "ddp4",
            "model": "m",
            "precision": "fp32",
            "batch_size": b,
            "run": 1,
            "status": "ok",
            "device": "cpu",
            "nproc": 4,
            "images_per_s": 10.0,
            "step_median_s": 1.0,
            "max_rss_bytes": 4 * (gb + 0.1 * gb * b),
        }
        for b in (8, 16)
    ]
    cx = {
        ("m", b): {"arch": "m", "batch_size": b, "peak_memory_bytes": gb + 0.1 * gb * b}
        for b in (8, 16)
    }
    cfg = {"envs": {"ddp4": {"device": "cpu", "nproc": 4}}, "study": {"models": ["m"]}}
    facts = memory.facts(
        cfg, pd.DataFrame(rows), cx, {"ddp4": {"device": "cpu", "ram_bytes": 32 * gb}}
    )
    (fit,) = facts["largest"]
    assert (fit["by_estimate"], fit["by_measured"]) == (70, 70)
    assert facts["rows"][0]["estimated"] == pytest.approx(4 * 1.8 * gb)


# --------------------------------------------------------------------------- GPU levers


def _roof(precision, value):
    return {"kind": "compute", "precision": precision, "source": "measured", "value": value}


H100_CEILINGS = {
    "h100": {
        "device": "cuda",
        "roofs": [_roof("fp32", 51e12), _roof("tf32", 378e12), _roof("amp", 720e12)]
        + [_roof("bf16", 760e12), {"kind": "memory", "source": "measured", "value": 3e12}],
    }
}
H100_INFO = {"h100": {"device": "cuda", "gpus": [{"name": "H100", "compute_capability": "9.0"}]}}


def h100_point_words(precision, bound="compute", eff=0.5, complexity=None):
    """The analysis section's paragraph on one H100 point (templates/parts/point.html)."""
    r = {"env": "h100", "model": "resnet50", "precision": precision, "batch_size": 8,
         "bound_": bound, "eff": eff, "above": False, "ai": 300.0, "ridge_ai": 126.0,
         "ai_source": "ncu", "roof_source": "measured", "roof_flops": 378e12,
         "attained_flops": eff * 378e12, "gap": (1 - eff) * 378e12,
         "peak_bandwidth": 3e12}  # fmt: skip
    cfg = make_config(envs={"h100": {"device": "cuda"}})
    tp = throughput_table(data.prepare_metrics(None))
    p = point(r, pd.DataFrame([r]), tp, complexity or {}, cfg, H100_INFO, H100_CEILINGS)
    return re.sub(r"\s+", " ", ENV.get_template("parts/point.html").render(p=p))


def test_a_compute_bound_h100_point_is_sent_to_faster_tensor_cores_than_its_own():
    fp32 = h100_point_words("fp32")
    assert "tensor cores: tf32/bf16/amp (peaks: tf32 378,000 GFLOP/s, amp 720,000" in fp32
    tf32 = h100_point_words("tf32")  # an H100 has tf32 and bf16 units: never "fp16 only"
    assert "lower-precision tensor cores: bf16/amp (peaks: amp 720,000 GFLOP/s" in tf32
    assert "no tf32/bf16 units" not in tf32 and "tf32 378" not in tf32
    for low in ("amp", "bf16"):
        assert "tensor cores" not in h100_point_words(low).split("What would move it")[1]


def test_lower_precision_is_advised_only_where_it_moves_fewer_bytes():
    def words(bf16_bytes):
        by = {"bf16": {"min_dram_bytes_per_step": bf16_bytes}}
        cx = {("resnet50", 8): {"min_dram_bytes_per_step": 376e6, "by_precision": by}}
        return h100_point_words("fp32", bound="memory", eff=0.5, complexity=cx)

    assert "min DRAM bytes/step 376 MB → 200 MB" in words(200e6)
    # small batches: the fp32 master copy makes bf16 move more bytes, not fewer
    assert "lower-precision activations" not in words(398e6)


def test_overheads_come_first_when_no_roof_explains_the_step():
    words = h100_point_words("fp32", bound="memory", eff=0.1)
    levers = re.findall(r"<li>(.*?)</li>", words)
    assert levers[0].startswith("overheads first: at 10.0% of the roof")
    assert "CUDA graphs" in levers[0] and "larger batch" in levers[1]


@pytest.mark.parametrize(
    "device, precision, bound, eff, expected",
    [
        ("cuda", "amp", "compute", 0.5, "better kernels (cuDNN autotuning, torch.compile)"),
        ("cpu", "fp32", "compute", 0.5, "better kernels (oneDNN, torch.compile)"),
        (None, "fp32", "compute", 0.5, "better kernels (cuDNN/oneDNN, torch.compile)"),
        ("cuda", "fp32", "compute", 0.9, "(tensor cores: tf32/bf16/amp)"),
        ("cuda", "tf32", "compute", 0.9, "(bf16/amp tensor cores)"),
        ("cuda", "bf16", "compute", 0.9, "(a faster GPU)"),
        ("cpu", "fp32", "compute", 0.9, "(bf16 where the CPU has bf16 units, more cores)"),
        ("cpu", "bf16", "compute", 0.9, "(more cores)"),
        ("cuda", "fp32", "memory", 0.5, "operator fusion, lower-precision activations"),
    ],
)
def test_the_one_line_lever_is_worded_for_the_device_and_precision(
    device, precision, bound, eff, expected
):
    assert expected in short_lever(bound, eff, False, device, precision)


def test_the_one_line_lever_never_offers_lower_precision_to_a_low_precision_point():
    assert short_lever("memory", 0.5, False, "cuda", "bf16") == (
        "raise AI: larger batch, operator fusion"
    )
