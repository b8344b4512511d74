"""A machine's measurement jobs before and after they check their machine in-process.

    python benchmarks/bench_machine_check.py --before e556926 [--rounds 3] \\
        [--out benchmarks/results/machine_check.json]

Before (the --before revision, checked out in a temporary git worktree) the ceilings and
efficiency jobs each ran ``env_info.py --verify`` first: a second Python process that
imports torch only to compare this machine with env_info.json. After (this checkout)
ceilings.py and op_class_sweep.py check it themselves (--env-info). Each round runs both
jobs' shell commands, as the rules write them for a quick CPU env of one thread, once
before and once after, alternating, so that a noisy shared host disturbs both alike.
Prints the medians and writes every round to --out. Run it alone on the machine.
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

from dnnroofline.measure.envinfo import cpu_model_name

ROOT = Path(__file__).resolve().parents[1]


def commands(scripts: Path, work: Path, *, in_process: bool) -> list[list[str]]:
    """The ceilings and efficiency jobs' commands for env ``local`` (cpu, 1 thread)."""
    py, info = sys.executable, str(work / "env_info.json")
    env = ["--env", "local", "--device", "cpu", "--precisions", "fp32", "--quick"]
    threads = ["--expect-threads", "1"]
    ceilings = [py, str(scripts / "ceilings.py"), *env, *threads]
    efficiency = [py, str(scripts / "op_class_sweep.py"), *env, *threads]
    efficiency += ["--ceilings", str(work / "ceilings.json")]
    if in_process:
        check = ["--env-info", info, "--declared-device", "cpu"]
        return [[*ceilings, *check, "--out", str(work / "ceilings.json")],
                [*efficiency, *check, "--out", str(work / "efficiency.json")]]  # fmt: skip
    verify = [py, str(scripts / "env_info.py"), "--env", "local", "--device", "cpu"]
    verify += ["--verify", info]
    return [verify, [*ceilings, "--out", str(work / "ceilings.json")],
            verify, [*efficiency, "--out", str(work / "efficiency.json")]]  # fmt: skip


def timed(cmds: list[list[str]]) -> float:
    """Wall seconds of the commands run in turn (one thread, as the jobs run)."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    start = time.perf_counter()
    for cmd in cmds:
        subprocess.run(cmd, check=True, capture_output=True, env=env)
    return time.perf_counter() - start


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--before", required=True, help="git revision of the two-process form")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "machine_check.json"))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        old = tmp / "before"
        git = ["git", "-C", str(ROOT)]
        subprocess.run([*git, "worktree", "add", "--detach", str(old), args.before], check=True)
        try:
            forms = {"before": old / "workflow" / "scripts", "after": ROOT / "workflow" / "scripts"}
            work = {name: tmp / name / "work" for name in forms}
            for name, scripts in forms.items():
                work[name].mkdir(parents=True)
                subprocess.run([sys.executable, str(scripts / "env_info.py"), "--env", "local",
                                "--device", "cpu", "--out", str(work[name] / "env_info.json")],
                               check=True)  # fmt: skip
            rounds = {name: [] for name in forms}
            for _ in range(args.rounds):
                for name, scripts in forms.items():
                    cmds = commands(scripts, work[name], in_process=name == "after")
                    rounds[name].append(round(timed(cmds), 3))
        finally:
            subprocess.run([*git, "worktree", "remove", "--force", str(old)], check=True)
    medians = {name: statistics.median(times) for name, times in rounds.items()}
    doc = {
        "what": "wall s of one CPU env's ceilings and efficiency jobs (quick, 1 thread)",
        "before": args.before,
        "rounds": rounds,
        "median_s": medians,
        "saved_s": round(medians["before"] - medians["after"], 3),
        "cpu_model": cpu_model_name(),
        "cores": os.cpu_count(),
    }
    Path(args.out).write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps({k: doc[k] for k in ("median_s", "saved_s", "rounds")}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
