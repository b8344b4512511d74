"""Driver overhead: the driver's measured images/s against a minimal hand-written loop.

Both run in one process on the same model architecture, batch, precision, thread count,
SGD and synthetic on-device batch, interleaved A B, B A, A B, ... so that drift (turbo,
other load) falls on both alike.

(a) driver: ``dnnroofline.measure.train.build`` + ``timed_loop`` (the code path of run_train.py);
    images/s = batch / median step, as the run JSON reports it (and batch * n / sum of
    steps, the like-for-like throughput).
(b) bare:   ``time.perf_counter()`` around N steps of forward, loss, backward, SGD step,
    zero_grad; images/s = batch * N / elapsed.

    OMP_NUM_THREADS=2 python benchmarks/bench_driver_overhead.py --arch resnet18 \
        --batch-size 16 --image-size 224 --iters 10 --rounds 6 --json bench.json
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time

import torch
import torchvision

from dnnroofline.io import write_json_atomic
from dnnroofline.measure import run_record, train, train_config
from dnnroofline.study.precisions import autocast_dtype


def bare_setup(resolved: train_config.Resolved, shared: train.Setup | None = None):
    """The hand-written loop. With ``shared``, it trains the driver's own model, optimizer
    and synthetic batch, so that only the loop code differs; else it builds its own."""
    cfg = resolved.cfg
    device = torch.device(resolved.device)
    if shared is not None:
        model, opt = shared.model, shared.optimizer
        x, y = shared.next_batch()
    else:
        model = torchvision.models.get_model(cfg.arch, weights=None, num_classes=cfg.num_classes)
        model = model.to(device).train()
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
        x = torch.randn(cfg.batch_size, 3, cfg.image_size, cfg.image_size, device=device)
        y = torch.randint(0, cfg.num_classes, (cfg.batch_size,), device=device)
    crit = torch.nn.CrossEntropyLoss()
    autocast = autocast_dtype(cfg.precision)
    dtype = getattr(torch, autocast) if autocast else None
    scaler = torch.amp.GradScaler(resolved.backend) if cfg.precision == "amp" else None
    sync = {"cuda": torch.cuda.synchronize, "mps": lambda: torch.mps.synchronize()}.get(
        resolved.backend, lambda: None
    )

    def ctx():
        if dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=resolved.backend, dtype=dtype)

    def steps(n: int) -> None:
        for _ in range(n):
            with ctx():
                loss = crit(model(x), y)
            if scaler is None:
                loss.backward()
                opt.step()
            else:
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()
            opt.zero_grad(set_to_none=True)

    def timed(warmup: int, n: int) -> float:
        steps(warmup)
        sync()
        t0 = time.perf_counter()
        steps(n)
        sync()
        return cfg.batch_size * n / (time.perf_counter() - t0)

    return timed


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--arch", default="resnet18")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--precision", default="fp32")
    p.add_argument("--backend", default="auto")
    p.add_argument(
        "--channels-last", action="store_true", help="NHWC model and batch (as GPU studies run)"
    )
    p.add_argument("--warmup-iters", type=int, default=2, help="untimed steps per round")
    p.add_argument("--iters", type=int, default=10, help="timed steps per round and side")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument(
        "--separate-model",
        action="store_true",
        help="the bare loop builds its own model, optimizer and batch (default: it trains "
        "the driver's, so that only the loop code differs)",
    )
    p.add_argument("--json", metavar="OUT", help="write the results here")
    args = p.parse_args(argv)

    cfg = train_config.TrainConfig(
        arch=args.arch,
        batch_size=args.batch_size,
        image_size=args.image_size,
        warmup_iters=args.warmup_iters,
        iters=args.iters,
        precision=args.precision,
        backend=args.backend,
        channels_last=args.channels_last,
    )
    resolved = train_config.validate(cfg)
    setup = train.build(resolved)  # (a): the driver's setup and loop
    bare = bare_setup(resolved, None if args.separate_model else setup)  # (b)
    print(
        f"{args.arch} bs{args.batch_size} img{args.image_size} {args.precision} on "
        f"{resolved.device}, threads={resolved.threads}, {args.rounds} rounds x "
        f"{args.iters} steps per side, bare loop on "
        f"{'its own model' if args.separate_model else 'the same model instance'}",
        flush=True,
    )

    def driver() -> tuple[float, float]:
        times = train.timed_loop(setup, args.warmup_iters, args.iters)
        median = statistics.median(times.step_s)
        return args.batch_size / median, args.batch_size * args.iters / sum(times.step_s)

    drv_median, drv_mean, bare_ips = [], [], []
    for r in range(args.rounds):
        order = ("driver", "bare") if r % 2 == 0 else ("bare", "driver")
        for side in order:
            if side == "driver":
                a, b = driver()
                drv_median.append(a)
                drv_mean.append(b)
            else:
                bare_ips.append(bare(args.warmup_iters, args.iters))
        print(
            f"round {r + 1}/{args.rounds} ({order[0]} first): driver {drv_median[-1]:.2f} "
            f"images/s (median step; {drv_mean[-1]:.2f} over all steps), "
            f"bare {bare_ips[-1]:.2f} images/s",
            flush=True,
        )

    paired = [d / b for d, b in zip(drv_median, bare_ips, strict=True)]
    paired_mean = [d / b for d, b in zip(drv_mean, bare_ips, strict=True)]
    result = {
        "arch": args.arch,
        "batch_size": args.batch_size,
        "image_size": args.image_size,
        "precision": args.precision,
        "channels_last": args.channels_last,
        "device": resolved.device,
        "device_name": run_record.device_info(resolved)["device_name"],
        "threads": resolved.threads,
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "rounds": args.rounds,
        "iters": args.iters,
        "warmup_iters": args.warmup_iters,
        "separate_model": args.separate_model,
        "driver_images_per_s": drv_median,
        "driver_images_per_s_all_steps": drv_mean,
        "bare_images_per_s": bare_ips,
        "driver_median": statistics.median(drv_median),
        "driver_all_steps_median": statistics.median(drv_mean),
        "bare_median": statistics.median(bare_ips),
        "ratio": statistics.median(drv_median) / statistics.median(bare_ips),
        "ratio_all_steps": statistics.median(drv_mean) / statistics.median(bare_ips),
        "ratio_paired_median": statistics.median(paired),
        "ratio_all_steps_paired_median": statistics.median(paired_mean),
    }
    print(
        f"driver {result['driver_median']:.2f} images/s (median step), "
        f"{result['driver_all_steps_median']:.2f} (all steps); bare "
        f"{result['bare_median']:.2f} images/s\n"
        f"ratio driver/bare = {result['ratio']:.4f} "
        f"(all steps {result['ratio_all_steps']:.4f}; paired per round: "
        f"{result['ratio_paired_median']:.4f}, "
        f"all steps {result['ratio_all_steps_paired_median']:.4f})"
    )
    if args.json:
        write_json_atomic(args.json, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
