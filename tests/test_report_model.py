"""The model's report page (issue 28, items 4 and 5): the check per method, the parity
plot, the model's error per point and the what-ifs, marked predicted, not measured."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import yaml
from matplotlib.collections import PolyCollection
from report_fixtures import make_config, make_metrics, make_points, table_row

from dnnroofline.plots import parity
from dnnroofline.report.model import model_section
from dnnroofline.report.sections import all_sections

REPO = Path(__file__).resolve().parents[1]
POINT = {"env": "local", "precision": "fp32"}


def check_row(model, batch, method, predicted, measured, in_interval=None, memory=None):
    return {
        **POINT,
        "model": model,
        "batch": batch,
        "method": method,
        "predicted_images_per_s": predicted,
        "measured_images_per_s": measured,
        "error_pct": 100 * (predicted - measured) / measured,
        "predicted_peak_memory_bytes": memory,
        "measured_peak_memory_bytes": 2.0e9 if memory else None,
        "in_interval": in_interval,
    }


def make_check() -> pd.DataFrame:
    """Three measured points: the model off by -10%, +20% and +5%; one baseline."""
    rows = [
        check_row("resnet50", 8, "model", 18.0, 20.0, True, 1.5e9),
        check_row("resnet50", 16, "model", 28.8, 24.0, False, 2.5e9),
        check_row("mobilenet_v2", 8, "model", 52.5, 50.0, True, 1.0e9),
        check_row("resnet50", 8, "roofline_measured", 60.0, 20.0),
        check_row("resnet50", 16, "roofline_measured", 48.0, 24.0),
        check_row("mobilenet_v2", 8, "roofline_measured", 150.0, 50.0),
    ]
    return pd.DataFrame(rows)


def prediction(kind, env, model, batch, ips, **extra):
    row = {
        "env": env,
        "model": model,
        "precision": "bf16" if kind == "what_if" else "fp32",
        "batch": batch,
        "kind": kind,
        "env_source": "study",
        "method": "model",
        "predicted_step_s": batch / ips,
        "predicted_images_per_s": ips,
        "interval_low_images_per_s": ips * 0.9,
        "interval_high_images_per_s": ips * 1.1,
        "interval_level": 0.8,
        "bound": "compute",
        "top_classes": "conv 70%; normalization 12%; elementwise 9%",
        "predicted_peak_memory_bytes": 30e9,
        "device_memory_bytes": None,
        "fits": None,
        "notes": "",
    }
    return row | extra


def make_predictions() -> pd.DataFrame:
    gib = 2**30
    return pd.DataFrame(
        [
            prediction("measured", "local", "resnet50", 8, 18.0),
            prediction(
                "what_if", "h200_sxm", "resnet50", 256, 3100.0,
                env_source="datasheet h200_sxm: tables of env h100, scaled by peaks",
                device_memory_bytes=141 * gib, fits=True,
            ),
            prediction(
                "what_if", "l4", "vgg16", 512, 95.0, predicted_peak_memory_bytes=60e9,
                device_memory_bytes=24 * gib, fits=False, notes="no <conv_bwd> table",
            ),
        ]
    )  # fmt: skip


def written_as_csv(df: pd.DataFrame, tmp_path: Path, name: str) -> pd.DataFrame:
    """The frame as the page reads it: through a CSV file, so empty cells come back NaN
    and booleans as the CSV spells them."""
    path = tmp_path / name
    df.to_csv(path, index=False)
    return pd.read_csv(path)


def test_the_page_gives_each_method_its_error_from_the_check(tmp_path):
    html = model_section(
        written_as_csv(make_predictions(), tmp_path, "p.csv"),
        written_as_csv(make_check(), tmp_path, "c.csv"),
        None,
    )
    # the model: |errors| 10, 20 and 5 -> MAPE 11.7%, max 20.0%; ranks agree (tau 1);
    # 2 of 3 inside their interval. The baseline: +200%, +100%, +200%; no interval.
    model = table_row(html, "model", "3")
    assert "11.7%" in model and "20.0%" in model and "1.00" in model and "67%" in model
    baseline = table_row(html, "roofline_measured", "3")
    assert "166.7%" in baseline and "200.0%" in baseline and "no interval" in baseline
    assert html.index(">roofline_measured<") < html.index(">model<")  # baselines first
    # the model's error per point, with its memory; the baseline's rows are not listed
    point = table_row(html, "local", "resnet50", "fp32", "16")
    assert "28.8 img/s" in point and "24.0 img/s" in point and "+20.0%" in point
    assert "<td>no</td>" in point and "2.50 GB" in point
    assert "The model's worst point: local resnet50 fp32 batch 16, +20.0%" in html


def test_the_what_ifs_are_marked_predicted_not_measured(tmp_path):
    html = model_section(written_as_csv(make_predictions(), tmp_path, "p.csv"), None, None)
    what_if = html[html.index("<h2>What if</h2>") :]
    assert "<strong>Predicted, not measured.</strong>" in what_if
    assert "<caption>What if: predicted, not measured</caption>" in what_if
    h200 = table_row(what_if, "h200_sxm", "resnet50", "bf16", "256")
    assert "3,100 img/s" in h200 and "2,790 img/s – 3,410 img/s (80%)" in h200
    assert "tables of env h100, scaled by peaks" in h200 and "<td>yes</td>" in h200
    l4 = table_row(what_if, "l4", "vgg16", "bf16", "512")
    assert "<span class=bad>no</span>" in l4 and "60.0 GB" in l4
    assert "no &lt;conv_bwd&gt; table" in l4  # escaped
    # the measured point's prediction is in the check's table, not under What if
    assert "<td>local</td>" not in what_if
    assert "No point checked yet" in html


def test_the_page_embeds_the_parity_plot(tmp_path):
    svg = tmp_path / "parity.svg"
    parity.plot_parity(make_check().to_dict("records"), svg)
    html = model_section(None, make_check(), svg.read_text())
    assert '<img src="data:image/svg+xml;base64,' in html
    assert "No parity plot given" in model_section(None, make_check(), None)


def test_a_study_without_predictions_yet_still_has_its_model_page():
    config = make_config()
    pages = all_sections(config, make_metrics(), make_points())
    page = pages["model.html"]
    assert page.startswith("<!DOCTYPE html>")
    assert "No measured point to check yet" in page and "No what-if points" in page


def test_the_parity_plot_has_the_identity_line_the_band_and_a_marker_per_method():
    fig = parity.parity_figure(make_check().to_dict("records"))
    ax = fig.axes[0]
    assert ax.get_xscale() == ax.get_yscale() == "log"
    (identity,) = [line for line in ax.lines if line.get_gid() == parity.IDENTITY_GID]
    assert list(identity.get_xdata()) == list(identity.get_ydata())
    lo, hi = ax.get_xlim()
    assert identity.get_xdata()[0] <= lo and identity.get_xdata()[-1] >= hi
    (band,) = [c for c in ax.collections if c.get_gid() == parity.BAND_GID]
    assert isinstance(band, PolyCollection)
    ratios = {round(y / x, 6) for x, y in band.get_paths()[0].vertices if x > 0}
    assert ratios == {0.9, 1.1}
    markers = {line.get_gid(): line for line in ax.lines if line.get_gid() != parity.IDENTITY_GID}
    assert set(markers) == {"parity-roofline_measured", "parity-model"}
    assert markers["parity-model"].get_marker() != markers["parity-roofline_measured"].get_marker()
    model = markers["parity-model"]
    assert list(model.get_xdata()) == [20.0, 24.0, 50.0]  # measured on x
    assert list(model.get_ydata()) == [18.0, 28.8, 52.5]  # predicted on y


def test_the_cli_writes_the_parity_svg_and_the_model_page(tmp_path):
    check = tmp_path / "prediction_check.csv"
    make_check().to_csv(check, index=False)
    svg = tmp_path / "plots" / "prediction_parity.svg"
    plot = subprocess.run(
        [sys.executable, str(REPO / "workflow/scripts/plot_parity.py"), "--check", str(check),
         "--svg", str(svg)],
        capture_output=True, text=True,
    )  # fmt: skip
    assert plot.returncode == 0, plot.stderr
    assert "model 3" in plot.stderr
    assert f'id="{parity.IDENTITY_GID}"' in svg.read_text()
    predictions = tmp_path / "predictions.csv"
    make_predictions().to_csv(predictions, index=False)
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(make_config()))
    metrics, points = tmp_path / "metrics.csv", tmp_path / "points.csv"
    make_metrics().to_csv(metrics, index=False)
    make_points().to_csv(points, index=False)
    out = tmp_path / "sections"
    report = subprocess.run(
        [sys.executable, str(REPO / "workflow/scripts/write_report_sections.py"),
         "--config", str(config), "--metrics", str(metrics), "--points", str(points),
         "--predictions", str(predictions), "--prediction-check", str(check),
         "--parity", str(svg), "--outdir", str(out)],
        capture_output=True, text=True,
    )  # fmt: skip
    assert report.returncode == 0, report.stderr
    page = (out / "model.html").read_text()
    assert "data:image/svg+xml;base64," in page and "Predicted, not measured." in page
    assert "11.7%" in table_row(page, "model", "3")


def test_summarize_study_prints_the_models_error_per_point(tmp_path):
    make_metrics().to_csv(tmp_path / "metrics.csv", index=False)
    make_points().to_csv(tmp_path / "points.csv", index=False)
    script = REPO / "workflow/scripts/summarize_study.py"
    args = [sys.executable, str(script), "--metrics", str(tmp_path / "metrics.csv"),
            "--points", str(tmp_path / "points.csv"), "--results", str(tmp_path)]  # fmt: skip
    before = subprocess.run(args, capture_output=True, text=True)
    assert before.returncode == 0, before.stderr
    assert "the model" not in before.stdout  # a study made before the model: no check
    make_check().to_csv(tmp_path / "prediction_check.csv", index=False)
    after = subprocess.run(args, capture_output=True, text=True)
    assert after.returncode == 0, after.stderr
    lines = after.stdout.splitlines()
    start = lines.index(
        "the model's prediction of each point (images/s; no point predicted from its own runs):"
    )
    assert lines[start + 1].split() == [
        "env", "model", "precision", "batch", "predicted", "measured", "error"
    ]  # fmt: skip
    assert lines[start + 2].split() == ["local", "resnet50", "fp32", "8", "18.0", "20.0", "-10.0%"]
    assert lines[start + 3].split()[-1] == "+20.0%" and lines[start + 4].split()[-1] == "+5.0%"
    assert lines[start + 5] == "MAPE over the points: model 11.7%, roofline_measured 166.7%"
