"""Time `snakemake -n` on a large study matrix (default 1,000 timed runs).

    python benchmarks/bench_dry_run.py [--repeats 3] [--runs-per-config 20]

The matrix of tests/test_workflow.py::test_dry_run_of_a_1000_run_matrix: 5 models x
fp32 x 10 batch sizes x N repeats on env local, plus a CUDA env not measured here. fp32
alone, as there: every CPU runs it, while bf16 needs AVX512_BF16 or AMX, which a CPU
without them rightly refuses at validation. Prints the median wall time of the dry runs.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--runs-per-config", type=int, default=20)
    args = parser.parse_args()
    config = {
        "envs": {"local": {"device": "auto", "threads": 2}, "gcp_l4": {"device": "cuda"}},
        "measure_envs": ["local"],
        "study": {
            "models": ["resnet18", "resnet50", "mobilenet_v2", "vgg16", "efficientnet_b0"],
            "precisions": ["fp32"],
            "batch_sizes": [1, 2, 4, 8, 16, 32, 64, 128, 256, 512],
            "runs": args.runs_per_config,
        },
    }
    snakemake = str(Path(sys.executable).parent / "snakemake")
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "config").mkdir()
        (Path(tmp) / "config" / "config.yaml").write_text(yaml.safe_dump(config))
        times = []
        for _ in range(args.repeats):
            start = time.monotonic()
            out = subprocess.run(
                [snakemake, "-s", str(ROOT / "Snakefile"), "-d", tmp, "-n", "--cores", "2"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            times.append(time.monotonic() - start)
    runs = int(re.search(r"^train\s+(\d+)$", out, re.M).group(1))
    jobs = int(re.search(r"^total\s+(\d+)$", out, re.M).group(1))
    print(f"timed runs in the matrix: {runs}; jobs in the DAG: {jobs}")
    print(
        f"dry run wall time: median {statistics.median(times):.2f} s over {len(times)} "
        f"(min {min(times):.2f}, max {max(times):.2f})"
    )


if __name__ == "__main__":
    main()
