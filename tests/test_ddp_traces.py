"""Traces of data-parallel steps (dnnroofline.measure.comm_trace): every rank traced, and the
step's communication time and share.

The real job: 2 gloo processes of 1 thread each trace a tiny conv net at 8 px
(tests/data/models/tiny_models.py) through trace_step.py, as the trace rule runs it.
The pure pieces run on trace events named as a real torch 2.x trace names them.
"""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from workflow_helpers import snakemake, write_config

from dnnroofline.errors import InputError
from dnnroofline.measure.comm_trace import (
    collective_of,
    communication,
    data_parallel_record,
    rank_trace_path,
)
from dnnroofline.measure.traces import table_csv

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "workflow" / "scripts"
MODELS = str(ROOT / "tests" / "data" / "models")
KEY = "cpu_ddp_tiny_fp32_bs2"
TINY = [
    "--arch", "tiny", "--model-factory", "tiny_models:tiny_cnn", "--num-classes", "10",
    "--image-size", "8", "--batch-size", "2", "--backend", "cpu", "--synthetic",
    "--warmup-iters", "1", "--steps", "3", "--top", "5", "--env", "cpu_ddp",
]  # fmt: skip
needs_two_cores = pytest.mark.skipif(
    (os.cpu_count() or 1) < 2, reason="2 data-parallel processes of 1 thread need 2 cores"
)


def x(name, ts, dur, cat="cpu_op", tid=1, **args):
    """A complete ("X") Chrome trace event; times in microseconds."""
    event = {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, "tid": tid}
    return dict(event, args=args) if args else event


def step(n, ts, dur, cat="user_annotation"):
    return x(f"ProfilerStep#{n}", ts, dur, cat=cat)


# --------------------------------------------------------------------------- pure pieces


@pytest.mark.parametrize(
    "event, device, expected",
    [
        (x("c10d::allreduce_", 0, 1), False, "all_reduce"),
        (x("c10d::broadcast_", 0, 1), False, "broadcast"),
        (x("c10d::_allgather_base_", 0, 1), False, "all_gather"),
        (x("gloo:all_reduce", 0, 1, cat="user_annotation"), False, "all_reduce"),
        (x("record_param_comms", 0, 1, **{"Collective name": "allreduce"}), False, "all_reduce"),
        (x("aten::add_", 0, 1), False, None),
        (x("torch::distributed::reducer::mul_out", 0, 1), False, None),
        (x("ncclDevKernel_AllReduce_Sum_f32_RING_LL(x)", 0, 1, cat="kernel"), True, "all_reduce"),
        (x("ncclKernel_Broadcast_RING_LL_Sum_int8_t", 0, 1, cat="kernel"), True, "broadcast"),
        # on CUDA the host side only enqueues the NCCL kernels: not communication time
        (x("nccl:all_reduce", 0, 1, cat="user_annotation"), True, None),
        (x("c10d::allreduce_", 0, 1), True, None),
        (x("sm90_xmma_gemm", 0, 1, cat="kernel"), True, None),
    ],
)
def test_collectives_are_named_as_real_traces_name_them(event, device, expected):
    assert collective_of(event, device) == expected


def test_communication_is_the_union_of_collectives_within_each_step():
    events = [
        step(0, 1000, 1000),
        step(1, 3000, 1000),
        # step 0: the caller's op and gloo's transfer overlap: 1200..1500 counts once
        x("c10d::allreduce_", 1200, 100),
        x("gloo:all_reduce", 1250, 250, cat="user_annotation", tid=7),
        x("gloo:broadcast", 1800, 400, cat="user_annotation", tid=8),  # clipped at 2000
        x("aten::mkldnn_convolution", 1000, 900),  # compute: not communication
        # step 1: 100 us of all_reduce; a collective between the steps is in neither
        x("gloo:all_reduce", 3500, 100, cat="user_annotation", tid=7),
        x("gloo:all_reduce", 2500, 100, cat="user_annotation", tid=7),
    ]
    c = communication({"traceEvents": events}, traced_s=0.0025)
    assert c["steps"] == 2
    assert c["by_step_s"] == pytest.approx([500e-6, 100e-6])
    assert c["total_s"] == pytest.approx(600e-6)
    assert c["per_step_s"] == pytest.approx(300e-6)
    assert c["share_of_step"] == pytest.approx(600e-6 / 0.0025)
    rows = {r["name"]: r for r in c["collectives"]}
    assert rows["all_reduce"]["per_step_s"] == pytest.approx(200e-6)  # (300 + 100) / 2
    assert rows["all_reduce"]["calls"] == 2  # gloo's transfers in the steps, not callers
    assert rows["broadcast"]["per_step_s"] == pytest.approx(100e-6)
    assert c["events"] == ["c10d::allreduce_", "gloo:all_reduce", "gloo:broadcast"]
    csv_rows = list(csv.DictReader(table_csv({"communication": c}).splitlines()))
    assert [(r["kind"], r["rank"], r["name"]) for r in csv_rows] == [
        ("communication", "0", "all collectives"),
        ("communication", "1", "all_reduce"),
        ("communication", "2", "broadcast"),
    ]
    assert float(csv_rows[0]["share_of_step"]) == pytest.approx(0.24)


def test_cuda_communication_is_nccl_kernels_within_the_gpu_step_range():
    events = [
        step(0, 1000, 300),  # the host range ends before its kernels have run
        step(0, 1100, 900, cat="gpu_user_annotation"),
        x("nccl:all_reduce", 1100, 50, cat="user_annotation"),
        x("ncclDevKernel_AllReduce_Sum_f32_RING_LL(x)", 1500, 400, cat="kernel"),
    ]
    c = communication({"traceEvents": events}, traced_s=0.001, device=True)
    assert c["by_step_s"] == pytest.approx([400e-6])
    assert c["share_of_step"] == pytest.approx(0.4)
    assert c["events"] == ["ncclDevKernel_AllReduce_Sum_f32_RING_LL(x)"]


def test_communication_refuses_a_trace_without_step_ranges():
    with pytest.raises(InputError, match=r"no ProfilerStep#N range"):
        communication({"traceEvents": [x("gloo:all_reduce", 0, 1)]}, traced_s=1.0)


def test_a_failed_job_names_every_ranks_trace_and_shows_the_failed_rank():
    merged = {
        "status": "error",
        "message": "rank 1: RuntimeError: boom",
        "failed_rank": 1,
        "ranks": [
            {"rank": 0, "status": None, "trace": None, "table": None},
            {"rank": 1, "status": "error", "trace": {"file": "t/x.rank1.json", "bytes": 0}},
        ],
    }
    doc = data_parallel_record(merged, 3, "t/x.ranks/x.json", "t/x.ops.json")
    assert doc["kind"] == "trace" and doc["table"] is None and doc["traced_rank"] == 1
    assert [r["trace"]["path_from_table"] for r in doc["ranks"]] == [
        "x.ranks/x.rank0.json",
        "x.ranks/x.rank1.json",
    ]
    assert doc["trace"]["rank"] == 1 and doc["ranks"][0]["trace"]["bytes"] == 0


# --------------------------------------------------------------------------- the real job


@pytest.fixture(scope="module")
def ddp_trace(tmp_path_factory):
    """A real 2-process gloo trace job, laid out as the trace rule lays it out."""
    traces = tmp_path_factory.mktemp("ddp") / "results" / "cpu_ddp" / "traces"
    out = {
        "trace": traces / f"{KEY}.ranks" / f"{KEY}.json",
        "table": traces / f"{KEY}.ops.json",
        "csv": traces / f"{KEY}.ops.csv",
    }
    env = dict(os.environ, OMP_NUM_THREADS="2", PYTHONPATH=MODELS)
    env["TMPDIR"] = str(traces.parent)  # the launcher's rendezvous folder
    proc = subprocess.run(
        [sys.executable, str(SCRIPTS / "trace_step.py"), *TINY, "--nproc", "2"]
        + ["--expect-threads", "1", "--run-id", f"{KEY}_trace"]
        + [f"--{k}-out={v}" for k, v in out.items()],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out, json.loads(out["table"].read_text())


@needs_two_cores
def test_every_rank_writes_its_own_trace_with_its_communication(ddp_trace):
    out, doc = ddp_trace
    assert doc["kind"] == "trace" and doc["status"] == "ok", doc["message"]
    assert doc["config"]["nproc"] == 2 and doc["config"]["dist_backend"] == "gloo"
    assert [r["rank"] for r in doc["ranks"]] == [0, 1]
    for r in doc["ranks"]:
        path = out["table"].parent / r["trace"]["path_from_table"]
        assert path == Path(rank_trace_path(str(out["trace"]), r["rank"]))
        assert path.name == f"{KEY}.rank{r['rank']}.json"  # run identity and rank
        kineto = json.loads(path.read_text())
        assert kineto["distributedInfo"]["rank"] == r["rank"]  # the rank, from the JSON
        assert r["trace"]["bytes"] == path.stat().st_size
        assert len(r["step_time_s"]["all"]) == 3
        comm = r["table"]["communication"]
        assert comm["total_s"] > 0 and 0 < comm["share_of_step"] < 1
        assert len(comm["by_step_s"]) == 3 and all(s > 0 for s in comm["by_step_s"])
        names = {c["name"] for c in comm["collectives"]}
        assert "all_reduce" in names  # DDP's gradient all-reduce, every step
        assert {"c10d::allreduce_", "gloo:all_reduce"} <= set(comm["events"])
        # each collective's union, summed, holds their union (shares rounded to 1e-6)
        shares = sum(c["share_of_step"] for c in comm["collectives"])
        assert shares >= comm["share_of_step"] - 1e-5
    # the top of the table JSON is the slowest rank's, named in the JSON
    slow = doc["slowest_rank"]
    medians = [r["step_time_s"]["median"] for r in doc["ranks"]]
    assert slow == medians.index(max(medians)) == doc["traced_rank"] == doc["trace"]["rank"]
    assert doc["table"] == doc["ranks"][slow]["table"]
    with out["csv"].open() as fh:
        rows = list(csv.DictReader(fh))
    comm_rows = [r for r in rows if r["kind"] == "communication"]
    assert comm_rows[0]["name"] == "all collectives"
    assert float(comm_rows[0]["share_of_step"]) == doc["table"]["communication"]["share_of_step"]


@needs_two_cores
def test_report_page_shows_each_ranks_communication_and_links_its_trace(ddp_trace, tmp_path):
    out, doc = ddp_trace
    results = out["table"].parents[2]
    metrics = tmp_path / "metrics.csv"
    metrics.write_text("run_id,env,model,precision,batch_size,status,step_median_s\n")
    page_path = results / "report_sections" / "traces.html"
    proc = subprocess.run(
        [sys.executable, str(SCRIPTS / "write_trace_section.py"), "--tables", str(out["table"])]
        + ["--metrics", str(metrics), "--out", str(page_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    page = page_path.read_text()
    hrefs = re.findall(r'<a href="([^"]+\.json)">', page)
    assert len(hrefs) == 2
    for r, href in zip(doc["ranks"], hrefs, strict=True):
        assert (page_path.parent / href).resolve() == (
            out["table"].parent / r["trace"]["path_from_table"]
        ).resolve()
        share = r["table"]["communication"]["share_of_step"]
        assert f"{share * 100:.1f}%" in page
    assert f"rank {doc['traced_rank']}'s, the slowest" in page
    assert "<code>all_reduce</code>" in page


# --------------------------------------------------------------------------- the workflow


@needs_two_cores
def test_a_data_parallel_env_gets_its_trace_job(tmp_path):
    config = {
        "envs": {"cpu": {"device": "cpu"}, "cpu_ddp": {"device": "cpu", "nproc": 2, "threads": 1}},
        "study": {"models": ["resnet18"], "precisions": ["fp32"], "batch_sizes": [8]},
    }
    config["study"].update(runs=1, warmup_iters=1, iters=2, image_size=32, data="synthetic")
    write_config(tmp_path, config)
    out = snakemake(tmp_path, "-n", "-p", "--cores", "2").stdout
    folder = "results/cpu_ddp/traces/cpu_ddp_resnet18_fp32_bs8.ranks"
    assert "rule trace_data_parallel:" in out and folder in out
    jobs = [c for c in out.split("\n") if "trace_step.py" in c and "--env cpu_ddp" in c]
    assert len(jobs) == 1
    assert "--nproc 2" in jobs[0] and "--expect-threads 1" in jobs[0]
    assert f"--trace-out {folder}/cpu_ddp_resnet18_fp32_bs8.json" in jobs[0]
    # the single-process env keeps its one trace file
    assert "--trace-out results/cpu/traces/cpu_resnet18_fp32_bs8.json" in out
