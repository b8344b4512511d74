"""The hierarchical roofline's memory levels (issue 26, part 1): ncu's own chart
counters, and no L1 point where wgmma kernels do most of the FLOPs.

Built on the committed H100 captures in examples/h100/results/h100/ncu/: the parsed
JSONs (made before the wgmma and chart counters existed) and the kernel-pass CSVs
(gzipped), which hold the per-kernel GMMA instruction counts.
"""

from __future__ import annotations

import gzip
import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pandas as pd
import pytest

from dnnroofline.ncu.command import STEP_METRICS, combine_passes, step_metrics_for_arch
from dnnroofline.ncu.hierarchy import (
    counters_for,
    section_counters,
    step_levels,
    table_counters,
)
from dnnroofline.ncu.kernels import (
    NCU_THEORETICAL,
    hierarchical_point,
    level_roofs,
    step_time,
    with_ncu_memory_roofs,
)
from dnnroofline.ncu.parse import parse_ncu_text
from dnnroofline.ncu.run_ncu import _hierarchy_counters, section_files
from dnnroofline.plots.kernels import plot_hierarchical

ROOT = Path(__file__).resolve().parents[1]
H100 = ROOT / "examples" / "h100"
NCU = H100 / "results" / "h100" / "ncu"
HALF = ("resnet18_amp_bs128", "resnet18_bf16_bs128", "resnet50_amp_bs256", "resnet50_bf16_bs256")


def committed(stem: str) -> dict:
    return json.loads((NCU / f"h100_{stem}.json").read_text())


def point_of(ncu: dict, stem: str):
    model, precision, batch = stem.split("_")
    points = pd.read_csv(H100 / "roofline_points.csv")
    step = step_time(points, "h100", model, precision, int(batch[2:]))
    assert step is not None, stem
    return hierarchical_point(ncu, step, "h100", model, precision, int(batch[2:]))


def svg_ids(path: Path) -> list[str]:
    return [el.get("id") for el in ET.parse(path).getroot().iter() if el.get("id")]


@pytest.fixture(scope="module")
def kernel_pass():
    """The committed kernel-pass CSVs of resnet50 amp and resnet18 fp32, parsed now."""
    return {
        stem: parse_ncu_text(gzip.decompress((NCU / f"h100_{stem}.csv.gz").read_bytes()).decode())
        for stem in ("resnet50_amp_bs256", "resnet18_fp32_bs128")
    }


# --------------------------------------------------------------------------- committed captures


@pytest.mark.parametrize("stem", HALF)
def test_committed_half_precision_captures_have_no_l1_point(stem):
    # Re-parsed with per-kernel wgmma counts: judged by the wgmma kernels' FLOP share.
    # L2 (lts__t_bytes sees TMA's loads) and DRAM stay.
    p = point_of(committed(stem), stem)
    assert p.ai["l1"] is None and p.bytes["l1"] is None
    assert "wgmma kernels: TMA fills shared memory" in p.unmeasurable["l1"]
    assert p.ai["l2"] is not None and p.ai["dram"] is not None


@pytest.mark.parametrize("stem", HALF)
def test_a_capture_parsed_before_wgmma_counts_is_judged_by_its_tensor_share(stem):
    # As the GPU run wrote them: no totals.wgmma. The tensor share of a CC 9.0 capture
    # (97-99% here) stands in.
    old = {**committed(stem)}
    old["totals"] = {k: v for k, v in old["totals"].items() if k != "wgmma"}
    p = point_of(old, stem)
    assert p.ai["l1"] is None
    assert "tensor cores of a CC 9.0 GPU" in p.unmeasurable["l1"]
    assert "wgmma reads its operands there" in p.unmeasurable["l1"]
    assert 0 < p.ai["l2"] < p.ai["dram"]
    assert p.counters["l2"] == "lts__t_bytes (all L2 requests)"


def test_committed_fp32_capture_keeps_all_three_levels_in_order():
    p = point_of(committed("resnet18_fp32_bs128"), "resnet18_fp32_bs128")
    assert p.unmeasurable == {}
    t = committed("resnet18_fp32_bs128")["totals"]
    assert p.ai["l1"] == pytest.approx(t["flop"]["total"] / t["bytes"]["l1"])
    assert p.ai["l1"] < p.ai["l2"] < p.ai["dram"]  # 5.76 < 8.57 < 22.1
    assert p.counters["l1"] == "l1tex__t_bytes (tag stage)"


def test_kernel_pass_names_the_wgmma_kernels_and_their_share(kernel_pass):
    # The committed kernel-pass CSV counts GMMA instructions per kernel: 151 kernels ran
    # wgmma, with 92% of the FLOPs, 80.7 GB through lts__t_bytes but 0.50 GB through
    # l1tex__t_bytes: their operands bypass the L1 counters.
    amp = kernel_pass["resnet50_amp_bs256"]
    wgmma = amp["totals"]["wgmma"]
    assert wgmma == {"kernels": 151, "flop": 5_930_491_531_264}
    assert wgmma["flop"] / amp["totals"]["flop"]["total"] == pytest.approx(0.9218, abs=1e-4)
    ks = [k for k in amp["kernels"] if k["wgmma"]]
    assert sum(k["bytes"]["l2"] for k in ks) == 80_697_368_128
    assert sum(k["bytes"]["l1"] for k in ks) == 502_949_280
    assert all(k["wgmma"] is not None for k in amp["kernels"])
    assert kernel_pass["resnet18_fp32_bs128"]["totals"]["wgmma"] == {"kernels": 0, "flop": 0}


def test_per_kernel_wgmma_counts_decide_the_l1_level(kernel_pass):
    # The committed step pass with the re-parsed kernel pass: the reason now names the
    # wgmma kernels; the SIMT fp32 step keeps its L1 level.
    for stem, want in (("resnet50_amp_bs256", True), ("resnet18_fp32_bs128", False)):
        step = committed(stem)  # its totals.bytes and memory_roofs are the step pass's
        ncu = {"status": "ok", **combine_passes(kernel_pass[stem], step)}
        p = point_of(ncu, stem)
        assert ("l1" in p.unmeasurable) is want, stem
    assert p.ai["l1"] is not None
    amp = combine_passes(kernel_pass["resnet50_amp_bs256"], committed("resnet50_amp_bs256"))
    assert (
        point_of(amp, "resnet50_amp_bs256")
        .unmeasurable["l1"]
        .startswith("92% of the FLOPs are in 151 wgmma kernels: TMA fills shared memory")
    )


def test_plot_of_the_committed_amp_capture_says_l1_is_not_measurable(tmp_path):
    ceilings = json.loads((H100 / "results" / "h100" / "ceilings.json").read_text())
    ncu = committed("resnet50_amp_bs256")
    roofs = with_ncu_memory_roofs(level_roofs(ceilings), ncu)
    svg = tmp_path / "h.svg"
    info = plot_hierarchical(point_of(ncu, "resnet50_amp_bs256"), roofs, tmp_path / "h.png", svg)
    ids = svg_ids(svg)
    tag = "h100-resnet50-amp-bs256"
    assert info["levels"] == ["l2", "dram"] and info["points"] == 2
    assert f"point-{tag}-l1" not in ids and f"unmeasurable-{tag}-l1" in ids
    assert not [i for i in ids if i.startswith("roof-h100-memory-l1-")]  # no roof to hold it to
    assert f"roof-h100-memory-l2-{NCU_THEORETICAL}" in ids
    text = svg.read_text()
    assert "L1: not measurable by counters" in text
    assert "DRAM datasheet figure (ncu: bus width x memory clock)" in text
    # the committed capture's L2 roof is lts__t_bytes' peak, not the chart's crossbar
    assert "lts__t_bytes.sum.peak_sustained" in text
    assert "(not ncu's hierarchical-chart counter)" in text
    assert "ncu-derived" not in text


def test_ncus_dram_peak_is_the_datasheet_figure():
    # 1280 B per DRAM cycle x 2.619 GHz = 3.352 TB/s: the H100 SXM datasheet's 3.35 TB/s
    ceilings = json.loads((H100 / "results" / "h100" / "ceilings.json").read_text())
    datasheet = [
        r["value"]
        for r in ceilings["roofs"]
        if r["kind"] == "memory" and r["source"] == "datasheet"
    ]
    roofs = with_ncu_memory_roofs(level_roofs(ceilings), committed("resnet50_amp_bs256"))
    assert roofs.memory["dram"][NCU_THEORETICAL] == pytest.approx(datasheet[0], rel=1e-3)
    assert "bus width x memory clock, the datasheet figure" in roofs.notes["dram:ncu-theoretical"]


# --------------------------------------------------------------------------- new counters


def _raw(cols: dict[str, tuple[str, str]], name: str = "k") -> str:
    head = ["ID", "Kernel Name", "CC", *cols]
    units = ["", "", "", *(u for u, _ in cols.values())]
    row = ["0", name, "9.0", *(v for _, v in cols.values())]
    return "\n".join(",".join(f'"{c}"' for c in line) for line in (head, units, row)) + "\n"


STEP_CSV = _raw(
    {
        "dram__bytes.sum": ("byte", "1000000"),
        "lts__t_bytes.sum": ("byte", "9000000"),
        "l1tex__t_bytes.sum": ("byte", "100000"),
        "l1tex__lsu_writeback_active_mem_lgds.sum": ("cycle", "20000"),
        "l1tex__lsu_writeback_active_mem_lgds.sum.peak_sustained": ("cycle", "132"),
        "l1tex__cycles_elapsed.avg.per_second": ("cycle/second", "2000000000"),
        "l1tex__t_bytes.sum.peak_sustained": ("byte/cycle", "67584"),
        "lts__lts2xbar_cycles_active.sum": ("cycle", "100000"),
        "lts__lts2xbar_cycles_active.sum.peak_sustained": ("cycle", "96"),
        "lts__t_bytes.sum.peak_sustained": ("byte/cycle", "7680"),
        "lts__cycles_elapsed.avg.per_second": ("cycle/second", "1700000000"),
    },
    "step",
)
KERNEL_CSV = _raw(
    {
        "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum": ("inst", "5000000"),
        "sm__sass_data_bytes_mem_shared.sum": ("byte", "640000"),
        "sm__inst_executed_pipe_tensor_op_gmma.sum": ("inst", "0"),
        "dram__bytes.sum": ("byte", "1100000"),
    }
)


def test_the_charts_counters_give_l1_l2_bytes_and_their_roofs():
    step = parse_ncu_text(STEP_CSV)
    b = step["totals"]["bytes"]
    assert b["l1_writeback"] == 20000 * 128 and b["l2_xbar"] == 100000 * 32
    roofs = step["memory_roofs"]
    assert roofs["l1"]["bytes_per_s"] == pytest.approx(132 * 128 * 2e9)  # not l1tex__t's peak
    assert roofs["l2"]["bytes_per_s"] == pytest.approx(96 * 32 * 1.7e9)
    assert roofs["l1"]["ncu_chart"] and roofs["l2"]["ncu_chart"]
    assert roofs["l2"]["metrics"][0] == "lts__lts2xbar_cycles_active.sum.peak_sustained x 32"
    # shared bytes (SASS-patched) and the wgmma count come from the kernel pass
    ncu = {"status": "ok", **combine_passes(parse_ncu_text(KERNEL_CSV), step)}
    assert ncu["totals"]["bytes"]["shared"] == 640000
    assert ncu["totals"]["wgmma"] == {"kernels": 0, "flop": 0}
    levels = step_levels(ncu)
    assert levels["l1"].bytes == 20000 * 128 + 640000
    assert levels["l1"].counters == "LSU writeback x 128 B + sm__sass_data_bytes_mem_shared"
    assert levels["l2"].bytes == 100000 * 32
    assert levels["l2"].counters == "L2-to-SM crossbar x 32 B"
    assert levels["l1"].unmeasurable is None


def test_step_pass_asks_for_the_charts_counters():
    h100 = step_metrics_for_arch("9.0")
    assert h100[: len(STEP_METRICS)] == list(STEP_METRICS)
    assert "l1tex__lsu_writeback_active_mem_lgds.sum" in h100
    assert "lts__lts2xbar_cycles_active.sum.peak_sustained" in h100
    assert "l1tex__lsu_writeback_active_mem_lg.sum" in step_metrics_for_arch("8.0")
    assert "l1tex__lsu_writeback_active.sum" in step_metrics_for_arch("7.0")


# An abridged section in the shape of Nsight Compute 2025.3.1's
# SpeedOfLight_HierarchicalHalfRooflineChart.section (its Metrics and MetricDefinitions).
SECTION = """
Identifier: "SpeedOfLight_HierarchicalHalfRooflineChart"
Metrics {
 Metrics {
   Label: "L1/TEX active writeback cycles per second"
   Name: "l1tex__lsu_writeback_active.sum.per_second"
   Filter { MaxArch: CC_72 }
 }
 Metrics {
   Label: "L1/TEX active local/global writeback cycles per second"
   Name: "l1tex__lsu_writeback_active_mem_lg.sum.per_second"
   Filter { MinArch: CC_75 MaxArch: CC_89 }
   Options { Name: "l1tex__lsu_writeback_active_mem_lgds.sum.per_second" Filter { MinArch: CC_90 } }
 }
 Metrics { Name: "lts__lts2xbar_cycles_active.sum.per_second" }
}
MetricDefinitions {
  MetricDefinitions {
    Name: "derived__l1tex__lsu_writeback_bytes_mem_lg.sum.per_second"
    Expression: "l1tex__lsu_writeback_active_mem_lg.sum.per_second * 128"
    Filter { MinArch: CC_75 MaxArch: CC_89 }
  }
  MetricDefinitions {
    Name: "derived__l1tex__lsu_writeback_bytes_mem_lgds.sum.per_second"
    Expression: "l1tex__lsu_writeback_active_mem_lgds.sum.per_second * 128"
    Filter { MinArch: CC_90 }
  }
  MetricDefinitions {
    Name: "derived__lts__lts2xbar_bytes.sum.per_second"
    Expression: "lts__lts2xbar_cycles_active.sum.per_second * 32"
  }
}
"""


def test_the_installed_ncus_section_files_choose_the_counters(tmp_path):
    texts = {"Half.section": SECTION}
    for cc in ((8, 6), (9, 0)):
        found = section_counters(texts, cc)
        assert found is not None
        assert (found.l1, found.l2) == (table_counters(cc).l1, table_counters(cc).l2)
        assert (found.l1_bytes_per_cycle, found.l2_bytes_per_cycle) == (128, 32)
    assert section_counters(texts, (7, 2)) is None  # this abridged file defines no x128 there
    # a section that multiplies by something else is not what the parser reads: table used
    odd, notes = counters_for((9, 0), {"x.section": SECTION.replace("* 32", "* 64")})
    assert odd.source.startswith("table") and "x 64" in notes[0]
    # the capture finds sections/ beside the executable and records its choice
    (tmp_path / "sections").mkdir()
    (tmp_path / "sections" / "SpeedOfLight_HierarchicalHalfRooflineChart.section").write_text(
        SECTION
    )
    (tmp_path / "ncu").write_text("#!/bin/sh\n")
    assert list(section_files(str(tmp_path / "ncu"))) == [
        str(tmp_path / "sections" / "SpeedOfLight_HierarchicalHalfRooflineChart.section")
    ]
    info: dict = {}
    counters = _hierarchy_counters(str(tmp_path / "ncu"), "9.0", info)
    assert counters.l1 == "l1tex__lsu_writeback_active_mem_lgds.sum"
    assert info["hierarchy_counters"]["source"].endswith("HalfRooflineChart.section")
    assert step_metrics_for_arch("9.0", counters) == step_metrics_for_arch("9.0")
    none, notes = counters_for((9, 0), {})
    assert none.source == "table (Nsight Compute 2025.3.1 section files)"
    assert notes == [
        "hierarchical-roofline counters from the table (Nsight Compute 2025.3.1 section "
        "files): no hierarchical section file found"
    ]
