"""Issue 37: how long compare_studies.py takes on a large pair of studies.

    python benchmarks/bench_compare.py [--points 50] [--runs 20] [--steps 20] \\
        [--repeats 3] [--out compare.json]

Builds a synthetic baseline and current study in a temporary folder (``--points``
(model, batch) points of one env, ``--runs`` run JSONs of ``--steps`` steps each per
point, per side: 1,000 runs a side by default; the current study a few percent slower
on some points, one point failed), with metrics.csv, study_config.json, env_info.json
and ceilings.json on both sides, then times the CLI end to end (a fresh Python each
time: imports, reading both studies, the bootstrap of every point, the six CSVs), the
best and median of ``--repeats``. Prints and writes JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "workflow" / "scripts" / "compare_studies.py"
PAGE_SCRIPT = ROOT / "workflow" / "scripts" / "write_compare_section.py"


def run_doc(env, model, batch, run, steps):
    med = float(np.median(steps))
    return {
        "schema_version": 1,
        "status": "ok",
        "message": None,
        "run_id": f"{env}_{model}_fp32_bs{batch}_run{run}",
        "env": env,
        "config": {"arch": model, "batch_size": batch, "precision": "fp32", "image_size": 64,
                   "num_classes": 10, "threads": 2, "nproc": 1, "iters": len(steps)},
        "step_time_s": {"median": med, "p5": float(np.percentile(steps, 5)),
                        "p95": float(np.percentile(steps, 95)),
                        "cv": float(np.std(steps) / np.mean(steps)), "all": steps},
        "images_per_s": batch / med,
    }  # fmt: skip


def write_side(results: Path, points, runs, steps, slow, seed):
    """One study's files; ``slow``: {point index: factor on its step time}."""
    from dnnroofline.aggregate.metrics import metrics_frame

    rng = np.random.default_rng(seed)
    folder = results / "local" / "runs"
    folder.mkdir(parents=True)
    docs = []
    for p in range(points):
        model, batch = f"net{p // 2}", 8 * (1 + p % 2)
        base = 0.05 * (1 + p % 7) * slow.get(p, 1.0)
        for r in range(1, runs + 1):
            run_med = base * (1 + rng.normal(0, 0.01))
            s = [float(v) for v in run_med * (1 + rng.normal(0, 0.02, steps))]
            doc = run_doc("local", model, batch, r, s)
            docs.append(doc)
            (folder / f"{doc['run_id']}.json").write_text(json.dumps(doc))
    metrics_frame(docs).to_csv(results / "metrics.csv", index=False)
    info = {"env": "local", "torch": f"2.{seed}.0", "cpu_flags": ["avx2"], "gpus": []}
    (results / "local" / "env_info.json").write_text(json.dumps(info))
    roof = {"kind": "compute", "precision": "fp32", "source": "measured"}
    ceil = {"env": "local", "roofs": [roof | {"value": 1e11 * (1 + seed / 100)}]}
    (results / "local" / "ceilings.json").write_text(json.dumps(ceil))
    return docs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=int, default=50)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench_compare.") as tmp:
        tmp = Path(tmp)
        write_side(tmp / "old" / "results", args.points, args.runs, args.steps, {}, 1)
        slow = {p: 1.08 for p in range(0, args.points, 5)}
        write_side(tmp / "new" / "results", args.points, args.runs, args.steps, slow, 2)
        current = tmp / "new" / "results"
        config = {"envs": {"local": {"threads": 2}}, "study": {"iters": args.steps},
                  "compare": {"baseline": str(tmp / "old")}}  # fmt: skip
        (current / "study_config.json").write_text(json.dumps(config))
        cmd = [sys.executable, str(SCRIPT), "--config", str(current / "study_config.json"),
               "--metrics", str(current / "metrics.csv"),
               "--runs", *map(str, sorted(current.glob("local/runs/*.json"))),
               "--env-info", str(current / "local" / "env_info.json"),
               "--ceilings", str(current / "local" / "ceilings.json"),
               "--outdir", str(current)]  # fmt: skip
        page = [sys.executable, str(PAGE_SCRIPT), "--config", str(current / "study_config.json"),
                *(f"--{name}={current / f'compare_{name}.csv'}"
                  for name in ("unmatched", "fingerprints", "ops", "kernels", "roofs")),
                "--compare", str(current / "compare.csv"),
                "--out", str(tmp / "page.html")]  # fmt: skip
        walls, page_walls = [], []
        for _ in range(args.repeats):
            start = time.monotonic()
            res = subprocess.run(cmd, capture_output=True, text=True)
            walls.append(time.monotonic() - start)
            start = time.monotonic()
            page_res = subprocess.run(page, capture_output=True, text=True)
            page_walls.append(time.monotonic() - start)
            for proc in (res, page_res):
                if proc.returncode != 0:
                    print(proc.stderr, file=sys.stderr)
                    return 1
        page_bytes = (tmp / "page.html").stat().st_size
        import pandas as pd

        compared = pd.read_csv(current / "compare.csv")
    result = {
        "what": "compare_studies.py end to end (a fresh interpreter: imports, both studies "
        "read, the bootstrap of every point, six CSVs written)",
        "points": args.points,
        "runs_per_point": args.runs,
        "steps_per_run": args.steps,
        "runs_per_side": args.points * args.runs,
        "compared_points": len(compared),
        "verdicts": compared["verdict"].value_counts().to_dict(),
        "cli_wall_s": min(walls),
        "cli_wall_median_s": statistics.median(walls),
        "page_what": "write_compare_section.py on those CSVs (the report page, no plot)",
        "page_wall_s": min(page_walls),
        "page_wall_median_s": statistics.median(page_walls),
        "page_bytes": page_bytes,
        "total_wall_median_s": statistics.median(
            w + p for w, p in zip(walls, page_walls, strict=True)
        ),
        "repeats": args.repeats,
        "summary": res.stdout.strip(),
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "processor": platform.processor() or platform.machine(),
        },  # fmt: skip
    }
    print(json.dumps(result, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
