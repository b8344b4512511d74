"""Two studies on one machine at once: what the machine-wide measurement lock buys.

Two snakemakes, each in its own folder with the same small study (the env's threads
unset: all the cores, as in the default config), started together. Rounds alternate
the lock off (``DNNROOFLINE_MEASUREMENT_LOCK=off``: only each snakemake's own
``measurement`` slot) and on (a lock file of the round's own), so that drift falls on
both alike. Reported per mode: how many pairs of timed runs overlapped in time (from
their start and end), the median images/s per model over both studies, and the wall
time of the pair.

    python benchmarks/bench_concurrent_studies.py --rounds 2 --json bench.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
STUDY = {
    "envs": {"local": {"device": "cpu"}},
    "study": {
        "models": ["resnet18", "mobilenet_v2"],
        "precisions": ["fp32"],
        "batch_sizes": [8],
        "runs": 3,
        "warmup_iters": 2,
        "iters": 8,
        "image_size": 96,
        "data": "synthetic",
    },
    "ceilings": {"quick": True},
    "traces": {"enabled": False},
}


def one_round(base: Path, lock: str) -> dict:
    """Both studies started together; their timed runs once both have finished."""
    dirs = [base / "a", base / "b"]
    env = dict(os.environ, DNNROOFLINE_MEASUREMENT_LOCK=lock)
    cmd = [str(BIN / "snakemake"), "-s", str(ROOT / "Snakefile"), "--cores", "all"]
    for d in dirs:
        (d / "config").mkdir(parents=True)
        (d / "config" / "config.yaml").write_text(yaml.safe_dump(STUDY))
    t0 = time.monotonic()
    procs = [
        subprocess.Popen([*cmd, "-d", str(d), "results/metrics.csv"], env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for d in dirs
    ]  # fmt: skip
    if any(p.wait() != 0 for p in procs):
        raise SystemExit(f"a study failed in {base}")
    wall = time.monotonic() - t0
    runs = [json.loads(f.read_text()) for d in dirs for f in d.glob("results/local/runs/*.json")]
    return {"wall_s": wall, "runs": runs}


def overlapping_pairs(runs: list[dict]) -> int:
    spans = sorted((r["start_time"], r["end_time"]) for r in runs)
    return sum(1 for i, a in enumerate(spans) for b in spans[i + 1 :] if b[0] < a[1])


def summary(rounds: list[dict]) -> dict:
    runs = [r for rnd in rounds for r in rnd["runs"]]
    by_model: dict[str, list[float]] = {}
    for r in runs:
        by_model.setdefault(r["config"]["arch"], []).append(r["images_per_s"])
    return {
        "timed_runs": len(runs),
        "overlapping_pairs": sum(overlapping_pairs(rnd["runs"]) for rnd in rounds),
        "images_per_s": {m: statistics.median(v) for m, v in sorted(by_model.items())},
        "wall_s": statistics.median(rnd["wall_s"] for rnd in rounds),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2, help="rounds per mode (alternating)")
    ap.add_argument("--json", help="write the results here too")
    args = ap.parse_args()
    results: dict[str, list[dict]] = {"off": [], "on": []}
    with tempfile.TemporaryDirectory(prefix="bench-concurrent-") as tmp:
        for i in range(args.rounds):
            for mode in ("off", "on") if i % 2 == 0 else ("on", "off"):
                base = Path(tmp) / f"{mode}{i}"
                lock = "off" if mode == "off" else str(base / "measurement.lock")
                results[mode].append(one_round(base, lock))
                print(f"round {i} lock {mode}: {results[mode][-1]['wall_s']:.1f} s", flush=True)
    table = {mode: summary(rounds) for mode, rounds in results.items()}
    print("\n| lock | timed runs | overlapping pairs | images/s " + " | images/s ".join(
        table["off"]["images_per_s"]) + " | wall time of the pair |")  # fmt: skip
    for mode in ("off", "on"):
        t = table[mode]
        ips = " | ".join(f"{v:.1f}" for v in t["images_per_s"].values())
        print(f"| {mode} | {t['timed_runs']} | {t['overlapping_pairs']} | {ips} "
              f"| {t['wall_s']:.0f} s |")  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(table, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
