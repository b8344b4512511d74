"""The real workflow: lint, dry runs of large matrices, and a tiny study end to end."""

import json
import math
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
import yaml
from workflow_helpers import (
    BIN,
    CIFAR,
    FAKE_CUDA,
    ROOT,
    TINY,
    TINY_POINTS,
    TINY_RUNS,
    job_counts,
    read_csv,
    snakemake,
    write_config,
)

from dnnroofline.estimate.roofline import HOST_BOUND_BELOW
from dnnroofline.estimate.traffic import bound_of_range

pytestmark = pytest.mark.workflow


def test_lint_snakefmt_ruff_clean():
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}")
    lint = subprocess.run(
        [str(BIN / "snakemake"), "--lint"], cwd=ROOT, capture_output=True, text=True, env=env
    )
    assert "Congratulations" in lint.stdout + lint.stderr, lint.stdout + lint.stderr
    fmt = subprocess.run([str(BIN / "snakefmt"), "--check", "."], cwd=ROOT, capture_output=True)
    assert fmt.returncode == 0, fmt.stderr.decode()
    ruff = subprocess.run([str(BIN / "ruff"), "check", "."], cwd=ROOT, capture_output=True)
    assert ruff.returncode == 0, ruff.stdout.decode()
    ruff_fmt = subprocess.run(
        [str(BIN / "ruff"), "format", "--check", "."], cwd=ROOT, capture_output=True
    )
    assert ruff_fmt.returncode == 0, ruff_fmt.stdout.decode()


def test_dry_run_of_a_1000_run_matrix(tmp_path):
    config = {
        "envs": {"local": {"device": "auto", "threads": 2}, "gcp_l4": {"device": "cuda"}},
        "measure_envs": ["local"],
        "study": {
            "models": ["resnet18", "resnet50", "mobilenet_v2", "vgg16", "efficientnet_b0"],
            # fp32 alone: every CPU runs it (bf16 needs AVX512_BF16 or AMX, and a CPU
            # without them rightly refuses it at validation).
            "precisions": ["fp32"],
            "batch_sizes": [1, 2, 4, 8, 16, 32, 64, 128, 256, 512],
            "runs": 20,
        },
    }
    write_config(tmp_path, config)
    counts = job_counts(snakemake(tmp_path, "-n", "--cores", "2", "--quiet", "rules").stdout)
    assert counts["train"] == 5 * 1 * 10 * 20
    assert counts["complexity"] == 5 * 10
    assert counts["ceilings"] == 1 and counts["env_info"] == 1
    assert "ncu" not in counts  # no CUDA here, and gcp_l4 is not measured on this machine
    # The matrix of both envs (170 KiB as JSON) is written for real: passed on a command
    # line, it failed with "Argument list too long" (128 KiB at most per argument).
    snakemake(tmp_path, "--cores", "1", "results/study_matrix.json")
    matrix = json.loads((tmp_path / "results" / "study_matrix.json").read_text())
    assert len(matrix) == 2 * 1000
    assert sum(r["measured_here"] for r in matrix) == 1000
    assert {r["env"] for r in matrix if not r["measured_here"]} == {"gcp_l4"}


def test_single_plot_target_builds_only_what_it_needs(tmp_path):
    write_config(tmp_path, TINY)
    out = snakemake(tmp_path, "-n", "--cores", "2", "results/plots/roofline_local.png").stdout
    counts = job_counts(out)
    assert counts["plot_roofline_env"] == 1
    assert counts["train"] == TINY_RUNS
    assert counts["trace"] == TINY_POINTS  # each point's kernel-busy share comes from its trace
    for unneeded in ("report_sections", "plot_throughput", "plot_roofline_all", "all"):
        assert unneeded not in counts


def test_bad_config_rejected_before_any_job(tmp_path):
    bad = json.loads(json.dumps(TINY))
    bad["study"]["precisions"] = ["fp32", "amp"]
    write_config(tmp_path, bad)
    proc = snakemake(tmp_path, "-n", "--cores", "1", check=False)
    assert proc.returncode != 0
    assert "'amp' is not supported on env 'local' (device cpu)" in proc.stdout + proc.stderr
    bad["study"]["precisions"] = ["fp32"]
    bad["study"]["batch_sizes"] = [0]
    write_config(tmp_path, bad)
    proc = snakemake(tmp_path, "-n", "--cores", "1", check=False)
    assert proc.returncode != 0 and "batch_sizes" in proc.stdout + proc.stderr


def test_cores_below_the_envs_threads_refused_before_any_job(tmp_path):
    one = {"envs": {"local": {"device": "auto", "threads": 2}},
           "study": dict(TINY["study"], models=["resnet18"], batch_sizes=[2], runs=1),
           "ceilings": {"quick": True}}  # fmt: skip
    write_config(tmp_path, one)
    proc = snakemake(tmp_path, "--cores", "1", check=False)
    assert proc.returncode != 0
    assert (
        "--cores 1 is fewer than the threads a measurement holds (env 'local': 2): its jobs "
        "would be refused. Run with --cores 2"
    ) in proc.stderr
    assert not (tmp_path / "results").exists()  # not even env_info ran
    # a target that measures nothing runs with any --cores, and --touch runs no job
    snakemake(tmp_path, "--cores", "1", "results/complexity/resnet18_bs2.json")
    assert (tmp_path / "results/complexity/resnet18_bs2.json").exists()
    snakemake(tmp_path, "--touch", "results/local/ceilings.json")


def test_a_moved_checkout_reruns_no_finished_measurement(tmp_path):
    """Params hold the entry scripts' paths relative to the working directory: an absolute
    path made every finished measurement re-run once the checkout had moved."""
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    first = tmp_path / "first"
    for name in tracked.stdout.split():
        (first / name).parent.mkdir(parents=True, exist_ok=True)
        (first / name).write_bytes((ROOT / name).read_bytes())
    one = {"envs": {"local": {"device": "auto", "threads": 1}},
           "study": dict(TINY["study"], models=["resnet18"], batch_sizes=[2], runs=1),
           "ceilings": {"quick": True}}  # fmt: skip
    write_config(first, one)
    run = "results/local/runs/local_resnet18_fp32_bs2_run1.json"

    def here(checkout, *args):
        return snakemake(checkout, "-s", str(checkout / "Snakefile"), "--cores", "1", *args)

    here(first, run)
    moved = tmp_path / "moved"
    first.rename(moved)
    out = here(moved, "-n", run)
    assert "Nothing to be done" in out.stdout + out.stderr, out.stdout[-2000:]


def test_measure_only_measures_and_another_machine_analyses_the_copy(tmp_path):
    """`snakemake measure` on a machine with only the measuring packages (make gpu-wheels
    PART=measure); its results/{env}/ copied into a study elsewhere, read, never re-run."""
    box = {"envs": {"box": {"device": "cpu", "threads": 1}},
           "study": dict(TINY["study"], models=["resnet18"], batch_sizes=[2], runs=1),
           "ceilings": {"quick": True}}  # fmt: skip
    there, here = tmp_path / "there", tmp_path / "here"
    write_config(there, box)
    out = snakemake(there, "--cores", "1", "measure")
    counts = job_counts(out.stdout + out.stderr)
    assert counts == {
        "env_info": 1,
        "ceilings": 1,
        "efficiency": 1,  # the model's tables are a measurement of the machine too
        "train": 1,
        "trace": 1,
        "measure": 1,
        "total": 6,
    }
    made = sorted(str(p.relative_to(there / "results")) for p in (there / "results").iterdir())
    assert made == ["box"]  # no complexity, metrics, plots or report sections
    write_config(here, dict(box, measure_envs=[]))
    shutil.copytree(there / "results" / "box", here / "results" / "box")  # times kept
    out = snakemake(here, "--cores", "1", "results/roofline_points.csv")
    assert set(job_counts(out.stdout + out.stderr)) == {
        "complexity", "metrics", "roofline_points", "total"
    }  # fmt: skip
    (point,) = read_csv(here / "results" / "roofline_points.csv")
    assert point["env"] == "box" and point["runs_ok"] == "1"


def test_measure_needs_only_the_measuring_env_files():
    """make gpu-wheels PART=measure brings the packages of gpu_wheels.MEASURE_ENV_FILES: every
    rule that `snakemake measure` can run (CUDA, CPU and perf envs) must use one of them."""
    from test_conda_envs import rule_blocks

    from dnnroofline.tools.gpu_wheels import MEASURE_ENV_FILES

    config = {"envs": {"gpu": {"device": "auto"}, "cpu": {"device": "cpu", "threads": 1}},
              "study": dict(TINY["study"], models=["resnet18"], batch_sizes=[2], runs=1),
              "measure_envs": ["gpu", "cpu"], "perf": {"enabled": True}}  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        write_config(Path(tmp), config)
        out = snakemake(Path(tmp), "measure", "-n", "--quiet", "rules", env_extra=FAKE_CUDA)
    rules = set(job_counts(out.stdout)) - {"measure", "total"}
    assert rules == {
        "env_info", "ceilings", "efficiency", "train", "trace", "ncu_selftest", "ncu", "perf"
    }  # fmt: skip
    conda = {
        name: re.search(r'conda:\s*\n\s*"\.\./([^"]+)"', body) for _, name, body in rule_blocks()
    }
    assert {conda[r].group(1) for r in rules} == set(MEASURE_ENV_FILES)


def test_tiny_study_end_to_end(tiny_study):
    results = tiny_study / "results"
    metrics = read_csv(results / "metrics.csv")
    assert len(metrics) == TINY_RUNS
    assert {row["status"] for row in metrics} == {"ok"}
    assert all(float(row["images_per_s"]) > 0 for row in metrics)
    points = read_csv(results / "roofline_points.csv")
    assert len(points) == TINY_POINTS
    for p in points:
        assert p["ai_source"] == "analytic"
        # Each point's busy share comes from its step trace (aten operators against the
        # step); a tiny CNN may spend most of its step in framework overhead: host-bound.
        assert p["kernel_time_source"] == "trace_cpu_ops"
        assert 0 < float(p["kernel_busy_share"]) <= 1
        if float(p["kernel_busy_share"]) < HOST_BOUND_BELOW:
            assert p["bound"] == "host", p
        else:  # the AI range (no cache credit) may straddle the ridge: inconclusive
            ai_low, ai_high, ridge = (float(p[k]) for k in ("ai_low", "ai_high", "ridge_ai"))
            assert p["bound"] == bound_of_range(ai_low, ai_high, ridge), p
        assert float(p["efficiency"]) > 0
        assert int(p["runs_ok"]) == 2
    for name in ("roofline_local", "roofline_all", "throughput"):
        assert (results / "plots" / f"{name}.png").read_bytes()[:4] == b"\x89PNG"
        assert (results / "plots" / f"{name}.svg").stat().st_size > 1000
    report = (results / "report.html").read_text(errors="replace")
    assert len(report) > 100_000
    for section in ("design", "complexity", "measurement", "roofline", "analysis", "traces"):
        assert f"{section}.html" in report
    # the model (issue 28): every point predicted from microbenchmarks, then checked
    assert (results / "local" / "efficiency.json").is_file()
    predicted = [p for p in read_csv(results / "predictions.csv") if p["kind"] == "measured"]
    assert len(predicted) == TINY_POINTS
    assert all(float(p["predicted_images_per_s"]) > 0 for p in predicted)
    check = read_csv(results / "prediction_check.csv")
    checked = [r for r in check if r["method"] == "model"]
    assert len(checked) == TINY_POINTS
    for r in checked:  # scored on step time, images/s beside it (issue 36)
        assert float(r["measured_step_s"]) > 0 and float(r["predicted_step_s"]) > 0
        assert math.isfinite(float(r["error_pct"]))
        assert math.isfinite(float(r["images_per_s_error_pct"]))
        # a CPU's measured peak leaves the runtime out: the runs recorded it
        assert r["measured_peak_memory_source"] == "max_rss_bytes-rss_before_model"
    # model_loo: resnet18 and the CIFAR model are two families, under the 3 points a fit
    # on other families needs: no prediction, and the reason
    loo = [r for r in check if r["method"] == "model_loo"]
    assert len(loo) == TINY_POINTS and all(r["note"].startswith("no prediction") for r in loo)
    # model_ceilings: the model without its sweep, on tables from the ceilings alone (their
    # roof GEMMs, convolutions and STREAM): another prediction than the model's
    models = ("model", "model_ceilings")
    by_point = {(r["model"], r["method"]): float(r["predicted_step_s"])
                for r in check if r["method"] in models}  # fmt: skip
    for model in TINY["study"]["models"]:
        name = model if isinstance(model, str) else model["name"]
        ceilings_model = by_point[(name, "model_ceilings")]
        assert ceilings_model > 0 and ceilings_model != by_point[(name, "model")]
    assert (results / "plots" / "prediction_parity.svg").stat().st_size > 1000
    assert "model.html" in report
    assert "Predicted, not measured." in (results / "report_sections" / "model.html").read_text()
    # what the study itself cost: the benchmark: files of the jobs, then the timed runs
    assert len(list((results / "benchmarks" / "complexity").glob("*.tsv"))) == TINY_POINTS
    assert (results / "local" / "benchmarks" / "ceilings.tsv").is_file()
    cost = (results / "report_sections" / "reproducibility.html").read_text()
    cost = cost.split("What the study itself cost")[1]
    stages = ("ceilings", 1), ("complexity", TINY_POINTS), ("traces", TINY_POINTS)
    for stage, jobs in (*stages, ("timed runs", TINY_RUNS)):
        assert re.search(rf"<td[^>]*>{stage}</td>\s*<td[^>]*>{jobs}</td>", cost), stage


def test_tiny_study_records_fits_draws_and_predicts_energy(tiny_study):
    """Energy through every stage (issue 40), on the fake RAPL package the tiny study
    reads (conftest.py): the runs' joules, the ceilings' metered kernels and costs, the
    energy roofline's points, the report's page, and J/image predicted and checked."""
    results = tiny_study / "results"
    iters, batch = TINY["study"]["iters"], TINY["study"]["batch_sizes"][0]
    for path in sorted((results / "local" / "runs").glob("*.json")):
        energy = json.loads(path.read_text())["energy"]
        assert energy["available"] and energy["source"] == "rapl", (path.name, energy)
        assert energy["counter"] == "powercap energy_uj: package-0"
        assert energy["joules"] > 0 and energy["seconds"] > 0
        assert energy["joules_per_image"] == pytest.approx(energy["joules"] / (iters * batch))
    metrics = read_csv(results / "metrics.csv")
    assert {r["energy_source"] for r in metrics} == {"rapl"}
    assert all(float(r["joules_per_image"]) > 0 for r in metrics)
    ceilings = json.loads((results / "local" / "ceilings.json").read_text())["energy"]
    assert ceilings["available"] and ceilings["source"] == "rapl"
    assert [k["kind"] for k in ceilings["kernels"]] == ["idle", "gemm", "copy"]
    for k in ceilings["kernels"]:
        assert k["joules"] > 0 and k["seconds"] >= ceilings["window_s"], k
    costs = ceilings["costs"]
    assert costs is not None, ceilings["costs_reason"]
    assert set(costs["pj_per_flop"]) == {"fp32"} and costs["static_power_w"] > 0
    svg = (results / "plots" / "energy_roofline.svg").read_text()
    for model in TINY["study"]["models"]:
        name = model if isinstance(model, str) else model["name"]
        assert f'id="point-local-{name}-fp32-bs{batch}"' in svg
    page = (results / "report_sections" / "energy.html").read_text()
    assert "No energy data" not in page and "powercap energy_uj" in page
    assert "energy.html" in (results / "report.html").read_text(errors="replace")
    predicted = [p for p in read_csv(results / "predictions.csv") if p["kind"] == "measured"]
    assert all(float(p["predicted_joules_per_image"]) > 0 for p in predicted)
    model_rows = [r for r in read_csv(results / "prediction_check.csv") if r["method"] == "model"]
    for r in model_rows:
        assert float(r["measured_joules_per_image"]) > 0
        assert math.isfinite(float(r["joules_per_image_error_pct"]))


def test_rules_take_named_functions_not_lambdas():
    # the workflow catalog's style: per-job values come from named functions in common.smk
    for smk in sorted((ROOT / "rules").glob("*.smk")) + [ROOT / "Snakefile"]:
        for number, line in enumerate(smk.read_text().splitlines(), 1):
            code = line.split("#")[0]
            assert not re.search(r"\blambda\b", code), f"{smk.name}:{number}: {line.strip()}"


def test_factory_model_goes_through_every_stage(tiny_study):
    """The CIFAR example (a user's module:callable) through complexity, timed runs, the
    roofline, traces and the report (ncu needs a GPU: tests/test_ncu_command.py)."""
    results = tiny_study / "results"
    model = CIFAR["name"]
    batches = TINY["study"]["batch_sizes"]
    for batch in batches:
        cx = json.loads((results / "complexity" / f"{model}_bs{batch}.json").read_text())
        assert cx["arch"] == model and cx["num_classes"] == 10 and cx["image_size"] == 32
        assert cx["flops"]["train_step"] > 0
        for n in (1, 2):
            run = json.loads(
                (results / "local/runs" / f"local_{model}_fp32_bs{batch}_run{n}.json").read_text()
            )
            assert run["status"] == "ok", run["message"]
            assert run["config"]["model_factory"] == CIFAR["factory"]
            assert run["config"]["num_classes"] == 10 and run["config"]["image_size"] == 32
        table = json.loads(
            (results / "local/traces" / f"local_{model}_fp32_bs{batch}.ops.json").read_text()
        )
        assert table["status"] == "ok" and table["config"]["model_factory"] == CIFAR["factory"]
        assert table["table"]["ops"][0]["share_of_step"] > 0
    points = [p for p in read_csv(results / "roofline_points.csv") if p["model"] == model]
    assert len(points) == len(batches) and all(float(p["attained_flops"]) > 0 for p in points)
    for section in ("complexity", "measurement", "roofline"):
        assert model in (results / "report_sections" / f"{section}.html").read_text()
    traces = (results / "report_sections/traces.html").read_text()
    assert f"local · {model} · fp32 · bs {batches[-1]}" in traces


def test_measurements_never_overlap_and_use_declared_threads(tiny_study):
    results = tiny_study / "results" / "local"
    spans = []
    # timed runs and traces: both hold the measurement slot
    for path in sorted((results / "runs").glob("*.json")) + sorted(
        (results / "traces").glob("*.ops.json")
    ):
        run = json.loads(path.read_text())
        assert run["config"]["threads"] == TINY["envs"]["local"]["threads"], path.name
        spans.append((run["start_time"], run["end_time"], path.name))
    ceilings = json.loads((results / "ceilings.json").read_text())
    spans.append((ceilings["start_time"], ceilings["end_time"], "ceilings"))
    spans.sort()
    assert len(spans) == TINY_RUNS + TINY_POINTS + 1
    for (_, end, a), (start, _, b) in zip(spans, spans[1:], strict=False):
        assert end <= start, f"{a} overlaps {b}"


def test_rerun_does_only_new_work(tiny_study, tmp_path):
    # Nothing left to do after a complete run.
    out = snakemake(tiny_study, "-n", "--cores", "2").stdout
    assert "Nothing to be done" in out
    # A new batch size adds only its own runs and complexity, plus the aggregates.
    config = json.loads(json.dumps(TINY))
    config["study"]["batch_sizes"] = [*TINY["study"]["batch_sizes"], 8]
    extra = tmp_path / "more.yaml"
    extra.write_text(yaml.safe_dump(config))
    counts = job_counts(
        snakemake(tiny_study, "-n", "--cores", "2", "--configfile", str(extra)).stdout
    )
    models = len(TINY["study"]["models"])
    assert counts["train"] == models * TINY["study"]["runs"]
    assert counts["complexity"] == models
    assert counts["trace"] == models
    assert "ceilings" not in counts and "env_info" not in counts


needs_two_cores = pytest.mark.skipif(
    (os.cpu_count() or 1) < 2, reason="2 data-parallel processes of 1 thread need 2 cores"
)


@needs_two_cores
def test_cpu_envs_example_plans_eager_compiled_and_data_parallel(tmp_path):
    write_config(tmp_path, yaml.safe_load((ROOT / "config/examples/cpu_envs.yaml").read_text()))
    out = snakemake(tmp_path, "-n", "-p", "--cores", "2").stdout
    for env in ("cpu", "cpu_compiled", "cpu_ddp"):
        for model in ("resnet18", "mobilenet_v2"):
            assert f"results/{env}/runs/{env}_{model}_fp32_bs8_run2.json" in out
    # a data-parallel env's trace is a folder of per-rank traces (test_ddp_traces.py)
    assert "results/cpu/traces/cpu_resnet18_fp32_bs8.json" in out
    assert "results/cpu_ddp/traces/cpu_ddp_resnet18_fp32_bs8.ranks" in out
    ddp = [c for c in out.split("\n") if "run_train.py" in c and "--env cpu_ddp" in c]
    assert ddp and all("--nproc 2" in c and "--expect-threads 1" in c for c in ddp)
    assert all("--compile default --channels-last" in c for c in out.split("\n")
               if "run_train.py" in c and "--env cpu_compiled" in c)  # fmt: skip


def test_an_envs_variables_reach_every_measurement_of_it_and_no_other(tmp_path):
    config = yaml.safe_load((ROOT / "config/examples/allocator.yaml").read_text())
    config["study"].update(models=["resnet18"], batch_sizes=[8])
    config["perf"] = {"enabled": True}
    write_config(tmp_path, config)
    out = snakemake(tmp_path, "-n", "-p", "--cores", "2").stdout
    flags = ("--environ MALLOC_MMAP_THRESHOLD_=33554432 "
             "--environ MALLOC_TRIM_THRESHOLD_=1099511627776")  # fmt: skip
    scripts = ("run_train.py", "trace_step.py", "profile_perf.py", "ceilings.py",
               "op_class_sweep.py")  # fmt: skip
    for name in scripts:
        lines = [c for c in out.split("\n") if f"{name} " in c]
        kept = [c for c in lines if "--env local_kept" in c]
        assert kept and all(flags in c for c in kept), (name, lines)
        assert all("--environ" not in c for c in lines if "--env local " in c), (name, lines)


@needs_two_cores
def test_eager_compiled_and_data_parallel_envs_compared_in_the_report(tmp_path, monkeypatch):
    """Three envs on this machine, a tiny model: each measured, then compared."""
    monkeypatch.setenv("PYTHONPATH", str(ROOT / "tests" / "data" / "models"))
    tiny = {"name": "tiny", "factory": "tiny_models:tiny_cnn", "image_size": 8, "num_classes": 10}
    config = {
        "envs": {
            "cpu": {"device": "cpu"},
            "cpu_compiled": {"device": "cpu", "compile": "default", "channels_last": True},
            "cpu_ddp": {"device": "cpu", "nproc": 2, "threads": 1},
        },
        "study": {
            "models": [tiny],
            "precisions": ["fp32"],
            "batch_sizes": [2],
            "runs": 1,
            "warmup_iters": 1,
            "iters": 3,
            "data": "synthetic",
        },
        "ceilings": {"quick": True},
        "traces": {"enabled": False},  # another compile; the traces are tested on their own
    }
    write_config(tmp_path, config)
    snakemake(tmp_path, "--cores", "2", "results/report_sections/analysis.html")
    results = tmp_path / "results"
    metrics = {r["env"]: r for r in read_csv(results / "metrics.csv")}
    assert {r["status"] for r in metrics.values()} == {"ok"}
    assert (metrics["cpu_ddp"]["nproc"], metrics["cpu_ddp"]["threads"]) == ("2", "1")
    runs = {e: json.loads((results / e / "runs" / f"{e}_tiny_fp32_bs2_run1.json").read_text())
            for e in metrics}  # fmt: skip
    ddp = runs["cpu_ddp"]
    assert ddp["omp_num_threads"] == "2"  # the job held both processes' cores
    assert [len(r["step_time_s"]["all"]) for r in ddp["ranks"]] == [3, 3]
    slowest = max(r["step_time_s"]["median"] for r in ddp["ranks"])
    assert ddp["images_per_s"] == pytest.approx(2 * 2 / slowest)
    compiled = runs["cpu_compiled"]
    assert 0 < compiled["first_step_s"] <= compiled["warmup_s"]
    spans = sorted((r["start_time"], r["end_time"]) for r in runs.values())
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:], strict=False))

    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", (results / "report_sections" /
                                                        "analysis.html").read_text()))  # fmt: skip
    assert re.search(
        r"tiny · fp32 · bs 2 on cpu_compiled \(torch.compile default\): first step [\d.,]+ m?s, "
        r"warm-up [\d.,]+ m?s, compile overhead .* eager on cpu a step takes .*: "
        r"compiling (pays off after [\d,]+ steps?|never pays off here)",
        text,
    ), text[:3000]
    cpu_threads = int(metrics["cpu"]["threads"])
    eff = float(metrics["cpu_ddp"]["images_per_s"]) / (
        float(metrics["cpu"]["images_per_s"]) * 2 / cpu_threads
    )
    assert (
        "on cpu_ddp (eager, DDP 2 processes x 1 thread (gloo)): " in text
        and f"against cpu (1 process x {cpu_threads} threads)" in text
        and f"scaling efficiency {eff * 100:.1f}%" in text
    ), text[:3000]
