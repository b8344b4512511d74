"""The tiny study through a local Slurm against local execution, and Slurm's per-job cost.

    python benchmarks/bench_slurm.py [--rounds 3] [--skip-study]

Needs root and Debian's Slurm (see scripts/local_slurm.sh, which this starts in a
temporary folder and stops). Two measurements, each side by side in one run:

1. The tiny study of the tests (workflow_helpers.TINY) with two CPU envs, one per
   partition of the one node: `snakemake --cores 2` here, then the same config in a
   fresh folder through `--workflow-profile profiles/slurm` (its measurements,
   env_info and complexity as Slurm jobs, the analysis, localrules, on this host).
2. One small Slurm job (cpu_a's env_info, which reads the machine), forced `--rounds`
   times, alternating here and through Slurm. The difference of the wall times is what
   Slurm adds to one job; sacct's elapsed time of the job is the part spent on the node
   (the job's own Snakemake, started twice by the executor: once by sbatch, once by
   srun, and the job itself), the rest is submission and status polling.

The executor polls job status 1 s after submission (the tests' setting; the plugin's
default is 40 s), then every 1 + 10k s while no job finishes.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from dnnroofline.study.cluster import SACCT_FORMAT, parse_sacct

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
SCRIPT = ROOT / "scripts" / "local_slurm.sh"
SLURM = ["--workflow-profile", str(ROOT / "profiles" / "slurm")]
FAST = ["--slurm-init-seconds-before-status-checks", "1"]
sys.path.insert(0, str(ROOT / "tests"))
from workflow_helpers import TINY  # noqa: E402  (the tests' tiny study: tests/ is no package)

# the tests' tiny study, with two CPU envs, one per partition of the one node
CONFIG = dict(
    TINY,
    envs={
        "cpu_a": {"device": "cpu", "threads": 1, "slurm": {"partition": "debug"}},
        "cpu_b": {"device": "cpu", "threads": 1, "slurm": {"partition": "batch"}},
    },
)


def snakemake(workdir: Path, *args: str) -> float:
    """Wall seconds of one snakemake run in workdir (raises on failure)."""
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}", MPLBACKEND="Agg")
    cmd = [str(BIN / "snakemake"), "-s", str(ROOT / "Snakefile"), "-d", str(workdir), *args]
    start = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    return time.monotonic() - start


def jobs_of(workdir: Path) -> list[tuple[str, int]]:
    """(rule, elapsed seconds) of every Slurm job run from workdir."""
    out = subprocess.run(
        ["sacct", "-a", "-X", "-n", "-P", "-S", "2000-01-01", "-o", SACCT_FORMAT],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [(j["rule"], j["elapsed"]) for j in parse_sacct(out) if Path(j["workdir"]) == workdir]


def study(tmp: Path) -> None:
    here, there = tmp / "local", tmp / "slurm"
    for d in (here, there):
        (d / "config").mkdir(parents=True)
        (d / "config" / "config.yaml").write_text(yaml.safe_dump(CONFIG))
    local_s = snakemake(here, "--cores", "2")
    slurm_s = snakemake(there, *SLURM, *FAST)
    jobs = jobs_of(there)
    on_node = sum(e for _, e in jobs)
    points = len(TINY["study"]["models"]) * len(TINY["study"]["batch_sizes"])
    print(
        f"tiny study ({points} points x {TINY['study']['runs']} repeats), 2 envs: "
        f"{len(jobs)} Slurm jobs ({', '.join(sorted({rule for rule, _ in jobs}))})"
    )
    print(f"  here (--cores 2):        {local_s:7.1f} s")
    print(f"  through the local Slurm: {slurm_s:7.1f} s  (x{slurm_s / local_s:.2f})")
    print(f"  sum of the Slurm jobs' elapsed times: {on_node} s")


def one_job(tmp: Path, rounds: int) -> None:
    here, there = tmp / "one_local", tmp / "one_slurm"
    for d in (here, there):
        (d / "config").mkdir(parents=True)
        (d / "config" / "config.yaml").write_text(yaml.safe_dump(CONFIG))
    target = ["results/cpu_a/env_info.json", "--forcerun", "env_info"]
    local_s, slurm_s = [], []
    for _ in range(rounds):  # alternating, so that drift hits both
        local_s.append(snakemake(here, "--cores", "1", *target))
        slurm_s.append(snakemake(there, *SLURM, *FAST, *target))
    elapsed = [e for _, e in jobs_of(there)]
    lm, sm = statistics.median(local_s), statistics.median(slurm_s)
    print(f"one small Slurm job (cpu_a's env_info), median of {rounds}:")
    print(
        f"  here:                    {lm:6.1f} s (min {min(local_s):.1f}, max {max(local_s):.1f})"
    )
    print(
        f"  through the local Slurm: {sm:6.1f} s (min {min(slurm_s):.1f}, max {max(slurm_s):.1f})"
    )
    print(
        f"  Slurm adds {sm - lm:.1f} s per job; "
        f"on the node (sacct): median {statistics.median(elapsed)} s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--skip-study", action="store_true", help="only the one-job overhead")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, LOCAL_SLURM_DIR=str(Path(tmp) / "slurm"))
        subprocess.run([str(SCRIPT), "start"], env=env, check=True)
        try:
            one_job(Path(tmp), args.rounds)
            if not args.skip_study:
                study(Path(tmp))
        finally:
            subprocess.run([str(SCRIPT), "stop"], env=env, check=False)


if __name__ == "__main__":
    main()
