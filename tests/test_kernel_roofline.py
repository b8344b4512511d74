"""ncu beyond the DRAM point: hierarchical and per-kernel rooflines, the analytic-vs-ncu
page, their CLIs, and the workflow's ncu jobs (dry runs with a faked CUDA machine)."""

from __future__ import annotations

import json
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pandas as pd
import pytest
import yaml
from plot_geometry import drawn_figure, label_clashes
from workflow_helpers import FAKE_CUDA, job_counts, snakemake

import plot_kernel_roofline as plot_cli
import write_ncu_comparison as page_cli
from dnnroofline.errors import InputError
from dnnroofline.ncu.kernels import (
    AREA_PER_SHARE,
    MIN_AREA,
    hierarchical_point,
    kernel_path,
    kernel_points,
    level_roofs,
    step_time,
    with_ncu_memory_roofs,
)
from dnnroofline.ncu.parse import empty_result, parse_ncu_csv
from dnnroofline.plots import kernels as kernel_plots
from dnnroofline.plots.kernels import plot_hierarchical, plot_kernels
from dnnroofline.report.ncu_comparison import comparison_page, comparison_rows, key_ncu_files

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "ncu"
NNPERF = DATA / "nnperf_resnet18_cifar10_bs64_L4_details_scaled.csv"
GARDENIA = DATA / "gardenia_sgemm_A100_details_base_printfp.csv"
H100 = DATA / "handmade_h100_raw_tensor.csv"
BIN = Path(sys.executable).parent
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def roof(kind, precision, source, value):
    return {"kind": kind, "precision": precision, "source": source, "value": value}


CEILINGS = {
    "env": "gpu",
    "roofs": [
        roof("compute", "fp32", "measured", 25e12),
        roof("compute", "fp32", "datasheet", 30e12),
        roof("compute", "amp", "datasheet", 121e12),
        roof("memory", None, "measured", 250e9),
        roof("memory", None, "datasheet", 300e9),
    ],
}
WITH_L2 = dict(
    CEILINGS,
    cache_roofs=[{"level": "l2", "source": "measured", "value": 2e12, "method": "test"}],
)


def complexity(model, batch, train_step, min_bytes, forward=None):
    return {
        "arch": model,
        "batch_size": batch,
        "flops": {"train_step": train_step, "forward": forward or train_step / 3},
        "min_dram_bytes_per_step": min_bytes,
        "by_precision": {},
    }


def points_frame(rows):
    cols = ["env", "model", "precision", "batch_size", "runs_ok", "step_median_s"]
    return pd.DataFrame(rows, columns=cols)


def svg_ids(path: Path) -> list[str]:
    return [el.get("id") for el in ET.parse(path).getroot().iter() if el.get("id")]


@pytest.fixture(scope="module")
def nnperf():
    return parse_ncu_csv(NNPERF)


@pytest.fixture(scope="module")
def h100():
    return parse_ncu_csv(H100)


# --------------------------------------------------------------------------- hierarchical


def test_hierarchical_ais_are_flop_over_each_level_bytes(h100):
    # By hand from the CSV: FLOP = tensor aggregates + 2*FMA + ADD + MUL = 139,605,445,731;
    # l1tex 805.306368 + 201.326592 + 50.331648 Mbyte; lts 402653184 + 201326592 + 75497472;
    # dram (read + write) 100,663.296 + 134,217.728 + 25,165.824 Kbyte + 33554432 + 67108864
    # + 4194304 byte.
    flop, l1, l2, dram = 139_605_445_821, 1_056_964_608, 679_477_248, 364_904_448
    p = hierarchical_point(h100, 0.5, "gpu", "resnet50", "amp", 32)
    assert p.ai["l2"] == pytest.approx(flop / l2, rel=1e-12)
    assert p.ai["dram"] == pytest.approx(flop / dram, rel=1e-12)
    assert p.ai["l2"] < p.ai["dram"]
    assert p.attained_flops == pytest.approx(flop / 0.5)
    # The nvjet kernel runs HGMMA (wgmma) and does 98% of the FLOPs: its operands never
    # pass an L1 counter, so l1tex__t_bytes (l1 above) gives no L1 level.
    assert p.ai["l1"] is None and p.bytes["l1"] is None
    assert p.unmeasurable == {
        "l1": "98% of the FLOPs are in 1 wgmma kernels: TMA fills shared memory and "
        "wgmma reads its operands there, past every L1 counter"
    }
    assert p.notes == [f"L1: not measurable by counters: {p.unmeasurable['l1']}"]
    assert h100["totals"]["bytes"]["l1"] == l1  # the counter itself is still parsed


def test_hierarchical_ais_of_the_gardenia_fixture():
    g = parse_ncu_csv(GARDENIA)
    ks = g["kernels"]
    flop = sum(k["flop"]["total"] for k in ks)
    by_level = {lv: sum(k["bytes"][lv] for k in ks) for lv in ("l1", "l2", "dram")}
    p = hierarchical_point(g, 10.0, "gpu", "sgemm", "fp32", 1)
    for lv, b in by_level.items():
        assert p.ai[lv] == pytest.approx(flop / b, rel=1e-12), lv
    # HFMA2 counts 4 FLOPs (packed two-wide): 2 more per instruction than before.
    flop_total = 73021154918400 + 2 * 2_149_161_369_600
    assert p.ai["dram"] == pytest.approx(flop_total / 818402825216, rel=1e-12)


def test_hierarchical_levels_without_counters_are_none_and_noted(nnperf):
    p = hierarchical_point(nnperf, 0.01, "gpu", "resnet18", "fp32", 64)
    assert p.ai["l1"] is None and p.ai["l2"] is None
    assert p.ai["dram"] == pytest.approx(4_928_393_620 / 709_948_840)
    assert any("lts__t_bytes" in n for n in p.notes)
    assert any("l1tex__t_bytes" in n for n in p.notes)


def test_attained_uses_the_timed_median_step_not_ncu_time(h100):
    pts = points_frame(
        [
            ("gpu", "resnet50", "amp", 32, 3, 0.004),
            ("gpu", "resnet50", "amp", 64, 0, float("nan")),
            ("gpu", "resnet50", "fp32", 32, 3, 0.010),
        ]
    )
    step = step_time(pts, "gpu", "resnet50", "amp", 32)
    assert step == 0.004
    assert step_time(pts, "gpu", "resnet50", "amp", 64) is None  # no ok run
    assert step_time(pts, "gpu", "resnet18", "amp", 32) is None  # no row
    p = hierarchical_point(h100, step, "gpu", "resnet50", "amp", 32)
    assert p.attained_flops == pytest.approx(139_605_445_821 / 0.004)
    assert p.attained_flops != pytest.approx(139_605_445_821 / h100["totals"]["time_s"])
    none = hierarchical_point(h100, None, "gpu", "resnet50", "amp", 32)
    assert none.attained_flops is None and not none.plottable
    assert any("no successful timed run" in n for n in none.notes)


def test_hierarchical_plot_without_cache_roofs_says_so(tmp_path, h100):
    p = hierarchical_point(h100, 0.01, "gpu", "resnet50", "amp", 32)
    svg = tmp_path / "h.svg"
    info = plot_hierarchical(p, level_roofs(CEILINGS), tmp_path / "h.png", svg)
    assert (tmp_path / "h.png").read_bytes()[:8] == PNG_MAGIC
    ids = svg_ids(svg)
    pts = [i for i in ids if i.startswith("point-")]
    assert sorted(pts) == [f"point-gpu-resnet50-amp-bs32-{lv}" for lv in ("dram", "l2")]
    assert info["points"] == 2 and info["cache_roofs"] == 0
    assert "roof-gpu-memory-dram-measured" in ids and "roof-gpu-memory-dram-datasheet" in ids
    assert "roof-gpu-compute-amp-datasheet" in ids
    assert not [i for i in ids if i.startswith("roof-gpu-compute-fp32")]  # amp run: amp roof
    assert not [i for i in ids if "memory-l2" in i or "memory-l1" in i]
    text = svg.read_text()
    # L1 is not measurable here (wgmma), so only L2 lacks a roof
    assert "L2 bandwidth roofs: not measured" in text and "L1 and L2" not in text
    assert "unmeasurable-gpu-resnet50-amp-bs32-l1" in ids
    assert not [i for i in ids if i.startswith("above-roof-")]  # 14 TFLOP/s < 121


def test_hierarchical_plot_draws_a_cache_roof_that_exists(tmp_path, h100):
    p = hierarchical_point(h100, 0.01, "gpu", "resnet50", "amp", 32)
    svg = tmp_path / "h.svg"
    info = plot_hierarchical(p, level_roofs(WITH_L2), None, svg)
    ids = svg_ids(svg)
    assert "roof-gpu-memory-l2-measured" in ids
    assert info["cache_roofs"] == 1
    text = svg.read_text()
    assert "not measured" not in text  # L2 has its roof; L1 is not measurable (wgmma)
    assert "L1: not measurable by counters" in text


def test_hierarchical_point_above_its_roof_is_flagged(tmp_path, h100):
    # 1.4e11 FLOP in 1 ms = 140 TFLOP/s, above the 121 TFLOP/s amp peak at every level
    p = hierarchical_point(h100, 0.001, "gpu", "resnet50", "amp", 32)
    svg = tmp_path / "h.svg"
    info = plot_hierarchical(p, level_roofs(CEILINGS), None, svg)
    rings = [i for i in svg_ids(svg) if i.startswith("above-roof-")]
    assert info["above_roof"] == 2 == len(rings)  # L2 and DRAM; L1 has no point (wgmma)


def test_hierarchical_plot_of_a_failed_capture_says_why(tmp_path):
    doc = {"status": "unavailable", "message": "ncu not found", **empty_result("x")}
    p = hierarchical_point(doc, 0.01, "gpu", "resnet50", "amp", 32)
    svg = tmp_path / "h.svg"
    info = plot_hierarchical(p, level_roofs(CEILINGS), None, svg)
    assert info["points"] == 0
    assert not [i for i in svg_ids(svg) if i.startswith("point-")]
    assert "ncu capture unavailable: ncu not found" in svg.read_text()


def test_hierarchical_plot_refuses_a_missing_peak(h100):
    p = hierarchical_point(h100, 0.01, "gpu", "resnet50", "bf16", 32)
    with pytest.raises(InputError, match="no compute peak for precision 'bf16'"):
        plot_hierarchical(p, level_roofs(CEILINGS), None, None)


# --------------------------------------------------------------------------- ceilings


def test_level_roofs_reads_dram_and_cache_roofs():
    r = level_roofs(WITH_L2)
    assert r.memory["dram"] == {"measured": 250e9, "datasheet": 300e9}
    assert r.memory["l2"] == {"measured": 2e12} and r.memory["l1"] == {}
    assert r.compute[("amp", "datasheet")] == 121e12
    bad = dict(CEILINGS, cache_roofs=[{"level": "l3", "source": "measured", "value": 1e12}])
    with pytest.raises(InputError, match="level"):
        level_roofs(bad, "c.json")
    no_dram = {"env": "gpu", "roofs": [roof("compute", "fp32", "measured", 1e12)]}
    with pytest.raises(InputError, match="DRAM"):
        level_roofs(no_dram)


# --------------------------------------------------------------------------- per kernel


def _plottable(doc):
    return [
        i
        for i, k in enumerate(doc["kernels"])
        if (k["flop"]["total"] or 0) > 0 and (k["bytes"]["dram"] or 0) > 0 and k["time_s"]
    ]


def test_kernel_points_skip_kernels_without_flops_or_dram(nnperf):
    ks = kernel_points(nnperf)
    expected = _plottable(nnperf)
    assert [p.index for p in ks.points] == expected
    assert len(ks.points) == 59
    assert len(ks.skipped) == 98 - 59 == sum(ks.reasons.values())
    no_flop = sum(1 for k in nnperf["kernels"] if not k["flop"]["total"])
    assert ks.reasons["no FLOPs"] == no_flop
    for p in ks.points:
        k = nnperf["kernels"][p.index]
        assert p.ai == pytest.approx(k["flop"]["total"] / k["bytes"]["dram"])
        assert p.flops_rate == pytest.approx(k["flop"]["total"] / k["time_s"])


def test_kernel_points_reasons_for_missing_dram_and_time():
    doc = {
        "kernels": [
            {"id": 0, "name": "a", "time_s": 1e-3, "flop": {"total": 10}, "bytes": {"dram": 5}},
            {"id": 1, "name": "b", "time_s": 1e-3, "flop": {"total": 10}, "bytes": {"dram": None}},
            {"id": 2, "name": "c", "time_s": 2e-3, "flop": {"total": 0}, "bytes": {"dram": 5}},
            {"id": 3, "name": "d", "time_s": None, "flop": {"total": 10}, "bytes": {"dram": 5}},
        ]
    }
    ks = kernel_points(doc)
    assert [p.id for p in ks.points] == [0]
    assert ks.reasons == {"no FLOPs": 1, "no DRAM bytes": 1, "no duration": 1}
    assert ks.total_time_s == pytest.approx(4e-3)
    assert ks.points[0].share == pytest.approx(0.25)


def test_kernel_sizes_are_proportional_to_time_share(nnperf, tmp_path):
    ks = kernel_points(nnperf)
    total = sum(k["time_s"] for k in nnperf["kernels"] if k["time_s"])
    shares = [p.share for p in ks.points] + [s["share"] for s in ks.skipped]
    assert sum(shares) == pytest.approx(1.0)
    for p in ks.points:
        assert p.share == pytest.approx(nnperf["kernels"][p.index]["time_s"] / total)
        assert p.area == pytest.approx(max(MIN_AREA, AREA_PER_SHARE * p.share))
    big = [p for p in ks.points if AREA_PER_SHARE * p.share > MIN_AREA]
    assert len(big) >= 10
    ratios = {round(p.area / p.share, 6) for p in big}
    assert ratios == {AREA_PER_SHARE}
    # what was drawn: marker size (a diameter) squared is the area
    info = plot_kernels(ks, level_roofs(CEILINGS), "gpu", "fp32", None, tmp_path / "k.svg", "t")
    for p in ks.points:
        assert info["markersize"][f"kernel-{p.index}"] ** 2 == pytest.approx(p.area)
    largest = max(ks.points, key=lambda p: p.share)
    smallest = min(big, key=lambda p: p.share)
    assert (
        info["markersize"][f"kernel-{largest.index}"]
        > info["markersize"][f"kernel-{smallest.index}"]
    )


def test_kernel_plot_has_one_point_per_plottable_kernel(nnperf, tmp_path):
    ks = kernel_points(nnperf)
    png, svg = tmp_path / "k.png", tmp_path / "k.svg"
    info = plot_kernels(ks, level_roofs(CEILINGS), "gpu", "fp32", png, svg, "kernels")
    assert png.read_bytes()[:8] == PNG_MAGIC
    ids = svg_ids(svg)
    kernel_ids = [i for i in ids if re.fullmatch(r"kernel-\d+", i)]
    assert sorted(kernel_ids) == sorted(f"kernel-{i}" for i in _plottable(nnperf))
    assert len(kernel_ids) == info["points"] == 59 and info["skipped"] == 39
    for s in ks.skipped:
        assert f"kernel-{s['index']}" not in ids
    for gid in (
        "roof-gpu-compute-fp32-measured",
        "roof-gpu-compute-fp32-datasheet",
        "roof-gpu-compute-amp-datasheet",
        "roof-gpu-memory-dram-measured",
        "roof-gpu-memory-dram-datasheet",
    ):
        assert gid in ids
    text = svg.read_text()
    assert "39 not plotted: 39 no FLOPs" in text
    assert "ncu's per-kernel duration" in text


def test_kernel_colour_follows_its_flop_path(h100, tmp_path):
    assert kernel_path(h100["kernels"][0]["flop"]) == "tensor"
    assert kernel_path(h100["kernels"][1]["flop"]) == "fp32"
    assert kernel_path({"fp32": 0, "tensor": None}) is None
    ks = kernel_points(h100)
    assert [p.path for p in ks.points] == ["tensor", "fp32", "tensor"]
    svg = tmp_path / "k.svg"
    plot_kernels(ks, level_roofs(CEILINGS), "gpu", "amp", None, svg, "t")
    root = ET.parse(svg).getroot()

    def fill(gid):
        (el,) = [e for e in root.iter() if e.get("id") == gid]
        styles = " ".join(x.get("style", "") for x in el.iter())
        return re.search(r"fill: ?(#[0-9a-f]{6})", styles).group(1)

    assert fill("kernel-0") == fill("kernel-2") == "#ff7f0e"  # amp tensor: amp's colour
    assert fill("kernel-1") == "#1f77b4"  # CUDA-core fp32: fp32's colour


def test_kernel_above_every_roof_is_flagged(tmp_path):
    doc = {
        "kernels": [  # 1e12 FLOP in 1 ms = 1e15 FLOP/s: above every peak
            {"id": 0, "name": "x", "time_s": 1e-3, "flop": {"total": 1e12}, "bytes": {"dram": 1e9}},
            {"id": 1, "name": "y", "time_s": 1e-3, "flop": {"total": 1e9}, "bytes": {"dram": 1e8}},
        ]
    }
    svg = tmp_path / "k.svg"
    info = plot_kernels(kernel_points(doc), level_roofs(CEILINGS), "gpu", "fp32", None, svg, "t")
    assert info["above_roof"] == 1
    assert "above-roof-kernel-0" in svg_ids(svg) and "above-roof-kernel-1" not in svg_ids(svg)


def test_kernel_above_its_own_paths_roof_is_flagged_below_another_precisions(tmp_path):
    # 40 GFLOP of CUDA-core fp32 in 1 ms = 40 TFLOP/s at AI 1000: under amp's 121 but
    # a third above the best fp32 peak (30): its own roof is wrong, or its counters
    doc = {
        "kernels": [
            {"id": 0, "name": "sgemm", "time_s": 1e-3, "flop": {"fp32": 40e9, "total": 40e9},
             "bytes": {"dram": 40e6}},
            {"id": 1, "name": "hgemm", "time_s": 1e-3, "flop": {"tensor": 40e9, "total": 40e9},
             "bytes": {"dram": 40e6}},
        ]
    }  # fmt: skip
    svg = tmp_path / "k.svg"
    info = plot_kernels(kernel_points(doc), level_roofs(CEILINGS), "gpu", "amp", None, svg, "t")
    assert info["above_roof"] == 1  # the tensor-core one is held to amp's roof
    assert "above-roof-kernel-0" in svg_ids(svg) and "above-roof-kernel-1" not in svg_ids(svg)


# --------------------------------------------------------------------------- analytic vs ncu


def test_comparison_ratio_is_analytic_over_ncu_and_flags_out_of_range(nnperf, h100):
    comp = {
        ("resnet18", 64): complexity("resnet18", 64, 14.8e9, 3e8, forward=4.9e9),
        ("resnet50", 32): complexity("resnet50", 32, 1.6e11, 4e8),
    }
    docs = {("gpu", "resnet18", "fp32", 64): nnperf, ("gpu", "resnet50", "amp", 32): h100}
    rows = comparison_rows(docs, comp)
    r18, r50 = rows
    assert (r18["model"], r50["model"]) == ("resnet18", "resnet50")
    assert r18["flop_ratio"] == pytest.approx(14.8e9 / 4_928_393_620)
    assert r18["bytes_ratio"] == pytest.approx(3e8 / 709_948_840)
    assert r50["flop_ratio"] == pytest.approx(1.6e11 / 139_605_445_821)
    assert r18["flop_flag"] is True  # 3.0
    assert r50["flop_flag"] is False  # 1.15
    assert r18["kernels_plotted"] == 59 and r18["kernels_skipped"] == 39
    text18 = " ".join(r18["flop_explanation"])
    assert "fewer FLOPs" in text18 and "OUT OF RANGE" in text18
    assert "backward" in text18  # ncu total is close to the analytic forward pass
    assert "OUT OF RANGE" not in " ".join(r50["flop_explanation"])
    html = comparison_page(rows)
    assert html.count('<tr class="flag">') == 1
    assert "FLOP counts disagree by more than 2x" in html
    assert "gpu resnet18 fp32 bs64</strong> (3.00)" in html
    # a GPU-scale mismatch keeps its digits: 0.00370, never "0.00"
    tiny = comparison_rows({("gpu", "resnet50", "amp", 32): h100},
                           {("resnet50", 32): complexity("resnet50", 32, 5.17e8, 4e8)})  # fmt: skip
    html = comparison_page(tiny)
    assert "resnet50 amp bs32</strong> (0.00370)" in html and "0.00370 ⚠" in html
    assert "analytic / ncu = 0.00370 is outside" in html


def test_comparison_explanations_follow_the_numbers(h100):
    no_tensor = json.loads(json.dumps(h100))
    no_tensor["totals"]["flop"]["tensor"] = None
    no_tensor["totals"]["flop"]["total"] = 19_008_611  # CUDA-core FLOPs only
    comp = {("resnet50", 32): complexity("resnet50", 32, 1.4e11, 3e8)}
    (row,) = comparison_rows({("gpu", "resnet50", "amp", 32): no_tensor}, comp)
    text = " ".join(row["flop_explanation"])
    assert "no tensor-core FLOP counters" in text and row["flop_flag"]
    more = {("resnet50", 32): complexity("resnet50", 32, 0.9e11, 3e8)}
    (row,) = comparison_rows({("gpu", "resnet50", "amp", 32): h100}, more)
    text = " ".join(row["flop_explanation"])
    assert "55% more FLOPs" in text  # 139.6 / 90 = 1.55
    assert "padded tiles" in text and "GradScaler" in text
    same = {("resnet50", 32): complexity("resnet50", 32, 1.40e11, 3e8)}
    (row,) = comparison_rows({("gpu", "resnet50", "amp", 32): h100}, same)
    assert "agree within 10%" in " ".join(row["flop_explanation"])


def test_bytes_explanation_follows_the_pass_that_counted_them():
    # The H100's resnet18 fp32 capture: its DRAM bytes are the step pass's (the step as it
    # runs, caches not flushed); the text blamed kernel replay's cache flushing for them.
    example = ROOT / "examples/h100/results/h100/ncu/h100_resnet18_fp32_bs128.json"
    doc = json.loads(example.read_text())
    comp = {("resnet18", 128): complexity("resnet18", 128, 1.369e12, 6.05e9)}
    (row,) = comparison_rows({("h100", "resnet18", "fp32", 128): doc}, comp)
    assert row["bytes_pass"] == "step"
    text = " ".join(row["bytes_explanation"])
    assert "7.22x the analytic minimum" in text and "ncu's step pass" in text
    assert "cache-control all" not in text
    # bytes from the kernel pass (a capture without a step pass): the flushing is the cause
    doc["provenance"]["totals.bytes"] = "kernel"
    (row,) = comparison_rows({("h100", "resnet18", "fp32", 128): doc}, comp)
    assert "flushes the caches before each replayed kernel" in " ".join(row["bytes_explanation"])


def test_comparison_page_escapes_and_reports_failed_captures():
    doc = {"status": "unavailable", "message": "<script>alert(1)</script>", **empty_result("x")}
    doc["status"] = "unavailable"
    rows = comparison_rows({("gpu", "resnet50", "fp32", 8): doc}, {})
    assert rows[0]["flop_ratio"] is None and not rows[0]["flop_flag"]
    html = comparison_page(rows, unmatched=["results/x/ncu/<b>.json"])
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert "&lt;b&gt;.json" in html
    assert "no usable counters" in html
    assert "No complexity file" in html


def test_page_without_ncu_data_says_so_and_how_to_get_it():
    html = comparison_page([])
    assert "No Nsight Compute data in this study" in html
    assert "device: cuda" in html and "ncu" in html and "ERR" not in html
    assert "<table" not in html


def captured(doc: dict, env: str, model: str, precision: str, batch: int) -> dict:
    """``doc`` as a capture keeps it: with its driver's run record (the run identity)."""
    config = {"arch": model, "precision": precision, "batch_size": batch}
    return {**doc, "driver_run": {"status": "ok", "env": env, "config": config}}


def test_ncu_files_are_keyed_by_the_identity_they_hold(nnperf):
    docs = [
        ("a.json", captured(nnperf, "gcp_l4", "mobilenet_v2", "amp", 16)),
        ("b.json", captured(nnperf, "gcp_l4", "resnet18", "fp32", 8)),
        ("c.json", captured(nnperf, "other", "resnet18", "fp32", 8)),
    ]
    matched, unmatched = key_ncu_files(
        docs, ["gcp_l4", "local"], ["mobilenet_v2", "resnet18"], [8, 16]
    )
    assert {key: where for key, (where, _) in matched.items()} == {
        ("gcp_l4", "mobilenet_v2", "amp", 16): "a.json",
        ("gcp_l4", "resnet18", "fp32", 8): "b.json",
    }
    assert unmatched == ["c.json"]


# --------------------------------------------------------------------------- CLIs


def _write(path: Path, obj) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj))
    return str(path)


def test_plot_cli_writes_both_kinds(tmp_path, h100):
    ncu = _write(tmp_path / "gpu" / "ncu" / "gpu_resnet50_amp_bs32.json", h100)
    ceil = _write(tmp_path / "gpu" / "ceilings.json", CEILINGS)
    pts = tmp_path / "points.csv"
    points_frame([("gpu", "resnet50", "amp", 32, 2, 0.02)]).to_csv(pts, index=False)
    common = ["--ncu", ncu, "--ceilings", ceil, "--env", "gpu", "--model", "resnet50"]
    common += ["--precision", "amp", "--batch", "32"]
    for kind in ("kernels", "hierarchical"):
        png, svg = tmp_path / f"{kind}.png", tmp_path / f"{kind}.svg"
        extra = ["--points", str(pts)] if kind == "hierarchical" else []
        rc = plot_cli.main(["--kind", kind, *common, *extra, "--png", str(png), "--svg", str(svg)])
        assert rc == 0
        assert png.read_bytes()[:8] == PNG_MAGIC and svg.stat().st_size > 1000
    assert len([i for i in svg_ids(tmp_path / "kernels.svg") if i.startswith("kernel-")]) == 3
    hier = [i for i in svg_ids(tmp_path / "hierarchical.svg") if i.startswith("point-")]
    assert len(hier) == 2  # L2 and DRAM: the fixture's L1 is not measurable (wgmma)
    # hierarchical without --points is refused with a message, exit 2
    rc = plot_cli.main(["--kind", "hierarchical", *common, "--png", "a.png", "--svg", "a.svg"])
    assert rc == 2


def test_plot_cli_with_an_unavailable_capture_still_draws(tmp_path):
    doc = {"status": "unavailable", "message": "ncu not found", **empty_result("x")}
    doc["status"] = "unavailable"
    ncu = _write(tmp_path / "n.json", doc)
    ceil = _write(tmp_path / "c.json", CEILINGS)
    svg = tmp_path / "k.svg"
    args = ["--kind", "kernels", "--ncu", ncu, "--ceilings", ceil, "--env", "gpu"]
    args += ["--model", "resnet50", "--precision", "fp32", "--batch", "8"]
    assert plot_cli.main([*args, "--png", str(tmp_path / "k.png"), "--svg", str(svg)]) == 0
    assert "ncu capture unavailable" in svg.read_text()


def test_comparison_cli_with_and_without_ncu_files(tmp_path, nnperf):
    comp = _write(
        tmp_path / "complexity" / "resnet18_bs64.json",
        complexity("resnet18", 64, 14.8e9, 3e8),
    )
    ncu = _write(
        tmp_path / "gcp_l4" / "ncu" / "gcp_l4_resnet18_fp32_bs64.json",
        captured(nnperf, "gcp_l4", "resnet18", "fp32", 64),
    )
    stray = _write(
        tmp_path / "gcp_l4" / "ncu" / "gcp_l4_vgg16_fp32_bs64.json",
        captured(nnperf, "gcp_l4", "vgg16", "fp32", 64),
    )
    out = tmp_path / "sections" / "ncu_vs_analytic.html"
    args = ["--complexity", comp, "--envs", "local", "gcp_l4", "--out", str(out)]
    assert page_cli.main(["--ncu", ncu, stray, *args]) == 0
    html = out.read_text()
    assert "gcp_l4" in html and "3.00" in html and "<table" in html
    assert "gcp_l4_vgg16_fp32_bs64.json" in html  # unmatched, listed
    assert page_cli.main(["--ncu", *args]) == 0  # empty list: a CPU-only study
    assert "No Nsight Compute data in this study" in out.read_text()
    assert sorted(p.name for p in out.parent.iterdir()) == ["ncu_vs_analytic.html"]


# --------------------------------------------------------------------------- the workflow


DAG_CONFIG = {
    "envs": {
        "local": {"device": "auto", "threads": 2},
        "gcp_l4": {"device": "cuda", "precisions": ["fp32", "amp"]},
    },
    "study": {
        "models": ["resnet18", "mobilenet_v2"],
        "precisions": ["fp32"],
        "batch_sizes": [2, 4, 8],
        "runs": 2,
    },
}


@pytest.mark.workflow
def test_dry_run_with_a_cuda_env_has_ncu_plot_and_page_jobs(tmp_path):
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "config.yaml").write_text(yaml.safe_dump(DAG_CONFIG))
    fake = FAKE_CUDA
    # A CUDA machine: "local" (auto) is CUDA and measured here, so every config gets a job.
    counts = job_counts(
        snakemake(tmp_path, "-n", "--cores", "2", "--quiet", "rules", env_extra=fake).stdout
    )
    n = 2 * 1 * 3  # models x precisions x batches of "local"
    # gcp_l4 (cuda) is measured here too on a CUDA machine: 2 models x 2 precisions x 3 batches
    n += 2 * 2 * 3
    assert counts["ncu"] == n
    assert counts["plot_kernel_roofline"] == n
    assert counts["plot_hierarchical_roofline"] == n
    assert counts["ncu_vs_analytic"] == 1
    assert counts["train"] == n * 2
    # The ncu job passes the env, the declared threads and keeps the driver's run JSON.
    out = snakemake(
        tmp_path,
        "-n",
        "-p",
        "--cores",
        "2",
        "results/local/ncu/local_resnet18_fp32_bs2.json",
        env_extra=fake,
    ).stdout
    (cmd,) = [ln for ln in out.splitlines() if "profile_ncu.py" in ln]
    driver = cmd[cmd.index(" -- python") :]  # the driver's own flags, after profile_ncu's
    assert "--env local" in driver and "--expect-threads 2" in driver
    assert "--env-info results/local/env_info.json" in driver
    assert "--driver-run-out results/local/ncu/driver/local_resnet18_fp32_bs2.json" in cmd
    assert "--iters 1" in cmd and "--backend cuda" in cmd
    assert cmd.index("--driver-run-out") < cmd.index(" -- python")


@pytest.mark.workflow
def test_ncu_pass_timeout_reaches_the_captures_and_the_self_test(tmp_path):
    # On a time-limited lease a hung pass must cost one capture, not the whole command.
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "config.yaml").write_text(yaml.safe_dump(DAG_CONFIG))
    fake = FAKE_CUDA
    targets = ["results/local/ncu/local_resnet18_fp32_bs2.json", "results/local/ncu/selftest.json"]
    dry = ["-n", "-p", "--cores", "2", *targets]

    def commands(*extra):
        out = snakemake(tmp_path, *dry, *extra, env_extra=fake).stdout
        (capture,) = [ln for ln in out.splitlines() if "profile_ncu.py --ncu" in ln]
        (selftest,) = [ln for ln in out.splitlines() if "ncu_selftest.py" in ln]
        return capture[: capture.index(" -- python")], selftest

    assert not any("--timeout" in cmd for cmd in commands())  # each stage's own default
    lease = tmp_path / "lease.yaml"
    lease.write_text("ncu: {pass_timeout_s: 420}\n")
    for cmd in commands("--configfile", str(lease)):
        assert "--timeout 420 " in cmd, cmd
    lease.write_text("ncu: {pass_timeout_s: 0}\n")
    bad = snakemake(tmp_path, *dry, "--configfile", str(lease), env_extra=fake, check=False)
    assert bad.returncode != 0 and "ncu.pass_timeout_s: bad value 0" in bad.stdout + bad.stderr


@pytest.mark.workflow
def test_dry_run_on_a_cpu_machine_has_the_page_and_plots_for_copied_captures(tmp_path):
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "config.yaml").write_text(yaml.safe_dump(DAG_CONFIG))
    counts = job_counts(snakemake(tmp_path, "-n", "--cores", "2", "--quiet", "rules").stdout)
    assert "ncu" not in counts and "plot_kernel_roofline" not in counts
    assert "plot_hierarchical_roofline" not in counts
    assert counts["ncu_vs_analytic"] == 1  # the page says there is no ncu data
    # Results copied in from an L4 machine: its ceilings and two ncu captures.
    env = tmp_path / "results" / "gcp_l4"
    _write(env / "ceilings.json", dict(CEILINGS, env="gcp_l4"))
    _write(env / "env_info.json", {"env": "gcp_l4", "device": "cuda"})
    _write(env / "ncu" / "gcp_l4_resnet18_amp_bs4.json", {"kernels": []})
    _write(env / "ncu" / "gcp_l4_mobilenet_v2_fp32_bs8.json", {"kernels": []})
    _write(env / "ncu" / "not_a_config.json", {"kernels": []})
    out = snakemake(tmp_path, "-n", "-p", "--cores", "2").stdout
    counts = job_counts(out)
    assert counts["plot_kernel_roofline"] == 2 and counts["plot_hierarchical_roofline"] == 2
    assert "ncu" not in counts  # nothing is profiled on this machine
    (page_cmd,) = [ln for ln in out.splitlines() if "write_ncu_comparison.py" in ln]
    assert "results/gcp_l4/ncu/gcp_l4_resnet18_amp_bs4.json" in page_cmd
    envs = re.search(r"--envs (.*?) --out", page_cmd).group(1).split()
    assert sorted(envs) == ["gcp_l4", "local"]
    assert "results/plots/kernels/roofline_kernels_gcp_l4_resnet18_amp_bs4.png" in out
    assert "results/plots/kernels/roofline_hierarchical_gcp_l4_mobilenet_v2_fp32_bs8.svg" in out


@pytest.mark.workflow
def test_dry_run_of_the_h100_example_profiles_one_batch_per_model_and_precision(tmp_path):
    # config/examples/h100.yaml: resnet50 at its own batch sizes, ncu at one batch each,
    # run as its header says: in place of config/config.yaml, whose `local` env is left out
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "config.yaml").write_text((ROOT / "config" / "config.yaml").read_text())
    example = ["--configfile", str(ROOT / "config" / "examples" / "h100.yaml")]
    fake = FAKE_CUDA
    dry = ["-n", "--cores", "2", "--quiet", "rules", *example]
    alone = snakemake(tmp_path, *dry, "--replace-workflow-config", env_extra=fake)
    counts = job_counts(alone.stdout)
    assert counts["env_info"] == 1  # h100 alone
    assert job_counts(snakemake(tmp_path, *dry, env_extra=fake).stdout)["env_info"] == 2  # merged
    configs = 4 * (2 + 1 + 1)  # precisions x (resnet50 at 64 and 256, resnet18, mobilenet_v2)
    assert counts["train"] == configs * 3
    assert counts["complexity"] == 4  # (model, batch): resnet50 x 2, resnet18, mobilenet_v2
    assert counts["ncu"] == 4 * 3  # precisions x models, each at one batch size (not 4 x 4)
    assert counts["plot_kernel_roofline"] == 4 * 3
    # Channels-last with cuDNN autotuning, as tuned GPU training runs (the GPU table's
    # resnet50 amp bs256 row comes from this study), timed runs and captures alike.
    run = "results/h100/runs/h100_resnet50_amp_bs256_run1.json"
    cmd = snakemake(tmp_path, "-n", "-p", "--cores", "2", run, *example, env_extra=fake).stdout
    (driver,) = [ln for ln in cmd.splitlines() if "run_train.py" in ln]
    assert "--channels-last" in driver and "--no-cudnn-benchmark" not in driver


def test_gpu_check_measures_the_roofs_and_self_test_in_all_four_precisions(tmp_path):
    # its runs are amp and bf16; its ceilings and counter self-test cover fp32 and tf32 too
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "config.yaml").write_text((ROOT / "config" / "config.yaml").read_text())
    check = ["--configfile", str(ROOT / "config" / "gpu_check.yaml")]
    fake = FAKE_CUDA
    targets = ["results/local/ceilings.json", "results/local/ncu/selftest.json"]
    cmd = snakemake(tmp_path, "-n", "-p", "--cores", "2", *targets, *check, env_extra=fake).stdout
    for script in ("ceilings.py", "ncu_selftest.py"):
        (line,) = [ln for ln in cmd.splitlines() if f"{script} " in ln and "--precisions" in ln]
        assert "--precisions amp bf16 fp32 tf32 " in line, line


# --------------------------------------------------------------------------- legibility

H100_DATASHEET = {"fp32": 67e12, "tf32": 495e12, "amp": 989e12, "bf16": 989e12}
H100_MEASURED = {"fp32": 51e12, "tf32": 378e12, "amp": 720e12, "bf16": 760e12}
H100_CEILINGS = {
    "env": "h100",
    "roofs": [
        *(roof("compute", p, "datasheet", v) for p, v in H100_DATASHEET.items()),
        *(roof("compute", p, "measured", v) for p, v in H100_MEASURED.items()),
        roof("memory", None, "datasheet", 3.35e12),
        roof("memory", None, "measured", 3.0e12),
    ],
}


def test_kernel_plot_labels_clear_each_other_and_the_kernels(monkeypatch, h100):
    # an H100's eight compute roofs (two pairs of them equal), and the step's largest
    # kernel (83% of its time, a large bubble) right under their labels at AI ~1000
    fig = drawn_figure(
        monkeypatch,
        kernel_plots,
        plot_kernels,
        kernel_points(h100),
        level_roofs(H100_CEILINGS),
        "h100",
        "bf16",
        None,
        None,
        "t",
    )
    assert label_clashes(fig, r"kernel-\d+") == []
    assert fig.axes[0].get_xlim()[1] > 1e4  # the axis made room right of the bubble


def test_hierarchical_plot_labels_clear_each_other_and_the_levels(monkeypatch, h100):
    # the capture's own DRAM roof (ncu-derived) equals the datasheet's 3.35 TB/s: their
    # labels lie side by side, not one over the other
    derived = {"dram": 3.35e12, "l2": 8.99e12, "l1": 29.7e12}  # an H100's, as ncu reads them
    capture = {"memory_roofs": {lv: {"bytes_per_s": v} for lv, v in derived.items()}}
    roofs = with_ncu_memory_roofs(level_roofs(H100_CEILINGS), capture)
    point = hierarchical_point(h100, 0.0007, "h100", "resnet18", "bf16", 2)
    fig = drawn_figure(monkeypatch, kernel_plots, plot_hierarchical, point, roofs, None, None)
    assert label_clashes(fig, r"point-.*-(l1|l2|dram)") == []
