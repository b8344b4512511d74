"""Fault suite: nothing lost, nothing wrong.

One test per behaviour of "faults, bad input and results from several machines",
each run through the real workflow (``snakemake -s ROOT/Snakefile -d tmp``) or the
real stage scripts:

* a bad config is rejected before any job runs, naming the key and the value;
* failed runs (an exception in a model, an OOM under a memory limit set here) are
  recorded, and aggregation, plots and the report still complete;
* a pipeline killed (SIGKILL) in the middle of a timed run loses nothing, and a
  rerun does only the unfinished work; ``--forcerun`` then retries one run alone;
* results are never filed under the wrong machine (declared CPU name, a stale
  env_info.json from another machine, a driver on another device);
* a CUDA env on this CPU machine does not fail the study and is reported missing;
* results copied from another machine merge in without being re-run or touched,
  and copied results that contradict their env are refused;
* with ``--cores 4`` no two measurements overlap and every run has its env's threads;
* bad ncu files get errors naming the file and what is missing.

Unit-level coverage lives elsewhere and is not repeated here: the config checks in
tests/test_study.py (e.g. ``test_ambiguous_run_ids_rejected``: no two torchvision
model names can make a run id ambiguous, so that check is shown with made-up names
there), the machine checks in tests/test_envinfo.py, and the two hypothesis suites:
tests/test_ncu_parser.py::test_property_random_files_parse_to_the_right_totals (random
details/raw CSVs, any units, against totals computed from the integers they were
written from) and tests/test_roofline.py (``test_roof_is_monotone_in_ai``,
``test_roof_never_exceeds_either_ceiling``,
``test_consistent_inputs_never_flag_above_roof``).
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from workflow_helpers import (
    job_counts,
    read_csv,
    run_env,
    script,
    snakemake,
    snapshot,
    text_of,
    write_config,
)

from dnnroofline.aggregate.metrics import metrics_frame
from dnnroofline.aggregate.points import roofline_points_frame
from dnnroofline.errors import InputError
from dnnroofline.study.config import Study
from dnnroofline.study.models import torchvision_classifiers
from dnnroofline.study.schema import checked_config

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
NCU_DATA = ROOT / "tests" / "data" / "ncu"
pytestmark = pytest.mark.workflow

STUDY = {
    "models": ["resnet18"],
    "precisions": ["fp32"],
    "batch_sizes": [2],
    "runs": 1,
    "warmup_iters": 1,
    "iters": 2,
    "image_size": 32,
    "data": "synthetic",
}
TINY_RUN = "--batch-size 2 --image-size 32 --warmup-iters 1 --iters 2 --precision fp32 --synthetic"
HUGE = 65536  # a batch whose first activation alone (4.3 GB) cannot fit under LIMIT_HEADROOM
LIMIT_HEADROOM = 2 * 2**30


# --------------------------------------------------------------------------- helpers


def svg_ids(path: Path) -> set[str]:
    return set(re.findall(r'id="([^"]+)"', path.read_text()))


def torch_virtual_bytes() -> int:
    """Peak virtual memory of a Python that has imported torch and torchvision."""
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import torch, torchvision, re; "
            "print(re.search(r'VmPeak:\\s+(\\d+)', open('/proc/self/status').read())[1])",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(out.stdout.strip()) * 1024


# --------------------------------------------------------------------------- 1. bad config

GOOD = {"envs": {"local": {"device": "cpu", "threads": 1}}, "study": STUDY}


def _bad(mutate) -> dict:
    config = json.loads(json.dumps(GOOD))
    mutate(config)
    return config


def _set(path: str, value):
    def mutate(config):
        *keys, last = path.split(".")
        node = config
        for k in keys:
            node = node.setdefault(k, {})
        node[last] = value

    return mutate


BAD_CONFIGS = {
    # name: (config or raw YAML, substrings the error must contain)
    "unknown_model": (
        _bad(_set("study.models", ["resnet5"])),
        ["study.models", "'resnet5'", "'resnet50'"],
    ),
    "unknown_precision": (
        _bad(_set("study.precisions", ["fp16"])),
        ["study.precisions[0]", "'fp16'", "fp32"],
    ),
    "amp_on_cpu": (
        _bad(_set("study.precisions", ["fp32", "amp"])),
        ["study.precisions", "'amp' is not supported on env 'local' (device cpu)"],
    ),
    "tf32_on_cpu_env": (
        _bad(_set("envs.local.precisions", ["tf32"])),
        ["precisions", "'tf32' is not supported on env 'local' (device cpu)"],
    ),
    "zero_batch": (_bad(_set("study.batch_sizes", [2, 0])), ["study.batch_sizes[1]", "value 0"]),
    "zero_iters": (_bad(_set("study.iters", 0)), ["study.iters", "value 0", "minimum of 1"]),
    "float_batch": (  # jsonschema alone takes 4.0 for an integer: run ids would say bs4.0
        _bad(_set("study.batch_sizes", [2, 4.0])),
        ["study.batch_sizes[1]", "value 4.0", "not of type 'integer'"],
    ),
    "float_iters": (_bad(_set("study.iters", 10.0)), ["study.iters", "value 10.0", "integer"]),
    "negative_runs": (_bad(_set("study.runs", -1)), ["study.runs", "value -1", "minimum of 1"]),
    "zero_threads": (_bad(_set("envs.local.threads", 0)), ["envs.local.threads", "value 0"]),
    "unknown_device": (
        _bad(_set("envs.local.device", "gpu")),
        ["envs.local.device", "'gpu'", "'cuda'"],
    ),
    "misspelt_key": (_bad(_set("study.iter", 5)), ["config study", "'iter'", "'iters'"]),
    "missing_data_folder": (
        _bad(_set("study.data", "/nowhere/imagenet")),
        ["study.data", "/nowhere/imagenet/train"],
    ),
    "duplicate_env_key": (
        "envs:\n  local: {device: cpu, threads: 1}\n  local: {device: cuda}\n"
        + yaml.safe_dump({"study": STUDY}),
        ["config/config.yaml line 3", "'envs.local' is given twice", "first at line 2"],
    ),
    "duplicate_model": (
        _bad(_set("study.models", ["resnet18", "resnet18"])),
        ["study.models", "non-unique"],
    ),
    "env_names_clash_in_case": (
        _bad(_set("envs.Local", {"device": "cpu"})),
        ["'local' and 'Local' differ only in case"],
    ),
    "env_name_is_a_results_folder": (
        _bad(_set("envs.plots", {"device": "cpu"})),
        ["envs.plots", "reserved"],
    ),
    "bad_env_name": (_bad(_set("envs.my box", {"device": "cpu"})), ["config envs", "'my box'"]),
    "unknown_compile_mode": (
        _bad(_set("envs.local.compile", "fast")),
        ["envs.local.compile", "'fast'", "max-autotune"],
    ),
    "zero_nproc": (_bad(_set("envs.local.nproc", 0)), ["envs.local.nproc", "value 0"]),
    "nproc_beyond_the_cores": (
        _bad(_set("envs.local.nproc", 512)),
        ["envs.local.nproc: 512 processes x 1 thread = 512 threads exceed this machine's"],
    ),
    "nproc_on_mps": (
        _bad(_set("envs.mac", {"device": "mps", "nproc": 2})),
        ["envs.mac.nproc: 2 on device mps", "one device per process"],
    ),
    "zero_trace_steps": (_bad(_set("traces.steps", 0)), ["traces.steps", "value 0"]),
    "unknown_measure_env": (
        _bad(_set("measure_envs", ["lokal"])),
        ["measure_envs", "'lokal'", "'local'"],
    ),
}


# One of each kind of check, run through the real workflow: a file that repeats a key, the
# schema, the models torchvision has, and this machine's cores. Every case goes through
# the config loader that the Snakefile calls (test_bad_config_named_by_the_loader).
WORKFLOW_CASES = ["duplicate_env_key", "float_batch", "unknown_model", "nproc_beyond_the_cores"]


@pytest.fixture(scope="module")
def bad_config_outcomes(tmp_path_factory):
    """Run the real workflow (not a dry run) on each of WORKFLOW_CASES, side by side."""

    workdirs = {name: tmp_path_factory.mktemp(f"bad_{name}") for name in WORKFLOW_CASES}
    for name, workdir in workdirs.items():
        write_config(workdir, BAD_CONFIGS[name][0])

    def attempt(name):
        return snakemake(workdirs[name], "--cores", "1", check=False, timeout=300)

    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        procs = dict(zip(WORKFLOW_CASES, pool.map(attempt, WORKFLOW_CASES), strict=True))
    return {name: (procs[name], workdirs[name]) for name in WORKFLOW_CASES}


@pytest.mark.parametrize("case", WORKFLOW_CASES)
def test_bad_config_rejected_before_any_job(bad_config_outcomes, case):
    proc, workdir = bad_config_outcomes[case]
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-2000:]
    for expected in BAD_CONFIGS[case][1]:
        assert expected in out, f"{expected!r} not in:\n{out[-2000:]}"
    assert "Traceback" not in out
    assert not (workdir / "results").exists(), "a job ran before the config was refused"


def load_as_the_snakefile_does(path: Path) -> tuple[dict, Study]:
    """The config file through the Snakefile's loader: checked_config, then the Study."""
    config = checked_config(yaml.safe_load(path.read_text()), ROOT / "config/schema.yaml", [path])
    return config, Study.here(config, known_models=torchvision_classifiers())


@pytest.mark.parametrize("case", list(BAD_CONFIGS))
def test_bad_config_named_by_the_loader(case, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = write_config(tmp_path, BAD_CONFIGS[case][0]).relative_to(tmp_path)
    with pytest.raises(InputError) as refused:
        load_as_the_snakefile_does(path)
    for expected in BAD_CONFIGS[case][1]:
        assert expected in str(refused.value)


def test_the_config_the_bad_ones_break_passes_the_loader(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config, study = load_as_the_snakefile_does(write_config(tmp_path, GOOD).relative_to(tmp_path))
    assert config["study"]["warmup_iters"] == 1 and config["traces"]["enabled"] is True
    assert study.measure_envs == ["local"]


# --------------------------------------------------------------------------- the fleet study
#
# One study shared by the failure, CUDA-missing, merge and exclusivity tests:
#   local   cpu, 1 thread,  batch sizes [2, HUGE]  measured here
#   wide    cpu, 2 threads, batch size 2           measured here
#   lab_box cpu, batch size 2                      another machine's results, copied in
#   gpu_l4  cuda                                   never measured, never copied
# Models: resnet18 and alexnet (which cannot train on 32 px images), 1 repeat each.

FLEET = {
    "envs": {
        "local": {"device": "cpu", "threads": 1, "batch_sizes": [2, HUGE]},
        "wide": {"device": "cpu", "threads": 2, "batch_sizes": [2]},
        "lab_box": {"device": "cpu", "batch_sizes": [2]},
        "gpu_l4": {"device": "cuda", "gpu_name": "L4"},
    },
    "measure_envs": ["local", "wide"],
    "study": dict(STUDY, models=["resnet18", "alexnet"], runs=1),
    "ceilings": {"quick": True},
    # no traces: they would run the HUGE batches outside step 1's memory limit
    "traces": {"enabled": False},
}
LAB_RUNS = ["lab_box_alexnet_fp32_bs2_run1", "lab_box_resnet18_fp32_bs2_run1"]


def make_lab_box_results(machine: Path) -> Path:
    """Another machine's results/lab_box/, made by the real stage scripts for env lab_box."""
    folder = machine / "results" / "lab_box"
    script("env_info.py", "--env", "lab_box", "--device", "cpu", "--out", folder / "env_info.json")
    ceilings = ["--env", "lab_box", "--device", "cpu", "--precisions", "fp32", "--quick"]
    script("ceilings.py", *ceilings, "--out", folder / "ceilings.json")
    for run_id in LAB_RUNS:
        model = run_id.split("_")[2]
        flags = f"{TINY_RUN} --arch {model} --backend cpu --env lab_box --run-id {run_id}"
        flags = flags.split()
        script("run_train.py", *flags, "--out", folder / "runs" / f"{run_id}.json")
    return folder


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("fleet")
    write_config(workdir, FLEET)
    out = {}

    # 1. The HUGE batches under an address-space limit (set on snakemake, inherited by
    #    its jobs): the allocator fails, and the driver records an OOM.
    limit = torch_virtual_bytes() + LIMIT_HEADROOM

    def limit_memory():
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    huge = [
        f"results/local/runs/local_{m}_fp32_bs{HUGE}_run1.json" for m in ("resnet18", "alexnet")
    ]
    snakemake(workdir, "--cores", "2", *huge, preexec_fn=limit_memory)

    # 2. The rest of the study, with --cores 4 on this 2-core machine.
    out["study"] = snakemake(workdir, "--cores", "4")

    # 3. Another machine's results, copied in (mtimes kept, as cp -p or rsync -a do).
    other = tmp_path_factory.mktemp("lab_box_machine")
    shutil.copytree(make_lab_box_results(other), workdir / "results" / "lab_box")
    out["measured"] = snapshot(
        sorted((workdir / "results").glob("*/runs/*.json"))
        + sorted((workdir / "results").glob("*/env_info.json"))
        + sorted((workdir / "results").glob("*/ceilings.json"))
    )
    out["merge"] = snakemake(workdir, "--cores", "2")
    snakemake(workdir, "--report", "results/report.html")
    out["workdir"] = workdir
    return out


def test_failed_runs_are_recorded_and_the_study_completes(fleet):
    results = fleet["workdir"] / "results"
    runs = {p.stem: json.loads(p.read_text()) for p in (results / "local" / "runs").glob("*.json")}
    # An exception inside the model (alexnet's pooling on a 1x1 map) is status error.
    alex = runs["local_alexnet_fp32_bs2_run1"]
    assert alex["status"] == "error" and "Output size is too small" in alex["message"]
    assert alex["images_per_s"] is None and alex["end_time"] >= alex["start_time"]
    # A batch that cannot be allocated under the memory limit is status oom.
    oom = runs[f"local_resnet18_fp32_bs{HUGE}_run1"]
    assert oom["status"] == "oom" and "allocate" in oom["message"]
    assert runs[f"local_alexnet_fp32_bs{HUGE}_run1"]["status"] in ("oom", "error")
    assert runs["local_resnet18_fp32_bs2_run1"]["status"] == "ok"
    # The complexity stage records the model that cannot run, instead of failing.
    cx = json.loads((results / "complexity" / "alexnet_bs2.json").read_text())
    assert cx["status"] == "error" and "32x32" in cx["message"] and cx["flops"] is None

    metrics = {r["run_id"]: r for r in read_csv(results / "metrics.csv")}
    assert metrics["local_alexnet_fp32_bs2_run1"]["status"] == "error"
    assert "Output size is too small" in metrics["local_alexnet_fp32_bs2_run1"]["message"]
    assert metrics[f"local_resnet18_fp32_bs{HUGE}_run1"]["status"] == "oom"
    points = {
        (p["env"], p["model"], int(p["batch_size"])): p
        for p in read_csv(results / "roofline_points.csv")
    }
    for key in [("local", "alexnet", 2), ("local", "resnet18", HUGE), ("wide", "alexnet", 2)]:
        assert points[key]["runs_ok"] == "0" and points[key]["ai"] == "", key
    assert points[("local", "resnet18", 2)]["runs_ok"] == "1"
    assert float(points[("wide", "resnet18", 2)]["ai"]) > 0

    # No plot shows a failed configuration as a point; the throughput plot marks it.
    for svg in ("roofline_local.svg", "roofline_wide.svg", "roofline_all.svg"):
        ids = svg_ids(results / "plots" / svg)
        assert not [i for i in ids if i.startswith("point-") and "alexnet" in i], svg
        assert f"point-local-resnet18-fp32-bs{HUGE}" not in ids
    assert "point-local-resnet18-fp32-bs2" in svg_ids(results / "plots" / "roofline_local.svg")
    throughput = svg_ids(results / "plots" / "throughput.svg")
    assert {"failed-local-alexnet-fp32-bs2", f"failed-local-resnet18-fp32-bs{HUGE}"} <= throughput

    # The report lists every failed run with its reason.
    analysis = text_of(results / "report_sections" / "analysis.html")
    failed = analysis.split("Failed runs")[1].split("Missing runs")[0]
    for run_id, row in metrics.items():
        if row["status"] != "ok":
            assert run_id in failed
    assert "Output size is too small" in failed and "can't allocate memory" in failed
    # alexnet's runs give the complexity stage's plainer reason beside their own exception
    reason = "could not record this model's step either: --arch 'alexnet' cannot train on 32x32"
    assert reason in failed and "--arch 'resnet18'" not in failed
    complexity = text_of(results / "report_sections" / "complexity.html")
    not_counted = complexity.split("Not counted")[1].split("FLOPs by layer type")[0]
    assert "alexnet 2 --arch 'alexnet' cannot train on 32x32 images" in not_counted
    assert "resnet18" not in not_counted
    assert (results / "report.html").stat().st_size > 100_000


def test_cuda_env_is_missing_not_failed_on_a_cpu_machine(fleet):
    results = fleet["workdir"] / "results"
    assert not (results / "gpu_l4").exists()  # nothing ran for it, nothing was filed under it
    assert "gpu_l4" not in {r["env"] for r in read_csv(results / "metrics.csv")}
    analysis = text_of(results / "report_sections" / "analysis.html")
    missing = analysis.split("Missing runs")[1]
    for model in ("resnet18", "alexnet"):
        assert f"gpu_l4_{model}_fp32_bs2_run1" in missing
    assert "on a cuda machine (env gpu_l4)" in missing
    assert "copy that machine's results/gpu_l4/ here" in missing
    # every other env's runs are complete
    assert not re.search(r"(local|wide|lab_box)_\w+_run\d", missing)


def test_results_from_another_machine_merge_in_untouched(fleet):
    workdir, results = fleet["workdir"], fleet["workdir"] / "results"
    # The merge run re-aggregated and redrew, and measured nothing.
    counts = job_counts(fleet["merge"].stdout + fleet["merge"].stderr)
    assert counts.get("metrics") == 1 and counts.get("plot_roofline_all") == 1
    for rule in ("train", "ceilings", "env_info", "complexity"):
        assert rule not in counts, counts
    # Copied and measured files are byte-identical and untouched (mtime to the ns).
    for path, before in fleet["measured"].items():
        assert snapshot([path])[path] == before, path
    assert any("lab_box" in p for p in fleet["measured"])

    metrics = read_csv(results / "metrics.csv")
    lab_runs = {r["run_id"]: r["status"] for r in metrics if r["env"] == "lab_box"}
    assert lab_runs == dict(zip(LAB_RUNS, ["error", "ok"], strict=True))
    points = read_csv(results / "roofline_points.csv")
    lab = {p["model"]: p for p in points if p["env"] == "lab_box"}
    assert lab["resnet18"]["runs_ok"] == "1" and float(lab["resnet18"]["ai"]) > 0
    assert lab["alexnet"]["runs_ok"] == "0"  # its failed run merged in as failed
    assert "point-lab_box-resnet18-fp32-bs2" in svg_ids(results / "plots" / "roofline_all.svg")
    assert (results / "plots" / "roofline_lab_box.svg").exists()
    # The report shows lab_box's own fingerprint and its runs.
    lab_info = json.loads((results / "lab_box" / "env_info.json").read_text())
    repro = (results / "report_sections" / "reproducibility.html").read_text()
    assert "lab_box" in repro and lab_info["cpu_model"] in repro
    # each env's installed versions are checked against requirements.lock
    assert "Installed versions against the lock" in repro
    assert re.search(
        r"Env <b>local</b>: ((Python [\d.]+ and )?all \d+ locked packages it has match"
        r"|\d+ versions? differs? from the lock)",
        repro,
    )
    for section in ("design", "measurement", "roofline"):
        assert "lab_box" in (results / "report_sections" / f"{section}.html").read_text()
    # Nothing left to do afterwards.
    assert "Nothing to be done" in snakemake(workdir, "-n", "--cores", "2").stdout


def test_copied_results_from_the_wrong_machine_are_refused(fleet, tmp_path):
    """Copied results that contradict their env are refused before any job, naming the file."""
    workdir = fleet["workdir"]
    before = snapshot(sorted((workdir / "results" / "lab_box").rglob("*.json")))
    # lab_box's results come from a CPU machine; a config declaring it a CUDA box is wrong.
    wrong = json.loads(json.dumps(FLEET))
    wrong["envs"]["lab_box"] = {"device": "cuda"}
    cfg = tmp_path / "wrong.yaml"
    cfg.write_text(yaml.safe_dump(wrong))
    proc = snakemake(workdir, "-n", "--cores", "2", "--configfile", str(cfg), check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "results/lab_box/env_info.json: env 'lab_box' declares device 'cuda'" in out
    assert "Refusing to merge results filed under the wrong machine" in out
    # A folder copied under another env's name is refused too (its runs name lab_box).
    renamed = json.loads(json.dumps(FLEET))
    renamed["envs"]["lab_box2"] = {"device": "cpu"}
    cfg.write_text(yaml.safe_dump(renamed))
    shutil.copytree(workdir / "results" / "lab_box", workdir / "results" / "lab_box2")
    try:
        proc = snakemake(workdir, "-n", "--cores", "2", "--configfile", str(cfg), check=False)
    finally:
        shutil.rmtree(workdir / "results" / "lab_box2")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "copied in as env 'lab_box2' are env 'lab_box'" in out
    assert snapshot(sorted((workdir / "results" / "lab_box").rglob("*.json"))) == before


def test_measurements_never_overlap_under_cores_4(fleet):
    results = fleet["workdir"] / "results"
    spans = []
    for env in ("local", "wide"):
        threads = FLEET["envs"][env]["threads"]
        for path in sorted((results / env / "runs").glob("*.json")):
            run = json.loads(path.read_text())
            assert run["config"]["threads"] == threads, path.name
            spans.append((run["start_time"], run["end_time"], path.name))
        ceilings = json.loads((results / env / "ceilings.json").read_text())
        assert ceilings["threads"] == threads
        spans.append((ceilings["start_time"], ceilings["end_time"], f"{env} ceilings"))
    assert len(spans) == 4 + 2 + 2  # local's 4 runs, wide's 2, and 2 ceilings
    spans.sort()
    for (_, end, a), (start, _, b) in zip(spans, spans[1:], strict=False):
        assert end <= start, f"{a} overlaps {b}"


# --------------------------------------------------------------------------- 3. a real kill

KILL_ITERS = 40
TARGET = "results/metrics.csv"  # the runs and their ledger: no plots or report, to save time


@pytest.fixture(scope="module")
def killed_and_resumed(tmp_path_factory):
    """A study killed (SIGKILL) in a timed run, then resumed: its files before the resume
    and the resume's output, taken before any test changes the study."""
    tmp_path = tmp_path_factory.mktemp("killed")
    config = {
        "envs": {"local": {"device": "cpu", "threads": 1}},
        "study": dict(STUDY, runs=3, iters=KILL_ITERS),
        "ceilings": {"quick": True},
    }
    write_config(tmp_path, config)
    runs, logs = tmp_path / "results/local/runs", tmp_path / "results/local/logs/runs"
    cmd = [str(BIN / "snakemake"), "-s", str(ROOT / "Snakefile"), "-d", str(tmp_path)]
    with open(tmp_path / "killed.log", "w") as sink:
        proc = subprocess.Popen(
            [*cmd, "--cores", "2", TARGET],
            stdout=sink,
            stderr=subprocess.STDOUT,
            env=run_env(),
            start_new_session=True,
        )
        victim = None
        deadline = time.monotonic() + 300
        try:
            while victim is None and time.monotonic() < deadline and proc.poll() is None:
                time.sleep(0.1)
                done = {p.stem for p in runs.glob("*.json")} if runs.exists() else set()
                for log in sorted(logs.glob("*.log")) if done else []:
                    if log.stem not in done and "timing" in log.read_text():
                        victim = log.stem  # in its timed steps, its JSON not yet written
                        break
        finally:
            os.killpg(proc.pid, signal.SIGKILL)  # snakemake and every job it started
            proc.wait()
    assert victim is not None, (tmp_path / "killed.log").read_text()[-3000:]
    time.sleep(0.5)
    finished = sorted(runs.glob("*.json"))
    killed = {p: json.loads(p.read_text()) for p in finished}
    kept = snapshot(finished + [tmp_path / "results/local/env_info.json"])

    # Resume. After SIGKILL Snakemake's lock stays behind: the plain command says to
    # unlock (docs/running.md, "When things go wrong"); then the plain command resumes.
    resume = snakemake(tmp_path, "--cores", "2", TARGET, check=False)
    if resume.returncode != 0:
        assert "--unlock" in resume.stdout + resume.stderr
        snakemake(tmp_path, "--unlock")
        resume = snakemake(tmp_path, "--cores", "2", TARGET)
    return {
        "workdir": tmp_path,
        "victim": victim,
        "killed": killed,
        "resume": resume,
        "kept_then": kept,
        "kept_now": snapshot(kept),
        "runs_now": {p.stem: json.loads(p.read_text()) for p in runs.glob("*.json")},
        "metrics_now": read_csv(tmp_path / "results/metrics.csv"),
    }


def test_killed_pipeline_loses_nothing_and_resumes(killed_and_resumed):
    # No partial or corrupt output: every run JSON is whole; the victim left none.
    killed, victim = killed_and_resumed["killed"], killed_and_resumed["victim"]
    assert killed and victim not in {p.stem for p in killed}
    for run in killed.values():
        assert run["status"] == "ok" and len(run["step_time_s"]["all"]) == KILL_ITERS

    resume = killed_and_resumed["resume"]
    counts = job_counts(resume.stdout + resume.stderr)
    assert counts["train"] == 3 - len(killed)
    assert "env_info" not in counts
    # finished runs: same bytes, same mtime
    assert killed_and_resumed["kept_now"] == killed_and_resumed["kept_then"]
    runs = killed_and_resumed["runs_now"]
    assert len(runs) == 3
    assert runs[victim]["status"] == "ok" and len(runs[victim]["step_time_s"]["all"]) == KILL_ITERS
    assert [r["status"] for r in killed_and_resumed["metrics_now"]] == ["ok"] * 3


def test_forcerun_retries_one_run_and_remakes_what_is_made_from_it(killed_and_resumed):
    """The way docs/running.md gives to retry a run: --forcerun its JSON."""
    workdir = killed_and_resumed["workdir"]
    run = workdir / "results/local/runs/local_resnet18_fp32_bs2_run1.json"
    other = workdir / "results/local/runs/local_resnet18_fp32_bs2_run2.json"
    before = {p: json.loads(p.read_text())["start_time"] for p in (run, other)}
    # the target first: --forcerun takes every word after it, and a target after it is
    # forced too, leaving the default target (the whole study) to run
    out = snakemake(workdir, "--cores", "2", TARGET,
                    "--forcerun", str(run.relative_to(workdir)))  # fmt: skip
    counts = job_counts(out.stdout + out.stderr)
    assert counts["train"] == 1 and counts["metrics"] == 1
    assert set(counts) == {"train", "metrics", "total"}, counts  # nothing else measured
    assert json.loads(run.read_text())["start_time"] > before[run]
    assert json.loads(other.read_text())["start_time"] == before[other]
    rows = {r["run_id"]: r for r in read_csv(workdir / TARGET)}
    assert float(rows[run.stem]["start_time"]) == json.loads(run.read_text())["start_time"]


# --------------------------------------------------------------------------- 4. wrong machine


def test_wrong_machine_is_refused(tmp_path):
    run = "results/local/runs/local_resnet18_fp32_bs2_run1.json"
    # The env declares a CPU this machine does not have: env_info refuses, nothing runs.
    script("env_info.py", "--env", "probe", "--out", tmp_path / "probe.json")
    this_cpu = json.loads((tmp_path / "probe.json").read_text())
    assert "Xeon Platinum" not in this_cpu["cpu_model"]
    config = {
        "envs": {"local": {"device": "cpu", "threads": 1, "cpu_name": "Xeon Platinum"}},
        "study": STUDY,
        "ceilings": {"quick": True},
    }
    write_config(tmp_path, config)
    proc = snakemake(tmp_path, "--cores", "2", run, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "env 'local' declares cpu_name 'Xeon Platinum'" in out  # shown, not only logged
    assert "Refusing to file results under the wrong machine" in out
    assert not (tmp_path / "results/local/env_info.json").exists()
    assert not (tmp_path / run).exists()

    # A stale env_info.json from another machine (a checkout copied with its results):
    # every measurement job checks its machine against it and refuses, writing nothing.
    copied = tmp_path / "copied_checkout"
    config["envs"]["local"].pop("cpu_name")
    write_config(copied, config)
    stale = dict(this_cpu, env="local", host="labnode7", cpu_model="Intel(R) Xeon(R) 8480+")
    (copied / "results/local").mkdir(parents=True)
    (copied / "results/local/env_info.json").write_text(json.dumps(stale))
    ceilings = "results/local/ceilings.json"
    proc = snakemake(copied, "--cores", "2", "--keep-going", run, ceilings, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "run_train.py: error: env 'local': this machine" in out
    assert "ceilings: error: env 'local': this machine" in out  # checked in its own process
    assert "is not the one results/local/env_info.json describes (host labnode7" in out
    assert "it records CPU 'Intel(R) Xeon(R) 8480+'" in out
    assert not (copied / run).exists() and not (copied / ceilings).exists()
    assert json.loads((copied / "results/local/env_info.json").read_text()) == stale


def test_driver_refuses_a_device_other_than_its_envs(tmp_path):
    """The env's env_info.json says cuda; the driver resolves cpu here: it refuses."""
    env_info = tmp_path / "env_info.json"
    script("env_info.py", "--env", "gpu_box", "--out", env_info)
    info = json.loads(env_info.read_text())
    info.update(device="cuda", gpus=[{"name": "NVIDIA L4", "memory_bytes": 24e9}])
    env_info.write_text(json.dumps(info))
    out = tmp_path / "run.json"
    flags = f"{TINY_RUN} --arch resnet18 --backend auto --env gpu_box --env-info {env_info}"
    proc = script("run_train.py", *flags.split(), "--out", out, check=False)
    assert proc.returncode == 2, proc.stderr
    assert "records device 'cuda', but this job runs on 'cpu'" in proc.stderr
    assert not out.exists()


# --------------------------------------------------------------------------- 5. aggregation


def test_failed_complexity_is_fine_for_failed_groups_and_an_error_for_ok_ones():
    """A model the complexity trace cannot run needs no counts where its runs all failed;
    where a run is ok, roofline_points refuses, naming the complexity file."""

    def run(status):
        return {
            "status": status,
            "message": None if status == "ok" else "boom",
            "run_id": "local_alexnet_fp32_bs2_run1",
            "env": "local",
            "config": {"arch": "alexnet", "precision": "fp32", "batch_size": 2, "threads": 1},
            "step_time_s": {"median": 0.1} if status == "ok" else None,
            "images_per_s": 20.0 if status == "ok" else None,
        }

    failed_cx = {
        ("alexnet", 2): {"status": "error", "message": "too small", "arch": "alexnet"},
    }
    ceilings = {
        "local": {
            "roofs": [
                {"kind": "compute", "precision": "fp32", "source": "measured", "value": 1e11},
                {"kind": "memory", "precision": None, "source": "measured", "value": 1e10},
            ]
        }
    }
    points = roofline_points_frame(metrics_frame([run("error")]), failed_cx, ceilings)
    assert points["runs_ok"].tolist() == [0]
    with pytest.raises(InputError, match=r"results/complexity/alexnet_bs2\.json.*'error'"):
        roofline_points_frame(metrics_frame([run("ok")]), failed_cx, ceilings)


# --------------------------------------------------------------------------- 6. ncu files


@pytest.mark.parametrize(
    ("name", "args", "expected"),
    [
        ("handmade_err_nvgpuctrperm.csv", [], ["ERR_NVGPUCTRPERM", "==ERROR=="]),
        ("handmade_truncated_details.csv", [], ["line 7", "truncated"]),
        (
            "meinie_torch_sdpa_flash_raw_page.csv",
            ["--require-roofline"],
            ["dram__bytes.sum", "smsp__sass_thread_inst_executed_op_"],
        ),
    ],
)
def test_bad_ncu_files_name_the_file_and_what_is_missing(tmp_path, name, args, expected):
    """The parse_ncu.py CLI refuses each broken capture: no JSON, never silent zeros."""
    out = tmp_path / "counters.json"
    proc = script("parse_ncu.py", NCU_DATA / name, "--out", out, *args, check=False)
    assert proc.returncode == 1
    assert name in proc.stderr
    for text in expected:
        assert text in proc.stderr
    assert not out.exists()
