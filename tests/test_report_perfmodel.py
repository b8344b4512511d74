"""The model's report page (issue 28, items 4 and 5): the check per method, on step time
and on images/s (issue 36), the parity plot, the model's error per point and the
what-ifs, marked predicted, not measured."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from matplotlib.collections import PolyCollection
from report_fixtures import make_config, make_metrics, make_points, table_row

from dnnroofline.plots import parity
from dnnroofline.report.perfmodel import perfmodel_section
from dnnroofline.report.sections import all_sections

REPO = Path(__file__).resolve().parents[1]
POINT = {"env": "local", "precision": "fp32"}


def check_row(model, batch, method, predicted_s, measured_s, in_interval=None, memory=None):
    """A row of prediction_check.csv from a predicted and a measured step (seconds)."""
    predicted, measured = batch / predicted_s, batch / measured_s
    return {
        **POINT,
        "model": model,
        "batch": batch,
        "method": method,
        "predicted_step_s": predicted_s,
        "measured_step_s": measured_s,
        "error_pct": 100 * (predicted_s - measured_s) / measured_s,
        "predicted_images_per_s": predicted,
        "measured_images_per_s": measured,
        "images_per_s_error_pct": 100 * (predicted - measured) / measured,
        "predicted_peak_memory_bytes": memory,
        "measured_peak_memory_bytes": 2.0e9 if memory else None,
        "measured_peak_memory_source": "max_rss_bytes-rss_before_model" if memory else None,
        "in_interval": in_interval,
        "images_per_s_in_interval": in_interval,
    }


def make_check() -> pd.DataFrame:
    """Three measured points: the model's step off by +10%, -20% and +5% (images/s
    -9.1%, +25%, -4.8%); one baseline, each step a third or a half of the measured."""
    rows = [
        check_row("resnet50", 8, "model", 0.44, 0.4, True, 1.5e9),
        check_row("resnet50", 16, "model", 0.64, 0.8, False, 2.5e9),
        check_row("mobilenet_v2", 8, "model", 0.168, 0.16, True, 1.0e9),
        check_row("resnet50", 8, "roofline_measured", 0.4 / 3, 0.4),
        check_row("resnet50", 16, "roofline_measured", 0.4, 0.8),
        check_row("mobilenet_v2", 8, "roofline_measured", 0.16 / 3, 0.16),
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
    html = perfmodel_section(
        written_as_csv(make_predictions(), tmp_path, "p.csv"),
        written_as_csv(make_check(), tmp_path, "c.csv"),
        None,
    )
    # the model on step time: |errors| 10, 20 and 5 -> MAPE 11.7%, max 20.0%; the steps
    # rank as the runs' (tau 1); 2 of 3 inside their interval. On images/s: |errors|
    # 9.1, 25 and 4.8 -> MAPE 13.0%, max 25.0%; the two resnet50 points ran at the same
    # 20 img/s, a tie: tau-b 2 / sqrt(3 x 2) = 0.82
    model = cells(table_row(html, "model", "3"))
    assert model[2:] == ["11.7%", "20.0%", "1.00", "67%", "13.0%", "25.0%", "0.82", "67%"]
    # the baseline: steps -66.7%, -50%, -66.7% (images/s +200%, +100%, +200%); no interval
    baseline = cells(table_row(html, "roofline_measured", "3"))
    assert baseline[2:4] == ["61.1%", "66.7%"] and baseline[6:8] == ["166.7%", "200.0%"]
    assert baseline[5] == baseline[9] == "– (no interval)"
    assert html.index(">roofline_measured<") < html.index(">model<")  # baselines first
    # the model's error per point, with its memory; the baseline's rows are not listed
    point = cells(table_row(html, "local", "resnet50", "fp32", "16"))
    assert point[4:10] == ["640 ms", "800 ms", "-20.0%", "25.0 img/s", "20.0 img/s", "+25.0%"]
    assert point[10] == "no" and point[12] == "2.00 GB" and point[11] == "2.50 GB"
    assert point[13] == "max_rss_bytes-rss_before_model"
    assert (
        "The model's worst point: local resnet50 fp32 batch 16, -20.0% on step time "
        "(+25.0% on images/s)" in html
    )


def cells(tr: str) -> list[str]:
    return re.findall(r"<td[^>]*>(.*?)</td>", tr, flags=re.S)


def test_the_what_ifs_are_marked_predicted_not_measured(tmp_path):
    html = perfmodel_section(written_as_csv(make_predictions(), tmp_path, "p.csv"), None, None)
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
    html = perfmodel_section(None, make_check(), svg.read_text())
    assert '<img src="data:image/svg+xml;base64,' in html
    assert "No parity plot given" in perfmodel_section(None, make_check(), None)


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
    # step time in ms: measured on x, predicted on y
    assert list(model.get_xdata()) == pytest.approx([400.0, 800.0, 160.0])
    assert list(model.get_ydata()) == pytest.approx([440.0, 640.0, 168.0])
    assert "step time" in ax.get_xlabel() and "ms" in ax.get_ylabel()


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
    assert cells(table_row(page, "model", "3"))[2] == "11.7%"


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
        "the model's prediction of each point (step time and images/s; no point predicted "
        "from its own runs):"
    )
    assert [c.strip() for c in re.split(r"  +", lines[start + 1])] == [
        "env", "model", "precision", "batch", "predicted step", "measured step", "step error",
        "predicted images/s", "measured images/s", "images/s error",
    ]  # fmt: skip
    assert lines[start + 2].split() == [
        "local", "resnet50", "fp32", "8", "440", "ms", "400", "ms", "+10.0%", "18.2", "20.0",
        "-9.1%",
    ]  # fmt: skip
    assert lines[start + 3].split()[-1] == "+25.0%" and lines[start + 4].split()[-1] == "-4.8%"
    assert lines[start + 3].split()[8] == "-20.0%"
    assert (
        lines[start + 5] == "MAPE over the points, step time: model 11.7%, roofline_measured 61.1%"
    )
    assert lines[start + 6] == (
        "MAPE over the points, images/s: model 13.0%, roofline_measured 166.7%"
    )
    assert "joules per image" not in after.stdout  # no energy recorded: no energy line
    # with J/image on two of the model's points (errors +10% and -30%)
    check = make_check()
    check["predicted_joules_per_image"] = [1.1, 0.7] + [float("nan")] * 4
    check["measured_joules_per_image"] = [1.0, 1.0] + [float("nan")] * 4
    check["joules_per_image_error_pct"] = [10.0, -30.0] + [float("nan")] * 4
    check.to_csv(tmp_path / "prediction_check.csv", index=False)
    energy = subprocess.run(args, capture_output=True, text=True)
    assert energy.returncode == 0, energy.stderr
    assert energy.stdout.splitlines()[start + 7] == (
        "the model's joules per image: MAPE 20.0%, max |error| 30.0% over 2 points"
    )
