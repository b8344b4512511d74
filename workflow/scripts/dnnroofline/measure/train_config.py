"""The training driver's configuration: backends, precisions and their torch settings,
the checks a run passes before it starts (machine, threads, model name), and the
resolved configuration the driver runs (:class:`Resolved`).

Pure where it can be: torch is imported lazily, so the workflow's checks stay fast.
"""

from __future__ import annotations

import argparse
import functools
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dnnroofline.errors import InputError
from dnnroofline.study import environment, precisions
from dnnroofline.study.config import COMPILE_MODES, warmup_shortfall
from dnnroofline.study.defaults import default
from dnnroofline.study.models import check_arch, model_kwargs_arg, refuse_kwargs_without_factory

SCHEMA_VERSION = 1
BACKENDS = ("cpu", "cuda", "mps")
# Which backend trains in which precision, and why not: dnnroofline.study.precisions.
# The optimizer is fixed: the complexity stage counts 6 FLOPs and one fp32 momentum
# buffer per parameter for exactly this SGD.
OPTIMIZER = {"name": "SGD", "lr": 0.01, "momentum": 0.9, "weight_decay": 1e-4}
# Substrings of allocator failures, CPU, CUDA and MPS.
_OOM_MARKERS = (
    "out of memory",
    "can't allocate memory",
    "cannot allocate memory",
    "cublas_status_alloc_failed",
    "cudnn_status_alloc_failed",
)
MAX_MESSAGE = 4000


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
    precisions.require_known(precision, "--precision")
    if backend not in BACKENDS:
        raise InputError(
            f"--backend {backend!r}: unknown backend (choose from auto, cpu, cuda, mps)"
        )
    reason = precisions.unsupported_reason(backend, precision)
    if reason:
        raise InputError(
            f"--precision {precision!r} is not supported on backend {backend!r}: {reason} "
            f"(supported on {backend}: {', '.join(precisions.supported(backend))})"
        )


def precision_settings(precision: str, backend: str) -> PrecisionSettings:
    """Map (precision, resolved backend) to autocast dtype, GradScaler and TF32 flags.

    fp32 turns TF32 off and asks for the highest fp32 matmul precision; tf32 turns it
    on; amp is fp16 autocast with a GradScaler; bf16 is bf16 autocast without one.
    """
    check_precision(precision, backend)
    tf32 = precision == "tf32"
    return PrecisionSettings(
        precision=precision,
        backend=backend,
        autocast_dtype=precisions.autocast_dtype(precision),
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

    Availability is probed lazily, so ``--backend cpu`` never imports torch.
    """

    def cuda() -> bool:
        import torch

        return torch.cuda.is_available() if cuda_available is None else cuda_available

    def mps() -> bool:
        if mps_available is not None:
            return mps_available
        import torch

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
    if len(text) > MAX_MESSAGE:
        text = text[:MAX_MESSAGE] + " ...[truncated]"
    message = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return ("oom" if is_oom(exc) else "error"), message


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
    import torch

    from dnnroofline.measure.envinfo import check_same_machine, machine_here
    from dnnroofline.measure.machine_check import read_env_info

    recorded = read_env_info(cfg.env_info)
    gpu = torch.cuda.get_device_name(torch.cuda.current_device()) if backend == "cuda" else None
    env = cfg.env or str(recorded.get("env") or "?")
    check_same_machine(env, recorded, machine_here(backend, gpu), cfg.env_info)


# --------------------------------------------------------------------------- config


def _schema_default(key: str) -> Any:
    """A field's default: the config key's in config/schema.yaml (the one place it is stated)."""
    return field(default_factory=functools.partial(default, key))


@dataclass
class TrainConfig:
    """One timed run, as given on the command line (backend may be ``auto``). What the
    command line leaves out is the study config's default, so a run by hand runs as a
    study's run does."""

    arch: str
    batch_size: int
    image_size: int = _schema_default("study.image_size")
    warmup_iters: int = _schema_default("study.warmup_iters")
    iters: int = _schema_default("study.iters")
    precision: str = "fp32"
    backend: str = "auto"
    data: str | None = None  # None: synthetic
    channels_last: bool = _schema_default("study.channels_last")
    # False (eager) or a torch.compile mode (COMPILE_MODES)
    compile: bool | str = _schema_default("envs.*.compile")
    cudnn_benchmark: bool | None = None  # None: on for CUDA, off elsewhere
    model_factory: str | None = None  # "module:callable": the user's model, named --arch
    model_kwargs: dict[str, Any] = field(default_factory=dict)
    workers: int = _schema_default("study.workers")
    pin_memory: bool = False
    num_classes: int = _schema_default("study.num_classes")
    env: str | None = None
    run_id: str | None = None
    expect_threads: int | None = None
    profile_step: bool = False
    env_info: str | None = None  # the env's env_info.json: refuse another machine
    # data-parallel processes (DistributedDataParallel when > 1)
    nproc: int = _schema_default("envs.*.nproc")
    rank: int | None = None  # set in a rank process of a data-parallel run (measure.ddp)
    dist_store: str | None = None  # that run's rendezvous file
    # --environ NAME=VALUE: the env's variables, which the entry script put in effect
    environ: tuple[str, ...] = ()


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


def _check_arguments(cfg: TrainConfig) -> None:
    """The checks that need no device: counts, warm-up, compile mode, the model.

    ``--compile`` given alone becomes ``"default"``.
    """
    for flag, value, minimum in (
        ("--batch-size", cfg.batch_size, 1),
        ("--image-size", cfg.image_size, 1),
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
    short = warmup_shortfall(cfg.warmup_iters, cfg.compile or None)
    if short:
        raise InputError(f"--warmup-iters {cfg.warmup_iters}: {short}")
    if cfg.expect_threads is not None and cfg.expect_threads < 1:
        raise InputError(f"--expect-threads {cfg.expect_threads}: must be >= 1")
    if cfg.model_factory:
        from dnnroofline.study.models import load_factory

        load_factory(cfg.model_factory)
    else:
        check_arch(cfg.arch)
        refuse_kwargs_without_factory(cfg.arch, cfg.model_factory, cfg.model_kwargs)


def validate(cfg: TrainConfig, environ: dict[str, str] | None = None) -> Resolved:
    """Check every argument, resolve the backend, set the thread count.

    Raises InputError (the CLI exits 2 and writes nothing) naming the flag and value.
    """
    environ = dict(os.environ) if environ is None else environ
    _check_arguments(cfg)
    environment.require_in_effect(environment.parse(cfg.environ), environ)
    precisions.require_known(cfg.precision, "--precision")
    if cfg.rank is not None and not (0 <= cfg.rank < cfg.nproc and cfg.dist_store):
        raise InputError(f"--rank {cfg.rank}: needs --nproc > rank and --dist-store")
    backend = resolve_backend(cfg.backend)
    settings = precision_settings(cfg.precision, backend)
    if cfg.nproc > 1 and backend == "mps":
        raise InputError(
            f"--nproc {cfg.nproc} on backend 'mps': data-parallel training needs one device "
            "per process, and an Apple GPU is one device"
        )
    import torch  # seconds: after the checks that need no device, which fail fast

    if cfg.nproc > 1 and backend == "cuda" and torch.cuda.device_count() < cfg.nproc:
        raise InputError(
            f"--nproc {cfg.nproc} on backend 'cuda': {torch.cuda.device_count()} GPU(s) "
            "visible, and each process needs its own"
        )
    if backend == "cuda":
        cc = torch.cuda.get_device_capability()
        why = precisions.unsupported_reason("cuda", cfg.precision, cuda_cc=cc)
        if why:
            raise InputError(
                f"--precision {cfg.precision!r} is not supported on backend 'cuda' with "
                f"{torch.cuda.get_device_name()}: {why}"
            )
    if backend == "cpu":
        from dnnroofline.study.config import detect_cpu_flags

        flags = detect_cpu_flags()
        why = precisions.unsupported_reason("cpu", cfg.precision, cpu_flags=flags)
        if why:
            raise InputError(
                f"--precision {cfg.precision!r} is not supported on backend 'cpu' here: {why}"
            )
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
        from dnnroofline.measure.ddp import rank_threads

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


def private_compile_cache() -> str:
    """Point torch.compile's on-disk caches (inductor, AOTAutograd, Triton) at a new empty
    folder, removed at exit: every compiled run then pays the same cold compile, whichever
    job (a trace, an earlier repeat) compiled the model before it. Returns the folder."""
    import atexit
    import shutil
    import tempfile

    folder = tempfile.mkdtemp(prefix="dnnroofline-compile-cache-")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = folder
    os.environ["TRITON_CACHE_DIR"] = os.path.join(folder, "triton")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


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


# --------------------------------------------------------------------------- flags


def step_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The flags that define the training step and its machine (all but the timed part):
    shared by run_train.py and the trace job (dnnroofline.measure.traces), so both run one step."""
    p.add_argument("--arch", required=True, help="torchvision classification model name")
    p.add_argument("--batch-size", type=int, required=True)
    p.add_argument("--image-size", type=int, default=default("study.image_size"))
    p.add_argument("--warmup-iters", type=int, default=default("study.warmup_iters"))
    p.add_argument("--precision", default="fp32", help=f"one of {', '.join(precisions.PRECISIONS)}")
    p.add_argument("--backend", default="auto", help="auto | cpu | cuda | mps")
    data = p.add_mutually_exclusive_group()
    data.add_argument("--synthetic", action="store_true", help="one random batch on the device")
    data.add_argument("--data", metavar="DIR", help="ImageFolder root with a train/ folder")
    p.add_argument("--channels-last", action="store_true")
    p.add_argument(
        "--compile",
        nargs="?",
        const="default",
        default=default("envs.*.compile"),
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
    p.add_argument(
        "--model-kwargs",
        type=model_kwargs_arg,
        default="{}",
        help="JSON object passed to the factory",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=default("study.workers"),
        help="DataLoader workers (--data only)",
    )
    p.add_argument("--pin-memory", action="store_true", help="pinned host batches (CUDA only)")
    p.add_argument("--num-classes", type=int, default=default("study.num_classes"))
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
        default=default("envs.*.nproc"),
        help="data-parallel processes (DistributedDataParallel: gloo on CPU, NCCL on CUDA, "
        "one GPU each); the batch size is per process, OMP_NUM_THREADS is split over them",
    )
    environment.add_argument(p)
    return p


def arg_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="run_train.py",
        description="One timed, uninstrumented training run of a torchvision model "
        "(warm-up, then per-step times); writes the run JSON atomically at the end.",
    )
    step_arguments(p)
    p.add_argument("--iters", type=int, default=default("study.iters"))
    p.add_argument(
        "--profile-step",
        action="store_true",
        help="after warm-up, one step between cudaProfilerStart/Stop (for ncu)",
    )
    # set by the data-parallel launcher on each rank's command line (dnnroofline.measure.ddp)
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
        model_kwargs=args.model_kwargs,
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
        environ=tuple(args.environ),
    )
