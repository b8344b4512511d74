"""The study at a glance on the terminal (dnnroofline.report.terminal, summarize_study.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from report_fixtures import make_metrics, make_points

from dnnroofline.report.terminal import glance_rows, study_summary

SCRIPT = Path(__file__).resolve().parents[1] / "workflow" / "scripts" / "summarize_study.py"


def test_one_row_per_point_with_its_speed_bound_and_distance_from_the_roof():
    rows = {(r[1], r[3]): r for r in glance_rows(make_metrics(), make_points())}
    assert set(rows) == {("resnet50", "8"), ("resnet50", "16"), ("mobilenet_v2", "8"),
                         ("mobilenet_v2", "16")}  # fmt: skip
    # the median of the ok repeats (20, 21, 20.5), never a failed run's 999
    assert rows["resnet50", "8"][4:9] == ("20.5", "62.5", "40.0 (analytic)", "compute", "62.5%")
    assert rows["resnet50", "16"][4] == "24.0"
    assert rows["resnet50", "16"][7] == "compute, ABOVE ROOF"
    assert rows["resnet50", "16"][9].startswith("fix the numbers first")
    assert rows["mobilenet_v2", "8"][4] == "51.0 (noisy)"  # one run's CV of 8%
    assert rows["mobilenet_v2", "8"][7:9] == ("memory", "25.0%")
    assert rows["mobilenet_v2", "8"][9].startswith("overheads, not a roof")


def test_summary_says_what_noisy_means_and_counts_failed_runs():
    text = study_summary(make_metrics(), make_points())
    lines = text.splitlines()
    assert lines[0].split()[:4] == ["env", "model", "precision", "batch"]
    assert len(lines) == 1 + 4 + 2
    assert lines[-2] == "(noisy): a step-time CV or a spread of images/s over repeats above 5%"
    assert lines[-1] == "11 timed runs: 10 ok, 1 failed (the report's Failed runs table says why)"


def test_cli_reads_the_ledgers_and_names_a_missing_one(tmp_path):
    make_metrics().to_csv(tmp_path / "metrics.csv", index=False)
    make_points().to_csv(tmp_path / "points.csv", index=False)
    args = [sys.executable, str(SCRIPT), "--metrics", str(tmp_path / "metrics.csv"),
            "--results", str(tmp_path)]  # fmt: skip
    ok = subprocess.run([*args, "--points", str(tmp_path / "points.csv")],
                        capture_output=True, text=True)  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout == study_summary(make_metrics(), make_points()) + "\n"
    missing = subprocess.run([*args, "--points", "nope.csv"], capture_output=True, text=True)
    assert missing.returncode == 2 and "nope.csv" in missing.stderr
    assert "run the study first" in missing.stderr
