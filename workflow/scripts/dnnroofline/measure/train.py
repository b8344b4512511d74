"""The timed training driver: model and optimizer setup, precision handling, the timed loop.

``run_train.py`` is a thin wrapper around :func:`main`. Everything here is importable
without Snakemake; the benchmark ``benchmarks/bench_driver_overhead.py`` calls
:func:`build` and :func:`timed_loop`, the same code path as the command line.

Method (see docs/method.md):

- ``warmup_iters`` untimed steps first (cuDNN autotuning, allocator growth and
  ``torch.compile`` stay out of the numbers), then ``iters`` timed steps.
- A step is: get the next batch (loader wait + host-to-device copy: the *data wait*),
  then forward, loss, backward and the optimizer step (the *compute*).
- Step boundaries are contiguous: step ``i`` runs from the start of step ``i`` to the
  start of step ``i + 1``, so the per-step times add up to the timed region.
- On CUDA every boundary is a CUDA event, read after one synchronize at the end
  (no host sync inside the loop). The times are on the GPU timeline, so a data wait
  is the time the GPU waited for the batch: a loader that keeps ahead of the GPU
  costs nothing, one that starves it is counted.
- On CPU the clock is ``time.perf_counter`` (CPU ops are synchronous); on MPS the
  driver calls ``torch.mps.synchronize()`` before reading the clock.
"""

from __future__ import annotations

import contextlib
import gc
import math
import os
import resource
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from dnnroofline.errors import InputError
from dnnroofline.io import write_json_atomic
from dnnroofline.measure import contention, ddp
from dnnroofline.measure.energy import energy_meter, run_energy
from dnnroofline.measure.envinfo import cpu_model
from dnnroofline.measure.nvml_sampler import NvmlSampler
from dnnroofline.measure.run_record import (
    current_rss_bytes,
    device_info,
    failure_fields,
    new_record,
    peak_memory_fields,
    timing_fields,
    usage_fields,
)
from dnnroofline.measure.step_hooks import (
    barrier_first,
    grad_scaler_record,
    profile_hooks,
    with_energy,
    with_sampler,
    with_scale_probe,
)
from dnnroofline.measure.train_config import (
    OPTIMIZER,
    Resolved,
    apply_precision,
    arg_parser,
    autocast_factory,
    config_from_args,
    cudnn_benchmark_setting,
    private_compile_cache,
    validate,
)

#: torch.manual_seed of every run (model init, synthetic batch, labels, data order).
SEED = 0
# ImageNet normalization, as the torchvision reference training uses.
_MEAN = (0.485, 0.456, 0.406)
_STD = (0.229, 0.224, 0.225)

ProgressFn = Callable[[str], None]

# --------------------------------------------------------------------------- setup


@dataclass
class Setup:
    """Everything the timed loop touches."""

    resolved: Resolved
    model: Any
    optimizer: Any
    step: Callable[[Any, Any], None]
    next_batch: Callable[[], tuple[Any, Any]]
    numerics: dict[str, Any]
    loader: Any = None
    dataset_size: int | None = None
    scaler: Any = None  # amp's GradScaler
    rss_before_model_bytes: int | None = None  # the runtime, before the model was built

    @property
    def backend(self) -> str:
        return self.resolved.backend


def _loss_fn(criterion: Any) -> Callable[[Any, Any], Any]:
    """Loss of a model output; Inception/GoogLeNet train-mode outputs carry aux logits."""

    def loss(out: Any, target: Any) -> Any:
        if isinstance(out, tuple):  # InceptionOutputs / GoogLeNetOutputs (namedtuples)
            main, *aux = out
            total = criterion(main, target)
            for a in aux:
                if a is not None:
                    total = total + 0.4 * criterion(a, target)
            return total
        return criterion(out, target)

    return loss


def make_step(
    model: Any,
    loss: Callable[[Any, Any], Any],
    optimizer: Any,
    autocast: Callable[[], Any] | None,
    scaler: Any = None,
) -> Callable[[Any, Any], None]:
    """One training step: forward, loss, backward, optimizer step, zero_grad(set_to_none).

    No host sync: nothing reads a value back (GradScaler.step does, by design of amp).
    """
    if autocast is None:

        def step(images: Any, labels: Any) -> None:
            loss(model(images), labels).backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

    elif scaler is None:

        def step(images: Any, labels: Any) -> None:
            with autocast():
                value = loss(model(images), labels)
            value.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

    else:

        def step(images: Any, labels: Any) -> None:
            with autocast():
                value = loss(model(images), labels)
            scaler.scale(value).backward()
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad(set_to_none=True)

    return step


def _cycle(loader: Any) -> Iterator[Any]:
    """Iterate the loader forever, epoch after epoch."""
    while True:
        empty = True
        for batch in loader:
            empty = False
            yield batch
        if empty:
            raise RuntimeError("the data loader yields no batch (dataset smaller than a batch?)")


def _model_and_step(resolved: Resolved, memory_format: Any, numerics: dict[str, Any]) -> tuple:
    """The model, its SGD optimizer, the training step, amp's GradScaler (or None) and
    the process's RSS before the model was built (the imports in it): DDP-wrapped in a
    data-parallel rank, compiled where the env asks."""
    import torch

    cfg = resolved.cfg
    if cfg.model_factory:  # torchvision, seconds to import, only for its own models
        from dnnroofline.study.models import build_custom

        rss_before_model = current_rss_bytes()
        model = build_custom(cfg.model_factory, cfg.model_kwargs, cfg.num_classes)
    else:
        import torchvision

        rss_before_model = current_rss_bytes()
        model = torchvision.models.get_model(cfg.arch, weights=None, num_classes=cfg.num_classes)
    device = torch.device(resolved.device)
    model = model.to(device=device, memory_format=memory_format)
    model.train()
    optimizer = torch.optim.SGD(
        model.parameters(),
        lr=OPTIMIZER["lr"],
        momentum=OPTIMIZER["momentum"],
        weight_decay=OPTIMIZER["weight_decay"],
    )
    net = model
    if cfg.nproc > 1:  # a rank of a data-parallel run: gradients all-reduced in backward
        from torch.nn.parallel import DistributedDataParallel

        net = DistributedDataParallel(
            model, device_ids=[device.index] if resolved.backend == "cuda" else None
        )
    if cfg.compile:  # a cold compile in every run: its first step is comparable
        numerics["compile_cache"] = f"empty, private to the run ({private_compile_cache()})"
        net = torch.compile(net, mode=None if cfg.compile == "default" else cfg.compile)
    settings = resolved.settings
    scaler = torch.amp.GradScaler(resolved.backend) if settings.grad_scaler else None
    step = make_step(
        net, _loss_fn(torch.nn.CrossEntropyLoss()), optimizer, autocast_factory(settings), scaler
    )
    return model, optimizer, step, scaler, rss_before_model


def _synthetic_batches(resolved: Resolved, memory_format: Any) -> Callable[[], tuple[Any, Any]]:
    """One random batch on the device, the same at every step."""
    import torch

    cfg = resolved.cfg
    device = torch.device(resolved.device)
    shape = (cfg.batch_size, 3, cfg.image_size, cfg.image_size)
    images = torch.randn(shape, device=device).contiguous(memory_format=memory_format)
    labels = torch.randint(0, cfg.num_classes, (cfg.batch_size,), device=device)
    batch = (images, labels)

    def next_batch() -> tuple[Any, Any]:
        return batch

    return next_batch


def _image_folder(resolved: Resolved, memory_format: Any) -> tuple:
    """(next_batch, loader, dataset size) of ``--data``'s ImageFolder ``train/``, with the
    torchvision reference training's augmentation; each rank reads its own share."""
    import torch
    import torchvision
    from torchvision import transforms

    cfg = resolved.cfg
    device = torch.device(resolved.device)
    transform = transforms.Compose(
        [
            transforms.RandomResizedCrop(cfg.image_size),
            transforms.RandomHorizontalFlip(),
            transforms.ToTensor(),
            transforms.Normalize(_MEAN, _STD),
        ]
    )
    train_dir = os.path.join(cfg.data, "train")
    try:
        dataset = torchvision.datasets.ImageFolder(train_dir, transform=transform)
    except (FileNotFoundError, RuntimeError) as exc:
        raise InputError(f"--data {cfg.data!r}: {exc}") from exc
    if len(dataset.classes) > cfg.num_classes:
        raise InputError(
            f"--data {cfg.data!r}: {len(dataset.classes)} classes in {train_dir} but "
            f"--num-classes {cfg.num_classes}"
        )
    if len(dataset) // cfg.nproc < cfg.batch_size:
        per = f" per process (--nproc {cfg.nproc})" if cfg.nproc > 1 else ""
        raise InputError(
            f"--data {cfg.data!r}: {len(dataset)} images in {train_dir}, fewer than "
            f"--batch-size {cfg.batch_size}{per} (batches drop the last partial one)"
        )
    dataset_size = len(dataset)
    pin = cfg.pin_memory and resolved.backend == "cuda"
    sampler = None
    if cfg.nproc > 1:  # each rank reads its own share of the images
        sampler = torch.utils.data.distributed.DistributedSampler(
            dataset, num_replicas=cfg.nproc, rank=cfg.rank or 0, drop_last=True
        )
    loader = torch.utils.data.DataLoader(
        dataset,
        batch_size=cfg.batch_size,
        shuffle=sampler is None,
        sampler=sampler,
        num_workers=cfg.workers,
        pin_memory=pin,
        drop_last=True,
        persistent_workers=cfg.workers > 0,
    )
    batches = _cycle(loader)
    non_blocking = resolved.backend == "cuda"

    def next_batch() -> tuple[Any, Any]:
        images, labels = next(batches)
        return (
            images.to(device, non_blocking=non_blocking, memory_format=memory_format),
            labels.to(device, non_blocking=non_blocking),
        )

    return next_batch, loader, dataset_size


def build(resolved: Resolved) -> Setup:
    """Model, optimizer, loss, precision and data, on the device. No timing here."""
    import torch

    cfg = resolved.cfg
    # The same weights, batch and labels in every run: with amp, how many optimizer
    # steps GradScaler skips in the timed window depends on them.
    torch.manual_seed(SEED)
    numerics = apply_precision(resolved.settings)
    numerics["seed"] = SEED
    torch.backends.cudnn.benchmark = cudnn_benchmark_setting(cfg.cudnn_benchmark, resolved.backend)
    numerics["cudnn_benchmark"] = bool(torch.backends.cudnn.benchmark)
    memory_format = torch.channels_last if cfg.channels_last else torch.contiguous_format
    model, optimizer, step, scaler, rss_before_model = _model_and_step(
        resolved, memory_format, numerics
    )
    loader = dataset_size = None
    if cfg.data is None:
        next_batch = _synthetic_batches(resolved, memory_format)
    else:
        next_batch, loader, dataset_size = _image_folder(resolved, memory_format)
    return Setup(
        resolved=resolved,
        model=model,
        optimizer=optimizer,
        step=step,
        next_batch=next_batch,
        numerics=numerics,
        loader=loader,
        dataset_size=dataset_size,
        scaler=scaler,
        rss_before_model_bytes=rss_before_model,
    )


# --------------------------------------------------------------------------- timed loop


@dataclass
class LoopTimes:
    """Per-step times of the timed steps, in seconds."""

    step_s: list[float]
    data_wait_s: list[float]
    compute_s: list[float]
    timer: str  # "cuda_events" | "perf_counter" | "perf_counter+mps_sync"
    warmup_s: float  # host wall time of the warm-up (compilation included)
    first_step_s: float | None  # host wall time of the first warm-up step (compilation)
    timed_wall_s: float  # host wall time of the timed region, final sync included
    timed_user_s: float
    timed_sys_s: float
    # pages the timed steps touched first (RUSAGE_SELF ru_minflt): memory new from the OS
    timed_minor_faults: int = 0
    other_load: dict | None = None  # other processes' CPU use meanwhile (contention.py)


@dataclass
class _Steps:
    """What one way of timing the steps returns."""

    timer: str
    step_s: list[float]
    data_s: list[float]
    wall_s: float


def _sync_fn(backend: str) -> Callable[[], None] | None:
    import torch

    if backend == "cuda":
        return torch.cuda.synchronize
    if backend == "mps":
        return torch.mps.synchronize
    return None


def _progress_every(iters: int) -> int:
    return max(1, math.ceil(iters / 10))


def _warm_up(setup: Setup, warmup_iters: int, sync: Callable[[], None] | None) -> tuple:
    """``warmup_iters`` untimed steps; (their wall time, the first step's alone)."""
    clock = time.perf_counter
    t_warm = clock()
    first_step_s = None
    for i in range(warmup_iters):
        images, labels = setup.next_batch()
        setup.step(images, labels)
        if i == 0:  # the first step alone: torch.compile compiles here
            if sync is not None:
                sync()
            first_step_s = clock() - t_warm
    if sync is not None:
        sync()
    return clock() - t_warm, first_step_s


def _cuda_steps(setup: Setup, iters: int, rate: Callable[[int, float], None]) -> _Steps:
    """Every step boundary a CUDA event, read after one synchronize at the end."""
    import torch

    step, next_batch, clock = setup.step, setup.next_batch, time.perf_counter
    start = [torch.cuda.Event(enable_timing=True) for _ in range(iters + 1)]
    ready = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    t0 = clock()
    for i in range(iters):
        start[i].record()
        images, labels = next_batch()
        ready[i].record()
        step(images, labels)
        rate(i, t0)
    start[iters].record()
    torch.cuda.synchronize()
    return _Steps(
        timer="cuda_events",
        step_s=[start[i].elapsed_time(start[i + 1]) / 1e3 for i in range(iters)],
        data_s=[start[i].elapsed_time(ready[i]) / 1e3 for i in range(iters)],
        wall_s=clock() - t0,
    )


def _host_steps(
    setup: Setup, iters: int, sync: Callable[[], None] | None, rate: Callable[[int, float], None]
) -> _Steps:
    """The host clock at every step boundary; on MPS after a device synchronize."""
    step, next_batch, clock = setup.step, setup.next_batch, time.perf_counter
    stamps = [0.0] * (iters + 1)
    ready_t = [0.0] * iters
    if sync is None:  # CPU ops are synchronous: nothing to wait for
        for i in range(iters):
            stamps[i] = clock()
            images, labels = next_batch()
            ready_t[i] = clock()
            step(images, labels)
            rate(i, stamps[0])
    else:
        sync()
        for i in range(iters):
            stamps[i] = clock()
            images, labels = next_batch()
            sync()
            ready_t[i] = clock()
            step(images, labels)
            sync()
            rate(i, stamps[0])
    stamps[iters] = clock()
    return _Steps(
        timer="perf_counter" if sync is None else "perf_counter+mps_sync",
        step_s=[stamps[i + 1] - stamps[i] for i in range(iters)],
        data_s=[ready_t[i] - stamps[i] for i in range(iters)],
        wall_s=stamps[iters] - stamps[0],
    )


def _rate_reporter(
    setup: Setup, iters: int, progress: ProgressFn | None
) -> Callable[[int, float], None]:
    """Called after timed step i (clock start t0): says the images/s so far every tenth."""
    if progress is None:
        return lambda _i, _t0: None
    every = _progress_every(iters)
    batch = setup.resolved.cfg.batch_size
    note = " (host clock, asynchronous)" if setup.backend == "cuda" else ""

    def rate(i: int, t0: float) -> None:
        if i % every == every - 1:
            so_far = batch * (i + 1) / (time.perf_counter() - t0)
            progress(f"step {i + 1}/{iters}: {so_far:.1f} images/s so far{note}")

    return rate


def timed_loop(
    setup: Setup,
    warmup_iters: int,
    iters: int,
    progress: ProgressFn | None = None,
    before_timed: Callable[[], None] | None = None,
    after_timed: Callable[[], None] | None = None,
) -> LoopTimes:
    """Run ``warmup_iters`` untimed then ``iters`` timed steps; return per-step times."""
    sync = _sync_fn(setup.backend)
    say = progress or (lambda _msg: None)
    rate = _rate_reporter(setup, iters, progress)

    say(f"warm-up: {warmup_iters} untimed steps")
    warmup_s, first_step_s = _warm_up(setup, warmup_iters, sync)
    say(f"warm-up done in {warmup_s:.3f} s; timing {iters} steps")
    if before_timed is not None:
        before_timed()

    # a rank's own processes are its launcher's tree: the other ranks are not "others"
    root = os.getppid() if setup.resolved.cfg.nproc > 1 else None
    cpu0 = contention.snapshot(root)
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    if setup.backend == "cuda":
        steps = _cuda_steps(setup, iters, rate)
    else:
        steps = _host_steps(setup, iters, sync, rate)
    ru1 = resource.getrusage(resource.RUSAGE_SELF)
    other_load = contention.other_load(cpu0, contention.snapshot(root))
    if after_timed is not None:
        after_timed()
    return LoopTimes(
        step_s=steps.step_s,
        data_wait_s=steps.data_s,
        compute_s=[s - d for s, d in zip(steps.step_s, steps.data_s, strict=True)],
        timer=steps.timer,
        warmup_s=warmup_s,
        first_step_s=first_step_s,
        timed_wall_s=steps.wall_s,
        timed_user_s=ru1.ru_utime - ru0.ru_utime,
        timed_sys_s=ru1.ru_stime - ru0.ru_stime,
        timed_minor_faults=ru1.ru_minflt - ru0.ru_minflt,
        other_load=other_load,
    )


# --------------------------------------------------------------------------- one run


def progress_to_stderr(msg: str) -> None:
    """The run driver's progress line, on stderr (the trace driver reports through it too)."""
    print(f"[run_train] {msg}", file=sys.stderr, flush=True)


#: Given the built Setup, returns hooks around the timed steps (it may wrap
#: ``setup.step``): how the trace job (dnnroofline.measure.traces) profiles the very same loop.
Instrument = Callable[[Setup], tuple[Callable[[], None] | None, Callable[[], None] | None]]


def _time_steps(
    setup: Setup, record: dict[str, Any], say: ProgressFn, instrument: Instrument | None
) -> None:
    """Warm up and time the built run, with its hooks (profiler range, trace, GradScaler
    probe, NVML sampler, energy meter, rank barrier); fill the record's results."""
    import torch

    resolved = setup.resolved
    cfg = resolved.cfg
    iters = 1 if cfg.profile_step else cfg.iters
    timed = not cfg.profile_step and instrument is None  # steps whose time is reported
    index = torch.device(resolved.device).index or 0
    # ncu profiles rank 0: only it opens the profiler range
    profiled = cfg.profile_step and not cfg.rank
    before, after = profile_hooks(resolved.backend) if profiled else (None, None)
    if instrument is not None:
        before, after = instrument(setup)
    probe: dict[str, float] = {}
    if setup.scaler is not None:
        before, after = with_scale_probe(setup.scaler, before, after, probe)
    if resolved.backend == "cuda" and timed:
        before, after = with_sampler(NvmlSampler(index), before, after, record)
    if timed:  # inside the sampler's window: the joules of the timed steps alone
        meter = energy_meter(resolved.backend, index)
        before, after = with_energy(meter, before, after, record)
    if cfg.nproc > 1:
        before = barrier_first(before)
    times = timed_loop(setup, cfg.warmup_iters, iters, say, before, after)
    if setup.scaler is not None:
        record["grad_scaler"] = grad_scaler_record(
            probe["before"], probe["after"], iters, cfg.profile_step
        )
    if timed:  # this process's steps and images (ddp.merge_records counts every rank's)
        record["energy"] = run_energy(
            record["energy"], record.get("gpu_telemetry"), iters, iters * cfg.batch_size
        )
    record.update(timing_fields(times, cfg.batch_size))
    record.update(peak_memory_fields(resolved))
    step, data = record["step_time_s"], record["data_wait_s"]
    say(
        f"done: median step {step['median'] * 1e3:.2f} ms "
        f"(p5 {step['p5'] * 1e3:.2f}, p95 {step['p95'] * 1e3:.2f}, cv {step['cv']:.3f}), "
        f"{record['images_per_s']:.1f} images/s, "
        f"data wait median {data['median'] * 1e3:.3f} ms"
    )


def run(
    resolved: Resolved,
    progress: ProgressFn | None = progress_to_stderr,
    instrument: Instrument | None = None,
) -> dict[str, Any]:
    """Set up, warm up and time one run; return the run record (never raises for a
    failure inside setup or the loop: that is status "oom" or "error").

    With ``instrument``, its hooks run around the timed steps, which are then no
    timing to report (the trace job); NVML sampling is left out of them.
    """
    import torch

    cfg = resolved.cfg
    say = progress or (lambda _msg: None)
    record = new_record(resolved)
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    ru0_children = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    say(
        f"{cfg.arch} {cfg.precision} bs{cfg.batch_size} img{cfg.image_size} on "
        f"{resolved.device} (threads={resolved.threads}, "
        f"data={'synthetic' if cfg.data is None else cfg.data})"
    )
    setup = None
    try:
        record.update(device_info(resolved))
        if resolved.backend == "cuda":
            torch.cuda.reset_peak_memory_stats(resolved.device)
        setup = build(resolved)
        record["numerics"] = setup.numerics
        record["dataset_images"] = setup.dataset_size
        record["rss_before_model_bytes"] = setup.rss_before_model_bytes
        record["setup_s"] = time.monotonic() - t0
        say(f"setup done in {record['setup_s']:.3f} s")
        _time_steps(setup, record, say, instrument)
    except InputError:
        raise
    except Exception as exc:  # noqa: BLE001 - a crash is this run's status, not the study's
        record.update(failure_fields(exc))
        say(f"FAILED ({record['status']}): {record['message']}")
    finally:
        loader = getattr(setup, "loader", None)
        del setup, loader
        gc.collect()
        if resolved.backend == "cuda" and record["status"] != "ok":
            with contextlib.suppress(Exception):
                torch.cuda.empty_cache()
    if record.get("device_name") is None:
        record["device_name"] = cpu_model() if resolved.backend == "cpu" else resolved.device
    # The data-loader workers were shut down with the loader above: their CPU time
    # counts too, as it does in a data-parallel run's record.
    record.update(usage_fields(t0, ru0, ru0_children))
    return record


# --------------------------------------------------------------------------- CLI


def _rank_run(resolved: Resolved, say: ProgressFn) -> dict[str, Any]:
    """A timed run as one rank of a data-parallel run does it (ddp.rank_main's work)."""
    return run(resolved, say)


def main(argv: Sequence[str] | None = None) -> int:
    """CLI: 0 when the JSON was written (status ok, oom or error), 2 for bad input."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = arg_parser().parse_args(argv)
    cfg = config_from_args(args)
    try:
        resolved = validate(cfg)
        if cfg.rank is not None:
            return ddp.rank_main(resolved, args.out, progress_to_stderr, _rank_run)
        if cfg.nproc > 1:
            progress_to_stderr(
                f"{cfg.arch} {cfg.precision} bs{cfg.batch_size} x {cfg.nproc} processes "
                f"on {resolved.backend}"
            )
            record = ddp.launch(
                new_record(resolved), argv, cfg.nproc, resolved.threads, progress_to_stderr
            )
            if record.get("device_name") is None:  # no rank got far enough to say
                record["device_name"] = cpu_model() if resolved.backend == "cpu" else None
        else:
            record = run(resolved)
    except InputError as exc:
        print(f"run_train.py: error: {exc}", file=sys.stderr)
        return 2
    write_json_atomic(args.out, record)
    progress_to_stderr(f"wrote {args.out} (status {record['status']})")
    return 0
