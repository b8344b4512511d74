"""`make gpu-check`: the counter self-test, ceilings, a small GPU study and the report.

    python3 scripts/gpu_check.py detect    # one line; exit 0 with an NVIDIA GPU, 1 without
    python scripts/gpu_check.py run        # the study of config/gpu_check.yaml, then summary
    python scripts/gpu_check.py summary    # the summary table of the results already there

`detect` uses the standard library only, so it runs before anything is installed.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIG = "config/gpu_check.yaml"
ENV = "local"  # the default env: device auto, so cuda on an NVIDIA machine
SUMMARY = "results/gpu_check_summary.md"


def find_gpu() -> str | None:
    """The NVIDIA GPU's name, or None. nvidia-smi first; the driver's /proc entry else."""
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            out = None
        if out is not None and out.returncode == 0:
            gpus = [line for line in out.stdout.splitlines() if line.startswith("GPU ")]
            if gpus:
                return gpus[0].split(":", 1)[1].split("(")[0].strip()
    if Path("/proc/driver/nvidia/version").exists():
        return "an NVIDIA GPU (driver loaded; nvidia-smi not found)"
    return None


def detect() -> int:
    gpu = find_gpu()
    if gpu is None:
        print(
            "gpu-check: no NVIDIA GPU on this machine (no nvidia-smi GPU, no NVIDIA driver); "
            "nothing to check."
        )
        return 1
    print(f"gpu-check: found {gpu}")
    return 0


def summary() -> int:
    sys.path.insert(0, str(ROOT / "workflow" / "scripts"))
    from dnnroofline.gpu_check import summary_markdown

    results = ROOT / "results"
    ceilings = json.loads((results / ENV / "ceilings.json").read_text())
    selftest_path = results / ENV / "ncu" / "selftest.json"
    selftest = json.loads(selftest_path.read_text()) if selftest_path.exists() else None
    with open(results / "roofline_points.csv", newline="") as fh:
        points = []
        for row in csv.DictReader(fh):
            for key in ("batch_size", "images_per_s", "ai", "executed_flops", "useful_flops"):
                try:
                    row[key] = float(row[key])
                except (KeyError, ValueError):
                    row[key] = None
            if row["env"] == ENV:
                points.append(row)
    text = summary_markdown(ENV, ceilings.get("device_name") or "?", ceilings, selftest, points)
    (ROOT / SUMMARY).write_text(text + "\n")
    print(text)
    print(f"\ngpu-check: summary in {SUMMARY}; report in results/report.html")
    return 0


def run(cores: str) -> int:
    os.chdir(ROOT)
    if find_gpu() is None:
        return detect() and 0
    steps = [
        ["snakemake", "--cores", cores, "--configfile", CONFIG, "--keep-going"],
        ["snakemake", "--configfile", CONFIG, "--report", "results/report.html"],
    ]
    for cmd in steps:
        print("gpu-check: " + " ".join(cmd), flush=True)
        rc = subprocess.run(cmd).returncode
        if rc != 0:
            print(f"gpu-check: {cmd[0]} failed (exit {rc}); see results/*/logs/", file=sys.stderr)
            return rc
    return summary()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("command", choices=["detect", "run", "summary"])
    ap.add_argument("--cores", default="all")
    args = ap.parse_args(argv)
    if args.command == "detect":
        return detect()
    if args.command == "summary":
        return summary()
    return run(args.cores)


if __name__ == "__main__":
    sys.exit(main())
