"""Issue 10: do the measured roofs hold? Ceiling candidates, then a study placed on them.

    python benchmarks/bench_roofline_holds.py [--workdir /tmp/roofline-holds] \\
        [--image-size 128] [--iters 3] [--runs 1] [--skip-study]

0. What the tests once bounded by wall time (tests hold no timing asserts): the quick
   ceilings CLI as tests/test_ceilings.py runs it (1 thread; was < 10 s) and the machine
   fingerprint, envinfo.collect_fingerprint (was < 3 s): the median of 3 each.
1. The ceilings of this machine (full mode, OMP_NUM_THREADS = all cores): every GEMM
   and convolution candidate per precision, its GFLOP/s as a share of the derived
   peak, and which one set the roof.
2. A study through the real workflow: resnet18, resnet50, mobilenet_v2 and vgg16 at
   batch 8, 16, 32 and 64 in fp32 (env ``local``), and the same models at batch 8 and
   32 in bf16 (env ``local_bf16``, where the CPU has AVX512_BF16/AMX); each point's
   attained GFLOP/s against its roof, its AI range and bound.

Prints markdown tables for BENCHMARKS.md. Run it alone on the machine (under the
project's heavy lock): it is a measurement.
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

import pandas as pd
import yaml

ROOT = Path(__file__).resolve().parents[1]

MODELS = ["resnet18", "resnet50", "mobilenet_v2", "vgg16"]


def fixed_costs(repeats: int = 3) -> str:
    """Median wall seconds of the quick ceilings CLI (as the tests run it) and of the
    machine fingerprint."""
    from dnnroofline.measure.envinfo import collect_fingerprint

    quick = [sys.executable, str(ROOT / "workflow" / "scripts" / "ceilings.py"), "--env"]
    quick += ["local", "--device", "cpu", "--precisions", "fp32", "bf16", "tf32", "--quick"]
    quick += ["--expect-threads", "1", "--out"]
    walls: dict[str, list[float]] = {"quick ceilings CLI": [], "collect_fingerprint": []}
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.monotonic()
            env = dict(os.environ, OMP_NUM_THREADS="1")
            subprocess.run([*quick, f"{tmp}/ceilings.json"], env=env, check=True)
            walls["quick ceilings CLI"].append(time.monotonic() - t0)
        t0 = time.monotonic()
        collect_fingerprint("local")
        walls["collect_fingerprint"].append(time.monotonic() - t0)
    rows = [f"| {name} | {statistics.median(w):.2f} |" for name, w in walls.items()]
    return "\n".join(["| what | median wall s |", "|---|---|", *rows])


def ceilings_table(c: dict) -> str:
    derived = {
        r["precision"]: r["value"]
        for r in c["roofs"]
        if r["kind"] == "compute" and r["source"] == "datasheet"
    }
    lines = [
        "| precision | candidate | best GFLOP/s | median GFLOP/s | % of derived peak "
        "| set the roof |",
        "|---|---|---:|---:|---:|---|",
    ]
    for r in c["roofs"]:
        if r["kind"] != "compute" or r["source"] != "measured":
            continue
        peak = derived.get(r["precision"])
        for cand in r["candidates"]:
            if "error" in cand:
                lines.append(f"| {r['precision']} | {cand['kind']} | failed: {cand['error']} |")
                continue
            share = f"{100 * cand['flops_best'] / peak:.0f}%" if peak else "–"
            what = cand["method"].split(";")[0]
            lines.append(
                f"| {r['precision']} | {what} | {cand['flops_best'] / 1e9:.1f} | "
                f"{cand['flops_median'] / 1e9:.1f} | {share} | "
                f"{'**yes**' if cand['set_roof'] else ''} |"
            )
    for r in c["roofs"]:
        if r["kind"] == "memory" and r["source"] == "measured":
            lines.append(
                f"| memory | STREAM {r['benchmark']} | {r['value'] / 1e9:.1f} GB/s | "
                f"{r['median'] / 1e9:.1f} GB/s | | |"
            )
    for p, v in derived.items():
        lines.append(
            f"| {p} | derived peak (cores x clock x FLOP/cycle) | {v / 1e9:.1f} | | 100% | |"
        )
    return "\n".join(lines)


def points_table(pts: pd.DataFrame) -> str:
    lines = [
        "| env | model | precision | batch | GFLOP/s | roof GFLOP/s | of roof | AI low | AI "
        "(plotted) | AI high | bound | above roof |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for r in pts.itertuples(index=False):
        if r.runs_ok == 0:
            lines.append(f"| {r.env} | {r.model} | {r.precision} | {r.batch_size} | no ok run |")
            continue
        lines.append(
            f"| {r.env} | {r.model} | {r.precision} | {r.batch_size} | "
            f"{r.attained_flops / 1e9:.1f} | {r.roof_flops / 1e9:.1f} | {r.efficiency:.0%} | "
            f"{r.ai_low:.1f} | {r.ai:.1f} | {r.ai_high:.1f} | {r.bound} | "
            f"{'**YES**' if r.above_roof else 'no'} |"
        )
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", default="/tmp/roofline-holds")
    ap.add_argument("--image-size", type=int, default=128)
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--warmup-iters", type=int, default=1)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--skip-study", action="store_true")
    args = ap.parse_args()

    from dnnroofline.measure.ceilings import build_ceilings
    from dnnroofline.study.config import detect_cpu_flags
    from dnnroofline.study.precisions import supported

    print(f"## Fixed costs (the tests' former timing asserts)\n\n{fixed_costs()}\n")
    threads = os.cpu_count() or 1
    os.environ["OMP_NUM_THREADS"] = str(threads)
    here = supported("cpu", cpu_flags=detect_cpu_flags() or [])
    bf16 = "bf16" in here
    t0 = time.monotonic()
    c = build_ceilings("bench", "cpu", here)
    print(f"## Ceilings ({threads} threads, {time.monotonic() - t0:.0f} s)\n")
    print(ceilings_table(c))
    print()
    if args.skip_study:
        return 0

    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    config = {
        "envs": {"local": {"device": "cpu", "threads": threads, "precisions": ["fp32"]}},
        "study": {
            "models": MODELS,
            "precisions": ["fp32"],
            "batch_sizes": [8, 16, 32, 64],
            "runs": args.runs,
            "warmup_iters": args.warmup_iters,
            "iters": args.iters,
            "image_size": args.image_size,
            "data": "synthetic",
        },
    }
    if bf16:
        config["envs"]["local_bf16"] = {
            "device": "cpu",
            "threads": threads,
            "precisions": ["bf16"],
            "batch_sizes": [8, 32],
        }
    (work / "config").mkdir(exist_ok=True)
    cfg = work / "config" / "config.yaml"
    cfg.write_text(yaml.safe_dump(config, sort_keys=False))
    snakemake = str(Path(sys.executable).parent / "snakemake")
    t0 = time.monotonic()
    proc = subprocess.run(
        [snakemake, "-s", str(ROOT / "Snakefile"), "-d", str(work), "--configfile", str(cfg)]
        + ["--cores", str(threads), "results/roofline_points.csv"],
        capture_output=True,
        text=True,
    )
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        print(proc.stderr[-4000:], file=sys.stderr)
        return 1
    pts = pd.read_csv(work / "results" / "roofline_points.csv")
    print(
        f"## Study ({len(pts)} points, image {args.image_size}, warm-up {args.warmup_iters}, "
        f"iters {args.iters}, runs {args.runs}; {wall:.0f} s)\n"
    )
    print(points_table(pts))
    ok = pts[pts["runs_ok"] > 0]
    print(f"\npoints above their roof: {int(ok['above_roof'].sum())} of {len(ok)}")
    print(f"max share of roof: {ok['efficiency'].max():.0%}")
    print("\nAI range per model (min ai_low .. max ai_high over its batches):")
    for (env, model), g in ok.groupby(["env", "model"]):
        print(f"- {env} {model}: {g['ai_low'].min():.1f} .. {g['ai_high'].max():.1f} FLOP/B")
    for env in config["envs"]:
        ceil = json.loads((work / "results" / env / "ceilings.json").read_text())
        print(f"\n{env} ceilings job: {ceil['wall_s']:.0f} s")
        print(ceilings_table(ceil))
    return 0


if __name__ == "__main__":
    sys.exit(main())
