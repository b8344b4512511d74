"""The report's energy page (issue 40, item 4): per env where its joules came from or why
none, each point's energy beside its images/s, the ceilings' fitted costs and kernels,
the energy roofline inline and, where the model predicted them, J/image predicted against
measured. Fixtures: tests/energy_fixtures.py."""

from __future__ import annotations

import pandas as pd
import pytest
from energy_fixtures import RAPL_REASON, ceilings, metrics, runs
from report_fixtures import table_row

from dnnroofline.report.energy import energy_section, facts, prediction_rows
from dnnroofline.report.sections import all_sections

SVG = '<svg xmlns="http://www.w3.org/2000/svg"><g id="energy-roof-gpu-memory"/></svg>'


def check(**energy) -> pd.DataFrame:
    row = {"env": "gpu", "model": "resnet18", "precision": "fp32", "batch": 8}
    return pd.DataFrame(
        [
            {**row, "method": "model", "error_pct": 5.0, **energy},
            {**row, "method": "roofline_measured", "error_pct": -40.0},
        ]
    )


@pytest.fixture
def page() -> str:
    energy = {"predicted_joules_per_image": 0.5, "measured_joules_per_image": 0.625,
              "joules_per_image_error_pct": -20.0}  # fmt: skip
    return energy_section(metrics(), ceilings(), runs(), check(**energy), SVG)


def h2_block(html: str, heading: str) -> str:
    start = html.index(f"<h2>{heading}</h2>")
    end = html.find("<h2>", start + 4)
    return html[start : end if end > 0 else None]


def test_each_points_energy_beside_its_images_per_s(page):
    gpu = h2_block(page, "gpu")
    assert "Runs' joules from nvml (<code>nvmlDeviceGetTotalEnergyConsumption</code>)" in gpu
    # bs8: 4, 5, 6 J per step -> 5 J, 0.625 J/image, 50 W; peak 1.5x the highest; 1980 MHz
    table_row(gpu, "resnet18", "fp32", "8", "3", "80.0 img/s", "0.625", "5.00", "50.0", "90.0",
              "1,980")  # fmt: skip
    # bs16: the oom run's 1000 J is not a run that counts
    table_row(gpu, "resnet18", "fp32", "16", "2", "160 img/s", "0.625", "10.0", "100", "180",
              "1,755")  # fmt: skip


def test_the_ceilings_fitted_costs_and_their_kernels(page):
    gpu = h2_block(page, "gpu")
    assert "Ceilings' joules from nvml, each kernel timed over 2.00 s." in gpu
    table_row(gpu, "pJ/FLOP, fp32", "1.00")
    table_row(gpu, "pJ/FLOP, fp16", "0.250")
    table_row(gpu, "pJ/B (DRAM)", "10.0")
    table_row(gpu, "static power (W)", "50.0")
    table_row(gpu, "max residual (%)", "3.25")
    assert "Fitted by nnls over 3 kernels." in gpu
    table_row(gpu, "gemm", "fp32", "torch.mm 8192", "100,000 GFLOP", "805 MB", "2.00", "90")
    table_row(gpu, "idle", "–", "sleep")


def test_an_env_without_energy_says_why(page):
    cpu = h2_block(page, "cpu")
    assert "No joules from its runs: its runs recorded energy as unavailable." in cpu
    assert f"<li>{RAPL_REASON}</li>" in cpu  # what the runs said
    assert f"No energy costs: energy unavailable: {RAPL_REASON}." in cpu
    assert "<table>" not in cpu


def test_the_energy_roofline_is_inline(page):
    assert '<img src="data:image/svg+xml;base64,' in h2_block(page, "Energy roofline")
    no_svg = energy_section(metrics(), ceilings(), runs())
    assert "No energy roofline given (results/plots/energy_roofline.svg)." in no_svg


def test_predicted_against_measured_joules_per_image(page):
    table = h2_block(page, "Predicted against measured J/image")
    table_row(table, "gpu", "resnet18", "fp32", "8", "model", "0.500", "0.625", "-20.0%")
    assert "roofline_measured" not in table  # no J/image predicted by the baselines
    # without the contract's columns (a check made before energy): no such part
    assert prediction_rows(check()) == []
    assert "Predicted against measured J/image" not in energy_section(
        metrics(), ceilings(), runs(), check(), SVG
    )
    energy = {"predicted_joules_per_image": 0.75, "measured_joules_per_image": 0.625}
    computed = prediction_rows(check(**energy))
    assert computed[0]["error_pct"] == pytest.approx(20.0)


def test_a_study_without_energy_data_says_so_with_each_envs_reason():
    cpu = metrics()[metrics()["env"] == "cpu"]
    html = energy_section(cpu, {"cpu": ceilings()["cpu"]}, [r for r in runs() if r["env"] == "cpu"])
    assert "No energy data in this study" in html
    assert (
        f"<li>cpu: energy unavailable: {RAPL_REASON}; its runs recorded energy as unavailable</li>"
        in html
    )
    assert "<h2>Energy roofline</h2>" not in html


def test_runs_without_json_fall_back_to_the_metrics_source():
    f = facts(metrics(), ceilings(), runs=None)
    gpu = next(e for e in f["envs"] if e["env"] == "gpu")
    assert gpu["runs"] == {"sources": {"nvml": None}, "reasons": []}
    assert gpu["points"][0]["sm_clock_mhz"] is None
    cpu = next(e for e in f["envs"] if e["env"] == "cpu")
    assert cpu["runs"]["reasons"] == ["unavailable (metrics.csv names no reason)"]


def test_every_study_has_the_page(inputs):
    """The report fixtures' study predates energy: the page says so, naming each env."""
    html = all_sections(**inputs)["energy.html"]
    assert "No energy data in this study" in html
    assert "local: its ceilings.json has no energy record" in html
    assert "metrics.csv has no energy columns" in html


def test_the_script_embeds_the_energy_roofline(tmp_path):
    import json

    import yaml
    from report_fixtures import make_config, make_points

    import write_report_sections

    (tmp_path / "config.yaml").write_text(yaml.safe_dump(make_config()))
    metrics().to_csv(tmp_path / "metrics.csv", index=False)
    make_points("gpu").to_csv(tmp_path / "points.csv", index=False)
    (tmp_path / "gpu").mkdir()
    (tmp_path / "gpu" / "ceilings.json").write_text(json.dumps(ceilings()["gpu"]))
    (tmp_path / "energy.svg").write_text(SVG)
    out = tmp_path / "sections"
    files = {"--config": "config.yaml", "--metrics": "metrics.csv", "--points": "points.csv",
             "--ceilings": "gpu/ceilings.json", "--energy-roofline": "energy.svg",
             "--outdir": "sections"}  # fmt: skip
    argv = [str(a) for flag, name in files.items() for a in (flag, tmp_path / name)]
    assert write_report_sections.main(argv) == 0
    html = (out / "energy.html").read_text()
    assert '<img src="data:image/svg+xml;base64,' in html
    table_row(html, "pJ/FLOP, fp32", "1.00")
