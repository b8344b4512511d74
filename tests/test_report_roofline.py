"""The roofline section (dnnroofline.report.roofline): ceilings, ridge points, points."""

from __future__ import annotations

from report_fixtures import block, make_ceilings, table_row

from dnnroofline.report.roofline import roofline_section
from dnnroofline.report.sections import all_sections


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
    html = roofline_section(ceil, inputs["points"], inputs["config"])
    assert "The measured compute roof (fp32) is only 1.0% of the datasheet" in html
    assert "The measured memory roof" not in html


def test_what_the_ceilings_job_noted_is_shown_with_its_env(inputs, sections):
    assert "What the ceilings job noted" not in sections["roofline.html"]  # none noted
    ceil = make_ceilings()
    ceil["local"].update(
        quick=True,
        notes=["the machine was busy when the ceilings started (80% <in use>)"],
        skipped=[{"precision": "bf16", "reason": "cpu: no AVX512_BF16 or AMX"}],
    )
    html = roofline_section(ceil, inputs["points"], inputs["config"])
    local = html[html.index("<h3>local</h3>") :]
    assert "Quick-mode ceilings" in local
    assert "<li>the machine was busy when the ceilings started (80% &lt;in use&gt;)</li>" in local
    assert "<li>skipped bf16: cpu: no AVX512_BF16 or AMX</li>" in local


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


def test_ai_range_explained_and_inconclusive_bound(inputs):
    pts = inputs["points"]
    pts["ai_low"] = pts["ai"] / 4
    pts["ai_high"] = pts["ai"]
    first = pts.index[(pts["model"] == "resnet50") & (pts["batch_size"] == 8)][0]
    pts.loc[first, "bound"] = "inconclusive"
    sections = all_sections(**inputs)
    assert (
        "when the range straddles the ridge the bound is <em>inconclusive</em>"
        in (sections["roofline.html"])
    )
    html = sections["analysis.html"]
    point = block(html, "local · resnet50 · fp32 · bs 8")
    head = "<strong>Bound inconclusive</strong>: its analytic AI range"
    assert f"{head} 10.0 FLOP/B – 40.0 FLOP/B" in point
    assert "straddles the ridge" in point
    memory = block(html, "local · mobilenet_v2 · fp32 · bs 8")
    assert "<strong>Memory-bound</strong>" in memory
    assert "analytic AI range 1.00 FLOP/B – 4.00" in memory
    assert "40.0 (analytic) [10.0–40.0]" in html  # the at-a-glance table shows the range


def test_a_gpu_point_without_a_capture_says_so_without_a_flag(inputs):
    def rows(device, nproc):
        ceil = make_ceilings()
        ceil["local"]["device"] = device
        points = inputs["points"].assign(nproc=nproc, ai_note=None)
        points.loc[points["batch_size"] == 8, "ai_source"] = "ncu"  # captured
        html = roofline_section(ceil, points, inputs["config"])
        analytic = table_row(html, "mobilenet_v2", "fp32", "16")
        return analytic, table_row(html, "resnet50", "fp32", "8")

    analytic, captured = rows("cuda", 1)
    assert "analytic AI: no ncu capture of this configuration (ncu.batch_sizes)" in analytic
    assert 'class="flag"' not in analytic  # a fact of the design, not a problem
    assert "ncu.batch_sizes" not in captured
    analytic, _ = rows("cuda", 2)
    assert "analytic AI: ncu does not profile data-parallel runs" in analytic
    analytic, _ = rows("cpu", 1)  # no ncu on a CPU: nothing to explain
    assert "analytic AI:" not in analytic
