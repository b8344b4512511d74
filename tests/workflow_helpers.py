"""Helpers for tests that run the real workflow: the tiny study and a snakemake() runner."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent

# A user's model factory (the shipped CIFAR example at its own size and class count):
# in the tiny study, so that every stage runs for it too.
CIFAR = {
    "name": "cifar_resnet18",
    "factory": "examples.models.cifar_resnet:resnet18",
    "image_size": 32,
    "num_classes": 10,
}
# The default study's models at a small image size, a few iterations and 2 repeats,
# plus the CIFAR factory model; traces at their default (on).
TINY = {
    "envs": {"local": {"device": "auto", "threads": 1}},
    "study": {
        "models": ["resnet18", "mobilenet_v2", "resnet50", CIFAR],
        "precisions": ["fp32"],
        "batch_sizes": [2, 4],
        "runs": 2,
        "warmup_iters": 1,
        "iters": 3,
        "image_size": 32,
        "data": "synthetic",
    },
    "ceilings": {"quick": True},
}


def snakemake(workdir: Path, *args, check=True, timeout=900):
    """Run this checkout's workflow in ``workdir`` with the venv's snakemake."""
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}", MPLBACKEND="Agg")
    cmd = [str(BIN / "snakemake"), "-s", str(ROOT / "Snakefile"), "-d", str(workdir), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(
            f"{' '.join(cmd)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
        )
    return proc


def write_config(workdir: Path, config: dict) -> Path:
    (workdir / "config").mkdir(parents=True, exist_ok=True)
    path = workdir / "config" / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path
