"""Where the step waits (issue 26, section 2): the kernel-busy share of every point, the
``host`` bound under its threshold, and what the idle device waited on.

The H100 points are the committed captures of examples/h100/ (no trace was taken there,
so their kernel time is ncu's kernel pass); the trace side is a Kineto-style trace built
here, with kernels overlapping on two streams, a host sync and a launch gap.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

from dnnroofline.aggregate.inputs import key_ceilings
from dnnroofline.aggregate.metrics import METRICS_DTYPES
from dnnroofline.aggregate.points import POINTS_DTYPES, roofline_points_frame
from dnnroofline.errors import InputError
from dnnroofline.estimate import roofline
from dnnroofline.formatting import fmt_time
from dnnroofline.measure import busy_share
from dnnroofline.perfmodel.levers import short_lever
from dnnroofline.report.ncu_comparison import comparison_page, comparison_rows
from dnnroofline.report.terminal import study_summary

ROOT = Path(__file__).resolve().parents[1]
H100 = ROOT / "examples" / "h100"
NCU = H100 / "results" / "h100" / "ncu"
SCRIPTS = ROOT / "workflow" / "scripts"
CAPTURES = [
    ("resnet18", "amp", 128),
    ("resnet18", "bf16", 128),
    ("resnet18", "fp32", 128),
    ("resnet50", "amp", 256),
    ("resnet50", "bf16", 256),
]


def capture(model: str, precision: str, batch: int) -> dict:
    return json.loads((NCU / f"h100_{model}_{precision}_bs{batch}.json").read_text())


def h100_points(traces=None) -> pd.DataFrame:
    metrics = pd.read_csv(H100 / "metrics.csv", dtype=METRICS_DTYPES)
    path = H100 / "results" / "h100" / "ceilings.json"
    ceilings, sources = key_ceilings([(str(path), json.loads(path.read_text()))])
    ncu = {("h100", *c): capture(*c) for c in CAPTURES}
    return roofline_points_frame(
        metrics, {}, ceilings, ncu, ceilings_sources=sources, traces=traces
    ).set_index(["model", "precision", "batch_size"])


# --------------------------------------------------------------------------- the H100 points


def test_h100_points_get_the_kernel_pass_busy_share_and_resnet18_amp_is_host_bound():
    points = h100_points()
    for model, precision, batch in CAPTURES:
        p = points.loc[(model, precision, batch)]
        kernel_s = capture(model, precision, batch)["kernel_pass_totals"]["time_s"]
        assert p["kernel_busy_share"] == pytest.approx(kernel_s / p["step_median_s"], rel=1e-12)
        assert p["kernel_time_source"] == "ncu_kernel_pass"
        assert p["host_wait_cause"] == busy_share.NO_TRACE_CAUSE
    amp = points.loc[("resnet18", "amp", 128)]
    # 9.22 ms of kernels in a 14.2 ms step: a third of the step without a kernel
    assert amp["kernel_busy_share"] == pytest.approx(0.009224992 / 0.014173327922821045)
    assert amp["kernel_busy_share"] < roofline.HOST_BOUND_BELOW
    assert amp["bound"] == "host"  # its AI alone says memory (119.5 < ridge 227)
    assert amp["ai"] < amp["ridge_ai"]
    others = points.drop(index=("resnet18", "amp", 128))
    assert (others["kernel_busy_share"] > 0.9).all()
    assert list(others["bound"]) == ["memory", "compute", "memory", "memory"]
    # kernel replay's cold caches make the sum an upper bound: fp32's exceeds its step
    assert points.loc[("resnet18", "fp32", 128), "kernel_busy_share"] > 1


def test_kernel_time_is_the_kernel_pass_sum_never_the_step_range():
    doc = capture("resnet18", "amp", 128)
    assert busy_share.ncu_kernel_time_s(doc) == doc["kernel_pass_totals"]["time_s"]
    assert doc["totals"]["time_s"] == pytest.approx(0.240760032)  # the range: 26x longer
    bare = {"totals": {"time_s": 0.0123}}  # parse_ncu.py on a kernel-replay CSV
    assert busy_share.ncu_kernel_time_s(bare) == 0.0123
    step_only = {"totals": {"time_s": 0.24}, "provenance": {"totals.time_s": "step"}}
    assert busy_share.ncu_kernel_time_s(step_only) is None
    assert busy_share.ncu_kernel_time_s({"status": "error", "totals": {"time_s": 1.0}}) is None


def test_ncu_page_calls_the_kernel_pass_sum_kernel_time_and_the_range_not():
    docs = {("h100", *c): capture(*c) for c in CAPTURES}
    page = comparison_page(comparison_rows(docs, {}))
    amp, r50 = capture("resnet18", "amp", 128), capture("resnet50", "amp", 256)
    for doc in (amp, r50):
        kernel, rng = doc["kernel_pass_totals"]["time_s"], doc["totals"]["time_s"]
        assert f"ran for {fmt_time(kernel)} in the kernel pass" in page
        assert f"range lasted {fmt_time(rng)}" in page
        assert f"{fmt_time(rng)} of kernel time" not in page
    assert "not kernel time" in page


def test_summary_and_lever_say_host():
    points = h100_points()
    metrics = pd.read_csv(H100 / "metrics.csv", dtype=METRICS_DTYPES)
    text = study_summary(metrics, points.reset_index(), {})
    amp = next(line for line in text.splitlines() if " amp " in line and "resnet18" in line)
    assert " host (busy 65%) " in amp and "keep the device fed" in amp
    assert short_lever("host", 0.2, device="cpu").startswith("framework overhead")


# --------------------------------------------------------------------------- traces


def ev(cat, name, ts, dur, tid=1, **args) -> dict:
    return {
        "ph": "X",
        "cat": cat,
        "name": name,
        "pid": 1,
        "tid": tid,
        "ts": ts,
        "dur": dur,
        "args": args,
    }


def cuda_trace() -> dict:
    """Two steps of 1000 µs on the host. Device: kernels 0-300 on stream 7 and 200-500 on
    stream 8 (overlap: 500 µs busy, not 600), then a host sync returns at 520 and the
    host launches the next kernel at 700 (start 710): a 210 µs gap after the sync; a
    kernel 710-900; the next launched at 950, after it ended (start 960): a 60 µs launch
    wait; a memcpy 960-1000."""
    return {
        "traceEvents": [
            ev("user_annotation", "ProfilerStep#0", 0, 1000),
            ev("user_annotation", "ProfilerStep#1", 1000, 1000),
            ev("gpu_user_annotation", "ProfilerStep#0", 0, 1000, tid=7),
            ev("kernel", "conv", 0, 300, tid=7, correlation=1),
            ev("kernel", "gemm", 200, 300, tid=8, correlation=2),
            ev("cpu_op", "aten::item", 480, 45),
            ev("cpu_op", "aten::_local_scalar_dense", 482, 42),
            ev("cuda_runtime", "cudaMemcpyAsync", 483, 5),
            ev("cuda_runtime", "cudaStreamSynchronize", 490, 30),
            ev("cuda_runtime", "cudaLaunchKernel", 700, 5, correlation=3),
            ev("kernel", "relu", 710, 190, tid=7, correlation=3),
            ev("cuda_runtime", "cudaMemcpyAsync", 950, 5, correlation=4),
            ev("gpu_memcpy", "Memcpy HtoD", 960, 40, tid=7, correlation=4),
            {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "python"}},
        ]
    }


def test_union_of_overlapping_kernels_counts_once():
    assert busy_share.covered([(0, 300), (200, 500), (710, 900), (960, 1000)]) == 730
    assert busy_share.merge_intervals([(5, 6), (0, 3), (1, 2)]) == [(0, 3), (5, 6)]


def test_cuda_trace_busy_time_and_the_sync_it_waited_on():
    s = busy_share.trace_summary(cuda_trace(), cuda=True)
    assert s["basis"] == "trace" and s["steps"] == 2
    assert s["busy_s_per_step"] == pytest.approx(730e-6 / 2)  # not 830: overlap once
    # 210 of the 270 µs of gaps follow the sync, 60 are a launch wait
    assert s["cause"] == (
        "78% of idle gaps after aten::item > aten::_local_scalar_dense "
        "(cudaStreamSynchronize); 22% of idle gaps host launching slower than the kernels run"
    )


def test_cpu_trace_share_is_time_inside_aten_operators():
    trace = {
        "traceEvents": [
            ev("user_annotation", "ProfilerStep#0", 0, 1000),
            ev("cpu_op", "aten::convolution", 100, 400),  # nested: counted once
            ev("cpu_op", "aten::mkldnn_convolution", 150, 300),
            ev("cpu_op", "aten::empty", 160, 5),
            ev("cpu_op", "autograd::engine::evaluate_function: X", 500, 100),
            ev("cpu_op", "aten::add_", 700, 100, tid=2),  # the backward thread
            ev("cpu_op", "aten::zeros", 1100, 50),  # outside the step: the batch fetch
        ]
    }
    s = busy_share.trace_summary(trace, cuda=False)
    assert s["basis"] == "trace_cpu_ops"
    assert s["busy_s_per_step"] == pytest.approx(500e-6)
    assert s["cause"].startswith("50% of the traced steps outside aten operators")
    # The profiler slows the host: a CPU share stays within the traced steps, whatever the
    # untraced median step (a real tiny CNN's ops ran 1.11x its untraced step when traced).
    assert s["share_of_traced_step"] == pytest.approx(0.5)
    assert busy_share.point_busy(s, None, step_median_s=400e-6).share == pytest.approx(0.5)


@pytest.mark.parametrize(
    "trace, message",
    [
        ({}, "no 'traceEvents' list"),
        ({"traceEvents": [ev("kernel", "k", 0, 1)]}, "no ProfilerStep#N step range"),
        (
            {"traceEvents": [ev("user_annotation", "ProfilerStep#0", 0, 9)]},
            "a CUDA trace without a kernel",
        ),
    ],
)
def test_a_trace_that_cannot_give_a_share_is_refused(trace, message):
    with pytest.raises(InputError, match=message):
        busy_share.trace_summary(trace, cuda=True, where="t.json")


def test_a_trace_comes_before_ncu_and_its_cause_is_named():
    busy = {"basis": "trace", "busy_s_per_step": 0.005, "cause": "after aten::item"}
    traces = {("h100", "resnet18", "bf16", 128): busy}
    p = h100_points(traces).loc[("resnet18", "bf16", 128)]
    assert p["kernel_busy_share"] == pytest.approx(0.005 / p["step_median_s"])
    assert p["kernel_time_source"] == "trace" and p["bound"] == "host"
    assert p["host_wait_cause"] == "after aten::item"


def test_bound_with_busy_share():
    assert roofline.bound_with_busy_share("memory", 0.74) == "host"
    assert roofline.bound_with_busy_share("compute", 0.75) == "compute"
    assert roofline.bound_with_busy_share("inconclusive", math.nan) == "inconclusive"
    assert roofline.bound_with_busy_share("memory", 1.06) == "memory"
    with pytest.raises(InputError, match="must be >= 0"):
        roofline.bound_with_busy_share("memory", -0.1)


def test_roofline_points_cli_reads_trace_tables_and_old_ones_from_their_trace(tmp_path):
    import subprocess

    trace = tmp_path / "h100_resnet50_bf16_bs256.json"
    trace.write_text(json.dumps(cuda_trace()))
    old = {
        "kind": "trace",
        "status": "ok",
        "trace": {"file": str(trace), "activities": ["cpu", "cuda"]},
    }
    # a trace table is its traced run's record: the run identity is its env and config
    old["env"], old["config"] = "h100", {"arch": "resnet50", "precision": "bf16", "batch_size": 256}
    (tmp_path / "h100_resnet50_bf16_bs256.ops.json").write_text(json.dumps(old))
    new = dict(old, busy={"basis": "trace", "busy_s_per_step": 0.06, "cause": "other"})
    new["config"] = {"arch": "resnet18", "precision": "fp32", "batch_size": 128}
    (tmp_path / "h100_resnet18_fp32_bs128.ops.json").write_text(json.dumps(new))
    out = tmp_path / "points.csv"
    cmd = [
        sys.executable,
        str(SCRIPTS / "roofline_points.py"),
        "--metrics",
        str(H100 / "metrics.csv"),
    ]
    cmd += ["--ceilings", str(H100 / "results/h100/ceilings.json"), "--out", str(out)]
    cmd += ["--ncu", *[str(NCU / f"h100_{m}_{p}_bs{b}.json") for m, p, b in CAPTURES]]
    cmd += ["--traces", *map(str, tmp_path.glob("*.ops.json"))]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    pts = pd.read_csv(out, dtype=POINTS_DTYPES).set_index(["model", "precision"])
    r50 = pts.loc[("resnet50", "bf16")]
    assert r50["kernel_time_source"] == "trace" and r50["bound"] == "host"
    assert r50["kernel_busy_share"] == pytest.approx(365e-6 / r50["step_median_s"])
    fp32 = pts.loc[("resnet18", "fp32")]
    assert fp32["kernel_busy_share"] == pytest.approx(0.06 / fp32["step_median_s"])
    assert pts.loc[("resnet18", "amp"), "kernel_time_source"] == "ncu_kernel_pass"


def test_a_real_cpu_trace_job_records_its_busy_time(tmp_path):
    import os
    import subprocess

    out = {k: tmp_path / f"t{k}" for k in (".json", ".ops.json", ".ops.csv")}
    cmd = [sys.executable, str(SCRIPTS / "trace_step.py"), "--arch", "tiny"]
    cmd += ["--model-factory", "tiny_models:tiny_cnn", "--num-classes", "10", "--batch-size", "2"]
    cmd += ["--image-size", "8", "--warmup-iters", "1", "--steps", "2", "--backend", "cpu"]
    cmd += ["--synthetic", "--trace-out", str(out[".json"]), "--table-out", str(out[".ops.json"])]
    cmd += ["--csv-out", str(out[".ops.csv"])]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT / "tests/data/models"))
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(out[".ops.json"].read_text())
    busy = doc["busy"]
    assert busy["basis"] == "trace_cpu_ops" and busy["steps"] == 2
    # the operators' time lies inside the traced steps, and is what the trace says
    assert 0 < busy["busy_s_per_step"] < max(doc["step_time_s"]["all"])
    again = busy_share.trace_summary(json.loads(out[".json"].read_text()), cuda=False)
    assert again == busy
    assert "outside aten operators" in busy["cause"]


def test_analysis_page_explains_the_host_bound_point():
    import html
    import re

    from dnnroofline.report.analysis import analysis_section

    config = {
        "envs": {"h100": {"device": "cuda"}},
        "study": {"models": ["resnet18", "resnet50"], "precisions": ["amp", "bf16", "fp32"]},
    }
    metrics = pd.read_csv(H100 / "metrics.csv", dtype=METRICS_DTYPES)
    ceilings = json.loads((H100 / "results/h100/ceilings.json").read_text())
    page = analysis_section(config, metrics, h100_points().reset_index(), None, None, [ceilings])
    text = re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", "", page)))
    assert "1 host-bound (device busy under 75% of the step)" in text
    assert "Host-bound: the device ran kernels for only 65.1% of the step" in text
    assert "What the idle device waited on: not seen (no trace)." in text
    assert "keep the device fed first" in text


def test_trace_page_gives_the_busy_share_against_the_timed_median_and_the_cause(tmp_path):
    import html
    import re

    from dnnroofline.report.traces import traces_section

    cause = "78% of idle gaps after aten::item > aten::_local_scalar_dense (cudaStreamSynchronize)"
    doc = {
        "kind": "trace",
        "status": "ok",
        "env": "h100",
        "config": {"arch": "resnet18", "precision": "amp", "batch_size": 128},
        "trace": {"file": "t.json", "steps": 2, "bytes": 10},
        "step_time_s": {"median": 0.02},
        "table": {"basis": "self_device_s", "ops": [], "kernels": [], "coverage": {"ops": 0.9}},
        "busy": {"basis": "trace", "steps": 2, "busy_s_per_step": 0.005, "cause": cause},
    }
    metrics = pd.read_csv(H100 / "metrics.csv", dtype=METRICS_DTYPES)
    page = traces_section([(str(tmp_path / "t.ops.json"), doc)], metrics, str(tmp_path))
    text = re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", "", page)))
    share = 0.005 / 0.014173327922821045  # the timed runs' median, not the traced one
    assert f"{share:.1%} of the timed runs' median step" in text
    assert "host-bound" in text and f"What the idle device waited on: {cause}." in text


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")
def test_a_real_amp_cuda_trace_names_the_grad_scalers_sync(tmp_path):
    import os
    import subprocess

    out = {k: tmp_path / f"t{k}" for k in (".json", ".ops.json", ".ops.csv")}
    cmd = [sys.executable, str(SCRIPTS / "trace_step.py"), "--arch", "tiny"]
    cmd += ["--model-factory", "tiny_models:tiny_cnn", "--num-classes", "10", "--batch-size", "8"]
    cmd += ["--image-size", "32", "--warmup-iters", "2", "--steps", "3", "--backend", "cuda"]
    cmd += ["--precision", "amp", "--synthetic", "--trace-out", str(out[".json"])]
    cmd += ["--table-out", str(out[".ops.json"]), "--csv-out", str(out[".ops.csv"])]
    env = dict(os.environ, PYTHONPATH=str(ROOT / "tests/data/models"))
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    busy = json.loads(out[".ops.json"].read_text())["busy"]
    assert busy["basis"] == "trace" and busy["steps"] == 3 and busy["busy_s_per_step"] > 0
    # GradScaler.step checks found_inf with .item(): the device drains while the host waits
    assert "aten::item" in busy["cause"] and "Synchronize" in busy["cause"], busy["cause"]


def test_a_gap_with_the_next_kernel_already_launched_is_not_a_host_wait():
    events = [
        ev("kernel", "a", 0, 100, tid=7, correlation=1),
        ev("cuda_runtime", "cudaLaunchKernel", 50, 5, correlation=2),  # before a ends
        ev("kernel", "b", 150, 100, tid=7, correlation=2),
    ]
    assert busy_share.idle_causes(events) == {
        "with work queued (launch latency, waits between streams)": 50.0
    }
