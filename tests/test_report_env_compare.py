"""Envs compared by how the step runs (dnnroofline.report.env_compare): the compile break-even
and the data-parallel scaling efficiency, on hand-computed numbers."""

from __future__ import annotations

import math
import re

import pandas as pd
import pytest

from dnnroofline.report import env_compare as ec
from dnnroofline.report.render import ENV

HERE = {"host": "box", "cpu_model": "EPYC", "gpus": []}
OTHER = {"host": "other", "cpu_model": "Xeon", "gpus": []}
INFOS = {"cpu": HERE, "cpu_compiled": HERE, "cpu_ddp": HERE, "cpu1": HERE, "far": OTHER}


def words(macro: str, facts: dict) -> str:
    """The analysis section's sentences on these facts (templates/parts/env_compare.html)."""
    page = ENV.from_string(
        '{% import "parts/env_compare.html" as e %}{{ e.' + macro + "(facts) }}"
    ).render(facts=facts)
    return re.sub(r"\s+", " ", page)


def compile_html(cfg, runs, infos):
    return words("compile", ec.compile_facts(cfg, runs, infos))


def scaling_html(cfg, tp, infos, metrics=None):
    return words("scaling", ec.scaling_facts(cfg, tp, infos, metrics))


def config(**envs):
    return {"envs": envs, "study": {"models": ["m"], "warmup_iters": 1}}


def run(env, step, warmup, first=None, *, warmup_iters=1, status="ok", batch=8):
    return {
        "env": env,
        "status": status,
        "config": {
            "arch": "m",
            "precision": "fp32",
            "batch_size": batch,
            "warmup_iters": warmup_iters,
        },
        "step_time_s": {"median": step} if status == "ok" else None,
        "warmup_s": warmup,
        "first_step_s": warmup if first is None else first,
    }


@pytest.mark.parametrize(
    "extra, eager, compiled, expected",
    [
        (10.0, 0.2, 0.1, 100),  # 10 s of compile won back at 0.1 s a step
        (10.05, 0.2, 0.1, 101),  # rounded up: the step where it has paid off
        (-1.0, 0.2, 0.1, 0),  # never cost more
        (10.0, 0.1, 0.1, math.inf),  # steps no faster: never
        (10.0, 0.1, 0.2, math.inf),
        (-1.0, 0.1, 0.2, math.inf),  # cheaper start, slower steps: loses in the long run
    ],
)
def test_break_even_steps(extra, eager, compiled, expected):
    assert ec.break_even_steps(extra, eager, compiled) == expected


def test_compile_pays_off_against_the_eager_env_on_the_same_machine():
    cfg = config(
        far={"device": "cpu"},  # eager, but another machine: never the partner
        cpu={"device": "cpu"},
        cpu_compiled={"device": "cpu", "compile": "default", "channels_last": True},
    )
    runs = [
        # eager: warm-up 0.25 s for 1 step of 0.2 s -> 0.05 s beyond steady state
        run("cpu", 0.2, 0.25),
        run("far", 0.01, 0.02),
        # compiled, two repeats: medians step 0.1, warm-up 15.1 (first step 15.0)
        run("cpu_compiled", 0.09, 15.09, 15.0),
        run("cpu_compiled", 0.11, 15.11, 15.0),
        run("cpu_compiled", 0.5, 99.0, status="error"),  # failed runs do not count
    ]
    (row,) = ec.compile_rows(cfg, runs, INFOS)
    assert row["eager_env"] == "cpu"
    assert row["overhead_s"] == pytest.approx(15.0)  # 15.1 - 1 x 0.1
    assert row["speedup"] == pytest.approx(2.0)
    # (15.0 - 0.05) / (0.2 - 0.1) = 149.5 -> 150 steps
    assert row["break_even"] == 150
    html = compile_html(cfg, runs, INFOS)
    assert "compile overhead 15.0 s beyond steady steps of 100 ms" in html
    assert "compiled steps are 2.00× as fast: compiling pays off after 150 steps." in html


def test_compiled_env_without_an_eager_one_on_its_machine_says_so():
    cfg = config(far={"device": "cpu"}, cpu_compiled={"device": "cpu", "compile": "default"})
    runs = [run("far", 0.2, 0.25), run("cpu_compiled", 0.1, 15.1)]
    (row,) = ec.compile_rows(cfg, runs, INFOS)
    assert row["eager_env"] is None and "break_even" not in row
    assert "No eager env on the same machine" in compile_html(cfg, runs, INFOS)


def test_eager_partner_prefers_the_same_other_options():
    cfg = config(
        cpu={"device": "cpu"},
        cpu_cl={"device": "cpu", "channels_last": True},
        cpu_compiled={"device": "cpu", "compile": "max-autotune", "channels_last": True},
    )
    infos = dict(INFOS, cpu_cl=HERE)
    assert ec.eager_partner("cpu_compiled", cfg, infos) == "cpu_cl"


def test_eager_partner_runs_the_same_threads():
    # a thread-scaling study beside a compiled env: 4x the threads is not compiling's gain
    cfg = config(
        cpu_t2={"device": "cpu", "threads": 2},
        cpu_t8={"device": "cpu", "threads": 8},
        cpu_t8_compiled={"device": "cpu", "threads": 8, "compile": "default"},
    )
    infos = {e: HERE for e in cfg["envs"]}
    runs = [run("cpu_t2", 0.40, 0.45), run("cpu_t8", 0.12, 0.17), run("cpu_t8_compiled", 0.1, 10.1)]
    (row,) = ec.compile_rows(cfg, runs, infos)
    assert row["eager_env"] == "cpu_t8"
    assert row["speedup"] == pytest.approx(1.2)


GPU_BOX = {"host": "gpubox", "cpu_model": "EPYC", "gpus": [{"name": "NVIDIA H100"}]}


def test_a_cpu_env_on_a_gpu_box_is_no_counterpart_of_its_cuda_envs():
    # listed first, on the same host with the same GPUs in its fingerprint, the cpu env
    # must not stand in for the eager GPU env (133x "from compiling") or the one-GPU one
    cfg = config(
        cpu={"device": "cpu"},
        gpu={"device": "cuda"},
        gpu_compiled={"device": "cuda", "compile": "default"},
        gpu_ddp={"device": "cuda", "nproc": 2},
    )
    infos = {
        "cpu": dict(GPU_BOX, device="cpu"),
        "gpu": dict(GPU_BOX, device="cuda"),
        "gpu_compiled": dict(GPU_BOX, device="cuda"),
        "gpu_ddp": dict(GPU_BOX, device="cuda"),
    }
    assert ec.eager_partner("gpu_compiled", cfg, infos) == "gpu"
    assert ec.scaling_baseline("gpu_ddp", cfg, infos, None) == "gpu"
    # a device left to auto counts as what its fingerprint says it resolved to
    auto = config(
        cpu={"device": "cpu"},
        gpu={"device": "auto"},
        gpu_compiled={"device": "cuda", "compile": "default"},
    )
    assert ec.eager_partner("gpu_compiled", auto, infos) == "gpu"
    only_cpu = config(cpu={"device": "cpu"}, gpu_compiled={"device": "cuda", "compile": "default"})
    assert ec.eager_partner("gpu_compiled", only_cpu, infos) is None


def tp_of(rows):
    return pd.DataFrame(
        [
            {"env": e, "model": "m", "precision": "fp32", "batch_size": 8, "ips_median": ips}
            for e, ips in rows
        ]
    )


def metrics_of(threads):
    return pd.DataFrame([{"env": e, "threads": t} for e, t in threads.items()])


def test_scaling_against_one_process_on_the_same_cores():
    cfg = config(
        cpu={"device": "cpu", "threads": 2},
        cpu1={"device": "cpu", "threads": 1},
        cpu_ddp={"device": "cpu", "nproc": 2, "threads": 1},
    )
    tp = tp_of([("cpu", 100.0), ("cpu1", 60.0), ("cpu_ddp", 90.0)])
    m = metrics_of({"cpu": 2, "cpu1": 1, "cpu_ddp": 1})
    (row,) = ec.scaling_rows(cfg, tp, INFOS, m)
    # 2 x 1 thread against 1 x 2 threads: the same cores, so efficiency = speedup
    assert row["base_env"] == "cpu"
    assert row["speedup"] == pytest.approx(0.9)
    assert row["scaling"] == pytest.approx(0.9)
    html = scaling_html(cfg, tp, INFOS, m)
    assert "0.90× the throughput on 2 cores against 2, scaling efficiency 90.0%" in html


def test_scaling_against_one_process_of_the_same_threads_counts_cores():
    cfg = config(
        cpu1={"device": "cpu", "threads": 1},
        cpu_ddp={"device": "cpu", "nproc": 2, "threads": 1},
    )
    tp = tp_of([("cpu1", 60.0), ("cpu_ddp", 90.0)])
    (row,) = ec.scaling_rows(cfg, tp, INFOS, metrics_of({"cpu1": 1, "cpu_ddp": 1}))
    assert row["speedup"] == pytest.approx(1.5)
    assert row["scaling"] == pytest.approx(90.0 / (60.0 * 2))  # linear would be 120


def test_scaling_on_gpus_counts_one_gpu_per_process():
    gpu = {"host": "g", "cpu_model": "Xeon", "gpus": [{"name": "H100"}] * 4, "device": "cuda"}
    cfg = config(one={"device": "cuda"}, four={"device": "cuda", "nproc": 4, "threads": 4})
    tp = tp_of([("one", 1000.0), ("four", 3600.0)])
    (row,) = ec.scaling_rows(cfg, tp, {"one": gpu, "four": gpu})
    assert (row["unit"], row["resources"], row["base_resources"]) == ("GPU", 4, 1)
    assert row["scaling"] == pytest.approx(0.9)


def test_data_parallel_env_without_a_single_process_one_says_so():
    cfg = config(far={"device": "cpu"}, cpu_ddp={"device": "cpu", "nproc": 2, "threads": 1})
    tp = tp_of([("far", 100.0), ("cpu_ddp", 90.0)])
    (row,) = ec.scaling_rows(cfg, tp, INFOS)
    assert row["base_env"] is None and "efficiency" not in row
    assert "No <code>nproc: 1</code> env on the same machine" in scaling_html(cfg, tp, INFOS)


def test_no_compiled_or_parallel_env_gives_a_note():
    cfg = config(cpu={"device": "cpu"})
    assert "No env compiles the step" in compile_html(cfg, [run("cpu", 0.2, 0.25)], INFOS)
    assert "No env trains data-parallel" in scaling_html(cfg, tp_of([("cpu", 1.0)]), INFOS)


def test_describe_names_how_the_step_runs():
    opts = ec.env_options(
        config(x={"device": "cpu", "compile": "default", "channels_last": True, "nproc": 2}), "x"
    )
    assert (
        ec.describe(opts, 1)
        == "torch.compile default, channels-last, DDP 2 processes x 1 thread (gloo)"
    )
    assert ec.describe(ec.env_options(config(y={"device": "cuda"}), "y")) == "eager"
