"""An env's environment variables (dnnroofline.study.environment): checked in the config,
passed as --environ, set by the measurement restarting itself, recorded, and reaching
glibc's malloc in a real timed run."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from dnnroofline.errors import InputError
from dnnroofline.measure import train
from dnnroofline.report import env_compare as ec
from dnnroofline.report.render import ENV
from dnnroofline.report.reproducibility import run_command
from dnnroofline.study import environment as envvars
from dnnroofline.study.config import Study

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "workflow" / "scripts"
KEPT = {"MALLOC_MMAP_THRESHOLD_": "33554432", "MALLOC_TRIM_THRESHOLD_": "1099511627776"}


def study_with(environment) -> Study:
    config = {
        "envs": {
            "cpu": {"device": "cpu"},
            "cpu_kept": {"device": "cpu", "environment": environment},
        },
        "study": {"models": ["resnet18"], "precisions": ["fp32"], "batch_sizes": [8]},
    }
    return Study(config, machine_device="cpu", known_models=["resnet18"], cpu_count=4)


def test_the_study_gives_each_env_its_variables_as_driver_flags():
    study = study_with({"MALLOC_MMAP_THRESHOLD_": 33554432, "X": "a b"})
    assert study.environment("cpu_kept") == {"MALLOC_MMAP_THRESHOLD_": "33554432", "X": "a b"}
    assert study.environment("cpu") == {}
    assert study.option_flags("cpu") == []  # an env without them: its commands unchanged
    tokens = shlex.split(" ".join(study.option_flags("cpu_kept")))
    assert tokens == ["--environ", "MALLOC_MMAP_THRESHOLD_=33554432", "--environ", "X=a b"]
    assert envvars.wanted_in(tokens) == study.environment("cpu_kept")


@pytest.mark.parametrize(
    "block, words",
    [
        (
            {"OMP_NUM_THREADS": 4},
            "environment.OMP_NUM_THREADS: OMP_NUM_THREADS is set by the env's threads key",
        ),
        ({"CUDA_VISIBLE_DEVICES": "0"}, "CUDA_VISIBLE_DEVICES is set by the scheduler"),
        (
            {"MALLOC_ARENA_MAX": True},
            "environment.MALLOC_ARENA_MAX: True is not a string or a number",
        ),
        (
            {"LD_PRELOAD": ["/a.so"]},
            "environment.LD_PRELOAD: ['/a.so'] is not a string or a number",
        ),
        ({"1BAD": "x"}, "environment.1BAD: '1BAD' is not a variable name"),
        ("MALLOC=1", "config envs.cpu_kept.environment: a mapping of variable names to values"),
    ],
)
def test_a_bad_block_is_refused_naming_the_key(block, words):
    with pytest.raises(InputError, match="config envs.cpu_kept.environment") as err:
        study_with(block)
    assert words in str(err.value)


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--environ", "NOVALUE"], "--environ 'NOVALUE': not NAME=VALUE"),
        (["--", "python", "d.py", "--environ=OMP_NUM_THREADS=3"], "OMP_NUM_THREADS is set by"),
    ],
)
def test_bad_flags_are_refused_naming_the_flag(argv, words):
    with pytest.raises(InputError) as err:
        envvars.wanted_in(argv)
    assert words in str(err.value)


def test_a_wrapper_finds_its_drivers_variables_after_the_double_dash():
    argv = ["--ncu", "ncu", "--", "python", "run_train.py", "--environ", "A=1", "--environ=B=x=y"]
    assert envvars.wanted_in(argv) == {"A": "1", "B": "x=y"}


def test_path_lists_keep_what_the_profiler_put_there():
    ncu = {"LD_PRELOAD": "/ncu/libInjection.so", "MALLOC_X": "old"}
    wanted = {"LD_PRELOAD": "/usr/lib/libjemalloc.so.2", "MALLOC_X": "new"}
    merged = envvars.merged(ncu, wanted)
    assert merged == {
        "LD_PRELOAD": "/usr/lib/libjemalloc.so.2:/ncu/libInjection.so",
        "MALLOC_X": "new",
    }
    assert envvars.in_effect(merged, wanted) and not envvars.in_effect(ncu, wanted)
    # ncu putting its library first, after the wrapper started with the allocator
    assert envvars.in_effect(
        {"LD_PRELOAD": "/ncu/i.so /usr/lib/libjemalloc.so.2", "MALLOC_X": "new"}, wanted
    )


def script(tmp_path: Path) -> Path:
    path = tmp_path / "measure.py"
    path.write_text(
        "import os, sys\n"
        f"sys.path.insert(0, {str(SCRIPTS)!r})\n"
        "from dnnroofline.study.environment import start_with_environment\n"
        "print('pid', os.getpid(), flush=True)\n"
        "start_with_environment()\n"
        "print('A', os.environ.get('A'), 'B', os.environ.get('B'))\n"
    )
    return path


def test_a_measurement_starts_itself_again_with_its_variables_in_the_same_process(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("A", "B")}
    proc = subprocess.run([sys.executable, str(script(tmp_path)), "--environ", "A=1 2",
                           "--environ", "B="],
                          capture_output=True, text=True, env=env, check=True)  # fmt: skip
    first, again, seen = proc.stdout.splitlines()
    assert first == again  # exec: the same pid, so Snakemake and Slurm see one process
    assert seen == "A 1 2 B "
    # already in effect: no restart
    proc = subprocess.run([sys.executable, str(script(tmp_path)), "--environ", "A=x"],
                          capture_output=True, text=True, env={**env, "A": "x"},
                          check=True)  # fmt: skip
    assert proc.stdout.splitlines()[1:] == ["A x B None"]


def test_a_bad_flag_stops_the_measurement_before_it_starts(tmp_path):
    proc = subprocess.run([sys.executable, str(script(tmp_path)), "--environ", "=1"],
                          capture_output=True, text=True)  # fmt: skip
    assert proc.returncode == 2
    assert "measure.py: error: --environ '=1': '' is not a variable name" in proc.stderr
    assert proc.stdout.count("pid") == 1 and "A " not in proc.stdout


def test_the_driver_imported_without_its_variables_refuses_to_measure(
    tmp_path, capsys, monkeypatch
):
    monkeypatch.delenv("DNNROOFLINE_PROBE", raising=False)
    out = tmp_path / "run.json"
    code = train.main(["--arch", "resnet18", "--batch-size", "2", "--backend", "cpu", "--synthetic",
                       "--environ", "DNNROOFLINE_PROBE=1", "--out", str(out)])  # fmt: skip
    assert code == 2 and not out.exists()
    assert (
        "--environ: DNNROOFLINE_PROBE not in this process's environment" in capsys.readouterr().err
    )


def timed_run(tmp_path: Path, name: str, environ: dict[str, str]) -> dict:
    """A real timed run of a step that writes a fresh 16 MiB buffer and frees it."""
    out = tmp_path / f"{name}.json"
    flags = [a for k, v in environ.items() for a in ("--environ", f"{k}={v}")]
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    env["PYTHONPATH"] = str(ROOT / "tests" / "data" / "models")
    subprocess.run([sys.executable, str(SCRIPTS / "run_train.py"), "--model-factory",
                    "tiny_models:fresh_scratch", "--arch", "fresh", "--image-size", "8",
                    "--num-classes", "10", "--batch-size", "2", "--warmup-iters", "2",
                    "--iters", "4", "--backend", "cpu", "--synthetic", *flags, "--out", str(out)],
                   capture_output=True, text=True, env=env, check=True, timeout=300)  # fmt: skip
    return json.loads(out.read_text())


def fault_mib_per_step(run: dict) -> float:
    t = run["timed_region"]
    return t["minor_faults"] * t["page_bytes"] / 2**20 / 4


def test_the_variables_reach_glibc_in_the_timed_run(tmp_path):
    """With its mmap threshold fixed at 1 MiB, glibc maps the 16 MiB buffer afresh at
    every allocation and unmaps it at its free, so every timed step faults in all of it:
    only a variable set at the process's start does that. (Without it, glibc's own
    adjustment of the threshold decides, and on a loaded host it went both ways.)"""
    mapped = {"MALLOC_MMAP_THRESHOLD_": "1048576"}
    run = timed_run(tmp_path, "mapped", mapped)
    assert run["status"] == "ok" and run["config"]["environment"] == mapped
    assert fault_mib_per_step(run) >= 15.5  # 16 MiB and a few pages, every step


HERE = {"host": "box", "cpu_model": "EPYC", "gpus": []}


def test_the_report_holds_an_env_with_variables_against_the_same_env_without():
    cfg = {"envs": {"cpu": {"device": "cpu"}, "cpu_kept": {"device": "cpu", "environment": KEPT},
                    "cpu_cl": {"device": "cpu", "channels_last": True}},
           "study": {"models": ["m"]}}  # fmt: skip
    infos = dict.fromkeys(cfg["envs"], HERE)
    tp = pd.DataFrame([
        {"env": e, "model": "m", "precision": "fp32", "batch_size": 8, "ips_median": ips,
         "fault_mib_per_step": mib}
        for e, ips, mib in (("cpu", 100.0, 120.0), ("cpu_kept", 115.0, 0.4), ("cpu_cl", 90.0, 80.0))
    ])  # fmt: skip
    facts = ec.environment_facts(cfg, tp, infos, None)
    (row,) = facts["rows"]
    assert facts["any"] and row["base_env"] == "cpu"  # not cpu_cl: it runs the step otherwise
    assert row["speedup"] == pytest.approx(1.15)
    html = ENV.from_string('{% import "parts/env_compare.html" as e %}{{ e.environment(f) }}')
    text = " ".join(html.render(f=facts).split())
    assert (
        "on cpu_kept (eager, MALLOC_MMAP_THRESHOLD_=33554432, "
        "MALLOC_TRIM_THRESHOLD_=1099511627776): "
        in text
        and "against cpu at" in text
        and "1.15× the throughput, its steps faulting in 0.400 MiB of fresh pages against 120 MiB"
        in text
    ), text
    alone = {"envs": {"cpu_kept": cfg["envs"]["cpu_kept"]}, "study": {"models": ["m"]}}
    (row,) = ec.environment_facts(alone, tp, infos, None)["rows"]
    assert row["base_env"] is None
    assert "No env on the same machine runs the step the same way" in " ".join(
        html.render(f=ec.environment_facts(alone, tp, infos, None)).split()
    )


def test_the_reproducing_command_gives_the_variables_the_run_recorded():
    cfg = {"envs": {"cpu_kept": {"device": "cpu", "environment": {"A": 1}}},
           "study": {"models": ["resnet18"], "precisions": ["fp32"],
                     "batch_sizes": [8]}}  # fmt: skip
    run = {"run_id": "r1", "env": "cpu_kept", "model": "resnet18", "precision": "fp32",
           "batch_size": 8}  # fmt: skip
    assert "--environ A=1 --env cpu_kept" in run_command(cfg, run)
    ran = {"environment": {"MALLOC_TRIM_THRESHOLD_": "0"}}
    assert "--environ MALLOC_TRIM_THRESHOLD_=0 --env" in run_command(cfg, run, ran=ran)
