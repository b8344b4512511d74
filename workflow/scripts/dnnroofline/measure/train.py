"""The timed training driver: model and optimizer setup, precision handling, the timed loop.

``run_train.py`` is a thin wrapper around :func:`main`. Everything here is importable
without Snakemake; the benchmark ``benchmarks/bench_driver_overhead.py`` calls
:func:`build` and :func:`timed_loop`, the same code path as the command line.

Method (see README, "Method"):

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
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from dnnroofline.errors import InputError
from dnnroofline.measure import contention, ddp
from dnnroofline.measure.ddp import dist_backend
from dnnroofline.measure.nvml_sampler import NvmlSampler
from dnnroofline.measure.train_config import (  # re-exported: see __all__
    BACKENDS,
    MAX_MESSAGE,
    OPTIMIZER,
    PRECISIONS,
    SCHEMA_VERSION,
    PrecisionSettings,
    Resolved,
    TrainConfig,
    apply_precision,
    arg_parser,
    autocast_factory,
    check_arch,
    check_precision,
    check_threads,
    config_from_args,
    cpu_model,
    cudnn_benchmark_setting,
    failure_status,
    grad_scaler_record,
    is_oom,
    known_archs,
    precision_settings,
    private_compile_cache,
    resolve_backend,
    step_arguments,
    suggest_archs,
    validate,
    with_sampler,
    with_scale_probe,
)
from dnnroofline.stats import summarize
from dnnroofline.study.config import SUPPORTED_PRECISIONS

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


def build(resolved: Resolved) -> Setup:
    """Model, optimizer, loss, precision and data, on the device. No timing here."""
    import torch
    import torchvision

    cfg = resolved.cfg
    device = torch.device(resolved.device)
    settings = resolved.settings
    # The same weights, batch and labels in every run: with amp, how many optimizer
    # steps GradScaler skips in the timed window depends on them.
    torch.manual_seed(SEED)
    numerics = apply_precision(settings)
    numerics["seed"] = SEED
    torch.backends.cudnn.benchmark = cudnn_benchmark_setting(cfg.cudnn_benchmark, resolved.backend)
    numerics["cudnn_benchmark"] = bool(torch.backends.cudnn.benchmark)
    memory_format = torch.channels_last if cfg.channels_last else torch.contiguous_format

    if cfg.model_factory:
        from dnnroofline.study.models import build_custom

        model = build_custom(cfg.model_factory, cfg.model_kwargs, cfg.num_classes)
    else:
        model = torchvision.models.get_model(cfg.arch, weights=None, num_classes=cfg.num_classes)
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
    scaler = torch.amp.GradScaler(resolved.backend) if settings.grad_scaler else None
    step = make_step(
        net, _loss_fn(torch.nn.CrossEntropyLoss()), optimizer, autocast_factory(settings), scaler
    )

    loader = None
    dataset_size = None
    if cfg.data is None:
        shape = (cfg.batch_size, 3, cfg.image_size, cfg.image_size)
        images = torch.randn(shape, device=device).contiguous(memory_format=memory_format)
        labels = torch.randint(0, cfg.num_classes, (cfg.batch_size,), device=device)
        batch = (images, labels)

        def next_batch() -> tuple[Any, Any]:
            return batch

    else:
        from torchvision import transforms

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
    other_load: dict | None = None  # other processes' CPU use meanwhile (contention.py)


def _sync_fn(backend: str) -> Callable[[], None] | None:
    import torch

    if backend == "cuda":
        return torch.cuda.synchronize
    if backend == "mps":
        return torch.mps.synchronize
    return None


def _progress_every(iters: int) -> int:
    return max(1, math.ceil(iters / 10))


def timed_loop(
    setup: Setup,
    warmup_iters: int,
    iters: int,
    progress: ProgressFn | None = None,
    before_timed: Callable[[], None] | None = None,
    after_timed: Callable[[], None] | None = None,
) -> LoopTimes:
    """Run ``warmup_iters`` untimed then ``iters`` timed steps; return per-step times."""
    import torch

    step = setup.step
    next_batch = setup.next_batch
    backend = setup.backend
    batch = setup.resolved.cfg.batch_size
    sync = _sync_fn(backend)
    clock = time.perf_counter
    say = progress or (lambda _msg: None)
    every = _progress_every(iters) if progress is not None else iters + 1

    say(f"warm-up: {warmup_iters} untimed steps")
    t_warm = clock()
    first_step_s = None
    for i in range(warmup_iters):
        images, labels = next_batch()
        step(images, labels)
        if i == 0:  # the first step alone: torch.compile compiles here
            if sync is not None:
                sync()
            first_step_s = clock() - t_warm
    if sync is not None:
        sync()
    warmup_s = clock() - t_warm
    say(f"warm-up done in {warmup_s:.3f} s; timing {iters} steps")
    if before_timed is not None:
        before_timed()

    # a rank's own processes are its launcher's tree: the other ranks are not "others"
    root = os.getppid() if setup.resolved.cfg.nproc > 1 else None
    cpu0 = contention.snapshot(root)
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    if backend == "cuda":
        timer = "cuda_events"
        start = [torch.cuda.Event(enable_timing=True) for _ in range(iters + 1)]
        ready = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
        t0 = clock()
        for i in range(iters):
            start[i].record()
            images, labels = next_batch()
            ready[i].record()
            step(images, labels)
            if i % every == every - 1:
                say(
                    f"step {i + 1}/{iters}: {batch * (i + 1) / (clock() - t0):.1f} images/s "
                    "so far (host clock, asynchronous)"
                )
        start[iters].record()
        torch.cuda.synchronize()
        timed_wall_s = clock() - t0
        step_s = [start[i].elapsed_time(start[i + 1]) / 1e3 for i in range(iters)]
        data_s = [start[i].elapsed_time(ready[i]) / 1e3 for i in range(iters)]
    else:
        timer = "perf_counter" if sync is None else "perf_counter+mps_sync"
        stamps = [0.0] * (iters + 1)
        ready_t = [0.0] * iters
        if sync is None:
            for i in range(iters):
                stamps[i] = clock()
                images, labels = next_batch()
                ready_t[i] = clock()
                step(images, labels)
                if i % every == every - 1:
                    say(
                        f"step {i + 1}/{iters}: "
                        f"{batch * (i + 1) / (clock() - stamps[0]):.1f} images/s so far"
                    )
        else:
            sync()
            for i in range(iters):
                stamps[i] = clock()
                images, labels = next_batch()
                sync()
                ready_t[i] = clock()
                step(images, labels)
                sync()
                if i % every == every - 1:
                    say(
                        f"step {i + 1}/{iters}: "
                        f"{batch * (i + 1) / (clock() - stamps[0]):.1f} images/s so far"
                    )
        stamps[iters] = clock()
        timed_wall_s = stamps[iters] - stamps[0]
        step_s = [stamps[i + 1] - stamps[i] for i in range(iters)]
        data_s = [ready_t[i] - stamps[i] for i in range(iters)]
    ru1 = resource.getrusage(resource.RUSAGE_SELF)
    other_load = contention.other_load(cpu0, contention.snapshot(root))
    if after_timed is not None:
        after_timed()
    compute_s = [s - d for s, d in zip(step_s, data_s, strict=True)]
    return LoopTimes(
        step_s=step_s,
        data_wait_s=data_s,
        compute_s=compute_s,
        timer=timer,
        warmup_s=warmup_s,
        first_step_s=first_step_s,
        timed_wall_s=timed_wall_s,
        timed_user_s=ru1.ru_utime - ru0.ru_utime,
        timed_sys_s=ru1.ru_stime - ru0.ru_stime,
        other_load=other_load,
    )


# --------------------------------------------------------------------------- the record


def _rss_bytes(ru: resource.struct_rusage) -> int:
    # ru_maxrss is KiB on Linux and bytes on macOS.
    return int(ru.ru_maxrss) if sys.platform == "darwin" else int(ru.ru_maxrss) * 1024


def gpu_clocks(index: int) -> dict[str, Any] | None:
    """Current and max SM/memory clocks (MHz) through pynvml, None if it is not there."""
    try:
        import pynvml  # optional: nvidia-ml-py
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            return {
                "sm_mhz": pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM),
                "mem_mhz": pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_MEM),
                "sm_max_mhz": pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM),
                "mem_max_mhz": pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_MEM),
            }
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - clocks are optional information
        return None


def _device_info(resolved: Resolved) -> dict[str, Any]:
    import torch
    import torchvision

    info: dict[str, Any] = {
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
        "cuda": None,
        "cudnn": None,
        "gpu_clocks": None,
    }
    if resolved.backend == "cuda":
        index = torch.device(resolved.device).index or 0
        info["device_name"] = torch.cuda.get_device_name(index)
        info["cuda"] = torch.version.cuda
        info["cudnn"] = torch.backends.cudnn.version()
        info["gpu_clocks"] = gpu_clocks(index)
    elif resolved.backend == "mps":
        info["device_name"] = f"Apple MPS ({cpu_model()})"
    else:
        info["device_name"] = cpu_model()
    return info


def config_record(resolved: Resolved) -> dict[str, Any]:
    cfg = resolved.cfg
    return {
        "arch": cfg.arch,
        "batch_size": cfg.batch_size,
        "image_size": cfg.image_size,
        "warmup_iters": cfg.warmup_iters,
        "iters": 1 if cfg.profile_step else cfg.iters,
        "precision": cfg.precision,
        "backend": resolved.backend,
        "device": resolved.device,
        "channels_last": cfg.channels_last,
        "compile": cfg.compile,
        "cudnn_benchmark": cudnn_benchmark_setting(cfg.cudnn_benchmark, resolved.backend),
        "cudnn_benchmark_source": "default (on for CUDA)"
        if cfg.cudnn_benchmark is None
        else "--cudnn-benchmark"
        if cfg.cudnn_benchmark
        else "--no-cudnn-benchmark",
        "model_factory": cfg.model_factory,
        "model_kwargs": dict(cfg.model_kwargs),
        "data": "synthetic" if cfg.data is None else str(cfg.data),
        "workers": cfg.workers,
        "pin_memory": cfg.pin_memory and resolved.backend == "cuda",
        "threads": resolved.threads,
        "optimizer": dict(OPTIMIZER),
        "num_classes": cfg.num_classes,
        "requested_backend": cfg.backend,
        "profile_step": cfg.profile_step,
        "nproc": cfg.nproc,
        "dist_backend": dist_backend(resolved.backend) if cfg.nproc > 1 else None,
        "global_batch_size": cfg.nproc * cfg.batch_size,
    }


def _stderr(msg: str) -> None:
    print(f"[run_train] {msg}", file=sys.stderr, flush=True)


def _profile_hooks(backend: str) -> tuple[Callable[[], None] | None, Callable[[], None] | None]:
    """cudaProfilerStart/Stop around the one profiled step (ncu --profile-from-start off)."""
    if backend != "cuda":
        return None, None
    import torch

    def start() -> None:
        torch.cuda.synchronize()
        torch.cuda.profiler.start()

    def stop() -> None:
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()

    return start, stop


def new_record(resolved: Resolved) -> dict[str, Any]:
    """The run record before the run: config and start time, every result key null."""
    cfg = resolved.cfg
    return {
        "schema_version": SCHEMA_VERSION,
        "status": None,
        "message": None,
        "run_id": cfg.run_id,
        "env": cfg.env,
        "config": config_record(resolved),
        "start_time": time.time(),
        "end_time": None,
        "step_time_s": None,
        "data_wait_s": None,
        "compute_s": None,
        "images_per_s": None,
        "wall_s": None,
        "user_s": None,
        "sys_s": None,
        "max_rss_bytes": None,
        "peak_device_memory_bytes": None,
        "device_name": None,
        "threads": resolved.threads,
        "omp_num_threads": resolved.omp_num_threads,
        "timer": None,
        "numerics": None,
        "setup_s": None,
        "warmup_s": None,
        "first_step_s": None,
        "timed_region": None,
        "dataset_images": None,
        "grad_scaler": None,
        "gpu_telemetry": None,
        "ranks": None,
    }


def _barrier_first(
    before: Callable[[], None] | None,
) -> Callable[[], None]:
    """Ranks of a data-parallel run start their timed steps together."""
    import torch.distributed as dist

    def start() -> None:
        dist.barrier()
        if before is not None:
            before()

    return start


#: Given the built Setup, returns hooks around the timed steps (it may wrap
#: ``setup.step``): how the trace job (dnnroofline.measure.traces) profiles the very same loop.
Instrument = Callable[[Setup], tuple[Callable[[], None] | None, Callable[[], None] | None]]


def run(
    resolved: Resolved,
    progress: ProgressFn | None = _stderr,
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
        record.update(_device_info(resolved))
        if resolved.backend == "cuda":
            torch.cuda.reset_peak_memory_stats(resolved.device)
        setup = build(resolved)
        record["numerics"] = setup.numerics
        record["dataset_images"] = setup.dataset_size
        record["setup_s"] = time.monotonic() - t0
        say(f"setup done in {record['setup_s']:.3f} s")
        iters = 1 if cfg.profile_step else cfg.iters
        # ncu profiles rank 0: only it opens the profiler range
        profiled = cfg.profile_step and not cfg.rank
        before, after = _profile_hooks(resolved.backend) if profiled else (None, None)
        if instrument is not None:
            before, after = instrument(setup)
        probe: dict[str, float] = {}
        if setup.scaler is not None:
            before, after = with_scale_probe(setup.scaler, before, after, probe)
        sampler = None
        if resolved.backend == "cuda" and not cfg.profile_step and instrument is None:
            sampler = NvmlSampler(torch.device(resolved.device).index or 0)
            before, after = with_sampler(sampler, before, after, record)
        if cfg.nproc > 1:
            before = _barrier_first(before)
        times = timed_loop(setup, cfg.warmup_iters, iters, say, before, after)
        if setup.scaler is not None:
            record["grad_scaler"] = grad_scaler_record(
                probe["before"], probe["after"], iters, cfg.profile_step
            )
        step = summarize(times.step_s)
        data = summarize(times.data_wait_s)
        compute = summarize(times.compute_s)
        record.update(
            status="ok",
            step_time_s=step,
            data_wait_s={
                "median": data["median"],
                "total": sum(times.data_wait_s),
                "all": data["all"],
            },
            compute_s={"median": compute["median"], "total": sum(times.compute_s)},
            images_per_s=cfg.batch_size / step["median"],
            timer=times.timer,
            warmup_s=times.warmup_s,
            first_step_s=times.first_step_s,
            timed_region={
                "wall_s": times.timed_wall_s,
                "user_s": times.timed_user_s,
                "sys_s": times.timed_sys_s,
                "steps_sum_s": sum(times.step_s),
                "other_load": times.other_load,
            },
        )
        if resolved.backend == "cuda":
            record["peak_device_memory_bytes"] = int(
                torch.cuda.max_memory_allocated(resolved.device)
            )
            record["peak_device_reserved_bytes"] = int(
                torch.cuda.max_memory_reserved(resolved.device)
            )
        elif resolved.backend == "mps":
            record["peak_device_memory_bytes"] = int(torch.mps.driver_allocated_memory())
        say(
            f"done: median step {step['median'] * 1e3:.2f} ms "
            f"(p5 {step['p5'] * 1e3:.2f}, p95 {step['p95'] * 1e3:.2f}, cv {step['cv']:.3f}), "
            f"{record['images_per_s']:.1f} images/s, "
            f"data wait median {data['median'] * 1e3:.3f} ms"
        )
    except InputError:
        raise
    except Exception as exc:  # noqa: BLE001 - a crash is this run's status, not the study's
        status, message = failure_status(exc)
        record.update(
            status=status,
            message=message,
            step_time_s=None,
            data_wait_s=None,
            compute_s=None,
            images_per_s=None,
        )
        record["traceback"] = traceback.format_exc(limit=8)[-MAX_MESSAGE:]
        say(f"FAILED ({status}): {message}")
    finally:
        loader = getattr(setup, "loader", None)
        del setup, loader
        gc.collect()
        if resolved.backend == "cuda" and record["status"] != "ok":
            with contextlib.suppress(Exception):
                torch.cuda.empty_cache()
    if record.get("device_name") is None:
        record["device_name"] = cpu_model() if resolved.backend == "cpu" else resolved.device
    ru1 = resource.getrusage(resource.RUSAGE_SELF)
    # The data-loader workers were shut down with the loader above: their CPU time
    # counts too, as it does in a data-parallel run's record.
    ru1_children = resource.getrusage(resource.RUSAGE_CHILDREN)
    record["wall_s"] = time.monotonic() - t0
    record["user_s"] = ru1.ru_utime - ru0.ru_utime + ru1_children.ru_utime - ru0_children.ru_utime
    record["sys_s"] = ru1.ru_stime - ru0.ru_stime + ru1_children.ru_stime - ru0_children.ru_stime
    record["max_rss_bytes"] = _rss_bytes(ru1)
    record["end_time"] = time.time()
    return record


# --------------------------------------------------------------------------- CLI


def main(argv: Sequence[str] | None = None) -> int:
    """CLI: 0 when the JSON was written (status ok, oom or error), 2 for bad input."""
    from dnnroofline.io import write_json_atomic

    argv = list(sys.argv[1:] if argv is None else argv)
    args = arg_parser().parse_args(argv)
    cfg = config_from_args(args)
    try:
        resolved = validate(cfg)
        if cfg.rank is not None:
            return ddp.rank_main(resolved, args.out, _stderr)
        if cfg.nproc > 1:
            _stderr(
                f"{cfg.arch} {cfg.precision} bs{cfg.batch_size} x {cfg.nproc} processes "
                f"on {resolved.backend}"
            )
            record = ddp.launch(new_record(resolved), argv, cfg.nproc, resolved.threads, _stderr)
            if record.get("device_name") is None:  # no rank got far enough to say
                record["device_name"] = cpu_model() if resolved.backend == "cpu" else None
        else:
            record = run(resolved)
    except InputError as exc:
        print(f"run_train.py: error: {exc}", file=sys.stderr)
        return 2
    write_json_atomic(args.out, record)
    _stderr(f"wrote {args.out} (status {record['status']})")
    return 0


__all__ = [
    "BACKENDS",
    "OPTIMIZER",
    "PRECISIONS",
    "SUPPORTED_PRECISIONS",
    "LoopTimes",
    "PrecisionSettings",
    "Resolved",
    "Setup",
    "TrainConfig",
    "apply_precision",
    "autocast_factory",
    "build",
    "check_arch",
    "check_precision",
    "check_threads",
    "failure_status",
    "is_oom",
    "known_archs",
    "arg_parser",
    "config_from_args",
    "main",
    "step_arguments",
    "precision_settings",
    "resolve_backend",
    "run",
    "suggest_archs",
    "timed_loop",
    "validate",
]
