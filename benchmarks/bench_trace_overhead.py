"""The trace's own overhead: the traced steps' time against the untraced median.

One process, one model (the driver's ``build``), rounds alternating A B, B A, ... so
that drift (turbo, other load) falls on both alike:

(a) untraced: ``dnnroofline.measure.train.timed_loop``, as a timed run times its steps;
(b) traced:   the same loop with the trace job's instrument (``dnnroofline.measure.traces.Tracer``:
    torch.profiler on, a ``ProfilerStep#N`` range per step), as the trace job runs it.

Both sides warm up before every round. Reported: each side's median step over all its
rounds, the ratio traced / untraced, the first traced step of a round apart (the
profiler starts there), and the cost after the steps: stopping the profiler (its
post-processing), exporting the trace (its size) and building the table.

    OMP_NUM_THREADS=2 python benchmarks/bench_trace_overhead.py --arch resnet18 \
        --batch-size 8 --image-size 128 --warmup-iters 2 --steps 3 --rounds 6 --json bench.json

It takes the driver's step flags (``--compile``, ``--channels-last``, ``--model-factory``
...), so any config of a study can be measured as its trace job runs it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

from dnnroofline.io import write_json_atomic
from dnnroofline.measure import run_record, traces, train, train_config


def traced_round(setup: train.Setup, warmup: int, steps: int, workdir: str) -> dict:
    """One round as the trace job runs it; the setup's step is restored afterwards."""
    inner = setup.step
    tracer = traces.Tracer(setup.backend)
    start, stop = tracer(setup)
    stop_s: list[float] = []

    def timed_stop() -> None:  # the profiler's post-processing: after the steps
        t0 = time.perf_counter()
        stop()
        stop_s.append(time.perf_counter() - t0)

    try:
        times = train.timed_loop(setup, warmup, steps, None, start, timed_stop)
    finally:
        tracer.close()
        setup.step = inner
    t0 = time.perf_counter()
    path = os.path.join(workdir, "trace.json")
    tracer.prof.export_chrome_trace(path)
    export_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    traces.top_table(
        traces.event_rows(tracer.prof.key_averages()), sum(times.step_s), steps, device=False
    )
    table_s = time.perf_counter() - t0
    return {
        "step_s": times.step_s,
        "stop_s": stop_s[0],
        "export_s": export_s,
        "table_s": table_s,
        "trace_bytes": os.path.getsize(path),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    train_config.step_arguments(p)  # the step as run_train.py and the trace job take it
    p.add_argument("--steps", dest="iters", type=int, default=3, help="steps per round and side")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--json", metavar="OUT", help="write the results here")
    p.set_defaults(profile_step=False)
    args = p.parse_args(argv)
    cfg = train_config.config_from_args(args)
    resolved = train_config.validate(cfg)
    setup = train.build(resolved)
    print(
        f"{args.arch} bs{args.batch_size} img{args.image_size} {args.precision} on "
        f"{resolved.device}, threads={resolved.threads}, {args.rounds} rounds x "
        f"{args.iters} steps per side",
        flush=True,
    )
    plain: list[float] = []
    traced: list[float] = []
    firsts: list[float] = []
    extra: list[dict] = []
    paired: list[float] = []
    with tempfile.TemporaryDirectory() as workdir:
        for r in range(args.rounds):
            order = ("plain", "traced") if r % 2 == 0 else ("traced", "plain")
            got = {}
            for side in order:
                if side == "plain":
                    got[side] = train.timed_loop(setup, args.warmup_iters, args.iters).step_s
                else:
                    rec = traced_round(setup, args.warmup_iters, args.iters, workdir)
                    got[side] = rec["step_s"]
                    extra.append(rec)
            plain += got["plain"]
            traced += got["traced"]
            firsts.append(got["traced"][0])
            paired.append(statistics.median(got["traced"]) / statistics.median(got["plain"]))
    result = {
        "arch": args.arch,
        "batch_size": args.batch_size,
        "image_size": args.image_size,
        "precision": args.precision,
        "device": resolved.device,
        "device_name": run_record.device_info(resolved)["device_name"],
        "threads": resolved.threads,
        "rounds": args.rounds,
        "steps": args.iters,
        "warmup_iters": args.warmup_iters,
        "untraced_step_s": plain,
        "traced_step_s": traced,
        "untraced_median_s": statistics.median(plain),
        "traced_median_s": statistics.median(traced),
        "ratio": statistics.median(traced) / statistics.median(plain),
        "ratio_paired_median": statistics.median(paired),
        "first_traced_step_ratio": statistics.median(firsts) / statistics.median(plain),
        "stop_s_median": statistics.median(e["stop_s"] for e in extra),
        "export_s_median": statistics.median(e["export_s"] for e in extra),
        "table_s_median": statistics.median(e["table_s"] for e in extra),
        "trace_bytes_median": statistics.median(e["trace_bytes"] for e in extra),
    }
    print(
        f"untraced median step {result['untraced_median_s'] * 1e3:.2f} ms, traced "
        f"{result['traced_median_s'] * 1e3:.2f} ms: ratio {result['ratio']:.3f} (paired per "
        f"round {result['ratio_paired_median']:.3f}; first traced step "
        f"{result['first_traced_step_ratio']:.3f}); after the steps: profiler stop "
        f"{result['stop_s_median']:.2f} s, export "
        f"{result['export_s_median']:.2f} s ({result['trace_bytes_median'] / 1e6:.1f} MB), "
        f"table {result['table_s_median']:.2f} s"
    )
    if args.json:
        write_json_atomic(args.json, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
