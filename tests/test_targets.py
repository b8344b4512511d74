"""The rules' logic without Snakemake (issue 38): the result paths and target lists of a
Study (dnnroofline.study.targets), copied results (.copied), per-job values (.jobs) and the
Slurm setup (.cluster), on small studies built from configs as the Snakefile builds them.
"""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from dnnroofline.errors import InputError
from dnnroofline.estimate.op_classes import STEP_VARIANTS, step_variant
from dnnroofline.measure.envinfo import check_copied_env
from dnnroofline.report import COMPARE_SECTION, SECTION_FILES, section_file
from dnnroofline.study import cluster, jobs
from dnnroofline.study.config import Study
from dnnroofline.study.copied import find_copied_envs
from dnnroofline.study.identity import CONFIG_KEY_PATTERN, config_file, env_file, inventory_path
from dnnroofline.study.schema import checked_config
from dnnroofline.study.targets import (
    COMPARE_FILES,
    Targets,
    baseline_inputs,
    existing_paths,
    here_or_absolute,
)

ROOT = Path(__file__).resolve().parents[1]
H100_RESULTS = ROOT / "examples" / "h100" / "results" / "h100"
MODELS = ["resnet18", "resnet50", "mobilenet_v2"]

# two models, one batch size, two repeats on one CPU env (tests/test_faults.py's GOOD, smaller)
SMALL = {
    "envs": {"local": {"device": "cpu", "threads": 1}},
    "study": {
        "models": ["resnet18", "mobilenet_v2"],
        "precisions": ["fp32"],
        "batch_sizes": [2],
        "runs": 2,
    },
}
# one CPU env measured here beside the H100 study of examples/h100, copied in
WITH_H100 = {
    "envs": {
        "local": {"device": "cpu", "threads": 1, "precisions": ["fp32"]},
        "h100": {"device": "cuda", "gpu_name": "H100"},
    },
    "study": {
        "models": [{"name": "resnet50", "batch_sizes": [256]}, "resnet18"],
        "precisions": ["fp32", "amp", "bf16"],
        "batch_sizes": [128],
        "runs": 3,
        "image_size": 224,
    },
}


def study_of(config: dict, device: str = "cpu", **edits) -> Study:
    """The Study of ``config`` (a copy, with ``edits`` as dotted keys) as the Snakefile
    loads it, on a machine whose facts are given, not detected."""
    config = copy.deepcopy(config)
    for dotted, value in edits.items():
        *keys, last = dotted.split("__")
        node = config
        for key in keys:
            node = node.setdefault(key, {})
        node[last] = value
    config = checked_config(config, ROOT / "config" / "schema.yaml")
    return Study(
        config,
        machine_device=device,
        known_models=MODELS,
        cpu_count=8,
        cpu_flags=[],
        gpu_count=1 if device == "cuda" else 0,
    )


def targets_of(study: Study, copied=()) -> Targets:
    """The Targets the workflow builds (rules/common.smk), the later stages' names passed in."""
    return Targets(
        study,
        tuple(copied),
        report_pages=SECTION_FILES,
        compare_page=section_file(COMPARE_SECTION),
        step_variant=step_variant,
        step_variants=STEP_VARIANTS,
    )


def key(model: str, batch: int = 2, env: str = "local", precision: str = "fp32") -> str:
    return f"{env}_{model}_{precision}_bs{batch}"


# ---------------------------------------------------------------- result paths


def test_result_paths_take_wildcards_so_rules_and_targets_share_one_spelling():
    measured = CONFIG_KEY_PATTERN.replace("{env}", "{menv}")
    assert config_file("{menv}", "ncu", measured, ".json") == (
        "results/{menv}/ncu/{menv}_{model}_{precision}_bs{batch}.json"
    )
    assert env_file("gpu", "ncu/selftest.json") == "results/gpu/ncu/selftest.json"
    assert inventory_path("{model}", "amp", "{batch}", "cuda_cl") == (
        "results/complexity/{model}_amp_bs{batch}_cuda_cl_ops.json"
    )


# ---------------------------------------------------------------- one CPU env


def test_a_cpu_study_runs_measures_and_reports_these_files():
    t = targets_of(study_of(SMALL))
    models = ("resnet18", "mobilenet_v2")
    runs = [f"results/local/runs/{key(m)}_run{n}.json" for m in models for n in (1, 2)]
    assert t.run_files() == runs
    traces = []
    for m in models:
        stem = f"results/local/traces/{key(m)}"
        traces += [f"{stem}.json", f"{stem}.ops.json", f"{stem}.ops.csv"]
    assert t.measure_targets() == [
        "results/local/env_info.json",
        "results/local/ceilings.json",
        "results/local/efficiency.json",
        *runs,
        *traces,
    ]
    everything = t.all_targets()
    assert everything[:2] == ["results/metrics.csv", "results/roofline_points.csv"]
    for page in SECTION_FILES:
        assert f"results/report_sections/{page}" in everything
    for made in ("roofline_local.png", "roofline_all.svg", "throughput.png", "roofline_local.html"):
        assert f"results/plots/{made}" in everything
    assert "results/report_sections/traces.html" in everything
    # no GPU: no capture, no self-test, but the page comparing ncu with the analytic counts
    assert not any("/ncu/" in f or "kernels/" in f for f in everything)
    assert everything.count("results/report_sections/ncu_vs_analytic.html") == 1
    assert not set(COMPARE_FILES.values()) & set(everything)  # no compare: block
    assert len(everything) == len(set(everything))
    assert t.ceilings_files() == ["results/local/ceilings.json"]
    assert t.complexity_files() == [
        "results/complexity/mobilenet_v2_bs2.json",
        "results/complexity/resnet18_bs2.json",
    ]


def test_traces_off_and_perf_on_change_the_targets():
    on = targets_of(study_of(SMALL))
    assert "results/benchmarks/complexity/resnet18_bs2.tsv" in on.benchmark_files()
    assert f"results/local/benchmarks/traces/{key('resnet18')}.tsv" in on.benchmark_files()
    assert on.perf_files() == []
    t = targets_of(study_of(SMALL, traces__enabled=False, perf__enabled=True))
    assert t.trace_files() == t.trace_tables() == t.trace_targets() == []
    assert not any("traces" in f for f in t.benchmark_files() + t.all_targets())
    perf = [f"results/local/perf/{key(m)}.json" for m in ("resnet18", "mobilenet_v2")]
    assert t.perf_files() == perf
    assert t.measure_targets()[-2:] == perf and set(perf) <= set(t.all_targets())


def test_a_data_parallel_env_traces_into_a_folder_of_ranks():
    config = copy.deepcopy(SMALL)
    config["envs"]["ddp"] = {"device": "cpu", "nproc": 2, "threads": 1}
    t = targets_of(study_of(config))
    assert t.single_process_envs() == ["local"] and t.data_parallel_envs() == ["ddp"]
    ddp = key("resnet18", env="ddp")
    assert f"results/ddp/traces/{ddp}.ranks" in t.trace_files()
    assert t.trace_out("ddp", ddp) == f"results/ddp/traces/{ddp}.ranks/{ddp}.json"
    local = key("resnet18")
    assert t.trace_out("local", local) == f"results/local/traces/{local}.json"


def test_the_op_inventories_follow_each_envs_step_variant():
    config = copy.deepcopy(SMALL)
    config["envs"]["cl"] = {"device": "cpu", "threads": 1, "channels_last": True}
    t = targets_of(study_of(config))
    assert t.inventory_steps() == [("fp32", "cpu"), ("fp32", "cpu_cl")]
    assert t.inventory_files() == sorted(
        f"results/complexity/{m}_fp32_bs2_{step}_ops.json"
        for m in ("resnet18", "mobilenet_v2")
        for step in ("cpu", "cpu_cl")
    )
    assert t.predicted_complexity_files() == t.complexity_files()


# ---------------------------------------------------------------- a CUDA env measured here


def test_a_cuda_env_gets_its_captures_self_test_and_kernel_rooflines():
    config = {
        "envs": {"gpu": {"device": "cuda", "gpu_name": "H100"}},
        "study": dict(SMALL["study"], precisions=["fp32", "bf16"], batch_sizes=[2, 4]),
        "ncu": {"batch_sizes": [4]},
    }
    t = targets_of(study_of(config, device="cuda"))
    models, precisions = ("resnet18", "mobilenet_v2"), ("fp32", "bf16")
    captured = [key(m, 4, "gpu", p) for m in models for p in precisions]
    assert t.ncu_files() == [f"results/gpu/ncu/{k}.json" for k in captured]
    assert t.env_ncu_files("gpu") == t.ncu_files() and t.env_ncu_files("other") == []
    assert t.selftest_files() == ["results/gpu/ncu/selftest.json"]
    bench = t.benchmark_files()
    assert "results/gpu/benchmarks/ncu/selftest.tsv" in bench
    assert {f"results/gpu/benchmarks/ncu/{k}.tsv" for k in captured} <= set(bench)
    plots = t.ncu_targets()
    assert plots[-1] == "results/report_sections/ncu_vs_analytic.html"
    assert len(plots) == 1 + len(captured) * 2 * 2  # kernels and hierarchical, png and svg
    assert f"results/plots/kernels/roofline_hierarchical_{captured[0]}.svg" in plots
    assert t.inventory_steps() == [("fp32", "cuda"), ("bf16", "cuda")]


# ---------------------------------------------------------------- copied results


@pytest.fixture
def copied_h100(tmp_path, monkeypatch):
    """A working directory holding examples/h100's results as another machine's."""
    monkeypatch.chdir(tmp_path)
    shutil.copytree(H100_RESULTS, tmp_path / "results" / "h100")
    return tmp_path / "results" / "h100"


def test_copied_results_are_found_once_and_enter_the_targets(copied_h100):
    study = study_of(WITH_H100)
    assert study.measure_envs == ["local"]
    found = find_copied_envs(study.config["envs"], study.measure_envs, check_copied_env)
    assert [c.name for c in found] == ["h100"]
    h100 = found[0]
    assert len(h100.runs) == 15 and h100.selftest and not h100.efficiency
    assert "results/h100/ncu/selftest.json" not in h100.ncu and len(h100.ncu) == 5
    t = targets_of(study, found)
    assert t.reported_envs() == ["local", "h100"]
    # every copied run is in the matrix (resnet50 fp32, never run in the lease, is missing)
    copied_runs = [f for f in t.run_files() if f.startswith("results/h100/")]
    assert sorted(copied_runs) == list(h100.runs) and t.copied_runs_warnings() == []
    assert not any("resnet50_fp32" in f for f in copied_runs)
    assert t.ncu_files() == list(h100.ncu)  # nothing profiled here: a CPU machine
    assert [c.config_key for c in t.ncu_configs()] == [Path(f).stem for f in h100.ncu]
    assert t.selftest_files() == ["results/h100/ncu/selftest.json"]
    assert t.efficiency_files() == ["results/local/efficiency.json"]
    assert t.ceilings_files() == ["results/local/ceilings.json", "results/h100/ceilings.json"]
    # a copied env is read, never measured here
    assert not any(f.startswith("results/h100/") for f in t.measure_targets())


def test_copied_runs_outside_the_matrix_are_left_out_and_named(copied_h100):
    narrow = dict(WITH_H100["study"], models=["resnet18"], precisions=["fp32", "bf16"], runs=2)
    study = study_of({"envs": {"h100": WITH_H100["envs"]["h100"]}, "study": narrow})
    t = targets_of(study, find_copied_envs(study.config["envs"], [], check_copied_env))
    assert [Path(f).name for f in t.run_files()] == [
        f"h100_resnet18_{p}_bs128_run{n}.json" for p in ("fp32", "bf16") for n in (1, 2)
    ]
    outside = t.copied_runs_outside()["h100"]
    assert len(outside) == 11 and "results/h100/runs/h100_resnet18_amp_bs128_run1.json" in outside
    (warning,) = t.copied_runs_warnings()
    assert warning.startswith("11 copied run(s) of env 'h100' are outside this study's matrix")
    assert warning.endswith(" ...") and "h100_resnet18_amp_bs128_run1.json" in warning


def test_copied_traces_and_efficiency_are_read_where_present(copied_h100):
    point = "h100_resnet18_fp32_bs128"
    (copied_h100 / "traces").mkdir()
    (copied_h100 / "traces" / f"{point}.ops.json").write_text("{}")
    (copied_h100 / "efficiency.json").write_text("{}")
    study = study_of(WITH_H100)
    t = targets_of(study, find_copied_envs(study.config["envs"], ["local"], check_copied_env))
    assert f"results/h100/traces/{point}.ops.json" in t.trace_tables()
    assert t.efficiency_files() == ["results/local/efficiency.json", "results/h100/efficiency.json"]
    assert not any(f.startswith("results/h100/traces") for f in t.trace_files())  # read, not made


def test_a_copied_folder_must_be_whole_readable_and_the_declared_machines(copied_h100):
    envs = study_of(WITH_H100).config["envs"]
    (copied_h100 / "ceilings.json").unlink()
    with pytest.raises(InputError, match=r"results/h100/ holds results .* lacks ceilings.json"):
        find_copied_envs(envs, ["local"], check_copied_env)
    shutil.copy(H100_RESULTS / "ceilings.json", copied_h100)
    other_gpu = dict(envs, h100=dict(envs["h100"], gpu_name="A100"))
    with pytest.raises(InputError, match="Refusing to merge") as refused:
        find_copied_envs(other_gpu, ["local"], check_copied_env)
    assert "cannot read" not in str(refused.value)  # the check's own message, not wrapped
    (copied_h100 / "env_info.json").write_text("{not json")
    with pytest.raises(InputError, match=r"results/h100/env_info.json: cannot read the copied"):
        find_copied_envs(envs, ["local"], check_copied_env)


def test_folders_measured_here_or_holding_nothing_are_not_copied_envs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "results" / "h100" / "logs").mkdir(parents=True)  # nothing copied
    (tmp_path / "results" / "local" / "runs").mkdir(parents=True)
    (tmp_path / "results" / "local" / "runs" / "x.json").write_text("{}")

    def never(*args):
        raise AssertionError("no fingerprint to check")

    envs = study_of(WITH_H100).config["envs"]
    assert find_copied_envs(envs, ["local"], never) == []


# ---------------------------------------------------------------- a comparison's files


def test_a_compare_block_adds_the_comparison_and_its_baseline_files(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = {
        "envs": {"local": {"device": "cpu", "threads": 1}},
        "study": {"models": ["resnet18"], "precisions": ["fp32"], "batch_sizes": [128]},
        "compare": {"baseline": str(ROOT / "examples" / "h100"), "envs": {"local": "h100"}},
    }
    t = targets_of(study_of(config))
    assert t.compare_targets() == [
        *COMPARE_FILES.values(),
        "results/plots/compare_roofline.png",
        "results/plots/compare_roofline.svg",
        f"results/report_sections/{section_file(COMPARE_SECTION)}",
    ]
    assert set(t.compare_targets()) <= set(t.all_targets())
    inputs = baseline_inputs(t.study.baseline)
    assert str(ROOT / "examples" / "h100" / "metrics.csv") in inputs  # beside results/
    assert str(H100_RESULTS / "env_info.json") in inputs
    assert len([f for f in inputs if "/runs/" in f]) == 15
    assert all(Path(f).is_absolute() and Path(f).is_file() for f in inputs)  # outside here


def test_baseline_paths_are_relative_under_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "base").mkdir()
    (tmp_path / "base" / "metrics.csv").write_text("")
    assert here_or_absolute(tmp_path / "base" / "metrics.csv") == "base/metrics.csv"
    assert here_or_absolute(H100_RESULTS / "ceilings.json") == str(H100_RESULTS / "ceilings.json")
    found = existing_paths(None, tmp_path / "base" / "metrics.csv", [tmp_path / "missing.csv"])
    assert found == ["base/metrics.csv"]


# ---------------------------------------------------------------- per-job values


def test_the_drivers_flags_and_run_ids_of_a_job():
    study = study_of(SMALL, study__workers=3)
    assert jobs.driver_flags(study, "local", "resnet18", "fp32", "2") == (
        "--arch resnet18 --image-size 224 --num-classes 1000 --batch-size 2 --precision fp32 "
        "--backend cpu --synthetic --workers 3"
    )
    wildcards = SimpleNamespace(
        menv="local", model="resnet18", precision="fp32", batch="2", run="1"
    )
    assert jobs.driver_run_id("run")(wildcards) == "local_resnet18_fp32_bs2_run1"
    assert jobs.driver_run_id("ncu")(wildcards) == "local_resnet18_fp32_bs2_ncu"
    spec = {"device": "cuda", "gpu_name": "H100"}
    assert jobs.declared_machine_flags(spec) == "--device cuda --gpu-name 'H100'"
    assert jobs.declared_machine_flags(spec, "--declared-device").startswith(
        "--declared-device cuda"
    )
    assert jobs.ncu_timeout_flag({"ncu": {}}) == ""
    assert jobs.ncu_timeout_flag({"ncu": {"pass_timeout_s": 400}}) == "--timeout 400"
    steps = [("fp32", "cpu"), ("bf16", "cpu_cl")]
    assert jobs.inventory_flags(steps, ["a.json", "b.json"]) == (
        "--inventory fp32:cpu=a.json --inventory bf16:cpu_cl=b.json"
    )
    with pytest.raises(ValueError):  # an inventory without its output would be lost
        jobs.inventory_flags(steps, ["a.json"])


def test_the_resolved_config_names_what_this_machine_runs():
    resolved = jobs.resolved_config(study_of(SMALL))
    local = resolved["envs"]["local"]
    assert local["device"] == "cpu" and local["threads"] == 1 and local["precisions"] == ["fp32"]
    assert local["batch_sizes_by_model"] == {"resnet18": [2], "mobilenet_v2": [2]}
    assert resolved["study"]["models"] == ["resnet18", "mobilenet_v2"]
    assert resolved["measure_envs"] == ["local"]
    json.dumps(resolved)  # written to results/study_config.json


# ---------------------------------------------------------------- Slurm


def no_command(*args, **kwargs):
    raise AssertionError(f"a command ran: {args}")


def test_off_slurm_nothing_is_run_and_no_resources_are_set(monkeypatch):
    monkeypatch.setattr(subprocess, "run", no_command)
    monkeypatch.setattr(subprocess, "Popen", no_command)
    config = {"envs": {"local": {"device": "cpu", "slurm": {"partition": "debug"}}}}
    assert cluster.cluster_cpus(config) is None
    assert cluster.env_resources(config, exclusive=True) == {}


SLURM = {
    "cluster": "slurm",
    "envs": {"box": {"device": "cpu", "threads": 2, "slurm": {"partition": "debug"}}},
}


def test_on_slurm_sinfo_is_asked_and_the_blocks_checked():
    asked = []

    def sinfo():
        asked.append("sinfo")
        return "debug|4|(null)|(null)\ndebug|8|(null)|(null)\n"

    assert cluster.cluster_cpus(SLURM, sinfo, lambda: {}) == {"box": 4}
    assert asked == ["sinfo"]
    bad = copy.deepcopy(SLURM)
    bad["envs"]["box"]["slurm"]["partition"] = "debgu"
    with pytest.raises(InputError, match=r"^Invalid config: config envs.box.slurm.partition"):
        cluster.cluster_cpus(bad, sinfo, lambda: {})
    resources = cluster.env_resources(SLURM, exclusive=True)
    wildcards = SimpleNamespace(menv="box")
    assert resources["slurm_partition"](wildcards) == "debug"
    assert resources["slurm_extra"](wildcards) == "--exclusive"
    assert resources["gres"](wildcards) is None


def test_a_host_without_sinfo_is_named(monkeypatch):
    def missing(*args, **kwargs):
        raise FileNotFoundError("sinfo")

    monkeypatch.setattr(subprocess, "run", missing)
    with pytest.raises(InputError, match="this host has no sinfo"):
        cluster.cluster_cpus(SLURM, forbidden=lambda: {})
