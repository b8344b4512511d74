"""CPU steps that fault in their memory every step, and what keeping it saves.

    python benchmarks/bench_page_faults.py [--out benchmarks/results/page_faults.json]

Real timed runs (workflow/scripts/run_train.py, synthetic data, fp32, batch 8, 3 warm-up
and 20 timed steps) of :data:`CONFIGS` (the zoo's size, 64 px, and the default study's,
128 px) under three allocator settings, in turn and twice over (the host is shared: an
arm's two rounds show its drift):

* ``default``: glibc's malloc as it comes;
* ``trim``: ``MALLOC_TRIM_THRESHOLD_`` above any step's memory, so that glibc keeps at
  the top of its heap what a step frees instead of handing it back to the OS;
* ``trim+mmap``: and ``MALLOC_MMAP_THRESHOLD_`` at glibc's largest, 32 MiB, so that
  blocks below it come from the heap (kept) rather than from a fresh mapping.

Per run: the median step, and the run record's ``timed_region``: the pages the timed
steps faulted in (``fault_mib_per_step``, as metrics.csv computes it) and the share of
their CPU time in the kernel (``timed_sys_share``). Writes the JSON and prints markdown
for BENCHMARKS.md. Run it alone on the machine: it measures.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from dnnroofline.aggregate.metrics import run_row

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = [
    *((m, 64) for m in ("mobilenet_v2", "shufflenet_v2_x1_0", "efficientnet_b0", "mnasnet0_5",
                        "resnet18")),
    *((m, 128) for m in ("mobilenet_v2", "resnet18", "resnet50")),
]  # fmt: skip
ARMS = {
    "default": {},
    "trim": {"MALLOC_TRIM_THRESHOLD_": str(2**40)},
    "trim+mmap": {"MALLOC_TRIM_THRESHOLD_": str(2**40), "MALLOC_MMAP_THRESHOLD_": str(2**25)},
}


def timed_run(model: str, image_size: int, arm: str, out: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    cmd = [sys.executable, str(ROOT / "workflow" / "scripts" / "run_train.py"), "--arch", model,
           "--batch-size", "8", "--image-size", str(image_size), "--warmup-iters", "3",
           "--iters", "20",
           "--synthetic", "--env", "local", "--run-id", f"local_{model}_fp32_bs8_run1",
           "--out", str(out)]  # fmt: skip
    subprocess.run(cmd, check=True, capture_output=True, env={**env, **ARMS[arm]})
    record = json.loads(out.read_text())
    row = run_row(record, str(out))
    return {"step_s": row["step_median_s"], "fault_mib_per_step": row["fault_mib_per_step"],
            "timed_sys_share": row["timed_sys_share"]}  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="page_faults.json")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="page-faults-"))
    runs: list[dict] = []
    for round_no in (1, 2):
        for model, size in CONFIGS:
            for arm in ARMS:
                out = work / f"{model}_{size}_{arm}_{round_no}.json"
                runs.append({"round": round_no, "model": model, "image_size": size, "arm": arm,
                             **timed_run(model, size, arm, out)})  # fmt: skip
    keys = ("step_s", "fault_mib_per_step", "timed_sys_share")

    def median(model: str, size: int, arm: str, key: str) -> float:
        of = [r[key] for r in runs if (r["model"], r["image_size"], r["arm"]) == (model, size, arm)]
        return statistics.median(of)

    table = {
        f"{model} {size} px": {arm: {k: median(model, size, arm, k) for k in keys} for arm in ARMS}
        for model, size in CONFIGS
    }
    doc = {"arms": ARMS, "runs": runs, "median": table}
    Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    print("| config | arm | step (median of 2) | vs default | faulted per step | kernel share |")
    print("|---|---|---:|---:|---:|---:|")
    for model, arms in table.items():
        base = arms["default"]["step_s"]
        for arm, m in arms.items():
            print(
                f"| {model} | {arm} | {m['step_s'] * 1e3:.1f} ms | {m['step_s'] / base - 1:+.1%} "
                f"| {m['fault_mib_per_step']:.1f} MiB | {m['timed_sys_share']:.1%} |"
            )
    print(f"\n-> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
