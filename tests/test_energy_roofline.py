"""The energy roofline (issue 40, item 4): each env's fitted costs as roofs (Choi et al.
2013), each point's FLOP/J over the median joules of its ok runs, and a figure that says
why where there is no energy data. Fixtures: tests/energy_fixtures.py."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest
from energy_fixtures import COSTS_REASON, RAPL_REASON, ceilings, metrics, points

import plot_energy_roofline as cli
from dnnroofline.aggregate.energy_points import (
    ceilings_reason,
    energy_costs,
    point_energy,
    runs_reason,
)
from dnnroofline.plots.energy_roofline import NO_DATA, energy_roofline_data, plot_energy_roofline

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_the_roofs_of_one_pj_per_flop_and_ten_pj_per_byte():
    costs = energy_costs("gpu", ceilings()["gpu"])
    assert costs.compute_roof("fp32") == pytest.approx(1e12)  # 1/(1 pJ) FLOP/J
    assert costs.compute_roof("fp16") == pytest.approx(4e12)
    assert costs.memory_roof(10.0) == pytest.approx(1e12)  # 10 FLOP/B / 10 pJ/B
    assert costs.balance("fp32") == pytest.approx(10.0)
    assert costs.balance("fp16") == pytest.approx(40.0)
    assert costs.static_power_w == 50.0


def test_the_combined_curve_pays_for_both_costs():
    costs = energy_costs("gpu", ceilings()["gpu"])
    # at the balance point each FLOP costs 1 pJ and 1 pJ of bytes: half the compute roof
    assert costs.combined("fp32", 10.0) == pytest.approx(5e11)
    curve = costs.combined("fp32", [1.0, 1e6])
    assert curve[0] == pytest.approx(1 / (1e-12 + 1e-11))  # near the memory roof
    assert curve[1] == pytest.approx(1e12, rel=1e-4)  # under the compute roof
    assert all(costs.combined("fp32", [1.0, 10.0, 100.0]) < [1e11, 1e12, 1e12])


def test_a_cost_fitted_to_zero_draws_no_roof():
    ceil = ceilings()["gpu"]
    ceil["energy"]["costs"]["pj_per_flop"] = {"fp32": 0.0, "fp16": 0.5}
    costs = energy_costs("gpu", ceil)
    assert costs.compute_roof("fp32") is None
    assert costs.combined("fp32", 10.0) == pytest.approx(1e12)  # the memory roof alone
    ceil["energy"]["costs"] = {
        "pj_per_flop": {"fp32": 0.0},
        "pj_per_byte": 0.0,
        "static_power_w": 0,
    }
    assert energy_costs("gpu", ceil) is None


def test_a_points_flop_per_joule_is_its_flops_over_the_median_joules_of_its_ok_runs():
    pts = point_energy(points(), metrics())
    assert list(pts["env"]) == ["gpu", "gpu"]  # cpu: no joules
    bs8, bs16 = pts.itertuples(index=False)
    assert (bs8.batch_size, bs8.joules_per_step, bs8.runs_with_energy) == (8, 5.0, 3)
    assert bs8.flop_per_joule == pytest.approx(2e12 / 5.0)
    # the oom run's 1000 J never counts: median of 8 and 12
    assert (bs16.joules_per_step, bs16.runs_with_energy) == (10.0, 2)
    assert bs16.flop_per_joule == pytest.approx(5e11)


def test_the_data_has_a_roof_per_env_and_precision():
    data = energy_roofline_data(ceilings(), points(), metrics())
    roofs = data["roofs"].set_index(["env", "precision"])
    assert list(roofs.index) == [("gpu", "fp16"), ("gpu", "fp32")]
    assert roofs.loc[("gpu", "fp32"), "compute_flop_per_joule"] == pytest.approx(1e12)
    assert roofs.loc[("gpu", "fp32"), "memory_flop_per_joule_per_ai"] == pytest.approx(1e11)
    assert roofs.loc[("gpu", "fp16"), "ridge_ai"] == pytest.approx(40.0)
    cpu = next(e for e in data["envs"] if e.env == "cpu")
    assert cpu.costs is None and RAPL_REASON in cpu.reason
    assert cpu.runs_reason == "its runs recorded energy as unavailable"


def test_each_reason_an_env_has_no_energy():
    assert ceilings_reason(None) == "no ceilings.json"
    assert "no energy record" in ceilings_reason({"env": "old", "roofs": []})
    assert ceilings_reason(ceilings()["cpu"]) == f"energy unavailable: {RAPL_REASON}"
    no_fit = ceilings()["gpu"]
    no_fit["energy"] |= {"costs": None, "costs_reason": COSTS_REASON}
    assert ceilings_reason(no_fit) == f"no costs fitted: {COSTS_REASON}"
    assert ceilings_reason(ceilings()["gpu"]) is None
    old = metrics().drop(columns=["joules_per_step", "energy_source"])
    assert "no energy columns" in runs_reason("gpu", old)
    assert runs_reason("gpu", metrics()) is None
    before = metrics().assign(joules_per_step=math.nan, energy_source="")
    assert runs_reason("gpu", before) == "its runs were recorded before energy was"
    assert runs_reason("nowhere", metrics()) == "no successful runs"


def test_the_figure_draws_roofs_curves_and_points_and_names_what_it_left_out(tmp_path):
    png, svg = tmp_path / "e.png", tmp_path / "e.svg"
    info = plot_energy_roofline(ceilings(), points(), metrics(), png, svg)
    assert info["points"] == 2 and info["roofs"] == 2
    assert info["left_out"] == [
        f"cpu: energy unavailable: {RAPL_REASON}; its runs recorded energy as unavailable"
    ]
    assert png.read_bytes().startswith(PNG_MAGIC)
    text = svg.read_text()
    for gid in (
        "energy-roof-gpu-compute-fp32",
        "energy-roof-gpu-compute-fp16",
        "energy-roof-gpu-memory",
        "energy-combined-gpu-fp32",
        "point-gpu-resnet18-fp32-bs8",
        "point-gpu-resnet18-fp32-bs16",
        "energy-note",
    ):
        assert f'id="{gid}"' in text, gid
    assert "point-cpu" not in text
    assert "gpu fp32: 1.00 pJ/FLOP" in text and "gpu DRAM: 10.0 pJ/B" in text
    assert RAPL_REASON in text and "bs16" in text
    # reproducible: the same data draws the same SVG
    plot_energy_roofline(ceilings(), points(), metrics(), None, tmp_path / "again.svg")
    assert (tmp_path / "again.svg").read_text() == text


def test_without_energy_data_the_figure_says_so_and_why(tmp_path):
    cpu = {"cpu": ceilings()["cpu"], "old": {"env": "old", "roofs": []}}
    m = metrics()
    m = m[m["env"] == "cpu"]
    info = plot_energy_roofline(cpu, points(), m, tmp_path / "n.png", tmp_path / "n.svg")
    assert info["points"] == 0 and info["roofs"] == 0
    text = (tmp_path / "n.svg").read_text()
    assert 'id="no-energy-data"' in text and NO_DATA in text
    assert f"cpu: energy unavailable: {RAPL_REASON}" in text
    assert "old: its ceilings.json has no energy record" in text
    assert "energy-roof" not in text


def test_the_entry_script_reads_the_ledgers_and_writes_both_formats(tmp_path, capsys):
    paths = []
    for env, doc in ceilings().items():
        (tmp_path / env).mkdir()
        paths.append(tmp_path / env / "ceilings.json")
        paths[-1].write_text(json.dumps(doc))
    metrics().to_csv(tmp_path / "metrics.csv", index=False)
    points().to_csv(tmp_path / "points.csv", index=False)
    out = tmp_path / "plots"
    argv = ["--metrics", tmp_path / "metrics.csv", "--points", tmp_path / "points.csv",
            "--ceilings", *paths, "--png", out / "e.png", "--svg", out / "e.svg"]  # fmt: skip
    assert cli.main([str(a) for a in argv]) == 0
    assert (out / "e.png").read_bytes().startswith(PNG_MAGIC)
    assert 'id="point-gpu-resnet18-fp32-bs8"' in (out / "e.svg").read_text()
    err = capsys.readouterr().err
    assert "2 points" in err and f"not drawn: cpu: energy unavailable: {RAPL_REASON}" in err
    (tmp_path / "bad.csv").write_text('"unclosed\n')
    argv[1] = tmp_path / "bad.csv"
    assert cli.main([str(a) for a in argv]) == 2


def test_old_metrics_without_energy_columns_give_no_points():
    old = metrics().drop(columns=["joules_per_step", "joules_per_image", "energy_source"])
    assert point_energy(points(), old).empty
    assert point_energy(pd.DataFrame(), metrics()).empty
