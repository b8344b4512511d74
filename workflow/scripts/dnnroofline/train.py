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

import argparse
import contextlib
import difflib
import functools
import gc
import math
import os
import platform
import resource
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dnnroofline import ddp
from dnnroofline.ddp import dist_backend
from dnnroofline.errors import InputError
from dnnroofline.nvml_sampler import NvmlSampler
from dnnroofline.stats import summarize
from dnnroofline.study import COMPILE_MODES, SUPPORTED_PRECISIONS, UNSUPPORTED_REASON

SCHEMA_VERSION = 1
BACKENDS = ("cpu", "cuda", "mps")
PRECISIONS = ("fp32", "tf32", "amp", "bf16")
# Precisions each backend can train in. fp32 means TF32 off. tf32 and amp (fp16
# autocast + GradScaler) are NVIDIA modes; bf16 autocast runs on CPU and CUDA. MPS
# is fp32 only: fp16/bf16 autocast and GradScaler on MPS are not verified here.
# The optimizer is fixed: the complexity stage counts 6 FLOPs and one fp32 momentum
# buffer per parameter for exactly this SGD.
OPTIMIZER = {"name": "SGD", "lr": 0.01, "momentum": 0.9, "weight_decay": 1e-4}
# ImageNet normalization, as the torchvision reference training uses.
_MEAN = (0.485, 0.456, 0.406)
_STD = (0.229, 0.224, 0.225)
# Substrings of allocator failures, CPU, CUDA and MPS.
_OOM_MARKERS = (
    "out of memory",
    "can't allocate memory",
    "cannot allocate memory",
    "cublas_status_alloc_failed",
    "cudnn_status_alloc_failed",
)
_MAX_MESSAGE = 4000

ProgressFn = Callable[[str], None]


# --------------------------------------------------------------------------- pure pieces


@dataclass(frozen=True)
class PrecisionSettings:
    """What a precision means for the numerics of one backend."""

    precision: str
    backend: str
    autocast_dtype: str | None  # "float16" | "bfloat16" | None (no autocast)
    grad_scaler: bool
    allow_tf32: bool  # cuBLAS matmul and cuDNN conv TF32 (CUDA only)
    matmul_precision: str  # torch.set_float32_matmul_precision value


def check_precision(precision: str, backend: str) -> None:
    """Raise InputError unless ``precision`` is valid on ``backend``."""
    if precision not in PRECISIONS:
        raise InputError(
            f"--precision {precision!r}: unknown precision (choose from {', '.join(PRECISIONS)})"
        )
    if backend not in BACKENDS:
        raise InputError(
            f"--backend {backend!r}: unknown backend (choose from auto, cpu, cuda, mps)"
        )
    if precision not in SUPPORTED_PRECISIONS[backend]:
        reason = UNSUPPORTED_REASON.get((backend, precision), "not supported")
        raise InputError(
            f"--precision {precision!r} is not supported on backend {backend!r}: {reason} "
            f"(supported on {backend}: {', '.join(SUPPORTED_PRECISIONS[backend])})"
        )


def precision_settings(precision: str, backend: str) -> PrecisionSettings:
    """Map (precision, resolved backend) to autocast dtype, GradScaler and TF32 flags.

    fp32 turns TF32 off and asks for the highest fp32 matmul precision; tf32 turns it
    on; amp is fp16 autocast with a GradScaler; bf16 is bf16 autocast without one.
    """
    check_precision(precision, backend)
    autocast_dtype = {"amp": "float16", "bf16": "bfloat16"}.get(precision)
    tf32 = precision == "tf32"
    return PrecisionSettings(
        precision=precision,
        backend=backend,
        autocast_dtype=autocast_dtype,
        grad_scaler=precision == "amp",
        allow_tf32=tf32,
        matmul_precision="high" if tf32 else "highest",
    )


def resolve_backend(
    requested: str,
    *,
    cuda_available: bool | None = None,
    mps_available: bool | None = None,
) -> str:
    """``auto`` -> cuda if available, else mps, else cpu; an explicit backend must exist.

    Availability is probed lazily, so ``--backend cpu`` never initializes CUDA.
    """
    import torch

    def cuda() -> bool:
        return torch.cuda.is_available() if cuda_available is None else cuda_available

    def mps() -> bool:
        if mps_available is not None:
            return mps_available
        backend = getattr(torch.backends, "mps", None)
        return bool(backend is not None and backend.is_available())

    if requested == "auto":
        if cuda():
            return "cuda"
        return "mps" if mps() else "cpu"
    if requested == "cpu":
        return "cpu"
    if requested == "cuda":
        if not cuda():
            raise InputError("--backend 'cuda': CUDA is not available on this machine")
        return "cuda"
    if requested == "mps":
        if not mps():
            raise InputError("--backend 'mps': MPS is not available on this machine")
        return "mps"
    raise InputError(f"--backend {requested!r}: unknown backend (choose from auto, cpu, cuda, mps)")


def is_oom(exc: BaseException) -> bool:
    """True for an allocator failure: torch.OutOfMemoryError, MemoryError or a message
    such as CUDA's "out of memory" or CPU's "DefaultCPUAllocator: can't allocate memory"."""
    if isinstance(exc, MemoryError):
        return True
    try:
        import torch

        if isinstance(exc, torch.OutOfMemoryError):
            return True
    except (ImportError, AttributeError):  # pragma: no cover - very old torch
        pass
    if isinstance(exc, RuntimeError):
        text = str(exc).lower()
        return any(marker in text for marker in _OOM_MARKERS)
    return False


def failure_status(exc: BaseException) -> tuple[str, str]:
    """(status, message) of a failed run: ("oom" | "error", "ExceptionType: message")."""
    text = str(exc).strip()
    if len(text) > _MAX_MESSAGE:
        text = text[:_MAX_MESSAGE] + " ...[truncated]"
    message = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return ("oom" if is_oom(exc) else "error"), message


def known_archs() -> list[str]:
    """torchvision classification model names."""
    import torchvision

    return sorted(torchvision.models.list_models(module=torchvision.models))


def suggest_archs(name: str, names: Sequence[str], n: int = 3) -> list[str]:
    """Close matches of a mistyped model name, best first."""
    return difflib.get_close_matches(name, list(names), n=n, cutoff=0.6)


def check_arch(name: str, names: Sequence[str] | None = None) -> None:
    names = known_archs() if names is None else list(names)
    if name in names:
        return
    close = suggest_archs(name, names)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise InputError(
        f"--arch {name!r}: not a torchvision classification model{hint} "
        f"(see torchvision.models.list_models(module=torchvision.models))"
    )


def parse_omp_threads(value: str | None) -> int | None:
    """OMP_NUM_THREADS as an int (first level of a nested list), None when unset or empty."""
    if value is None or not value.strip():
        return None
    first = value.split(",")[0].strip()
    try:
        n = int(first)
    except ValueError:
        raise InputError(f"OMP_NUM_THREADS={value!r}: not a positive integer") from None
    if n < 1:
        raise InputError(f"OMP_NUM_THREADS={value!r}: not a positive integer")
    return n


def check_threads(expected: int | None, actual: int, omp_value: str | None) -> None:
    """Refuse a job that got another thread count than its env declares."""
    if expected is None or expected == actual:
        return
    omp = f"OMP_NUM_THREADS={omp_value}" if omp_value else "OMP_NUM_THREADS unset"
    raise InputError(
        f"--expect-threads {expected}: env declares {expected} threads but this job got "
        f"{actual} ({omp}); run snakemake with --cores >= {expected}"
    )


def check_machine(cfg: TrainConfig, backend: str) -> None:
    """Refuse to run when this machine is not the one the env's env_info.json describes:
    another device than the env's (the resolved backend), CPU model or GPU."""
    import json

    import torch

    from dnnroofline.envinfo import check_same_machine, machine_here

    try:
        with open(cfg.env_info) as fh:
            recorded = json.load(fh)
    except (OSError, json.JSONDecodeError) as exc:
        raise InputError(f"--env-info {cfg.env_info!r}: cannot read it: {exc}") from exc
    if not isinstance(recorded, dict):
        raise InputError(f"--env-info {cfg.env_info!r}: not a JSON object")
    gpu = torch.cuda.get_device_name(torch.cuda.current_device()) if backend == "cuda" else None
    env = cfg.env or str(recorded.get("env") or "?")
    check_same_machine(env, recorded, machine_here(backend, gpu), cfg.env_info)


def cpu_model() -> str:
    """The CPU's model name: /proc/cpuinfo, sysctl on macOS, else platform."""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.lower().startswith(("model name", "hardware", "cpu model")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    if sys.platform == "darwin":
        import subprocess

        try:
            out = subprocess.run(
                ["sysctl", "-n", "machdep.cpu.brand_string"],
                capture_output=True,
                text=True,
                timeout=5,
                check=False,
            )
            if out.stdout.strip():
                return out.stdout.strip()
        except (OSError, subprocess.SubprocessError):
            pass
    return platform.processor() or platform.machine() or "unknown CPU"


# --------------------------------------------------------------------------- config


@dataclass
class TrainConfig:
    """One timed run, as given on the command line (backend may be ``auto``)."""

    arch: str
    batch_size: int
    image_size: int = 224
    warmup_iters: int = 5
    iters: int = 20
    precision: str = "fp32"
    backend: str = "auto"
    data: str | None = None  # None: synthetic
    channels_last: bool = False
    compile: bool | str = False  # False (eager) or a torch.compile mode (COMPILE_MODES)
    cudnn_benchmark: bool | None = None  # None: on for CUDA, off elsewhere
    model_factory: str | None = None  # "module:callable": the user's model, named --arch
    model_kwargs: dict[str, Any] = field(default_factory=dict)
    workers: int = 0
    pin_memory: bool = False
    num_classes: int = 1000
    env: str | None = None
    run_id: str | None = None
    expect_threads: int | None = None
    profile_step: bool = False
    env_info: str | None = None  # the env's env_info.json: refuse another machine
    nproc: int = 1  # data-parallel processes (DistributedDataParallel when > 1)
    rank: int | None = None  # set in a rank process of a data-parallel run (dnnroofline.ddp)
    dist_store: str | None = None  # that run's rendezvous file


@dataclass
class Resolved:
    """A validated config: resolved backend, device and thread count."""

    cfg: TrainConfig
    backend: str
    device: str
    threads: int
    settings: PrecisionSettings
    omp_num_threads: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


#: Untimed steps before a profiled step, at least (the ncu stage's warm-up).
PROFILE_MIN_WARMUP = 2


def cudnn_benchmark_setting(requested: bool | None, backend: str) -> bool:
    """cuDNN autotuning: as requested, else on for CUDA (as serious training scripts
    run) and off elsewhere (it only means something to cuDNN)."""
    return backend == "cuda" if requested is None else bool(requested)


def grad_scaler_record(scale_before: float, scale_after: float, steps: int, profiled: bool) -> dict:
    """What GradScaler did over the measured steps.

    GradScaler halves its scale (backoff) on every step whose gradients hold
    inf/NaN, and skips that optimizer step; it only grows the scale after
    ``growth_interval`` (2000) clean steps. So over one profiled step a smaller
    scale means exactly that the optimizer step was skipped: the capture then
    lacks the optimizer's kernels.
    """
    decreased = scale_after < scale_before
    return {
        "scale_before": scale_before,
        "scale_after": scale_after,
        "steps": steps,
        "scale_decreased": decreased,
        "profiled_step_skipped": decreased if profiled and steps == 1 else None,
    }


def with_scale_probe(
    scaler: Any,
    before: Callable[[], None] | None,
    after: Callable[[], None] | None,
    probe: dict[str, float],
) -> tuple[Callable[[], None], Callable[[], None]]:
    """Wrap the timed region's hooks to read the GradScaler's scale outside it (a host sync)."""

    def start() -> None:
        probe["before"] = float(scaler.get_scale())
        if before is not None:
            before()

    def stop() -> None:
        if after is not None:
            after()
        probe["after"] = float(scaler.get_scale())

    return start, stop


def with_sampler(
    sampler: NvmlSampler,
    before: Callable[[], None] | None,
    after: Callable[[], None] | None,
    record: dict[str, Any],
) -> tuple[Callable[[], None], Callable[[], None]]:
    """Wrap the timed region's hooks so that NVML samples exactly the timed steps;
    the summary lands in ``record["gpu_telemetry"]``."""

    def start() -> None:
        if before is not None:
            before()
        sampler.start()

    def stop() -> None:
        record["gpu_telemetry"] = sampler.stop()
        if after is not None:
            after()

    return start, stop


def validate(cfg: TrainConfig, environ: dict[str, str] | None = None) -> Resolved:
    """Check every argument, resolve the backend, set the thread count.

    Raises InputError (the CLI exits 2 and writes nothing) naming the flag and value.
    """
    import torch

    environ = dict(os.environ) if environ is None else environ
    for flag, value, minimum in (
        ("--batch-size", cfg.batch_size, 1),
        ("--image-size", cfg.image_size, 1),
        ("--warmup-iters", cfg.warmup_iters, 0),
        ("--iters", cfg.iters, 1),
        ("--workers", cfg.workers, 0),
        ("--num-classes", cfg.num_classes, 1),
        ("--nproc", cfg.nproc, 1),
    ):
        if value < minimum:
            raise InputError(f"{flag} {value}: must be >= {minimum}")
    if cfg.profile_step and cfg.warmup_iters < PROFILE_MIN_WARMUP:
        raise InputError(
            f"--warmup-iters {cfg.warmup_iters} with --profile-step: the profiled step must "
            f"not be the first ones (cuDNN autotuning, allocator growth); use "
            f"--warmup-iters >= {PROFILE_MIN_WARMUP}"
        )
    if cfg.compile is True:
        cfg.compile = "default"
    if cfg.compile and cfg.compile not in COMPILE_MODES:
        raise InputError(
            f"--compile {cfg.compile!r}: unknown mode (choose from {', '.join(COMPILE_MODES)})"
        )
    if cfg.compile and cfg.warmup_iters < 1:
        raise InputError(
            "--warmup-iters 0 with --compile: compilation would land in the timed steps; "
            "use --warmup-iters >= 1"
        )
    if cfg.expect_threads is not None and cfg.expect_threads < 1:
        raise InputError(f"--expect-threads {cfg.expect_threads}: must be >= 1")
    if cfg.model_factory:
        from dnnroofline.models import load_factory

        load_factory(cfg.model_factory)
    else:
        check_arch(cfg.arch)
    if cfg.precision not in PRECISIONS:
        raise InputError(
            f"--precision {cfg.precision!r}: unknown precision "
            f"(choose from {', '.join(PRECISIONS)})"
        )
    if cfg.rank is not None and not (0 <= cfg.rank < cfg.nproc and cfg.dist_store):
        raise InputError(f"--rank {cfg.rank}: needs --nproc > rank and --dist-store")
    backend = resolve_backend(cfg.backend)
    settings = precision_settings(cfg.precision, backend)
    if cfg.nproc > 1 and backend == "mps":
        raise InputError(
            f"--nproc {cfg.nproc} on backend 'mps': data-parallel training needs one device "
            "per process, and an Apple GPU is one device"
        )
    if cfg.nproc > 1 and backend == "cuda" and torch.cuda.device_count() < cfg.nproc:
        raise InputError(
            f"--nproc {cfg.nproc} on backend 'cuda': {torch.cuda.device_count()} GPU(s) "
            "visible, and each process needs its own"
        )
    if backend == "cuda" and cfg.precision in ("tf32", "bf16"):
        major, minor = torch.cuda.get_device_capability()
        if major < 8:
            raise InputError(
                f"--precision {cfg.precision!r} is not supported on backend 'cuda' with "
                f"{torch.cuda.get_device_name()} (compute capability {major}.{minor}): "
                f"{cfg.precision} needs native support (compute capability >= 8.0)"
            )
    if backend == "cpu" and cfg.precision == "bf16":
        from dnnroofline.ceilings import cpu_bf16_reason
        from dnnroofline.study import detect_cpu_flags

        flags = detect_cpu_flags()
        why = cpu_bf16_reason(flags) if flags is not None else None
        if why:
            raise InputError(f"--precision 'bf16' is not supported on backend 'cpu' here: {why}")
    if cfg.data is not None:
        root = Path(cfg.data)
        if not root.is_dir():
            raise InputError(f"--data {cfg.data!r}: no such directory")
        if not (root / "train").is_dir():
            raise InputError(f"--data {cfg.data!r}: has no train/ folder (an ImageFolder root)")

    omp_value = environ.get("OMP_NUM_THREADS")
    omp = parse_omp_threads(omp_value)
    if omp is not None and torch.get_num_threads() != omp:
        torch.set_num_threads(omp)
    threads = torch.get_num_threads()
    if cfg.nproc > 1 and cfg.rank is None:
        # the launcher: its threads are split over the ranks (nproc x threads per rank)
        from dnnroofline.ddp import rank_threads

        threads = rank_threads(threads, cfg.nproc, cfg.expect_threads, omp_value)
    else:
        check_threads(cfg.expect_threads, threads, omp_value)
    if backend == "cuda" and cfg.rank is not None:
        torch.cuda.set_device(cfg.rank)  # one GPU per rank
    device = f"cuda:{torch.cuda.current_device()}" if backend == "cuda" else backend
    if cfg.env_info is not None:
        check_machine(cfg, backend)
    return Resolved(
        cfg=cfg,
        backend=backend,
        device=device,
        threads=threads,
        settings=settings,
        omp_num_threads=omp_value,
    )


def apply_precision(settings: PrecisionSettings) -> dict[str, Any]:
    """Set the global TF32 / matmul-precision flags; return them as read back from torch."""
    import torch

    torch.set_float32_matmul_precision(settings.matmul_precision)
    torch.backends.cuda.matmul.allow_tf32 = settings.allow_tf32
    torch.backends.cudnn.allow_tf32 = settings.allow_tf32
    return {
        "autocast_dtype": settings.autocast_dtype,
        "grad_scaler": settings.grad_scaler,
        "cuda_matmul_allow_tf32": bool(torch.backends.cuda.matmul.allow_tf32),
        "cudnn_allow_tf32": bool(torch.backends.cudnn.allow_tf32),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
    }


def autocast_factory(settings: PrecisionSettings) -> Callable[[], Any] | None:
    """A zero-argument factory of the autocast context, or None for plain fp32/tf32."""
    import torch

    if settings.autocast_dtype is None:
        return None
    dtype = getattr(torch, settings.autocast_dtype)
    return functools.partial(torch.autocast, device_type=settings.backend, dtype=dtype)


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
    numerics = apply_precision(settings)
    torch.backends.cudnn.benchmark = cudnn_benchmark_setting(cfg.cudnn_benchmark, resolved.backend)
    numerics["cudnn_benchmark"] = bool(torch.backends.cudnn.benchmark)
    memory_format = torch.channels_last if cfg.channels_last else torch.contiguous_format

    if cfg.model_factory:
        from dnnroofline.models import build_custom

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
    if cfg.compile:
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
#: ``setup.step``): how the trace job (dnnroofline.traces) profiles the very same loop.
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
        record["traceback"] = traceback.format_exc(limit=8)[-_MAX_MESSAGE:]
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
    record["wall_s"] = time.monotonic() - t0
    record["user_s"] = ru1.ru_utime - ru0.ru_utime
    record["sys_s"] = ru1.ru_stime - ru0.ru_stime
    record["max_rss_bytes"] = _rss_bytes(ru1)
    record["end_time"] = time.time()
    return record


# --------------------------------------------------------------------------- CLI


def step_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The flags that define the training step and its machine (all but the timed part):
    shared by run_train.py and the trace job (dnnroofline.traces), so both run one step."""
    p.add_argument("--arch", required=True, help="torchvision classification model name")
    p.add_argument("--batch-size", type=int, required=True)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--warmup-iters", type=int, default=5)
    p.add_argument("--precision", default="fp32", help=f"one of {', '.join(PRECISIONS)}")
    p.add_argument("--backend", default="auto", help="auto | cpu | cuda | mps")
    data = p.add_mutually_exclusive_group()
    data.add_argument("--synthetic", action="store_true", help="one random batch on the device")
    data.add_argument("--data", metavar="DIR", help="ImageFolder root with a train/ folder")
    p.add_argument("--channels-last", action="store_true")
    p.add_argument(
        "--compile",
        nargs="?",
        const="default",
        default=False,
        metavar="MODE",
        help=f"torch.compile, compiled in warm-up; MODE: {', '.join(COMPILE_MODES)}",
    )
    p.add_argument(
        "--cudnn-benchmark",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="cuDNN autotuning (default: on for CUDA, off elsewhere)",
    )
    p.add_argument(
        "--model-factory",
        metavar="MODULE:CALLABLE",
        help="build the model with this factory; --arch is then its name",
    )
    p.add_argument("--model-kwargs", default="{}", help="JSON object passed to the factory")
    p.add_argument("--workers", type=int, default=0, help="DataLoader workers (--data only)")
    p.add_argument("--pin-memory", action="store_true", help="pinned host batches (CUDA only)")
    p.add_argument("--num-classes", type=int, default=1000)
    p.add_argument("--env", default=None, help="env name recorded in the JSON")
    p.add_argument("--run-id", default=None, help="run id recorded in the JSON")
    p.add_argument(
        "--expect-threads",
        type=int,
        default=None,
        help="refuse unless the job got exactly this many CPU threads",
    )
    p.add_argument(
        "--env-info",
        metavar="JSON",
        default=None,
        help="the env's env_info.json: refuse (exit 2) unless this machine matches it "
        "(device, CPU model, GPU)",
    )
    p.add_argument(
        "--nproc",
        type=int,
        default=1,
        help="data-parallel processes (DistributedDataParallel: gloo on CPU, NCCL on CUDA, "
        "one GPU each); the batch size is per process, OMP_NUM_THREADS is split over them",
    )
    return p


def arg_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="run_train.py",
        description="One timed, uninstrumented training run of a torchvision model "
        "(warm-up, then per-step times); writes the run JSON atomically at the end.",
    )
    step_arguments(p)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument(
        "--profile-step",
        action="store_true",
        help="after warm-up, one step between cudaProfilerStart/Stop (for ncu)",
    )
    # set by the data-parallel launcher on each rank's command line (dnnroofline.ddp)
    p.add_argument("--rank", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--dist-store", default=None, help=argparse.SUPPRESS)
    p.add_argument("--out", required=True, help="run JSON to write")
    return p


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    return TrainConfig(
        arch=args.arch,
        batch_size=args.batch_size,
        image_size=args.image_size,
        warmup_iters=args.warmup_iters,
        iters=args.iters,
        precision=args.precision,
        backend=args.backend,
        data=args.data,
        channels_last=args.channels_last,
        compile=args.compile,
        cudnn_benchmark=args.cudnn_benchmark,
        model_factory=args.model_factory,
        model_kwargs=_model_kwargs(args.model_kwargs),
        workers=args.workers,
        pin_memory=args.pin_memory,
        num_classes=args.num_classes,
        env=args.env,
        run_id=args.run_id,
        expect_threads=args.expect_threads,
        profile_step=args.profile_step,
        env_info=args.env_info,
        nproc=args.nproc,
        rank=getattr(args, "rank", None),  # run_train.py's own (a rank's command line)
        dist_store=getattr(args, "dist_store", None),
    )


def _model_kwargs(text: str) -> dict[str, Any]:
    import json

    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SystemExit(f"run_train.py: error: --model-kwargs {text!r}: not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise SystemExit(f"run_train.py: error: --model-kwargs {text!r}: must be a JSON object")
    return value


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
    "main",
    "precision_settings",
    "resolve_backend",
    "run",
    "suggest_archs",
    "timed_loop",
    "validate",
]
