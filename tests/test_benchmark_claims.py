"""BENCHMARKS.md's tables of the sweep's coverage and of page faults are their files'."""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


def section(title_start: str) -> str:
    text = (ROOT / "BENCHMARKS.md").read_text()
    start = text.index(f"## {title_start}")
    end = text.find("\n## ", start + 3)
    return " ".join(text[start : end if end > 0 else None].split())  # one line: prose wraps


def test_the_sweep_coverage_table_is_sweep_coverage_json():
    data = json.loads((RESULTS / "sweep_coverage.json").read_text())
    rounds = {(e["arm"], e["round"]): e for e in data["rounds"]}
    order = [("before", 1), ("before", 2), ("after", 1), ("after", 2)]
    text = section("The sweep covers a network's last stages")

    def methods(study: str, arm: tuple) -> dict:
        return {s["method"]: s for s in rounds[arm]["studies"][study]}

    for study, points in (("zoo", 24), ("holdout", 14)):
        model = [methods(study, a)["model"] for a in order]
        loo = [methods(study, a)["model_loo"] for a in order]
        assert {m["n"] for m in model} == {points}
        mape = " | ".join(f"{m['mape_pct']:.1f}%" for m in model)
        assert f"| {study} ({points} points): model MAPE | {mape} |" in text
        assert f"| {study}: model max | " + " | ".join(
            f"{m['max_abs_error_pct']:.1f}%" for m in model) + " |" in text  # fmt: skip
        assert f"| {study}: model_loo MAPE | " + " | ".join(
            f"{m['mape_pct']:.1f}%" for m in loo) + " |" in text  # fmt: skip
    walls = " | ".join(f"{rounds[a]['sweep_wall_s']:.1f} s" for a in order)
    assert f"| sweep's wall time | {walls} |" in text
    assert {sum(rounds[a]["rows"].values()) for a in order} == {356, 444}
    assert f"{data['held_out_rows']:,} conv, batch-norm and GEMM" in text
    assert data["holdout_models"] == [
        "mobilenet_v3_large", "regnet_y_400mf", "mnasnet1_0", "shufflenet_v2_x0_5",
        "efficientnet_b1", "resnet34", "squeezenet1_0",
    ]  # fmt: skip
    dw = [rounds[a]["tables_on_held_out"]["conv_depthwise_bwd"]["sum_error_pct"] for a in order]
    assert [f"{v:+.0f}" for v in dw] == ["-28", "-25", "-15", "+10"]


def test_the_page_faults_table_is_page_faults_json():
    data = json.loads((RESULTS / "page_faults.json").read_text())
    text = section("CPU steps that fault in their memory every step")
    median = data["median"]
    for config, arms in median.items():
        base = arms["default"]
        row = (
            f"| {config} | {base['step_s'] * 1e3:.1f} ms | {base['fault_mib_per_step']:.1f} MiB "
            f"| {arms['trim']['step_s'] / base['step_s'] - 1:+.1%} "
            f"| {arms['trim+mmap']['step_s'] / base['step_s'] - 1:+.1%} "
            f"| {arms['trim+mmap']['fault_mib_per_step']:.1f} MiB |"
        ).replace("-", "−")  # BENCHMARKS.md's minus sign
        assert row in text, row
    # every run of both thresholds faulted in under 1 MiB a step; the trim alone, far more
    kept = [r for r in data["runs"] if r["arm"] == "trim+mmap"]
    assert kept and max(r["fault_mib_per_step"] for r in kept) < 1.0
    worst = max(a["trim"]["step_s"] / a["default"]["step_s"] for a in median.values())
    assert f"up to {worst:.2f} times" in text
    resnet50 = median["resnet50 128 px"]["trim"]["fault_mib_per_step"]
    assert f"{resnet50:,.0f} MiB a step for resnet50 at 128 px" in text
    mobilenet = [r for r in data["runs"] if (r["model"], r["image_size"]) == ("mobilenet_v2", 64)]
    by = {(r["round"], r["arm"]): r["step_s"] for r in mobilenet}
    slower = [by[(n, "trim+mmap")] / by[(n, "default")] - 1 for n in (1, 2)]
    assert f"(+{slower[0]:.0%} and +{slower[1]:.0%})" in text
