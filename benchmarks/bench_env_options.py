"""Issue 11: what torch.compile costs and gains, and how 2 DDP processes compare with one.

    python benchmarks/bench_env_options.py [--models resnet18 mobilenet_v2] \\
        [--image-size 128] [--batch-size 8] [--rounds 2] [--ddp-rounds 3]

Every run is the real driver (``run_train.py``) in its own process, as the workflow runs
it, on 2 threads, with the variants interleaved round by round to cancel drift:

1. Per model and thread count (2, then 1): eager, then ``--compile default`` (each
   compiled run with an empty inductor cache, so the first step pays a cold compile,
   as a study's first run does). Inductor's OpenMP kernels slow down badly when another
   process takes one of the 2 cores (see BENCHMARKS.md), so before each run the script
   waits until the others use less than ``--max-busy`` of the CPU, and prints the
   largest share it saw before a row's runs ("others' CPU").
   Compile overhead, speedup and break-even steps come from dnnroofline.report.env_compare,
   the code of the report.
   ``--paired`` instead takes the speedup side by side: eager and compiled steps of the
   same model in one process, in alternating blocks (the compile time is not measured).
2. resnet18: one process of 2 threads at batch B and 2B, against ``--nproc 2``
   (2 gloo processes of 1 thread, batch B each, so 2B images per step).

Prints markdown tables for BENCHMARKS.md. Run it alone on the machine: it is a measurement.
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
from typing import Any

from dnnroofline.report.env_compare import break_even_steps, warmup_overhead

ROOT = Path(__file__).resolve().parents[1]


def cpu_busy(seconds: float = 2.0) -> float:
    """The share of the machine's CPU time others used over ``seconds`` (we sleep)."""

    def sample() -> tuple[int, int]:
        with open("/proc/stat") as fh:
            values = [int(v) for v in fh.readline().split()[1:]]
        return values[3] + values[4], sum(values)  # idle + iowait, total

    idle0, total0 = sample()
    time.sleep(seconds)
    idle1, total1 = sample()
    return 1 - (idle1 - idle0) / max(1, total1 - total0)


def wait_quiet(max_busy: float, max_wait: float) -> float:
    """Wait (up to ``max_wait`` s) until the others use < ``max_busy`` of the CPU; the
    share seen last (the shared 2-core machine has other users)."""
    deadline = time.monotonic() + max_wait
    busy = cpu_busy()
    while busy >= max_busy and time.monotonic() < deadline:
        busy = cpu_busy()
    return busy


QUIET: dict[str, float] = {"max_busy": 0.15, "max_wait": 600.0}


def run(args: list[str], threads: int, env_extra: dict[str, str] | None = None) -> dict:
    busy = wait_quiet(QUIET["max_busy"], QUIET["max_wait"])
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run.json"
        env = dict(os.environ, OMP_NUM_THREADS=str(threads), **(env_extra or {}))
        proc = subprocess.run(
            [sys.executable, str(ROOT / "workflow/scripts/run_train.py"), *args, "--out", str(out)],
            capture_output=True,
            text=True,
            env=env,
        )
        if proc.returncode != 0 or not out.exists():
            raise SystemExit(f"run failed: {' '.join(args)}\n{proc.stderr[-3000:]}")
        rec = json.loads(out.read_text())
    if rec["status"] != "ok":
        raise SystemExit(f"run {rec['status']}: {rec['message']}")
    rec["others_busy"] = busy
    return rec


def compile_table(opts: argparse.Namespace) -> None:
    print("| model | threads | eager step (max CV) | compiled step (max CV) | speedup | "
          "first compiled step | compile overhead | pays off after | others' CPU |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for model, threads in [(m, t) for m in opts.models for t in opts.threads]:
        base = [
            "--arch", model, "--batch-size", str(opts.batch_size), "--image-size",
            str(opts.image_size), "--warmup-iters", str(opts.warmup_iters), "--iters",
            str(opts.iters), "--backend", "cpu", "--synthetic", "--expect-threads", str(threads),
        ]  # fmt: skip
        eager, compiled = [], []
        for _ in range(opts.rounds):
            eager.append(run(base, threads))
            with tempfile.TemporaryDirectory() as cache:  # a cold compile every time
                compiled.append(
                    run(
                        base + ["--compile", "default"],
                        threads,
                        {"TORCHINDUCTOR_CACHE_DIR": cache},
                    )
                )

        def med(recs, f):
            return statistics.median(f(r) for r in recs)

        def overhead(r):
            return warmup_overhead(r["warmup_s"], opts.warmup_iters, r["step_time_s"]["median"])

        e_step = med(eager, lambda r: r["step_time_s"]["median"])
        c_step = med(compiled, lambda r: r["step_time_s"]["median"])
        extra = med(compiled, overhead) - med(eager, overhead)
        first = med(compiled, lambda r: r["first_step_s"])
        steps = break_even_steps(extra, e_step, c_step)

        def cv(recs):
            return max(r["step_time_s"]["cv"] for r in recs)

        print(
            f"| {model} | {threads} | {e_step * 1e3:.1f} ms ({cv(eager):.2f}) | "
            f"{c_step * 1e3:.1f} ms ({cv(compiled):.2f}) | {e_step / c_step:.2f}× | "
            f"{first:.1f} s | {med(compiled, overhead):.1f} s | "
            f"{'never' if steps == float('inf') else f'{int(steps):,} steps'} | "
            f"{max(r['others_busy'] for r in eager + compiled):.0%} |",
            flush=True,
        )


def paired_table(opts: argparse.Namespace) -> None:
    """Eager and compiled steps of one model in one process, block after block: the
    speedup as a ratio taken side by side (drift and other users hit both alike)."""
    from dnnroofline.measure import train, train_config

    print("| model | threads | eager step | compiled step | speedup (median of paired blocks; "
          "min–max) |")  # fmt: skip
    print("|---|---:|---:|---:|---:|")
    for model, threads in [(m, t) for m in opts.models for t in opts.threads]:
        setups = {}
        for mode in (False, "default"):
            cfg = train_config.TrainConfig(
                arch=model,
                batch_size=opts.batch_size,
                image_size=opts.image_size,
                warmup_iters=opts.warmup_iters,
                backend="cpu",
                compile=mode,
            )
            resolved = train_config.validate(cfg, environ={"OMP_NUM_THREADS": str(threads)})
            setups[mode] = train.build(resolved)
            train.timed_loop(setups[mode], opts.warmup_iters, 1)  # compiles here
        medians: dict[Any, list[float]] = {False: [], "default": []}
        for _ in range(opts.blocks):
            wait_quiet(QUIET["max_busy"], QUIET["max_wait"])
            for mode, setup in setups.items():
                times = train.timed_loop(setup, 0, opts.iters)
                medians[mode].append(statistics.median(times.step_s))
        ratios = [e / c for e, c in zip(medians[False], medians["default"], strict=True)]
        print(
            f"| {model} | {threads} | {statistics.median(medians[False]) * 1e3:.1f} ms | "
            f"{statistics.median(medians['default']) * 1e3:.1f} ms | "
            f"{statistics.median(ratios):.2f}× ({min(ratios):.2f}–{max(ratios):.2f}) |",
            flush=True,
        )
        del setups


def ddp_table(opts: argparse.Namespace) -> None:
    b = opts.batch_size
    base = [
        "--arch", "resnet18", "--image-size", str(opts.image_size), "--warmup-iters",
        str(opts.warmup_iters), "--iters", str(opts.iters), "--backend", "cpu", "--synthetic",
    ]  # fmt: skip
    variants = {
        f"1 process x 2 threads, batch {b}": base + ["--batch-size", str(b)],
        f"1 process x 2 threads, batch {2 * b}": base + ["--batch-size", str(2 * b)],
        f"2 processes x 1 thread, batch {b} each": base
        + ["--batch-size", str(b), "--nproc", "2", "--expect-threads", "1"],
    }
    ips: dict[str, list[float]] = {k: [] for k in variants}
    busy: dict[str, list[float]] = {k: [] for k in variants}
    spread: dict[str, list[float]] = {k: [] for k in variants}
    for _ in range(opts.ddp_rounds):
        for name, args in variants.items():
            rec = run(args, 2)
            ips[name].append(rec["images_per_s"])
            busy[name].append(rec["others_busy"])
            if rec.get("ranks"):
                m = [r["step_time_s"]["median"] for r in rec["ranks"]]
                spread[name].append(max(m) / min(m) - 1)
    ref = statistics.median(ips[next(iter(variants))])
    print("| resnet18, 2 cores | images/s (median of rounds; min–max) | vs 1 x 2 threads, "
          f"batch {b} | rank medians differ by | others' CPU |")  # fmt: skip
    print("|---|---:|---:|---:|---:|")
    for name in variants:
        v = ips[name]
        gap = f"{statistics.median(spread[name]) * 100:.1f}%" if spread[name] else "–"
        print(
            f"| {name} | {statistics.median(v):.1f} ({min(v):.1f}–{max(v):.1f}) | "
            f"{statistics.median(v) / ref:.2f}× | {gap} | {max(busy[name]):.0%} |",
            flush=True,
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["resnet18", "mobilenet_v2"])
    ap.add_argument("--image-size", type=int, default=128)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--warmup-iters", type=int, default=3)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, nargs="+", default=[2, 1])
    ap.add_argument("--ddp-rounds", type=int, default=3)
    ap.add_argument("--skip-compile", action="store_true")
    ap.add_argument(
        "--max-busy",
        type=float,
        default=0.15,
        help="before each run, wait until other processes use less than this share of the CPU",
    )
    ap.add_argument("--max-wait", type=float, default=600.0, help="seconds to wait for that")
    ap.add_argument("--skip-ddp", action="store_true")
    ap.add_argument(
        "--paired",
        action="store_true",
        help="only the in-process paired speedup (eager and compiled blocks alternating)",
    )
    ap.add_argument("--blocks", type=int, default=6, help="paired blocks per variant")
    opts = ap.parse_args()
    QUIET.update(max_busy=opts.max_busy, max_wait=opts.max_wait)
    if opts.paired:
        paired_table(opts)
        return
    if not opts.skip_compile:
        compile_table(opts)
    if not opts.skip_ddp:
        ddp_table(opts)


if __name__ == "__main__":
    main()
