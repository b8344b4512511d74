"""The trace job's cost, as BENCHMARKS.md's table and docs/study.md quote it, is
benchmarks/results/trace_overhead.json (issue 38, item 8)."""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULT = json.loads((ROOT / "benchmarks" / "results" / "trace_overhead.json").read_text())


def after_steps_s(run: dict) -> float:
    return run["stop_s_median"] + run["export_s_median"] + run["table_s_median"]


def test_the_benchmarks_table_is_trace_overhead_json():
    text = (ROOT / "BENCHMARKS.md").read_text()
    for run in RESULT["runs"]:
        row = (
            f"| {run['arch']}, {run['batch_size']} | {run['ratio_paired_median']:.3f} "
            f"| {after_steps_s(run):.2f} s | {run['trace_bytes_median'] / 1e6:.1f} MB |"
        )
        assert row in text


def test_docs_study_quotes_the_ranges_of_trace_overhead_json():
    text = " ".join((ROOT / "docs" / "study.md").read_text().split())
    runs = RESULT["runs"]
    slower = [100 * (r["ratio_paired_median"] - 1) for r in runs]
    after = [after_steps_s(r) for r in runs]
    size = [r["trace_bytes_median"] / 1e6 for r in runs]
    assert f"{round(min(after), 1)}–{round(max(after), 1)} s for the profiler to stop" in text
    assert f"ran {round(min(slower))}–{round(max(slower))}% slower" in text
    assert f"Each trace was {min(size):.1f}–{max(size):.1f} MB" in text
