"""Helpers for tests that run the real workflow: the tiny study and a snakemake() runner."""

from __future__ import annotations

import csv
import hashlib
import html as html_lib
import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
SCRIPTS = ROOT / "workflow" / "scripts"

# A user's model factory (the shipped CIFAR example at its own size and class count):
# in the tiny study, so that every stage runs for it too.
CIFAR = {
    "name": "cifar_resnet18",
    "factory": "examples.models.cifar_resnet:resnet18",
    "image_size": 32,
    "num_classes": 10,
}
# One torchvision model and the CIFAR factory model at a small image size, two batch
# sizes, a few iterations and 2 repeats; traces at their default (on). Every job costs a
# torch import (about 4-6 s on a 2-core host), so the study stays this small: the other
# default models are planned in dry runs and inventoried in tests/test_op_inventory.py.
TINY = {
    "envs": {"local": {"device": "auto", "threads": 1}},
    "study": {
        "models": ["resnet18", CIFAR],
        "precisions": ["fp32"],
        "batch_sizes": [2],
        "runs": 2,
        "warmup_iters": 1,
        "iters": 3,
        "image_size": 32,
        "data": "synthetic",
    },
    "ceilings": {"quick": True},
}


#: the tiny study's points (model x batch size) and timed runs (points x repeats)
TINY_POINTS = len(TINY["study"]["models"]) * len(TINY["study"]["batch_sizes"])
TINY_RUNS = TINY_POINTS * TINY["study"]["runs"]

#: ``env_extra`` of a dry run on a CUDA machine without a GPU: the Snakemake process
#: loads tests/fake_cuda/sitecustomize.py, which makes the DAG's device detection say cuda.
FAKE_CUDA = {"PYTHONPATH": str(ROOT / "tests" / "fake_cuda")}


def run_env(**extra: str) -> dict:
    """The environment of a workflow or stage run: this venv first on PATH, Agg plots.

    A CUDA machine (for dry runs) only where ``extra`` is :data:`FAKE_CUDA`."""
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}", MPLBACKEND="Agg")
    return {**env, **extra}


def snakemake(workdir: Path, *args, check=True, timeout=900, preexec_fn=None, env_extra=None):
    """Run this checkout's workflow in ``workdir`` with the venv's snakemake."""
    cmd = [str(BIN / "snakemake"), "-s", str(ROOT / "Snakefile"), "-d", str(workdir), *args]
    proc = subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        env=run_env(**(env_extra or {})),
        timeout=timeout,
        preexec_fn=preexec_fn,
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"{' '.join(cmd)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
        )
    return proc


def script(name: str, *args, env: dict | None = None, check=True):
    """Run one stage script of workflow/scripts with one OpenMP thread."""
    proc = subprocess.run(
        [sys.executable, str(SCRIPTS / name), *map(str, args)],
        capture_output=True,
        text=True,
        env={**run_env(), "OMP_NUM_THREADS": "1", **(env or {})},
        timeout=600,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"{name} {args} failed:\n{proc.stdout}\n{proc.stderr}")
    return proc


def write_config(workdir: Path, config: dict | str) -> Path:
    (workdir / "config").mkdir(parents=True, exist_ok=True)
    path = workdir / "config" / "config.yaml"
    path.write_text(config if isinstance(config, str) else yaml.safe_dump(config, sort_keys=False))
    return path


def job_counts(output: str) -> dict[str, int]:
    """Snakemake's "Job stats" table of a run (empty when nothing was to be done)."""
    if "Job stats:" not in output:
        return {}
    table = output.split("Job stats:")[1].split("\n\n")[0]
    return {m[0]: int(m[1]) for m in re.findall(r"^(\w+)\s+(\d+)$", table, re.M)}


def read_csv(path: Path) -> list[dict]:
    with open(path) as fh:
        return list(csv.DictReader(fh))


def snapshot(paths) -> dict[str, tuple[str, int]]:
    """{path: (sha256, mtime_ns)}: a finished file must stay byte-identical and untouched."""
    return {
        str(p): (hashlib.sha256(Path(p).read_bytes()).hexdigest(), Path(p).stat().st_mtime_ns)
        for p in paths
    }


def text_of(html: Path) -> str:
    """An HTML file's text, tags dropped, entities decoded, whitespace collapsed."""
    return re.sub(r"\s+", " ", html_lib.unescape(re.sub(r"<[^>]+>", " ", html.read_text())))
