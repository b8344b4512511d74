"""Traces: the top-operators table, the trace job on a real tiny model (its trace, table,
failure and bad input), and the report page built from the tiny study's traces."""

from __future__ import annotations

import csv
import json
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from workflow_helpers import TINY_POINTS

from dnnroofline.errors import InputError
from dnnroofline.measure.traces import CSV_COLUMNS, top_table

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "workflow" / "scripts"
MODELS = str(ROOT / "tests" / "data" / "models")
TINY_CNN = ["--arch", "tiny", "--model-factory", "tiny_models:tiny_cnn", "--num-classes", "10"]
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")


def row(kind, name, calls, self_cpu, self_device=0.0, total_cpu=None):
    return {
        "kind": kind,
        "name": name,
        "calls": calls,
        "self_cpu_s": self_cpu,
        "total_cpu_s": self_cpu if total_cpu is None else total_cpu,
        "self_device_s": self_device,
    }


# --------------------------------------------------------------------------- the table


def test_cpu_table_ranks_ops_by_self_time_with_share_of_the_traced_steps():
    rows = [
        row("op", "aten::add_", 40, 0.010),
        row("op", "aten::convolution_backward", 8, 0.120, total_cpu=0.125),
        row("op", "aten::mkldnn_convolution", 8, 0.050),
        row("op", "aten::empty", 100, 0.0),  # no time: not ranked
    ]
    t = top_table(rows, traced_s=0.200, steps=2, top=2)
    assert t["basis"] == "self_cpu_s" and t["kernels"] == []
    assert [r["name"] for r in t["ops"]] == [
        "aten::convolution_backward",
        "aten::mkldnn_convolution",
    ]
    conv = t["ops"][0]
    assert conv["rank"] == 1 and conv["calls"] == 8 and conv["calls_per_step"] == 4
    assert conv["per_step_s"] == pytest.approx(0.060)
    assert conv["share_of_step"] == pytest.approx(0.6)
    assert conv["total_cpu_s"] == pytest.approx(0.125) and conv["self_device_s"] is None
    # coverage counts every op, not only the top ones
    assert t["coverage"] == {"ops": pytest.approx(0.9), "kernels": None}
    assert t["distinct"] == {"ops": 4, "kernels": 0}


def test_gpu_table_ranks_ops_by_their_kernels_and_lists_top_kernels():
    rows = [
        row("op", "aten::addmm", 4, 0.004, self_device=0.002),
        row("op", "aten::cudnn_convolution", 4, 0.001, self_device=0.030),
        row("kernel", "sm90_xmma_fprop", 4, 0.0, self_device=0.028),
        row("kernel", "Memcpy HtoD", 2, 0.0, self_device=0.001),
    ]
    t = top_table(rows, traced_s=0.050, steps=4, device=True)
    assert t["basis"] == "self_device_s"
    assert [r["name"] for r in t["ops"]] == ["aten::cudnn_convolution", "aten::addmm"]
    assert t["ops"][0]["share_of_step"] == pytest.approx(0.6)
    assert t["ops"][0]["self_cpu_s"] == pytest.approx(0.001)
    k = t["kernels"][0]
    assert k["name"] == "sm90_xmma_fprop" and k["per_step_s"] == pytest.approx(0.007)
    assert k["self_cpu_s"] is None and k["share_of_step"] == pytest.approx(0.56)
    assert t["coverage"]["kernels"] == pytest.approx(0.58)  # how busy the GPU was


@pytest.mark.parametrize(
    "traced_s, steps, expected",
    [(0.0, 3, "traced time 0.0 s: must be > 0"), (1.0, 0, "steps 0: must be >= 1")],
)
def test_table_refuses_impossible_totals(traced_s, steps, expected):
    with pytest.raises(InputError, match=re.escape(expected)):
        top_table([row("op", "a", 1, 0.1)], traced_s=traced_s, steps=steps)


# --------------------------------------------------------------------------- the trace job


def trace_cli(tmp_path, *args):
    out = {k: tmp_path / f"t{s}" for k, s in (("trace", ".json"), ("table", ".ops.json"))}
    out["csv"] = tmp_path / "t.ops.csv"
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=MODELS)
    proc = subprocess.run(
        [sys.executable, str(SCRIPTS / "trace_step.py"), *args, "--backend", "cpu", "--synthetic"]
        + ["--trace-out", str(out["trace"]), "--table-out", str(out["table"])]
        + ["--csv-out", str(out["csv"])],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    return proc, out


def test_trace_job_writes_a_trace_of_its_steps_and_the_top_ops_table(tmp_path):
    steps = 3
    args = [*TINY_CNN, "--batch-size", "2", "--image-size", "8", "--warmup-iters", "2"]
    proc, out = trace_cli(tmp_path, *args, "--steps", str(steps), "--top", "5")
    assert proc.returncode == 0, proc.stderr
    trace = json.loads(out["trace"].read_text())
    names = {e.get("name") for e in trace["traceEvents"]}
    # one range per traced step, none for the warm-up
    assert {n for n in names if str(n).startswith("ProfilerStep#")} == {
        f"ProfilerStep#{i}" for i in range(steps)
    }
    assert "aten::convolution_backward" in names
    doc = json.loads(out["table"].read_text())
    assert doc["kind"] == "trace" and doc["status"] == "ok", doc["message"]
    assert len(doc["step_time_s"]["all"]) == steps  # the traced steps' own times
    assert doc["config"]["model_factory"] == "tiny_models:tiny_cnn"
    assert doc["trace"]["bytes"] == out["trace"].stat().st_size
    table = doc["table"]
    ops = table["ops"]
    assert len(ops) == 5 and [r["rank"] for r in ops] == [1, 2, 3, 4, 5]
    assert all(a["per_step_s"] >= b["per_step_s"] for a, b in zip(ops, ops[1:], strict=False))
    assert all(0 < r["share_of_step"] < 1 for r in ops)
    assert sum(r["share_of_step"] for r in ops) <= table["coverage"]["ops"] + 1e-6 < 1.05
    traced = sum(doc["step_time_s"]["all"])
    assert ops[0]["share_of_step"] == pytest.approx(ops[0]["self_cpu_s"] / traced, abs=1e-6)
    assert not any(r["name"].startswith("ProfilerStep") for r in ops)
    with out["csv"].open() as fh:
        rows = list(csv.DictReader(fh))
    assert tuple(rows[0]) == CSV_COLUMNS
    assert [(r["kind"], r["name"]) for r in rows] == [("op", r["name"]) for r in ops]


def test_failed_trace_job_records_the_error_and_an_empty_trace(tmp_path):
    # a real failure inside the step (a model that cannot train at 8 px)
    args = ["--arch", "big", "--model-factory", "tiny_models:needs_large_input"]
    args += ["--batch-size", "2", "--image-size", "8", "--warmup-iters", "1", "--steps", "2"]
    proc, out = trace_cli(tmp_path, *args)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(out["table"].read_text())
    assert doc["status"] == "error" and re.match(r"\w+Error: .+", doc["message"])
    assert doc["table"] is None and doc["trace"]["bytes"] == 0
    trace = json.loads(out["trace"].read_text())
    assert trace["traceEvents"] == [] and trace["otherData"]["status"] == "error"
    assert out["csv"].read_text().strip() == ",".join(CSV_COLUMNS)


@pytest.mark.parametrize(
    "flag, expected",
    [
        ("--steps", "--steps 0: must be >= 1"),
        ("--top", "--top 0: must be >= 1"),
    ],
)
def test_trace_job_refuses_bad_counts_and_writes_nothing(tmp_path, flag, expected):
    proc, out = trace_cli(tmp_path, *TINY_CNN, "--batch-size", "2", flag, "0")
    assert proc.returncode == 2 and expected in proc.stderr
    assert not any(p.exists() for p in out.values())


@pytest.mark.cuda
@cuda
def test_cuda_trace_lists_top_kernels(tmp_path):
    proc, out = trace_cli(tmp_path, *TINY_CNN, "--batch-size", "8", "--image-size", "32")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(out["table"].read_text())
    assert doc["status"] == "ok" and doc["table"]["basis"] == "self_device_s"
    assert doc["table"]["kernels"] and 0 < doc["table"]["coverage"]["kernels"] <= 1


# --------------------------------------------------------------------------- the report page


def test_report_page_has_each_configs_table_overhead_and_a_working_link(tiny_study):
    results = tiny_study / "results"
    page_path = results / "report_sections" / "traces.html"
    page = page_path.read_text()
    tables = sorted((results / "local" / "traces").glob("*.ops.json"))
    assert len(tables) == TINY_POINTS
    hrefs = re.findall(r'<a href="([^"]+\.json)">', page)
    assert len(hrefs) == TINY_POINTS
    for href in hrefs:  # relative to the page: they open from results/report_sections/
        assert (page_path.parent / href).resolve().is_file(), href
    # the overhead ratio: traced median against the median of the timed runs' medians
    doc = json.loads((results / "local/traces/local_resnet18_fp32_bs2.ops.json").read_text())
    runs = sorted((results / "local/runs").glob("local_resnet18_fp32_bs2_run*.json"))
    base = statistics.median(json.loads(p.read_text())["step_time_s"]["median"] for p in runs)
    ratio = doc["step_time_s"]["median"] / base
    section = page.split("<h3>local · resnet18 · fp32 · bs 2</h3>")[1].split("<h3>")[0]
    assert f"{ratio:.2f}× under the profiler" in section
    assert doc["table"]["ops"][0]["name"] in section
    assert "traces.html" in (results / "report.html").read_text(errors="replace")


def test_report_page_refuses_a_file_that_is_not_a_trace_table(tmp_path):
    bad = tmp_path / "run.ops.json"
    bad.write_text(json.dumps({"status": "ok", "step_time_s": None}))
    metrics = tmp_path / "metrics.csv"
    metrics.write_text("run_id,env,model,precision,batch_size,status,step_median_s\n")
    proc = subprocess.run(
        [sys.executable, str(SCRIPTS / "write_trace_section.py"), "--tables", str(bad)]
        + ["--metrics", str(metrics), "--out", str(tmp_path / "traces.html")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert f"{bad}: not a trace table" in proc.stderr
    assert not (tmp_path / "traces.html").exists()
