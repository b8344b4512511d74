"""examples/h200/: the prediction came before the measurement, the check table follows
from the committed prediction and runs, and the README's tables are those files'."""

from __future__ import annotations

import csv
import math
import shutil
import statistics
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from dnnroofline.aggregate.check import measured_points
from dnnroofline.aggregate.metrics import METRICS_DTYPES
from dnnroofline.perfmodel import transfer

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "h200"
PRECISION_ORDER = ["fp32", "amp", "bf16"]


def read_rows(path: Path) -> list[dict]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def recomputed_check() -> list[dict]:
    metrics = pd.read_csv(EXAMPLE / "metrics.csv", dtype=METRICS_DTYPES)
    measured = {(m, p, b): v for (_, m, p, b), v in measured_points(metrics).items()}
    predicted = pd.read_csv(EXAMPLE / "predicted.csv", dtype={"env": str, "model": str})
    return transfer.check_rows(predicted.to_dict("records"), measured)


def test_the_check_table_follows_from_the_prediction_and_the_runs():
    committed = read_rows(EXAMPLE / "prediction_check.csv")
    again = recomputed_check()
    assert len(committed) == len(again) == 12 * len(transfer.METHODS)
    for old, new in zip(committed, again, strict=True):
        assert (old["model"], old["precision"], int(old["batch"]), old["method"]) == (
            new["model"],
            new["precision"],
            new["batch"],
            new["method"],
        )
        for column in ("predicted_step_s", "measured_step_s", "error_pct"):
            assert float(old[column]) == pytest.approx(new[column], rel=1e-9), column
        assert float(old["images_per_s_error_pct"]) == pytest.approx(
            new["images_per_s_error_pct"], rel=1e-9
        )
        assert old["anchor"] == new["anchor"]
    assert all(math.isfinite(r["error_pct"]) for r in again)  # every point was measured
    # the error on step time and on images/s say the same thing, in their own units:
    # (1 + step error) x (1 + images/s error) = 1, the runs' medians aside
    for r in again:
        product = (1 + r["error_pct"] / 100) * (1 + r["images_per_s_error_pct"] / 100)
        assert product == pytest.approx(1.0, abs=0.02)


def test_the_images_per_s_figures_are_those_the_example_was_first_checked_with():
    """The check gained step-time columns (issue 36); its images/s columns, the figures
    the README and the docs first quoted, are the same as before."""
    first = {  # (model, precision, batch, method): the images/s error, as first committed
        ("resnet18", "amp", "128", "model"): -22.397661872007937,
        ("resnet18", "fp32", "128", "model"): 0.5,
        ("resnet50", "amp", "128", "habitat"): 26.5,
    }
    rows = {
        (r["model"], r["precision"], r["batch"], r["method"]): r
        for r in read_rows(EXAMPLE / "prediction_check.csv")
    }
    for key, error in first.items():
        assert float(rows[key]["images_per_s_error_pct"]) == pytest.approx(error, abs=0.05)


def pct(x: float) -> str:
    return f"{x:+.1f}%"


def both(row: dict) -> str:
    """A point's error as the README gives it: step time, then images/s in brackets."""
    return f"{pct(row['error_pct'])} ({pct(row['images_per_s_error_pct'])})"


def scores(summary: dict, key: str) -> str:
    """A method's score as the README gives it: step time, then images/s in brackets."""
    return f"{summary[key]:.1f}% ({summary['images_per_s_' + key]:.1f}%)"


def test_the_readmes_tables_are_the_committed_files():
    text = (EXAMPLE / "README.md").read_text()
    runs: dict[tuple, list[float]] = {}
    for r in read_rows(EXAMPLE / "metrics.csv"):
        key = (r["model"], r["precision"], int(r["batch_size"]))
        runs.setdefault(key, []).append(float(r["images_per_s"]))
    check = {(r["model"], r["precision"], r["batch"], r["method"]): r for r in recomputed_check()}
    for (model, precision, batch), ips in runs.items():
        m, h = (
            check[(model, precision, batch, "model")],
            check[(model, precision, batch, "habitat")],
        )
        row = (
            f"| {model} | {precision} | {batch} | {statistics.median(ips):,.0f} "
            f"({min(ips):,.0f}–{max(ips):,.0f}) | {m['predicted_images_per_s']:,.0f} | "
            f"{h['predicted_images_per_s']:,.0f} | {both(m)} | {both(h)} | {m['anchor']} |"
        )
        assert row in text, row
    for entry in transfer.summary(list(check.values())):
        a, s = entry["all"], entry["same"]
        row = (
            f"| {entry['method']} | {scores(a, 'mape_pct')} | {scores(a, 'max_abs_error_pct')} | "
            f"{scores(s, 'mape_pct')} | {scores(s, 'max_abs_error_pct')} |"
        )
        assert row in text, row


def git(*args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True
    ).stdout.strip()


def test_the_prediction_was_committed_before_anything_measured():
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    if git("rev-parse", "--is-shallow-repository") == "true":
        pytest.skip("a shallow clone holds no history to compare")
    predicted = git("log", "--diff-filter=A", "--format=%H", "--", "examples/h200/predicted.csv")
    measured = git(
        "log",
        "--diff-filter=A",
        "--format=%H",
        "--",
        "examples/h200/results",
        "examples/h200/metrics.csv",
    ).splitlines()
    assert predicted and measured, "the prediction and the results are committed"
    for commit in measured:
        assert commit != predicted, "the prediction has a commit of its own"
        # the prediction's commit is an ancestor of every commit that added a measurement
        subprocess.run(
            ["git", "-C", str(ROOT), "merge-base", "--is-ancestor", predicted, commit], check=True
        )
