"""Issue 37: how often the regression gate cries wolf on a rerun, and whether it catches
a real slowdown, through the real workflow.

    python benchmarks/bench_regression_gate.py [--workdir /tmp/gate] [--reruns 4] \\
        [--out regression_gate.json]

A small CPU study (:data:`STUDY`: three models at 64 px, batch 8, 3 runs each, quick
ceilings) runs once as the baseline, then ``--reruns`` times again, unchanged, each in a
folder of its own, compared with the baseline (``compare: {baseline: ...}``,
``snakemake results/compare.csv``) and gated (``regression_gate.py``) at 5% and at 10%;
then once more with half the threads (``envs.local.threads`` 1 against 2), the real
slowdown the gate must name. Per study: its verdicts, the gate's exit code and the
points it named at each tolerance. The false-alarm rate is the share of (rerun, point)
pairs the gate fails at a tolerance. Run it alone on the machine: it measures.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import yaml

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "workflow" / "scripts"
STUDY = {
    "envs": {"local": {"device": "auto", "threads": 2}},
    "study": {
        "models": ["resnet18", "mobilenet_v2", "squeezenet1_1"],
        "precisions": ["fp32"],
        "batch_sizes": [8],
        "runs": 3,
        "warmup_iters": 3,
        "iters": 10,
        "image_size": 64,
        "data": "synthetic",
    },
    "ceilings": {"quick": True},
}
TOLERANCES = (5.0, 10.0)


def run_study(work: Path, config: dict, targets: list[str]) -> float:
    work.mkdir(parents=True, exist_ok=True)
    (work / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    snakemake = str(Path(sys.executable).parent / "snakemake")
    cmd = [snakemake, "-s", str(ROOT / "Snakefile"), "-d", str(work), "--configfile",
           str(work / "config.yaml"), "--cores", "2", *targets]  # fmt: skip
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"{work}: snakemake failed:\n{proc.stderr[-4000:]}")
    return time.monotonic() - t0


def gate(work: Path, tolerance: float) -> tuple[int, list[str]]:
    cmd = [sys.executable, str(SCRIPTS / "regression_gate.py"),
           str(work / "results" / "compare.csv"), "--tolerance-pct", str(tolerance)]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=work)
    named = [line for line in proc.stdout.splitlines() if line.strip()]
    return proc.returncode, named if proc.returncode == 1 else []


def compared(work: Path, baseline: Path, config: dict, label: str) -> dict:
    config = {**config, "compare": {"baseline": str(baseline), "label": "baseline"}}
    wall = run_study(work, config, ["results/compare.csv"])
    rows = pd.read_csv(work / "results" / "compare.csv").to_dict("records")
    gates = {str(t): dict(zip(("exit", "named"), gate(work, t), strict=True)) for t in TOLERANCES}
    return {"study": label, "wall_s": wall, "rows": rows, "gate": gates}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--reruns", type=int, default=4)
    ap.add_argument("--out", default="regression_gate.json")
    args = ap.parse_args()
    base = Path(args.workdir or tempfile.mkdtemp(prefix="gate-"))
    baseline = base / "baseline"
    run_study(baseline, STUDY, ["results/metrics.csv", "results/roofline_points.csv"])
    studies = [
        compared(base / f"rerun{i}", baseline, STUDY, f"rerun {i}")
        for i in range(1, args.reruns + 1)
    ]
    half = {**STUDY, "envs": {"local": {"device": "auto", "threads": 1}}}
    studies.append(compared(base / "half_threads", baseline, half, "half the threads"))
    reruns = studies[:-1]
    pairs = sum(len(s["rows"]) for s in reruns)
    false_alarms = {
        str(t): sum(len(s["gate"][str(t)]["named"]) for s in reruns) / pairs for t in TOLERANCES
    }
    report = {"study": STUDY, "false_alarm_rate": false_alarms, "pairs": pairs,
              "studies": studies}  # fmt: skip
    Path(args.out).write_text(json.dumps(report, indent=1, default=str) + "\n")
    for s in studies:
        verdicts = ", ".join(f"{r['model']} {r['verdict']} {r['change_pct']:+.1f}%"
                             for r in s["rows"])  # fmt: skip
        exits = ", ".join(f"{t}%: exit {g['exit']}" for t, g in s["gate"].items())
        print(f"{s['study']}: {verdicts}; gate {exits}")
    print(f"false alarms over {pairs} (rerun, point) pairs: {false_alarms} -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
